package loadgen

import (
	"sort"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// schedulePacer fires hit i at schedule[i] from the start of the attack: a
// trace replay's arrivals, already scaled by the speed and cut to the
// duration. It is a pure function of its arguments.
//
// A hit that is late (the attacker fell behind, or the schedule holds equal
// arrivals) fires at once: an open loop never skips or delays the rest of
// its schedule because the target was slow.
type schedulePacer []time.Duration

var _ vegeta.Pacer = schedulePacer(nil)

// Pace returns how long to wait before the next hit, and stops once every
// arrival has fired.
func (p schedulePacer) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	if hits >= uint64(len(p)) {
		return 0, true
	}
	// Zero or negative waits make the attacker fire at once.
	return p[hits] - elapsed, false
}

// Rate is the number of arrivals in the second that ends at elapsed.
func (p schedulePacer) Rate(elapsed time.Duration) float64 {
	upTo := sort.Search(len(p), func(i int) bool { return p[i] > elapsed })
	from := sort.Search(len(p), func(i int) bool { return p[i] > elapsed-time.Second })
	return float64(upTo - from)
}

// boundedPacer ends another pacer after max hits (when max > 0) or once
// until has elapsed (when until > 0).
//
// Open loops are bounded by count only: the schedule's size is known up
// front (rate × duration), and stopping on the clock instead would drop the
// last hit whenever the attacker ran a little late. Closed loops have no
// schedule, so they stop on the clock.
type boundedPacer struct {
	vegeta.Pacer
	max   uint64
	until time.Duration
}

// Pace stops at the bounds and defers to the wrapped pacer within them.
func (p boundedPacer) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	if p.max > 0 && hits >= p.max {
		return 0, true
	}
	if p.until > 0 && elapsed >= p.until {
		return 0, true
	}
	return p.Pacer.Pace(elapsed, hits)
}
