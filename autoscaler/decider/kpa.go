package decider

import (
	"math"
	"time"

	"github.com/swell-run/swell/pkg/autoscaling"
)

// kpa is Knative's KPA decision: the desired pods of the stable and the
// panic window, each rate-limited; panic mode when the panic window asks
// for panic-threshold times the ready pods; in panic the decision never
// goes down.
type kpa struct {
	// panicTime is when the panic window was last over the threshold
	// during the current panic episode; zero when not in panic.
	panicTime time.Time
	// maxPanic is the highest decision of the current panic episode.
	maxPanic int
}

// newKPA starts in panic holding scale after a restart with pods running,
// so that an empty history does not scale them down before a stable
// window has been observed (Knative does this for more than one pod; here
// for one too, see docs/autoscaling.md).
func newKPA(now time.Time, scale int, restart bool) *kpa {
	k := &kpa{}
	if restart && scale > 0 {
		k.panicTime, k.maxPanic = now, scale
	}
	return k
}

func (k *kpa) recommend(in *input, b []byte) (recommendation, []byte) {
	sp := in.spec
	readyF := float64(max(in.ready, 1))
	down, up := rateLimits(sp, in.ready)
	target := sp.TargetPerPod()

	// The unclamped wishes drive activation and the panic threshold, as in
	// Knative; the clamped ones are what may be asked for.
	wantStable := math.Ceil(in.stable / target)
	wantPanic := math.Ceil(in.panic / target)
	stable := min(max(podsAtLeast(wantStable), down), up)
	panicPods := min(max(podsAtLeast(wantPanic), down), up)
	if act := sp.ActivationScale; act > 1 {
		if wantStable > 0 && stable < act {
			stable = act
		}
		if wantPanic > 0 && panicPods < act {
			panicPods = act
		}
	}

	over := wantPanic/readyF >= sp.PanicThreshold
	switch {
	case over:
		// Entering panic, or still over the threshold: the episode lasts at
		// least a stable window from now.
		k.panicTime = in.now
	case !k.panicTime.IsZero() && k.panicTime.Add(sp.StableWindow).Before(in.now):
		// A full stable window without the condition: the surge is in the
		// stable window now, which can take over.
		k.panicTime, k.maxPanic = time.Time{}, 0
	}

	if k.panicTime.IsZero() {
		b = appendStable(b, stable, podsAtLeast(wantStable), down, up, target)
		return recommendation{desired: stable}, b
	}
	// In panic the larger of both windows counts (the stable one can be the
	// larger after a long surge), and the decision never goes down.
	k.maxPanic = max(k.maxPanic, stable, panicPods)
	// The reason names pods, not the observed value (Decision.Panic has
	// it): a steady panic then keeps one reason string and allocates
	// nothing.
	b = append(b, "panic: wants "...)
	b = appendPods(b, podsAtLeast(wantPanic))
	b = append(b, " for "...)
	b = appendInt(b, in.ready)
	b = append(b, " ready at target "...)
	b = appendNum(b, target)
	return recommendation{desired: k.maxPanic, inPanic: true}, b
}

// appendStable explains a stable-mode decision.
func appendStable(b []byte, got, want, down, up int, target float64) []byte {
	switch {
	case want > up && got == up:
		b = append(b, "stable: max-scale-up-rate limits to "...)
		return appendPods(b, up)
	case want < down && got == down:
		b = append(b, "stable: max-scale-down-rate limits to "...)
		return appendPods(b, down)
	case got > want:
		b = append(b, "stable: activation-scale "...)
		return appendPods(b, got)
	}
	b = append(b, "stable at target "...)
	return appendNum(b, target)
}

func (k *kpa) applied(time.Time, int, int) {}

func (k *kpa) panicking() bool { return !k.panicTime.IsZero() }

func (k *kpa) setSpec(*autoscaling.Spec) {}
