package queueproxy

import (
	"bufio"
	"context"
	"math"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/proxy"
)

// timeouts are the bounds a timeoutHandler enforces; zero turns one off.
type timeouts struct {
	// Request bounds the whole request.
	Request time.Duration
	// ResponseStart bounds the time until response headers are written.
	ResponseStart time.Duration
	// StreamIdle bounds the time between writes of the response (and from
	// the request's arrival to the first write).
	StreamIdle time.Duration
}

func (t timeouts) enabled() bool {
	return t.Request > 0 || t.ResponseStart > 0 || t.StreamIdle > 0
}

// timeoutHandler enforces timeouts on the requests it passes to next.
//
// A timeout that fires before any response was written answers 504 with
// the reason in network.ReasonHeader. One that fires once the response has
// started cancels the request's context — ReverseProxy then stops reading
// the app and aborts the client connection, so a cut stream never looks
// complete. Either way next returns and the handlers above it (admission)
// release what the request held.
//
// The handler never writes to the ResponseWriter from the timer: the timer
// only flips an atomic state and cancels the context; the 504, if any, is
// written on the request's goroutine once next has returned. Writes next
// makes after the flip are dropped, which is what makes the late 504 safe.
//
// A request whose connection is hijacked (a websocket or other upgrade) is
// no longer subject to any timeout: it is a session, not a request, and its
// bytes no longer pass through this handler.
type timeoutHandler struct {
	next     http.Handler
	clock    clock.WithDelayedExecution
	timeouts timeouts
	first    time.Duration // shortest enabled timeout: the first timer
}

func newTimeoutHandler(next http.Handler, t timeouts, clk clock.WithDelayedExecution) *timeoutHandler {
	first := time.Duration(math.MaxInt64)
	for _, d := range []time.Duration{t.Request, t.ResponseStart, t.StreamIdle} {
		if d > 0 && d < first {
			first = d
		}
	}
	return &timeoutHandler{next: next, clock: clk, timeouts: t, first: first}
}

// Response states of a timeoutWriter.
const (
	stateIdle     int32 = iota // nothing written yet
	stateStarted               // headers are (being) written
	stateTimedOut              // a timeout fired first; next's writes are dropped
	stateHijacked              // the connection left HTTP; timeouts no longer apply
)

func (h *timeoutHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithCancelCause(r.Context())
	tw := &timeoutWriter{w: w, h: h, cancel: cancel, start: h.clock.Now()}
	tw.mu.Lock()
	tw.timer = h.clock.AfterFunc(h.first, tw.fire)
	tw.mu.Unlock()
	defer func() {
		tw.stop()
		if tw.state.Load() == stateTimedOut {
			// next may have panicked with ErrAbortHandler after a dropped
			// write; nothing reached the client, so answer properly.
			if p := recover(); p != nil && p != http.ErrAbortHandler {
				panic(p)
			}
			cancel(nil)
			writeTimeout(w, tw.reason)
			return
		}
		cancel(nil)
	}()
	h.next.ServeHTTP(tw, r.WithContext(ctx))
}

// due says which timeout has expired at elapsed since the request's start,
// or, if none, how long until the next one may. started is whether response
// headers were written; lastWrite is when the last body write happened
// (since the start).
func (t timeouts) due(elapsed time.Duration, started bool, lastWrite time.Duration) (reason string, wait time.Duration) {
	wait = math.MaxInt64
	check := func(deadline time.Duration, r string) bool {
		if elapsed >= deadline {
			reason = r
			return true
		}
		wait = min(wait, deadline-elapsed)
		return false
	}
	if t.Request > 0 && check(t.Request, network.ReasonRequestTimeout) {
		return reason, 0
	}
	if t.ResponseStart > 0 && !started && check(t.ResponseStart, network.ReasonResponseTimeout) {
		return reason, 0
	}
	if t.StreamIdle > 0 && check(lastWrite+t.StreamIdle, network.ReasonIdleTimeout) {
		return reason, 0
	}
	return "", wait
}

// writeTimeout answers 504 for reason, replacing any headers next had
// copied from the app before its writes were dropped.
func writeTimeout(w http.ResponseWriter, reason string) {
	clear(w.Header())
	proxy.Reject(w, http.StatusGatewayTimeout, reason)
}

// timeoutWriter guards a ResponseWriter against writes after a timeout
// fired. It keeps http.Flusher and http.Hijacker, and Unwrap for
// http.ResponseController.
type timeoutWriter struct {
	w      http.ResponseWriter
	h      *timeoutHandler
	cancel context.CancelCauseFunc
	start  time.Time

	state atomic.Int32
	// lastWrite is the time of the last body write since start, in
	// nanoseconds; kept only when a stream idle timeout is set.
	lastWrite atomic.Int64
	// reason is written before state becomes stateTimedOut and read only
	// after observing it, so the atomic orders the two.
	reason string

	mu       sync.Mutex // guards timer and finished
	timer    clock.Timer
	finished bool
}

// fire runs when the timer expires. It hands over to a goroutine because a
// fake clock calls it with the clock's lock held, and check reads the clock.
func (tw *timeoutWriter) fire() { go tw.check() }

func (tw *timeoutWriter) check() {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	if tw.finished {
		return
	}
	state := tw.state.Load()
	if state == stateHijacked {
		return
	}
	elapsed := tw.h.clock.Since(tw.start)
	reason, wait := tw.h.timeouts.due(elapsed, state != stateIdle, time.Duration(tw.lastWrite.Load()))
	if reason == "" {
		// Only the idle deadline moves; wait for where it is now.
		tw.timer = tw.h.clock.AfterFunc(wait, tw.fire)
		return
	}
	tw.finished = true
	if state == stateIdle {
		tw.reason = reason
		if tw.state.CompareAndSwap(stateIdle, stateTimedOut) {
			tw.cancel(errTimeout)
			return
		}
	}
	if tw.state.Load() == stateStarted {
		tw.cancel(errTimeout)
	}
}

// errTimeout is the cause of a request context cancelled by a timeout.
var errTimeout = timeoutError{}

type timeoutError struct{}

func (timeoutError) Error() string { return "queue-proxy timeout" }

// stop disarms the timer for good.
func (tw *timeoutWriter) stop() {
	tw.mu.Lock()
	tw.finished = true
	tw.timer.Stop()
	tw.mu.Unlock()
}

// begin moves to stateStarted unless a timeout got there first; it reports
// whether writing may go on.
func (tw *timeoutWriter) begin() bool {
	switch tw.state.Load() {
	case stateStarted, stateHijacked:
		return true
	case stateIdle:
		if tw.state.CompareAndSwap(stateIdle, stateStarted) {
			return true
		}
		return tw.state.Load() != stateTimedOut
	}
	return false
}

func (tw *timeoutWriter) Header() http.Header { return tw.w.Header() }

func (tw *timeoutWriter) WriteHeader(code int) {
	if code < 200 {
		// Informational (1xx) responses do not start the response: a
		// timeout can still answer 504 after them.
		if tw.state.Load() != stateTimedOut {
			tw.w.WriteHeader(code)
		}
		return
	}
	if tw.begin() {
		tw.w.WriteHeader(code)
	}
}

func (tw *timeoutWriter) Write(b []byte) (int, error) {
	if !tw.begin() {
		return 0, http.ErrHandlerTimeout
	}
	if tw.h.timeouts.StreamIdle > 0 {
		tw.lastWrite.Store(int64(tw.h.clock.Since(tw.start)))
	}
	return tw.w.Write(b)
}

// Flush implements http.Flusher.
func (tw *timeoutWriter) Flush() { _ = tw.FlushError() }

// FlushError is what http.ResponseController.Flush calls.
func (tw *timeoutWriter) FlushError() error {
	if !tw.begin() {
		return http.ErrHandlerTimeout
	}
	return http.NewResponseController(tw.w).Flush()
}

// Hijack implements http.Hijacker. Once hijacked, no timeout applies.
func (tw *timeoutWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	for {
		s := tw.state.Load()
		if s == stateTimedOut {
			return nil, nil, http.ErrHandlerTimeout
		}
		if s == stateHijacked || tw.state.CompareAndSwap(s, stateHijacked) {
			break
		}
	}
	tw.stop()
	return http.NewResponseController(tw.w).Hijack()
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (tw *timeoutWriter) Unwrap() http.ResponseWriter { return tw.w }
