package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/swell-run/swell/pkg/network"
)

// The activator scenario: the example app reached directly vs through an
// activator in front of a queue-proxy in front of the app, on loopback, the
// way a request travels while its service is routed through the activator.
// Both paths end at the same app process, so the difference is the two
// extra hops; the activator's own CPU and memory are sampled apart.

const (
	// actHost is the Host the activator routes by to the bench's service.
	actHost = "hello.example.com"
	// actServiceKey names the bench's service in the services file.
	actServiceKey = "default/hello"
)

// activator is a running activator process and the URL it serves on.
type activator struct {
	proc     *process
	serveURL string
}

// startActivator runs an activator whose only service has one pod: the
// queue-proxy of p.
func startActivator(e *env, bins map[string]string, p *pod) (*activator, error) {
	var ports [3]int
	for i := range ports {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = port
	}
	servePort, adminPort, metricsPort := ports[0], ports[1], ports[2]
	base := func(port int) string { return "http://127.0.0.1:" + strconv.Itoa(port) }

	type podEntry struct {
		Name string `json:"name"`
		Addr string `json:"addr"`
	}
	type serviceEntry struct {
		Key                  string     `json:"key"`
		Hosts                []string   `json:"hosts"`
		ContainerConcurrency int        `json:"containerConcurrency"`
		Pods                 []podEntry `json:"pods"`
	}
	services := struct {
		Services []serviceEntry `json:"services"`
	}{[]serviceEntry{{
		Key:                  actServiceKey,
		Hosts:                []string{actHost},
		ContainerConcurrency: e.opts.containerConcurrency,
		// serveURL is http://127.0.0.1:PORT; the services file wants
		// host:port.
		Pods: []podEntry{{Name: "p0", Addr: p.serveURL[len("http://"):]}},
	}}}
	b, err := json.Marshal(services)
	if err != nil {
		return nil, fmt.Errorf("services file: %w", err)
	}
	file := filepath.Join(e.work, "services.json")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		return nil, fmt.Errorf("services file: %w", err)
	}

	proc, err := start("activator", bins[actPkg], e.work,
		"ACTIVATOR_PORT="+strconv.Itoa(servePort),
		"ACTIVATOR_ADMIN_PORT="+strconv.Itoa(adminPort),
		"ACTIVATOR_METRICS_PORT="+strconv.Itoa(metricsPort),
		"SERVICES_FILE="+file,
		"LOG_LEVEL=warn", "LOG_FORMAT=json",
		// Nothing is in flight when the harness stops it: exit at once.
		"DRAIN_QUIET_PERIOD=0s",
	)
	if err != nil {
		return nil, err
	}
	if err := proc.waitHTTP(base(adminPort) + network.ReadyPath); err != nil {
		proc.stop()
		return nil, err
	}
	return &activator{proc: proc, serveURL: base(servePort)}, nil
}

// actRuns are one measurement's samples on both paths, one per round, with
// the activator's CPU time during each via sample.
type actRuns struct {
	pair
	actCPU []time.Duration
}

func activatorScenario(e *env) ([]section, error) {
	bins, err := e.build(helloPkg, qpPkg, actPkg, swellPkg)
	if err != nil {
		return nil, err
	}
	swell := bins[swellPkg]
	p, err := startPod(e, bins)
	if err != nil {
		return nil, err
	}
	defer p.stop()
	act, err := startActivator(e, bins, p)
	if err != nil {
		return nil, err
	}
	// Stopped before the pod (defers run last in, first out), so that it
	// never sees its pod go away.
	defer act.proc.stop()
	actIdle, err := memoryOf(act.proc.pid())
	if err != nil {
		return nil, err
	}

	d := e.opts.duration
	paths := [2]benchPath{{"direct", p.appURL + "/", nil}, {"via activator", act.serveURL + "/", []string{"Host: " + actHost}}}
	actCPU := make([][]time.Duration, 2)
	pairs, err := e.compare(swell, paths, []measurement{
		{"saturation", load{Workers: saturationConns, Duration: d}},
		{"fixed rate", load{Rate: fixedRate, Duration: d}},
	}, func(mi, pi int, url string, l load) (sample, error) {
		act0, err := cpuTime(act.proc.pid())
		if err != nil {
			return sample{}, err
		}
		s, err := p.measure(swell, url, l)
		if err != nil {
			return sample{}, err
		}
		act1, err := cpuTime(act.proc.pid())
		if err != nil {
			return sample{}, err
		}
		if pi == 1 {
			actCPU[mi] = append(actCPU[mi], act1-act0)
		}
		return s, nil
	})
	if err != nil {
		return nil, err
	}
	runs := make([]actRuns, len(pairs))
	for mi := range pairs {
		runs[mi] = actRuns{pairs[mi], actCPU[mi]}
	}

	actPeak, err := memoryOf(act.proc.pid())
	if err != nil {
		return nil, err
	}
	return []section{actReport(e.opts, runs[0], runs[1], actIdle, actPeak)}, nil
}

// actReport turns the samples into the scenario's table.
func actReport(o options, sat, rate actRuns, actIdle, actPeak memory) section {
	throughput := func(s sample) float64 { return s.Throughput }
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	p50 := func(s sample) float64 { return ms(s.Latency.P50) }
	p99 := func(s sample) float64 { return ms(s.Latency.P99) }
	diff := func(f func(sample) float64) func(d, v sample) float64 {
		return func(d, v sample) float64 { return f(v) - f(d) }
	}
	appCPU := func(s sample) float64 { return s.perThousand(s.appCPU) }
	qpCPU := func(s sample) float64 { return s.perThousand(s.qpCPU) }

	rows := [][]string{}
	add := func(metric, direct, via, delta string) {
		rows = append(rows, []string{metric, direct, via, delta})
	}
	latency := func(metric string, f func(sample) float64) {
		add(metric, fmt.Sprintf("%.3f ms", medianOf(rate.direct, f)), fmt.Sprintf("%.3f ms", medianOf(rate.via, f)),
			fmt.Sprintf("%+.3f ms", rate.paired(diff(f))))
	}

	add(fmt.Sprintf("Throughput at saturation, %d connections", saturationConns),
		fmt.Sprintf("%.0f req/s", medianOf(sat.direct, throughput)), fmt.Sprintf("%.0f req/s", medianOf(sat.via, throughput)),
		fmt.Sprintf("%.0f%%", sat.paired(func(d, v sample) float64 { return v.Throughput / d.Throughput })*100))
	latency(fmt.Sprintf("Latency at %d req/s, p50", fixedRate), p50)
	latency(fmt.Sprintf("Latency at %d req/s, p99", fixedRate), p99)

	// The activator's CPU per 1,000 requests of each via run at the fixed
	// rate, and the app's in the same run as its unit.
	actPer := make([]float64, len(rate.via))
	actVsApp := make([]float64, len(rate.via))
	for i, s := range rate.via {
		actPer[i] = s.perThousand(rate.actCPU[i])
		actVsApp[i] = float64(rate.actCPU[i]) / float64(s.appCPU)
	}
	add(fmt.Sprintf("App CPU per 1,000 requests at %d req/s", fixedRate),
		fmt.Sprintf("%.1f ms", medianOf(rate.direct, appCPU)), fmt.Sprintf("%.1f ms", medianOf(rate.via, appCPU)), "")
	add(fmt.Sprintf("Queue-proxy CPU per 1,000 requests at %d req/s", fixedRate),
		"—", fmt.Sprintf("%.1f ms", medianOf(rate.via, qpCPU)), "")
	add(fmt.Sprintf("Activator CPU per 1,000 requests at %d req/s", fixedRate),
		"—", fmt.Sprintf("%.1f ms", median(actPer)), fmt.Sprintf("%.2f× the app's", median(actVsApp)))
	add("Activator RSS, idle", "—", mib(actIdle.RSS), "")
	add("Activator peak RSS (VmHWM) after all runs", "—", mib(actPeak.Peak), "")

	rateOf := func(s sample) float64 { return s.Rate }
	notes := []string{
		fmt.Sprintf("Each figure is the median of %d rounds; a round runs every measurement for %s on each path, "+
			"the paths taking turns to go first. The ratio and delta columns are medians of each round's pair.",
			o.reps, o.duration),
		fmt.Sprintf("Achieved rate at %d req/s: direct %.0f/s, via activator %.0f/s.",
			fixedRate, medianOf(rate.direct, rateOf), medianOf(rate.via, rateOf)),
		fmt.Sprintf("Failed requests (no 2xx/3xx answer), all runs: direct %d, via activator %d.",
			failures(sat.direct, rate.direct), failures(sat.via, rate.via)),
		fmt.Sprintf("Service containerConcurrency and queue-proxy CONTAINER_CONCURRENCY: %d (0: unlimited).",
			o.containerConcurrency),
	}
	return section{
		title: "Activator overhead",
		text: "The example app (`cmd/hello`, plain `GET /`) reached directly and through an activator " +
			"→ queue-proxy → app, on loopback, HTTP/1.1 with keep-alive; requests to the activator carry " +
			"`Host: " + actHost + "`. The load generator is `swell load`, one process per run.",
		header: []string{"metric", "direct", "via activator", "ratio / delta"},
		rows:   rows,
		notes:  notes,
	}
}
