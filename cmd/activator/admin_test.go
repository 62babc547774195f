package main

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	testclock "k8s.io/utils/clock/testing"

	"github.com/swell-run/swell/activator"
	"github.com/swell-run/swell/pkg/drain"
	"github.com/swell-run/swell/pkg/network"
)

// waitFor bounds every wait in these tests; reaching it is a failure.
const waitFor = 10 * time.Second

// newAdmin returns the admin handler of an activator that knows no
// service, over a drainer on a fake clock whose drains end after a quiet
// second, or at a minute.
func newAdmin(t *testing.T) (http.Handler, *drain.Drainer, *testclock.FakeClock) {
	t.Helper()
	act, err := activator.New(activator.Config{Source: activator.NewMemorySource()})
	if err != nil {
		t.Fatal(err)
	}
	clk := testclock.NewFakeClock(time.Unix(1e9, 0))
	d := drain.New(clk, time.Second, time.Minute)
	return adminHandler(d, act), d, clk
}

func adminRequest(h http.Handler, method, remote string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, network.DrainPath, nil)
	req.RemoteAddr = remote
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestDrainNeverStartedFromOutside: no call to the admin port from another
// address than loopback starts a drain, whatever its method: any pod of
// the cluster reaches the port, and a drain ends the process. A POST is
// refused 403 saying how a drain starts; a GET with no drain under way
// is refused too, as it may only wait for one.
func TestDrainNeverStartedFromOutside(t *testing.T) {
	for _, remote := range []string{"10.1.2.3:50000", "192.0.2.1:1234", "[2001:db8::1]:50000", "[fe80::1%eth0]:1", "", "not an address"} {
		for _, method := range []string{http.MethodPost, http.MethodGet, http.MethodPut, http.MethodDelete, http.MethodHead} {
			h, d, _ := newAdmin(t)
			rec := adminRequest(h, method, remote)
			if d.Draining() {
				t.Errorf("%s %s from %q started a drain", method, network.DrainPath, remote)
			}
			if rec.Code < 400 {
				t.Errorf("%s %s from %q: %d, want a refusal", method, network.DrainPath, remote, rec.Code)
			}
			if method == http.MethodPost && (rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "loopback") || !strings.Contains(rec.Body.String(), "SIGTERM")) {
				t.Errorf("POST from %q: %d %q, want 403 saying a drain starts on SIGTERM or from loopback", remote, rec.Code, rec.Body)
			}
		}
	}
}

// TestDrainFromLoopback: a POST from loopback (a command run in the pod)
// starts the drain and answers at once; a GET from loopback starts it too
// and answers once it has ended.
func TestDrainFromLoopback(t *testing.T) {
	for _, remote := range []string{"127.0.0.1:50000", "127.3.2.1:1", "[::1]:50000", "[::ffff:127.0.0.1]:50000"} {
		h, d, _ := newAdmin(t)
		if rec := adminRequest(h, http.MethodPost, remote); rec.Code != http.StatusAccepted || !d.Draining() {
			t.Errorf("POST from %q: %d, draining %v; want 202 and a drain", remote, rec.Code, d.Draining())
		}
	}
	h, d, clk := newAdmin(t)
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- adminRequest(h, http.MethodGet, "127.0.0.1:50000") }()
	waitUntil(t, "the GET to start the drain", d.Draining)
	stepUntilDone(t, clk, d)
	if rec := recv(t, done); rec.Code != http.StatusOK || rec.Body.String() != "drained\n" {
		t.Errorf("GET from loopback: %d %q, want 200 drained once the drain ended", rec.Code, rec.Body)
	}
}

// TestDrainWaitFromOutside: once a drain is under way, a GET from
// anywhere waits for it to end (a drain ends at its timeout at the
// latest), but only so many at once: the next is refused at once.
func TestDrainWaitFromOutside(t *testing.T) {
	_, d, clk := newAdmin(t)
	h := newDrainEndpoint(d)
	d.Start()
	done := make(chan *httptest.ResponseRecorder, maxDrainWaiters)
	for range maxDrainWaiters {
		go func() { done <- adminRequest(h, http.MethodGet, "10.1.2.3:50000") }()
	}
	waitUntil(t, "every waiter to wait", func() bool { return h.waiting() == maxDrainWaiters })
	if rec := adminRequest(h, http.MethodGet, "10.1.2.4:50000"); rec.Code != http.StatusTooManyRequests {
		t.Errorf("GET past %d waiters: %d %q, want 429", maxDrainWaiters, rec.Code, rec.Body)
	}
	stepUntilDone(t, clk, d)
	for range maxDrainWaiters {
		if rec := recv(t, done); rec.Code != http.StatusOK {
			t.Errorf("waiting GET: %d %q, want 200 once drained", rec.Code, rec.Body)
		}
	}
}

// waitUntil polls cond, yielding, until it holds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never %s", what)
		}
		runtime.Gosched()
	}
}

// stepUntilDone moves the fake clock on until the drain has ended.
func stepUntilDone(t *testing.T, clk *testclock.FakeClock, d *drain.Drainer) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		select {
		case <-d.Done():
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the drain never ended")
		}
		if clk.HasWaiters() {
			clk.Step(drain.PollPeriod(time.Second))
		}
		runtime.Gosched()
	}
}

func recv[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitFor):
		t.Fatal("no answer")
		panic("unreachable")
	}
}
