package collector

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	testclock "k8s.io/utils/clock/testing"

	"github.com/swell-run/swell/pkg/stats"
)

// TestRoundNoAllocs: without pods to scrape, a round over many services —
// listing, combining with the activators' figures, emitting — allocates
// nothing in steady state; the only allocations of a round are net/http's.
func TestRoundNoAllocs(t *testing.T) {
	clk := testclock.NewFakeClock(t0)
	pods := newStaticPods()
	acts := NewActivators(clk, time.Hour)
	f := &stats.ActivatorFrame{Type: stats.ActivatorReport, Period: time.Second}
	for i := range 1000 {
		svc := fmt.Sprintf("ns/svc-%d", i)
		pods.Set(svc)
		f.Entries = append(f.Entries, entry(svc, 1, 1, 1))
	}
	acts.Apply("act-a", f)
	c, err := New(Config{Activators: acts, Clock: clk, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	targets := pods.targets(t)
	now := t0
	round := func() {
		now = now.Add(time.Second)
		c.Round(context.Background(), now, targets)
	}
	round()
	if n := testing.AllocsPerRun(20, round); n != 0 {
		t.Fatalf("a round over 1000 services: %v allocs, want 0", n)
	}
	if n := testing.AllocsPerRun(20, func() { acts.Apply("act-a", f) }); n != 0 {
		t.Fatalf("applying a 1000-service report: %v allocs, want 0", n)
	}
}

// BenchmarkActivatorsApply: one activator's report of 5000 services into
// the store (steady state), per frame.
func BenchmarkActivatorsApply(b *testing.B) {
	clk := testclock.NewFakeClock(t0)
	acts := NewActivators(clk, 0)
	var frame stats.ActivatorFrame
	raw := stats.AppendActivatorReportHeader(nil, t0, time.Second)
	for i := range 5000 {
		raw = stats.AppendActivatorEntry(raw, fmt.Sprintf("team-%d/service-%d", i%50, i), stats.ActivatorFigures{Concurrency: 2, Requests: 20, InFlight: 1})
	}
	for _, name := range []string{"act-a", "act-b"} { // two activators per service
		if err := stats.DecodeActivatorFrame(raw, &frame); err != nil {
			b.Fatal(err)
		}
		acts.Apply(name, &frame)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := stats.DecodeActivatorFrame(raw, &frame); err != nil {
			b.Fatal(err)
		}
		acts.Apply("act-a", &frame)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/5000, "ns/service")
}

// BenchmarkRound: one collection round over 1000 pods on loopback, each
// serving a binary report; keep-alive connections are reused across rounds.
func BenchmarkRound(b *testing.B) {
	for _, shape := range []struct{ services, pods int }{{1000, 1}, {100, 10}, {10, 100}} {
		b.Run(fmt.Sprintf("services=%d/pods=%d", shape.services, shape.pods), func(b *testing.B) {
			clk := testclock.NewFakeClock(t0)
			lister := newStaticPods()
			for s := range shape.services {
				addrs := make([]string, shape.pods)
				for p := range addrs {
					addrs[p] = newFakePod(b, rep(float64(p%7), 0, uint64(p%50), 0)).addr()
				}
				lister.Set(fmt.Sprintf("ns/svc-%d", s), addrs...)
			}
			c, err := New(Config{Clock: clk, Seed: 1, Workers: 64})
			if err != nil {
				b.Fatal(err)
			}
			targets := lister.targets(b)
			now := t0
			c.Round(context.Background(), now, targets) // open the connections
			scraped := 0
			b.ReportAllocs()
			for b.Loop() {
				now = now.Add(time.Second)
				for _, x := range c.Round(context.Background(), now, targets) {
					scraped += x.Scraped
				}
			}
			b.ReportMetric(float64(scraped)/float64(b.N), "scrapes/round")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(scraped), "ns/scrape")
		})
	}
}

// BenchmarkEndpoint: 1000-service report frames over a real websocket,
// decoded and applied, per frame.
func BenchmarkEndpoint(b *testing.B) {
	acts := NewActivators(testclock.NewFakeClock(t0), 0)
	var applied atomic.Int64
	done := make(chan struct{}, 1)
	var want atomic.Int64
	sink := sinkFunc(func(a string, f *stats.ActivatorFrame) {
		acts.Apply(a, f)
		if applied.Add(1) == want.Load() {
			done <- struct{}{}
		}
	})
	ep, err := NewActivatorEndpoint(EndpointConfig{Tokens: []string{testToken}, Sink: sink})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(ep)
	defer srv.Close()
	defer ep.Close()
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), http.Header{"Authorization": {"Bearer " + testToken}})
	if err != nil {
		b.Fatal(err)
	}
	defer ws.Close()
	ws.WriteMessage(websocket.BinaryMessage, stats.AppendActivatorHello(nil, "act-bench"))
	frame := stats.AppendActivatorReportHeader(nil, t0, time.Second)
	for i := range 1000 {
		frame = stats.AppendActivatorEntry(frame, fmt.Sprintf("team-%d/service-%d", i%50, i), stats.ActivatorFigures{Concurrency: 2, Requests: 20, InFlight: 1})
	}
	b.SetBytes(int64(len(frame)))
	b.ResetTimer()
	want.Store(int64(b.N))
	for range b.N {
		if err := ws.WriteMessage(websocket.BinaryMessage, frame); err != nil {
			b.Fatal(err)
		}
	}
	<-done
}

type sinkFunc func(string, *stats.ActivatorFrame)

func (f sinkFunc) Apply(a string, fr *stats.ActivatorFrame) { f(a, fr) }
