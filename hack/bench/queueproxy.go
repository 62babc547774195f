package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/swell-run/swell/pkg/network"
)

// The queue-proxy scenario: the example app reached directly vs through a
// queue-proxy in front of it, on loopback, over HTTP/1.1 with keep-alive.
// Both paths end at the same app process, so the difference between them
// is the queue-proxy's (one more hop, its handler chain, its CPU).

// Targets the queue-proxy is held to.
const (
	// targetThroughput: through the queue-proxy, at least this share of
	// the app's own throughput at saturation.
	targetThroughput = 0.35
	// targetAddedP50: at most this much added to the median latency at
	// fixedRate.
	targetAddedP50 = 500 * time.Microsecond
	// targetCPU: the queue-proxy's CPU per request at most this many
	// times the app's.
	targetCPU = 2.5
	// targetPeakRSS bounds the queue-proxy's peak resident memory.
	targetPeakRSS = 15 << 20
)

const (
	// fixedRate is the open-loop rate of the latency and CPU measurement:
	// well below saturation on a small machine, so queueing does not
	// dominate latency.
	fixedRate = 2000
	// saturationConns is the number of closed-loop workers (and
	// connections) that saturate the target.
	saturationConns = 10
)

// pod is the app and a queue-proxy in front of it.
type pod struct {
	app, qp                      *process
	appURL, serveURL, metricsURL string
}

func startPod(e *env, bins map[string]string) (*pod, error) {
	return startPodWith(e, bins, "", nil)
}

// startPodWith starts a pod whose processes' logs are named with prefix
// (when several pods run at once) and whose queue-proxy gets qpEnv
// (KEY=VALUE) besides the harness's settings.
func startPodWith(e *env, bins map[string]string, prefix string, qpEnv []string) (*pod, error) {
	var ports [4]int
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	appPort, servePort, adminPort, metricsPort := ports[0], ports[1], ports[2], ports[3]
	base := func(port int) string { return "http://127.0.0.1:" + strconv.Itoa(port) }

	p := &pod{appURL: base(appPort), serveURL: base(servePort), metricsURL: base(metricsPort)}
	var err error
	p.app, err = start(prefix+"hello", bins[helloPkg], e.work, "PORT="+strconv.Itoa(appPort), "HOST=127.0.0.1")
	if err != nil {
		return nil, err
	}
	if err := p.app.waitHTTP(p.appURL + "/healthz"); err != nil {
		p.stop()
		return nil, err
	}
	env := append([]string{
		"QUEUE_SERVING_PORT=" + strconv.Itoa(servePort),
		"QUEUE_ADMIN_PORT=" + strconv.Itoa(adminPort),
		"QUEUE_METRICS_PORT=" + strconv.Itoa(metricsPort),
		"USER_PORT=" + strconv.Itoa(appPort),
		"CONTAINER_CONCURRENCY=" + strconv.Itoa(e.opts.containerConcurrency),
		"LOG_LEVEL=warn", "LOG_FORMAT=json",
		// Nothing is in flight when the harness stops it: exit at once.
		"DRAIN_QUIET_PERIOD=0s",
		// The pprof handlers cost nothing until a profile is asked for.
		"ENABLE_PROFILING=true",
	}, qpEnv...)
	p.qp, err = start(prefix+"queue-proxy", bins[qpPkg], e.work, env...)
	if err != nil {
		p.stop()
		return nil, err
	}
	if err := p.qp.waitHTTP(base(adminPort) + network.ReadyPath); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

func (p *pod) stop() {
	// The queue-proxy first, so that it never sees its app go away.
	if p.qp != nil {
		p.qp.stop()
	}
	p.app.stop()
}

// sample is one load run on one path, with the CPU time the app and the
// queue-proxy used while it ran.
type sample struct {
	loadRun
	appCPU, qpCPU time.Duration
}

// perThousand is CPU time per 1,000 requests of s, in milliseconds (which
// is also microseconds per request).
func (s sample) perThousand(cpu time.Duration) float64 {
	if s.Requests == 0 {
		return 0
	}
	return float64(cpu) / float64(time.Millisecond) / float64(s.Requests) * 1000
}

// measure sends l to url and samples the CPU time of the pod's processes
// around it.
func (p *pod) measure(swell, url string, l load) (sample, error) {
	app0, err := cpuTime(p.app.pid())
	if err != nil {
		return sample{}, err
	}
	qp0, err := cpuTime(p.qp.pid())
	if err != nil {
		return sample{}, err
	}
	r, err := sendLoad(swell, url, l)
	if err != nil {
		return sample{}, err
	}
	app1, err := cpuTime(p.app.pid())
	if err != nil {
		return sample{}, err
	}
	qp1, err := cpuTime(p.qp.pid())
	if err != nil {
		return sample{}, err
	}
	return sample{loadRun: r, appCPU: app1 - app0, qpCPU: qp1 - qp0}, nil
}

// pair holds a measurement's samples on both paths, one per round.
type pair struct{ direct, via []sample }

// benchPath is one way to the app: "direct", or through the component
// under test.
type benchPath struct {
	name    string
	url     string
	headers []string
}

// measurement is one kind of load run on both paths.
type measurement struct {
	name string
	load load
}

// compare warms both paths up, then runs every measurement on both,
// e.opts.reps rounds, alternating which path goes first so that neither
// always follows the other, and returns each measurement's samples (path
// 0 is direct). measure runs one load (with the path's headers set) and
// may record more around it.
func (e *env) compare(swell string, paths [2]benchPath, ms []measurement,
	measure func(mi, pi int, url string, l load) (sample, error)) ([]pair, error) {
	// Connections, goroutines and heaps warm up before anything counts.
	warm := max(time.Second, e.opts.duration/5)
	for _, path := range paths {
		if _, err := sendLoad(swell, path.url, load{Workers: saturationConns, Duration: warm, Headers: path.headers}); err != nil {
			return nil, err
		}
	}
	runs := make([]pair, len(ms))
	for round := range e.opts.reps {
		for mi, m := range ms {
			for k := range paths {
				pi := (k + round) % 2
				l := m.load
				l.Headers = paths[pi].headers
				s, err := measure(mi, pi, paths[pi].url, l)
				if err != nil {
					return nil, err
				}
				if pi == 0 {
					runs[mi].direct = append(runs[mi].direct, s)
				} else {
					runs[mi].via = append(runs[mi].via, s)
				}
				logf("round %d/%d %-14s %-15s %7.0f req/s  p50 %-9s p99 %-9s failed %d",
					round+1, e.opts.reps, m.name, paths[pi].name, s.Throughput,
					s.Latency.P50.Round(time.Microsecond), s.Latency.P99.Round(time.Microsecond), s.failed())
			}
		}
	}
	return runs, nil
}

// median of f over samples.
func medianOf(samples []sample, f func(sample) float64) float64 {
	xs := make([]float64, len(samples))
	for i, s := range samples {
		xs[i] = f(s)
	}
	return median(xs)
}

// paired is the median over rounds of f applied to each round's two
// samples: taken side by side, they saw the same machine.
func (p pair) paired(f func(direct, via sample) float64) float64 {
	xs := make([]float64, len(p.direct))
	for i := range p.direct {
		xs[i] = f(p.direct[i], p.via[i])
	}
	return median(xs)
}

func queueProxyScenario(e *env) ([]section, error) {
	bins, err := e.build(helloPkg, qpPkg, swellPkg)
	if err != nil {
		return nil, err
	}
	sections, err := overheadSections(e, bins)
	if err != nil {
		return nil, err
	}
	// Its own pods, once the first pod has gone: both start fresh, so
	// their peaks compare.
	meter, err := appMetricsSection(e, bins)
	if err != nil {
		return sections, fmt.Errorf("queue-proxy measuring its app: %w", err)
	}
	return append(sections, meter), nil
}

// overheadSections measures the app directly vs through a queue-proxy,
// and profiles the queue-proxy when asked.
func overheadSections(e *env, bins map[string]string) ([]section, error) {
	swell := bins[swellPkg]
	p, err := startPod(e, bins)
	if err != nil {
		return nil, err
	}
	defer p.stop()
	appIdle, err := memoryOf(p.app.pid())
	if err != nil {
		return nil, err
	}
	qpIdle, err := memoryOf(p.qp.pid())
	if err != nil {
		return nil, err
	}

	d := e.opts.duration
	paths := [2]benchPath{{"direct", p.appURL + "/", nil}, {"via queue-proxy", p.serveURL + "/", nil}}
	runs, err := e.compare(swell, paths, []measurement{
		{"saturation", load{Workers: saturationConns, Duration: d}},
		{"fixed rate", load{Rate: fixedRate, Duration: d}},
		{"one connection", load{Workers: 1, Duration: d}},
	}, func(_ int, _ int, url string, l load) (sample, error) { return p.measure(swell, url, l) })
	if err != nil {
		return nil, err
	}

	appPeak, err := memoryOf(p.app.pid())
	if err != nil {
		return nil, err
	}
	qpPeak, err := memoryOf(p.qp.pid())
	if err != nil {
		return nil, err
	}

	sections := []section{qpReport(e.opts, runs[0], runs[1], runs[2], qpIdle, qpPeak, appIdle, appPeak)}
	if e.opts.profileDir != "" {
		sections = append(sections, profileQueueProxy(e, p, swell, paths[1].url))
	}
	return sections, nil
}

// qpReport turns the samples into the scenario's table.
func qpReport(o options, sat, rate, one pair, qpIdle, qpPeak, appIdle, appPeak memory) section {
	throughput := func(s sample) float64 { return s.Throughput }
	ratio := func(f func(sample) float64) func(d, v sample) float64 {
		return func(d, v sample) float64 { return f(v) / f(d) }
	}
	diff := func(f func(sample) float64) func(d, v sample) float64 {
		return func(d, v sample) float64 { return f(v) - f(d) }
	}
	msOf := func(pick func(sample) time.Duration) func(sample) float64 {
		return func(s sample) float64 { return float64(pick(s)) / float64(time.Millisecond) }
	}
	p50 := msOf(func(s sample) time.Duration { return s.Latency.P50 })
	p90 := msOf(func(s sample) time.Duration { return s.Latency.P90 })
	p99 := msOf(func(s sample) time.Duration { return s.Latency.P99 })
	appCPU := func(s sample) float64 { return s.perThousand(s.appCPU) }
	qpCPU := func(s sample) float64 { return s.perThousand(s.qpCPU) }
	loadCPU := func(s sample) float64 { return s.perThousand(s.CPU) }
	allCPU := func(s sample) float64 { return s.perThousand(s.appCPU + s.qpCPU + s.CPU) }

	rows := [][]string{}
	add := func(metric, direct, via, delta, target, ok string) {
		rows = append(rows, []string{metric, direct, via, delta, target, ok})
	}
	latency := func(metric string, pr pair, f func(sample) float64, target string, ok string) {
		add(metric, fmt.Sprintf("%.3f ms", medianOf(pr.direct, f)), fmt.Sprintf("%.3f ms", medianOf(pr.via, f)),
			fmt.Sprintf("%+.3f ms", pr.paired(diff(f))), target, ok)
	}

	tput := sat.paired(ratio(throughput))
	add(fmt.Sprintf("Throughput at saturation, %d connections", saturationConns),
		fmt.Sprintf("%.0f req/s", medianOf(sat.direct, throughput)), fmt.Sprintf("%.0f req/s", medianOf(sat.via, throughput)),
		fmt.Sprintf("%.0f%%", tput*100), fmt.Sprintf("≥ %.0f%%", targetThroughput*100), met(tput >= targetThroughput))
	addedP50 := rate.paired(diff(p50))
	latency(fmt.Sprintf("Latency at %d req/s, p50", fixedRate), rate, p50,
		fmt.Sprintf("added ≤ %.1f ms", targetAddedP50.Seconds()*1000), met(addedP50 <= targetAddedP50.Seconds()*1000))
	latency(fmt.Sprintf("Latency at %d req/s, p90", fixedRate), rate, p90, "—", "")
	latency(fmt.Sprintf("Latency at %d req/s, p99", fixedRate), rate, p99, "—", "")
	add("Throughput, 1 connection",
		fmt.Sprintf("%.0f req/s", medianOf(one.direct, throughput)), fmt.Sprintf("%.0f req/s", medianOf(one.via, throughput)),
		fmt.Sprintf("%.0f%%", one.paired(ratio(throughput))*100), "—", "")
	latency("Latency, 1 connection, p50", one, p50, "—", "")
	latency("Latency, 1 connection, p99", one, p99, "—", "")

	cpuRatio := medianOf(rate.via, func(s sample) float64 { return float64(s.qpCPU) / float64(s.appCPU) })
	add(fmt.Sprintf("App CPU per 1,000 requests at %d req/s", fixedRate),
		fmt.Sprintf("%.1f ms", medianOf(rate.direct, appCPU)), fmt.Sprintf("%.1f ms", medianOf(rate.via, appCPU)),
		fmt.Sprintf("%.2f×", rate.paired(ratio(appCPU))), "—", "")
	add(fmt.Sprintf("Queue-proxy CPU per 1,000 requests at %d req/s", fixedRate),
		"—", fmt.Sprintf("%.1f ms", medianOf(rate.via, qpCPU)),
		fmt.Sprintf("%.2f× the app's", cpuRatio), fmt.Sprintf("≤ %.1f× the app's", targetCPU), met(cpuRatio <= targetCPU))
	add(fmt.Sprintf("Load generator CPU per 1,000 requests at %d req/s", fixedRate),
		fmt.Sprintf("%.1f ms", medianOf(rate.direct, loadCPU)), fmt.Sprintf("%.1f ms", medianOf(rate.via, loadCPU)),
		fmt.Sprintf("%.2f×", rate.paired(ratio(loadCPU))), "—", "")
	add(fmt.Sprintf("All CPU per 1,000 requests at %d req/s", fixedRate),
		fmt.Sprintf("%.1f ms", medianOf(rate.direct, allCPU)), fmt.Sprintf("%.1f ms", medianOf(rate.via, allCPU)),
		fmt.Sprintf("%.2f×", rate.paired(ratio(allCPU))), "—", "")
	add("Queue-proxy RSS, idle", "—", mib(qpIdle.RSS), "", "—", "")
	add("Queue-proxy peak RSS (VmHWM) after all runs", "—", mib(qpPeak.Peak), "",
		fmt.Sprintf("≤ %s", mib(targetPeakRSS)), met(qpPeak.Peak <= targetPeakRSS))

	rateOf := func(s sample) float64 { return s.Rate }
	cc := fmt.Sprintf("Queue-proxy CONTAINER_CONCURRENCY=%d.", o.containerConcurrency)
	if o.containerConcurrency == 0 {
		cc = "Queue-proxy CONTAINER_CONCURRENCY=0: unlimited, so no admission stage."
	}
	notes := []string{
		fmt.Sprintf("Each figure is the median of %d rounds; a round runs every measurement for %s on each path, "+
			"the paths taking turns to go first. The ratio and delta columns are medians of each round's pair, "+
			"so they may differ slightly from the ratio of the two medians shown.", o.reps, o.duration),
		fmt.Sprintf("Achieved rate at %d req/s: direct %.0f/s, via queue-proxy %.0f/s.",
			fixedRate, medianOf(rate.direct, rateOf), medianOf(rate.via, rateOf)),
		fmt.Sprintf("Failed requests (no 2xx/3xx answer), all runs: direct %d, via queue-proxy %d.",
			failures(sat.direct, rate.direct, one.direct), failures(sat.via, rate.via, one.via)),
		cc,
		fmt.Sprintf("The app (one process behind both paths): RSS %s idle, peak %s.", mib(appIdle.RSS), mib(appPeak.Peak)),
	}
	return section{
		title: "Queue-proxy overhead",
		text: "The example app (`cmd/hello`, plain `GET /`) reached directly and through a queue-proxy " +
			"in front of it, on loopback, HTTP/1.1 with keep-alive. The load generator is `swell load`, " +
			"one process per run.",
		header: []string{"metric", "direct", "via queue-proxy", "ratio / delta", "target", "met?"},
		rows:   rows,
		notes:  notes,
	}
}

// failures totals the failed requests of the samples.
func failures(sets ...[]sample) uint64 {
	var n uint64
	for _, set := range sets {
		for _, s := range set {
			n += s.failed()
		}
	}
	return n
}

// mib formats a byte count in MiB.
func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
