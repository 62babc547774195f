package activator

import (
	"net/http"
	"testing"
	"time"
)

// TestRetryDialFailed: a pod that refused the connection leaves the
// routable pods and the request is sent again.
func TestRetryDialFailed(t *testing.T) {
	s := newStageEnv(t, 1, 2, nil)
	refusing := s.routablePods()[0]
	calls := 0
	h := &retry{clk: s.clk, bound: queueBound{s.clk, time.Minute}, next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e := exchangeOf(r)
		calls++
		if calls == 1 {
			e.pod, e.dialFailed = refusing, true
			return
		}
		if e.dialFailed {
			t.Error("dialFailed still set on the second attempt")
		}
		w.WriteHeader(http.StatusNoContent)
	})}
	rec, _ := s.serve(t, h)
	if calls != 2 || rec.Code != http.StatusNoContent {
		t.Errorf("%d attempts, answered %d; want 2 and 204", calls, rec.Code)
	}
	if pods := s.routablePods(); len(pods) != 1 || pods[0] == refusing {
		t.Errorf("routable %s after %s refused, want the other pod only", names(pods...), refusing.name)
	}
}

// TestRetryNoPod: a request admitted when no pod had a free slot is tried
// again once the pods change, and refused with 504 once the wait bound
// has passed.
func TestRetryNoPod(t *testing.T) {
	s := newStageEnv(t, 1, 1, nil)
	changed := make(chan struct{})
	close(changed)
	calls := 0
	h := &retry{clk: s.clk, bound: queueBound{s.clk, time.Minute}, next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e := exchangeOf(r)
		calls++
		if calls == 1 {
			e.noPod, e.podsChanged = true, changed
		}
	})}
	if s.serve(t, h); calls != 2 {
		t.Errorf("%d attempts after a change of pods, want 2", calls)
	}

	calls = 0
	rec, e, r := s.exchange(t, t.Context())
	h.bound.of(e) // the wait starts now...
	s.clk.Step(time.Minute)
	h.next = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		exchangeOf(r).noPod = true // ...and no pod is ever free, nor do the pods change
	})
	h.ServeHTTP(e, r)
	if calls != 1 || rec.Code != http.StatusGatewayTimeout {
		t.Errorf("%d attempts, answered %d; want 1 and 504", calls, rec.Code)
	}
}

// TestRetryAnswered: an attempt that answered, or was refused, is not
// repeated.
func TestRetryAnswered(t *testing.T) {
	s := newStageEnv(t, 1, 1, nil)
	calls := 0
	h := &retry{clk: s.clk, bound: queueBound{s.clk, time.Minute}, next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		w.WriteHeader(http.StatusServiceUnavailable)
	})}
	if rec, _ := s.serve(t, h); calls != 1 || rec.Code != http.StatusServiceUnavailable {
		t.Errorf("%d attempts, answered %d; want 1 and 503", calls, rec.Code)
	}
}
