package activator

import (
	"net/http"
	"time"

	"k8s.io/utils/clock"
)

// pickRetry is how long a request that was admitted but found no pod with
// a free slot waits before trying again, when no change of pods wakes it
// first.
const pickRetry = 10 * time.Millisecond

// retry sends the request through the stages below again, each time
// through the throttler, for as long as it has not reached a pod: after a
// pod refused the connection (or lost it, for a request safe to repeat:
// proxy.go decides), the pod is dropped and the request tried on another;
// after the throttler admitted it but no pod had a free slot, once the
// pods change.
type retry struct {
	next  http.Handler
	clk   clock.WithDelayedExecution
	bound queueBound
}

func (h *retry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e := exchangeOf(r)
	for {
		e.dialFailed, e.noPod = false, false
		h.next.ServeHTTP(w, r)
		switch {
		case e.dialFailed:
			e.t.drop(e.pod)
		case e.noPod:
			if !h.awaitPods(w, r, e) {
				return
			}
		default:
			return
		}
	}
}

// awaitPods waits until trying again may find a free slot, and reports
// whether to. No slot was free although the throttler admitted the
// request: the pods changed under it (a pod was dropped while requests it
// held still counted against the throttler). A change of pods wakes it;
// since a slot freed by a finishing request changes no pod list, so does
// pickRetry. When the wait bound passes first, the request is refused. This
// path is rare; the fast path takes no timer.
func (h *retry) awaitPods(w http.ResponseWriter, r *http.Request, e *exchange) bool {
	wait := h.bound.of(e)
	e.t.want()
	again := make(chan struct{})
	t := h.clk.AfterFunc(pickRetry, func() { close(again) })
	select {
	case <-e.podsChanged:
		t.Stop()
		return true
	case <-again:
		return true
	case <-wait.Done():
		t.Stop()
		refuse(w, r, e.t, wait.Err())
		return false
	}
}
