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
// "adaptive"). While it knows nothing it decides exactly as kpa does; what
// it learns changes three things:
//
//   - When to let go, and when to come back. Every idle gap — from the
//     last traffic the decider saw to the next — goes into a histogram on a
//     logarithmic scale. From it the policy chooses how long to keep the
//     last pod after traffic stops, or to let it go at once and start one
//     again just before the next request is likely: the plan with the
//     fewest cold starts the past gaps would have had, for no more
//     pod-seconds than kpa's grace would have spent on them. This is the
//     hybrid-histogram keep-alive of "Serverless in the Wild" (Shahrad et
//     al., ATC 2020), with the windows chosen against a cost budget
//     instead of fixed percentiles.
//   - How fast pods start: measured from each scale-up to the pods being
//     ready. While the pods asked for are still starting, the load they
//     will absorb (their slots) is not asked for again: requests queued
//     behind a start are not a reason for more pods.
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
	// backlogShare: a load this many times the arrivals' (times the
	// service time) or more has a backlog; below, the difference is noise.
	backlogShare = 1.25
	// minBurstPods is the least burst capacity, in pods' worth of target.
	minBurstPods = 2
	// drainShare: a backlog is sized to drain within 1/drainShare of a
	// pod's start.
	drainShare = 2
	// maxCandidates bounds the times a plan is searched over.
	maxCandidates = 16
	// quiet is the least idle time a gap counts from: a second's load is
	// reported up to a second after it ends.
	quiet = 2 * time.Second
	// budgetShare is the share of kpa's idle pod-seconds a plan may
	// spend: a margin for what the histogram's bins round away.
	budgetShare = 1
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
	a := &adaptive{kpa: newKPA(now, scale, restart)}
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

	// Requests queued behind a start are no reason for as many pods as
	// requests: size for the arrivals (times the learned service time),
	// for what they exceed the ready pods' slots by while new pods start,
	// and for the backlog then left, to drain within half a start.
	pin := *in
	discounted := false
	if a.service > 0 && a.startup > 0 && in.hasArrivals && !a.hybrid {
		frac := min(1, drainShare*a.service.Seconds()/a.startup.Seconds())
		slots := math.Inf(1)
		if sp.ContainerConcurrency > 0 {
			slots = float64(in.ready * sp.ContainerConcurrency)
		}
		eff := func(load, arrivals float64) float64 {
			sustained := arrivals * a.service.Seconds()
			backlog := load - sustained
			if backlog > (backlogShare-1)*sustained {
				// A backlog: only its share a new pod could serve.
				backlog *= frac
			}
			return max(0, sustained+max(0, sustained-slots)+backlog)
		}
		pin.panic, pin.stable = eff(in.panic, max(in.arrPanic, in.arrRecent)), eff(in.stable, in.arrStable)
		discounted = math.Abs(pin.panic-in.panic) > 0.1*in.panic
	}
	r, b := a.kpa.recommend(&pin, b)
	if discounted {
		b = append(b, "; sizing for "...)
		b = appendNum(b, max(in.arrPanic, in.arrRecent))
		b = append(b, "/s × "...)
		b = appendSeconds(b, a.service.Round(time.Millisecond))
		b = append(b, ", the backlog to drain within half a start ("...)
		b = appendSeconds(b, a.startup.Round(time.Second/10))
		b = append(b, ")"...)
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

// observe learns from one decision's input, whether or not the window has
// data: an idle gap that ended, a startup finished, a surge.
func (a *adaptive) observe(in *input) {
	if !a.last.IsZero() && !a.prevTraffic.IsZero() && in.lastSeen.After(a.prevTraffic) {
		// Traffic again: a gap ended if the last decision had seen none
		// for longer than a second's bucket takes to be reported.
		if gap := in.lastSeen.Sub(a.prevTraffic); a.last.Sub(a.prevTraffic) > quiet && gap > 0 {
			a.record(gap)
		}
	}
	if !a.last.IsZero() {
		// The tick: the longest recent interval (pokes come between).
		a.interval = max(in.now.Sub(a.last), a.interval*63/64)
	}
	a.last, a.prevTraffic = in.now, in.lastSeen

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

	// Little's law, in a stable window without a queue: the load per
	// ready pod well under its hard limit, nothing held at the activator.
	sp := in.spec
	if in.hasArrivals && in.arrStable > 0 && in.stable > 0 && in.ready > 0 && in.pending == 0 &&
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
		a.plan = planIdle(&a.gaps, budgetKeep(sp), a.startup, quiet+a.interval, a.lead())
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
// starts whose pod-seconds are within budgetShare of keeping the last pod
// for budget (each gap longer costing a restart, startup), the cheaper of
// equals. release is the earliest a pod can be let go (the decider sees no
// traffic only once the panic window is empty, and acts at its next
// decision); a pre-warmed pod is asked for lead before it must be ready.
// Pre-warming plans need a measured startup.
func planIdle(h *[gapBins]uint16, budget, startup, release, lead time.Duration) idlePlan {
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
	limit.cost *= budgetShare
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

func (a *adaptive) panicking() bool { return a.kpa.panicking() }

func (a *adaptive) setSpec(sp *autoscaling.Spec) {
	a.planned = false
	a.kpa.setSpec(sp)
}

// memoryVersion tags the encoding of learned. Version 1, without the
// startups' deviation, is still read.
const memoryVersion = 2

// maxMemory bounds an encoded memory; a larger one is refused unread.
const maxMemory = 1024

// marshal encodes what the policy learned, compactly: a version, the
// startup and its deviation (in tenths of a second), the service time (in
// milliseconds),
// the burst (in hundredths), then each non-empty gap bin and its count.
// Values are rounded so that small drifts do not make a new memory to
// keep. nil when nothing was learned.
func (l *learned) marshal() []byte {
	if l.startup == 0 && l.startupDev == 0 && l.service == 0 && l.burst == 0 && l.gaps == [gapBins]uint16{} {
		return nil
	}
	b := make([]byte, 0, 64)
	b = append(b, memoryVersion)
	b = binary.AppendUvarint(b, uint64((l.startup+50*time.Millisecond)/(100*time.Millisecond)))
	b = binary.AppendUvarint(b, uint64((l.startupDev+50*time.Millisecond)/(100*time.Millisecond)))
	b = binary.AppendUvarint(b, uint64((l.service+time.Millisecond/2)/time.Millisecond))
	b = binary.AppendUvarint(b, uint64(math.Round(min(l.burst, 1e9)*100)))
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
	if len(b) == 0 || b[0] != memoryVersion && b[0] != 1 {
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
