package activator

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/swell-run/swell/pkg/breaker"
	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/proxy"
)

// pickRetry is how long a request that was admitted but found no pod with
// a free slot waits before trying again, when no change of pods wakes it
// first.
const pickRetry = 10 * time.Millisecond

// StatusClientClosed is the status recorded (in metrics and logs, never
// written) for a request whose client went away before an answer began.
const StatusClientClosed = 499

// exchange is the per-request state shared by the handler and the proxy's
// hooks. It is the request's context (so the proxy finds it with one Value
// call and no extra allocation) and its ResponseWriter (to record the
// status).
type exchange struct {
	context.Context
	w http.ResponseWriter

	pod        *pod
	status     int  // first final status written, 0 if none
	upstream   int  // status the pod answered, for hijacked responses
	dialFailed bool // the last attempt could not connect to pod, or lost it
	lostOnce   bool // a connection was lost once already: no second retry
	body       trackedBody
	hasBody    bool
}

type exchangeKey struct{}

// Value implements context.Context.
func (e *exchange) Value(k any) any {
	if k == (exchangeKey{}) {
		return e
	}
	return e.Context.Value(k)
}

func exchangeOf(r *http.Request) *exchange { return r.Context().Value(exchangeKey{}).(*exchange) }

// retryable reports whether the request can be sent again: it has no body,
// or nothing of the body was read. A server request has no GetBody, so a
// body the transport began to send cannot be replayed.
func (e *exchange) retryable() bool { return !e.hasBody || !e.body.read.Load() }

func (e *exchange) Header() http.Header { return e.w.Header() }

func (e *exchange) Write(b []byte) (int, error) {
	if e.status == 0 {
		e.status = http.StatusOK
	}
	return e.w.Write(b)
}

func (e *exchange) WriteHeader(code int) {
	if e.status == 0 && code >= 200 {
		e.status = code
	}
	e.w.WriteHeader(code)
}

// Unwrap lets http.ResponseController (which ReverseProxy uses to flush and
// to hijack for upgrades) reach the server's writer.
func (e *exchange) Unwrap() http.ResponseWriter { return e.w }

// trackedBody passes a request body through, noting whether it was read,
// and ignores Close: the server closes the real body, and a transport that
// failed to dial closes its request's body, which must survive a retry.
type trackedBody struct {
	rc   io.ReadCloser
	read atomic.Bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	b.read.Store(true)
	return b.rc.Read(p)
}

func (b *trackedBody) Close() error { return nil }

// ServeHTTP holds the request in the service's throttler until a pod can
// take it, then proxies it there, retrying on another pod when one refuses
// the connection.
func (s *service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a := s.a
	arrived := a.clk.Now()
	s.tracker.Start(arrived, false)
	s.m.inFlight.Inc()
	cold := s.routableCount() == 0
	if cold && a.cfg.Poke != nil {
		a.cfg.Poke(s.key)
	}

	e := &exchange{Context: r.Context(), w: w}
	code := s.serve(e, r, arrived, cold)

	s.m.inFlight.Dec()
	s.tracker.End(a.clk.Now(), false)
	s.m.count(code)
	if a.onDone != nil {
		a.onDone(s.key, code)
	}
}

// serve runs the request through admission and proxying and returns the
// status to record.
func (s *service) serve(e *exchange, r *http.Request, arrived time.Time, cold bool) int {
	a := s.a
	out := r.WithContext(e)
	if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
		e.body.rc, e.hasBody = r.Body, true
		out.Body = &e.body
	}

	// wait bounds the time spent queued; made only when the request has to
	// queue, so the fast path allocates no context or timer.
	var wait context.Context
	defer func() {
		if wait != nil {
			wait.(*boundedWait).stop()
		}
	}()
	admitted := false
	for {
		if !s.br.TryAcquire() {
			if wait == nil {
				wait = a.newBoundedWait(r.Context())
			}
			if a.onQueued != nil {
				a.onQueued(s.key)
			}
			s.m.queued.Inc()
			err := s.br.Acquire(wait)
			s.m.queued.Dec()
			if err != nil {
				return s.refuse(e, r, err)
			}
		}
		ch := *s.changed.Load()
		p := s.pick()
		if p == nil {
			// Admitted, but no routable pod has a free slot: the pods
			// changed under us (a pod was dropped while requests it held
			// still counted against the throttler). Give the slot back and
			// try again on the next change of pods or, since a slot freed
			// by a finishing request changes no pod list, after a short
			// pause. This path is rare; the fast path takes no timer.
			s.br.Release()
			if wait == nil {
				wait = a.newBoundedWait(r.Context())
			}
			retry := make(chan struct{})
			t := a.clk.AfterFunc(pickRetry, func() { close(retry) })
			select {
			case <-ch:
				t.Stop()
				continue
			case <-retry:
				continue
			case <-wait.Done():
				t.Stop()
				return s.refuse(e, r, wait.Err())
			}
		}
		if !admitted {
			admitted = true
			waited := a.clk.Since(arrived).Seconds()
			a.metrics.queueWait.Observe(waited)
			if cold {
				a.metrics.coldStart.Observe(waited)
			}
		}
		e.pod, e.dialFailed = p, false
		a.proxy.ServeHTTP(e, out)
		p.inflight.Add(-1)
		s.br.Release()
		if !e.dialFailed {
			break
		}
		s.drop(p)
	}
	switch {
	case e.status != 0:
		return e.status
	case e.upstream != 0:
		return e.upstream
	case r.Context().Err() != nil:
		return StatusClientClosed
	default:
		return http.StatusOK // net/http writes 200 for a handler that wrote nothing
	}
}

// refuse answers a request that left the queue without a slot.
func (s *service) refuse(e *exchange, r *http.Request, err error) int {
	switch {
	case r.Context().Err() != nil:
		return StatusClientClosed // nobody to write to
	case errors.Is(err, breaker.ErrQueueFull):
		proxy.Reject(e, http.StatusServiceUnavailable, network.ReasonQueueFull)
		return http.StatusServiceUnavailable
	default:
		proxy.Reject(e, http.StatusGatewayTimeout, network.ReasonRequestTimeout)
		return http.StatusGatewayTimeout
	}
}

// boundedWait is the request's context, cancelled also when the queue wait
// bound passes on the activator's clock.
type boundedWait struct {
	context.Context
	cancel context.CancelFunc
	timer  interface{ Stop() bool }
}

func (a *Activator) newBoundedWait(parent context.Context) context.Context {
	ctx, cancel := context.WithCancel(parent)
	return &boundedWait{Context: ctx, cancel: cancel, timer: a.clk.AfterFunc(a.cfg.QueueTimeout, cancel)}
}

func (w *boundedWait) stop() {
	w.timer.Stop()
	w.cancel()
}
