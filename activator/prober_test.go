package activator

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// TestProbeGatesTraffic: a pod gets no traffic until its queue-proxy says it
// is ready; the prober retries on the ProbeInterval.
func TestProbeGatesTraffic(t *testing.T) {
	pod := newFakePod(t, "p1", false)
	pod.probes = make(chan struct{}, 100)
	src := NewMemorySource(Service{Key: helloKey, ContainerConcurrency: 1, Pods: []Pod{pod.pod()}})
	e := newEnv(t, src, nil, nil)
	recv(t, pod.probes, "first probe")
	// Failed probes are retried on the fake clock: each step reaches the
	// timer the prober armed after a failed probe.
	for i := 0; i < 2; i++ {
		recv(t, e.clk.timers, "the prober's timer")
		e.clk.Step(DefaultProbeInterval)
		recv(t, pod.probes, "probe retry")
	}
	recv(t, e.clk.timers, "the prober's timer")

	done := make(chan int, 1)
	go func() {
		res, _ := e.get(t, "hello.default", nil)
		done <- res.StatusCode
	}()
	e.clk.queued(t, DefaultQueueTimeout)
	if n := pod.requests.Load(); n != 0 {
		t.Fatalf("pod received %d requests before it was ready", n)
	}
	pod.ready.Store(true)
	e.clk.Step(DefaultProbeInterval)
	if code := recv(t, done, "response"); code != http.StatusOK {
		t.Fatalf("status %d, want 200", code)
	}
}

// TestProbesWaitTheirTurn: beyond MaxProbes, a probe of a service that
// holds no request waits for a turn, and goes at once when a request
// comes for its service, or when its service held one as the pod appeared
// (a cold start). The one turn here is taken by a probe that never ends
// within the test (ProbeTimeout is longer than its waits).
func TestProbesWaitTheirTurn(t *testing.T) {
	stuck := newFakePod(t, "stuck", false)
	stuck.probeHold = make(chan struct{}, 10)
	coldKey := mustKey("default/cold")
	src := NewMemorySource(
		Service{Key: mustKey("default/stuck"), ContainerConcurrency: 1, Pods: []Pod{stuck.pod()}},
		Service{Key: helloKey, ContainerConcurrency: 1},
		Service{Key: coldKey, ContainerConcurrency: 1},
	)
	e := newEnv(t, src, func(c *Config) {
		c.MaxProbes = 1
		c.ProbeTimeout = time.Hour
	}, nil)
	recv(t, stuck.probeHold, "the stuck pod's probe")

	// A service whose pod appears as a request comes: its probe waits,
	// the turn being taken, until the request does (or goes at once if the
	// request came first).
	warm := newFakePod(t, "warm", true)
	warm.probes = make(chan struct{}, 10)
	src.Set(Service{Key: helloKey, ContainerConcurrency: 1, Pods: []Pod{warm.pod()}})
	done := make(chan string, 1)
	get := func(host string) {
		_, body := e.get(t, host, nil)
		done <- body
	}
	go get("hello.default")
	if body := recv(t, done, "the warm service's answer"); body != "warm" {
		t.Fatalf("hello: %q, want an answer from warm", body)
	}

	// A service at zero asked for: its pod's first probe goes at once.
	cold := newFakePod(t, "cold", true)
	go get("cold.default")
	e.clk.queued(t, DefaultQueueTimeout)
	src.Set(Service{Key: coldKey, ContainerConcurrency: 1, Pods: []Pod{cold.pod()}})
	if body := recv(t, done, "the cold service's answer"); body != "cold" {
		t.Fatalf("cold: %q, want an answer from cold", body)
	}
}

// TestProbeTurns: probeTurn's bound, unit by unit.
func TestProbeTurns(t *testing.T) {
	a, err := New(Config{Source: NewMemorySource(), MaxProbes: 2})
	if err != nil {
		t.Fatal(err)
	}
	tg := a.newTarget(helloKey)
	ctx := context.Background()
	r1, ok1 := a.probeTurn(ctx, tg)
	r2, ok2 := a.probeTurn(ctx, tg)
	if !ok1 || !ok2 {
		t.Fatal("the first two probes waited for a turn of two")
	}
	// Every turn taken: a probe whose context is over gets none.
	over, cancel := context.WithCancel(ctx)
	cancel()
	if _, ok := a.probeTurn(over, tg); ok {
		t.Fatal("a third probe got a turn while two of two were taken")
	}
	// A held request: no wait, and no turn taken.
	tg.tracker.Start(a.clk.Now(), false)
	r3, ok3 := a.probeTurn(over, tg)
	if !ok3 {
		t.Fatal("a probe for a service holding a request waited for a turn")
	}
	r3()
	tg.tracker.End(a.clk.Now(), false)
	if _, ok := a.probeTurn(over, tg); ok {
		t.Fatal("a probe got a turn after the request ended, two of two taken")
	}
	// A request starting to wait frees a waiting probe, or is seen by one
	// that did not start waiting yet (the request is counted first, as
	// the chain's accounting does).
	got := make(chan bool)
	go func() {
		_, ok := a.probeTurn(ctx, tg)
		got <- ok
	}()
	tg.tracker.Start(a.clk.Now(), false)
	tg.want()
	if !recv(t, got, "the waiting probe's turn") {
		t.Fatal("want did not free the waiting probe")
	}
	tg.tracker.End(a.clk.Now(), false)
	// Once the service holds nothing, want's signal is renewed: a probe
	// waits again, and an ended turn gives it one.
	go func() {
		_, ok := a.probeTurn(ctx, tg)
		got <- ok
	}()
	r1()
	if !recv(t, got, "the turn r1 ended") {
		t.Fatal("no turn after one ended")
	}
	r2()
}
