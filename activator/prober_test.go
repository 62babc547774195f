package activator

import (
	"net/http"
	"testing"
	"time"

	"github.com/swell-run/swell/pkg/service"
)

// TestProbeGatesTraffic: a pod gets no traffic until its queue-proxy says it
// is ready; the prober retries on the ProbeInterval.
func TestProbeGatesTraffic(t *testing.T) {
	pod := newFakePod(t, "p1", false)
	pod.probes = make(chan struct{}, 100)
	src := NewMemorySource(Service{Key: helloKey, ContainerConcurrency: 1, Pods: []Pod{pod.pod()}})
	queued := make(chan service.Key, 1)
	e := newEnv(t, src, nil, func(a *Activator) { a.hooks.queued = func(k service.Key) { queued <- k } })
	recv(t, pod.probes, "first probe")
	// Failed probes are retried on the fake clock. Only the prober waits
	// on it until a request queues.
	for i := 0; i < 2; i++ {
		waitForTimer(t, e)
		e.clk.Step(DefaultProbeInterval)
		recv(t, pod.probes, "probe retry")
	}
	waitForTimer(t, e)

	done := make(chan int, 1)
	go func() {
		res, _ := e.get(t, "hello.default", nil)
		done <- res.StatusCode
	}()
	recv(t, queued, "queued request")
	if n := pod.requests.Load(); n != 0 {
		t.Fatalf("pod received %d requests before it was ready", n)
	}
	pod.ready.Store(true)
	e.clk.Step(DefaultProbeInterval)
	if code := recv(t, done, "response"); code != http.StatusOK {
		t.Fatalf("status %d, want 200", code)
	}
}

// waitForTimer waits until something waits on the fake clock: the clock is
// in-process, but the prober reaches its timer asynchronously.
func waitForTimer(t *testing.T, e *testEnv) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !e.clk.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("nothing waits on the clock")
		}
		time.Sleep(time.Millisecond) // bounded poll on a state no channel signals
	}
}
