package main

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
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
// autoscaler processes (scaleshard.go), each size twice, side by side:
// the autoscaler scraping every pod (pull), then the pods pushing their
// stats to it (push). A fake fleet (hack/scale/fleet) serves every pod's
// stats endpoint and, pushing, keeps each pod's websocket to the
// autoscaler (from as many processes as the open-file limit takes for
// its pods' connections), and opens three activators' report streams;
// the autoscaler (hack/scale/autoscaler) is the real loop, collector,
// activator and pod endpoints and executor, wired as cmd/autoscaler wires
// them, over a backend that records its writes in place of Kubernetes.
// After a settling time, a window measures each autoscaler's CPU and
// memory, its collection rounds (from its own metrics) and its writes,
// while a few services' load is stepped through the fleet's control API
// to time the decisions.

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

// scaleFleetConns is the connections a fleet of pods may hold in a mode:
// the far end of each pod's scrape connection; pushing, each pod's push
// connection too, since a pod's scrape connection is kept idle for 10 s
// after its pushes take over (and for good where the autoscaler takes no
// more pushes).
func scaleFleetConns(pods int, mode string) int {
	if mode == scaleModePush {
		return 2 * pods
	}
	return pods
}

// scaleFleetProcesses is how many processes serve a fleet holding conns
// connections (scaleFleetConns): a process can hold as many files as the
// hard limit (20,000 on the machine the figures in docs/performance.md
// come from: at 50,000 pods, three processes pulling, six pushing). limit
// is that hard limit, 0 when unknown (one process).
func scaleFleetProcesses(conns int, limit uint64) int {
	if limit <= scaleFleetReserve || uint64(conns)+scaleFleetReserve <= limit {
		return 1
	}
	per := int(limit - scaleFleetReserve)
	return (conns + per - 1) / per
}

// scalePushSettle is added to the settling time pushing: a pod's scrape
// connection idles out 10 s after its pushes take over, and the files it
// held are the autoscaler's only then.
const scalePushSettle = 10 * time.Second

// scalePushFits says whether each autoscaler process can hold a push
// connection from every pod of its services that may be ready (those of
// the services at zero are not), beside the files it keeps for the rest,
// within the hard open-file limit (0: unknown, taken to fit). Where it
// cannot, the run would measure a starved process, not the autoscaler:
// the error says what to raise.
func scalePushFits(size scaleSize, byReplica [][]pods.Service, limit uint64) error {
	if limit == 0 {
		return nil
	}
	for i, svcs := range byReplica {
		n := 0
		for _, s := range svcs {
			if s.Kind != pods.KindZero {
				n += len(s.Pods)
			}
		}
		if need := uint64(n + scaleFleetReserve); need > limit {
			who := "the autoscaler"
			if size.sharded() {
				who = fmt.Sprintf("replica %d", i)
			}
			return fmt.Errorf("pushing, %s would hold a connection from each of %d pods that may be ready and %d files more, %d in all, "+
				"past the hard open-file limit of %d: raise `ulimit -Hn`, or measure it sharded", who, n, scaleFleetReserve, need, limit)
		}
	}
	return nil
}

// scalePushDials is the push connections the fleet opens a second at
// most, in all: at 50,000 pods about 8 s of dials once the autoscaler
// has scraped them, well within the settling time.
const scalePushDials = 6000

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

// The modes of the autoscaler's part (-scale-modes): how it gets the
// pods' stats.
const (
	// scaleModePull: it scrapes every ready pod every second.
	scaleModePull = "pull"
	// scaleModePush: every pod pushes its stats to it, each period it
	// closes and at once on a step; it scrapes only a pod without a fresh
	// push.
	scaleModePush = "push"
)

var scaleModes = []string{scaleModePull, scaleModePush}

// parseScaleModes reads -scale-modes: a comma-separated list of
// scaleModes, each once, run in that order for every size. Every bad
// element is reported.
func parseScaleModes(s string) ([]string, error) {
	var modes []string
	var errs []error
	for m := range strings.SplitSeq(s, ",") {
		m = strings.TrimSpace(m)
		switch {
		case !slices.Contains(scaleModes, m):
			errs = append(errs, fmt.Errorf("unknown mode %q: accepted are %s", m, strings.Join(scaleModes, ", ")))
		case slices.Contains(modes, m):
			errs = append(errs, fmt.Errorf("mode %s named twice", m))
		default:
			modes = append(modes, m)
		}
	}
	return modes, errors.Join(errs...)
}

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
		text: "One `scale` line per size and mode (`pull`: the autoscaler scrapes every pod; `push`: the pods push their stats): the " +
			"autoscaler's CPU in cores over the window, its resident memory at the end, the services a second without a sample " +
			"(`unsampled`, 0 when every service's window got a figure every second), and the p50 and p99 of the time from a busy " +
			"service's load step to its scale write (the tick path, or pushing the decision a sharp push triggers; a step without a " +
			"write counts as infinitely long). " +
			"The sharded size has a `scale-shard replica=I` line per autoscaler process and mode, with the buckets it leads and the fleet's " +
			"services and pods in them, and a `scale-shard replicas=R` line for them all: CPU and memory summed, the slowest " +
			"replica's rounds, every step (both paths), and the most loaded replica's CPU over the least loaded's. " +
			"The `scale-activator` line: the activator's heap and resident bytes per service routed, its Host lookup in ns and " +
			"that over 10 services', the same for a request through its chain, the report bytes and frames a second with a tenth " +
			"of the services busy and with all, and the heap it kept per service removed.",
		code: strings.Join(lines, "\n"),
	})
	return secs, errors.Join(errs...)
}

// scaleAutoscaler measures the autoscaler at each of -scale-sizes, in
// each of -scale-modes one after the other, and returns the sections and
// each run's lines.
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
	// oneLeader are the one-leader sizes measured, by services and mode:
	// a sharded size is set against the one of its services and mode.
	type sizeMode struct {
		services int
		mode     string
	}
	oneLeader := map[sizeMode]scaleResult{}
	for _, size := range e.opts.scaleSizes {
		var runs []scaleResult
		var profiles []section
		for _, mode := range e.opts.scaleModes {
			settle := tm.settle
			if mode == scaleModePush {
				settle += scalePushSettle
			}
			logf("scale: %s, %s: settle %s, measure %s", size, mode, settle, tm.window)
			r := scaleRun(e, bins, token, size, mode, tm, !size.sharded() && size.services == largest)
			if r.err != nil {
				logf("scale: %s, %s: %v", size, mode, r.err)
				errs = append(errs, fmt.Errorf("%s, %s: %w", size, mode, r.err))
			}
			var out []string
			if size.sharded() {
				var single *scaleResult
				if o, ok := oneLeader[sizeMode{size.services, mode}]; ok {
					single = &o
				}
				secs = append(secs, scaleShardSection(r, single, tm))
				out = scaleShardLines(r)
			} else {
				oneLeader[sizeMode{size.services, mode}] = r
				runs = append(runs, r)
				out = []string{scaleLine(r)}
			}
			if r.profile.title != "" {
				profiles = append(profiles, r.profile)
			}
			lines = append(lines, out...)
			for _, l := range out {
				logf("%s", l)
			}
		}
		if len(runs) > 0 {
			secs = append(secs, scaleSection(runs, tm))
		}
		secs = append(secs, profiles...)
	}
	return secs, lines, errors.Join(errs...)
}

// scaleResult is what one size measured in one mode.
type scaleResult struct {
	size scaleSize
	mode string
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
	// fleetFDExhausted counts the fleet's accepts, and push dials,
	// refused for want of a file descriptor, since it started.
	fleetFDExhausted uint64
	// fleet are the fleet's counters at the window's end, summed over
	// its processes; fleetFrames the frames its pods pushed in the
	// window.
	fleet       scaleFleetStats
	fleetFrames float64

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
	// Pushing: the pods with a push connection open at the end, the pod
	// reports rounds read from pushes, the frames applied and dropped,
	// the connections refused and closed by reason, and the decisions a
	// sharp push triggered, in the window.
	pushing                   float64
	pushedReads               float64
	pushApplied, pushDropped  float64
	pushRejected, pushClosed  map[string]float64
	pushDecisions, tickDecide float64
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

// scaleRun measures one size in one mode. Its processes are stopped when
// it returns.
func scaleRun(e *env, bins map[string]string, token string, size scaleSize, mode string, tm scaleTiming, profile bool) (r scaleResult) {
	r.size, r.mode, r.pods, r.window = size, mode, size.services*scalePodsPerService, tm.window
	r.fleetProcs = scaleFleetProcesses(scaleFleetConns(r.pods, mode), hardFileLimit())
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

	tag := size.name() + "-" + mode
	podsFile := filepath.Join(e.work, fmt.Sprintf("scale-%s-pods.jsonl", tag))
	fleetArgs := []string{"-services", strconv.Itoa(size.services), "-pods-per-service", strconv.Itoa(scalePodsPerService),
		"-seed", strconv.Itoa(scaleSeed), "-port", strconv.Itoa(podPort)}
	if r.fleetProcs > 1 {
		fleetArgs = append(fleetArgs, "-epoch", time.Now().UTC().Truncate(time.Second).Format(time.RFC3339),
			"-share", filepath.Join(e.work, fmt.Sprintf("scale-%s-table", tag)))
	}
	// Every bucket's leader, for the activators and the pods pushing.
	leaders := make([]string, size.buckets)
	for b := range leaders {
		leaders[b] = listens[b%size.replicas]
	}
	if mode == scaleModePush {
		// Each process pushes for a slice of the pods, spread over the
		// replicas as over a Service's endpoints; a replica sends a pod
		// whose service it does not lead to the one that does.
		urls := make([]string, len(listens))
		for i, l := range listens {
			urls[i] = "ws://" + l
		}
		fleetArgs = append(fleetArgs, "-push", strings.Join(urls, ","), "-push-dials", strconv.Itoa(max(scalePushDials/r.fleetProcs, 1)))
	}
	for i, control := range controls {
		args := append(slices.Clone(fleetArgs), "-control", control)
		if mode == scaleModePush {
			args = append(args, "-push-slice", fmt.Sprintf("%d/%d", i, r.fleetProcs))
		}
		name := "scale-fleet-" + tag
		if i == 0 {
			// The first process runs the activators and takes the steps.
			args = append(args, "-out", podsFile, "-autoscaler", "ws://"+listens[0]+network.ActivatorReportPath, "-token-file", token)
			if size.sharded() {
				args = append(args, "-leaders", strings.Join(leaders, ","))
			}
		} else {
			name += fmt.Sprintf("-%d", i)
			args = append(args, "-out", filepath.Join(e.work, fmt.Sprintf("scale-%s-pods-%d.jsonl", tag, i)))
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
	if mode == scaleModePush {
		if r.err = scalePushFits(size, byReplica, hardFileLimit()); r.err != nil {
			return r
		}
	}
	var autoscalers []*process
	for i := range size.replicas {
		args := []string{"-pods", podsFile, "-listen", listens[i], "-admin", admins[i], "-token-file", token}
		name := "scale-autoscaler-" + tag
		if size.sharded() {
			args = append(args, "-buckets", strconv.Itoa(size.buckets), "-lead", joinInts(size.lead(i)))
			name += fmt.Sprintf("-%d", i)
		}
		if mode == scaleModePush {
			args = append(args, "-push")
			if size.sharded() {
				args = append(args, "-leaders", strings.Join(leaders, ","))
			}
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
	settle := tm.settle
	if mode == scaleModePush {
		settle += scalePushSettle
	}
	if r.err = scaleSleep(settle, started...); r.err != nil {
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
		r.profile = scaleProfile(e, bins[scaleAutoscalerPkg], adminURLs[0], size.services, mode, tm.profile)
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
	// Pushing, the pods' pushes (-push).
	Pushing         int64  `json:"pushing"`
	Pushes          uint64 `json:"pushes"`
	PushDials       uint64 `json:"pushDials"`
	PushRedirects   uint64 `json:"pushRedirects"`
	PushRefused     uint64 `json:"pushRefused"`
	PushUnavailable uint64 `json:"pushUnavailable"`
	PushFailures    uint64 `json:"pushFailures"`
	PushClosed      uint64 `json:"pushClosed"`
	PushFDExhausted uint64 `json:"pushFDExhausted"`
}

func (s *scaleFleetStats) add(o scaleFleetStats) {
	s.Connections += o.Connections
	s.Scrapes += o.Scrapes
	s.FDExhausted += o.FDExhausted
	s.Strays += o.Strays
	s.Pushing += o.Pushing
	s.Pushes += o.Pushes
	s.PushDials += o.PushDials
	s.PushRedirects += o.PushRedirects
	s.PushRefused += o.PushRefused
	s.PushUnavailable += o.PushUnavailable
	s.PushFailures += o.PushFailures
	s.PushClosed += o.PushClosed
	s.PushFDExhausted += o.PushFDExhausted
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
	r.fleetFDExhausted = after.fleet.FDExhausted + after.fleet.PushFDExhausted
	r.fleet = after.fleet
	r.fleetFrames = float64(after.fleet.Pushes - before.fleet.Pushes)
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
	p.pushing, _ = gaugeOf(a, "swell_autoscaler_pods_pushing")
	p.pushedReads = delta("swell_autoscaler_pushed_reads_total")
	byLabel := func(name, label string) map[string]float64 {
		out := map[string]float64{}
		before := counterByLabel(b, name, label)
		for k, v := range counterByLabel(a, name, label) {
			if d := v - before[k]; d != 0 {
				out[k] = d
			}
		}
		return out
	}
	frames := byLabel("swell_autoscaler_push_frames_total", "result")
	p.pushApplied, p.pushDropped = frames["applied"], frames["dropped"]
	p.pushRejected = byLabel("swell_autoscaler_push_rejected_total", "reason")
	p.pushClosed = byLabel("swell_autoscaler_push_disconnects_total", "reason")
	decisions := byLabel("swell_autoscaler_decisions_total", "trigger")
	p.pushDecisions, p.tickDecide = decisions["push"], decisions["tick"]
	p.activators, _ = gaugeOf(a, "swell_autoscaler_activators_connected")
	reports := byLabel("swell_autoscaler_activator_frames_total", "type")
	p.reports, p.pokes = reports["report"], reports["poke"]

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

// stepQuantile is the q-quantile (nearest rank) of the latencies of the
// steps of a kind ("" for all) in milliseconds, a step without a write
// counting as infinitely long: +Inf when the quantile falls on one, NaN
// without steps.
func stepQuantile(steps []scaleStep, kind string, q float64) float64 {
	ds, missed := latencies(steps, kind)
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
	return all[min(max(int(math.Ceil(q*float64(len(all))))-1, 0), len(all)-1)]
}

// decideP99 is the p99 of every step's latency (stepQuantile).
func decideP99(steps []scaleStep) float64 { return stepQuantile(steps, "", 0.99) }

// steps are every replica's steps.
func (r *scaleResult) steps() []scaleStep {
	var all []scaleStep
	for _, p := range r.replicas {
		all = append(all, p.steps...)
	}
	return all
}

// unsampled is the services a second the replica's rounds had no sample
// of (swell_autoscaler_samples_missing_total over the window).
func (p scaleReplica) unsampled(secs float64) float64 {
	if secs <= 0 {
		return 0
	}
	return p.missing / secs
}

// scaleLine is a one-leader size's one plain line in its mode, for grep
// and for the record: CPU, memory, the services a second without a
// sample, and the busy steps' latencies (the tick path, or pushing the
// decision a sharp push triggers).
func scaleLine(r scaleResult) string {
	head := fmt.Sprintf("scale mode=%s services=%d pods=%d", r.mode, r.size.services, r.pods)
	if !r.measured || len(r.replicas) == 0 {
		return fmt.Sprintf("%s failed=%q", head, errString(r.err))
	}
	p := r.replicas[0]
	return fmt.Sprintf("%s cpu_cores=%.2f rss_mib=%.0f unsampled=%.1f step_p50_ms=%s step_p99_ms=%s", head, p.cpu, float64(p.mem.RSS)/(1<<20),
		p.unsampled(r.window.Seconds()), scaleMillis(stepQuantile(p.steps, pods.KindBusy, 0.5)), scaleMillis(stepQuantile(p.steps, pods.KindBusy, 0.99)))
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

// scaleSection is a one-leader size's table: a column for each mode, run
// one after the other in the same run.
func scaleSection(rs []scaleResult, tm scaleTiming) section {
	size := rs[0].size
	s := section{title: fmt.Sprintf("Scale: %d services × %d pods", size.services, scalePodsPerService), header: []string{"metric"}}
	for _, r := range rs {
		s.header = append(s.header, r.mode)
	}
	// row adds a metric, a cell a mode: "—" for a mode that did not
	// measure, or where only the other has the figure (only pushing,
	// when only push has it).
	row := func(name string, pushOnly bool, cell func(f scaleFigures, r scaleResult) string) {
		out := []string{name}
		for _, r := range rs {
			if !r.measured || len(r.replicas) == 0 || pushOnly && r.mode != scaleModePush {
				out = append(out, "—")
				continue
			}
			out = append(out, cell(scaleFigures{p: r.replicas[0], secs: r.window.Seconds(), maxWait: tm.stepWait}, r))
		}
		s.rows = append(s.rows, out)
	}
	row("services; the fleet's pods; pods ready at the end", false, func(f scaleFigures, r scaleResult) string {
		return fmt.Sprintf("%d; %d; %d", r.size.services, r.pods, f.p.readyPods)
	})
	row("**autoscaler CPU, of one core**", false, func(f scaleFigures, _ scaleResult) string { return fmt.Sprintf("%.2f", f.p.cpu) })
	row("autoscaler RSS at the end; peak (VmHWM)", false, func(f scaleFigures, _ scaleResult) string {
		return fmt.Sprintf("%s; %s", mib(f.p.mem.RSS), mib(f.p.mem.Peak))
	})
	row("autoscaler goroutines; open files (limit)", false, func(f scaleFigures, _ scaleResult) string {
		return fmt.Sprintf("%.0f; %.0f (%.0f)", f.p.goroutines, f.p.openFDs, f.p.maxFD)
	})
	row("**services without a sample, a second**", false, func(f scaleFigures, _ scaleResult) string { return fmt.Sprintf("%.1f", f.p.unsampled(f.secs)) })
	row("collection rounds; not started (previous still running)", false, func(f scaleFigures, _ scaleResult) string {
		return fmt.Sprintf("%.0f; %.0f", f.p.rounds, f.p.roundsDropped)
	})
	row("collection round, mean; p99", false, func(f scaleFigures, _ scaleResult) string {
		return fmt.Sprintf("%s; %s", millis(f.p.roundMean), millis(f.p.roundP99))
	})
	row("pod reports a round read: scraped; pushed", false, func(f scaleFigures, _ scaleResult) string {
		return fmt.Sprintf("%s; %s", f.per(f.p.scrapes["ok"]), f.per(f.p.pushedReads))
	})
	row("one scrape's p99; scrapes failed", false, func(f scaleFigures, _ scaleResult) string {
		return fmt.Sprintf("%s; %s", millis(f.p.scrapeP99), f.failed())
	})
	row("pods pushing at the end; frames applied, dropped", true, func(f scaleFigures, _ scaleResult) string {
		return fmt.Sprintf("%.0f; %s, %s", f.p.pushing, f.per(f.p.pushApplied), f.per(f.p.pushDropped))
	})
	row("push connections refused; closed", true, func(f scaleFigures, _ scaleResult) string {
		return fmt.Sprintf("%s; %s", f.byReason(f.p.pushRejected), f.byReason(f.p.pushClosed))
	})
	row("decisions: every tick; on a sharp push", false, func(f scaleFigures, _ scaleResult) string {
		return fmt.Sprintf("%s; %s", f.per(f.p.tickDecide), f.per(f.p.pushDecisions))
	})
	row("activators connected; their reports, pokes", false, func(f scaleFigures, _ scaleResult) string {
		return fmt.Sprintf("%.0f; %s, %s", f.p.activators, f.per(f.p.reports), f.per(f.p.pokes))
	})
	row("**busy step → scale write** (scrape or push, window, tick or sharp push)", false, func(f scaleFigures, _ scaleResult) string { return f.lat(pods.KindBusy) })
	row("service at zero woken (poke) → scale write", false, func(f scaleFigures, _ scaleResult) string { return f.lat(pods.KindZero) })
	row("scale writes; most in one second", false, func(f scaleFigures, _ scaleResult) string {
		return fmt.Sprintf("%s; %d", f.per(float64(f.p.writes["scale"])), f.p.maxScaleWrite)
	})
	row("route writes; prefer-removal writes", false, func(f scaleFigures, _ scaleResult) string {
		return fmt.Sprintf("%s; %s", f.per(float64(f.p.writes["route"])), f.per(float64(f.p.writes["prefer-removal"])))
	})
	row("fleet CPU; RSS at the end (processes)", false, func(_ scaleFigures, r scaleResult) string {
		return fmt.Sprintf("%.2f cores; %s (%d)", r.fleetCPU, mib(r.fleetMem.RSS), r.fleetProcs)
	})
	row("frames the fleet's pods pushed", true, func(f scaleFigures, r scaleResult) string { return f.per(r.fleetFrames) })
	row("fleet's pushes since it started: dials; redirects; refused (403); 503; failed; closed by the autoscaler", true, func(_ scaleFigures, r scaleResult) string {
		fs := r.fleet
		return fmt.Sprintf("%d; %d; %d; %d; %d; %d", fs.PushDials, fs.PushRedirects, fs.PushRefused, fs.PushUnavailable, fs.PushFailures, fs.PushClosed)
	})
	s.text = fmt.Sprintf("Each mode measured over %s after %s of settling (pushing, %s more: a pod's scrape connection idles out 10 s after "+
		"its pushes take over), one after the other: `pull`, the autoscaler scrapes every ready pod "+
		"every second; `push`, every pod keeps a websocket to it and pushes each period it closes, and on a step at once and 100 ms "+
		"later, the autoscaler scraping only a pod without a fresh push. A busy step's latency runs from the first report that carries "+
		"it: pulling, the first close of one of its pods' periods after it; pushing, the step itself. Rounds and scrapes are the "+
		"autoscaler's own histograms (`swell_autoscaler_collection_round_duration_seconds`, `swell_autoscaler_scrape_duration_seconds`), "+
		"their p99 interpolated within a bucket as `histogram_quantile` does.", tm.window.Round(time.Second), tm.settle, scalePushSettle)
	for _, r := range rs {
		note := func(format string, args ...any) { s.notes = append(s.notes, r.mode+": "+fmt.Sprintf(format, args...)) }
		if !r.measured || len(r.replicas) == 0 {
			note("did not run to the end: %v", errString(r.err))
		}
		note("load average (1, 5, 15 min) %s before, %s after.", r.loadBefore, r.loadAfter)
		for _, c := range scaleConditions(r) {
			note("%s", c)
		}
		if r.measured && r.err != nil {
			note("**failed after the window**: %v", r.err)
		}
	}
	return s
}

// byReason formats counts by reason as rates, "none" without any.
func (f scaleFigures) byReason(by map[string]float64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(by)) {
		parts = append(parts, fmt.Sprintf("%s %s", k, f.per(by[k])))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
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
				"connection to, scraping or pushing; the `error` failures are dials refused.", who, p.openFDs, p.maxFD))
		}
		if r.mode == scaleModePush && p.readyPods > 0 && p.pushing < 0.99*float64(p.readyPods) {
			why := "the rest had not connected yet, or were refused"
			if n := p.pushRejected["too-many"]; n > 0 {
				why = fmt.Sprintf("the rest were refused (%.0f a second) for want of files: the open-file limit, %.0f, is below a push "+
					"connection from every pod and room for the rest, so they were scraped", n/secs, p.maxFD)
			}
			notes = append(notes, fmt.Sprintf("**%s had push connections from %.0f of its %d ready pods**: %s.", who, p.pushing, p.readyPods, why))
		}
	}
	if pushing := maxOf(r.replicas, func(p scaleReplica) float64 { return p.pushing }); r.mode == scaleModePush && pushing > 0 {
		total := 0.0
		for _, p := range r.replicas {
			total += p.pushing
		}
		if rate := r.fleetFrames / secs; rate < 0.9*total {
			notes = append(notes, fmt.Sprintf("**The fleet's pods pushed less than a frame a second each**: %.0f frames a second from %.0f "+
				"connections, so each pod's latest push was %.1f s old on average: the fleet's processes, writing a frame per pod on loopback "+
				"(the kernel's share of it, both ends, in their CPU), and the autoscalers did not all get the CPU they asked for (%.2f cores "+
				"the fleet got). The autoscalers' figures are for the frames that came.", rate, total, total/rate, r.fleetCPU))
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
func scaleProfile(e *env, bin, adminURL string, n int, mode string, d time.Duration) section {
	s := section{title: fmt.Sprintf("Scale: autoscaler CPU profile at %d services, %s", n, mode)}
	if err := os.MkdirAll(e.opts.profileDir, 0o755); err != nil {
		s.text = fmt.Sprintf("Skipped: %v", err)
		return s
	}
	file := filepath.Join(e.opts.profileDir, fmt.Sprintf("scale-autoscaler-%d-%s.pprof", n, mode))
	top, err := profileWithPprof(adminURL, bin, file, int(d.Seconds()), func() error { return nil })
	if err != nil {
		s.text = fmt.Sprintf("Failed: %v", err)
		return s
	}
	s.text = fmt.Sprintf("`go tool pprof -top` of %s/debug/pprof/profile for %s after the window; the profile is %s.", adminURL, d, file)
	s.code = top
	return s
}
