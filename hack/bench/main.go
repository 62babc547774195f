// Command bench is Swell's benchmark harness: it builds the binaries, runs
// them as real processes on loopback, drives them with `swell load` and
// prints a markdown report. Every figure that judges a component is a
// ratio or a difference to a baseline measured in the same run, interleaved
// with it, so that a busy machine slows both alike. docs/performance.md
// explains the figures and holds the latest results.
//
//	go run ./hack/bench                          # every scenario, ~35 minutes
//	go run ./hack/bench -quick                   # a smoke run of a few minutes
//	go run ./hack/bench -scenario queue-proxy -o report.md -profile /tmp/prof
//	go run ./hack/bench -gobench                 # add the Go micro-benchmarks
//	go run ./hack/bench -scenario scale -scale-chart docs/scale.svg
//	go run ./hack/bench -scenario policies -policies-traffic bursts
//	go run ./hack/bench -scenario scale -scale-parts autoscaler -scale-sizes 10000,10000/10/3
//	go run ./hack/bench -scenario scale -scale-parts autoscaler -scale-modes push -quick
//	go run ./hack/bench -scale-chart docs/scale.svg -scale-from docs/performance.md
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// Main packages the scenarios build, by import path so that the harness
// runs from anywhere in the module.
const (
	helloPkg = "github.com/swell-run/swell/cmd/hello"
	qpPkg    = "github.com/swell-run/swell/cmd/queue-proxy"
	swellPkg = "github.com/swell-run/swell/cmd/swell"
	actPkg   = "github.com/swell-run/swell/cmd/activator"
)

// goBenchPkgs hold the micro-benchmarks of the hot paths that -gobench runs.
var goBenchPkgs = []string{
	"github.com/swell-run/swell/queueproxy",
	"github.com/swell-run/swell/pkg/breaker",
	"github.com/swell-run/swell/pkg/stats",
}

// scenario is one named benchmark. run measures and returns the report's
// sections for it.
type scenario struct {
	name  string
	about string
	run   func(*env) ([]section, error)
}

var scenarios = []scenario{
	{"queue-proxy", "the app directly vs through the queue-proxy: throughput, latency, CPU, memory", queueProxyScenario},
	{"activator", "the app directly vs activator → queue-proxy → app: added latency, throughput, activator CPU and memory", activatorScenario},
	{"local", "swell local --demo: cold start's data-plane share vs the app's own start-up; requests lost replaying a trace from zero", localScenario},
	{"reaction", "swell local: from a step in the app's CPU or its gauge to the scale decision and the replicas ready, beside the HPA's and KEDA's documented cadence", reactionScenario},
	{"policies", "swell local per autoscaling class (kpa, hpa, adaptive) on the same 10 minutes of the trace, or of bursts (-policies-traffic), at once (2 with -quick): pod-seconds, cold starts, waits, beside swell sim's prediction", policiesScenario},
	{"scale", "the autoscaler alone at 1k, 3k and 10k services × 5 pods on a fake fleet, then 10k divided into 10 buckets among 3 autoscalers, each scraping the pods and then taking their pushes: CPU, memory, services without a sample, collection rounds, decision latency, scale writes; then the activator routing 10k services: memory per service, Host lookup, report bytes and frames", scaleScenario},
}

// options are the command line's settings shared by all scenarios.
type options struct {
	quick bool
	// reps is how many times each measurement runs on each path; the
	// report shows medians.
	reps int
	// duration is the length of one measured load run.
	duration time.Duration
	// containerConcurrency configures the queue-proxy under test.
	containerConcurrency int
	// profileDir, when set, receives CPU profiles of the components.
	profileDir string
	// scaleParts are the parts of the scale scenario to run
	// (scalePartAutoscaler, scalePartActivator).
	scaleParts map[string]bool
	// scaleChart, when set, receives the scale scenario's chart (SVG).
	scaleChart string
	// policiesTraffic is what the policies scenario replays: the trace,
	// or generated bursts (policyTraffics).
	policiesTraffic string
	// scaleSizes are the sizes the autoscaler's part measures, each in
	// every one of scaleModes (scaleModePull, scaleModePush), in order.
	scaleSizes []scaleSize
	scaleModes []string
}

// env is what a scenario runs with.
type env struct {
	opts options
	// work holds the binaries and the children's logs.
	work string
	bins map[string]string
}

// build returns the binaries of the main packages pkgs, building those not
// built yet.
func (e *env) build(pkgs ...string) (map[string]string, error) {
	var missing []string
	for _, p := range pkgs {
		if _, ok := e.bins[p]; !ok {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		logf("building %s", strings.Join(missing, " "))
		bins, err := buildAll(e.work, missing...)
		if err != nil {
			return nil, err
		}
		for p, b := range bins {
			e.bins[p] = b
		}
	}
	return e.bins, nil
}

// logf writes a progress line to stderr; the report goes to stdout.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	began, loadBefore := time.Now(), loadAverage()
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var (
		o        options
		which    = fs.String("scenario", "all", "comma-separated `names` of the scenarios to run, or all: "+scenarioNames())
		out      = fs.String("o", "", "also write the report to this `file`")
		goBench  = fs.Bool("gobench", false, "also run the Go benchmarks of "+strings.Join(goBenchPkgs, " "))
		duration = fs.Duration("duration", 0, "length of one measured load run (default 10s, 3s with -quick)")
		reps     = fs.Int("reps", 0, "times each measurement runs on each path; the report shows medians (default 3, 1 with -quick)")
		parts    = fs.String("scale-parts", strings.Join(scaleParts, ","), "comma-separated `parts` of the scale scenario to run: "+strings.Join(scaleParts, ", "))
		sizes    = fs.String("scale-sizes", scaleSizesFlag(scaleSizes), "comma-separated `sizes` the scale scenario's autoscaler part measures, in order: N services for one leader, N/B/R for N services in B buckets led by R autoscalers")
		modes    = fs.String("scale-modes", strings.Join(scaleModes, ","), "comma-separated `modes` the scale scenario measures each size in, one after the other: "+scaleModePull+" (the autoscaler scrapes every pod), "+scaleModePush+" (the pods push their stats)")
		from     = fs.String("scale-from", "", "draw -scale-chart from the `file`'s scale lines (a report, docs/performance.md: the last line of each size) and run nothing")
	)
	fs.BoolVar(&o.quick, "quick", false, "a short smoke run instead of the full one (~28 min)")
	fs.IntVar(&o.containerConcurrency, "container-concurrency", 0, "CONTAINER_CONCURRENCY of the queue-proxy under test (0: unlimited)")
	fs.StringVar(&o.profileDir, "profile", "", "capture CPU profiles of the queue-proxy into this `directory`")
	fs.StringVar(&o.policiesTraffic, "policies-traffic", policyTraffics[0], "what the policies scenario replays: "+strings.Join(policyTraffics, " or ")+" (heavy-tailed bursts after heavy-tailed silences, as hack/sim/compare.sh generates them)")
	fs.StringVar(&o.scaleChart, "scale-chart", "", "write the scale scenario's chart, the autoscaler's CPU and memory against the services, to this SVG `file`")
	fs.StringVar(&localTrace, "trace", "", "trace `file` the local scenario replays (default ../shared/traces/azure-llm-2023-conv.csv from the module root)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	var err error
	if o.scaleParts, err = parseScaleParts(*parts); err != nil {
		fmt.Fprintf(os.Stderr, "bench: -scale-parts: %v\n", err)
		return 2
	}
	if o.scaleSizes, err = parseScaleSizes(*sizes); err != nil {
		fmt.Fprintf(os.Stderr, "bench: -scale-sizes: %v\n", err)
		return 2
	}
	if o.scaleModes, err = parseScaleModes(*modes); err != nil {
		fmt.Fprintf(os.Stderr, "bench: -scale-modes: %v\n", err)
		return 2
	}
	if !slices.Contains(policyTraffics, o.policiesTraffic) {
		fmt.Fprintf(os.Stderr, "bench: -policies-traffic %q: want %s\n", o.policiesTraffic, strings.Join(policyTraffics, " or "))
		return 2
	}
	if *from != "" {
		return drawScaleChart(*from, o.scaleChart)
	}
	o.reps, o.duration = 3, 10*time.Second
	if o.quick {
		o.reps, o.duration = 1, 3*time.Second
	}
	if *reps > 0 {
		o.reps = *reps
	}
	if *duration > 0 {
		o.duration = *duration
	}
	selected, err := selectScenarios(*which)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: -scenario: %v\n", err)
		return 2
	}

	work, err := os.MkdirTemp("", "swell-bench-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		return 1
	}
	e := &env{opts: o, work: work, bins: map[string]string{}}
	var sections []section
	failed := false
	for _, s := range selected {
		logf("scenario %s: %s", s.name, s.about)
		secs, err := s.run(e)
		if err != nil {
			logf("scenario %s failed: %v", s.name, err)
			secs = append(secs, section{title: s.name, text: fmt.Sprintf("Failed: %v", err)})
			failed = true
		}
		sections = append(sections, secs...)
	}
	if *goBench {
		logf("go benchmarks")
		sections = append(sections, goBenchmarks(o.quick))
	}

	var report bytes.Buffer
	writeReport(&report, "go run ./hack/bench "+strings.Join(args, " "), began, loadBefore, sections)
	os.Stdout.Write(report.Bytes())
	if *out != "" {
		if err := os.WriteFile(*out, report.Bytes(), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			return 1
		}
	}
	if failed {
		// The children's logs explain a failure; keep them.
		logf("logs kept in %s", work)
		return 1
	}
	os.RemoveAll(work)
	return 0
}

func scenarioNames() string {
	names := make([]string, len(scenarios))
	for i, s := range scenarios {
		names[i] = s.name
	}
	return strings.Join(names, ", ")
}

func selectScenarios(which string) ([]scenario, error) {
	if which == "all" {
		return scenarios, nil
	}
	var sel []scenario
	for name := range strings.SplitSeq(which, ",") {
		i := slices.IndexFunc(scenarios, func(s scenario) bool { return s.name == strings.TrimSpace(name) })
		if i < 0 {
			return nil, fmt.Errorf("unknown scenario %q: accepted are all or %s", name, scenarioNames())
		}
		sel = append(sel, scenarios[i])
	}
	return sel, nil
}

// goBenchmarks runs the Go benchmarks of goBenchPkgs and returns their
// output as a section.
func goBenchmarks(quick bool) section {
	args := []string{"test", "-run", "^$", "-bench", ".", "-benchmem", "-count", "1"}
	if quick {
		args = append(args, "-benchtime", "100ms")
	}
	args = append(args, goBenchPkgs...)
	cmd := exec.Command("go", args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	s := section{title: "Go benchmarks", text: "`go " + strings.Join(args, " ") + "`"}
	if err := cmd.Run(); err != nil {
		s.notes = append(s.notes, fmt.Sprintf("go test failed: %v", err))
	}
	s.code = out.String()
	return s
}

// drawScaleChart writes the chart of the scale lines in the file from to
// chart, running nothing.
func drawScaleChart(from, chart string) int {
	if chart == "" {
		fmt.Fprintf(os.Stderr, "bench: -scale-from draws a chart: give its file with -scale-chart\n")
		return 2
	}
	b, err := os.ReadFile(from)
	if err == nil {
		err = writeScaleChartFile(chart, "the scale lines of "+from+" (the last of each size and of each replica)", b)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		return 1
	}
	logf("wrote %s", chart)
	return 0
}
