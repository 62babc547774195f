package activator

import (
	"context"
	"net/http"
	"testing"
)

// TestAccounting: a request counts as in flight, for the autoscaler and
// for Prometheus, for as long as the stages below hold it, and its status
// is counted once they are done, whichever of them answered.
func TestAccounting(t *testing.T) {
	s := newStageEnv(t, 1, 1, nil)
	labels := map[string]string{"service": helloKey.String()}
	h := &accounting{clk: s.clk, next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n := s.t.tracker.InFlight(); n != 1 {
			t.Errorf("tracker: %d in flight while held, want 1", n)
		}
		if n := metric(t, s.reg, "swell_activator_in_flight_requests", labels); n != 1 {
			t.Errorf("gauge: %v in flight while held, want 1", n)
		}
		if got := exchangeOf(r).arrived; !got.Equal(s.clk.Now()) {
			t.Errorf("arrived %v, want %v", got, s.clk.Now())
		}
		w.WriteHeader(http.StatusGatewayTimeout)
	})}
	s.serve(t, h)

	if n := s.t.tracker.InFlight(); n != 0 {
		t.Errorf("tracker: %d in flight once done, want 0", n)
	}
	if n := metric(t, s.reg, "swell_activator_in_flight_requests", labels); n != 0 {
		t.Errorf("gauge: %v in flight once done, want 0", n)
	}
	if n := metric(t, s.reg, "swell_activator_requests_total", map[string]string{"service": helloKey.String(), "status_class": "5xx"}); n != 1 {
		t.Errorf("5xx count %v, want 1", n)
	}
}

// TestAccountingClientGone: a request whose client left before any answer
// counts as 499.
func TestAccountingClientGone(t *testing.T) {
	s := newStageEnv(t, 1, 1, nil)
	ctx, cancel := context.WithCancel(context.Background())
	h := &accounting{clk: s.clk, next: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { cancel() })}
	_, e, r := s.exchange(t, ctx)
	h.ServeHTTP(e, r)
	if n := metric(t, s.reg, "swell_activator_requests_total", map[string]string{"status_class": "499"}); n != 1 {
		t.Errorf("499 count %v, want 1", n)
	}
}

// TestAccountingAborted: a response the proxy aborts still leaves the
// counts, or the autoscaler would see load that is gone forever.
func TestAccountingAborted(t *testing.T) {
	s := newStageEnv(t, 1, 1, nil)
	h := &accounting{clk: s.clk, next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		panic(http.ErrAbortHandler)
	})}
	func() {
		defer func() {
			if p := recover(); p != http.ErrAbortHandler {
				t.Errorf("recovered %v, want http.ErrAbortHandler", p)
			}
		}()
		s.serve(t, h)
	}()
	if n := s.t.tracker.InFlight(); n != 0 {
		t.Errorf("tracker: %d in flight after the abort, want 0", n)
	}
	if n := metric(t, s.reg, "swell_activator_requests_total", map[string]string{"status_class": "2xx"}); n != 1 {
		t.Errorf("2xx count %v, want 1", n)
	}
}
