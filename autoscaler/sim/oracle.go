package sim

import (
	"cmp"
	"context"
	"math"
	"slices"
	"time"

	"github.com/swell-run/swell/pkg/autoscaling"
)

// Oracle is the name `swell sim --policy oracle` gives the clairvoyant
// bound in comparisons. It is no autoscaling class: nothing could run it.
const Oracle autoscaling.Class = "oracle"

// RunOracle computes the clairvoyant lower bound for the requests of src
// under cfg's pod model: the fewest pod-seconds any autoscaler could spend
// on this traffic with no request ever waiting for a pod, knowing every
// arrival and service time in advance. Its Summary reads like a
// simulation's (no waits, no cold starts, every latency its service time)
// and its Timeline has the pods, the load and the arrivals of each
// second; the decision columns stay zero.
//
// How it is computed (docs/sim.md, "The oracle"):
//
//  1. Every request is served the moment it arrives, for exactly its work:
//     it is in service over [arrival, arrival + work).
//  2. A pod serves at most S requests at full speed, S being the pod
//     capacity (cfg.Pods.Capacity, else the container concurrency); with
//     no limit at all one pod serves everything. At each instant the
//     service needs P(t) = ceil(N(t) / S) ready pods, N(t) being the
//     requests in service then. Requests are taken to move freely between
//     pods, so P(t) is a lower bound on what any placement needs.
//  3. Pods are interchangeable, so the k-th pod is needed exactly when
//     P(t) ≥ k, and each "level" k is costed on its own. Its pod must be
//     started StartupDelay before each stretch of need (a start costs
//     StartupDelay pod-seconds: it exists while starting); between two
//     stretches it is kept through a gap g if g ≤ StartupDelay (cost g)
//     and otherwise stopped at the gap's start and started again
//     StartupDelay before its end (cost StartupDelay), whichever is
//     cheaper — the offline answer of the ski-rental problem. Summed over
//     the levels this is the least cost, since any schedule's pods, ranked
//     by how long they have existed, cover each level at least as long.
//  4. Pods of cfg.InitialReady exist at 0 without a start; the startup
//     jitter is ignored (it could only add); pods may be started before 0
//     for a request that arrives sooner than StartupDelay (a bound, not a
//     schedule: nothing waits).
//
// Requests arriving at or after cfg.Duration (when set) are dropped, as in
// Run. The bound ignores the autoscaling spec but for its container
// concurrency; queue limits and route delays do not apply.
func RunOracle(ctx context.Context, cfg Config, src Source) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	slots := cfg.Pods.Capacity
	if slots == 0 {
		slots = cfg.Spec.ContainerConcurrency
	}
	o := oracle{startup: cfg.Pods.StartupDelay, slots: slots, cores: cfg.cores()}
	var reqs []Request
	for {
		r, ok := src.Next()
		if !ok || (cfg.Duration > 0 && r.Arrival >= cfg.Duration) {
			break
		}
		reqs = append(reqs, r)
		if len(reqs)%4096 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return o.run(reqs, cfg.InitialReady), nil
}

// oracle holds the bound's settings and, while it runs, each level's pod.
type oracle struct {
	startup time.Duration
	slots   int // 0: no limit
	cores   float64

	levels []level
	// lives are the pods' lives, [start, end) with ready from start +
	// startup (or from start for the initial pods), for the timeline.
	lives []life
	sum   Summary
	area  time.Duration // pod-time, summed as the levels close stretches
	ready time.Duration // ready pod-time
	// serving is the pod-time of levels needed: a pod with requests in
	// service; spans are those stretches, for the timeline.
	serving time.Duration
	spans   []span
}

type span struct{ from, to time.Duration }

// level is the k-th pod: alive since born (ready from readyAt) and, when
// not needed now, idle since idleSince.
type level struct {
	alive, needed bool
	born, readyAt time.Duration
	idleSince     time.Duration
	// neededSince is when the level's current stretch of need began.
	neededSince time.Duration
}

type life struct{ start, ready, end time.Duration }

// need returns the pods needed with n requests in service.
func (o *oracle) need(n int) int {
	switch {
	case n <= 0:
		return 0
	case o.slots <= 0:
		return 1
	}
	return (n + o.slots - 1) / o.slots
}

// edge is a change of the requests in service: +1 at an arrival, −1 at a
// completion; completions first at the same instant, so a slot freed is
// reused at once.
type edge struct {
	at    time.Duration
	delta int
}

func (o *oracle) run(reqs []Request, initial int) *Result {
	o.sum = Summary{Class: Oracle, Requests: len(reqs), Completed: len(reqs)}
	edges := make([]edge, 0, 2*len(reqs))
	lat := make([]time.Duration, 0, len(reqs))
	var latSum float64
	for _, r := range reqs {
		work := max(r.Work, 0)
		edges = append(edges, edge{r.Arrival, +1}, edge{r.Arrival + work, -1})
		lat = append(lat, work)
		latSum += float64(work)
	}
	slices.SortStableFunc(edges, func(a, b edge) int {
		if a.at != b.at {
			return cmp.Compare(a.at, b.at)
		}
		return a.delta - b.delta
	})
	// The initial pods: alive and idle from 0, as if just left by a load.
	for range initial {
		o.levels = append(o.levels, level{alive: true})
	}

	n, pods := 0, 0
	var end time.Duration
	for i := 0; i < len(edges); {
		t := edges[i].at
		for ; i < len(edges) && edges[i].at == t; i++ {
			n += edges[i].delta
		}
		want := o.need(n)
		for k := pods; k < want; k++ {
			o.busy(k, t)
		}
		for k := want; k < pods; k++ {
			o.idle(k, t)
		}
		pods = want
		end = t
	}
	// The end: every level stops when last needed.
	for k := range o.levels {
		o.stop(k, o.levels[k].idleSince)
	}

	o.sum.Duration = ceilSecond(max(end, 0))
	o.sum.PodSeconds = o.area.Seconds()
	o.sum.ReadyPodSeconds = o.ready.Seconds()
	o.sum.ServingPodSeconds = o.serving.Seconds()
	o.sum.StartingPodSeconds = (o.area - o.ready).Seconds()
	o.sum.IdlePodSeconds = (o.ready - o.serving).Seconds()
	slices.Sort(lat)
	o.sum.LatencyP50, o.sum.LatencyP99 = percentile(lat, 0.50), percentile(lat, 0.99)
	if len(lat) > 0 {
		o.sum.LatencyMax = lat[len(lat)-1]
		o.sum.LatencyMean = time.Duration(math.Round(latSum / float64(len(lat))))
	}
	return &Result{Summary: o.sum, Timeline: o.timeline(reqs)}
}

// busy: level k is needed from t.
func (o *oracle) busy(k int, t time.Duration) {
	for len(o.levels) <= k {
		o.levels = append(o.levels, level{})
	}
	l := &o.levels[k]
	switch {
	case !l.alive:
		o.start(l, t)
	case t-l.idleSince > o.startup:
		// Stopping at the gap's start and starting again costs less than
		// keeping the pod through it.
		o.stop(k, l.idleSince)
		o.start(l, t)
	}
	if !l.needed {
		l.neededSince = t
	}
	l.needed = true
}

// start starts level l's pod startup before t.
func (o *oracle) start(l *level, t time.Duration) {
	l.alive, l.born, l.readyAt = true, t-o.startup, t
	o.sum.PodStarts++
}

// idle: level k is not needed from t.
func (o *oracle) idle(k int, t time.Duration) {
	l := &o.levels[k]
	if l.needed {
		o.serving += t - l.neededSince
		o.spans = append(o.spans, span{l.neededSince, t})
	}
	l.needed, l.idleSince = false, t
}

// stop ends level k's pod at t, recording its life.
func (o *oracle) stop(k int, t time.Duration) {
	l := &o.levels[k]
	if !l.alive {
		return
	}
	o.lives = append(o.lives, life{start: l.born, ready: l.readyAt, end: t})
	o.area += t - l.born
	o.ready += t - l.readyAt
	l.alive = false
}

// timeline draws the bound second by second: pods existing and ready at
// each second's end, arrivals, and the time-weighted requests in service.
func (o *oracle) timeline(reqs []Request) []Second {
	secs := int(o.sum.Duration / time.Second)
	tl := make([]Second, secs)
	for i := range tl {
		tl[i].T = i
	}
	at := func(d time.Duration) int { return int(d / time.Second) }
	// Pods and ready pods at the end of second i: lives holding instant i+1.
	podDelta := make([]int, secs+2)
	readyDelta := make([]int, secs+2)
	mark := func(delta []int, from, to time.Duration) {
		// Instants i+1 in [from, to): i from ceil(from)-1 to ceil(to)-2.
		a := max(ceilIndex(from)-1, 0)
		b := ceilIndex(to) - 1
		if a < b && a < len(delta) {
			delta[a]++
			delta[min(b, len(delta)-1)]--
		}
	}
	for _, lf := range o.lives {
		mark(podDelta, lf.start, lf.end)
		mark(readyDelta, lf.ready, lf.end)
	}
	servingDelta := make([]int, secs+2)
	for _, sp := range o.spans {
		mark(servingDelta, sp.from, sp.to)
	}
	pods, ready, serving := 0, 0, 0
	for i := range tl {
		pods += podDelta[i]
		ready += readyDelta[i]
		serving += servingDelta[i]
		tl[i].Pods, tl[i].Ready, tl[i].Serving = pods, ready, serving
		o.sum.MaxPods = max(o.sum.MaxPods, pods)
		o.sum.MaxReady = max(o.sum.MaxReady, ready)
	}
	for _, r := range reqs {
		if i := at(r.Arrival); i >= 0 && i < secs {
			tl[i].Arrivals++
		}
		// Spread the request's time in service over the seconds it spans.
		from, to := max(r.Arrival, 0), r.Arrival+max(r.Work, 0)
		for i := at(from); i < secs && time.Duration(i)*time.Second < to; i++ {
			lo := max(from, time.Duration(i)*time.Second)
			hi := min(to, time.Duration(i+1)*time.Second)
			if hi > lo {
				tl[i].Concurrency += (hi - lo).Seconds()
			}
			if to > time.Duration(i+1)*time.Second && from < time.Duration(i+1)*time.Second {
				tl[i].InService++
			}
		}
	}
	if o.slots > 0 {
		// Every request is served at full speed, each keeping a slot busy.
		for i := range tl {
			tl[i].CPU, tl[i].HasCPU = tl[i].Concurrency*o.cores/float64(o.slots), true
		}
	}
	return tl
}

// ceilIndex is ceil(d / 1s) for the timeline.
func ceilIndex(d time.Duration) int {
	return int((d + time.Second - 1) / time.Second)
}

func ceilSecond(d time.Duration) time.Duration {
	return time.Duration(ceilIndex(d)) * time.Second
}
