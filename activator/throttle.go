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
// wait in the breaker's FIFO queue: beyond QueueDepth a request is refused
// at once, and one that waits past QueueTimeout is refused then.
type throttle struct {
	next  http.Handler
	bound queueBound
}

func (h *throttle) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e := exchangeOf(r)
	t := e.t
	if !t.br.TryAcquire() {
		wait := h.bound.of(e)
		t.m.queued.Inc()
		err := t.br.Acquire(wait)
		t.m.queued.Dec()
		if err != nil {
			refuse(w, r, err)
			return
		}
	}
	defer t.br.Release()
	h.next.ServeHTTP(w, r)
}

// refuse answers a request that stopped waiting without a pod: 503 when
// the queue was full, 504 when the wait bound passed. A client that went
// away gets nothing: there is nobody to write to, and accounting records
// StatusClientClosed.
func refuse(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case r.Context().Err() != nil:
	case errors.Is(err, breaker.ErrQueueFull):
		proxy.Reject(w, http.StatusServiceUnavailable, network.ReasonQueueFull)
	default:
		proxy.Reject(w, http.StatusGatewayTimeout, network.ReasonRequestTimeout)
	}
}
