package engine

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/swell-run/swell/autoscaler/decider"
	"github.com/swell-run/swell/pkg/service"
)

// fleet is a population of services at realistic, varied load, driven the
// way the autoscaler drives the engine: every second each service gets a
// sample from each of its sources (the pods' scrape and one or two
// activators), and every tick every service is decided with inputs looked
// up by key.
type fleet struct {
	tb     testing.TB
	e      *Engine
	keys   []service.Key
	load   []float64 // per service: concurrency per second
	srcs   []int     // sources per service per second
	index  map[service.Key]int
	ready  []int
	sec    int
	period int // seconds per tick
	// inputsFn and outFn are bound once, as the autoscaler binds its own:
	// no closure is made per tick or per service.
	inputsFn func(service.Key) Inputs
	outFn    func(service.Key, decider.Decision)
}

func newFleet(tb testing.TB, n int) *fleet {
	f := &fleet{tb: tb, e: New(), index: make(map[service.Key]int, n), period: 2}
	rng := rand.New(rand.NewPCG(1, 2))
	sp := spec(tb)
	for i := range n {
		k := service.Key{Namespace: fmt.Sprintf("team-%03d", i%300), Name: fmt.Sprintf("svc-%05d", i)}
		f.keys = append(f.keys, k)
		f.index[k] = i
		// A realistic spread: a fifth idle, most a few pods, a few large.
		var l float64
		switch r := rng.Float64(); {
		case r < 0.2:
			l = 0
		case r < 0.95:
			l = rng.Float64() * 500
		default:
			l = 500 + rng.Float64()*5000
		}
		f.load = append(f.load, l)
		f.srcs = append(f.srcs, 1+rng.IntN(3))
		f.ready = append(f.ready, 1)
		f.e.Upsert(k, sp, sec(0), 1)
	}
	f.inputsFn = f.inputs
	f.outFn = f.out
	return f
}

func (f *fleet) inputs(k service.Key) Inputs {
	i := f.index[k]
	return Inputs{Now: mid(f.sec - 1), Ready: f.ready[i], ActivatorInPath: f.ready[i] == 0}
}

func (f *fleet) out(k service.Key, d decider.Decision) {
	f.ready[f.index[k]] = d.Scale
}

// record records one second of samples for every service, with a little
// noise so that the windows' sums move.
func (f *fleet) record() {
	for i, k := range f.keys {
		per := f.load[i] / float64(f.srcs[i])
		wobble := 1 + 0.05*float64((f.sec+i)%5-2)
		for range f.srcs[i] {
			f.e.Record(k, Sample{Time: sec(f.sec), Concurrency: per * wobble, RPS: per * wobble * 10})
		}
	}
	f.sec++
}

// step is one tick: a tick interval's worth of seconds recorded, then every
// service decided.
func (f *fleet) step() {
	for range f.period {
		f.record()
	}
	f.e.Tick(f.inputsFn, f.outFn)
}

// warm fills a full stable window of history and lets the decisions settle,
// so the benchmark measures the steady state.
func (f *fleet) warm() {
	for range 90 / f.period {
		f.step()
	}
}

// BenchmarkTick10k is the benchmark: 10,000 services with a 60 s
// history at varied load; one op is one 2 s tick — two seconds of samples
// recorded for every service from each of its one to three sources, then
// one decision per service. cpu-%-of-core-at-2s is the share of one core
// the engine needs at the default tick; allocs/service/tick should be 0.
func BenchmarkTick10k(b *testing.B) {
	f := newFleet(b, 10_000)
	f.warm()
	b.ReportAllocs()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	b.ResetTimer()
	for b.Loop() {
		f.step()
	}
	b.StopTimer()
	runtime.ReadMemStats(&m1)
	nsPerTick := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	b.ReportMetric(nsPerTick/2e9*100, "cpu-%-of-core-at-2s")
	b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/float64(b.N)/float64(len(f.keys)), "allocs/service/tick")
}

// BenchmarkTickOnly10k measures the decisions alone, without recording.
func BenchmarkTickOnly10k(b *testing.B) {
	f := newFleet(b, 10_000)
	f.warm()
	b.ReportAllocs()
	for b.Loop() {
		f.e.Tick(f.inputsFn, f.outFn)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(f.keys)), "ns/service")
}

// BenchmarkRecordParallel records from many goroutines at once, as the
// collector's round and the activator connections do: each goroutine walks
// the services from its own offset. One op is one sample.
func BenchmarkRecordParallel(b *testing.B) {
	f := newFleet(b, 10_000)
	f.warm()
	var next atomic.Int64
	now := sec(f.sec)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(7919)) % len(f.keys)
		for pb.Next() {
			f.e.Record(f.keys[i], Sample{Time: now, Concurrency: 3, RPS: 30})
			if i++; i == len(f.keys) {
				i = 0
			}
		}
	})
}
