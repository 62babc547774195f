package autoscaler

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/swell-run/swell/autoscaler/collector"
	"github.com/swell-run/swell/autoscaler/plan"
	"github.com/swell-run/swell/autoscaler/scaler"
	"github.com/swell-run/swell/pkg/autoscaling"
	"github.com/swell-run/swell/pkg/service"
)

// staticBackend is a Backend whose Status is a map read, like an informer's
// lister: the cost the loop pays per service and tick, without the fake
// backend's call recording.
type staticBackend struct {
	mu sync.RWMutex
	m  map[service.Key]plan.Status
}

func (b *staticBackend) Status(_ context.Context, k service.Key) (plan.Status, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	st, ok := b.m[k]
	if !ok {
		return st, fmt.Errorf("%s: %w", k, scaler.ErrNotFound)
	}
	return st, nil
}

func (b *staticBackend) SetScale(_ context.Context, k service.Key, n int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.m[k]
	st.Desired, st.Ready = n, n
	b.m[k] = st
	return nil
}

func (b *staticBackend) SetRoute(_ context.Context, k service.Key, r plan.Route) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.m[k]
	st.Route, st.Requested = r, r
	b.m[k] = st
	return nil
}

// BenchmarkLoopTick10k is the loop's own cost for 10,000 services: one op
// is one 2 s tick — two collection rounds' samples recorded as the
// collector hands them to the loop, then a decision per service with its inputs
// read from the backend and the activators, recorded for Status and the
// metrics and handed to the executor (queued; the executor's reconciles
// are the scaler's cost, measured there).
func BenchmarkLoopTick10k(b *testing.B) {
	const n = 10_000
	clk := testingclock.NewFakeClock(t0)
	be := &staticBackend{m: make(map[service.Key]plan.Status, n)}
	a, err := New(Config{Backend: be, Clock: clk})
	if err != nil {
		b.Fatal(err)
	}
	spec := autoscaling.DefaultSpec()
	samples := make([]collector.Sample, n)
	for i := range n {
		k := service.Key{Namespace: fmt.Sprintf("team-%03d", i%300), Name: fmt.Sprintf("svc-%05d", i)}
		ready := 1 + i%7
		be.m[k] = plan.Status{Desired: ready, Ready: ready, Route: plan.RoutePods, Requested: plan.RoutePods}
		a.Upsert(k, spec)
		samples[i] = collector.Sample{Service: k, Concurrency: float64(ready) * 60, RPS: float64(ready) * 600}
	}
	round := func() {
		sec := clk.Now().Truncate(time.Second)
		for i := range samples {
			samples[i].Time = sec
		}
		a.record(samples)
		clk.Step(time.Second)
	}
	a.apply()
	tick := func() {
		round()
		round()
		a.out(a.tickAll(clk.Now()))
	}
	for range 35 { // a full stable window, and past the restart's panic
		tick()
	}
	b.ReportAllocs()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	b.ResetTimer()
	for b.Loop() {
		tick()
	}
	b.StopTimer()
	runtime.ReadMemStats(&m1)
	ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	b.ReportMetric(ns/2e9*100, "cpu-%-of-core-at-2s")
	b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/float64(b.N)/n, "allocs/service/tick")
}
