package activator

import (
	"net/http"

	"k8s.io/utils/clock"
)

// accounting counts each request from its arrival until the stages below
// are done with it, in its service's stats.Tracker (the figures reported to
// the autoscaler, with proxied=false) and its Prometheus series. Time spent
// queued counts: a held request is the load the autoscaler must see to
// scale from zero. The status is counted once the request is answered,
// whichever stage answered it.
type accounting struct {
	next http.Handler
	clk  clock.PassiveClock
}

func (h *accounting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e := exchangeOf(r)
	t := e.t
	e.arrived = h.clk.Now()
	t.tracker.Start(e.arrived, false)
	t.m.inFlight.Inc()
	// Deferred, so that a response the proxy aborts (a panic with
	// http.ErrAbortHandler) still leaves the counts.
	defer func() {
		t.m.inFlight.Dec()
		t.tracker.End(h.clk.Now(), false)
		t.m.count(e.code())
	}()
	h.next.ServeHTTP(w, r)
}
