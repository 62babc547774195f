package queueproxy

import (
	"errors"
	"net/http"

	"github.com/swell-run/swell/pkg/breaker"
	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/proxy"
)

// admission lets at most the breaker's capacity of requests reach next at
// once. The rest wait in the breaker's FIFO queue; when that is full a
// request is turned away at once with 503 and network.ReasonQueueFull, so a
// client (or the activator) can try elsewhere instead of piling up here.
type admission struct {
	next    http.Handler
	breaker *breaker.Breaker
}

func (a *admission) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := a.breaker.Acquire(r.Context()); err != nil {
		if errors.Is(err, breaker.ErrQueueFull) {
			proxy.Reject(w, http.StatusServiceUnavailable, network.ReasonQueueFull)
		}
		// Otherwise the context ended while waiting: the client left, or a
		// timeout fired and the timeout handler answers.
		return
	}
	defer a.breaker.Release()
	a.next.ServeHTTP(w, r)
}
