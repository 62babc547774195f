package main

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Sampling: a watcher lists `swell local`'s children every second, so that
// replicas that come and go between samples are counted; a sample measures
// every Swell process alive at that moment.

// Prometheus gauges of the Go runtime, served by `swell local`'s admin
// port and each queue-proxy's metrics port.
const (
	metricGoroutines = "go_goroutines"
	metricHeap       = "go_memstats_heap_inuse_bytes"
	// metricHeapGoal is the heap size at which the next GC starts, set by
	// the last GC from the live heap it found (about twice it, with GOGC=100):
	// unlike the heap in use, it counts no garbage made since.
	metricHeapGoal = "go_memstats_next_gc_bytes"
	metricThreads  = "go_threads"
)

// proc is a child process of `swell local`.
type proc struct {
	pid  int
	kind kind
	// metricsPort is a queue-proxy's metrics port (QUEUE_METRICS_PORT),
	// 0 for an app.
	metricsPort int
}

// watcher follows `swell local`'s children. It is safe for concurrent use.
type watcher struct {
	fs    procFS
	bin   string // the soak's swell binary
	local int    // `swell local`'s pid

	mu       sync.Mutex
	live     map[int]proc
	started  map[kind]int
	stopped  map[kind]int
	scanErrs int
}

func newWatcher(fs procFS, bin string, local int) *watcher {
	return &watcher{fs: fs, bin: bin, local: local, live: map[int]proc{}, started: map[kind]int{}, stopped: map[kind]int{}}
}

// scan lists the children once: new ones are counted as started, those
// gone as stopped. Scans hold the lock throughout, so that an older list
// never follows a newer one.
func (w *watcher) scan() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	pids, err := w.fs.children(w.local)
	if err != nil {
		w.scanErrs++
		return err
	}
	now := make(map[int]bool, len(pids))
	for _, pid := range pids {
		now[pid] = true
	}
	for pid, p := range w.live {
		if !now[pid] {
			delete(w.live, pid)
			w.stopped[p.kind]++
		}
	}
	for _, pid := range pids {
		if _, ok := w.live[pid]; ok {
			continue
		}
		argv, err := w.fs.cmdline(pid)
		if err != nil {
			continue // gone already, or not readable yet
		}
		p := proc{pid: pid, kind: classify(argv, w.bin)}
		switch p.kind {
		case kindQueue:
			env, err := w.fs.environ(pid)
			if err != nil {
				continue
			}
			p.metricsPort = envPort(env, "QUEUE_METRICS_PORT")
		case kindApp:
		default:
			// Forked but not yet exec'd (it still reads as `swell
			// local`): known at the next scan.
			continue
		}
		w.live[pid] = p
		w.started[p.kind]++
	}
	return nil
}

// procs returns the live children.
func (w *watcher) procs() []proc {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]proc, 0, len(w.live))
	for _, p := range w.live {
		out = append(out, p)
	}
	return out
}

// churn is how many children of each kind were seen to start and stop.
type churn struct{ started, stopped map[kind]int }

func (w *watcher) churn() churn {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := churn{started: map[kind]int{}, stopped: map[kind]int{}}
	for k, n := range w.started {
		c.started[k] = n
	}
	for k, n := range w.stopped {
		c.stopped[k] = n
	}
	return c
}

func (w *watcher) failedScans() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.scanErrs
}

// waitChildren waits up to timeout for `swell local` to have n children
// (a replica leaves the status before its processes have exited); it
// reports whether it got there. A timeout of 0 looks once.
func (w *watcher) waitChildren(n int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		_ = w.scan()
		if len(w.procs()) == n {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sampleAt is when a sample is due, since the traffic began.
type sampleAt struct {
	at time.Duration
	// roundEnd: the end of a round of the plan, when the services should
	// be at rest.
	roundEnd bool
}

// sampleTimes are the samples after the start: every interval, the end of
// every round of a run of length total, and the end of the run, in order.
func sampleTimes(total, interval time.Duration) []sampleAt {
	round, _ := rounds(total)
	ends := map[time.Duration]bool{}
	for _, h := range []time.Duration{0, total / 2} {
		for t := h + round; t <= h+total/2; t += round {
			ends[t] = true
		}
	}
	at := []time.Duration{total}
	for t := interval; t < total; t += interval {
		at = append(at, t)
	}
	for t := range ends {
		at = append(at, t)
	}
	slices.Sort(at)
	at = slices.Compact(at)
	out := make([]sampleAt, len(at))
	for i, t := range at {
		out[i] = sampleAt{at: t, roundEnd: ends[t]}
	}
	return out
}

// run scans every interval until ctx ends.
func (w *watcher) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		_ = w.scan()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// reading is one process measured. Figures a process does not serve are
// NaN: an app has no metrics port.
type reading struct {
	pid                                 int
	kind                                kind
	rss, fds                            float64
	goroutines, heap, heapGoal, threads float64
}

// measurer measures processes.
type measurer struct {
	fs     procFS
	client *http.Client
}

// measure reads p's resident set and open files from /proc and, when
// metricsURL is not empty, its Go runtime's gauges. ok is false when the
// process was gone before its /proc entries were read.
func (m measurer) measure(ctx context.Context, pid int, k kind, metricsURL string) (r reading, ok bool) {
	r = reading{pid: pid, kind: k, goroutines: math.NaN(), heap: math.NaN(), heapGoal: math.NaN(), threads: math.NaN()}
	rss, err := m.fs.rss(pid)
	if err != nil {
		return r, false
	}
	fds, err := m.fs.fds(pid)
	if err != nil {
		return r, false
	}
	r.rss, r.fds = float64(rss), float64(fds)
	if metricsURL == "" {
		return r, true
	}
	g, err := m.scrape(ctx, metricsURL)
	if err != nil {
		return r, true
	}
	if v, ok := g[metricGoroutines]; ok {
		r.goroutines = v
	}
	if v, ok := g[metricHeap]; ok {
		r.heap = v
	}
	if v, ok := g[metricHeapGoal]; ok {
		r.heapGoal = v
	}
	if v, ok := g[metricThreads]; ok {
		r.threads = v
	}
	return r, true
}

func (m measurer) scrape(ctx context.Context, url string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := m.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return gauges(resp.Body, metricGoroutines, metricHeap, metricHeapGoal, metricThreads)
}

// readAll measures `swell local` (its metrics at localMetrics) and procs.
func (m measurer) readAll(ctx context.Context, local int, localMetrics string, procs []proc) []reading {
	var out []reading
	if r, ok := m.measure(ctx, local, kindLocal, localMetrics); ok {
		out = append(out, r)
	}
	for _, p := range procs {
		url := ""
		if p.metricsPort > 0 {
			url = "http://127.0.0.1:" + strconv.Itoa(p.metricsPort) + "/metrics"
		}
		if r, ok := m.measure(ctx, p.pid, p.kind, url); ok {
			out = append(out, r)
		}
	}
	return out
}

// snapshot is everything one sample row is made from.
type snapshot struct {
	readings []reading
	// longLived are the pids of the queue-proxies alive at the first
	// sample: the pinned services' replicas.
	longLived map[int]bool
	churn     churn
	totals    totals
}

// row is one sample: a value per column, NaN where none.
type row struct {
	at    time.Duration // since the traffic began
	label string        // "start", "end" or ""
	// rest: the services were as at the start when it was taken: the
	// pinned ones' replicas alone.
	rest bool
	v    []float64
}

func makeRow(at time.Duration, label string, rest bool, s *snapshot) row {
	r := row{at: at, label: label, rest: rest, v: make([]float64, len(columns))}
	for i, c := range columns {
		r.v[i] = c.value(s)
	}
	return r
}

// agg folds the values of several processes into one figure.
type agg int

const (
	aggSum agg = iota
	aggMax
	aggMean
	aggCount
)

// stat folds f over the readings keep selects; NaN values are skipped, and
// NaN is the result when nothing is left (a count is then 0).
func stat(s *snapshot, keep func(*snapshot, reading) bool, f func(reading) float64, a agg) float64 {
	n, acc := 0, 0.0
	for _, r := range s.readings {
		if !keep(s, r) {
			continue
		}
		v := f(r)
		if a != aggCount && math.IsNaN(v) {
			continue
		}
		switch {
		case a == aggMax && n > 0:
			acc = math.Max(acc, v)
		case a == aggCount:
			acc++
		default:
			acc += v
		}
		n++
	}
	switch {
	case a == aggCount:
		return acc
	case n == 0:
		return math.NaN()
	case a == aggMean:
		return acc / float64(n)
	}
	return acc
}

func isKind(k kind) func(*snapshot, reading) bool {
	return func(_ *snapshot, r reading) bool { return r.kind == k }
}

func isLongLived(s *snapshot, r reading) bool { return r.kind == kindQueue && s.longLived[r.pid] }

func rssOf(r reading) float64        { return r.rss }
func fdsOf(r reading) float64        { return r.fds }
func goroutinesOf(r reading) float64 { return r.goroutines }
func heapOf(r reading) float64       { return r.heap }
func heapGoalOf(r reading) float64   { return r.heapGoal }
func threadsOf(r reading) float64    { return r.threads }
func one(reading) float64            { return 1 }
