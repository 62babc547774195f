// Package window keeps one service's metric as 1-second buckets and averages
// it over trailing windows — the stable and panic windows the deciders read.
//
// A Window is a ring of 1-second buckets sized for the longest window read
// from it (the stable window; at most an hour, 3600 buckets). Every source
// of the metric adds into the bucket of its second: the scrape round's
// total over the pods, each activator's report. Averages are taken over the
// last N seconds ending at now:
//
//   - Only the seconds with a record count; a record of 0 is a known zero.
//     The collector records every service every second, zeros included, so
//     a second without a record is one whose load could not be read (its
//     pods' scrapes failed, or the round ran out of time): it is left out,
//     not read as 0, which would scale a service down for a failure to
//     measure it. A second after the last record is not known yet — the
//     current second's scrape may still be on its way — and is left out
//     too, as Knative does; once the last record is a whole window old the
//     window has no data and averages to 0. While only the current second is
//     missing, the window ends at the second before it, so an N-second
//     window still reads N seconds (a 1-second panic window reads the last
//     complete second rather than nothing).
//   - So a service younger than the window is averaged over its own
//     history, not diluted by the seconds before it existed: its first
//     second reads its full load, not 1/60 of it.
//   - A gap of at least the ring's length (the service sat at zero with
//     nothing recorded) starts a new history at the next record, for the
//     same reason.
//
// Averaging is linear (sum / seconds) or exponentially weighted (see
// WeightedAverage). Both read the same buckets and agree on a constant load.
//
// Values are held in fixed point (millionths) in int64 so that the running
// sum behind the O(1) stable average is exact: it never drifts, and a
// window of zeros averages to exactly 0 — a residue of 1e-13 would
// otherwise ask for one pod forever.
//
// A Window is not safe for concurrent use. Nothing allocates after New and
// Resize.
package window

import (
	"math"
	"time"
)

const (
	// unit is the fixed-point resolution of a bucket: one millionth.
	unit = 1e6
	// maxValue caps a single record so that a full ring of capped buckets
	// (3600 × 1e9 × 1e6 ≈ 3.6e18) still fits an int64.
	maxValue = 1e9
)

// Window is a ring of 1-second buckets of one metric of one service.
type Window struct {
	buckets []int64
	// known marks the buckets of seconds that were recorded; nknown counts
	// them over the seconds (last-len, last].
	known  []bool
	nknown int
	// first and last are the Unix seconds of the oldest and newest second of
	// the current history; valid when recorded.
	first, last int64
	recorded    bool
	// sum is the exact sum of the buckets of seconds (last-len, last].
	sum         int64
	lastNonZero time.Time
}

// New returns an empty Window holding size worth of 1-second buckets
// (rounded up to a whole second, at least one).
func New(size time.Duration) *Window {
	n := Buckets(size)
	return &Window{buckets: make([]int64, n), known: make([]bool, n)}
}

// Buckets is the number of 1-second buckets a window of length d covers: d
// rounded up to a whole second, at least 1.
func Buckets(d time.Duration) int {
	if d <= time.Second {
		return 1
	}
	return int((d + time.Second - 1) / time.Second)
}

// Size is the longest window the ring holds.
func (w *Window) Size() time.Duration { return time.Duration(len(w.buckets)) * time.Second }

// Resize changes the ring to hold size worth of buckets, keeping the newest
// seconds that still fit. It allocates unless the size is unchanged; call
// it when the service's stable window changes.
func (w *Window) Resize(size time.Duration) {
	n := Buckets(size)
	if n == len(w.buckets) {
		return
	}
	nb, nk := make([]int64, n), make([]bool, n)
	var sum int64
	var known int
	if w.recorded {
		from := max(w.last-int64(n)+1, w.last-int64(len(w.buckets))+1, w.first)
		for s := from; s <= w.last; s++ {
			i := index(s, len(w.buckets))
			nb[index(s, n)], nk[index(s, n)] = w.buckets[i], w.known[i]
			sum += w.buckets[i]
			if w.known[i] {
				known++
			}
		}
		// Seconds a shrink dropped are gone, not zeros: the history now
		// starts at the oldest second kept.
		w.first = from
	}
	w.buckets, w.sum, w.known, w.nknown = nb, sum, nk, known
}

// index maps a Unix second to its ring slot; seconds before 1970 (fake
// clocks) map like any other.
func index(s int64, n int) int {
	i := s % int64(n)
	if i < 0 {
		i += int64(n)
	}
	return int(i)
}

// Record adds v to the bucket of t's second. Sources reporting the same
// second add up. A negative or non-finite v is dropped whole (it is a
// broken report, not a measurement); values above 1e9 are capped. A record
// 0 still counts: it makes its second known.
//
// Clock going backwards: a record for a second still inside the ring adds
// to that second's bucket (a late activator report lands where it belongs,
// and may extend the history back); a record older than the ring is
// dropped.
func (w *Window) Record(t time.Time, v float64) {
	if !(v >= 0) || math.IsInf(v, 1) {
		return
	}
	fv := int64(math.Round(min(v, maxValue) * unit))
	s := t.Unix()
	n := int64(len(w.buckets))
	switch {
	case !w.recorded || s-w.last >= n:
		// A first record, or one after a whole ring of silence: a new
		// history starts here.
		clear(w.buckets)
		clear(w.known)
		w.sum, w.nknown = 0, 0
		w.first, w.last, w.recorded = s, s, true
	case s > w.last:
		for x := w.last + 1; x <= s; x++ {
			i := index(x, len(w.buckets))
			w.sum -= w.buckets[i]
			w.buckets[i] = 0
			if w.known[i] {
				w.known[i] = false
				w.nknown--
			}
		}
		w.last = s
	case s <= w.last-n:
		return
	case s < w.first:
		// Within the ring but before the history began: its slot holds no
		// data of this history (it is zero), so the history can grow back.
		w.first = s
	}
	i := index(s, len(w.buckets))
	w.buckets[i] += fv
	w.sum += fv
	if !w.known[i] {
		w.known[i] = true
		w.nknown++
	}
	if fv > 0 && t.After(w.lastNonZero) {
		w.lastNonZero = t
	}
}

// span returns the seconds [start, end] of the window of n seconds ending
// at now that the history covers; ok is false when it covers none.
func (w *Window) span(now time.Time, n int) (start, end int64, ok bool) {
	if !w.recorded {
		return 0, 0, false
	}
	n = min(max(n, 1), len(w.buckets))
	s := now.Unix()
	end = min(s, w.last)
	top := s
	if w.last == s-1 {
		// The current second is still being collected: the window ends
		// at the last complete one, so that an N-second window reads N
		// seconds (a 1-second panic window would otherwise read none).
		top = s - 1
	}
	start = max(top-int64(n)+1, w.first, w.last-int64(len(w.buckets))+1)
	return start, end, start <= end
}

// Average is the linear average over the window of d (rounded up to whole
// seconds, at most Size) ending at now: the sum of the recorded seconds'
// buckets divided by their number (see the package comment for which
// seconds count). 0 when the window holds no data. A query for a time
// before the last record averages the window ending at that time, over the
// seconds the ring still holds.
//
// It costs O(1) for a window as long as the ring (the running sum) and
// O(min(N, ring−N)) otherwise.
func (w *Window) Average(now time.Time, d time.Duration) float64 {
	start, end, ok := w.span(now, Buckets(d))
	if !ok {
		return 0
	}
	sum, known := w.total(start, end)
	if known == 0 {
		return 0
	}
	return float64(sum) / unit / float64(known)
}

// total is the sum of the buckets of [start, end], seconds the ring holds,
// and how many of them are known.
func (w *Window) total(start, end int64) (sum int64, known int) {
	n := len(w.buckets)
	ringStart := w.last - int64(n) + 1
	if end == w.last && start-ringStart < end-start+1 {
		// Cheaper to take the seconds before start off the running sums.
		sum, known = w.sum, w.nknown
		for s := ringStart; s < start; s++ {
			i := index(s, n)
			sum -= w.buckets[i]
			if w.known[i] {
				known--
			}
		}
		return sum, known
	}
	for s := start; s <= end; s++ {
		i := index(s, n)
		sum += w.buckets[i]
		if w.known[i] {
			known++
		}
	}
	return sum, known
}

// Smoothing is the α of an exponentially weighted window of d: 2/(N+1) for
// N = Buckets(d). Under it the mean age of an exponential average equals the
// mean age of an N-second linear window, (N−1)/2 seconds (the usual "span"
// convention), so switching averaging does not shift how far back a window
// looks.
func Smoothing(d time.Duration) float64 { return 2 / (float64(Buckets(d)) + 1) }

// WeightedAverage is the exponentially weighted average over the window of d
// ending at now: a known second k seconds older than the newest known
// second weighs (1−α)^k with α = Smoothing(d), and the weighted sum is
// divided by the sum of the weights of the known seconds. The weights are
// normalised so that a constant load reads the same as with Average; the
// seconds used are the same as Average's. O(N).
func (w *Window) WeightedAverage(now time.Time, d time.Duration) float64 {
	start, end, ok := w.span(now, Buckets(d))
	if !ok {
		return 0
	}
	keep := 1 - Smoothing(d)
	var num, den float64
	weight := 1.0
	for s := end; s >= start; s-- {
		if i := index(s, len(w.buckets)); w.known[i] {
			num += float64(w.buckets[i]) * weight
			den += weight
		}
		weight *= keep
	}
	if den == 0 {
		return 0
	}
	return num / unit / den
}

// HasData says whether the window of d ending at now holds any recorded
// second, i.e. whether Average(now, d) reads data rather than nothing.
func (w *Window) HasData(now time.Time, d time.Duration) bool {
	start, end, ok := w.span(now, Buckets(d))
	if !ok {
		return false
	}
	if end == w.last {
		return true // the last second is always a recorded one
	}
	_, known := w.total(start, end)
	return known > 0
}

// LastNonZero is the time of the latest record with a value above 0 — the
// last traffic seen — or the zero time if there was none.
func (w *Window) LastNonZero() time.Time { return w.lastNonZero }

// LastRecord is the start of the newest recorded second, or the zero time
// if nothing was recorded.
func (w *Window) LastRecord() time.Time {
	if !w.recorded {
		return time.Time{}
	}
	return time.Unix(w.last, 0)
}
