package queueproxy

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/swell-run/swell/pkg/envflag"
	"github.com/swell-run/swell/pkg/logging"
	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/series"
	"github.com/swell-run/swell/pkg/service"
)

// AutoQueueDepth as Config.QueueDepth means ten times ContainerConcurrency.
const AutoQueueDepth = -1

// Config is everything the queue-proxy can be told. The zero value is not
// usable; start from DefaultConfig or ParseConfig.
type Config struct {
	// ListenAddress is the IP the three ports bind; empty binds every
	// interface (a pod's). `swell local` binds loopback.
	ListenAddress string
	// ServingPort receives the traffic for the app.
	ServingPort int
	// AdminPort serves readiness and drain (network.ReadyPath, DrainPath).
	AdminPort int
	// MetricsPort serves Prometheus metrics and the autoscaler's stats.
	MetricsPort int
	// UserPort is where the app listens on 127.0.0.1.
	UserPort int

	// ContainerConcurrency is how many requests may be at the app at once;
	// 0 is unlimited (no admission control at all).
	ContainerConcurrency int
	// QueueDepth is how many more requests may wait for the app; one more
	// gets 503. AutoQueueDepth means 10×ContainerConcurrency.
	QueueDepth int

	// RequestTimeout bounds a whole request, queueing included (0: none).
	RequestTimeout time.Duration
	// ResponseStartTimeout bounds the time until the app sends response
	// headers, queueing included (0: none).
	ResponseStartTimeout time.Duration
	// StreamIdleTimeout bounds the time without a byte of response body
	// written (0: none).
	StreamIdleTimeout time.Duration

	// ProbePath, if set, makes the prober GET this path on the app instead
	// of opening a TCP connection.
	ProbePath string
	// ProbePeriod is the time between probes once the app is ready.
	ProbePeriod time.Duration
	// ProbeTimeout bounds one probe.
	ProbeTimeout time.Duration
	// ProbeFailureThreshold is how many probes in a row must fail before a
	// ready app is marked not ready.
	ProbeFailureThreshold int

	// DrainQuietPeriod is how long no request may be in flight, once a
	// drain started, before the queue-proxy exits.
	DrainQuietPeriod time.Duration
	// DrainTimeout bounds the quiet-period wait; after it, requests still
	// in flight are given up to RequestTimeout to finish.
	DrainTimeout time.Duration

	// AppUsage says how to find the app's processes to measure their CPU
	// and memory: AppUsageOff, AppUsagePod or AppUsageListener.
	AppUsage string
	// GaugeSelector names the app gauge to read every period ("" for
	// none), from http://127.0.0.1:GaugePort/GaugePath; GaugePort 0 is
	// UserPort.
	GaugeSelector string
	GaugePort     int
	GaugePath     string

	// PushURL, when set, is the autoscaler's push endpoint
	// (network.PodPushPath, a ws:// URL): the queue-proxy pushes each
	// report there as well as serving it at network.StatsPath. Empty
	// pushes nothing, and the autoscaler scrapes.
	PushURL string
	// Service is the pod's service as "namespace/name" (service.Parse);
	// required with PushURL.
	Service string
	// PodIP is the pod's IP. The stats address a push claims is
	// PodIP:MetricsPort, 127.0.0.1:MetricsPort when it is empty.
	PodIP string

	// EnableProfiling serves Go's pprof handlers under /debug/pprof/ on the
	// metrics port.
	EnableProfiling bool

	// LogLevel and LogFormat configure pkg/logging.
	LogLevel  string
	LogFormat string

	// Logger and Clock are the caller's, not read from the environment:
	// New takes no logging (a nil Logger) and the real clock (a nil Clock)
	// by default.
	Logger *zap.Logger
	Clock  Clock
}

// DefaultConfig returns the configuration used when nothing is set.
func DefaultConfig() Config {
	return Config{
		ServingPort:           network.DefaultQueueServingPort,
		AdminPort:             network.DefaultQueueAdminPort,
		MetricsPort:           network.DefaultQueueMetricsPort,
		UserPort:              network.DefaultUserPort,
		QueueDepth:            AutoQueueDepth,
		RequestTimeout:        network.DefaultRequestTimeout,
		ProbePeriod:           time.Second,
		ProbeTimeout:          time.Second,
		ProbeFailureThreshold: 3,
		DrainQuietPeriod:      5 * time.Second,
		DrainTimeout:          30 * time.Second,
		GaugePath:             "/metrics",
		LogLevel:              "info",
		LogFormat:             logging.FormatAuto,
	}
}

// ParseConfig reads the configuration from command-line args (without the
// program name) and the environment, through lookupEnv (os.LookupEnv in a
// binary). The error says which setting was wrong and what is accepted; it
// is flag.ErrHelp for -h.
func ParseConfig(args []string, lookupEnv func(string) (string, bool)) (Config, error) {
	cfg := DefaultConfig()
	s, depth := bind(&cfg)
	if err := s.Parse(args, lookupEnv); err != nil {
		return cfg, err
	}
	if !depth.IsSet() {
		cfg.QueueDepth = AutoQueueDepth
	}
	return cfg, cfg.Validate()
}

// PrintUsage writes the table of settings: flag, environment variable,
// default and meaning.
func PrintUsage(w io.Writer) {
	cfg := DefaultConfig()
	s, _ := bind(&cfg)
	s.PrintUsage(w)
}

// bind declares every setting, stored into cfg. It returns the QUEUE_DEPTH
// setting too, whose default depends on whether it was given.
func bind(cfg *Config) (*envflag.Set, *envflag.Setting) {
	s := envflag.NewSet("queue-proxy")

	envflag.Var(s, &cfg.ListenAddress, "queue-listen-address", "QUEUE_LISTEN_ADDRESS", "",
		"IP address the serving, admin and metrics ports bind (empty: every interface)", ipAddress)
	envflag.Var(s, &cfg.ServingPort, "queue-serving-port", "QUEUE_SERVING_PORT", cfg.ServingPort,
		"port receiving the app's traffic", envflag.Port)
	envflag.Var(s, &cfg.AdminPort, "queue-admin-port", "QUEUE_ADMIN_PORT", cfg.AdminPort,
		"port serving "+network.ReadyPath+" and "+network.DrainPath, envflag.Port)
	envflag.Var(s, &cfg.MetricsPort, "queue-metrics-port", "QUEUE_METRICS_PORT", cfg.MetricsPort,
		"port serving "+network.MetricsPath+" and "+network.StatsPath, envflag.Port)
	envflag.Var(s, &cfg.UserPort, "user-port", "USER_PORT", cfg.UserPort,
		"port the app listens on at 127.0.0.1", envflag.Port)
	envflag.Var(s, &cfg.ContainerConcurrency, "container-concurrency", "CONTAINER_CONCURRENCY", 0,
		"most requests at the app at once; 0 = unlimited", envflag.IntAtLeast(0))
	depth := envflag.Var(s, &cfg.QueueDepth, "queue-depth", "QUEUE_DEPTH", 0,
		"most requests waiting for the app; needs CONTAINER_CONCURRENCY > 0", envflag.IntAtLeast(0)).
		DefaultText("10×CONTAINER_CONCURRENCY")
	envflag.Var(s, &cfg.RequestTimeout, "request-timeout", "REQUEST_TIMEOUT", cfg.RequestTimeout,
		"bound on a whole request, queueing included; 0 = none", envflag.DurationAtLeast(0))
	envflag.Var(s, &cfg.ResponseStartTimeout, "response-start-timeout", "RESPONSE_START_TIMEOUT", 0,
		"bound on the wait for response headers, queueing included; 0 = none", envflag.DurationAtLeast(0))
	envflag.Var(s, &cfg.StreamIdleTimeout, "stream-idle-timeout", "STREAM_IDLE_TIMEOUT", 0,
		"bound on the time without response bytes; 0 = none", envflag.DurationAtLeast(0))
	envflag.Var(s, &cfg.ProbePath, "user-probe-path", "USER_PROBE_PATH", "",
		`HTTP path probed on the app (GET, 2xx/3xx = ready); "" = TCP connect`, probePath)
	envflag.Var(s, &cfg.ProbePeriod, "user-probe-period", "USER_PROBE_PERIOD", cfg.ProbePeriod,
		"time between probes once the app is ready", envflag.DurationAtLeast(time.Millisecond))
	envflag.Var(s, &cfg.ProbeTimeout, "user-probe-timeout", "USER_PROBE_TIMEOUT", cfg.ProbeTimeout,
		"bound on one probe", envflag.DurationAtLeast(time.Millisecond))
	envflag.Var(s, &cfg.ProbeFailureThreshold, "user-probe-failure-threshold", "USER_PROBE_FAILURE_THRESHOLD", cfg.ProbeFailureThreshold,
		"failed probes in a row that make a ready app not ready", envflag.IntAtLeast(1))
	envflag.Var(s, &cfg.DrainQuietPeriod, "drain-quiet-period", "DRAIN_QUIET_PERIOD", cfg.DrainQuietPeriod,
		"time with nothing in flight after which a drain ends", envflag.DurationAtLeast(0))
	envflag.Var(s, &cfg.DrainTimeout, "drain-timeout", "DRAIN_TIMEOUT", cfg.DrainTimeout,
		"bound on the wait for the quiet period", envflag.DurationAtLeast(0))
	envflag.Var(s, &cfg.AppUsage, "app-usage", "APP_USAGE", "",
		`measure the app's CPU and memory: "" (no), pod (every process of the pod but pause and this one; needs shareProcessNamespace) or listener (the process tree listening on USER_PORT)`,
		appUsage)
	envflag.Var(s, &cfg.GaugeSelector, "gauge", "GAUGE", "",
		`the app gauge to read every second and report, as a selector such as num_requests_waiting{model="x"}; "" = none`, gaugeSelector)
	envflag.Var(s, &cfg.GaugePort, "gauge-port", "GAUGE_PORT", 0,
		"port of the app's metrics endpoint on 127.0.0.1; 0 = USER_PORT", gaugePort)
	envflag.Var(s, &cfg.GaugePath, "gauge-path", "GAUGE_PATH", cfg.GaugePath,
		"path of the app's metrics endpoint", gaugePath)
	envflag.Var(s, &cfg.PushURL, "autoscaler-push-url", "AUTOSCALER_PUSH_URL", "",
		`the autoscaler's endpoint to push the stats to, such as ws://autoscaler.swell-system.svc:8081/pods; "" = push nothing (the autoscaler scrapes `+network.StatsPath+`)`, pushURL)
	envflag.Var(s, &cfg.Service, "service", "SERVICE", "",
		"the pod's service as namespace/name; required with AUTOSCALER_PUSH_URL", serviceKey)
	envflag.Var(s, &cfg.PodIP, "pod-ip", "POD_IP", "",
		"the pod's IP: pushes name the pod's stats address as POD_IP:QUEUE_METRICS_PORT", podIP).
		DefaultText("127.0.0.1")
	envflag.Var(s, &cfg.EnableProfiling, "enable-profiling", "ENABLE_PROFILING", false,
		"serve Go's pprof profiles under /debug/pprof/ on the metrics port", envflag.Bool)
	envflag.Var(s, &cfg.LogLevel, "log-level", "LOG_LEVEL", cfg.LogLevel,
		"debug, info, warn or error", envflag.OneOf("debug", "info", "warn", "error"))
	envflag.Var(s, &cfg.LogFormat, "log-format", "LOG_FORMAT", cfg.LogFormat,
		"auto (console on a terminal, else json), json or console",
		envflag.OneOf(logging.FormatAuto, logging.FormatJSON, logging.FormatConsole))

	return s, depth
}

func appUsage(s string) (string, error) {
	switch s {
	case AppUsageOff, AppUsagePod, AppUsageListener:
		return s, nil
	}
	return "", errors.New(`must be "" (off), ` + AppUsagePod + " or " + AppUsageListener)
}

func gaugePort(s string) (int, error) {
	if strings.TrimSpace(s) == "0" {
		return 0, nil
	}
	n, err := envflag.Port(s)
	if err != nil {
		return 0, errors.New("must be a port number from 1 to 65535, or 0 for USER_PORT")
	}
	return n, nil
}

func gaugePath(s string) (string, error) {
	if s == "" || s[0] != '/' || strings.HasPrefix(s, "//") {
		return "", errors.New("must be an absolute path such as /metrics")
	}
	return s, nil
}

func gaugeSelector(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	sel, err := series.ParseSelector(s)
	if err != nil {
		return "", err
	}
	return sel.String(), nil
}

// pushURLAccepted says what AUTOSCALER_PUSH_URL accepts.
const pushURLAccepted = `must be a ws:// URL with a host and a path, such as ws://autoscaler.swell-system.svc:8081/pods, or "" to push nothing`

func pushURL(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	return s, CheckPushURL(s)
}

// CheckPushURL says whether s is an AUTOSCALER_PUSH_URL the queue-proxy
// takes: a plain websocket URL (the autoscaler's push port speaks no
// TLS) with a host and a path. The error says what is accepted.
func CheckPushURL(s string) error {
	if u, err := url.Parse(s); err != nil || u.Scheme != "ws" || u.Host == "" || u.Path == "" {
		return errors.New(pushURLAccepted)
	}
	return nil
}

func serviceKey(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	if _, err := service.Parse(s); err != nil {
		return "", err
	}
	return s, nil
}

// podIPAccepted says what POD_IP accepts.
const podIPAccepted = `must be an IP address such as 10.1.2.3 or fd00::3, or "" for 127.0.0.1`

func podIP(s string) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", nil
	}
	if _, err := netip.ParseAddr(s); err != nil {
		return "", errors.New(podIPAccepted)
	}
	return s, nil
}

func probePath(s string) (string, error) {
	if s != "" && s[0] != '/' {
		return "", errors.New(`must be an absolute path such as /healthz, or "" for a TCP probe`)
	}
	return s, nil
}

// Validate checks values alone and together, naming settings by their
// environment variables.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	ports := []struct {
		name string
		port int
	}{
		{"QUEUE_SERVING_PORT", c.ServingPort},
		{"QUEUE_ADMIN_PORT", c.AdminPort},
		{"QUEUE_METRICS_PORT", c.MetricsPort},
		{"USER_PORT", c.UserPort},
	}
	for i, p := range ports {
		if p.port < 1 || p.port > 65535 {
			bad("invalid %s %d: must be a port number from 1 to 65535", p.name, p.port)
		}
		for _, q := range ports[:i] {
			if p.port == q.port {
				bad("%s and %s are both %d: every port must be different", q.name, p.name, p.port)
			}
		}
	}

	if c.ContainerConcurrency < 0 {
		bad("invalid CONTAINER_CONCURRENCY %d: must be an integer ≥ 0", c.ContainerConcurrency)
	}
	switch {
	case c.QueueDepth < AutoQueueDepth:
		bad("invalid QUEUE_DEPTH %d: must be an integer ≥ 0", c.QueueDepth)
	case c.QueueDepth != AutoQueueDepth && c.ContainerConcurrency == 0:
		// Without a concurrency limit nothing ever queues, so a depth is a
		// sign the author expected a limit that is not there.
		bad("QUEUE_DEPTH %d has no effect with CONTAINER_CONCURRENCY 0 (unlimited): set CONTAINER_CONCURRENCY > 0 or unset QUEUE_DEPTH", c.QueueDepth)
	}

	for _, d := range []struct {
		name string
		d    time.Duration
	}{
		{"REQUEST_TIMEOUT", c.RequestTimeout},
		{"RESPONSE_START_TIMEOUT", c.ResponseStartTimeout},
		{"STREAM_IDLE_TIMEOUT", c.StreamIdleTimeout},
		{"DRAIN_QUIET_PERIOD", c.DrainQuietPeriod},
		{"DRAIN_TIMEOUT", c.DrainTimeout},
	} {
		if d.d < 0 {
			bad("invalid %s %s: must be a duration ≥ 0", d.name, d.d)
		}
	}
	if c.RequestTimeout > 0 {
		// A shorter bound inside a longer one is the point; a longer one
		// would never fire, which is surely not what was meant.
		if c.ResponseStartTimeout > c.RequestTimeout {
			bad("RESPONSE_START_TIMEOUT %s exceeds REQUEST_TIMEOUT %s: it could never fire; lower it or set it to 0", c.ResponseStartTimeout, c.RequestTimeout)
		}
		if c.StreamIdleTimeout > c.RequestTimeout {
			bad("STREAM_IDLE_TIMEOUT %s exceeds REQUEST_TIMEOUT %s: it could never fire; lower it or set it to 0", c.StreamIdleTimeout, c.RequestTimeout)
		}
	}
	if c.DrainQuietPeriod > c.DrainTimeout {
		bad("DRAIN_QUIET_PERIOD %s exceeds DRAIN_TIMEOUT %s: a drain would always run to the timeout; lower the quiet period or raise the timeout", c.DrainQuietPeriod, c.DrainTimeout)
	}

	switch c.AppUsage {
	case AppUsageOff, AppUsagePod, AppUsageListener:
	default:
		bad(`invalid APP_USAGE %q: must be "" (off), %s or %s`, c.AppUsage, AppUsagePod, AppUsageListener)
	}
	if c.GaugeSelector != "" {
		if _, err := series.ParseSelector(c.GaugeSelector); err != nil {
			bad("invalid GAUGE: %v", err)
		}
		if c.GaugePort < 0 || c.GaugePort > 65535 {
			bad("invalid GAUGE_PORT %d: must be a port number from 1 to 65535, or 0 for USER_PORT", c.GaugePort)
		}
		if c.GaugePath == "" || c.GaugePath[0] != '/' || strings.HasPrefix(c.GaugePath, "//") {
			bad("invalid GAUGE_PATH %q: must be an absolute path such as /metrics", c.GaugePath)
		}
	}
	if c.ProbePath != "" && c.ProbePath[0] != '/' {
		bad(`invalid USER_PROBE_PATH %q: must be an absolute path such as /healthz, or "" for a TCP probe`, c.ProbePath)
	}
	if c.ProbePeriod <= 0 {
		bad("invalid USER_PROBE_PERIOD %s: must be a duration > 0", c.ProbePeriod)
	}
	if c.ProbeTimeout <= 0 {
		bad("invalid USER_PROBE_TIMEOUT %s: must be a duration > 0", c.ProbeTimeout)
	}
	if c.ProbeFailureThreshold < 1 {
		bad("invalid USER_PROBE_FAILURE_THRESHOLD %d: must be an integer ≥ 1", c.ProbeFailureThreshold)
	}
	if c.PushURL != "" {
		if err := CheckPushURL(c.PushURL); err != nil {
			bad("invalid AUTOSCALER_PUSH_URL %q: %v", c.PushURL, err)
		}
	}
	if c.Service != "" {
		if _, err := service.Parse(c.Service); err != nil {
			bad("invalid SERVICE %q: %v", c.Service, err)
		}
	} else if c.PushURL != "" {
		// The autoscaler takes a push only as a pod of a named service.
		bad("AUTOSCALER_PUSH_URL is set but SERVICE is not: set SERVICE to the pod's service as namespace/name, or unset AUTOSCALER_PUSH_URL")
	}
	if c.PodIP != "" {
		if _, err := netip.ParseAddr(c.PodIP); err != nil {
			bad("invalid POD_IP %q: %s", c.PodIP, podIPAccepted)
		}
	}
	return errors.Join(errs...)
}

// pushTarget is the URL the pusher dials: PushURL with the pod's service
// and stats address added to its query. Call it only on a valid Config
// with a PushURL.
func (c Config) pushTarget() string {
	u, _ := url.Parse(c.PushURL)
	q := u.Query()
	q.Set(network.PodPushService, c.Service)
	q.Set(network.PodPushAddr, net.JoinHostPort(cmp.Or(c.PodIP, "127.0.0.1"), strconv.Itoa(c.MetricsPort)))
	u.RawQuery = q.Encode()
	return u.String()
}

// queueDepth resolves AutoQueueDepth.
func (c Config) queueDepth() int {
	if c.QueueDepth == AutoQueueDepth {
		return 10 * c.ContainerConcurrency
	}
	return c.QueueDepth
}

// ipAddress accepts an IPv4 or IPv6 address, or nothing.
func ipAddress(s string) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", nil
	}
	if _, err := netip.ParseAddr(s); err != nil {
		return "", errors.New("must be an IP address such as 127.0.0.1 or ::1, or empty for every interface")
	}
	return s, nil
}
