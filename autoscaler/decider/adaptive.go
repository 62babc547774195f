package decider

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/swell-run/swell/pkg/autoscaling"
)

// adaptive is the policy that learns each service (docs/autoscaling.md,
// "adaptive"), Swell's default class. It sizes the pods by the work in
// sight rather than by the load's window, and learns four things:
//
//   - How long a request takes in a pod: the pods' own concurrency over
//     their requests (Little's law), which a queue at the activators does
//     not lengthen. With it the policy sizes by work (sized): the pods
//     that serve the arrivals at the target, and the backlog — the
//     requests the activator holds, times that time — drained within one
//     pod start by the pods that will then be ready. Pods already
//     starting count as capacity on its way; a pod no longer needed is
//     let go once keeping it has cost a start. While it does not know
//     the service time it decides as kpa does, except that a queue
//     behind a first start is no reason for more pods.
//   - How fast pods start: measured from each scale-up to the pods being
//     ready. It is the horizon a backlog is drained within, and how early
//     a pod is pre-warmed.
//   - When to let go, and when to come back. Every idle gap — from the
//     last traffic the decider saw to the next — goes into a histogram on a
//     logarithmic scale. From it the policy chooses how long to keep the
//     last pod after traffic stops, or to let it go at once and start one
//     again just before the next request is likely: the plan with the
//     fewest cold starts the past gaps would have had, for no more
//     pod-seconds than kpa would have spent on them — its grace on the
//     last pod, and its stable window on the pods a busy period had,
//     which the sizing lets go instead. This is the hybrid-histogram
//     keep-alive of "Serverless in the Wild" (Shahrad et al., ATC 2020),
//     with the windows chosen against a cost budget instead of fixed
//     percentiles.
//   - How much headroom to hold: the burst capacity that keeps the
//     activator in the path is the largest surge above the stable level
//     the service has had lately (it decays with an hour's half-life), not
//     a constant.
//
// Its state is small and explainable; learned is what would be kept across
// restarts.
type adaptive struct {
	kpa *kpa
	learned
	// hybrid makes it the hybrid policy: kpa with the idle plan of
	// "Serverless in the Wild" taken as published (pre-warm at the idle
	// gaps' 5th percentile, keep to their 99th), and nothing else learned
	// put to use: the reference the adaptive policy is measured against.
	hybrid bool

	// Bookkeeping of the current episode, not worth keeping.
	last, prevTraffic time.Time // the last decision; the last traffic seen then
	upAt              time.Time // the last scale-up asked, and to what
	upWant            int
	plan              idlePlan
	planned           bool
	burstAt           time.Time
	// interval is the time between decisions (the tick), as seen.
	interval time.Duration
	// servedEW and requestsEW are exponentially weighted means of the
	// pods' request-seconds and requests per decision: their ratio is the
	// service time (learned.service).
	servedEW, requestsEW float64
	// peak is the most pods asked for since the last idle gap.
	peak int
	// bySize says the last recommendation was sized by work: kpa's
	// panic mode, not updated then, does not apply.
	bySize bool
	// need holds the work-sized recommendations of the last startup: a
	// pod no longer needed is kept until keeping it has cost what starting
	// it again would.
	need *extremum
}

// learned is what the adaptive policy knows about a service.
type learned struct {
	// gaps counts idle gaps by length: bin i holds gaps in
	// [gapEdge(i), gapEdge(i+1)); the last bin everything longer.
	gaps [gapBins]uint16
	// startup is the measured time from asking for pods to their being
	// ready (an exponentially weighted mean); 0 until measured.
	startup time.Duration
	// startupDev is the startups' mean absolute deviation from startup
	// (an exponentially weighted mean); 0 until two were measured.
	startupDev time.Duration
	// service is a request's time in the system when nothing queues:
	// concurrency over arrivals (Little's law), an exponentially weighted
	// mean; 0 until measured.
	service time.Duration
	// burst is the largest surge of load above the stable window seen
	// lately, decaying with burstHalfLife.
	burst float64
	// busyPods is the most pods a busy period asked for, an exponentially
	// weighted mean over the busy periods.
	busyPods float64
}

const (
	// gapBins bins of idle gaps, each 2^(1/4) (1.19) times the last: 1 s
	// to 18 h.
	gapBins = 64
	// minGaps is how many idle gaps the policy needs before it plans with
	// them; with fewer it keeps kpa's grace.
	minGaps = 8
	// maxGapCount bounds the histogram's total: past it every count is
	// halved, so the old gaps weigh less than the recent ones.
	maxGapCount = 1000
	// burstHalfLife is how fast a surge is forgotten.
	burstHalfLife = time.Hour
	// startupWeight is the weight of a new startup measurement.
	startupWeight = 0.3
	// minBurstPods is the least burst capacity, in pods' worth of target.
	minBurstPods = 2
	// maxCandidates bounds the times a plan is searched over.
	maxCandidates = 16
	// quiet is the least idle time a gap counts from: a second's load is
	// reported up to a second after it ends.
	quiet = 2 * time.Second
	// busyWeight is the weight of each busy period's pods.
	busyWeight = 0.1
	// serviceWeight is the weight of each decision's service time: about
	// the last minute of decisions counts.
	serviceWeight = 0.05
)

// gapEdge is the lower edge of bin i: 2^(i/4) seconds.
func gapEdge(i int) time.Duration {
	return time.Duration(math.Pow(2, float64(i)/gapsPerOctave) * float64(time.Second))
}

// gapsPerOctave is how many bins a doubling of the gap spans.
const gapsPerOctave = 4

// gapBin is the bin of a gap.
func gapBin(g time.Duration) int {
	if g < time.Second {
		return 0
	}
	i := int(math.Floor(gapsPerOctave * math.Log2(g.Seconds())))
	return min(max(i, 0), gapBins-1)
}

// gapMid is bin i's representative length: its edges' geometric mean.
func gapMid(i int) time.Duration {
	return time.Duration(math.Pow(2, (float64(i)+0.5)/gapsPerOctave) * float64(time.Second))
}

func newAdaptive(now time.Time, scale int, restart bool) *adaptive {
	a := &adaptive{kpa: newKPA(now, scale, restart), need: newExtremum(0, false)}
	if scale > 0 && !restart {
		// A new service's initial pods are being started now.
		a.upAt, a.upWant = now, scale
	}
	return a
}

// idlePlan is what to do once traffic stops, in idle time (time since the
// decider last saw traffic): keep the last pod until keep; then, when
// prewarm > 0, start one again at prewarm (ready by then) and hold it
// until until. n and cold describe it: the gaps it was planned on, and the
// share of them that would have found no pod.
type idlePlan struct {
	keep, prewarm, until time.Duration
	n                    int
	cold                 float64
}

func (a *adaptive) recommend(in *input, b []byte) (recommendation, []byte) {
	sp := in.spec
	r, sized, b := a.sized(in, b)
	a.bySize = sized
	if !sized {
		r, b = a.kpa.recommend(in, b)
	}

	// Traffic stopped and the plan lets the pods go now: recommend zero,
	// and the scale-to-zero gate applies the plan (Decider.guard).
	idle := in.now.Sub(in.lastSeen)
	if p, ok := a.idlePlan(sp); ok && in.pending == 0 && !in.lastSeen.IsZero() && idle >= p.keep && r.desired > 0 && !r.inPanic {
		r.desired = 0
		b = append(b[:0], "idle: the plan lets the pods go"...)
	}
	return r, b
}

// sized is the recommendation by work: the pods that serve the arrivals
// at the target, and drain what is queued — the backlog now and what
// will have queued by the time the pods asked for are ready — within one
// pod start, at full slots. Pods already starting count: they are asked
// for, and the sum is the pods asked for in all. A pod the work no longer
// needs is kept only until keeping it has cost a start (the ski rental's
// break-even), whatever a panic window would say. sized is false while
// the service time is unknown (kpa decides then), except for a first
// start: while the first pods start, a queue is no evidence of work.
func (a *adaptive) sized(in *input, b []byte) (recommendation, bool, []byte) {
	sp := in.spec
	if a.hybrid || !in.hasArrivals || !sizesByWork(sp) {
		return recommendation{}, false, b
	}
	starting := in.prevScale - in.ready
	if a.service == 0 {
		// Nothing served yet: the requests held at the activator say
		// nothing of the work until the first pods have served some.
		if in.prevScale > 0 && in.pending > 0 {
			b = append(b, "work unknown: waiting for "...)
			b = appendPods(b, in.prevScale)
			b = append(b, " to serve"...)
			return recommendation{desired: in.prevScale}, true, b
		}
		return recommendation{}, false, b
	}
	svc := a.service.Seconds()
	horizon := a.startup
	if horizon == 0 {
		horizon = sp.PanicWindow
	}
	perPod := sp.TargetPerPod()
	slots := perPod
	if sp.ContainerConcurrency > 0 {
		slots = float64(sp.ContainerConcurrency)
	}
	arrivals := arrivalRate(in.arrStable, in.arrPanic, sp.PanicWindow)
	// The work under way in the pods is at least what they hold now: a
	// service time learned while the load rose (from seconds of few
	// requests held, many arriving) falls short of it.
	sustained := max(arrivals*svc, in.inPods)
	// What waits: the activator's requests beyond the ready pods' slots
	// (without a hard limit, every request it holds once a pod is ready
	// is on its way to one).
	queued := float64(in.pending)
	switch {
	case sp.ContainerConcurrency > 0:
		queued = max(0, queued-float64(in.ready*sp.ContainerConcurrency))
	case in.ready > 0:
		queued = 0
	}
	// Until the pods on their way are ready, the arrivals the ready pods
	// have no slot for queue too (without a hard limit they share the
	// pods, and nothing queues).
	var short float64
	if sp.ContainerConcurrency > 0 {
		short = max(0, sustained-float64(in.ready)*slots)
	}
	until := horizon
	if starting > 0 && a.upWant > 0 {
		until = max(horizon-in.now.Sub(a.upAt), a.interval, time.Second)
	}
	work := queued*svc + short*until.Seconds()
	want := sustained/perPod + work/max(horizon, sp.PanicWindow).Seconds()/slots
	n := podsAtLeast(math.Ceil(want - 1e-9))
	if n == 0 && (arrivals > 0 || in.pending > 0 || in.panic > 0) {
		n = 1
	}
	a.need.resize(max(horizon, 2*a.interval))
	a.need.record(in.now, n)
	held, _ := a.need.value(in.now)
	down, up := rateLimits(sp, in.ready)
	desired := min(max(held, down), up)
	// The reason names pods, not the learned times, which drift: a steady
	// service keeps one reason string and allocates nothing.
	b = append(b, "work: "...)
	b = appendPods(b, n)
	if work > 0 {
		b = append(b, " for the arrivals and the backlog, drained within a start"...)
	} else {
		b = append(b, " for the arrivals"...)
	}
	switch {
	case desired == up && held > up:
		b = append(b, "; max-scale-up-rate limits to "...)
		b = appendPods(b, up)
	case desired == down && held < down:
		b = append(b, "; max-scale-down-rate limits to "...)
		b = appendPods(b, down)
	case held > n:
		b = append(b, "; keeping "...)
		b = appendPods(b, held)
		b = append(b, " for a start"...)
	}
	return recommendation{desired: desired}, true, b
}

// sizesByWork says sp scales on concurrency alone, the work requests
// bring; with another metric beside it (or rps instead) the metrics'
// recommendation decides, read as kpa reads it.
func sizesByWork(sp *autoscaling.Spec) bool {
	if sp.Metric != autoscaling.MetricConcurrency {
		return false
	}
	for _, m := range sp.Metrics {
		if m != autoscaling.MetricConcurrency {
			return false
		}
	}
	return true
}

// arrivalRate is the arrival rate to size for: the stable window's, the
// better estimate of a steady rate, unless the panic window's count
// differs from what that rate would bring by more than Poisson noise
// would (two standard deviations): then the rate has changed, and the
// panic window's is the current one.
func arrivalRate(stable, panic float64, panicWindow time.Duration) float64 {
	want := stable * panicWindow.Seconds()
	if math.Abs(panic*panicWindow.Seconds()-want) > 2*math.Sqrt(max(want, 1)) {
		return panic
	}
	return stable
}

// remembered takes what was learned, just given back, as the start of
// the learning: the service time weighs as one request would.
func (a *adaptive) remembered() {
	a.planned = false
	a.servedEW, a.requestsEW = 0, 0
	if a.service > 0 {
		a.servedEW, a.requestsEW = a.service.Seconds(), 1
	}
}

// observe learns from one decision's input, whether or not the window has
// data: an idle gap that ended, a startup finished, a surge.
func (a *adaptive) observe(in *input) {
	var dt float64 // since the previous decision, in seconds
	if !a.last.IsZero() {
		dt = in.now.Sub(a.last).Seconds()
	}
	if !a.last.IsZero() && !a.prevTraffic.IsZero() && in.lastSeen.After(a.prevTraffic) {
		// Traffic again: a gap ended if the last decision had seen none
		// for longer than a second's bucket takes to be reported.
		if gap := in.lastSeen.Sub(a.prevTraffic); a.last.Sub(a.prevTraffic) > quiet && gap > 0 {
			a.record(gap)
			if a.busyPods == 0 {
				a.busyPods = float64(a.peak)
			} else {
				a.busyPods = busyWeight*float64(a.peak) + (1-busyWeight)*a.busyPods
			}
			a.peak = 0
		}
	}
	if !a.last.IsZero() {
		// The tick: the longest recent interval (pokes come between).
		a.interval = max(in.now.Sub(a.last), a.interval*63/64)
	}
	a.last, a.prevTraffic = in.now, in.lastSeen
	if in.lastSeen.Equal(in.now) {
		a.peak = max(a.peak, in.prevScale)
	}

	if a.upWant > 0 && in.ready >= a.upWant {
		took := in.now.Sub(a.upAt)
		if a.startup == 0 {
			a.startup = took
		} else {
			dev := took - a.startup
			if dev < 0 {
				dev = -dev
			}
			a.startupDev = time.Duration(startupWeight*float64(dev) + (1-startupWeight)*float64(a.startupDev))
			a.startup = time.Duration(startupWeight*float64(took) + (1-startupWeight)*float64(a.startup))
		}
		a.upWant = 0
	}

	// Little's law on the pods' own figures, which a queue at the
	// activators does not touch (a queue in the pods' queue-proxies does:
	// it makes the time longer, and the sizing safer).
	sp := in.spec
	if in.servedRequests > 0 && (sp.ContainerConcurrency == 0 || in.pending > 0 || in.served < 0.8*dt*float64(in.ready*sp.ContainerConcurrency)) {
		w := serviceWeight
		if a.requestsEW == 0 {
			w = 1
		}
		a.servedEW = w*in.served + (1-w)*a.servedEW
		a.requestsEW = w*in.servedRequests + (1-w)*a.requestsEW
		a.service = time.Duration(a.servedEW / a.requestsEW * float64(time.Second))
	} else if a.requestsEW == 0 && in.hasArrivals && in.arrStable > 0 && in.stable > 0 && in.ready > 0 && in.pending == 0 &&
		(sp.ContainerConcurrency == 0 || in.stable < 0.8*float64(in.ready*sp.ContainerConcurrency)) {
		st := time.Duration(in.stable / in.arrStable * float64(time.Second))
		if a.service == 0 {
			a.service = st
		} else {
			a.service = time.Duration(serviceWeight*float64(st) + (1-serviceWeight)*float64(a.service))
		}
	}

	if !a.burstAt.IsZero() {
		a.burst *= math.Exp2(-float64(in.now.Sub(a.burstAt)) / float64(burstHalfLife))
	}
	a.burstAt = in.now
	if s := in.panic - in.stable; s > a.burst {
		a.burst = s
	}
}

// record counts an idle gap.
func (a *adaptive) record(gap time.Duration) {
	total := 0
	for _, c := range a.gaps {
		total += int(c)
	}
	if total >= maxGapCount {
		for i := range a.gaps {
			a.gaps[i] /= 2
		}
	}
	a.gaps[gapBin(gap)]++
	a.planned = false
}

// budgetKeep is how long kpa keeps the last pod after the decider last saw
// traffic: until the stable window has emptied (the panic window's worth
// of it already passed when the decider last saw traffic) and the grace
// period is over.
func budgetKeep(sp *autoscaling.Spec) time.Duration {
	return max(sp.StableWindow, sp.ScaleToZeroGracePeriod)
}

// idlePlan returns the plan for the gaps seen so far; false while there
// are too few of them.
func (a *adaptive) idlePlan(sp *autoscaling.Spec) (idlePlan, bool) {
	if a.planned {
		return a.plan, a.plan.n >= minGaps
	}
	a.planned = true
	if a.hybrid {
		a.plan = planPercentiles(&a.gaps, a.lead(), quiet+a.interval)
	} else {
		a.plan = planIdle(&a.gaps, budgetKeep(sp), max(1, a.busyPods), a.startup, quiet+a.interval, a.lead())
	}
	return a.plan, a.plan.n >= minGaps
}

// planPercentiles is the hybrid histogram policy's plan (Shahrad et al.,
// USENIX ATC 2020): the pre-warm window is the idle gaps' 5th percentile
// less 10%, the keep-alive window ends at their 99th percentile plus 10%.
// When the pre-warm window is too short to let a pod go and start one
// again, the pod is kept from the start. The percentiles are read at the
// bins' edges: the head at its bin's lower edge, the tail at its upper.
func planPercentiles(h *[gapBins]uint16, lead, release time.Duration) idlePlan {
	n := 0
	for _, c := range h {
		n += int(c)
	}
	if n == 0 {
		return idlePlan{}
	}
	quantile := func(q float64, upper bool) time.Duration {
		want, seen := q*float64(n), 0.0
		for i, c := range h {
			seen += float64(c)
			if seen >= want && c > 0 {
				if upper {
					return gapEdge(i + 1)
				}
				return gapEdge(i)
			}
		}
		return gapEdge(gapBins)
	}
	head := quantile(0.05, false) * 9 / 10
	tail := quantile(0.99, true) * 11 / 10
	cold := 0.0
	if head-lead <= release {
		return idlePlan{keep: tail, n: n, cold: cold}
	}
	return idlePlan{keep: release, prewarm: head, until: tail, n: n, cold: cold}
}

// lead is how long before a pre-warmed pod must be ready it is asked for:
// its startup, twice the startups' deviation to spare (a quarter of the
// startup while only one was measured), and a decision's interval, since
// the ask waits for a decision.
func (a *adaptive) lead() time.Duration {
	spare := 2 * a.startupDev
	if a.startupDev == 0 {
		spare = a.startup / 4
	}
	return a.startup + spare + a.interval
}

// planIdle chooses, for the gaps of h, the idle plan with the fewest cold
// starts whose pod-seconds are within share times those of keeping the
// last pod for budget (each gap longer costing a restart, startup) — share
// being the pods a busy period has, which kpa would keep for its stable
// window after it, and which the sizing by work lets go — the cheaper of
// equals. release is the earliest a pod can be let go (the decider sees no
// traffic only once the panic window is empty, and acts at its next
// decision); a pre-warmed pod is asked for lead before it must be ready.
// Pre-warming plans need a measured startup.
func planIdle(h *[gapBins]uint16, budget time.Duration, share float64, startup, release, lead time.Duration) idlePlan {
	n := 0
	for _, c := range h {
		n += int(c)
	}
	best := idlePlan{keep: budget, n: n}
	if n == 0 {
		return best
	}
	type outcome struct{ cost, cold float64 }
	var held []int // the bins holding gaps
	for i, c := range h {
		if c > 0 {
			held = append(held, i)
		}
	}
	eval := func(keep, prewarm, until time.Duration) outcome {
		var o outcome
		for _, i := range held {
			c := h[i]
			// Whether a gap ends cold is judged at its bin's middle; what it
			// costs, at its bin's upper edge, so that the bins' rounding
			// cannot take a plan over its budget.
			g, hi := gapMid(i), gapEdge(i+1)
			var cost float64
			cold := false
			switch {
			case g <= keep:
				cost = min(hi, keep).Seconds()
			case prewarm == 0:
				cost, cold = (keep + startup).Seconds(), true
			default:
				start := prewarm - lead
				switch {
				case g < start:
					cost, cold = (keep + startup).Seconds(), true
				case g < prewarm:
					cost, cold = (keep + min(hi, prewarm) - start).Seconds(), true
				case g <= until:
					cost = (keep + min(hi, until) - start).Seconds()
				default:
					cost, cold = (keep + until - start + startup).Seconds(), true
				}
			}
			o.cost += float64(c) * cost
			if cold {
				o.cold += float64(c)
			}
		}
		return o
	}
	limit := eval(budget, 0, 0)
	bo := limit
	limit.cost *= share
	better := func(o outcome) bool {
		return o.cost <= limit.cost+1e-9 && (o.cold < bo.cold || o.cold == bo.cold && o.cost < bo.cost)
	}
	// The candidate times: the edges of the bins that hold gaps, and the
	// earliest a pod can be let go.
	var edges []time.Duration
	for i, c := range h {
		if c > 0 {
			for _, e := range [2]time.Duration{gapEdge(i), gapEdge(i + 1)} {
				if len(edges) == 0 || edges[len(edges)-1] != e {
					edges = append(edges, e)
				}
			}
		}
	}
	// At most maxCandidates of them, spread over the range: a plan is
	// searched over every triple, and a wide histogram would make that
	// slow for little gain.
	if len(edges) > maxCandidates {
		picked := make([]time.Duration, 0, maxCandidates)
		for i := range maxCandidates {
			picked = append(picked, edges[i*(len(edges)-1)/(maxCandidates-1)])
		}
		edges = picked
	}
	keeps := append([]time.Duration{release}, edges...)
	// Keep the last pod for some time, and then perhaps let it go and
	// start one again before the later gaps end.
	for _, k := range keeps {
		if k < release {
			continue
		}
		if o := eval(k, 0, 0); better(o) {
			best, bo = idlePlan{keep: k, n: n}, o
		}
		if startup == 0 {
			continue
		}
		for _, p := range edges {
			if p-lead <= k {
				continue
			}
			for _, u := range edges {
				if u <= p {
					continue
				}
				if o := eval(k, p, u); better(o) {
					best, bo = idlePlan{keep: k, prewarm: p, until: u, n: n}, o
				}
			}
		}
	}
	best.cold = bo.cold / float64(n)
	return best
}

// idleScale is the adaptive gate for a service whose decision is zero:
// keep the last pod, pre-warm one, or let it be zero. decided is false
// while the policy knows too little, and kpa's gate applies.
func (a *adaptive) idleScale(sp *autoscaling.Spec, idle time.Duration, atZero bool, b []byte) (scale int, decided bool, _ []byte) {
	p, ok := a.idlePlan(sp)
	if !ok {
		return 0, false, b
	}
	switch {
	case idle < p.keep:
		b = append(b[:0], "keeping the last pod "...)
		b = appendSeconds(b, p.keep.Round(time.Second))
		if a.hybrid {
			b = append(b, " idle (the 99th percentile of "...)
			b = appendInt(b, p.n)
			b = append(b, " idle gaps, and 10%)"...)
		} else {
			b = append(b, " idle (fewest cold starts of "...)
			b = appendInt(b, p.n)
			b = append(b, " idle gaps for kpa's cost)"...)
		}
		return 1, true, b
	case p.prewarm > 0 && idle >= p.prewarm-a.lead() && idle < p.until:
		b = append(b[:0], "pre-warming: idle gaps end between "...)
		b = appendSeconds(b, p.prewarm.Round(time.Second))
		b = append(b, " and "...)
		b = appendSeconds(b, p.until.Round(time.Second))
		return 1, true, b
	}
	return 0, true, b
}

// burstCapacity is the learned target burst capacity: the largest surge
// lately, and at least minBurstPods pods' worth, so that a small service
// meets a first surprise behind the activator (which spreads a backlog
// over new pods as they come) rather than queued in its one pod. False
// when the spec says 0 or −1, whose meanings stand.
func (a *adaptive) burstCapacity(sp *autoscaling.Spec) (float64, bool) {
	if sp.TargetBurstCapacity <= 0 || a.hybrid {
		return 0, false
	}
	return max(a.burst, minBurstPods*sp.Target), true
}

func (a *adaptive) applied(now time.Time, prev, scale int) {
	if scale > prev {
		if a.upWant == 0 {
			// A new start: measured from the first ask until every pod
			// of the latest ask is ready.
			a.upAt = now
		}
		a.upWant = scale
	}
	a.kpa.applied(now, prev, scale)
}

func (a *adaptive) panicking() bool { return !a.bySize && a.kpa.panicking() }

func (a *adaptive) setSpec(sp *autoscaling.Spec) {
	a.planned = false
	a.kpa.setSpec(sp)
}

// memoryVersion tags the encoding of learned. Versions 1 (without the
// startups' deviation) and 2 (without the busy periods' pods) are still
// read.
const memoryVersion = 3

// maxMemory bounds an encoded memory; a larger one is refused unread.
const maxMemory = 1024

// marshal encodes what the policy learned, compactly: a version, the
// startup and its deviation (in tenths of a second), the service time (in
// milliseconds),
// the burst (in hundredths), the busy periods' pods (in tenths), then
// each non-empty gap bin and its count.
// Values are rounded so that small drifts do not make a new memory to
// keep. nil when nothing was learned.
func (l *learned) marshal() []byte {
	if l.startup == 0 && l.startupDev == 0 && l.service == 0 && l.burst == 0 && l.busyPods == 0 && l.gaps == [gapBins]uint16{} {
		return nil
	}
	b := make([]byte, 0, 64)
	b = append(b, memoryVersion)
	b = binary.AppendUvarint(b, uint64((l.startup+50*time.Millisecond)/(100*time.Millisecond)))
	b = binary.AppendUvarint(b, uint64((l.startupDev+50*time.Millisecond)/(100*time.Millisecond)))
	b = binary.AppendUvarint(b, uint64((l.service+time.Millisecond/2)/time.Millisecond))
	b = binary.AppendUvarint(b, uint64(math.Round(min(l.burst, 1e9)*100)))
	b = binary.AppendUvarint(b, uint64(math.Round(min(l.busyPods, maxPods)*10)))
	n := 0
	for _, c := range l.gaps {
		if c > 0 {
			n++
		}
	}
	b = append(b, byte(n))
	for i, c := range l.gaps {
		if c > 0 {
			b = append(b, byte(i))
			b = binary.AppendUvarint(b, uint64(c))
		}
	}
	return b
}

// unmarshal reads what marshal wrote, checking every value: a memory is
// kept on objects others can write.
func (l *learned) unmarshal(b []byte) error {
	if len(b) > maxMemory {
		return fmt.Errorf("a memory of %d bytes, more than %d", len(b), maxMemory)
	}
	if len(b) == 0 || b[0] < 1 || b[0] > memoryVersion {
		return errors.New("not a memory of a known version")
	}
	version := b[0]
	b = b[1:]
	next := func(limit uint64) (uint64, error) {
		v, n := binary.Uvarint(b)
		if n <= 0 || v > limit {
			return 0, errors.New("a value out of range")
		}
		b = b[n:]
		return v, nil
	}
	var out learned
	startup, err := next(uint64(time.Hour / (100 * time.Millisecond)))
	if err != nil {
		return fmt.Errorf("startup: %w", err)
	}
	var startupDev uint64
	if version >= 2 {
		if startupDev, err = next(uint64(time.Hour / (100 * time.Millisecond))); err != nil {
			return fmt.Errorf("startup deviation: %w", err)
		}
	}
	service, err := next(uint64(time.Hour / time.Millisecond))
	if err != nil {
		return fmt.Errorf("service time: %w", err)
	}
	burst, err := next(1e11)
	if err != nil {
		return fmt.Errorf("burst: %w", err)
	}
	out.startup = time.Duration(startup) * 100 * time.Millisecond
	out.startupDev = time.Duration(startupDev) * 100 * time.Millisecond
	out.service = time.Duration(service) * time.Millisecond
	out.burst = float64(burst) / 100
	if version >= 3 {
		busy, err := next(maxPods * 10)
		if err != nil {
			return fmt.Errorf("busy pods: %w", err)
		}
		out.busyPods = float64(busy) / 10
	}
	if len(b) == 0 {
		return errors.New("no gap count")
	}
	n := int(b[0])
	b = b[1:]
	if n > gapBins {
		return fmt.Errorf("%d gap bins, more than %d", n, gapBins)
	}
	for range n {
		if len(b) == 0 || int(b[0]) >= gapBins {
			return errors.New("a gap bin out of range")
		}
		i := b[0]
		b = b[1:]
		c, err := next(math.MaxUint16)
		if err != nil {
			return fmt.Errorf("gap bin %d: %w", i, err)
		}
		out.gaps[i] = uint16(c)
	}
	if len(b) != 0 {
		return fmt.Errorf("%d bytes after the end", len(b))
	}
	*l = out
	return nil
}
