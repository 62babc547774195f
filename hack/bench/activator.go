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
	host := []string{"Host: " + actHost}
	paths := []struct {
		name    string
		url     string
		headers []string
	}{{"direct", p.appURL + "/", nil}, {"via activator", act.serveURL + "/", host}}
	// Connections, goroutines and heaps warm up before anything counts.
	warm := max(time.Second, d/5)
	for _, path := range paths {
		if _, err := sendLoad(swell, path.url, load{Workers: saturationConns, Duration: warm, Headers: path.headers}); err != nil {
			return nil, err
		}
	}

	measurements := []struct {
		name string
		load load
	}{
		{"saturation", load{Workers: saturationConns, Duration: d}},
		{"fixed rate", load{Rate: fixedRate, Duration: d}},
	}
	runs := make([]actRuns, len(measurements))
	for round := range e.opts.reps {
		for mi, m := range measurements {
			// Alternate which path goes first, so that neither always
			// follows the other.
			for k := range paths {
				pi := (k + round) % 2
				l := m.load
				l.Headers = paths[pi].headers
				act0, err := cpuTime(act.proc.pid())
				if err != nil {
					return nil, err
				}
				s, err := p.measure(swell, paths[pi].url, l)
				if err != nil {
					return nil, err
				}
				act1, err := cpuTime(act.proc.pid())
				if err != nil {
					return nil, err
				}
				if pi == 0 {
					runs[mi].direct = append(runs[mi].direct, s)
				} else {
					runs[mi].via = append(runs[mi].via, s)
					runs[mi].actCPU = append(runs[mi].actCPU, act1-act0)
				}
				logf("round %d/%d %-10s %-13s %7.0f req/s  p50 %-9s p99 %-9s failed %d",
					round+1, e.opts.reps, m.name, paths[pi].name, s.Throughput,
					s.Latency.P50.Round(time.Microsecond), s.Latency.P99.Round(time.Microsecond), s.failed())
			}
		}
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
		text: "The example app (`examples/hello`, plain `GET /`) reached directly and through an activator " +
			"→ queue-proxy → app, on loopback, HTTP/1.1 with keep-alive; requests to the activator carry " +
			"`Host: " + actHost + "`. The load generator is `swell load`, one process per run.",
		header: []string{"metric", "direct", "via activator", "ratio / delta"},
		rows:   rows,
		notes:  notes,
	}
}
