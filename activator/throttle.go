package activator

import (
	"errors"
	"net/http"

	"github.com/swell-run/swell/pkg/breaker"
	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/proxy"
)

// throttle lets at most the service's capacity — its routable pods' slots
// (target.publishLocked) — through to the stages below at once. The rest
// wait in the breaker's FIFO queue: beyond QueueDepth, beyond the
// activator's MaxHeld across services, or beyond the caller's share of the
// queue (hold.go), a request is refused at once, and one that waits past
// QueueTimeout is refused then.
type throttle struct {
	next   http.Handler
	bound  queueBound
	limits *waitLimits
}

func (h *throttle) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e := exchangeOf(r)
	t := e.t
	if !t.br.TryAcquire() {
		// An address that does not parse (an embedder's request) counts
		// as one caller, the zero address.
		caller, _ := callerAddr(r)
		if ok, why := h.limits.enter(t, caller); !ok {
			h.limits.refuse(w, why)
			return
		}
		// Counted before the bound is armed, so that whoever sees the
		// timer armed sees the request counted too.
		t.m.queued.Inc()
		wait := h.bound.of(e)
		t.want()
		err := t.br.Acquire(wait)
		t.m.queued.Dec()
		h.limits.leave(t, caller)
		if err != nil {
			refuse(w, r, t, err)
			return
		}
	}
	defer t.br.Release()
	h.next.ServeHTTP(w, r)
}

// refuse answers a request that stopped waiting without a pod: 503 when
// the queue was full or the service is gone (it left the Source and did
// not come back within the grace), 504 when the wait bound passed. A
// client that went away gets nothing: there is nobody to write to, and
// accounting records StatusClientClosed.
func refuse(w http.ResponseWriter, r *http.Request, t *target, err error) {
	switch {
	case r.Context().Err() != nil:
	case errors.Is(err, breaker.ErrQueueFull):
		proxy.Reject(w, http.StatusServiceUnavailable, network.ReasonQueueFull)
	case t.gone.Err() != nil:
		proxy.Reject(w, http.StatusServiceUnavailable, network.ReasonServiceGone)
	default:
		proxy.Reject(w, http.StatusGatewayTimeout, network.ReasonRequestTimeout)
	}
}
