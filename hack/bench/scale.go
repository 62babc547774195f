package main

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/swell-run/swell/hack/scale/pods"
	"github.com/swell-run/swell/pkg/network"
)

// The scale scenario: the autoscaler alone, at 1,000, 3,000 and 10,000
// services of 5 pods each. A fake fleet (hack/scale/fleet) serves every
// pod's stats endpoint from one process and opens three activators'
// report streams; the autoscaler (hack/scale/autoscaler) is the real
// loop, collector, activator endpoint and executor, wired as
// cmd/autoscaler wires them, over a backend that records its writes in
// place of Kubernetes. After a settling time, a window measures the
// autoscaler's CPU and memory, its collection rounds (from its own
// metrics) and its writes, while a few services' load is stepped through
// the fleet's control API to time the decisions.

// Packages of the scale scenario.
const (
	scaleFleetPkg      = "github.com/swell-run/swell/hack/scale/fleet"
	scaleAutoscalerPkg = "github.com/swell-run/swell/hack/scale/autoscaler"
)

// Settings of the scale scenario.
const (
	scalePodsPerService = 5
	// scaleSeed draws the services' kinds and loads.
	scaleSeed = 1
	// scaleStepsZeroEvery: of every three steps, two are of busy services
	// (the tick path: scrape, window, tick) and one wakes a service at
	// zero (the poke path).
	scaleStepsZeroEvery = 3
	// scalePoll is how often a step's write is looked for, and the
	// processes checked while waiting; the write's time is the
	// backend's own, so the poll bounds no figure.
	scalePoll = 100 * time.Millisecond
)

// scaleSizes are the services measured; -quick measures them all too.
var scaleSizes = []int{1000, 3000, 10000}

// scaleTiming is how long each part of a size's run takes.
type scaleTiming struct {
	// settle is the wait after both processes are ready: the first rounds
	// connect to every pod and the first decisions route the services.
	settle time.Duration
	// window is the measured span; steps services are stepped in it.
	window time.Duration
	steps  int
	// stepWait bounds the wait for a step's write after the window.
	stepWait time.Duration
	// profile is the length of the CPU profile taken after the window of
	// the largest size, with -profile.
	profile time.Duration
}

func scaleTimings(quick bool) scaleTiming {
	if quick {
		return scaleTiming{settle: 10 * time.Second, window: 15 * time.Second, steps: 6, stepWait: 10 * time.Second, profile: 5 * time.Second}
	}
	return scaleTiming{settle: 30 * time.Second, window: 60 * time.Second, steps: 12, stepWait: 15 * time.Second, profile: 10 * time.Second}
}

func scaleScenario(e *env) ([]section, error) {
	bins, err := e.build(scaleFleetPkg, scaleAutoscalerPkg)
	if err != nil {
		return nil, err
	}
	tm := scaleTimings(e.opts.quick)
	token := filepath.Join(e.work, "scale-token")
	if err := os.WriteFile(token, []byte(rand.Text()+"\n"), 0o600); err != nil {
		return nil, err
	}
	var secs []section
	var errs []error
	var lines []string
	for _, n := range scaleSizes {
		logf("scale: %d services × %d pods: settle %s, measure %s", n, scalePodsPerService, tm.settle, tm.window)
		r := scaleRun(e, bins, token, n, tm, n == scaleSizes[len(scaleSizes)-1])
		if r.err != nil {
			logf("scale: %d services: %v", n, r.err)
			errs = append(errs, fmt.Errorf("%d services: %w", n, r.err))
		}
		secs = append(secs, scaleSection(r, tm))
		if r.profile.title != "" {
			secs = append(secs, r.profile)
		}
		lines = append(lines, scaleLine(r))
		logf("%s", lines[len(lines)-1])
	}
	secs = append(secs, section{
		title: "Scale: summary",
		text: "One line per size: the autoscaler's CPU in cores over the window, its resident memory at the end, the p99 of its " +
			"collection rounds and of the time from a load change being served to the scale write (every step, both paths).",
		code: strings.Join(lines, "\n"),
	})
	return secs, errors.Join(errs...)
}

// scaleResult is what one size measured.
type scaleResult struct {
	services, pods int
	// loadBefore and loadAfter are the machine's load averages around the
	// size's run.
	loadBefore, loadAfter string
	window                time.Duration

	// The autoscaler's and the fleet's CPU over the window, in cores;
	// their memory at its end.
	cpu, fleetCPU  float64
	mem, fleetMem  memory
	openFDs, maxFD float64
	goroutines     float64
	// fleetFDExhausted counts the fleet's accepts refused for want of a
	// file descriptor, since it started.
	fleetFDExhausted uint64

	// readyPods are the pods the backend had ready at the window's end.
	readyPods int
	// The collection rounds in the window: how many, how many were not
	// started because the previous one still ran, their mean and p99.
	rounds, roundsDropped float64
	roundMean, roundP99   float64 // seconds
	// Scrapes in the window by result, and one scrape's p99.
	scrapes   map[string]float64
	scrapeP99 float64 // seconds
	// missing is service-seconds without a sample.
	missing float64
	// activators connected at the end; reports and pokes they sent in
	// the window.
	activators, reports, pokes float64

	// writes by kind in the window, and the most scale writes in one
	// second.
	writes        map[string]uint64
	maxScaleWrite uint32

	// steps are the load steps, with their outcome.
	steps []scaleStep

	profile section
	err     error
}

// scaleStep is one load step and the write it led to.
type scaleStep struct {
	service, kind string
	served        time.Time
	wrote         time.Time // zero: no write seen
}

func (s scaleStep) latency() (time.Duration, bool) {
	if s.wrote.IsZero() {
		return 0, false
	}
	return s.wrote.Sub(s.served), true
}

// scaleRun measures one size. Its processes are stopped when it returns.
func scaleRun(e *env, bins map[string]string, token string, n int, tm scaleTiming, profile bool) (r scaleResult) {
	r.services, r.pods, r.window = n, n*scalePodsPerService, tm.window
	r.loadBefore = loadAverage()
	defer func() { r.loadAfter = loadAverage() }()

	var ports [4]int
	for i := range ports {
		p, err := freePort()
		if err != nil {
			r.err = err
			return r
		}
		ports[i] = p
	}
	podPort, control, listen, admin := ports[0], "127.0.0.1:"+strconv.Itoa(ports[1]), "127.0.0.1:"+strconv.Itoa(ports[2]), "127.0.0.1:"+strconv.Itoa(ports[3])
	podsFile := filepath.Join(e.work, fmt.Sprintf("scale-%d-pods.jsonl", n))
	fleet, _, err := startArgs(fmt.Sprintf("scale-fleet-%d", n), bins[scaleFleetPkg], e.work, []string{
		"-services", strconv.Itoa(n), "-pods-per-service", strconv.Itoa(scalePodsPerService),
		"-seed", strconv.Itoa(scaleSeed), "-port", strconv.Itoa(podPort), "-out", podsFile, "-control", control,
		"-autoscaler", "ws://" + listen + network.ActivatorReportPath, "-token-file", token,
	})
	if err != nil {
		r.err = err
		return r
	}
	defer fleet.stop()
	if r.err = fleet.waitHTTP("http://" + control + "/ready"); r.err != nil {
		return r
	}
	as, _, err := startArgs(fmt.Sprintf("scale-autoscaler-%d", n), bins[scaleAutoscalerPkg], e.work, []string{
		"-pods", podsFile, "-listen", listen, "-admin", admin, "-token-file", token,
	})
	if err != nil {
		r.err = err
		return r
	}
	// Stopped before the fleet (defers run last in, first out).
	defer as.stop()
	adminURL := "http://" + admin
	if r.err = as.waitHTTP(adminURL + "/ready"); r.err != nil {
		return r
	}
	svcs, err := pods.ReadFile(podsFile)
	if err != nil {
		r.err = err
		return r
	}
	if r.err = scaleSleep(tm.settle, fleet, as); r.err != nil {
		return r
	}

	client := &http.Client{Timeout: 30 * time.Second}
	before, err := scaleSnap(client, adminURL, control, as, fleet)
	if err != nil {
		r.err = err
		return r
	}
	began := time.Now()
	targets := scaleTargets(svcs, tm.steps)
	for i, t := range targets {
		at := began.Add(tm.window * time.Duration(i+1) / time.Duration(len(targets)+1))
		if r.err = scaleSleep(time.Until(at), fleet, as); r.err != nil {
			return r
		}
		st, err := scaleStepService(client, control, t)
		if err != nil {
			r.err = err
			return r
		}
		r.steps = append(r.steps, st)
	}
	if r.err = scaleSleep(time.Until(began.Add(tm.window)), fleet, as); r.err != nil {
		return r
	}
	after, err := scaleSnap(client, adminURL, control, as, fleet)
	if err != nil {
		r.err = err
		return r
	}
	if r.mem, err = memoryOf(as.pid()); err != nil {
		r.err = err
		return r
	}
	if r.fleetMem, err = memoryOf(fleet.pid()); err != nil {
		r.err = err
		return r
	}
	backend, err := scaleBackend(client, adminURL, before.at)
	if err != nil {
		r.err = err
		return r
	}
	r.measure(before, after, backend)
	r.steps = scaleWaitWrites(client, adminURL, r.steps, after.at.Add(tm.stepWait))

	if profile && e.opts.profileDir != "" {
		r.profile = scaleProfile(e, bins[scaleAutoscalerPkg], adminURL, n, tm.profile)
	}
	return r
}

// scaleSleep waits d, or fails as soon as one of the processes exits.
func scaleSleep(d time.Duration, procs ...*process) error {
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	for {
		for _, p := range procs {
			select {
			case <-p.done:
				return fmt.Errorf("%s exited (%v); see %s", p.name, p.err, p.log)
			default:
			}
		}
		select {
		case <-t.C:
			return nil
		case <-time.After(scalePoll):
		}
	}
}

// scaleSnapshot is one reading of everything the window compares.
type scaleSnapshot struct {
	at            time.Time
	cpu, fleetCPU time.Duration
	metrics       map[string]*dto.MetricFamily
	fleet         scaleFleetStats
	backend       scaleTotals
}

// scaleFleetStats are the fleet's counters (GET /stats on its control
// API).
type scaleFleetStats struct {
	Connections int64  `json:"connections"`
	Scrapes     uint64 `json:"scrapes"`
	FDExhausted uint64 `json:"fdExhausted"`
	Strays      uint64 `json:"strays"`
}

// scaleTotals are the autoscaler harness's backend figures (GET
// /backend).
type scaleTotals struct {
	ReadyPods int               `json:"readyPods"`
	Writes    map[string]uint64 `json:"writes"`
	PerSecond []struct {
		Unix   int64             `json:"unix"`
		Writes map[string]uint32 `json:"writes"`
	} `json:"perSecond"`
}

func scaleSnap(client *http.Client, adminURL, control string, as, fleet *process) (s scaleSnapshot, err error) {
	s.at = time.Now()
	if s.cpu, err = cpuTime(as.pid()); err != nil {
		return s, err
	}
	if s.fleetCPU, err = cpuTime(fleet.pid()); err != nil {
		return s, err
	}
	if s.metrics, err = scrapeMetrics(client, adminURL+network.MetricsPath); err != nil {
		return s, fmt.Errorf("autoscaler metrics: %w", err)
	}
	if err = getJSON(client, "http://"+control+"/stats", &s.fleet); err != nil {
		return s, fmt.Errorf("fleet stats: %w", err)
	}
	if err = getJSON(client, adminURL+"/backend", &s.backend); err != nil {
		return s, fmt.Errorf("autoscaler backend: %w", err)
	}
	return s, nil
}

func scaleBackend(client *http.Client, adminURL string, since time.Time) (scaleTotals, error) {
	var t scaleTotals
	err := getJSON(client, adminURL+"/backend?since="+url.QueryEscape(since.Format(time.RFC3339Nano)), &t)
	return t, err
}

func getJSON(client *http.Client, u string, v any) error {
	resp, err := client.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		return fmt.Errorf("GET %s: %s: %s", u, resp.Status, strings.TrimSpace(b.String()))
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// measure fills r from the window's two readings.
func (r *scaleResult) measure(before, after scaleSnapshot, backend scaleTotals) {
	span := after.at.Sub(before.at)
	secs := span.Seconds()
	r.window = span
	r.cpu = (after.cpu - before.cpu).Seconds() / secs
	r.fleetCPU = (after.fleetCPU - before.fleetCPU).Seconds() / secs
	a, b := after.metrics, before.metrics
	r.openFDs, _ = gaugeOf(a, "process_open_fds")
	r.maxFD, _ = gaugeOf(a, "process_max_fds")
	r.goroutines, _ = gaugeOf(a, "go_goroutines")
	r.readyPods = after.backend.ReadyPods
	r.fleetFDExhausted = after.fleet.FDExhausted

	// window is what a histogram observed between the two readings.
	window := func(name string) histogram {
		ha, _ := histogramOf(a, name)
		hb, _ := histogramOf(b, name)
		return ha.since(hb)
	}
	rounds := window("swell_autoscaler_collection_round_duration_seconds")
	r.rounds = float64(rounds.count())
	if r.rounds > 0 {
		r.roundMean = rounds.sum / r.rounds
	}
	r.roundP99 = rounds.quantile(0.99)
	r.scrapeP99 = window("swell_autoscaler_scrape_duration_seconds").quantile(0.99)
	delta := func(name string) float64 { return counterOf(a, name) - counterOf(b, name) }
	r.roundsDropped = delta("swell_autoscaler_collection_rounds_dropped_total")
	r.missing = delta("swell_autoscaler_samples_missing_total")
	r.scrapes = map[string]float64{}
	for res, v := range counterByLabel(a, "swell_autoscaler_scrapes_total", "result") {
		r.scrapes[res] = v - counterByLabel(b, "swell_autoscaler_scrapes_total", "result")[res]
	}
	r.activators, _ = gaugeOf(a, "swell_autoscaler_activators_connected")
	frames, frames0 := counterByLabel(a, "swell_autoscaler_activator_frames_total", "type"), counterByLabel(b, "swell_autoscaler_activator_frames_total", "type")
	r.reports, r.pokes = frames["report"]-frames0["report"], frames["poke"]-frames0["poke"]

	r.writes = map[string]uint64{}
	for op, v := range after.backend.Writes {
		r.writes[op] = v - before.backend.Writes[op]
	}
	for _, s := range backend.PerSecond {
		if s.Unix >= before.at.Unix() && s.Unix < after.at.Unix() {
			r.maxScaleWrite = max(r.maxScaleWrite, s.Writes["scale"])
		}
	}
}

// scaleTargets picks the services to step: every scaleStepsZeroEvery-th
// a zero service (woken: the poke path), the others busy ones (the tick
// path), each kind's spread evenly over the services' order (the loop's
// and its collection rounds' order, so that a round that cannot finish
// shows in the steps), in the order stepped. When a kind has too few
// services, the other makes up the steps.
func scaleTargets(svcs []pods.Service, steps int) []pods.Service {
	var busy, zero []pods.Service
	for _, s := range svcs {
		switch s.Kind {
		case pods.KindBusy:
			busy = append(busy, s)
		case pods.KindZero:
			zero = append(zero, s)
		}
	}
	nZero := min(steps/scaleStepsZeroEvery, len(zero))
	nBusy := min(steps-nZero, len(busy))
	nZero = min(steps-nBusy, len(zero))
	spread := func(pool []pods.Service, n int) []pods.Service {
		out := make([]pods.Service, n)
		for j := range n {
			out[j] = pool[(2*j+1)*len(pool)/(2*n)]
		}
		return out
	}
	b, z := spread(busy, nBusy), spread(zero, nZero)
	var out []pods.Service
	for i := 0; len(b)+len(z) > 0; i++ {
		if (i+1)%scaleStepsZeroEvery == 0 && len(z) > 0 || len(b) == 0 {
			out, z = append(out, z[0]), z[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return out
}

// scaleStepService steps a service's load through the fleet's control
// API: a busy service's pods hold three times their load, a zero
// service wakes.
func scaleStepService(client *http.Client, control string, s pods.Service) (scaleStep, error) {
	resp, err := client.Post("http://"+control+"/step?service="+url.QueryEscape(s.Service), "", nil)
	if err != nil {
		return scaleStep{}, fmt.Errorf("step %s: %w", s.Service, err)
	}
	defer resp.Body.Close()
	var a struct {
		Served time.Time `json:"served"`
	}
	if resp.StatusCode != http.StatusOK {
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		return scaleStep{}, fmt.Errorf("step %s: %s: %s", s.Service, resp.Status, strings.TrimSpace(b.String()))
	}
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		return scaleStep{}, fmt.Errorf("step %s: %w", s.Service, err)
	}
	return scaleStep{service: s.Service, kind: s.Kind, served: a.Served}, nil
}

// scaleWaitWrites looks for each step's first scale write after it was
// served, until deadline.
func scaleWaitWrites(client *http.Client, adminURL string, steps []scaleStep, deadline time.Time) []scaleStep {
	for {
		left := 0
		for i := range steps {
			s := &steps[i]
			if !s.wrote.IsZero() {
				continue
			}
			var w struct {
				Time time.Time `json:"time"`
			}
			u := adminURL + "/writes?service=" + url.QueryEscape(s.service) + "&after=" + url.QueryEscape(s.served.Format(time.RFC3339Nano))
			if err := getJSON(client, u, &w); err == nil {
				s.wrote = w.Time
				continue
			}
			left++
		}
		if left == 0 || time.Now().After(deadline) {
			return steps
		}
		time.Sleep(scalePoll)
	}
}

// scaleLatencies are the decision latencies of the steps of a kind ("" for
// all), and how many steps saw no write.
func (r *scaleResult) latencies(kind string) (ds []time.Duration, missed int) {
	for _, s := range r.steps {
		if kind != "" && s.kind != kind {
			continue
		}
		if d, ok := s.latency(); ok {
			ds = append(ds, d)
		} else {
			missed++
		}
	}
	return ds, missed
}

// decideP99 is the p99 of every step's latency in milliseconds, a step
// without a write counting as infinitely long: +Inf when the p99 falls on
// one, NaN without steps.
func (r *scaleResult) decideP99() float64 {
	ds, missed := r.latencies("")
	all := make([]float64, 0, len(ds)+missed)
	for _, d := range ds {
		all = append(all, float64(d)/float64(time.Millisecond))
	}
	for range missed {
		all = append(all, math.Inf(1))
	}
	if len(all) == 0 {
		return math.NaN()
	}
	slices.Sort(all)
	return all[min(max(int(math.Ceil(0.99*float64(len(all))))-1, 0), len(all)-1)]
}

// scaleLine is a size's one plain line, for grep and for the record.
func scaleLine(r scaleResult) string {
	if r.err != nil && r.rounds == 0 {
		return fmt.Sprintf("scale services=%d pods=%d failed=%q", r.services, r.pods, r.err.Error())
	}
	return fmt.Sprintf("scale services=%d pods=%d cpu_cores=%.2f rss_mib=%.0f scrape_p99_ms=%.0f decide_p99_ms=%s",
		r.services, r.pods, r.cpu, float64(r.mem.RSS)/(1<<20), r.roundP99*1000, scaleMillis(r.decideP99()))
}

// scaleMillis formats milliseconds to the unit; "inf" and "nan" as such.
func scaleMillis(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "inf"
	case math.IsNaN(v):
		return "nan"
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

// scaleSection is a size's table.
func scaleSection(r scaleResult, tm scaleTiming) section {
	s := section{title: fmt.Sprintf("Scale: %d services × %d pods", r.services, scalePodsPerService)}
	if r.err != nil && r.rounds == 0 {
		s.text = fmt.Sprintf("Did not run to the end: %v", r.err)
		s.notes = []string{fmt.Sprintf("Load average (1, 5, 15 min): %s before, %s after.", r.loadBefore, r.loadAfter)}
		return s
	}
	secs := r.window.Seconds()
	per := func(v float64) string { return fmt.Sprintf("%.0f/s", v/secs) }
	seconds := func(v float64) string { return fmt.Sprintf("%.0f ms", v*1000) }
	lat := func(kind string) string {
		ds, missed := r.latencies(kind)
		if len(ds) == 0 && missed == 0 {
			return "—"
		}
		out := fmt.Sprintf("p50 %s, p99 %s (%d steps)", ms(percentile(ds, 0.5)), ms(percentile(ds, 0.99)), len(ds))
		if len(ds) == 0 {
			out = "no write"
		}
		if missed > 0 {
			out += fmt.Sprintf("; **%d without a write** within %s", missed, tm.stepWait)
		}
		return out
	}
	var failures []string
	for _, res := range []string{"timeout", "error", "status", "malformed"} {
		if v := r.scrapes[res]; v > 0 {
			failures = append(failures, fmt.Sprintf("%s %s", res, per(v)))
		}
	}
	failed := "none"
	if len(failures) > 0 {
		failed = "**" + strings.Join(failures, ", ") + "**"
	}
	rows := [][]string{
		{"services; the fleet's pods; pods ready at the end", fmt.Sprintf("%d; %d; %d", r.services, r.pods, r.readyPods)},
		{"autoscaler CPU", fmt.Sprintf("%.2f cores", r.cpu)},
		{"autoscaler RSS at the end; peak (VmHWM)", fmt.Sprintf("%s; %s", mib(r.mem.RSS), mib(r.mem.Peak))},
		{"autoscaler goroutines; open files (limit)", fmt.Sprintf("%.0f; %.0f (%.0f)", r.goroutines, r.openFDs, r.maxFD)},
		{"collection rounds; not started (previous still running)", fmt.Sprintf("%.0f; %.0f", r.rounds, r.roundsDropped)},
		{"collection round, mean; p99", fmt.Sprintf("%s; %s", seconds(r.roundMean), seconds(r.roundP99))},
		{"scrapes answered; one scrape's p99", fmt.Sprintf("%s; %s", per(r.scrapes["ok"]), seconds(r.scrapeP99))},
		{"scrapes failed", failed},
		{"service-seconds without a sample", per(r.missing)},
		{"activators connected; their reports, pokes", fmt.Sprintf("%.0f; %s, %s", r.activators, per(r.reports), per(r.pokes))},
		{"decision latency, load step → scale write: busy service (scrape, window, tick)", lat(pods.KindBusy)},
		{"decision latency: service at zero woken (poke)", lat(pods.KindZero)},
		{"scale writes; most in one second", fmt.Sprintf("%s; %d", per(float64(r.writes["scale"])), r.maxScaleWrite)},
		{"route writes; prefer-removal writes", fmt.Sprintf("%s; %s", per(float64(r.writes["route"])), per(float64(r.writes["prefer-removal"])))},
		{"fleet CPU; RSS at the end", fmt.Sprintf("%.2f cores; %s", r.fleetCPU, mib(r.fleetMem.RSS))},
	}
	s.text = fmt.Sprintf("Measured over %s after %s of settling. Rounds and scrapes are the autoscaler's own histograms "+
		"(`swell_autoscaler_collection_round_duration_seconds`, `swell_autoscaler_scrape_duration_seconds`), their p99 "+
		"interpolated within a bucket as `histogram_quantile` does.", r.window.Round(time.Second), tm.settle)
	s.header = []string{"metric", "value"}
	s.rows = rows
	s.notes = append(s.notes, fmt.Sprintf("Load average (1, 5, 15 min): %s before, %s after.", r.loadBefore, r.loadAfter))
	s.notes = append(s.notes, scaleConditions(r)...)
	if r.err != nil {
		s.notes = append(s.notes, fmt.Sprintf("**Failed after the window**: %v", r.err))
	}
	return s
}

// scaleConditions says what limited a size, when something did.
func scaleConditions(r scaleResult) []string {
	var notes []string
	secs := r.window.Seconds()
	if r.missing > 0 {
		notes = append(notes, fmt.Sprintf("**Rounds ran out of time**: %.0f services a second had no sample. A round fails the scrapes "+
			"it has not started by its deadline (the `timeout` failures, made without a request); the next round starts with them, so the "+
			"services that go without change from second to second, and their windows leave those seconds out.", r.missing/secs))
	}
	if r.scrapes["error"] > 0 && r.maxFD > 0 && r.openFDs >= 0.95*r.maxFD {
		notes = append(notes, fmt.Sprintf("**The autoscaler ran out of file descriptors**: %.0f open of %.0f, one per pod it keeps a "+
			"connection to; the `error` failures are dials refused.", r.openFDs, r.maxFD))
	}
	if r.fleetFDExhausted > 0 {
		notes = append(notes, fmt.Sprintf("**The fleet ran out of file descriptors** (%d times since it started): it holds the other end "+
			"of every connection, so past that point connections waited in its backlog.", r.fleetFDExhausted))
	}
	return notes
}

// scaleProfile takes a CPU profile of the autoscaler, after the window so
// that the profiler's cost skews no figure.
func scaleProfile(e *env, bin, adminURL string, n int, d time.Duration) section {
	s := section{title: fmt.Sprintf("Scale: autoscaler CPU profile at %d services", n)}
	if err := os.MkdirAll(e.opts.profileDir, 0o755); err != nil {
		s.text = fmt.Sprintf("Skipped: %v", err)
		return s
	}
	file := filepath.Join(e.opts.profileDir, fmt.Sprintf("scale-autoscaler-%d.pprof", n))
	top, err := profileWithPprof(adminURL, bin, file, int(d.Seconds()), func() error { return nil })
	if err != nil {
		s.text = fmt.Sprintf("Failed: %v", err)
		return s
	}
	s.text = fmt.Sprintf("`go tool pprof -top` of %s/debug/pprof/profile for %s after the window; the profile is %s.", adminURL, d, file)
	s.code = top
	return s
}
