package activator

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/swell-run/swell/pkg/service"
	"github.com/swell-run/swell/pkg/stats"
)

// TestQueuedAndReport: a request held for a service with no pod shows in
// Queued and in the figures Report gives the autoscaler's reporter.
func TestQueuedAndReport(t *testing.T) {
	src := NewMemorySource(Service{Key: helloKey, ContainerConcurrency: 1})
	e := newEnv(t, src, nil, nil)
	e.waitRoutable(t, helloKey, 0)
	if n, ok := e.a.Queued(service.Key{Namespace: "default", Name: "missing"}); ok || n != 0 {
		t.Fatalf("Queued(unknown) = %d, %v; want 0, false", n, ok)
	}
	done := make(chan int, 1)
	go func() {
		res, _ := e.get(t, "hello.default", nil)
		done <- res.StatusCode
	}()
	deadline := time.Now().Add(testTimeout)
	for n, _ := e.a.Queued(helloKey); n != 1; n, _ = e.a.Queued(helloKey) {
		if time.Now().After(deadline) {
			t.Fatalf("Queued = %d, want 1 while the request is held", n)
		}
		runtime.Gosched()
	}
	e.clk.Step(time.Second)
	got := map[string]stats.ActivatorFigures{}
	e.a.Report(e.clk.Now(), func(s string, f stats.ActivatorFigures) { got[s] = f })
	if f := got["default/hello"]; len(got) != 1 || f.InFlight != 1 || f.Requests != 1 || f.Concurrency <= 0 {
		t.Fatalf("Report = %+v, want default/hello with 1 request held", got)
	}

	pod := newFakePod(t, "p1", true)
	src.Set(Service{Key: helloKey, ContainerConcurrency: 1, Pods: []Pod{pod.pod()}})
	if code := recv(t, done, "response"); code != http.StatusOK {
		t.Fatalf("held request answered %d, want 200", code)
	}
	if n, _ := e.a.Queued(helloKey); n != 0 {
		t.Fatalf("Queued = %d after the request was served, want 0", n)
	}
}

// TestSynced: Synced closes once Run has applied the Source, and from then
// on every listed service is routed.
func TestSynced(t *testing.T) {
	src := NewMemorySource(Service{Key: mustKey("default/a")}, Service{Key: mustKey("default/b")})
	a, err := New(Config{Source: src})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Synced():
		t.Fatal("Synced closed before Run")
	default:
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	recv(t, a.Synced(), "sync")
	for _, k := range []service.Key{{Namespace: "default", Name: "a"}, {Namespace: "default", Name: "b"}} {
		if _, ok := a.Routable(k); !ok {
			t.Errorf("%s unknown once synced", k)
		}
	}
}

// TestReportAllocatesNothing: the figures of a period name each service by
// its key's text form, made once with the service, so that reporting
// allocates nothing however many services hold load.
func TestReportAllocatesNothing(t *testing.T) {
	var svcs []Service
	for i := range 100 {
		svcs = append(svcs, Service{Key: service.Key{Namespace: "default", Name: fmt.Sprintf("s%d", i)}})
	}
	src := NewMemorySource(svcs...)
	clk := clocktesting.NewFakeClock(time.Unix(1e9, 0))
	a, err := New(Config{Source: src, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	a.sync(src.Services())
	for _, s := range a.table.Load().byKey {
		s.tracker.Start(clk.Now(), false) // held for good: every period has load
	}
	n := 0
	emit := func(key string, f stats.ActivatorFigures) { n++ }
	if allocs := testing.AllocsPerRun(10, func() {
		clk.Step(time.Second)
		a.Report(clk.Now(), emit)
	}); allocs != 0 {
		t.Errorf("%v allocations per report, want 0", allocs)
	}
	if n != 11*100 {
		t.Errorf("%d entries in 11 reports of 100 loaded services, want %d", n, 11*100)
	}
}

// TestNoProberAfterStop: once Run has begun waiting for its probers, a
// pod dropped by a request in flight (it refused a connection) starts no
// prober: one started then would outlive Run, or race its wait.
func TestNoProberAfterStop(t *testing.T) {
	pod := newFakePod(t, "p1", true)
	src := NewMemorySource(Service{Key: helloKey, ContainerConcurrency: 1, Pods: []Pod{pod.pod()}})
	a, err := New(Config{Source: src})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	recv(t, a.Synced(), "sync")
	tg := a.table.Load().byKey[helloKey]
	for {
		ch := *tg.changed.Load()
		if tg.routableCount() == 1 {
			break
		}
		recv(t, ch, "the pod routable")
	}
	p := tg.pods["p1"]
	cancel()
	recv(t, done, "Run's return")
	tg.drop(p)
	tg.mu.Lock()
	started := p.stop != nil
	tg.mu.Unlock()
	if started {
		t.Error("a prober started after Run returned")
	}
}
