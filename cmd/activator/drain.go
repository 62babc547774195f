package main

import (
	"net/http"
	"sync/atomic"
	"time"
)

// drain counts the requests in flight on the serving port and decides when
// a draining activator may exit: after nothing has been in flight for the
// quiet period (requests from routers that learn of the drain late are
// still served and restart it), or at the timeout.
type drain struct {
	inFlight  atomic.Int64
	lastEnd   atomic.Int64 // unix nanoseconds of the latest request end
	draining  atomic.Bool
	requested chan struct{}
}

// track counts h's requests.
func (d *drain) track(h http.Handler) http.Handler {
	d.requested = make(chan struct{}, 1)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.inFlight.Add(1)
		defer func() {
			d.lastEnd.Store(time.Now().UnixNano())
			d.inFlight.Add(-1)
		}()
		h.ServeHTTP(w, r)
	})
}

// start begins a drain; false if one had begun.
func (d *drain) start() bool { return d.draining.CompareAndSwap(false, true) }

// wait returns once nothing has been in flight for quiet, or after timeout.
// It polls: a request end is cheap to record but a wake-up per request
// would put a channel operation on the hot path.
func (d *drain) wait(quiet, timeout time.Duration) {
	start := time.Now()
	deadline := start.Add(timeout)
	tick := min(max(quiet/10, time.Millisecond), 50*time.Millisecond)
	for {
		now := time.Now()
		if !now.Before(deadline) {
			return
		}
		if d.inFlight.Load() == 0 {
			since := start
			if e := time.Unix(0, d.lastEnd.Load()); e.After(since) {
				since = e
			}
			if now.Sub(since) >= quiet {
				return
			}
		}
		time.Sleep(tick)
	}
}
