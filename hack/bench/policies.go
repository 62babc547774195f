package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/swell-run/swell/autoscaler/sim"
	"github.com/swell-run/swell/pkg/loadgen"
	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/trace"
)

// The policies scenario: the autoscaling classes side by side on real
// processes. One `swell local` per class serves the example app, each
// replica a queue-proxy and a `swell hello` that takes policyReadyDelay to
// listen, and each gets the same slice of the trace from its own `swell
// load` at the same time, so that the machine's noise falls on all alike.
// Cold starts and waits come from the activator's and the queue-proxies'
// own metrics, pod-seconds from the replicas' lifetimes as `swell local`
// counts them. `swell sim` runs the same slice with the same settings, so
// each real figure stands next to what the simulator predicts for it.

// Settings of the policies scenario: the LLM trace as docs/sim.md runs it
// (5 ms + 20 ms per generated token, 4 requests at a time per replica), and
// an app that takes as long to start as the simulator's default pod.
const (
	policySlice, policySliceQuick = 10 * time.Minute, 2 * time.Minute
	policyBase, policyPerToken    = 5 * time.Millisecond, 20 * time.Millisecond
	policyConcurrency             = 4
	policyReadyDelay              = 2 * time.Second
	// policySample is how often each run's replicas' metrics are read.
	policySample = time.Second
	// waitFloor: a request that waited longer than this for a replica
	// slot, at the activator or at a queue-proxy, waited.
	waitFloor = 0.001
)

// policyClasses are the classes compared, in the report's order
// (adaptive is the default).
var policyClasses = []string{"kpa", "hpa", "adaptive"}

// policyTraffics are what the scenario replays (-policies-traffic): the
// first minutes of the trace, or bursts generated as hack/sim/compare.sh
// generates them.
var policyTraffics = []string{"trace", "bursts"}

// burstsProfile generates the bursts: 150 requests on average at 12 a
// second after silences of a minute on average, both Pareto (shape 1.5),
// lognormal service times of mean 560 ms.
var burstsProfile = []string{"--profile", "bursts", "--rate", "12", "--burst-size", "150", "--off", "1m",
	"--service-time", "560ms", "--service-dist", "lognormal"}

func policiesScenario(e *env) ([]section, error) {
	bins, err := e.build(swellPkg)
	if err != nil {
		return nil, err
	}
	swell := bins[swellPkg]
	src, err := tracePath()
	if err != nil {
		return nil, err
	}
	span := policySlice
	if e.opts.quick {
		span = policySliceQuick
	}
	slice := filepath.Join(e.work, "policies-slice.csv")
	var n int
	traffic := "the first " + span.String() + " of " + filepath.Base(src)
	if e.opts.policiesTraffic == "bursts" {
		n, err = writeBursts(swell, slice, span)
		traffic = span.String() + " of bursts (`swell sim " + strings.Join(burstsProfile, " ") + " --write-trace`)"
	} else {
		n, err = writeSlice(src, slice, span)
	}
	if err != nil {
		return nil, err
	}
	predicted, err := simulate(swell, e.work, slice)
	if err != nil {
		return nil, err
	}

	logf("replaying %s (%d requests) through %d swell locals at once: %s",
		traffic, n, len(policyClasses), strings.Join(policyClasses, ", "))
	runs := make([]policyRun, len(policyClasses))
	var wg sync.WaitGroup
	for i, class := range policyClasses {
		wg.Go(func() { runs[i] = runPolicy(e, swell, class, slice, span) })
	}
	wg.Wait()
	var errs []error
	for _, r := range runs {
		if r.err != nil {
			errs = append(errs, fmt.Errorf("class %s: %w", r.class, r.err))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return []section{policyReport(e.opts.policiesTraffic, traffic, n, runs, predicted)}, nil
}

// writeSlice writes the arrivals of src's first span to dst as a
// service-time trace (t,service_time), each request's service time by
// the scenario's token model, and returns how many it wrote.
func writeSlice(src, dst string, span time.Duration) (int, error) {
	tr, err := trace.ReadFile(src, trace.Model{Base: policyBase, PerToken: policyPerToken})
	if err != nil {
		return 0, err
	}
	var b strings.Builder
	b.WriteString(trace.HeaderService + "\n")
	n := 0
	for _, r := range tr.Records {
		if r.Arrival >= span {
			break
		}
		fmt.Fprintf(&b, "%.6f,%.6f\n", r.Arrival.Seconds(), r.ServiceTime.Seconds())
		n++
	}
	if n == 0 {
		return 0, fmt.Errorf("%s: no arrival in its first %s", src, span)
	}
	return n, os.WriteFile(dst, []byte(b.String()), 0o644)
}

// writeBursts writes span of generated bursts to dst as a service-time
// trace and returns how many requests it holds.
func writeBursts(swell, dst string, span time.Duration) (int, error) {
	args := append(append([]string{"sim"}, burstsProfile...), "--duration", span.String(), "--write-trace", dst)
	if out, err := exec.Command(swell, args...).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("swell %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	b, err := os.ReadFile(dst)
	if err != nil {
		return 0, err
	}
	return strings.Count(string(b), "\n") - 1, nil
}

// policyFlags are the settings every run and the simulation share.
func policyFlags() []string {
	c := strconv.Itoa(policyConcurrency)
	return []string{"--container-concurrency", c, "--target", c}
}

// simulate runs `swell sim` on the slice with the classes and the oracle
// and returns each one's summary by name.
func simulate(swell, work, slice string) (map[string]sim.Summary, error) {
	out := filepath.Join(work, "policies-sim")
	names := append(append([]string{}, policyClasses...), "oracle")
	args := append([]string{"sim", "--trace", slice, "--pod-startup", policyReadyDelay.String(),
		"--policy", strings.Join(names, ","), "--out", out}, policyFlags()...)
	cmd := exec.Command(swell, args...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("swell %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	sums := make(map[string]sim.Summary, len(names))
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(out, name, "summary.json"))
		if err != nil {
			return nil, fmt.Errorf("swell sim: %w", err)
		}
		var s sim.Summary
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, fmt.Errorf("swell sim: %s: %w", name, err)
		}
		sums[name] = s
	}
	return sums, nil
}

// policyRun is what one class's run measured.
type policyRun struct {
	class string
	load  loadgen.Result
	// replicaSeconds is `swell local`'s count when the last response came.
	replicaSeconds float64
	// cold counts requests that arrived with no replica ready.
	cold uint64
	// waits merges the activator's queue wait and every replica's
	// queue-proxy wait.
	waits histogram
	// maxReady is the most replicas seen ready at a sample.
	maxReady int
	err      error
}

func runPolicy(e *env, swell, class, slice string, span time.Duration) (r policyRun) {
	r.class = class
	flags := append([]string{"--class", class, "--env", "READY_DELAY=" + policyReadyDelay.String(),
		// A fresh state directory: no class starts knowing the service.
		"--state-dir", filepath.Join(e.work, "policies-state-"+class)}, policyFlags()...)
	l, err := startLocal(e, swell, "swell-local-"+class, flags...)
	if err != nil {
		r.err = err
		return r
	}
	defer func() { r.err = errors.Join(r.err, l.stop()) }()

	args := []string{"load", "--trace", slice, "--service-time", "--output", "json", "--progress=false", l.url + "/"}
	ctx, cancel := context.WithTimeout(context.Background(), span+loadgen.DefaultTimeout+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, swell, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		r.err = fmt.Errorf("swell %s: %w", strings.Join(args, " "), err)
		return r
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	client := &http.Client{Timeout: time.Second}
	// queueWaits is each replica's latest queue-proxy wait histogram, by
	// name: a replica that has stopped keeps its last reading.
	queueWaits := map[string]histogram{}
	sample := func() {
		st, err := l.status(client)
		if err != nil {
			return // the next sample reads it
		}
		r.maxReady = max(r.maxReady, st.Ready)
		for _, rep := range st.Replicas {
			fams, err := scrapeMetrics(client, "http://"+rep.Metrics+network.MetricsPath)
			if err != nil {
				continue // starting or gone: its last reading stands
			}
			if h, ok := histogramOf(fams, "swell_queue_wait_seconds"); ok {
				queueWaits[rep.Name] = h
			}
		}
	}
	tick := time.NewTicker(policySample)
	defer tick.Stop()
	var runErr error
wait:
	for {
		select {
		case runErr = <-done:
			break wait
		case <-tick.C:
			sample()
		}
	}
	sample()
	fams, err := scrapeMetrics(client, l.admin+network.MetricsPath)
	if runErr != nil || err != nil {
		r.err = errors.Join(runErr, err, errors.New(stderr.String()))
		return r
	}
	if err := json.Unmarshal(stdout.Bytes(), &r.load); err != nil {
		r.err = fmt.Errorf("swell load: report: %w", err)
		return r
	}
	r.replicaSeconds = counterOf(fams, "swell_local_replica_seconds_total")
	if h, ok := histogramOf(fams, "swell_activator_cold_start_seconds"); ok {
		r.cold = h.count()
	}
	r.waits, _ = histogramOf(fams, "swell_activator_queue_wait_seconds")
	for _, h := range queueWaits {
		r.waits = r.waits.add(h)
	}
	return r
}

// bound formats a bucket bound as the most a wait took.
func bound(s float64) string {
	switch {
	case s == 0:
		return "—"
	case math.IsInf(s, 1):
		return "> 65 s"
	}
	return "≤ " + secs(s)
}

// secs formats seconds as a duration to the millisecond.
func secs(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond).String()
}

func policyReport(kind, traffic string, n int, runs []policyRun, predicted map[string]sim.Summary) section {
	oracle := predicted["oracle"].PodSeconds
	ratio := func(podSeconds float64) string {
		if oracle <= 0 {
			return "—"
		}
		return fmt.Sprintf("%.2f×", podSeconds/oracle)
	}
	var rows [][]string
	for _, r := range runs {
		ok, other, lost := codeCounts(r.load.StatusCodes)
		answers := fmt.Sprintf("%d 2xx", ok)
		if len(other) > 0 || lost > 0 {
			answers += fmt.Sprintf("; %s; %d lost", formatCodes(other), lost)
		}
		rows = append(rows, []string{r.class + " (real)", fmt.Sprintf("%.0f", r.replicaSeconds), ratio(r.replicaSeconds),
			strconv.FormatUint(r.cold, 10), strconv.FormatUint(r.waits.above(waitFloor), 10),
			bound(r.waits.boundAbove(0.5, waitFloor)), bound(r.waits.boundAbove(0.99, waitFloor)),
			strconv.Itoa(r.maxReady), answers})
		p := predicted[r.class]
		rows = append(rows, []string{r.class + " (sim)", fmt.Sprintf("%.0f", p.PodSeconds), ratio(p.PodSeconds),
			strconv.Itoa(p.ColdStarts), strconv.Itoa(p.Waited), secs(p.WaitP50.Seconds()),
			secs(p.WaitP99.Seconds()), strconv.Itoa(p.MaxPods), "—"})
	}
	rows = append(rows, []string{"oracle (sim)", fmt.Sprintf("%.0f", oracle), ratio(oracle), "0", "0", "—", "—",
		strconv.Itoa(predicted["oracle"].MaxPods), "—"})

	var notes []string
	for _, r := range runs {
		notes = append(notes, fmt.Sprintf("%s: sent %d of %d at %.2f/s (the trace's %.2f/s); the last response %s after the last request.",
			r.class, r.load.Requests, r.load.Planned, r.load.Rate, r.load.TargetRate, r.load.Wait.Round(time.Millisecond)))
	}
	notes = append(notes,
		"Wait percentiles of real runs are the upper bounds of the histograms' buckets (a factor of 2 apart): "+
			"the activator's `swell_activator_queue_wait_seconds` and every replica's `swell_queue_wait_seconds`, merged.",
		"The simulator's pods take exactly "+policyReadyDelay.String()+" to start; a real replica takes that plus the "+
			"processes' own start and the first probe, and its stop drains, both counted in its lifetime.")
	title, work := "the LLM trace", "5 ms + 20 ms per generated token"
	if kind == "bursts" {
		title, work = "bursts", "its service time"
	}
	return section{
		title: "Autoscaling policies on real processes: " + title,
		text: fmt.Sprintf("%s (%d requests), each asking the app to work %s "+
			"(`swell load --trace --service-time`), is sent at once to one `swell local --demo --class C %s --env READY_DELAY=%s` "+
			"per class, each with a fresh `--state-dir`: replicas admit %d requests at a time and take %s to listen. "+
			"Pod-seconds are `swell_local_replica_seconds_total` when the last response came (every replica's lifetime "+
			"from its start to its exit); cold starts are the requests the activator saw arrive with no replica ready "+
			"(`swell_activator_cold_start_seconds`); a request waited when it waited more than 1 ms for a replica slot, "+
			"at the activator or at a queue-proxy. Each real run is followed by `swell sim` on the same slice with the "+
			"same settings (`--pod-startup %s`), and × oracle divides by the simulated oracle's pod-seconds.",
			upper(traffic), n, work, strings.Join(policyFlags(), " "), policyReadyDelay, policyConcurrency, policyReadyDelay, policyReadyDelay),
		header: []string{"class", "pod-seconds", "× oracle", "cold starts", "waited", "p50 wait", "p99 wait", "most ready", "answers"},
		rows:   rows,
		notes:  notes,
	}
}

// upper capitalises s's first letter.
func upper(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
