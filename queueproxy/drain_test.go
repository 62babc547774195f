package queueproxy

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/swell-run/swell/pkg/network"
)

// remote is a caller outside the pod: httptest.NewRequest's default
// RemoteAddr, a TEST-NET-1 address.
const remote = "192.0.2.1:1234"

// adminRig is a queue-proxy's admin handler on a fake clock, with nothing
// served: the tests call the handler directly, choosing each caller's
// address. The drain has no quiet period, so it ends as soon as it starts.
type adminRig struct {
	t     *testing.T
	qp    *QueueProxy
	clock *notifyClock
	h     http.Handler
	// armed gets a value each time a waiter arms its timer.
	armed chan time.Duration
}

func newAdminRig(t *testing.T) *adminRig {
	t.Helper()
	a := &adminRig{t: t, clock: newNotifyClock(), armed: make(chan time.Duration, 64)}
	// Nothing else arms timers: the prober runs only in Serve.
	a.clock.onTimer = func(d time.Duration) { a.armed <- d }
	cfg := DefaultConfig()
	cfg.DrainQuietPeriod = 0
	cfg.DrainTimeout = 30 * time.Second
	cfg.RequestTimeout = time.Minute
	cfg.Logger, cfg.Clock = testLogger(t), a.clock
	qp, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a.qp, a.h = qp, qp.adminHandler()
	return a
}

// call sends method /drain from addr in the background.
func (a *adminRig) call(method, addr string) chan *http.Response {
	ch := make(chan *http.Response, 1)
	req := httptest.NewRequest(method, network.DrainPath, nil)
	req.RemoteAddr = addr
	go func() {
		w := httptest.NewRecorder()
		a.h.ServeHTTP(w, req)
		ch <- w.Result()
	}()
	return ch
}

// waiting sends GET /drain from outside the pod and returns once the call
// waits, failing if it answered instead.
func (a *adminRig) waiting() chan *http.Response {
	a.t.Helper()
	res := a.call(http.MethodGet, remote)
	select {
	case d := <-a.armed:
		if want := a.qp.drainWaitBound(); d != want {
			a.t.Errorf("a waiter waits %v, want %v", d, want)
		}
	case r := <-res:
		a.t.Fatalf("GET %s from outside the pod answered %d %q at once instead of waiting for a drain",
			network.DrainPath, r.StatusCode, readAll(a.t, r))
	case <-time.After(10 * time.Second):
		a.t.Fatal("timed out waiting for the call to wait")
	}
	return res
}

func TestDrainFromOutsideThePodOnlyWaits(t *testing.T) {
	a := newAdminRig(t)
	res := a.waiting()
	if a.qp.drainer.Draining() {
		t.Fatalf("GET %s from %s started a drain", network.DrainPath, remote)
	}
	// The process's own SIGTERM starts the drain; the waiter answers once
	// it has ended, as a preStop hook needs.
	a.qp.StartDrain()
	r := recv(t, res, "the waiter's answer")
	if body := readAll(t, r); r.StatusCode != http.StatusOK || body != "drained\n" {
		t.Errorf("after the drain: %d %q, want 200 drained", r.StatusCode, body)
	}
	// A call once the drain has ended answers at once.
	r = recv(t, a.call(http.MethodGet, remote), "an answer after the drain")
	if body := readAll(t, r); r.StatusCode != http.StatusOK || body != "drained\n" {
		t.Errorf("after the drain: %d %q, want 200 drained", r.StatusCode, body)
	}
}

func TestDrainPostFromOutsideThePodIsForbidden(t *testing.T) {
	a := newAdminRig(t)
	r := recv(t, a.call(http.MethodPost, remote), "the answer")
	body := readAll(t, r)
	if r.StatusCode != http.StatusForbidden || !strings.Contains(body, "loopback") || !strings.Contains(body, "SIGTERM") {
		t.Errorf("POST %s from outside the pod: %d %q, want 403 naming SIGTERM and loopback", network.DrainPath, r.StatusCode, body)
	}
	if a.qp.drainer.Draining() {
		t.Error("a forbidden POST started a drain")
	}
}

func TestDrainWaitIsBounded(t *testing.T) {
	a := newAdminRig(t)
	if got, want := a.qp.drainWaitBound(), a.qp.cfg.DrainTimeout+a.qp.cfg.RequestTimeout; got != want {
		t.Errorf("wait bound %v, want DRAIN_TIMEOUT + REQUEST_TIMEOUT = %v", got, want)
	}
	res := a.waiting()
	a.clock.Step(a.qp.drainWaitBound())
	r := recv(t, res, "the waiter to give up")
	if body := readAll(t, r); r.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "no drain") {
		t.Errorf("at the bound: %d %q, want 503 saying no drain ended", r.StatusCode, body)
	}
	if a.qp.drainer.Draining() {
		t.Error("a waiter started a drain")
	}
}

func TestDrainWaitBoundWithoutRequestTimeout(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RequestTimeout = 0
	qp, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := qp.drainWaitBound(), cfg.DrainTimeout+network.DefaultRequestTimeout; got != want {
		t.Errorf("wait bound without a request timeout %v, want %v", got, want)
	}
}

func TestDrainWaitersAreCapped(t *testing.T) {
	a := newAdminRig(t)
	var waiters []chan *http.Response
	for range maxDrainWaiters {
		waiters = append(waiters, a.waiting())
	}
	// One more takes the place of the oldest, which is told why: the
	// latest caller (the kubelet's preStop, at the pod's deletion) always
	// gets a place, and a caller cannot hold more than maxDrainWaiters.
	waiters = append(waiters, a.waiting())
	r := recv(t, waiters[0], "the oldest waiter to be turned away")
	if body := readAll(t, r); r.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "newer") {
		t.Errorf("evicted waiter: %d %q, want 503 saying a newer caller took its place", r.StatusCode, body)
	}
	for i, ch := range waiters[1:] {
		select {
		case r := <-ch:
			t.Fatalf("waiter %d answered %d before any drain", i+1, r.StatusCode)
		default:
		}
	}
	a.qp.StartDrain()
	for _, ch := range waiters[1:] {
		if r := recv(t, ch, "a waiter's answer"); r.StatusCode != http.StatusOK {
			t.Errorf("waiter after the drain: %d", r.StatusCode)
		}
	}
	if n := a.qp.waiters.len(); n != 0 {
		t.Errorf("%d waiters still registered after all answered", n)
	}
}

func TestDrainFromLoopbackStarts(t *testing.T) {
	for _, c := range []struct{ method, addr string }{
		{http.MethodGet, "127.0.0.1:40000"},
		{http.MethodPost, "[::1]:40000"},
		{http.MethodPost, "127.0.0.2:40000"},
	} {
		t.Run(c.method+" "+c.addr, func(t *testing.T) {
			a := newAdminRig(t)
			r := recv(t, a.call(c.method, c.addr), "the answer")
			if body := readAll(t, r); r.StatusCode != http.StatusOK || body != "drained\n" {
				t.Errorf("%s %s from %s: %d %q, want 200 drained", c.method, network.DrainPath, c.addr, r.StatusCode, body)
			}
			if !a.qp.drainer.Draining() {
				t.Error("no drain started")
			}
		})
	}
}
