//go:build unix

package scaler_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/swell-run/swell/autoscaler/plan"
	. "github.com/swell-run/swell/autoscaler/scaler"
	"github.com/swell-run/swell/autoscaler/scaler/scalertest"
	"github.com/swell-run/swell/pkg/service"
)

// BenchmarkSteadyTick measures one autoscaler tick's worth of executor
// work for 10,000 services whose decisions do not change: every service
// gets its decision, is reconciled (one Status read from the fake's
// in-memory map) and found in place. One op is the whole tick.
func BenchmarkSteadyTick(b *testing.B) {
	const n = 10000
	backend := scalertest.NewBackend()
	svcs := make([]*Target, n)
	for i := range svcs {
		k := service.Key{Namespace: "bench", Name: fmt.Sprint("svc-", i)}
		svcs[i] = NewTarget(k)
		backend.Set(k, plan.Status{Desired: 3, Ready: 3, Route: plan.RoutePods})
	}
	done := make(chan struct{}, n)
	e := mustNew(b, Config{Backend: backend, Clock: clocktesting.NewFakeClock(time.Now()),
		OnReconcile: func(service.Key, time.Duration, error) { done <- struct{}{} }})
	e.Start()
	defer e.Stop()
	d := scale(3, "stable")
	tick := func() {
		for _, svc := range svcs {
			e.Update(svc, d)
		}
		for range n {
			<-done
		}
	}
	tick() // create the per-service state
	backend.ResetCalls()
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	b.ResetTimer()
	for b.Loop() {
		tick()
		b.StopTimer()
		backend.ResetCalls() // the fake's call log is not the executor's cost
		b.StartTimer()
	}
	b.StopTimer()
	// CPU of the whole process (executor, workers and the fake), which is
	// what "a share of a core" means; wall time hides work spread over
	// several cores.
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N)/1e6, "cpu-ms/tick")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/service")
}

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
