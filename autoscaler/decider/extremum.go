package decider

import "time"

// extremum keeps the maximum (or the minimum) of the values recorded over a
// trailing window of whole seconds: a value recorded in second s counts
// while s > now − span (so a span of 0 keeps nothing). It is a monotonic
// deque in a ring allocated once for span+1 entries — at most one entry per
// second survives, because within a second only the most extreme value can
// matter — so recording and reading are amortised O(1) and allocate
// nothing.
//
// Time going backwards is taken as the last second seen.
type extremum struct {
	span int64
	min  bool
	secs []int64
	vals []int
	// head is the ring index of the oldest entry; n the number of entries.
	head, n int
	last    int64
}

func newExtremum(span time.Duration, min bool) *extremum {
	e := &extremum{min: min}
	e.resize(span)
	return e
}

// spanSeconds rounds a window up to whole seconds.
func spanSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// resize changes the window, keeping the entries that still fit. It
// allocates when the span changes.
func (e *extremum) resize(span time.Duration) {
	s := spanSeconds(span)
	if e.secs != nil && s == e.span {
		return
	}
	secs, vals := make([]int64, s+1), make([]int, s+1)
	n := 0
	for i := 0; i < e.n; i++ {
		j := (e.head + i) % len(e.secs)
		if e.secs[j] > e.last-s && n < len(secs) {
			secs[n], vals[n] = e.secs[j], e.vals[j]
			n++
		}
	}
	e.span, e.secs, e.vals, e.head, e.n = s, secs, vals, 0, n
}

// beats says whether a is strictly more extreme than b.
func (e *extremum) beats(a, b int) bool {
	if e.min {
		return a < b
	}
	return a > b
}

func (e *extremum) clock(now time.Time) int64 {
	e.last = max(e.last, now.Unix())
	return e.last
}

func (e *extremum) evict(sec int64) {
	for e.n > 0 && e.secs[e.head] <= sec-e.span {
		e.head = (e.head + 1) % len(e.secs)
		e.n--
	}
}

// record adds v at now.
func (e *extremum) record(now time.Time, v int) {
	sec := e.clock(now)
	e.evict(sec)
	for e.n > 0 {
		back := (e.head + e.n - 1) % len(e.secs)
		if e.beats(e.vals[back], v) {
			if e.secs[back] == sec {
				return // this second already holds a more extreme value
			}
			break
		}
		e.n--
	}
	if e.n == len(e.secs) {
		// Only reachable with span 0, whose single slot is always stale.
		e.head = (e.head + 1) % len(e.secs)
		e.n--
	}
	i := (e.head + e.n) % len(e.secs)
	e.secs[i], e.vals[i] = sec, v
	e.n++
}

// value is the extreme of the values recorded in the window ending at now;
// ok is false when the window holds none.
func (e *extremum) value(now time.Time) (v int, ok bool) {
	e.evict(e.clock(now))
	if e.n == 0 {
		return 0, false
	}
	return e.vals[e.head], true
}
