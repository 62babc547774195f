package main

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/swell-run/swell/pkg/network"
)

// The queue-proxy's cost of measuring its app once a second, as it does
// when the service scales on cpu, memory or an app gauge: two pods side
// by side, each the example app behind a queue-proxy, one queue-proxy
// told APP_USAGE=listener (the CPU and memory of the process tree that
// listens on USER_PORT, from /proc) and GAUGE=hello_jobs_waiting (read
// from the app's /metrics), the other told neither. Both are measured
// idle at the same time, then at the scenario's fixed rate in turns, so
// the difference is the meter's.

const (
	// meteredGauge is the demo app's gauge the metered queue-proxy reads.
	meteredGauge = "hello_jobs_waiting"
	// meterSettle is the wait after both pods are ready and before the
	// idle window: the metered queue-proxy's first measurements, which
	// search every process for the app's listening socket once, fall in
	// it.
	meterSettle = 3 * time.Second
	// meterIdle (meterIdleQuick) is the idle window.
	meterIdle, meterIdleQuick = 20 * time.Second, 5 * time.Second
)

// meterEnv is what the metered queue-proxy is told besides the pod's
// settings: what `swell local` sets for a service that scales on cpu and
// on the gauge.
var meterEnv = []string{"APP_USAGE=listener", "GAUGE=" + meteredGauge}

// idleCPU is the CPU time both pods' processes used over one idle window;
// index 0 is the pod without the meter, 1 the one with it.
type idleCPU struct {
	window  time.Duration
	qp, app [2]time.Duration
}

// meterCheck is what the metered queue-proxy reported of its app after
// the runs: proof that it measured all along.
type meterCheck struct {
	cpu, gauge    float64
	gaugeFailures float64
}

func appMetricsSection(e *env, bins map[string]string) (s section, err error) {
	swell := bins[swellPkg]
	var pods [2]*pod
	for i, pe := range []struct {
		prefix string
		env    []string
	}{{"plain-", nil}, {"metered-", meterEnv}} {
		p, err := startPodWith(e, bins, pe.prefix, pe.env)
		if err != nil {
			return section{}, err
		}
		defer p.stop()
		pods[i] = p
	}
	client := &http.Client{Timeout: time.Second}
	if _, err := meterReadings(client, pods[1]); err != nil {
		return section{}, err
	}

	time.Sleep(meterSettle)
	window := meterIdle
	if e.opts.quick {
		window = meterIdleQuick
	}
	logf("queue-proxy with and without the app meter: %s idle", window)
	idle, err := measureIdle(pods, window)
	if err != nil {
		return section{}, err
	}
	var idleMem, peakMem [2]memory
	for i, p := range pods {
		if idleMem[i], err = memoryOf(p.qp.pid()); err != nil {
			return section{}, err
		}
	}

	paths := [2]benchPath{{"without meter", pods[0].serveURL + "/", nil}, {"with meter", pods[1].serveURL + "/", nil}}
	runs, err := e.compare(swell, paths, []measurement{{"fixed rate", load{Rate: fixedRate, Duration: e.opts.duration}}},
		func(_, pi int, url string, l load) (sample, error) { return pods[pi].measure(swell, url, l) })
	if err != nil {
		return section{}, err
	}
	for i, p := range pods {
		if peakMem[i], err = memoryOf(p.qp.pid()); err != nil {
			return section{}, err
		}
	}
	check, err := meterReadings(client, pods[1])
	if err != nil {
		return section{}, err
	}
	return meterReport(e.opts, idle, runs[0], idleMem, peakMem, check), nil
}

// measureIdle samples the CPU time of both pods' processes around window,
// with no request sent.
func measureIdle(pods [2]*pod, window time.Duration) (idleCPU, error) {
	read := func() (qp, app [2]time.Duration, err error) {
		for i, p := range pods {
			var e1, e2 error
			qp[i], e1 = threadsCPU(p.qp.pid())
			app[i], e2 = threadsCPU(p.app.pid())
			if err = errors.Join(e1, e2); err != nil {
				return qp, app, err
			}
		}
		return qp, app, nil
	}
	qp0, app0, err := read()
	if err != nil {
		return idleCPU{}, err
	}
	began := time.Now()
	time.Sleep(window)
	qp1, app1, err := read()
	if err != nil {
		return idleCPU{}, err
	}
	r := idleCPU{window: time.Since(began)}
	for i := range pods {
		r.qp[i], r.app[i] = qp1[i]-qp0[i], app1[i]-app0[i]
	}
	return r, nil
}

// meterReadings reads what the metered queue-proxy last measured of its
// app from its metrics, and fails if it measures nothing: the variant
// would then cost what it measures not.
func meterReadings(client *http.Client, p *pod) (meterCheck, error) {
	url := p.metricsURL + network.MetricsPath
	fams, err := scrapeMetrics(client, url)
	if err != nil {
		return meterCheck{}, err
	}
	cpu, okCPU := gaugeOf(fams, "swell_queue_app_cpu_cores")
	g, okGauge := gaugeOf(fams, "swell_queue_app_gauge")
	if !okCPU || !okGauge {
		return meterCheck{}, fmt.Errorf("%s lacks swell_queue_app_cpu_cores or swell_queue_app_gauge: the queue-proxy "+
			"was not told %v; see %s", url, meterEnv, p.qp.log)
	}
	return meterCheck{cpu: cpu, gauge: g, gaugeFailures: counterOf(fams, "swell_queue_app_gauge_failures_total")}, nil
}

// perSecond is CPU time over a window in milliseconds per second (one is
// 0.1% of a core).
func perSecond(cpu, window time.Duration) float64 {
	if window <= 0 {
		return 0
	}
	return float64(cpu) / float64(time.Millisecond) / window.Seconds()
}

// ratioText formats with ÷ without, or "—" when without is 0.
func ratioText(with, without float64) string {
	if without == 0 || math.IsNaN(with/without) {
		return "—"
	}
	return fmt.Sprintf("%.2f×", with/without)
}

// meterReport turns the measurements into the section; in rate, direct is
// the pod without the meter and via the one with it.
func meterReport(o options, idle idleCPU, rate pair, idleMem, peakMem [2]memory, check meterCheck) section {
	ms := func(pick func(sample) time.Duration) func(sample) float64 {
		return func(s sample) float64 { return float64(pick(s)) / float64(time.Millisecond) }
	}
	qpCPU := func(s sample) float64 { return s.perThousand(s.qpCPU) }
	appCPU := func(s sample) float64 { return s.perThousand(s.appCPU) }
	p50 := ms(func(s sample) time.Duration { return s.Latency.P50 })
	p99 := ms(func(s sample) time.Duration { return s.Latency.P99 })
	ratio := func(f func(sample) float64) string {
		return fmt.Sprintf("%.2f×", rate.paired(func(d, v sample) float64 { return f(v) / f(d) }))
	}
	diff := func(f func(sample) float64, unit string) string {
		return fmt.Sprintf("%+.3f %s", rate.paired(func(d, v sample) float64 { return f(v) - f(d) }), unit)
	}
	var rows [][]string
	perK := func(metric string, f func(sample) float64) {
		rows = append(rows, []string{metric, fmt.Sprintf("%.1f ms", medianOf(rate.direct, f)),
			fmt.Sprintf("%.1f ms", medianOf(rate.via, f)), ratio(f), diff(f, "ms")})
	}
	latency := func(metric string, f func(sample) float64) {
		rows = append(rows, []string{metric, fmt.Sprintf("%.3f ms", medianOf(rate.direct, f)),
			fmt.Sprintf("%.3f ms", medianOf(rate.via, f)), "", diff(f, "ms")})
	}
	idleRow := func(metric string, cpu [2]time.Duration) {
		a, b := perSecond(cpu[0], idle.window), perSecond(cpu[1], idle.window)
		rows = append(rows, []string{metric, fmt.Sprintf("%.2f ms/s", a), fmt.Sprintf("%.2f ms/s", b),
			ratioText(b, a), fmt.Sprintf("%+.2f ms/s", b-a)})
	}
	memRow := func(metric string, a, b int64) {
		rows = append(rows, []string{metric, mib(a), mib(b), ratioText(float64(b), float64(a)),
			fmt.Sprintf("%+.1f MiB", float64(b-a)/(1<<20))})
	}
	perK(fmt.Sprintf("Queue-proxy CPU per 1,000 requests at %d req/s", fixedRate), qpCPU)
	perK(fmt.Sprintf("App CPU per 1,000 requests at %d req/s", fixedRate), appCPU)
	latency(fmt.Sprintf("Latency at %d req/s, p50", fixedRate), p50)
	latency(fmt.Sprintf("Latency at %d req/s, p99", fixedRate), p99)
	idleRow("Queue-proxy CPU idle, per second", idle.qp)
	idleRow("App CPU idle, per second", idle.app)
	memRow("Queue-proxy RSS after the idle window", idleMem[0].RSS, idleMem[1].RSS)
	memRow("Queue-proxy peak RSS (VmHWM) after all runs", peakMem[0].Peak, peakMem[1].Peak)

	rateOf := func(s sample) float64 { return s.Rate }
	notes := []string{
		fmt.Sprintf("Load: the median of %d rounds of %s at %d req/s on each pod, the pods taking turns to go first; "+
			"ratio and difference are medians of each round's pair.", o.reps, o.duration, fixedRate),
		fmt.Sprintf("Achieved rate: without %.0f/s, with %.0f/s. Failed requests: without %d, with %d.",
			medianOf(rate.direct, rateOf), medianOf(rate.via, rateOf), failures(rate.direct), failures(rate.via)),
		fmt.Sprintf("Idle: both pods at the same time, %s after both were ready, over %.1f s with no request, "+
			"from each thread's /proc/PID/task/TID/schedstat (nanoseconds); 1 ms/s is 0.1%% of a core.",
			meterSettle, idle.window.Seconds()),
		fmt.Sprintf("The metered queue-proxy's last reading after the runs: app CPU %.3f cores, %s %.0f, "+
			"%.0f failed gauge reads in all.", check.cpu, meteredGauge, check.gauge, check.gaugeFailures),
	}
	return section{
		title: "Queue-proxy measuring its app (APP_USAGE, GAUGE)",
		text: "Two pods side by side, each the example app behind its own queue-proxy: one queue-proxy " +
			"with `APP_USAGE=listener` and `GAUGE=" + meteredGauge + "` (as `swell local` sets them for a service " +
			"that scales on cpu and on that gauge: each second it reads the app's process tree from /proc and " +
			"GETs the app's /metrics), one without. Each pod has its own app, so the app's figures show what " +
			"serving /metrics once a second costs it.",
		header: []string{"metric", "without", "with", "with ÷ without", "with − without"},
		rows:   rows,
		notes:  notes,
	}
}
