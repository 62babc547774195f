package decider

import (
	"math"
	"time"

	"github.com/swell-run/swell/pkg/autoscaling"
)

// exponential moves the pod count in geometric steps from the ready pods R,
// towards need = ceil(stable / target per pod):
//
//   - above target (need > R): the smallest max(R, 1) × growth^k, k ≥ 0,
//     that reaches need ("multiply until enough"): one decision covers the
//     load, at most growth× over it, and counts stay on a geometric ladder
//     (1, 2, 4, 8 … from one pod at growth 2) so small load changes do not
//     move them;
//   - below target (need < R): floor(R / shrink), but not below need: the
//     gentle way down, one step per decision;
//   - at need: R.
//
// It has no state; the rate limits apply after it.
type exponential struct{}

func (exponential) recommend(in *input, b []byte) (recommendation, []byte) {
	sp := in.spec
	need := ceilPods(in.stable, sp.TargetPerPod())
	r := in.ready
	next := r
	switch {
	case need > r:
		next = grow(float64(max(r, 1)), sp.Exponential.GrowthFactor, need)
		b = append(b, "exponential: growing ×"...)
		b = appendNum(b, sp.Exponential.GrowthFactor)
		b = append(b, " to "...)
		b = appendPods(b, next)
	case need < r:
		next = r
		if f := sp.Exponential.ShrinkFactor; f > 1 {
			next = podsAtLeast(math.Floor(float64(r) / f))
		}
		next = max(next, need)
		b = append(b, "exponential: shrinking ÷"...)
		b = appendNum(b, sp.Exponential.ShrinkFactor)
		b = append(b, " to "...)
		b = appendPods(b, next)
	default:
		b = append(b, "exponential: at target"...)
	}
	next, b = limitRate(sp, in.ready, next, b)
	return recommendation{desired: next}, b
}

// grow is the smallest ceil(base × g^k), k ≥ 0, that is at least need. A
// factor of 1 or less cannot grow; it then goes to need directly.
func grow(base, g float64, need int) int {
	if podsAtLeast(math.Ceil(base)) >= need {
		return podsAtLeast(math.Ceil(base))
	}
	if !(g > 1) {
		return need
	}
	k := math.Ceil(math.Log(float64(need)/base) / math.Log(g))
	// The logarithm may be off by one either way in floating point.
	for k > 0 && podsAtLeast(math.Ceil(base*math.Pow(g, k-1))) >= need {
		k--
	}
	for podsAtLeast(math.Ceil(base*math.Pow(g, k))) < need {
		k++
	}
	return podsAtLeast(math.Ceil(base * math.Pow(g, k)))
}

func (exponential) applied(time.Time, int, int) {}

func (exponential) panicking() bool { return false }

func (exponential) setSpec(*autoscaling.Spec) {}
