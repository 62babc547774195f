package engine

import (
	"math/rand/v2"
	"runtime"
	"testing"
)

// fleet is a population of services at realistic, varied load, driven the
// way the autoscaler's loop drives their cores: every second each service
// gets a sample from each of its sources (the pods' scrape and one or two
// activators), and every tick every service is decided.
type fleet struct {
	tb     testing.TB
	cores  []*Service
	load   []float64 // per service: concurrency per second
	srcs   []int     // sources per service per second
	ready  []int
	sec    int
	period int // seconds per tick
}

func newFleet(tb testing.TB, n int) *fleet {
	f := &fleet{tb: tb, period: 2}
	rng := rand.New(rand.NewPCG(1, 2))
	sp := spec(tb)
	for range n {
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
		f.cores = append(f.cores, New(sp, sec(0), 1))
	}
	return f
}

// record records one second of samples for every service, with a little
// noise so that the windows' sums move.
func (f *fleet) record() {
	for i, c := range f.cores {
		per := f.load[i] / float64(f.srcs[i])
		wobble := 1 + 0.05*float64((f.sec+i)%5-2)
		for range f.srcs[i] {
			c.Record(Sample{Time: sec(f.sec), Concurrency: per * wobble, RPS: per * wobble * 10})
		}
	}
	f.sec++
}

// decide decides for every service.
func (f *fleet) decide() {
	now := mid(f.sec - 1)
	for i, c := range f.cores {
		d := c.Decide(Inputs{Now: now, Ready: f.ready[i], ActivatorInPath: f.ready[i] == 0})
		f.ready[i] = d.Scale
	}
}

// step is one tick: a tick interval's worth of seconds recorded, then every
// service decided.
func (f *fleet) step() {
	for range f.period {
		f.record()
	}
	f.decide()
}

// warm fills a full stable window of history and lets the decisions settle,
// so the benchmark measures the steady state.
func (f *fleet) warm() {
	for range 90 / f.period {
		f.step()
	}
}

// BenchmarkTick10k is the reference benchmark: 10,000 services with a 60 s
// history at varied load; one op is one 2 s tick — two seconds of samples
// recorded for every service from each of its one to three sources, then
// one decision per service. cpu-%-of-core-at-2s is the share of one core
// the cores need at the default tick; allocs/service/tick should be 0.
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
	b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/float64(b.N)/float64(len(f.cores)), "allocs/service/tick")
}

// BenchmarkTickOnly10k measures the decisions alone, without recording.
func BenchmarkTickOnly10k(b *testing.B) {
	f := newFleet(b, 10_000)
	f.warm()
	b.ReportAllocs()
	for b.Loop() {
		f.decide()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(f.cores)), "ns/service")
}
