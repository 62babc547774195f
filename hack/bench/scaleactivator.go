package main

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"strconv"
	"strings"
)

// The scale scenario's activator part: one activator routing 10,000
// services of 5 pods each, the size the autoscaler is measured at. It runs
// the activator package's scale benchmarks (activator/scale_bench_test.go:
// the real activator.New following a Source of those services, every pod
// probed and routable, and the real activator/reporter sending to a
// websocket endpoint that decodes every frame, as the autoscaler's does)
// and reads their figures. The benchmarks run in one process, so each
// figure is per service, a difference, or a ratio of two sizes measured
// the same way.

const activatorPkg = "github.com/swell-run/swell/activator"

// scaleActivatorBench selects the benchmarks the part runs.
const scaleActivatorBench = "^BenchmarkScale(Removal|Report|Ports)?$"

// scaleActivatorServices and scaleActivatorPods are the benchmarks' size;
// the lookup and the chain are also measured at scaleActivatorSmall
// services, the reports with a tenth of the services busy and with all.
const (
	scaleActivatorServices = 10000
	scaleActivatorPods     = 5
	scaleActivatorSmall    = 10
)

// scaleActivator is what the benchmarks measured.
type scaleActivator struct {
	// heap and rss are the bytes one service routed costs.
	heap, rss float64
	// lookup and chain are ns per request at scaleActivatorServices, and
	// at scaleActivatorSmall: medians of the rounds the two sizes took
	// turns at. Their ratios are the medians of each round's ratio: the
	// two sizes of a round ran one after the other, so a busy spell of
	// the machine slows both.
	lookup, lookupSmall, lookupRatio float64
	chain, chainSmall, chainRatio    float64
	// busy is the reports with a tenth of the services busy, all with
	// every one.
	busy, all scaleReport
	// remove is ns per service removed, all at once, at 1,000 and 2,000
	// services routed; left the heap bytes per service it kept at 2,000.
	remove1k, remove2k float64
	left               float64
	// ports is what the services' own ports cost
	// (BenchmarkScalePorts).
	ports scalePorts
}

// scalePorts is what one service's own port costs an activator: file
// descriptors, goroutines, heap and resident bytes, ns to open it, and
// ns to find a request's service by its port.
type scalePorts struct {
	fds, goroutines, heap, rss, open, lookup float64
}

// scaleReport is the reports of one period a second.
type scaleReport struct {
	// bytes are the frames' payload a second, wire what the socket
	// carried (with the websocket's framing); frames a second; ns one
	// period's report, from the scan of the services to the last frame
	// decoded.
	bytes, wire, frames, ns float64
}

// benchFigure is where one benchmark's figure goes.
type benchFigure struct {
	bench, unit string
	v           *float64
}

// figures lists every figure the part reads, by benchmark and unit.
func (a *scaleActivator) figures() []benchFigure {
	big := "BenchmarkScale/services=" + strconv.Itoa(scaleActivatorServices)
	small := "BenchmarkScale/services=" + strconv.Itoa(scaleActivatorSmall)
	busy := "BenchmarkScaleReport/busy=" + strconv.Itoa(scaleActivatorServices/10)
	all := "BenchmarkScaleReport/busy=" + strconv.Itoa(scaleActivatorServices)
	ports := "BenchmarkScalePorts/services=" + strconv.Itoa(scaleActivatorServices)
	return []benchFigure{
		{big + "/memory", "heap-B/service", &a.heap},
		{big + "/memory", "rss-B/service", &a.rss},
		{big + "/lookup", "ns/op", &a.lookup},
		{small + "/lookup", "ns/op", &a.lookupSmall},
		{big + "/chain", "ns/op", &a.chain},
		{small + "/chain", "ns/op", &a.chainSmall},
		{busy, "report-B/s", &a.busy.bytes},
		{busy, "wire-B/s", &a.busy.wire},
		{busy, "frames/s", &a.busy.frames},
		{busy, "ns/op", &a.busy.ns},
		{all, "report-B/s", &a.all.bytes},
		{all, "wire-B/s", &a.all.wire},
		{all, "frames/s", &a.all.frames},
		{all, "ns/op", &a.all.ns},
		{"BenchmarkScaleRemoval/services=1000", "remove-ns/service", &a.remove1k},
		{"BenchmarkScaleRemoval/services=2000", "remove-ns/service", &a.remove2k},
		{"BenchmarkScaleRemoval/services=2000", "left-B/service", &a.left},
		{ports + "/cost", "fds/port", &a.ports.fds},
		{ports + "/cost", "goroutines/port", &a.ports.goroutines},
		{ports + "/cost", "heap-B/port", &a.ports.heap},
		{ports + "/cost", "rss-B/port", &a.ports.rss},
		{ports + "/cost", "open-ns/port", &a.ports.open},
		{ports + "/lookup-by-port", "ns/op", &a.ports.lookup},
	}
}

// scaleActivatorFrom picks the part's figures out of the benchmarks'
// results, the median of a benchmark run several times, naming every one
// missing.
func scaleActivatorFrom(results map[string]map[string][]float64) (scaleActivator, error) {
	var a scaleActivator
	var missing []string
	for _, f := range a.figures() {
		vs := results[f.bench][f.unit]
		if len(vs) == 0 {
			missing = append(missing, f.bench+" "+f.unit)
			continue
		}
		*f.v = median(vs)
	}
	big := "BenchmarkScale/services=" + strconv.Itoa(scaleActivatorServices)
	small := "BenchmarkScale/services=" + strconv.Itoa(scaleActivatorSmall)
	a.lookupRatio = roundRatio(results[big+"/lookup"]["ns/op"], results[small+"/lookup"]["ns/op"])
	a.chainRatio = roundRatio(results[big+"/chain"]["ns/op"], results[small+"/chain"]["ns/op"])
	if len(missing) > 0 {
		return a, fmt.Errorf("the activator's scale benchmarks did not report %s", strings.Join(missing, ", "))
	}
	return a, nil
}

// roundRatio is the median of the ratios of big's figure to small's, round
// by round; NaN without a round.
func roundRatio(big, small []float64) float64 {
	var rs []float64
	for i := range min(len(big), len(small)) {
		rs = append(rs, big[i]/small[i])
	}
	if len(rs) == 0 {
		return math.NaN()
	}
	return median(rs)
}

// parseGoBench reads `go test -bench` output: for each benchmark, by name
// without its -GOMAXPROCS suffix, each figure by unit (ns/op, B/op and
// those a benchmark reports itself), in the order run. A benchmark run
// again under the same name (suffixed #01, #02 by the testing package, or
// by -count) adds to the same figures. Other lines are passed over.
func parseGoBench(out string) map[string]map[string][]float64 {
	res := map[string]map[string][]float64{}
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		// Name, iterations, then value and unit pairs.
		if len(f) < 4 || len(f)%2 != 0 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		name := trimNumber(trimNumber(f[0], '-'), '#')
		figs := map[string]float64{}
		for i := 2; i < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				figs = nil
				break
			}
			figs[f[i+1]] = v
		}
		if figs == nil {
			continue
		}
		if res[name] == nil {
			res[name] = map[string][]float64{}
		}
		for unit, v := range figs {
			res[name][unit] = append(res[name][unit], v)
		}
	}
	return res
}

// trimNumber removes from name a suffix of sep and digits.
func trimNumber(name string, sep byte) string {
	if i := strings.LastIndexByte(name, sep); i > 0 {
		if _, err := strconv.Atoi(name[i+1:]); err == nil {
			return name[:i]
		}
	}
	return name
}

// scaleActivatorRun runs the benchmarks: each for 300 ms (100 ms with
// -quick), beside the fixed work of routing 10,000 services with their
// pods, 10,000 without (for the reports), 10,000 with their own ports and
// without (for the ports) and 3,000 more with pods (for the removals): half a minute on a quiet machine, a minute on a busy one.
func scaleActivatorRun(e *env) (a scaleActivator, out string, err error) {
	benchtime := "300ms"
	if e.opts.quick {
		benchtime = "100ms"
	}
	args := []string{"test", "-run", "^$", "-bench", scaleActivatorBench, "-benchtime", benchtime, "-count", "1", "-timeout", "5m", activatorPkg}
	logf("scale: the activator at %d services × %d pods: go %s", scaleActivatorServices, scaleActivatorPods, strings.Join(args, " "))
	cmd := exec.Command("go", args...)
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	runErr := cmd.Run()
	out = b.String()
	a, err = scaleActivatorFrom(parseGoBench(out))
	if runErr != nil {
		err = errors.Join(fmt.Errorf("go %s: %w", strings.Join(args, " "), runErr), err)
	}
	return a, out, err
}

// scaleActivatorLine is the part's one plain line, for grep and for the
// record.
func scaleActivatorLine(a scaleActivator) string {
	return fmt.Sprintf("scale-activator services=%d pods=%d heap_bytes_per_service=%.0f rss_bytes_per_service=%.0f "+
		"lookup_ns=%.0f lookup_ratio=%.2f chain_ns=%.0f chain_ratio=%.2f "+
		"report_bytes_per_s=%.0f report_frames_per_s=%.0f report_bytes_per_s_all=%.0f report_frames_per_s_all=%.0f "+
		"left_bytes_per_service=%.0f "+
		"port_fds=%.2f port_goroutines=%.2f port_heap_bytes=%.0f port_rss_bytes=%.0f port_open_ns=%.0f port_lookup_ns=%.0f",
		scaleActivatorServices, scaleActivatorServices*scaleActivatorPods, a.heap, a.rss,
		a.lookup, a.lookupRatio, a.chain, a.chainRatio,
		a.busy.bytes, a.busy.frames, a.all.bytes, a.all.frames, a.left,
		a.ports.fds, a.ports.goroutines, a.ports.heap, a.ports.rss, a.ports.open, a.ports.lookup)
}

// scaleActivatorSection is the part's table; out is the benchmarks'
// output, kept for the record.
func scaleActivatorSection(a scaleActivator, out string) section {
	n := scaleActivatorServices
	kib := func(v float64) string { return fmt.Sprintf("%.1f KiB", v/1024) }
	report := func(r scaleReport) string {
		return fmt.Sprintf("%s/s (%s/s on the socket), %.0f frame/s; a period's report %.1f ms",
			kib(r.bytes), kib(r.wire), r.frames, r.ns/1e6)
	}
	return section{
		title: fmt.Sprintf("Scale: the activator at %s services × %d pods", thousands(n), scaleActivatorPods),
		text: "`go test -bench '" + scaleActivatorBench + "' " + activatorPkg + "` (activator/scale_bench_test.go): the real " +
			"activator following a Source of the services, every pod probed and routable, in one process with the probe " +
			"servers; the real reporter, sending to a websocket endpoint that decodes every frame. Memory is the live heap " +
			"after a collection, and the resident set after the free pages went back, against the same activator routing " +
			"none; the lookup and the chain (with an in-memory transport, no network) take the services in a shuffled " +
			"order, against " + strconv.Itoa(scaleActivatorSmall) + " services, the two sizes taking turns: medians of the rounds, " +
			"and the median of each round's ratio.",
		header: []string{"metric", "value"},
		rows: [][]string{
			{"heap per service routed; resident", fmt.Sprintf("%s; %s (%.0f MiB and %.0f MiB at %s)",
				kib(a.heap), kib(a.rss), a.heap*float64(n)/(1<<20), a.rss*float64(n)/(1<<20), thousands(n))},
			{fmt.Sprintf("Host lookup, %d → %s services", scaleActivatorSmall, thousands(n)),
				fmt.Sprintf("%.0f → %.0f ns (%.2f×)", a.lookupSmall, a.lookup, a.lookupRatio)},
			{fmt.Sprintf("a request through the chain, %d → %s services", scaleActivatorSmall, thousands(n)),
				fmt.Sprintf("%.1f → %.1f µs (%.2f×)", a.chainSmall/1e3, a.chain/1e3, a.chainRatio)},
			{fmt.Sprintf("reports, %s of %s services busy", thousands(n/10), thousands(n)), report(a.busy)},
			{fmt.Sprintf("reports, all %s busy", thousands(n)), report(a.all)},
			{"removing services at once, per service removed: 1,000 routed; 2,000", fmt.Sprintf("%.1f µs; %.1f µs", a.remove1k/1e3, a.remove2k/1e3)},
			{"heap kept per service removed (2,000)", kib(a.left)},
			{fmt.Sprintf("a service's own port (BenchmarkScalePorts, %s ports open): file descriptors, goroutines", thousands(n)),
				fmt.Sprintf("%.2f, %.2f", a.ports.fds, a.ports.goroutines)},
			{"a service's own port: heap; resident", fmt.Sprintf("%s; %s (%.0f MiB and %.0f MiB at %s)",
				kib(a.ports.heap), kib(a.ports.rss), a.ports.heap*float64(n)/(1<<20), a.ports.rss*float64(n)/(1<<20), thousands(n))},
			{"a service's own port: opening it; finding a request's service by it", fmt.Sprintf("%.0f µs; %.0f ns", a.ports.open/1e3, a.ports.lookup)},
		},
		code: out,
	}
}

// thousands writes n with commas between groups of three digits.
func thousands(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
