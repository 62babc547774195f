package decider

import (
	"math"
	"time"

	"github.com/swell-run/swell/pkg/autoscaling"
)

// hpa is the Kubernetes HorizontalPodAutoscaler v2 algorithm on Swell's
// metric, with the behavior field's semantics as the Kubernetes controller
// documents them:
//
//   - usage ratio = stable / (ready × target per pod); inside the tolerance
//     (per direction) the current count is kept, else the recommendation is
//     ceil(stable / target per pod) — ceil(ready × ratio);
//   - stabilization: scale up only to the lowest recommendation of the
//     scale-up window, down only to the highest of the scale-down window;
//   - rate: each Pods/Percent policy allows a change from the count at the
//     start of its period (the current count minus this period's scale
//     events), selectPolicy Max takes the policy allowing the largest
//     change, Min the smallest, Disabled forbids the direction.
//
// "Current" is the decider's previous Scale — the replicas asked for, like
// the scale subresource's spec the controller reads — and scale events are
// the changes between consecutive Scales. The stable-window value is the
// metric (the HPA's own metric pipeline averages similarly).
type hpa struct {
	up, down *extremum // min over the scale-up window, max over the scale-down window
	events   events
}

func newHPA(sp *autoscaling.Spec, now time.Time, scale int, restart bool) *hpa {
	h := &hpa{
		up:   newExtremum(sp.HPA.ScaleUp.StabilizationWindow, true),
		down: newExtremum(sp.HPA.ScaleDown.StabilizationWindow, false),
	}
	h.events.resize(longestPeriod(sp))
	if restart {
		// As the Kubernetes controller does on start: the scale-down window
		// begins with the current count, so a new leader does not scale
		// down on its first recommendation.
		h.down.record(now, scale)
	}
	return h
}

func longestPeriod(sp *autoscaling.Spec) time.Duration {
	var p time.Duration
	for _, r := range [...]*autoscaling.HPARules{&sp.HPA.ScaleUp, &sp.HPA.ScaleDown} {
		for _, pol := range r.Policies {
			p = max(p, pol.Period)
		}
	}
	return p
}

func (h *hpa) recommend(in *input, b []byte) (recommendation, []byte) {
	sp := in.spec
	cur := in.prevScale
	target := sp.TargetPerPod()

	raw := cur
	switch {
	case in.ready == 0:
		// No ready pod gives no usage ratio. The HPA does not scale from
		// zero by itself; the guard rails wake the service on traffic.
		b = append(b, "hpa: no ready pod, holding "...)
		b = appendPods(b, cur)
	default:
		ratio := in.stable / (float64(in.ready) * target)
		if ratio > 1+sp.HPA.ToleranceUp || ratio < 1-sp.HPA.ToleranceDown {
			raw = ceilPods(in.stable, target)
			b = append(b, "hpa: "...)
			b = appendPods(b, raw)
			b = append(b, " at target "...)
			b = appendNum(b, target)
		} else {
			b = append(b, "hpa: within tolerance"...)
		}
	}

	// Stabilization over the previous recommendations and this one.
	upRec, downRec := raw, raw
	if v, ok := h.up.value(in.now); ok {
		upRec = min(upRec, v)
	}
	if v, ok := h.down.value(in.now); ok {
		downRec = max(downRec, v)
	}
	h.up.record(in.now, raw)
	h.down.record(in.now, raw)
	rec := cur
	if rec < upRec {
		rec = upRec
	}
	if rec > downRec {
		rec = downRec
	}
	if rec != raw {
		b = append(b, "; stabilized at "...)
		b = appendPods(b, rec)
	}

	// Scaling policies.
	now := in.now.Unix()
	switch {
	case rec > cur:
		if limit, ok := h.limit(&sp.HPA.ScaleUp, cur, now, true); ok && rec > max(limit, cur) {
			rec = max(limit, cur)
			b = append(b, "; scale-up policy limits to "...)
			b = appendPods(b, rec)
		}
	case rec < cur:
		if limit, ok := h.limit(&sp.HPA.ScaleDown, cur, now, false); ok && rec < min(limit, cur) {
			rec = min(limit, cur)
			b = append(b, "; scale-down policy limits to "...)
			b = appendPods(b, rec)
		}
	}
	rec, b = limitRate(sp, in.ready, rec, b)
	return recommendation{desired: rec}, b
}

// limit is the most (up) or fewest (down) pods the rules allow from cur;
// ok is false when the rules set no limit (no policies).
func (h *hpa) limit(r *autoscaling.HPARules, cur int, now int64, up bool) (int, bool) {
	if r.SelectPolicy == autoscaling.SelectDisabled {
		return cur, true
	}
	if len(r.Policies) == 0 {
		return 0, false
	}
	// For scaling up the largest change is the highest count; for scaling
	// down it is the lowest.
	largest := r.SelectPolicy != autoscaling.SelectMin
	pickHigh := largest == up
	var result int
	for i, p := range r.Policies {
		added, deleted := h.events.sum(now, p.Period)
		start := cur - added + deleted
		var proposed int
		switch {
		case up && p.Type == autoscaling.PolicyPercent:
			// Rounded up, so that a small service can grow at all.
			proposed = podsAtLeast(math.Ceil(float64(start) * (1 + float64(p.Value)/100)))
		case up:
			proposed = start + p.Value
		case p.Type == autoscaling.PolicyPercent:
			proposed = int(float64(start) * (1 - float64(p.Value)/100))
		default:
			proposed = start - p.Value
		}
		if i == 0 || (pickHigh && proposed > result) || (!pickHigh && proposed < result) {
			result = proposed
		}
	}
	return result, true
}

func (h *hpa) applied(now time.Time, prev, scale int) {
	if scale != prev {
		h.events.add(now.Unix(), scale-prev)
	}
}

func (h *hpa) panicking() bool { return false }

func (h *hpa) setSpec(sp *autoscaling.Spec) {
	h.up.resize(sp.HPA.ScaleUp.StabilizationWindow)
	h.down.resize(sp.HPA.ScaleDown.StabilizationWindow)
	h.events.resize(longestPeriod(sp))
}

// events are the scale changes of the longest policy period, summed per
// second in a ring: a slot holds the pods added and removed in its second.
type events struct {
	secs          []int64
	added, remove []int
}

func (e *events) resize(period time.Duration) {
	n := int(max(spanSeconds(period), 1))
	if len(e.secs) == n {
		return
	}
	old := *e
	e.secs, e.added, e.remove = make([]int64, n), make([]int, n), make([]int, n)
	for i := range e.secs {
		e.secs[i] = math.MinInt64
	}
	for i, s := range old.secs {
		if s != math.MinInt64 && old.added[i]+old.remove[i] != 0 {
			// Keep what still fits; a shrink drops the oldest.
			j := index(s, n)
			if e.secs[j] == math.MinInt64 || e.secs[j] < s {
				e.secs[j], e.added[j], e.remove[j] = s, old.added[i], old.remove[i]
			}
		}
	}
}

func index(s int64, n int) int {
	i := s % int64(n)
	if i < 0 {
		i += int64(n)
	}
	return int(i)
}

func (e *events) add(sec int64, change int) {
	i := index(sec, len(e.secs))
	if e.secs[i] != sec {
		if e.secs[i] > sec {
			return // older than the ring
		}
		e.secs[i], e.added[i], e.remove[i] = sec, 0, 0
	}
	if change > 0 {
		e.added[i] += change
	} else {
		e.remove[i] -= change
	}
}

// sum is the pods added and removed in the seconds s > now − period, as the
// controller counts the events newer than now − period.
func (e *events) sum(now int64, period time.Duration) (added, removed int) {
	cut := now - spanSeconds(period)
	for i, s := range e.secs {
		if s > cut && s <= now {
			added += e.added[i]
			removed += e.remove[i]
		}
	}
	return added, removed
}
