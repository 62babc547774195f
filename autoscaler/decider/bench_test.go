package decider

import (
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/swell-run/swell/autoscaler/window"
	"github.com/swell-run/swell/pkg/autoscaling"
)

// BenchmarkTick10k is one autoscaler tick for 10,000 services: per service,
// record the second's sample into its window, read the stable and panic
// averages, and decide. Services have realistic, heavy-tailed loads (a
// fifth idle and scaled to zero, most a few pods, a few hundreds) with ±10%
// noise per second; pods follow decisions at once. Windows are full and
// every decider is past its start before timing.
//
// Reported: ns per tick (ns/op), ns per service, the share of one core at a
// 2 s tick, and allocations per service per tick.
func BenchmarkTick10k(b *testing.B) {
	for _, cfg := range []struct {
		name string
		mod  func(*autoscaling.Spec)
	}{
		{"kpa", func(*autoscaling.Spec) {}},
		{"kpa-exponential-averaging", func(s *autoscaling.Spec) { s.Averaging = autoscaling.AveragingExponential }},
		{"kpa-scale-down-delay", func(s *autoscaling.Spec) { s.ScaleDownDelay = 5 * time.Minute }},
		{"hpa", func(s *autoscaling.Spec) { s.Class = autoscaling.ClassHPA }},
		{"exponential", func(s *autoscaling.Spec) { s.Class = autoscaling.ClassExponential }},
		{"pid", func(s *autoscaling.Spec) { s.Class = autoscaling.ClassPID }},
		{"adaptive", func(s *autoscaling.Spec) { s.Class = autoscaling.ClassAdaptive }},
	} {
		b.Run(cfg.name, func(b *testing.B) {
			const n = 10_000
			type service struct {
				w     *window.Window
				d     *Decider
				load  float64
				ready int
			}
			rng := rand.New(rand.NewPCG(7, 8))
			svcs := make([]service, n)
			for i := range svcs {
				spec := testSpec(cfg.mod)
				load := 0.0
				if rng.IntN(5) != 0 {
					load = rng.ExpFloat64() * 100 // mean 100 in flight: ~2 pods at 70
				}
				svcs[i] = service{w: window.New(spec.StableWindow), d: New(spec, at(0), 0), load: load, ready: 1}
			}
			var noise [1024]float64
			for i := range noise {
				noise[i] = 0.9 + 0.2*rng.Float64()
			}
			sec := 0
			tick := func() {
				sec++
				now := at(float64(sec))
				for i := range svcs {
					s := &svcs[i]
					s.w.Record(now, s.load*noise[(i+sec)&1023])
					o := Observation{Now: now, Ready: s.ready, ActivatorInPath: true}
					s.d.Measure(s.w, &o)
					if ReadsArrivals(&s.d.spec) {
						// 100 ms a request: the arrivals, and what the pods served.
						o.ArrivalsStable, o.ArrivalsPanic, o.HasArrivals = o.Stable*10, o.Panic*10, true
						o.Served, o.ServedRequests = s.load, s.load*10
					}
					s.ready = s.d.Decide(o).Scale
				}
			}
			for range 180 {
				tick()
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			b.ResetTimer()
			ticks := 0
			for b.Loop() {
				tick()
				ticks++
			}
			b.StopTimer()
			runtime.ReadMemStats(&after)
			perTick := float64(b.Elapsed().Nanoseconds()) / float64(ticks)
			b.ReportMetric(perTick/n, "ns/service")
			b.ReportMetric(perTick/2e9*100, "%core@2s")
			b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(ticks*n), "allocs/service/tick")
		})
	}
}

// BenchmarkDecide is one decision of one service in steady state.
func BenchmarkDecide(b *testing.B) {
	d := New(testSpec(), at(0), 0)
	b.ReportAllocs()
	sec := 0
	for b.Loop() {
		sec++
		d.Decide(obs(float64(sec), 5, 330, 340))
	}
}

// BenchmarkPolicyMemory is what 10,000 services' deciders hold on the heap
// once each has decided for three minutes (the adaptive ones with
// arrivals, the pods' figures and a learned startup, sizing by work):
// bytes per service, by class.
func BenchmarkPolicyMemory(b *testing.B) {
	for _, class := range []autoscaling.Class{autoscaling.ClassKPA, autoscaling.ClassAdaptive} {
		b.Run(string(class), func(b *testing.B) {
			const n = 10_000
			var perService float64
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				ds := make([]*Decider, n)
				for i := range ds {
					sp := testSpec(func(s *autoscaling.Spec) { s.Class = class })
					d := New(sp, at(0), 0)
					if a, ok := d.policy.(*adaptive); ok {
						a.startup = 10 * time.Second
					}
					for sec := 1; sec <= 180; sec += 2 {
						o := obs(float64(sec), d.scale, 140, 140)
						o.ArrivalsStable, o.ArrivalsPanic, o.HasArrivals = 1400, 1400, true
						o.Served, o.ServedRequests = 280, 2800
						d.Decide(o)
					}
					ds[i] = d
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				perService = float64(after.HeapAlloc-before.HeapAlloc) / n
				runtime.KeepAlive(ds)
			}
			b.ReportMetric(perService, "B/service")
		})
	}
}
