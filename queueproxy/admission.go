package queueproxy

import (
	"bufio"
	"errors"
	"net"
	"net/http"

	"k8s.io/utils/clock"

	"github.com/swell-run/swell/pkg/breaker"
	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/proxy"
)

// admission lets at most the breaker's capacity of requests reach next at
// once. The rest wait in the breaker's FIFO queue; when that is full a
// request is turned away at once with 503 and network.ReasonQueueFull, so a
// client (or the activator) can try elsewhere instead of piling up here.
//
// An upgraded connection (a websocket) gives its slot back as soon as the
// upgrade is done: the handshake is a request and is admitted like one,
// but the session after it is not work the app is doing, and holding a
// slot for its whole life would let CONTAINER_CONCURRENCY idle sessions
// keep every other request out for as long as they stay open.
//
// A request that finds every slot taken has its wait observed in
// metrics.wait once it is admitted.
type admission struct {
	next    http.Handler
	breaker *breaker.Breaker
	metrics *metrics
	clock   clock.PassiveClock
}

func (a *admission) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !a.breaker.TryAcquire() {
		began := a.clock.Now()
		if err := a.breaker.Acquire(r.Context()); err != nil {
			if errors.Is(err, breaker.ErrQueueFull) {
				proxy.Reject(w, http.StatusServiceUnavailable, network.ReasonQueueFull)
			}
			// Otherwise the context ended while waiting: the client left,
			// or a timeout fired and the timeout handler answers.
			return
		}
		a.metrics.wait.Observe(a.clock.Since(began).Seconds())
	}
	aw := &admittedWriter{ResponseWriter: w, breaker: a.breaker}
	defer aw.release()
	a.next.ServeHTTP(aw, r)
}

// admittedWriter holds a request's admission slot and releases it once:
// when the request ends, or when its connection is hijacked. Only the
// request's goroutine calls it (ReverseProxy hijacks from ServeHTTP), so
// released needs no synchronisation. It keeps http.Flusher and
// http.Hijacker, and Unwrap for http.ResponseController.
type admittedWriter struct {
	http.ResponseWriter
	breaker  *breaker.Breaker
	released bool
}

func (w *admittedWriter) release() {
	if !w.released {
		w.released = true
		w.breaker.Release()
	}
}

// Flush implements http.Flusher.
func (w *admittedWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

// Hijack implements http.Hijacker: once the connection is the upgraded
// session's, the slot goes to the next request.
func (w *admittedWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		w.release()
	}
	return c, brw, err
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *admittedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
