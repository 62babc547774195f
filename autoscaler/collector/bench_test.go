package collector

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"k8s.io/utils/clock"
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
// serving a binary report, by the collector's own client and by net/http's
// (NewHTTPClient); keep-alive connections are reused across rounds. The
// pods' servers run in the benchmark's process.
func BenchmarkRound(b *testing.B) {
	for _, shape := range []struct{ services, pods int }{{1000, 1}, {100, 10}, {10, 100}} {
		for _, client := range []string{"own", "net-http"} {
			b.Run(fmt.Sprintf("services=%d/pods=%d/client=%s", shape.services, shape.pods, client), func(b *testing.B) {
				benchmarkRound(b, shape.services, shape.pods, client == "net-http")
			})
		}
	}
}

func benchmarkRound(b *testing.B, services, pods int, netHTTP bool) {
	clk := testclock.NewFakeClock(t0)
	lister := newStaticPods()
	for s := range services {
		addrs := make([]string, pods)
		for p := range addrs {
			addrs[p] = newFakePod(b, rep(float64(p%7), 0, uint64(p%50), 0)).addr()
		}
		lister.Set(fmt.Sprintf("ns/svc-%d", s), addrs...)
	}
	cfg := Config{Clock: clk, Seed: 1, Workers: 64}
	if netHTTP {
		client := NewHTTPClient(0)
		defer client.CloseIdleConnections()
		cfg.Client = client
	}
	c, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if c.pool != nil {
		defer c.pool.closeIdle(time.Now().Add(time.Hour))
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

// BenchmarkScrape: one scrape of a busy pod's report from a net/http
// stats server in a process of its own, by the collector's own client and
// by net/http's (NewHTTPClient), over a kept-alive connection and over a
// new one each time (as a pod past the open-file limit's share is).
// cpu-ns/op is the benchmark process's CPU time, user and system, per
// scrape: the scraper's, without the server's.
func BenchmarkScrape(b *testing.B) {
	addr := startStatsServer(b)[0]
	clients := []struct {
		name string
		new  func(keepAlive bool) (scraper, func())
	}{
		{"own", func(keepAlive bool) (scraper, func()) {
			pool := newConnPool(1, podIdleTimeout, clock.RealClock{})
			if !keepAlive {
				pool = newConnPool(0, podIdleTimeout, clock.RealClock{})
			}
			return newConnScraper(pool, DefaultScrapeTimeout), func() { pool.closeIdle(time.Now().Add(time.Hour)) }
		}},
		{"net-http", func(keepAlive bool) (scraper, func()) {
			client := NewHTTPClient(DefaultScrapeTimeout)
			s := &httpScraper{client: client}
			if keepAlive {
				return s, client.CloseIdleConnections
			}
			return closingScraper{s}, client.CloseIdleConnections
		}},
	}
	for _, conn := range []string{"keep-alive", "new"} {
		for _, cl := range clients {
			b.Run("conn="+conn+"/client="+cl.name, func(b *testing.B) {
				s, done := cl.new(conn == "keep-alive")
				defer done()
				ctx := context.Background()
				var r stats.Report
				scrape := func() {
					if res, err := s.scrape(ctx, time.Now().Add(DefaultScrapeTimeout), podID{addr: addr}, &r); err != nil {
						b.Fatal(resultNames[res], err)
					}
				}
				scrape() // open the connection
				before := cpuTime(b)
				b.ReportAllocs()
				for b.Loop() {
					scrape()
				}
				b.ReportMetric(float64((cpuTime(b)-before).Nanoseconds())/float64(b.N), "cpu-ns/op")
				if r.Concurrency != busyReport.Concurrency || r.App.Gauge != busyReport.App.Gauge {
					b.Fatalf("scraped %+v, want %+v", r, busyReport)
				}
			})
		}
	}
}

// closingScraper closes its net/http client's connection after each
// scrape.
type closingScraper struct{ *httpScraper }

func (s closingScraper) scrape(ctx context.Context, deadline time.Time, pod podID, r *stats.Report) (scrapeResult, error) {
	defer s.client.CloseIdleConnections()
	return s.httpScraper.scrape(ctx, deadline, pod, r)
}

// cpuTime returns the CPU time, user and system, the process has used.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRoundCPU: rounds over 256 pods (256 services of one pod, every
// pod scraped) served by another process, with 128 workers, by the
// collector's own client and by net/http's (NewHTTPClient); over
// kept-alive connections, and over new ones each round. cpu-ns/scrape is
// the benchmark process's CPU time per scrape: the collector's, without
// the pods'.
func BenchmarkRoundCPU(b *testing.B) {
	addrs := startStatsServer(b)
	for _, conn := range []string{"keep-alive", "new"} {
		for _, client := range []string{"own", "net-http"} {
			b.Run("conn="+conn+"/client="+client, func(b *testing.B) {
				lister := newStaticPods()
				for i, addr := range addrs {
					lister.Set(fmt.Sprintf("ns/svc-%d", i), addr)
				}
				cfg := Config{Clock: testclock.NewFakeClock(t0), Seed: 1, Sampling: &Sampling{}}
				var httpClient *http.Client
				if client == "net-http" {
					httpClient = NewHTTPClient(DefaultScrapeTimeout)
					cfg.Client = httpClient
				}
				c, err := New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				closeIdle := func() {
					if httpClient != nil {
						httpClient.CloseIdleConnections()
					} else {
						c.pool.closeIdle(time.Now().Add(time.Hour))
					}
				}
				defer closeIdle()
				targets := lister.targets(b)
				now := t0
				round := func() {
					now = now.Add(time.Second)
					for _, x := range c.Round(context.Background(), now, targets) {
						if x.Scraped != 1 {
							b.Fatalf("%s: %d scraped", x.Service, x.Scraped)
						}
					}
					if conn == "new" {
						closeIdle()
					}
				}
				round()
				before := cpuTime(b)
				b.ReportAllocs()
				for b.Loop() {
					round()
				}
				scrapes := float64(b.N * len(addrs))
				b.ReportMetric(float64((cpuTime(b)-before).Nanoseconds())/scrapes, "cpu-ns/scrape")
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/scrapes, "ns/scrape")
			})
		}
	}
}
