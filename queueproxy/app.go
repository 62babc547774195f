package queueproxy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/swell-run/swell/pkg/autoscaling"
	"github.com/swell-run/swell/pkg/gauge"
	"github.com/swell-run/swell/pkg/series"
	"github.com/swell-run/swell/pkg/stats"
	"github.com/swell-run/swell/pkg/usage"
)

// The ways the queue-proxy finds its app's processes (Config.AppUsage).
const (
	// AppUsageOff measures no process: the service scales on neither
	// cpu nor memory.
	AppUsageOff = ""
	// AppUsagePod measures every process of the pod but its pause process
	// and the queue-proxy: the pod shares one process namespace.
	AppUsagePod = "pod"
	// AppUsageListener measures the process tree that listens on
	// USER_PORT: the app runs as the queue-proxy's user (swell local).
	AppUsageListener = "listener"
)

// MeasuresApp says whether spec scales on the app's CPU or memory, which
// the queue-proxy measures from the app's processes.
func MeasuresApp(spec *autoscaling.Spec) bool {
	return spec.VotesWith(autoscaling.MetricCPU) || spec.VotesWith(autoscaling.MetricMemory)
}

// MeterEnv is the environment, as NAME=value, that has a queue-proxy
// measure what spec scales on beyond requests: the app's processes, found
// as usage says (AppUsagePod or AppUsageListener), for cpu and memory; the
// gauge, where the spec reads it. Injection and swell local both write it.
func MeterEnv(spec *autoscaling.Spec, usage string) []string {
	var env []string
	if MeasuresApp(spec) {
		env = append(env, "APP_USAGE="+usage)
	}
	if spec.VotesWith(autoscaling.MetricGauge) {
		env = append(env, "GAUGE="+spec.Gauge.Selector)
		if spec.Gauge.Port > 0 {
			env = append(env, "GAUGE_PORT="+strconv.Itoa(spec.Gauge.Port))
		}
		env = append(env, "GAUGE_PATH="+spec.Gauge.Path)
	}
	return env
}

// usageSource is what the meter reads the app's CPU and memory from
// (*usage.Sampler).
type usageSource interface {
	Sample(now time.Time) (usage.Usage, error)
}

// gaugeSource is what the meter reads the app's gauge from
// (*gauge.Scraper).
type gaugeSource interface {
	Scrape(ctx context.Context) (float64, error)
}

// appMeter measures the app itself once a period, beside the requests:
// its processes' CPU and memory, and the gauge it exposes. It runs on a
// goroutine of its own, since reading the gauge may take up to its
// timeout, and the reporter takes the latest measurement into each
// report. A failure is logged when it starts and when it ends, counted in
// the metrics, and a failed gauge read goes to the autoscaler as its
// problem (stats.GaugeProblem), which tells the service's owners.
type appMeter struct {
	usage    usageSource // nil: not measured
	gauge    gaugeSource // nil: no gauge
	gaugeKey uint64
	selector string
	clock    clock.PassiveClock
	log      *zap.Logger
	metrics  *metrics
	// appReady, when set, says the app has answered its probe: the gauge
	// is not read before, as an app that is still starting has no
	// endpoint yet, which is no problem to tell.
	appReady func() bool

	latest atomic.Pointer[stats.AppUsage]

	// What was last logged, so that a lasting failure is logged once; only
	// the meter's goroutine touches them.
	usageFailing bool
	problem      stats.GaugeProblem
}

// newAppMeter builds the meter cfg asks for, or nil when it asks for none.
func newAppMeter(cfg *Config, clk clock.PassiveClock, log *zap.Logger, m *metrics) (*appMeter, error) {
	if cfg.AppUsage == AppUsageOff && cfg.GaugeSelector == "" {
		return nil, nil
	}
	a := &appMeter{clock: clk, log: log, metrics: m}
	switch cfg.AppUsage {
	case AppUsagePod, AppUsageListener:
		scope := usage.Pod(os.Getpid())
		if cfg.AppUsage == AppUsageListener {
			scope = usage.Listener(cfg.UserPort)
		}
		s, err := usage.New(usage.Config{Scope: scope})
		if err != nil {
			return nil, fmt.Errorf("APP_USAGE %s: %w", cfg.AppUsage, err)
		}
		a.usage = s
	}
	if cfg.GaugeSelector != "" {
		sel, err := series.ParseSelector(cfg.GaugeSelector)
		if err != nil {
			return nil, fmt.Errorf("GAUGE: %w", err)
		}
		port := cfg.GaugePort
		if port == 0 {
			port = cfg.UserPort
		}
		g, err := gauge.New(gauge.Config{URL: "http://127.0.0.1:" + strconv.Itoa(port) + cfg.GaugePath, Selector: sel})
		if err != nil {
			return nil, fmt.Errorf("GAUGE: %w", err)
		}
		// The key is of the selector as the autoscaler writes it.
		a.gauge, a.selector, a.gaugeKey = g, sel.String(), stats.GaugeKey(sel.String())
	}
	return a, nil
}

// current is the latest measurement; zero before the first.
func (a *appMeter) current() stats.AppUsage {
	if a == nil {
		return stats.AppUsage{}
	}
	if u := a.latest.Load(); u != nil {
		return *u
	}
	return stats.AppUsage{}
}

// run measures on every tick of ticker until ctx ends.
func (a *appMeter) run(ctx context.Context, ticker clock.Ticker) {
	onTicks(ctx, ticker, func() { a.measure(ctx) })
}

// measure takes one measurement and makes it the latest.
func (a *appMeter) measure(ctx context.Context) {
	var u stats.AppUsage
	if a.usage != nil {
		got, err := a.usage.Sample(a.clock.Now())
		a.usageResult(err)
		if err == nil {
			u.CPU, u.HasCPU = got.CPU, true
			u.Memory, u.HasMemory = got.Memory, true
			a.metrics.appCPU.Set(got.CPU)
			a.metrics.appMemory.Set(float64(got.Memory))
		}
	}
	if a.gauge != nil && (a.appReady == nil || a.appReady()) {
		v, err := a.gauge.Scrape(ctx)
		if ctx.Err() != nil {
			return // stopping: no measurement, and nothing to say
		}
		p := problemOf(err)
		a.gaugeResult(p, v, err)
		if p == stats.GaugeOK {
			u.Gauge, u.GaugeKey, u.HasGauge = v, a.gaugeKey, true
		} else {
			u.GaugeProblem = p
		}
	}
	a.latest.Store(&u)
}

// usageResult logs a failure to measure the app's processes when it starts
// and when it ends. Finding none is not a failure while the app starts.
func (a *appMeter) usageResult(err error) {
	switch {
	case err == nil || errors.Is(err, usage.ErrNoProcess):
		if a.usageFailing {
			a.log.Info("measuring the app's CPU and memory again")
		}
		a.usageFailing = false
	case !a.usageFailing:
		a.usageFailing = true
		a.log.Warn("cannot measure the app's CPU and memory; the service scales on its other metrics meanwhile", zap.Error(err))
	}
}

// gaugeResult counts and logs a gauge read, logging a problem when it
// starts or changes and when it ends.
func (a *appMeter) gaugeResult(p stats.GaugeProblem, v float64, err error) {
	if p != stats.GaugeOK {
		a.metrics.gaugeFailures[p].Inc()
	} else {
		a.metrics.appGauge.Set(v)
	}
	if p == a.problem {
		return
	}
	if p == stats.GaugeOK {
		a.log.Info("reading the app gauge again", zap.String("gauge", a.selector), zap.Stringer("was", a.problem))
	} else {
		a.log.Warn("cannot read the app gauge; the service scales on its other metrics meanwhile",
			zap.String("gauge", a.selector), zap.Stringer("problem", p), zap.Error(err))
	}
	a.problem = p
}

// problemOf classifies a gauge read's error.
func problemOf(err error) stats.GaugeProblem {
	switch {
	case err == nil:
		return stats.GaugeOK
	case errors.Is(err, gauge.ErrMissing):
		return stats.GaugeMissing
	case errors.Is(err, gauge.ErrNotNumber):
		return stats.GaugeNotNumber
	case errors.Is(err, gauge.ErrType):
		return stats.GaugeType
	case errors.Is(err, gauge.ErrNotFinite):
		return stats.GaugeNotFinite
	case errors.Is(err, gauge.ErrNegative):
		return stats.GaugeNegative
	case errors.Is(err, gauge.ErrTooLarge):
		return stats.GaugeTooLarge
	case errors.Is(err, gauge.ErrStatus):
		return stats.GaugeStatus
	case errors.Is(err, context.DeadlineExceeded):
		return stats.GaugeTimeout
	}
	return stats.GaugeUnreachable
}
