package stats

import (
	"sync"
	"time"
)

// Tracker accumulates the load of one process (or one service) between
// reports. Safe for concurrent use; Start/End are on the request hot path.
//
// Concurrency is the integral of the number of requests held over the
// period, divided by the period's length: Start and End each add the area
// since the previous event (held × elapsed) before changing the count, and
// Report adds the area up to its end. A request held across a report
// boundary therefore counts in each period for the time it was held in it.
//
// Why a mutex and not atomics: an exact lock-free design must make each
// event land wholly in one period, which takes a hot/cold pair of
// accumulators and a begun/done counter per event (as Prometheus histograms
// do) — four to six atomic read-modify-writes per event against the two of
// an uncontended sync.Mutex. A prototype of it cost 75-95 ns per Start+End
// pair against 30-40 ns for this one, single-threaded and in parallel alike
// (docs/stats.md has the figures). The critical
// section is a handful of integer operations with no call and no allocation,
// and the lock is per Tracker, not global.
//
// Times are kept as int64 nanoseconds since the Tracker was created (292
// years of range) and the area as int64 nanosecond-requests per period
// (overflows only past 292 request-years in one period), so neither a long
// uptime nor a long period can overflow.
//
// Callers read their clock before calling, so events can reach the lock
// slightly out of time order. An event stamped before the last one is taken
// as happening at the last one's time: time never runs backwards inside the
// Tracker, no area is ever negative, and the total held time stays the sum
// of what each period reports.
type Tracker struct {
	base time.Time // immutable

	mu    sync.Mutex
	start time.Time // period start
	// startAt is start as an offset from base; last is the offset of the
	// latest event or report, never less than startAt.
	startAt, last int64
	// held and proxiedHeld are the requests held right now.
	held, proxiedHeld int64
	// area and proxiedArea are nanosecond-requests since startAt.
	area, proxiedArea int64
	// requests and proxiedRequests count arrivals since startAt.
	requests, proxiedRequests uint64
	// shares are the proxied figures of the activators that named
	// themselves (StartFrom), the first nshares of them. A share is kept
	// while it holds a request, so that the End of every request counted
	// in it finds it; the others are dropped at each Report.
	shares  [MaxActivatorShares]share
	nshares int
}

// share is one activator's part of the proxied figures.
type share struct {
	key      uint64
	held     int64
	area     int64
	requests uint64
}

// NewTracker returns a Tracker whose first period starts at now.
func NewTracker(now time.Time) *Tracker {
	return &Tracker{base: now, start: now}
}

// Start records a request arriving at now; proxied marks activator traffic.
func (t *Tracker) Start(now time.Time, proxied bool) {
	at := int64(now.Sub(t.base))
	t.mu.Lock()
	t.advanceLocked(at)
	t.held++
	t.requests++
	if proxied {
		t.proxiedHeld++
		t.proxiedRequests++
	}
	t.mu.Unlock()
}

// StartFrom records a proxied request arriving at now from the activator
// whose ActivatorKey is activator, and reports whether it is counted in
// that activator's share: not when activator is 0, nor when
// MaxActivatorShares other activators hold shares. Either way it counts
// as proxied. Its End is EndFrom with activator if it was counted in the
// share, else End with proxied true.
func (t *Tracker) StartFrom(now time.Time, activator uint64) bool {
	at := int64(now.Sub(t.base))
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advanceLocked(at)
	t.held++
	t.requests++
	t.proxiedHeld++
	t.proxiedRequests++
	if activator == 0 {
		return false
	}
	sh := t.shareLocked(activator)
	if sh == nil {
		if t.nshares == len(t.shares) {
			return false
		}
		sh = &t.shares[t.nshares]
		*sh = share{key: activator}
		t.nshares++
	}
	sh.held++
	sh.requests++
	return true
}

// shareLocked returns activator's share, or nil.
func (t *Tracker) shareLocked(activator uint64) *share {
	for i := range t.nshares {
		if t.shares[i].key == activator {
			return &t.shares[i]
		}
	}
	return nil
}

// End records a request started with the same proxied value leaving at now.
// An End without a matching Start is ignored rather than letting the count
// go negative.
func (t *Tracker) End(now time.Time, proxied bool) {
	at := int64(now.Sub(t.base))
	t.mu.Lock()
	t.endLocked(at, proxied)
	t.mu.Unlock()
}

// EndFrom records a request that StartFrom counted in activator's share
// leaving at now.
func (t *Tracker) EndFrom(now time.Time, activator uint64) {
	at := int64(now.Sub(t.base))
	t.mu.Lock()
	t.endLocked(at, true)
	if sh := t.shareLocked(activator); sh != nil && sh.held > 0 {
		sh.held--
	}
	t.mu.Unlock()
}

func (t *Tracker) endLocked(at int64, proxied bool) {
	t.advanceLocked(at)
	if t.held > 0 {
		t.held--
	}
	if proxied && t.proxiedHeld > 0 {
		t.proxiedHeld--
	}
}

// advanceLocked adds the area held from the last event to at.
func (t *Tracker) advanceLocked(at int64) {
	if d := at - t.last; d > 0 {
		t.area += t.held * d
		t.proxiedArea += t.proxiedHeld * d
		for i := range t.nshares {
			t.shares[i].area += t.shares[i].held * d
		}
		t.last = at
	}
}

// InFlight returns the number of requests currently held.
func (t *Tracker) InFlight() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.held
}

// Report closes the current period at now, returns its figures, and starts
// the next period at now. Uptime is left to the caller.
//
// If now is before the period's start (a clock that went backwards), the
// period is taken to end where it started: the Report has End at the start,
// Period 0 and Concurrency 0 (its arrivals are still counted), and the next
// period starts at the same point. Whatever area there was stays in the
// next period, so none is lost. Reported proxied figures never exceed the
// totals.
func (t *Tracker) Report(now time.Time) Report {
	at := int64(now.Sub(t.base))
	t.mu.Lock()
	defer t.mu.Unlock()
	if at < t.startAt {
		at, now = t.startAt, t.start
	}
	t.advanceLocked(at)
	r := Report{
		End:             now,
		Period:          time.Duration(at - t.startAt),
		Requests:        t.requests,
		ProxiedRequests: t.proxiedRequests,
	}
	t.requests, t.proxiedRequests = 0, 0
	if r.Period > 0 {
		r.Concurrency = float64(t.area) / float64(r.Period)
		r.ProxiedConcurrency = min(float64(t.proxiedArea)/float64(r.Period), r.Concurrency)
		t.area, t.proxiedArea = 0, 0
	}
	kept := 0
	for i := range t.nshares {
		sh := t.shares[i]
		if sh.requests > 0 || (sh.area > 0 && r.Period > 0) {
			c := 0.0
			if r.Period > 0 {
				c = float64(sh.area) / float64(r.Period)
				sh.area = 0
			}
			r.ByActivator = append(r.ByActivator, ActivatorShare{Activator: sh.key, Concurrency: c, Requests: sh.requests})
			sh.requests = 0
		}
		// A share whose area waits for the next period (a report of
		// length zero) is kept for it too.
		if sh.held > 0 || sh.area > 0 {
			t.shares[kept] = sh
			kept++
		}
	}
	clear(t.shares[kept:t.nshares])
	t.nshares = kept
	t.start, t.startAt = now, at
	return r
}
