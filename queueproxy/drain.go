package queueproxy

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// drainer decides when a draining queue-proxy may stop.
//
// Once started, a drain lasts until no request has been in flight for the
// quiet period — requests that still arrive (clients and load balancers
// learn of the drain with some delay) are served and start the quiet
// period over — or until the drain timeout, whichever comes first.
type drainer struct {
	clock   clock.WithTicker
	quiet   time.Duration
	timeout time.Duration

	inFlight atomic.Int64
	arrivals atomic.Uint64

	draining atomic.Bool
	once     sync.Once
	done     chan struct{}
	timedOut atomic.Bool

	// polled, if set, is called after each look at the counters (tests).
	polled func()
}

func newDrainer(clk clock.WithTicker, quiet, timeout time.Duration) *drainer {
	return &drainer{clock: clk, quiet: quiet, timeout: timeout, done: make(chan struct{})}
}

// tracked counts the requests it passes to next for the drainer.
type tracked struct {
	next http.Handler
	d    *drainer
}

func (t *tracked) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t.d.arrivals.Add(1)
	t.d.inFlight.Add(1)
	defer t.d.inFlight.Add(-1)
	t.next.ServeHTTP(w, r)
}

// Draining reports whether a drain has started.
func (d *drainer) Draining() bool { return d.draining.Load() }

// Done is closed when the drain has ended.
func (d *drainer) Done() <-chan struct{} { return d.done }

// TimedOut reports whether the drain ended at its timeout rather than
// after a quiet period.
func (d *drainer) TimedOut() bool { return d.timedOut.Load() }

// Start starts the drain, once; later calls do nothing.
func (d *drainer) Start() {
	d.once.Do(func() {
		d.draining.Store(true)
		now := d.clock.Now()
		s := newDrainState(now, d.quiet, d.timeout, d.arrivals.Load())
		if end, timedOut := s.observe(now, d.inFlight.Load(), d.arrivals.Load()); end {
			d.finish(timedOut)
			return
		}
		// The ticker exists before Start returns, so a test's fake clock
		// reaches it.
		t := d.clock.NewTicker(pollPeriod(d.quiet))
		go d.watch(s, t)
	})
}

// Wait starts the drain if needed and waits until it ends or ctx does.
func (d *drainer) Wait(ctx context.Context) error {
	d.Start()
	select {
	case <-d.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (d *drainer) watch(s *drainState, t clock.Ticker) {
	defer t.Stop()
	for now := range t.C() {
		end, timedOut := s.observe(now, d.inFlight.Load(), d.arrivals.Load())
		if end {
			d.finish(timedOut)
		}
		if d.polled != nil {
			d.polled()
		}
		if end {
			return
		}
	}
}

func (d *drainer) finish(timedOut bool) {
	d.timedOut.Store(timedOut)
	close(d.done)
}

// pollPeriod is how often a drain looks at the counters: a tenth of the
// quiet period, so the drain ends at most 10% late, within [1ms, 100ms].
func pollPeriod(quiet time.Duration) time.Duration {
	return min(max(quiet/10, time.Millisecond), 100*time.Millisecond)
}

// drainState is the drain's decision, apart from any clock or goroutine.
type drainState struct {
	quiet      time.Duration
	deadline   time.Time
	quietSince time.Time
	arrivals   uint64
}

func newDrainState(start time.Time, quiet, timeout time.Duration, arrivals uint64) *drainState {
	return &drainState{quiet: quiet, deadline: start.Add(timeout), quietSince: start, arrivals: arrivals}
}

// observe takes the counters at now and says whether the drain is over,
// and if so whether because of the timeout. Requests that came and went
// since the last look show in arrivals, so none slips between two looks.
func (s *drainState) observe(now time.Time, inFlight int64, arrivals uint64) (end, timedOut bool) {
	if inFlight > 0 || arrivals != s.arrivals {
		s.arrivals = arrivals
		s.quietSince = now
	}
	if inFlight == 0 && now.Sub(s.quietSince) >= s.quiet {
		return true, false
	}
	if !now.Before(s.deadline) {
		return true, true
	}
	return false, false
}
