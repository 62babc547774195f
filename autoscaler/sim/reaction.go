package sim

import (
	"math"
	"time"
)

// Reaction is how a run answered a rise of load at At (a step, a spike):
// how long until the first decision asked for more pods than the one
// standing before At, and until Pods pods were ready. Both are read from
// the timeline, so to the second: an event in the second [T, T+1) counts
// at T. Never is -1.
type Reaction struct {
	At      time.Duration `json:"at_ns"`
	Pods    int           `json:"pods"`
	FirstUp time.Duration `json:"first_up_ns"`
	Reached time.Duration `json:"reached_ns"`
}

// React measures how r answered a rise of load at at, pods being the
// ready pods it needs, and keeps it in r's summary.
func (r *Result) React(at time.Duration, pods int) {
	re := Reaction{At: at, Pods: pods, FirstUp: -1, Reached: -1}
	first := int(at / time.Second)
	base := 0
	if first > 0 && first <= len(r.Timeline) {
		base = r.Timeline[first-1].Scale
	}
	since := func(t int) time.Duration { return max(0, time.Duration(t)*time.Second-at) }
	for _, row := range r.Timeline[min(first, len(r.Timeline)):] {
		if re.FirstUp < 0 && row.Scale > base {
			re.FirstUp = since(row.T)
		}
		if re.Reached < 0 && row.Ready >= pods {
			re.Reached = since(row.T)
		}
	}
	r.Summary.Reaction = &re
}

// PodsAtTarget is how many pods keep a load of rate requests a second,
// each of work at full speed, at the spec's CPU target (cpu-target, 70%
// of the pods' cores by default, whichever metric the spec scales on):
// the load's CPU — rate × work requests in service, each using
// Cores/Capacity — over the CPU one pod should use, rounded up. It is 0
// when the pods' capacity is unlimited, which leaves their CPU untold.
func (c Config) PodsAtTarget(rate float64, work time.Duration) int {
	capacity := c.capacity()
	spec, err := c.Spec.WithRequests(c.cores(), 0)
	if capacity == 0 || err != nil || spec.CPUPerPod() <= 0 {
		return 0
	}
	cpu := rate * work.Seconds() * c.cores() / float64(capacity)
	// A hair below a whole number of pods is that number: 7 × 0.1 is not
	// 0.7 in floating point.
	return int(math.Ceil(cpu/spec.CPUPerPod() - 1e-9))
}
