package main

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/swell-run/swell/hack/scale/pods"
	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/shard"
)

// The scale scenario: the autoscaler alone, at 1,000, 3,000 and 10,000
// services of 5 pods each, then 10,000 divided into 10 buckets among 3
// autoscaler processes (scaleshard.go). A fake fleet (hack/scale/fleet)
// serves every pod's stats endpoint (from as many processes as the
// open-file limit takes for its pods) and opens three activators' report
// streams; the autoscaler (hack/scale/autoscaler) is the real loop,
// collector, activator endpoint and executor, wired as cmd/autoscaler
// wires them, over a backend that records its writes in place of
// Kubernetes. After a settling time, a window measures each autoscaler's
// CPU and memory, its collection rounds (from its own metrics) and its
// writes, while a few services' load is stepped through the fleet's
// control API to time the decisions.

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

// scaleSize is one size of the autoscaler's part: its services, and how
// many autoscaler processes divide them.
type scaleSize struct {
	services int
	// buckets divide the services (package shard) among replicas
	// autoscaler processes, replica i leading the buckets b with
	// b%replicas == i: the even share kube/buckets settles at (4, 3, 3 for
	// 10 among 3), fixed here. One bucket: one leader.
	buckets, replicas int
}

// scaleSizes are the sizes measured by default (-scale-sizes), in order;
// -quick measures them all too. The sharded size comes after the one
// leader of the same services, which its figures are set against.
var scaleSizes = []scaleSize{
	{services: 1000, buckets: 1, replicas: 1},
	{services: 3000, buckets: 1, replicas: 1},
	{services: 10000, buckets: 1, replicas: 1},
	{services: 10000, buckets: 10, replicas: 3},
}

func (s scaleSize) sharded() bool { return s.replicas > 1 }

// flag is the size as -scale-sizes names it: N, or N/B/R.
func (s scaleSize) flag() string {
	if s.sharded() {
		return fmt.Sprintf("%d/%d/%d", s.services, s.buckets, s.replicas)
	}
	return strconv.Itoa(s.services)
}

func scaleSizesFlag(sizes []scaleSize) string {
	s := make([]string, len(sizes))
	for i, size := range sizes {
		s[i] = size.flag()
	}
	return strings.Join(s, ",")
}

// parseScaleSizes reads -scale-sizes: comma-separated sizes, each N
// services for one leader or N/B/R, N services in B buckets led by R
// autoscaler processes. Every bad size is reported.
func parseScaleSizes(s string) ([]scaleSize, error) {
	var sizes []scaleSize
	var errs []error
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		parts := strings.Split(f, "/")
		nums := make([]int, len(parts))
		bad := len(parts) != 1 && len(parts) != 3
		for i, p := range parts {
			var err error
			if nums[i], err = strconv.Atoi(p); err != nil {
				bad = true
			}
		}
		size := scaleSize{buckets: 1, replicas: 1}
		if !bad {
			size.services = nums[0]
			if len(nums) == 3 {
				size.buckets, size.replicas = nums[1], nums[2]
			}
			bad = size.services < 1 || len(nums) == 3 && (shard.Check(size.buckets) != nil || size.replicas < 2 || size.replicas > size.buckets)
		}
		if bad {
			errs = append(errs, fmt.Errorf("size %q: accepted is N services (N ≥ 1), or N/B/R: N services in B buckets led by R autoscalers, 2 ≤ R ≤ B ≤ %d", f, shard.MaxBuckets))
			continue
		}
		sizes = append(sizes, size)
	}
	return sizes, errors.Join(errs...)
}

// lead is the buckets replica i leads.
func (s scaleSize) lead(i int) []int {
	var out []int
	for b := i; b < s.buckets; b += s.replicas {
		out = append(out, b)
	}
	return out
}

// replicaOf is the replica leading the service key.
func (s scaleSize) replicaOf(key string) int { return shard.Of(key, s.buckets) % s.replicas }

// name names the size's files and processes.
func (s scaleSize) name() string {
	if s.sharded() {
		return fmt.Sprintf("%d-shard", s.services)
	}
	return strconv.Itoa(s.services)
}

func (s scaleSize) String() string {
	if s.sharded() {
		return fmt.Sprintf("%d services × %d pods, %d buckets led by %d autoscalers", s.services, scalePodsPerService, s.buckets, s.replicas)
	}
	return fmt.Sprintf("%d services × %d pods", s.services, scalePodsPerService)
}

// scaleFleetReserve is the files a fleet process keeps beside its pods'
// connections (the fleet raises its limit to its pods and 1,024).
const scaleFleetReserve = 1024

// scaleFleetProcesses is how many processes serve a fleet of pods: each
// holds the far end of a connection per pod scraped, and a process can
// hold as many files as the hard limit (20,000 on the machine the figures
// in docs/performance.md come from: at 50,000 pods, three processes).
// limit is that hard limit, 0 when unknown (one process).
func scaleFleetProcesses(pods int, limit uint64) int {
	if limit <= scaleFleetReserve || uint64(pods)+scaleFleetReserve <= limit {
		return 1
	}
	per := int(limit - scaleFleetReserve)
	return (pods + per - 1) / per
}

// hardFileLimit is this process's hard open-file limit, which its
// children inherit; 0 when unknown.
func hardFileLimit() uint64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0
	}
	return l.Max
}

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

// The parts of the scale scenario (-scale-parts).
const (
	scalePartAutoscaler = "autoscaler"
	scalePartActivator  = "activator"
)

var scaleParts = []string{scalePartAutoscaler, scalePartActivator}

// parseScaleParts reads -scale-parts: a comma-separated list of
// scaleParts.
func parseScaleParts(s string) (map[string]bool, error) {
	parts := map[string]bool{}
	var unknown []string
	for p := range strings.SplitSeq(s, ",") {
		p = strings.TrimSpace(p)
		if !slices.Contains(scaleParts, p) {
			unknown = append(unknown, strconv.Quote(p))
			continue
		}
		parts[p] = true
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("unknown part %s: accepted are %s", strings.Join(unknown, ", "), strings.Join(scaleParts, ", "))
	}
	return parts, nil
}

func scaleScenario(e *env) ([]section, error) {
	var secs []section
	var errs []error
	var lines []string
	if e.opts.scaleParts[scalePartAutoscaler] {
		s, l, err := scaleAutoscaler(e)
		secs, lines = append(secs, s...), append(lines, l...)
		if err != nil {
			errs = append(errs, err)
		}
		if e.opts.scaleChart != "" && len(lines) > 0 {
			source := "go run ./hack/bench -scenario scale, " + time.Now().UTC().Format("2006-01-02 15:04 MST")
			if err := writeScaleChartFile(e.opts.scaleChart, source, []byte(strings.Join(lines, "\n"))); err != nil {
				errs = append(errs, err)
			} else {
				logf("scale: wrote %s", e.opts.scaleChart)
			}
		}
	}
	if e.opts.scaleChart != "" && !e.opts.scaleParts[scalePartAutoscaler] {
		logf("scale: no chart: -scale-chart draws the autoscaler's part, which did not run")
	}
	if e.opts.scaleParts[scalePartActivator] {
		a, out, err := scaleActivatorRun(e)
		if err != nil {
			logf("scale: the activator: %v", err)
			errs = append(errs, fmt.Errorf("the activator: %w", err))
			secs = append(secs, section{title: "Scale: the activator", text: fmt.Sprintf("Failed: %v", err), code: out})
		} else {
			secs = append(secs, scaleActivatorSection(a, out))
			lines = append(lines, scaleActivatorLine(a))
			logf("%s", lines[len(lines)-1])
		}
	}
	secs = append(secs, section{
		title: "Scale: summary",
		text: "One `scale` line per size: the autoscaler's CPU in cores over the window, its resident memory at the end, the p99 of its " +
			"collection rounds and of the time from a load change being served to the scale write (every step, both paths). " +
			"The sharded size has a `scale-shard replica=I` line per autoscaler process, with the buckets it leads and the fleet's " +
			"services and pods in them, and a `scale-shard replicas=R` line for them all: CPU and memory summed, the slowest " +
			"replica's rounds, every step, and the most loaded replica's CPU over the least loaded's. " +
			"The `scale-activator` line: the activator's heap and resident bytes per service routed, its Host lookup in ns and " +
			"that over 10 services', the same for a request through its chain, the report bytes and frames a second with a tenth " +
			"of the services busy and with all, and the heap it kept per service removed.",
		code: strings.Join(lines, "\n"),
	})
	return secs, errors.Join(errs...)
}

// scaleAutoscaler measures the autoscaler at each of -scale-sizes, and
// returns the sections and each size's lines.
func scaleAutoscaler(e *env) ([]section, []string, error) {
	bins, err := e.build(scaleFleetPkg, scaleAutoscalerPkg)
	if err != nil {
		return nil, nil, err
	}
	tm := scaleTimings(e.opts.quick)
	token := filepath.Join(e.work, "scale-token")
	if err := os.WriteFile(token, []byte(rand.Text()+"\n"), 0o600); err != nil {
		return nil, nil, err
	}
	largest := 0
	for _, size := range e.opts.scaleSizes {
		if !size.sharded() {
			largest = max(largest, size.services)
		}
	}
	var secs []section
	var errs []error
	var lines []string
	// oneLeader are the one-leader sizes measured, by services: a sharded
	// size is set against the one of its services.
	oneLeader := map[int]scaleResult{}
	for _, size := range e.opts.scaleSizes {
		logf("scale: %s: settle %s, measure %s", size, tm.settle, tm.window)
		r := scaleRun(e, bins, token, size, tm, !size.sharded() && size.services == largest)
		if r.err != nil {
			logf("scale: %s: %v", size, r.err)
			errs = append(errs, fmt.Errorf("%s: %w", size, r.err))
		}
		var out []string
		if size.sharded() {
			var single *scaleResult
			if o, ok := oneLeader[size.services]; ok {
				single = &o
			}
			secs = append(secs, scaleShardSection(r, single, tm))
			out = scaleShardLines(r)
		} else {
			oneLeader[size.services] = r
			secs = append(secs, scaleSection(r, tm))
			out = []string{scaleLine(r)}
		}
		if r.profile.title != "" {
			secs = append(secs, r.profile)
		}
		lines = append(lines, out...)
		for _, l := range out {
			logf("%s", l)
		}
	}
	return secs, lines, errors.Join(errs...)
}

// scaleResult is what one size measured.
type scaleResult struct {
	size scaleSize
	pods int
	// loadBefore and loadAfter are the machine's load averages around the
	// size's run.
	loadBefore, loadAfter string
	window                time.Duration
	// measured says the window was measured to its end.
	measured bool

	// The fleet's processes; their CPU over the window, in cores, and
	// their memory at its end, summed.
	fleetProcs int
	fleetCPU   float64
	fleetMem   memory
	// fleetFDExhausted counts the fleet's accepts refused for want of a
	// file descriptor, since it started.
	fleetFDExhausted uint64

	// replicas are the autoscaler processes, in order (one for one
	// leader).
	replicas []scaleReplica

	profile section
	err     error
}

// scaleReplica is what one autoscaler process measured.
type scaleReplica struct {
	// lead are the buckets it leads; services and pods the fleet's in
	// them.
	lead           []int
	services, pods int

	// Its CPU over the window, in cores; its memory at its end.
	cpu            float64
	mem            memory
	openFDs, maxFD float64
	goroutines     float64

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

	// steps are the load steps of its services, with their outcome.
	steps []scaleStep
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

// freePorts returns n distinct free ports on the loopback address.
func freePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// scaleRun measures one size. Its processes are stopped when it returns.
func scaleRun(e *env, bins map[string]string, token string, size scaleSize, tm scaleTiming, profile bool) (r scaleResult) {
	r.size, r.pods, r.window = size, size.services*scalePodsPerService, tm.window
	r.fleetProcs = scaleFleetProcesses(r.pods, hardFileLimit())
	r.loadBefore = loadAverage()
	defer func() { r.loadAfter = loadAverage() }()

	ports, err := freePorts(1 + r.fleetProcs + 2*size.replicas)
	if err != nil {
		r.err = err
		return r
	}
	addr := func(p int) string { return "127.0.0.1:" + strconv.Itoa(p) }
	podPort := ports[0]
	controls := make([]string, r.fleetProcs)
	for i := range controls {
		controls[i] = addr(ports[1+i])
	}
	listens, admins := make([]string, size.replicas), make([]string, size.replicas)
	for i := range listens {
		listens[i], admins[i] = addr(ports[1+r.fleetProcs+2*i]), addr(ports[2+r.fleetProcs+2*i])
	}
	// Stopped in the reverse order of their start: the autoscalers, then
	// the fleet.
	var started []*process
	defer func() {
		for i := len(started) - 1; i >= 0; i-- {
			started[i].stop()
		}
	}()

	podsFile := filepath.Join(e.work, fmt.Sprintf("scale-%s-pods.jsonl", size.name()))
	fleetArgs := []string{"-services", strconv.Itoa(size.services), "-pods-per-service", strconv.Itoa(scalePodsPerService),
		"-seed", strconv.Itoa(scaleSeed), "-port", strconv.Itoa(podPort)}
	if r.fleetProcs > 1 {
		fleetArgs = append(fleetArgs, "-epoch", time.Now().UTC().Truncate(time.Second).Format(time.RFC3339),
			"-share", filepath.Join(e.work, fmt.Sprintf("scale-%s-table", size.name())))
	}
	for i, control := range controls {
		args := append(slices.Clone(fleetArgs), "-control", control)
		name := fmt.Sprintf("scale-fleet-%s", size.name())
		if i == 0 {
			// The first process runs the activators and takes the steps.
			args = append(args, "-out", podsFile, "-autoscaler", "ws://"+listens[0]+network.ActivatorReportPath, "-token-file", token)
			if size.sharded() {
				leaders := make([]string, size.buckets)
				for b := range leaders {
					leaders[b] = listens[b%size.replicas]
				}
				args = append(args, "-leaders", strings.Join(leaders, ","))
			}
		} else {
			name += fmt.Sprintf("-%d", i)
			args = append(args, "-out", filepath.Join(e.work, fmt.Sprintf("scale-%s-pods-%d.jsonl", size.name(), i)))
		}
		p, _, err := startArgs(name, bins[scaleFleetPkg], e.work, args)
		if err != nil {
			r.err = err
			return r
		}
		started = append(started, p)
	}
	fleets := slices.Clone(started)
	for i, p := range fleets {
		if r.err = p.waitHTTP("http://" + controls[i] + "/ready"); r.err != nil {
			return r
		}
	}
	var autoscalers []*process
	for i := range size.replicas {
		args := []string{"-pods", podsFile, "-listen", listens[i], "-admin", admins[i], "-token-file", token}
		name := fmt.Sprintf("scale-autoscaler-%s", size.name())
		if size.sharded() {
			args = append(args, "-buckets", strconv.Itoa(size.buckets), "-lead", joinInts(size.lead(i)))
			name += fmt.Sprintf("-%d", i)
		}
		p, _, err := startArgs(name, bins[scaleAutoscalerPkg], e.work, args)
		if err != nil {
			r.err = err
			return r
		}
		started = append(started, p)
		autoscalers = append(autoscalers, p)
	}
	adminURLs := make([]string, size.replicas)
	for i, p := range autoscalers {
		adminURLs[i] = "http://" + admins[i]
		if r.err = p.waitHTTP(adminURLs[i] + "/ready"); r.err != nil {
			return r
		}
	}
	svcs, err := pods.ReadFile(podsFile)
	if err != nil {
		r.err = err
		return r
	}
	r.replicas = make([]scaleReplica, size.replicas)
	byReplica := make([][]pods.Service, size.replicas)
	for _, s := range svcs {
		i := size.replicaOf(s.Service)
		byReplica[i] = append(byReplica[i], s)
		r.replicas[i].services++
		r.replicas[i].pods += len(s.Pods)
	}
	for i := range r.replicas {
		r.replicas[i].lead = size.lead(i)
	}
	if r.err = scaleSleep(tm.settle, started...); r.err != nil {
		return r
	}

	client := &http.Client{Timeout: 30 * time.Second}
	before, err := scaleSnap(client, adminURLs, controls, autoscalers, fleets)
	if err != nil {
		r.err = err
		return r
	}
	began := time.Now()
	// Each replica's services are stepped as many times as one leader's.
	var targets [][]pods.Service
	for _, s := range byReplica {
		targets = append(targets, scaleTargets(s, tm.steps))
	}
	steps := interleave(targets)
	for i, t := range steps {
		at := began.Add(tm.window * time.Duration(i+1) / time.Duration(len(steps)+1))
		if r.err = scaleSleep(time.Until(at), started...); r.err != nil {
			return r
		}
		st, err := scaleStepService(client, controls[0], t)
		if err != nil {
			r.err = err
			return r
		}
		rep := &r.replicas[size.replicaOf(t.Service)]
		rep.steps = append(rep.steps, st)
	}
	if r.err = scaleSleep(time.Until(began.Add(tm.window)), started...); r.err != nil {
		return r
	}
	after, err := scaleSnap(client, adminURLs, controls, autoscalers, fleets)
	if err != nil {
		r.err = err
		return r
	}
	for i, p := range autoscalers {
		if r.replicas[i].mem, err = memoryOf(p.pid()); err != nil {
			r.err = err
			return r
		}
	}
	for _, p := range fleets {
		m, err := memoryOf(p.pid())
		if err != nil {
			r.err = err
			return r
		}
		r.fleetMem.RSS += m.RSS
		r.fleetMem.Peak += m.Peak
	}
	backends := make([]scaleTotals, size.replicas)
	for i, u := range adminURLs {
		if backends[i], err = scaleBackend(client, u, before.at); err != nil {
			r.err = err
			return r
		}
	}
	r.measure(before, after, backends)
	for i := range r.replicas {
		rep := &r.replicas[i]
		rep.steps = scaleWaitWrites(client, adminURLs[i], rep.steps, after.at.Add(tm.stepWait))
	}

	if profile && e.opts.profileDir != "" {
		r.profile = scaleProfile(e, bins[scaleAutoscalerPkg], adminURLs[0], size.services, tm.profile)
	}
	return r
}

// interleave takes one of each list in turn, in order, until all are
// taken.
func interleave[T any](lists [][]T) []T {
	var out []T
	for i := 0; ; i++ {
		took := false
		for _, l := range lists {
			if i < len(l) {
				out = append(out, l[i])
				took = true
			}
		}
		if !took {
			return out
		}
	}
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
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
	at time.Time
	// fleetCPU and fleet are summed over the fleet's processes.
	fleetCPU time.Duration
	fleet    scaleFleetStats
	replicas []scaleReplicaSnapshot
}

// scaleReplicaSnapshot is one autoscaler process's part of a reading.
type scaleReplicaSnapshot struct {
	cpu     time.Duration
	metrics map[string]*dto.MetricFamily
	backend scaleTotals
}

// scaleFleetStats are the fleet's counters (GET /stats on its control
// API).
type scaleFleetStats struct {
	Connections int64  `json:"connections"`
	Scrapes     uint64 `json:"scrapes"`
	FDExhausted uint64 `json:"fdExhausted"`
	Strays      uint64 `json:"strays"`
}

func (s *scaleFleetStats) add(o scaleFleetStats) {
	s.Connections += o.Connections
	s.Scrapes += o.Scrapes
	s.FDExhausted += o.FDExhausted
	s.Strays += o.Strays
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

func scaleSnap(client *http.Client, adminURLs, controls []string, autoscalers, fleets []*process) (s scaleSnapshot, err error) {
	s.at = time.Now()
	// The CPU times first, close together; the HTTP readings after.
	s.replicas = make([]scaleReplicaSnapshot, len(autoscalers))
	for i, p := range autoscalers {
		if s.replicas[i].cpu, err = cpuTime(p.pid()); err != nil {
			return s, err
		}
	}
	for _, p := range fleets {
		c, err := cpuTime(p.pid())
		if err != nil {
			return s, err
		}
		s.fleetCPU += c
	}
	for i, u := range adminURLs {
		rs := &s.replicas[i]
		if rs.metrics, err = scrapeMetrics(client, u+network.MetricsPath); err != nil {
			return s, fmt.Errorf("autoscaler metrics: %w", err)
		}
		if err = getJSON(client, u+"/backend", &rs.backend); err != nil {
			return s, fmt.Errorf("autoscaler backend: %w", err)
		}
	}
	for _, c := range controls {
		var fs scaleFleetStats
		if err = getJSON(client, "http://"+c+"/stats", &fs); err != nil {
			return s, fmt.Errorf("fleet stats: %w", err)
		}
		s.fleet.add(fs)
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

// measure fills r from the window's two readings and each replica's
// backend since the first.
func (r *scaleResult) measure(before, after scaleSnapshot, backends []scaleTotals) {
	span := after.at.Sub(before.at)
	secs := span.Seconds()
	r.window = span
	r.fleetCPU = (after.fleetCPU - before.fleetCPU).Seconds() / secs
	r.fleetFDExhausted = after.fleet.FDExhausted
	for i := range r.replicas {
		r.replicas[i].measure(before.at, after.at, before.replicas[i], after.replicas[i], backends[i])
	}
	r.measured = true
}

// measure fills p from its two readings, taken at from and to, and its
// backend since the first.
func (p *scaleReplica) measure(from, to time.Time, before, after scaleReplicaSnapshot, backend scaleTotals) {
	secs := to.Sub(from).Seconds()
	p.cpu = (after.cpu - before.cpu).Seconds() / secs
	a, b := after.metrics, before.metrics
	p.openFDs, _ = gaugeOf(a, "process_open_fds")
	p.maxFD, _ = gaugeOf(a, "process_max_fds")
	p.goroutines, _ = gaugeOf(a, "go_goroutines")
	p.readyPods = after.backend.ReadyPods

	// window is what a histogram observed between the two readings.
	window := func(name string) histogram {
		ha, _ := histogramOf(a, name)
		hb, _ := histogramOf(b, name)
		return ha.since(hb)
	}
	rounds := window("swell_autoscaler_collection_round_duration_seconds")
	p.rounds = float64(rounds.count())
	if p.rounds > 0 {
		p.roundMean = rounds.sum / p.rounds
	}
	p.roundP99 = rounds.quantile(0.99)
	p.scrapeP99 = window("swell_autoscaler_scrape_duration_seconds").quantile(0.99)
	delta := func(name string) float64 { return counterOf(a, name) - counterOf(b, name) }
	p.roundsDropped = delta("swell_autoscaler_collection_rounds_dropped_total")
	p.missing = delta("swell_autoscaler_samples_missing_total")
	p.scrapes = map[string]float64{}
	for res, v := range counterByLabel(a, "swell_autoscaler_scrapes_total", "result") {
		p.scrapes[res] = v - counterByLabel(b, "swell_autoscaler_scrapes_total", "result")[res]
	}
	p.activators, _ = gaugeOf(a, "swell_autoscaler_activators_connected")
	frames, frames0 := counterByLabel(a, "swell_autoscaler_activator_frames_total", "type"), counterByLabel(b, "swell_autoscaler_activator_frames_total", "type")
	p.reports, p.pokes = frames["report"]-frames0["report"], frames["poke"]-frames0["poke"]

	p.writes = map[string]uint64{}
	for op, v := range after.backend.Writes {
		p.writes[op] = v - before.backend.Writes[op]
	}
	for _, s := range backend.PerSecond {
		if s.Unix >= from.Unix() && s.Unix < to.Unix() {
			p.maxScaleWrite = max(p.maxScaleWrite, s.Writes["scale"])
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

// latencies are the decision latencies of the steps of a kind ("" for
// all), and how many steps saw no write.
func latencies(steps []scaleStep, kind string) (ds []time.Duration, missed int) {
	for _, s := range steps {
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

// decideP99 is the p99 of the steps' latencies in milliseconds, a step
// without a write counting as infinitely long: +Inf when the p99 falls on
// one, NaN without steps.
func decideP99(steps []scaleStep) float64 {
	ds, missed := latencies(steps, "")
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

// steps are every replica's steps.
func (r *scaleResult) steps() []scaleStep {
	var all []scaleStep
	for _, p := range r.replicas {
		all = append(all, p.steps...)
	}
	return all
}

// scaleLine is a one-leader size's one plain line, for grep and for the
// record.
func scaleLine(r scaleResult) string {
	if !r.measured || len(r.replicas) == 0 {
		return fmt.Sprintf("scale services=%d pods=%d failed=%q", r.size.services, r.pods, errString(r.err))
	}
	p := r.replicas[0]
	return fmt.Sprintf("scale services=%d pods=%d cpu_cores=%.2f rss_mib=%.0f scrape_p99_ms=%.0f decide_p99_ms=%s",
		r.size.services, r.pods, p.cpu, float64(p.mem.RSS)/(1<<20), p.roundP99*1000, scaleMillis(decideP99(p.steps)))
}

func errString(err error) string {
	if err == nil {
		return "not measured"
	}
	return err.Error()
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

// scaleFigures formats one replica's figures for the sections' tables.
type scaleFigures struct {
	p       scaleReplica
	secs    float64
	maxWait time.Duration
}

func (f scaleFigures) per(v float64) string { return fmt.Sprintf("%.0f/s", v/f.secs) }

func (f scaleFigures) lat(kind string) string {
	ds, missed := latencies(f.p.steps, kind)
	if len(ds) == 0 && missed == 0 {
		return "—"
	}
	out := fmt.Sprintf("p50 %s, p99 %s (%d steps)", ms(percentile(ds, 0.5)), ms(percentile(ds, 0.99)), len(ds))
	if len(ds) == 0 {
		out = "no write"
	}
	if missed > 0 {
		out += fmt.Sprintf("; **%d without a write** within %s", missed, f.maxWait)
	}
	return out
}

func (f scaleFigures) failed() string {
	var failures []string
	for _, res := range []string{"timeout", "error", "status", "malformed"} {
		if v := f.p.scrapes[res]; v > 0 {
			failures = append(failures, fmt.Sprintf("%s %s", res, f.per(v)))
		}
	}
	if len(failures) == 0 {
		return "none"
	}
	return "**" + strings.Join(failures, ", ") + "**"
}

// millis formats seconds in milliseconds.
func millis(v float64) string { return fmt.Sprintf("%.0f ms", v*1000) }

// scaleSection is a one-leader size's table.
func scaleSection(r scaleResult, tm scaleTiming) section {
	s := section{title: fmt.Sprintf("Scale: %d services × %d pods", r.size.services, scalePodsPerService)}
	if !r.measured || len(r.replicas) == 0 {
		s.text = fmt.Sprintf("Did not run to the end: %v", errString(r.err))
		s.notes = []string{fmt.Sprintf("Load average (1, 5, 15 min): %s before, %s after.", r.loadBefore, r.loadAfter)}
		return s
	}
	p := r.replicas[0]
	f := scaleFigures{p: p, secs: r.window.Seconds(), maxWait: tm.stepWait}
	rows := [][]string{
		{"services; the fleet's pods; pods ready at the end", fmt.Sprintf("%d; %d; %d", r.size.services, r.pods, p.readyPods)},
		{"autoscaler CPU", fmt.Sprintf("%.2f cores", p.cpu)},
		{"autoscaler RSS at the end; peak (VmHWM)", fmt.Sprintf("%s; %s", mib(p.mem.RSS), mib(p.mem.Peak))},
		{"autoscaler goroutines; open files (limit)", fmt.Sprintf("%.0f; %.0f (%.0f)", p.goroutines, p.openFDs, p.maxFD)},
		{"collection rounds; not started (previous still running)", fmt.Sprintf("%.0f; %.0f", p.rounds, p.roundsDropped)},
		{"collection round, mean; p99", fmt.Sprintf("%s; %s", millis(p.roundMean), millis(p.roundP99))},
		{"scrapes answered; one scrape's p99", fmt.Sprintf("%s; %s", f.per(p.scrapes["ok"]), millis(p.scrapeP99))},
		{"scrapes failed", f.failed()},
		{"service-seconds without a sample", f.per(p.missing)},
		{"activators connected; their reports, pokes", fmt.Sprintf("%.0f; %s, %s", p.activators, f.per(p.reports), f.per(p.pokes))},
		{"decision latency, load step → scale write: busy service (scrape, window, tick)", f.lat(pods.KindBusy)},
		{"decision latency: service at zero woken (poke)", f.lat(pods.KindZero)},
		{"scale writes; most in one second", fmt.Sprintf("%s; %d", f.per(float64(p.writes["scale"])), p.maxScaleWrite)},
		{"route writes; prefer-removal writes", fmt.Sprintf("%s; %s", f.per(float64(p.writes["route"])), f.per(float64(p.writes["prefer-removal"])))},
		{"fleet CPU; RSS at the end (processes)", fmt.Sprintf("%.2f cores; %s (%d)", r.fleetCPU, mib(r.fleetMem.RSS), r.fleetProcs)},
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
	for i, p := range r.replicas {
		who := "The autoscaler"
		if len(r.replicas) > 1 {
			who = fmt.Sprintf("Replica %d", i)
		}
		if p.missing > 0 {
			notes = append(notes, fmt.Sprintf("**%s's rounds ran out of time**: %.0f services a second had no sample. A round fails the scrapes "+
				"it has not started by its deadline (the `timeout` failures, made without a request); the next round starts with them, so the "+
				"services that go without change from second to second, and their windows leave those seconds out.", who, p.missing/secs))
		}
		if p.scrapes["error"] > 0 && p.maxFD > 0 && p.openFDs >= 0.95*p.maxFD {
			notes = append(notes, fmt.Sprintf("**%s ran out of file descriptors**: %.0f open of %.0f, one per pod it keeps a "+
				"connection to; the `error` failures are dials refused.", who, p.openFDs, p.maxFD))
		}
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
