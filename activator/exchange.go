package activator

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// StatusClientClosed is the status recorded (in metrics and logs, never
// written) for a request whose client went away before an answer began.
const StatusClientClosed = 499

// exchange is one request's state, made by the router and shared by the
// stages below it and the proxy's hooks. It is the request's context, so a
// stage finds it with one Value call and no allocation, and the
// ResponseWriter the stages write to, so the status is recorded whichever
// stage answers.
type exchange struct {
	context.Context
	w http.ResponseWriter
	t *target

	arrived     time.Time       // when accounting took the request in
	wait        *boundedWait    // bounds the time spent waiting; nil until the request first waits
	pod         *pod            // the pod of the last attempt
	podsChanged <-chan struct{} // closed on the first change of routable pods after the last pick
	body        trackedBody
	// Statuses and flags packed, so that an exchange, allocated per
	// request, fits 128 bytes.
	status     int32 // first final status written, 0 if none
	upstream   int32 // status the pod answered, for hijacked responses
	cold       bool  // the service had no routable pod on arrival
	admitted   bool  // a pod was found once, and the wait observed
	noPod      bool  // the last attempt was admitted but found no pod with a free slot
	dialFailed bool  // the last attempt could not connect to pod, or lost it
	lostOnce   bool  // a connection was lost once already: no second retry
	hasBody    bool  // the request has a body, read through body
}

type exchangeKey struct{}

// newExchange returns the exchange of r, routed to t and answered through
// w, and the request to pass on: r carrying the exchange as its context,
// its body tracked so that a retry can tell whether it was read.
func newExchange(w http.ResponseWriter, r *http.Request, t *target) (*exchange, *http.Request) {
	e := &exchange{Context: r.Context(), w: w, t: t}
	out := r.WithContext(e)
	if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
		e.body.rc, e.hasBody = r.Body, true
		out.Body = &e.body
	}
	return e, out
}

// Value implements context.Context.
func (e *exchange) Value(k any) any {
	if k == (exchangeKey{}) {
		return e
	}
	return e.Context.Value(k)
}

func exchangeOf(r *http.Request) *exchange { return r.Context().Value(exchangeKey{}).(*exchange) }

// finish releases what the exchange still holds once the chain is done.
func (e *exchange) finish() {
	if e.wait != nil {
		e.wait.stop()
	}
}

// code is the status to record for the request once the chain is done.
func (e *exchange) code() int {
	switch {
	case e.status != 0:
		return int(e.status)
	case e.upstream != 0:
		return int(e.upstream)
	case e.Context.Err() != nil:
		return StatusClientClosed
	default:
		return http.StatusOK // net/http writes 200 for a handler that wrote nothing
	}
}

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
		e.status = int32(code)
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

// queueBound bounds how long a request may wait for a pod — in the
// throttler's queue and for a free slot after it, together — on the
// activator's clock.
type queueBound struct {
	clk     clock.WithDelayedExecution
	timeout time.Duration
}

// of returns e's bounded wait, started the first time the request has to
// wait, so that the fast path makes no context or timer.
func (b queueBound) of(e *exchange) context.Context {
	if e.wait == nil {
		ctx, cancel := context.WithCancel(e.Context)
		e.wait = &boundedWait{Context: ctx, cancel: cancel, timer: b.clk.AfterFunc(b.timeout, cancel),
			// A service closed while its requests wait ends their waits.
			unlink: context.AfterFunc(e.t.gone, cancel)}
	}
	return e.wait
}

// boundedWait is the request's context, cancelled also when the queue wait
// bound passes.
type boundedWait struct {
	context.Context
	cancel context.CancelFunc
	timer  interface{ Stop() bool }
	unlink func() bool
}

func (w *boundedWait) stop() {
	w.timer.Stop()
	w.unlink()
	w.cancel()
}
