// Package drain decides when a draining server may stop: once nothing has
// been in flight for a quiet period — requests that still arrive, from
// clients and load balancers that learn of the drain late, are served and
// start the period over — or at a timeout, whichever comes first. The
// queue-proxy and the activator share it.
package drain

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// Drainer counts the requests of the handlers it wraps and, once started,
// decides when the drain is over.
type Drainer struct {
	clock   clock.WithTicker
	quiet   time.Duration
	timeout time.Duration

	inFlight atomic.Int64
	arrivals atomic.Uint64

	draining atomic.Bool
	once     sync.Once
	done     chan struct{}
	timedOut atomic.Bool
}

// New returns a Drainer whose drains end after quiet with nothing in
// flight, or at timeout.
func New(clk clock.WithTicker, quiet, timeout time.Duration) *Drainer {
	return &Drainer{clock: clk, quiet: quiet, timeout: timeout, done: make(chan struct{})}
}

// Handler counts the requests it passes to next.
func (d *Drainer) Handler(next http.Handler) http.Handler { return &tracked{next: next, d: d} }

type tracked struct {
	next http.Handler
	d    *Drainer
}

func (t *tracked) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t.d.arrivals.Add(1)
	t.d.inFlight.Add(1)
	defer t.d.inFlight.Add(-1)
	if t.d.draining.Load() && r.ProtoMajor == 1 {
		// The connection closes after this answer, which says so: the
		// client reconnects, likely to another replica, rather than keep
		// sending here and holding the quiet period off. Closing idle
		// connections instead would race with a client about to send on
		// one, and lose a request it cannot retry (a POST).
		w.Header().Set("Connection", "close")
	}
	t.next.ServeHTTP(w, r)
}

// Draining reports whether a drain has started.
func (d *Drainer) Draining() bool { return d.draining.Load() }

// Done is closed when the drain has ended.
func (d *Drainer) Done() <-chan struct{} { return d.done }

// TimedOut reports whether the drain ended at its timeout rather than
// after a quiet period.
func (d *Drainer) TimedOut() bool { return d.timedOut.Load() }

// Start starts the drain, once; later calls do nothing.
func (d *Drainer) Start() {
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
		t := d.clock.NewTicker(PollPeriod(d.quiet))
		go d.watch(s, t)
	})
}

// Wait starts the drain if needed and waits until it ends or ctx does.
func (d *Drainer) Wait(ctx context.Context) error {
	d.Start()
	select {
	case <-d.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// watch looks at the counters at every tick of t until the drain ends. It
// takes t.C() at each wait rather than ranging over it once, so a test's
// clock sees every wait for the next look.
func (d *Drainer) watch(s *drainState, t clock.Ticker) {
	defer t.Stop()
	for {
		now := <-t.C()
		if end, timedOut := s.observe(now, d.inFlight.Load(), d.arrivals.Load()); end {
			d.finish(timedOut)
			return
		}
	}
}

func (d *Drainer) finish(timedOut bool) {
	d.timedOut.Store(timedOut)
	close(d.done)
}

// PollPeriod is how often a drain looks at the counters: a tenth of the
// quiet period, so the drain ends at most 10% late, within [1ms, 100ms].
func PollPeriod(quiet time.Duration) time.Duration {
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
