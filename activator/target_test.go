package activator

import (
	"context"
	"sync/atomic"
	"testing"
)

// TestUnchangedServiceNotRepublished: a source lists every service on any
// change; a service whose listing is the same keeps its routable pods
// without waking its waiting requests, and one whose concurrency changed
// publishes it.
func TestUnchangedServiceNotRepublished(t *testing.T) {
	p := newFakePod(t, "p1", true)
	hello := Service{Key: helloKey, Pods: []Pod{p.pod()}}
	e := newEnv(t, NewMemorySource(hello), nil, nil)
	e.waitRoutable(t, helloKey, 1)
	s := e.a.table.Load().byKey[helloKey]
	published := *s.changed.Load()

	// Another service appearing re-lists hello as it was.
	synced := *e.a.tableChanged.Load()
	e.src.Set(Service{Key: mustKey("default/other")})
	recv(t, synced, "sync of the new service")
	select {
	case <-published:
		t.Fatal("hello republished though nothing of it changed")
	default:
	}
	if n := s.routableCount(); n != 1 {
		t.Fatalf("hello has %d routable pods after an unrelated change, want 1", n)
	}

	hello.ContainerConcurrency = 2
	e.src.Set(hello)
	recv(t, published, "publication of the new concurrency")
	if got := s.br.Capacity(); got != 2 {
		t.Errorf("capacity %d after the concurrency became 2 on one pod, want 2", got)
	}
}

// TestRoutablePodReleasesProbeContext: a pod's prober runs under a context
// derived from Run's, and once its probe passed the pod is routable and
// the context is released, not kept registered in Run's until the
// activator stops (a few hundred bytes per pod that ever became routable).
// A pod still being probed keeps its own.
func TestRoutablePodReleasesProbeContext(t *testing.T) {
	ready, starting := newFakePod(t, "p1", true), newFakePod(t, "p2", false)
	clk := newNotifyClock()
	src := NewMemorySource(Service{Key: helloKey, Pods: []Pod{ready.pod(), starting.pod()}})
	// A probe that timed out (real time, on a busy machine) would wait for
	// the fake clock to be tried again.
	a, err := New(Config{Source: src, Clock: clk, ProbeTimeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	parent, cancel := context.WithCancel(context.Background())
	ctx := &childCounter{Context: parent}
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	e := &testEnv{a: a, clk: clk} // for its waits

	// markRoutable releases the context before it publishes the pod.
	e.waitRoutable(t, helloKey, 1)
	if n := ctx.live.Load(); n != 1 {
		t.Fatalf("%d probe contexts live with p2 still probed, want 1", n)
	}
	// p2's first probe failed once its prober waits to try again.
	recv(t, clk.timers, "p2's prober's timer")
	starting.ready.Store(true)
	clk.Step(DefaultProbeInterval)
	e.waitRoutable(t, helloKey, 2)
	if n := ctx.live.Load(); n != 0 {
		t.Fatalf("%d probe contexts live with every pod routable, want 0", n)
	}
}

// childCounter is a context that counts the contexts derived from it and
// not yet done. The context package registers a child with a parent that
// has an AfterFunc method, and is not one of its own cancelable contexts,
// through that method (as context.AfterFunc does), and unregisters it
// (calls stop) when the child is cancelled first.
type childCounter struct {
	context.Context
	live atomic.Int64
}

// Value hides the embedded context, which the context package would
// otherwise find, and register children with, by its private key.
func (c *childCounter) Value(any) any { return nil }

func (c *childCounter) AfterFunc(f func()) (stop func() bool) {
	c.live.Add(1)
	stopParent := context.AfterFunc(c.Context, func() {
		c.live.Add(-1)
		f()
	})
	return func() bool {
		if !stopParent() {
			return false
		}
		c.live.Add(-1)
		return true
	}
}
