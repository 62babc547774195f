package activator

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/swell-run/swell/pkg/network"
)

// TestThrottleHoldsASlot: an admitted request holds a slot of the
// throttler while the stages below have it, and gives it back after, also
// when the proxy aborts the response.
func TestThrottleHoldsASlot(t *testing.T) {
	for _, abort := range []bool{false, true} {
		s := newStageEnv(t, 1, 1, nil)
		reached := false
		h := &throttle{bound: queueBound{s.clk, time.Minute}, limits: s.a.limits, next: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			reached = true
			if n := s.t.br.InFlight(); n != 1 {
				t.Errorf("%d slots held while the request is below, want 1", n)
			}
			if abort {
				panic(http.ErrAbortHandler)
			}
		})}
		func() {
			defer func() { recover() }()
			s.serve(t, h)
		}()
		if !reached {
			t.Fatal("a request with a free slot did not go on")
		}
		if n := s.t.br.InFlight(); n != 0 {
			t.Errorf("abort %v: %d slots held once done, want 0", abort, n)
		}
	}
}

// TestThrottleQueue: with no slot free a request waits; one past the queue
// depth is refused at once with 503, and one that waits past the bound
// with 504. Neither goes on.
func TestThrottleQueue(t *testing.T) {
	s := newStageEnv(t, 1, 0, func(c *Config) { c.QueueDepth = 1 })
	h := &throttle{bound: queueBound{s.clk, time.Minute}, limits: s.a.limits, next: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		t.Error("a request went on with no slot free")
	})}

	first := make(chan *httptest.ResponseRecorder, 1)
	rec, e, r := s.exchange(t, context.Background())
	go func() {
		h.ServeHTTP(e, r)
		first <- rec
	}()
	s.clk.queued(t, time.Minute)
	if n := metric(t, s.reg, "swell_activator_queued_requests", map[string]string{"service": helloKey.String()}); n != 1 {
		t.Errorf("queued gauge %v while one waits, want 1", n)
	}
	waitWaiting(t, s.t.br, 1, "the first request")

	full, _ := s.serve(t, h)
	if full.Code != http.StatusServiceUnavailable || full.Header().Get(network.ReasonHeader) != network.ReasonQueueFull {
		t.Errorf("past the queue depth: %d %q, want 503 %s", full.Code, full.Header().Get(network.ReasonHeader), network.ReasonQueueFull)
	}

	s.clk.Step(time.Minute)
	late := recv(t, first, "timed-out request")
	if late.Code != http.StatusGatewayTimeout || late.Header().Get(network.ReasonHeader) != network.ReasonRequestTimeout {
		t.Errorf("past the bound: %d %q, want 504 %s", late.Code, late.Header().Get(network.ReasonHeader), network.ReasonRequestTimeout)
	}
	if n := metric(t, s.reg, "swell_activator_queued_requests", nil); n != 0 {
		t.Errorf("queued gauge %v once nobody waits, want 0", n)
	}
}

// TestThrottleClientLeaves: a client that goes away leaves the queue at
// once and is answered nothing.
func TestThrottleClientLeaves(t *testing.T) {
	s := newStageEnv(t, 1, 0, nil)
	h := &throttle{bound: queueBound{s.clk, time.Minute}, limits: s.a.limits, next: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		t.Error("a request went on with no slot free")
	})}
	ctx, cancel := context.WithCancel(context.Background())
	rec, e, r := s.exchange(t, ctx)
	done := make(chan struct{})
	go func() {
		h.ServeHTTP(e, r)
		close(done)
	}()
	s.clk.queued(t, time.Minute)
	cancel()
	recv(t, done, "the request leaving the queue")
	if n := s.t.br.Waiting(); n != 0 {
		t.Errorf("%d waiting after the client left, want 0", n)
	}
	if rec.Body.Len() != 0 || rec.Header().Get(network.ReasonHeader) != "" || e.code() != StatusClientClosed {
		t.Errorf("answered %q %q, recorded %d; want nothing, recorded %d", rec.Header().Get(network.ReasonHeader), rec.Body, e.code(), StatusClientClosed)
	}
}
