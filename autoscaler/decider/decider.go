// Package decider turns a service's observed load into a pod count: the
// policies (kpa, hpa, exponential, pid) and the guard rails they share
// (rate limits, bounds, scale to zero). It is pure: time and observations
// come in as arguments, decisions go out as values.
//
// One decision, in order (docs/autoscaling.md explains every step):
//
//  1. No data in the stable window: hold the previous recommendation.
//  2. Otherwise the policy recommends (kpa applies the rate limits, panic
//     mode and activation-scale inside, as Knative does; the other policies
//     get the same rate limits applied after their own logic).
//  3. Scale-down delay: the highest recommendation of the trailing delay.
//     After an autoscaler restart, non-kpa policies hold the pods found for
//     a stable window (kpa does it by starting in panic).
//     The result is Decision.Desired.
//  4. Guard rails: min-scale / initial-scale / enable-scale-to-zero,
//     max-scale, activation-scale, wake-up on requests at the activator,
//     and the scale-to-zero gate (traffic in the windows, grace period,
//     activator in the path, last-pod retention). The result is
//     Decision.Scale.
package decider

import (
	"math"
	"time"

	"github.com/swell-run/swell/autoscaler/window"
	"github.com/swell-run/swell/pkg/autoscaling"
)

// Observation is everything a decision looks at.
type Observation struct {
	// Now is the decision's time.
	Now time.Time
	// Ready is the number of ready pods.
	Ready int
	// Stable and Panic are the service-wide observed metric (concurrency or
	// requests per second) averaged over the stable and the panic window.
	Stable, Panic float64
	// NoData says the stable window holds no recorded second (a new
	// service whose pods are not scraped yet, a collector outage, a service
	// at zero that nobody reports on): the decider then holds its previous
	// recommendation instead of reading the missing data as no load.
	// Decider.Measure sets it from the window.
	NoData bool
	// LastTraffic is when traffic was last seen (a non-zero 1 s bucket or
	// a request at the activator); Decider.Measure sets it from the window.
	// Zero means "derive it". Either way the decider also counts Now as
	// traffic whenever Panic > 0, ActivatorPending > 0 or Poked, and keeps
	// the latest time it has seen (a LastTraffic after Now counts as Now).
	LastTraffic time.Time
	// ActivatorInPath says the service's traffic is confirmed to be routed
	// through the activator; scale to zero waits for it.
	ActivatorInPath bool
	// ActivatorPending is the number of requests in flight or queued at the
	// activator for this service. While it is above zero the service never
	// goes to zero, and a service at zero goes to at least activation-scale.
	ActivatorPending int
	// Poked says a request just arrived at the activator for this service
	// (it is at zero): the decision is immediate, out of the tick.
	Poked bool
	// ArrivalsStable and ArrivalsPanic are the requests arriving per
	// second, averaged over the stable and the panic window, for a policy
	// that scales on concurrency and reads arrivals too (ReadsArrivals);
	// Decider.MeasureArrivals sets them. HasArrivals says they are set.
	ArrivalsStable, ArrivalsPanic float64
	HasArrivals                   bool
	// Served is the request-seconds the pods held (their concurrency
	// summed over the seconds) since the previous decision, and
	// ServedRequests the requests they got then, queued at the activators
	// or not: their ratio is the time a request spends in a pod, which
	// the adaptive policy learns even while a queue waits at the
	// activators. Zero when unknown.
	Served, ServedRequests float64
	// InPods, when above zero, is the requests the pods hold now (their
	// own and those the activators sent them), read from the frames they
	// pushed as their load rose sharply: the work under way, which the
	// adaptive policy sizes for at least while its service time is still
	// being learned from a rise. Zero when unknown.
	InPods float64
}

// Decision is a decision with the inputs and reasoning that produced it, so
// it can be logged, shown by `swell status` and replayed by `swell sim
// --observations`.
type Decision struct {
	Now time.Time
	// Ready, Stable and Panic echo the observation.
	Ready         int
	Stable, Panic float64
	// Desired is the policy's recommendation after rate limits, panic mode
	// and scale-down delay, before bounds and scale-to-zero gating.
	Desired int
	// Scale is what should be applied: Desired after bounds, initial and
	// activation scale and the scale-to-zero rules.
	Scale int
	// ExcessBurstCapacity: negative means the activator must be in the path.
	ExcessBurstCapacity float64
	// InPanic says panic mode is on.
	InPanic bool
	// NeedActivator says traffic must go through the activator: EBC is
	// negative, or the service is at or about to go to zero.
	NeedActivator bool
	// Reason says in a few words why Scale is what it is, e.g. "stable at
	// target 70", "panic: wants 6 pods for 3 ready at target 70", "scale to
	// zero after 30s idle", "waiting for the activator before scaling to
	// zero". It names pods and settings rather than observed values, and it
	// is rebuilt only when its text changes, so steady-state decisions
	// share strings and do not allocate.
	Reason string
}

// maxPods bounds every pod count the decider computes, so that float
// overflow (a huge observation over a tiny target) cannot wrap an int.
const maxPods = 1 << 30

// Decider decides for one service. It keeps the state decisions need across
// ticks (panic mode, the scale-down delay window, the last traffic, policy
// state). Not safe for concurrent use; the autoscaler serialises calls per
// service.
type Decider struct {
	spec   autoscaling.Spec
	policy policy

	// now is the time of the last decision; decided says there was one.
	now     time.Time
	decided bool

	// scale is the last Scale (before the first decision: what the service
	// starts with); desired the last Desired, which no-data decisions hold.
	scale, desired int
	// initialized turns true once Ready reaches initial-scale; until then
	// initial-scale is a lower bound.
	initialized bool

	lastTraffic time.Time
	// lastSeen is the last traffic itself: the newest second with load,
	// or a request at the activator (lastTraffic also counts the panic
	// window's echo of it as traffic).
	lastSeen time.Time
	// wantZero is set while the bounded recommendation is 0; zeroSince is
	// when that started (the retention period counts from it).
	wantZero  bool
	zeroSince time.Time

	// delay holds the recommendations of the scale-down delay; nil when
	// there is none.
	delay *extremum
	// holdUntil and holdAt keep a restarted non-kpa decider from scaling
	// below the pods it found for a stable window.
	holdUntil time.Time
	holdAt    int

	in      input
	buf     [256]byte
	reasons [4]string
	next    int
}

// New returns a Decider for spec starting at now with ready pods already
// running. With ready > 0 (an autoscaler restart, a new leader) the decider
// starts in panic mode holding ready, so an empty history never scales a
// running service down. With ready == 0 the service is taken as new: it
// starts at initial-scale and keeps at least that many pods until that
// many have been ready once. A service that is at zero because it scaled
// there must be resumed with Resume instead, or every restart would wake
// it to initial-scale.
func New(spec autoscaling.Spec, now time.Time, ready int) *Decider {
	if ready > 0 {
		return Resume(spec, now, ready)
	}
	d := &Decider{spec: spec}
	d.scale, d.desired = max(spec.InitialScale, 0), max(spec.InitialScale, 0)
	d.initialized = spec.InitialScale <= 0
	if d.scale > 0 {
		// Its pods are being started now: the grace period counts from here.
		d.lastTraffic = now
	}
	d.start(now, false)
	return d
}

// Resume returns a Decider for a service that was already being
// autoscaled before it (an autoscaler restart, a new leader) and has ready
// pods now: initial-scale no longer applies. With ready > 0 it starts like
// New; with ready == 0 the service stays at zero until traffic arrives.
func Resume(spec autoscaling.Spec, now time.Time, ready int) *Decider {
	ready = max(ready, 0)
	d := &Decider{spec: spec, initialized: true, scale: ready, desired: ready}
	if ready > 0 {
		d.lastTraffic = now
		if policyClass(spec.Class) != autoscaling.ClassKPA {
			// kpa does this by starting in panic.
			d.holdUntil, d.holdAt = now.Add(spec.StableWindow), ready
		}
	}
	d.start(now, ready > 0)
	return d
}

func (d *Decider) start(now time.Time, restart bool) {
	d.policy = newPolicy(&d.spec, now, d.scale, restart)
	if d.spec.ScaleDownDelay > 0 {
		d.delay = newExtremum(d.spec.ScaleDownDelay, false)
	}
}

// SetSpec replaces the service's configuration, keeping the state that
// still applies (the panic episode, the delay window). A change of class
// starts the new policy fresh.
func (d *Decider) SetSpec(spec autoscaling.Spec) {
	old := d.spec
	d.spec = spec
	switch {
	case spec.ScaleDownDelay <= 0:
		d.delay = nil
	case d.delay == nil:
		d.delay = newExtremum(spec.ScaleDownDelay, false)
	default:
		d.delay.resize(spec.ScaleDownDelay)
	}
	if policyClass(old.Class) != policyClass(spec.Class) {
		d.policy = newPolicy(&d.spec, d.now, d.scale, false)
	} else {
		d.policy.setSpec(&d.spec)
	}
}

// Memory returns what the service's policy has learned, encoded (well
// under 1 KB), for the caller to keep across autoscaler restarts and
// leader changes and give back with Remember. It is nil when there is
// nothing to keep: every policy but adaptive, or one that learned nothing.
// It changes only when what was learned does, at the encoding's rounding.
func (d *Decider) Memory() []byte {
	if a, ok := d.policy.(*adaptive); ok {
		return a.learned.marshal()
	}
	return nil
}

// Remember gives the policy back what Memory returned before, checking
// every value (it is kept where others may write it). A memory that does
// not read is refused with an error and changes nothing; a policy that
// learns nothing ignores it.
func (d *Decider) Remember(mem []byte) error {
	a, ok := d.policy.(*adaptive)
	if !ok || len(mem) == 0 {
		return nil
	}
	if err := a.learned.unmarshal(mem); err != nil {
		return err
	}
	a.remembered()
	return nil
}

// Spec returns the current configuration.
func (d *Decider) Spec() autoscaling.Spec { return d.spec }

// Measure fills o's Stable and Panic from w, averaged over the spec's
// stable and panic windows ending at o.Now with the spec's averaging, and
// NoData and LastTraffic from w's history. It does not allocate.
func (d *Decider) Measure(w *window.Window, o *Observation) {
	sp := &d.spec
	o.Stable, o.Panic = d.averages(w, o.Now)
	o.NoData = !w.HasData(o.Now, sp.StableWindow)
	if lt := w.LastNonZero(); lt.After(o.LastTraffic) {
		o.LastTraffic = lt
	}
}

// averages reads w over the spec's stable and panic windows ending at now,
// with the spec's averaging. A panic window without a recorded second
// (scrapes that failed or were not made for its few seconds, while older
// ones are known) reads as the stable average, the best estimate there
// is: read as zero load, it would make a busy service look idle for as
// long (its excess burst capacity jumps, routing it off the activator
// until the next sample routes it back; panic mode would end).
func (d *Decider) averages(w *window.Window, now time.Time) (stable, panic float64) {
	sp := &d.spec
	if sp.Averaging == autoscaling.AveragingExponential {
		stable, panic = w.WeightedAverage(now, sp.StableWindow), w.WeightedAverage(now, sp.PanicWindow)
	} else {
		stable, panic = w.Average(now, sp.StableWindow), w.Average(now, sp.PanicWindow)
	}
	if !w.HasData(now, sp.PanicWindow) {
		panic = stable
	}
	return stable, panic
}

// ReadsArrivals says whether a service of spec decides on arrivals as well
// as on its metric: the adaptive class scaling on concurrency does, to
// tell the requests arriving from those queued.
func ReadsArrivals(spec *autoscaling.Spec) bool {
	return policyClass(spec.Class) == autoscaling.ClassAdaptive && spec.Metric != autoscaling.MetricRPS
}

// MeasureArrivals fills o's arrivals from w, a window of requests per
// second, over the spec's windows as Measure does.
func (d *Decider) MeasureArrivals(w *window.Window, o *Observation) {
	o.ArrivalsStable, o.ArrivalsPanic = d.averages(w, o.Now)
	o.HasArrivals = true
}

// Decide makes one decision. Steady-state calls do not allocate.
//
// A decision for a time before the previous one is taken as at the
// previous one's time: time never runs backwards inside a decider.
func (d *Decider) Decide(o Observation) Decision {
	now := o.Now
	if d.decided && now.Before(d.now) {
		now = d.now
	}
	d.now, d.decided = now, true

	// The input lives in the Decider: handed to the policy through an
	// interface, a local would escape and allocate on every decision.
	in := &d.in
	*in = input{
		now:       now,
		ready:     max(o.Ready, 0),
		stable:    clean(o.Stable),
		panic:     clean(o.Panic),
		prevScale: d.scale,
		spec:      &d.spec,
	}
	pending := max(o.ActivatorPending, 0)
	if lt := o.LastTraffic; lt.After(d.lastTraffic) {
		d.lastTraffic = minTime(lt, now)
	}
	if in.panic > 0 || pending > 0 || o.Poked {
		d.lastTraffic = now
	}
	if lt := o.LastTraffic; lt.After(d.lastSeen) {
		d.lastSeen = minTime(lt, now)
	}
	if pending > 0 || o.Poked {
		d.lastSeen = now
	}
	in.lastTraffic, in.lastSeen, in.pending = d.lastTraffic, d.lastSeen, pending
	in.hasArrivals, in.arrStable, in.arrPanic = o.HasArrivals, clean(o.ArrivalsStable), clean(o.ArrivalsPanic)
	in.served, in.servedRequests = clean(o.Served), clean(o.ServedRequests)
	in.inPods = clean(o.InPods)
	if !d.initialized && in.ready >= d.spec.InitialScale {
		d.initialized = true
	}

	if ob, ok := d.policy.(observer); ok {
		ob.observe(in)
	}

	b := d.buf[:0]
	var desired int
	var inPanic bool
	if o.NoData {
		desired = d.desired
		inPanic = d.policy.panicking()
		b = append(b, "no data: holding "...)
		b = appendPods(b, desired)
	} else {
		var r recommendation
		r, b = d.policy.recommend(in, b)
		desired, inPanic = r.desired, r.inPanic
		if d.delay != nil {
			d.delay.record(now, desired)
			if m, _ := d.delay.value(now); m > desired {
				desired = m
				b = append(b[:0], "scale-down delay holds "...)
				b = appendPods(b, desired)
			}
		}
		if desired < d.holdAt && !d.holdUntil.Before(now) {
			desired = d.holdAt
			b = append(b[:0], "restarted: holding "...)
			b = appendPods(b, desired)
			b = append(b, " for a stable window"...)
		}
	}
	d.desired = desired

	scale, toZero, b := d.guard(desired, in, &o, pending, b)
	d.policy.applied(now, d.scale, scale)
	d.scale = scale

	ebc := d.excessBurstCapacity(in.ready, in.panic)
	return Decision{
		Now:                 o.Now,
		Ready:               o.Ready,
		Stable:              o.Stable,
		Panic:               o.Panic,
		Desired:             desired,
		Scale:               scale,
		ExcessBurstCapacity: ebc,
		InPanic:             inPanic,
		NeedActivator:       ebc < 0 || scale == 0 || toZero,
		Reason:              d.reasonOf(b),
	}
}

// guard applies the guard rails shared by all policies to desired, in this
// order: lower bounds (min-scale, initial-scale until reached, 1 when scale
// to zero is disabled), max-scale, activation-scale, wake-up on requests at
// the activator, and the scale-to-zero gate. toZero says the
// bounded recommendation was 0 — the service is at or on its way to zero.
// Each rail that changes the value replaces the reason.
func (d *Decider) guard(desired int, in *input, o *Observation, pending int, b []byte) (scale int, toZero bool, _ []byte) {
	sp := &d.spec
	act := max(sp.ActivationScale, 1)
	if sp.MaxScale > 0 {
		act = min(act, sp.MaxScale)
	}
	scale = desired

	lo, why := sp.MinScale, "min-scale: "
	if n := d.scheduled(in.now); n > lo {
		lo, why = n, "min-scale-schedule: "
	}
	if !d.initialized && sp.InitialScale > lo {
		lo, why = sp.InitialScale, "initial-scale: "
	}
	if !sp.ScaleToZeroEnabled && lo < 1 {
		lo, why = 1, "scale to zero is disabled: "
	}
	switch {
	case scale < lo:
		scale = lo
		b = append(b[:0], why...)
		b = appendPods(b, lo)
	case sp.MaxScale > 0 && scale > sp.MaxScale:
		scale = sp.MaxScale
		b = append(b[:0], "max-scale: "...)
		b = appendPods(b, sp.MaxScale)
	}

	// activation-scale is the smallest non-zero scale whenever there is
	// load. Without load (the way down to zero) fewer pods are allowed, as
	// in Knative, or a rate-limited descent could never get below it.
	load := in.stable > 0 || in.panic > 0 || pending > 0 || o.Poked
	if scale > 0 && scale < act && load {
		scale = act
		b = append(b[:0], "activation-scale: "...)
		b = appendPods(b, act)
	}

	if (pending > 0 || o.Poked) && scale < act {
		scale = act
		if o.Poked {
			b = append(b[:0], "poke"...)
		} else {
			b = append(b[:0], "requests waiting at the activator"...)
		}
	}

	if scale > 0 {
		d.wantZero = false
		return scale, false, b
	}
	if !d.wantZero {
		d.wantZero, d.zeroSince = true, in.now
	}
	if a, ok := d.policy.(*adaptive); ok && pending == 0 && !o.Poked && !d.lastSeen.IsZero() {
		// The learned plan replaces the stable window's traffic and the
		// grace period; the activator and the retention period stand.
		var n int
		var decided bool
		if n, decided, b = a.idleScale(sp, in.now.Sub(d.lastSeen), d.scale == 0, b); decided {
			switch {
			case n > 0:
				return n, true, b
			case !o.ActivatorInPath:
				b = append(b[:0], "waiting for the activator before scaling to zero"...)
				return 1, true, b
			case d.scale > 0 && in.now.Sub(d.zeroSince) < sp.ScaleToZeroPodRetention:
				b = append(b[:0], "keeping the last pod for the "...)
				b = appendSeconds(b, sp.ScaleToZeroPodRetention)
				b = append(b, " retention period"...)
				return 1, true, b
			case d.scale > 0:
				b = append(b[:0], "scale to zero: the idle plan's time is up"...)
			default:
				b = append(b[:0], "at zero"...)
			}
			return 0, true, b
		}
	}
	switch {
	case in.panic > 0:
		scale = act
		b = append(b[:0], "traffic in the panic window"...)
	case in.stable > 0:
		// Only a policy that cannot scale from zero by itself (hpa with no
		// ready pod) or a falling trend (pid) gets here; traffic in the
		// window means the service is not idle.
		scale = act
		b = append(b[:0], "traffic in the stable window"...)
	case !d.lastTraffic.IsZero() && in.now.Sub(d.lastTraffic) < sp.ScaleToZeroGracePeriod:
		scale = 1
		b = append(b[:0], "waiting out the "...)
		b = appendSeconds(b, sp.ScaleToZeroGracePeriod)
		b = append(b, " scale-to-zero grace period"...)
	case !o.ActivatorInPath:
		scale = 1
		b = append(b[:0], "waiting for the activator before scaling to zero"...)
	case d.scale > 0 && in.now.Sub(d.zeroSince) < sp.ScaleToZeroPodRetention:
		scale = 1
		b = append(b[:0], "keeping the last pod for the "...)
		b = appendSeconds(b, sp.ScaleToZeroPodRetention)
		b = append(b, " retention period"...)
	case d.scale > 0:
		b = append(b[:0], "scale to zero after "...)
		b = appendSeconds(b, sp.ScaleToZeroGracePeriod)
		b = append(b, " idle"...)
	default:
		b = append(b[:0], "at zero"...)
	}
	return scale, true, b
}

// scheduled is the min-scale-schedule's count at now; the adaptive
// policy looks ahead by its pods' measured startup, so that they are
// ready when the rule begins.
func (d *Decider) scheduled(now time.Time) int {
	sch := &d.spec.MinScaleSchedule
	if len(sch.Rules) == 0 {
		return 0
	}
	n := sch.At(now)
	if a, ok := d.policy.(*adaptive); ok && a.startup > 0 {
		n = max(n, sch.At(now.Add(a.lead())))
	}
	return n
}

// excessBurstCapacity is the policy's learned burst capacity's, or the
// spec's.
func (d *Decider) excessBurstCapacity(ready int, panic float64) float64 {
	if a, ok := d.policy.(*adaptive); ok {
		if tbc, ok := a.burstCapacity(&d.spec); ok {
			return math.Floor(float64(ready)*d.spec.Target - tbc - panic)
		}
	}
	return excessBurstCapacity(&d.spec, ready, panic)
}

// excessBurstCapacity is Knative's: 0 with target-burst-capacity 0, −1 with
// −1, else floor(ready × target − target-burst-capacity − panic). It uses
// the ready count itself, not max(1, ready): a service at zero has none.
func excessBurstCapacity(sp *autoscaling.Spec, ready int, panic float64) float64 {
	switch {
	case sp.TargetBurstCapacity == 0:
		return 0
	case sp.TargetBurstCapacity < 0:
		return -1
	}
	return math.Floor(float64(ready)*sp.Target - sp.TargetBurstCapacity - panic)
}

// reasonOf returns b as a string, reusing one of the last few reasons when
// the text is the same, so that steady-state decisions — also those that
// alternate between two or three reasons — do not allocate.
func (d *Decider) reasonOf(b []byte) string {
	for _, r := range d.reasons {
		if string(b) == r {
			return r
		}
	}
	d.next = (d.next + 1) % len(d.reasons)
	d.reasons[d.next] = string(b)
	return d.reasons[d.next]
}

// clean reads a negative or non-finite observation as 0: nothing sensible
// can be scaled on it.
func clean(v float64) float64 {
	if !(v > 0) || math.IsInf(v, 1) {
		return 0
	}
	return v
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// podsAtLeast converts a non-negative float pod count to an int, capped at
// maxPods.
func podsAtLeast(x float64) int {
	if !(x > 0) {
		return 0
	}
	if x >= maxPods {
		return maxPods
	}
	return int(x)
}

// ceilPods is ceil(x / perPod) as a pod count.
func ceilPods(x, perPod float64) int { return podsAtLeast(math.Ceil(x / perPod)) }

// rateLimits are the fewest and most pods one decision may go to from ready
// pods: floor(max(1, ready) / max-scale-down-rate) and ceil(max-scale-up-rate
// × max(1, ready)). A rate of 0 or less means no limit.
func rateLimits(sp *autoscaling.Spec, ready int) (down, up int) {
	r := float64(max(ready, 1))
	up = maxPods
	if sp.MaxScaleUpRate > 0 {
		up = podsAtLeast(math.Ceil(sp.MaxScaleUpRate * r))
	}
	if sp.MaxScaleDownRate > 0 {
		down = podsAtLeast(math.Floor(r / sp.MaxScaleDownRate))
	}
	return down, up
}
