package activator

import (
	"net/http"
	"testing"
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
