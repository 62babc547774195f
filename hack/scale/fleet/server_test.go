//go:build linux

package main

import (
	"context"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/swell-run/swell/activator/reporter"
	"github.com/swell-run/swell/autoscaler/collector"
	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/service"
	"github.com/swell-run/swell/pkg/shard"
	"github.com/swell-run/swell/pkg/stats"
)

// testFleet serves a small fleet on a free port until the test ends: a
// busy service, a zero service woken at the epoch and an idle one, two
// pods each, every period of theirs closed long ago.
func testFleet(t *testing.T) *fleet {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	patterns := []Pattern{{Kind: Busy, Level: 60}, {Kind: Zero, Level: 35}, {Kind: Idle}}
	f, err := newFleet(patterns, 2, netip.MustParseAddr("127.1.250.1"), port, 3, 1, time.Now().Add(-time.Minute).Truncate(time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	f.table.setStep(1, Step{At: 0, Factor: 2})
	lfd, err := listen(port, false)
	if err != nil {
		t.Fatal(err)
	}
	l, err := newLoop(f, lfd, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := l.run(&stop); err != nil {
			t.Error(err)
		}
	})
	t.Cleanup(func() {
		stop.Store(true)
		wg.Wait()
		syscall.Close(lfd)
	})
	return f
}

// The autoscaler's own collector scrapes the fleet as it scrapes
// queue-proxies: every pod answers, with its pattern's load.
func TestCollectorScrapesTheFleet(t *testing.T) {
	f := testFleet(t)
	col, err := collector.New(collector.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var targets []collector.Target
	for _, s := range f.services() {
		key, err := service.Parse(s.Service)
		if err != nil {
			t.Fatal(err)
		}
		targets = append(targets, collector.Target{Key: key, Name: s.Service, Pods: s.Pods})
	}
	want := map[string]float64{"scale/svc-00000": 120, "scale/svc-00001": 140, "scale/svc-00002": 0}
	for round := range 2 { // the second on kept-alive connections
		samples := col.Round(context.Background(), time.Now().Add(time.Duration(round)*time.Second), targets)
		if len(samples) != 3 {
			t.Fatalf("round %d: %d samples, want 3", round, len(samples))
		}
		for _, s := range samples {
			if s.Scraped != 2 || math.Abs(s.Concurrency-want[s.Service.String()]) > 1e-6 {
				t.Errorf("round %d: %s: %d of 2 pods answered, concurrency %v; want %v", round, s.Service, s.Scraped, s.Concurrency, want[s.Service.String()])
			}
		}
	}
	if f.cold(0, time.Since(f.epoch)) {
		t.Error("a service just scraped is cold")
	}
	if !f.cold(0, time.Since(f.epoch)+time.Minute) {
		t.Error("a service not scraped for a minute is warm")
	}

	// JSON for a person; nothing at an address of no pod.
	req, _ := http.NewRequest(http.MethodGet, "http://"+f.addrs[2].String()+"/stats?pretty", nil)
	req.Header.Set("Accept", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Header.Get("Content-Type") != "application/json" || !strings.Contains(string(b), `"concurrency":70`) {
		t.Errorf("GET as a person: %s %q", resp.Status, b)
	}
	stray := netip.AddrPortFrom(netip.MustParseAddr("127.1.251.1"), f.addrs[0].Port())
	if resp, err := http.Get("http://" + stray.String() + "/stats"); err == nil {
		resp.Body.Close()
		t.Errorf("an address of no pod answered %s", resp.Status)
	}
}

// The fake activators speak the real protocol: the autoscaler's endpoint
// takes their reports and their pokes.
func TestActivatorsReportToTheEndpoint(t *testing.T) {
	f := testFleet(t)
	acts := collector.NewActivators(clock.RealClock{}, 0)
	var poked atomic.Value
	const token = "0123456789abcdef0123"
	ep, err := collector.NewActivatorEndpoint(collector.EndpointConfig{Tokens: []string{token}, Sink: acts, OnPoke: func(s string) { poked.Store(s) }})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(ep)
	defer srv.Close()
	defer ep.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	var reps []*reporter.Reporter
	for _, name := range f.actNames {
		rep, err := reporter.New(reporter.Config{URL: "ws" + strings.TrimPrefix(srv.URL, "http"), Token: token, Name: name,
			Source: activatorSource{f: f, period: 100 * time.Millisecond}, Period: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		reps = append(reps, rep)
		wg.Go(func() { rep.Run(ctx) })
	}
	reps[0].Poke(f.keys[1])

	// The woken zero service: 35 × 2 per pod, 2 pods, at the activators,
	// each holding a third (rounded up), 10 requests a second each (over
	// the period the reporter measured, a few milliseconds off).
	deadline := time.Now().Add(5 * time.Second)
	for {
		l := acts.Load(f.keys[1])
		if l.Activators == 3 && math.Abs(l.Concurrency-140) < 1e-6 && math.Abs(l.RPS-1400) < 70 && l.Pending == 3*47 && poked.Load() == f.keys[1] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the endpoint has %+v for %s, poked %v; want 3 activators holding 140", l, f.keys[1], poked.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if l := acts.Load(f.keys[0]); l.Activators != 0 {
		t.Errorf("a busy service's load at the activators: %+v", l)
	}
}

// Each fake activator's part of the report is the services its keep
// accepts, as Report gives them.
func TestReportPartIsThePartKept(t *testing.T) {
	f := testFleet(t)
	now := f.epoch.Add(time.Minute)
	all := map[string]stats.ActivatorFigures{}
	src := activatorSource{f: f, period: time.Second}
	src.Report(now, func(k string, fig stats.ActivatorFigures) { all[k] = fig })
	if len(all) == 0 {
		t.Fatal("nothing reported")
	}
	for _, kept := range []string{f.keys[1], f.keys[0], ""} {
		got := map[string]stats.ActivatorFigures{}
		src.ReportPart(now, func(k string) bool { return k == kept }, func(k string, fig stats.ActivatorFigures) { got[k] = fig })
		want := map[string]stats.ActivatorFigures{}
		if fig, ok := all[kept]; ok {
			want[kept] = fig
		}
		if !maps.Equal(got, want) {
			t.Errorf("keeping %q: %v, want %v", kept, got, want)
		}
	}
}

// With the autoscaler sharded, the activators (reporter.Pool) send each
// service's figures and pokes to the replica leading its bucket only.
func TestActivatorPoolsReportEachBucketToItsLeader(t *testing.T) {
	const buckets = 2
	patterns := make([]Pattern, 8)
	for i := range patterns {
		patterns[i] = Pattern{Kind: Zero, Level: 35}
	}
	f, err := newFleet(patterns, 2, netip.MustParseAddr("127.1.250.1"), 9, 3, 1, time.Now().Add(-time.Minute).Truncate(time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	inBucket := [buckets][]string{}
	for i, k := range f.keys {
		f.table.setStep(i, Step{Factor: 1})
		b := shard.Of(k, buckets)
		inBucket[b] = append(inBucket[b], k)
	}
	if len(inBucket[0]) == 0 || len(inBucket[1]) == 0 {
		t.Fatalf("a bucket without services: %v", inBucket)
	}
	const token = "0123456789abcdef0123"
	type replica struct {
		acts  *collector.Activators
		poked chan string
		addr  string
	}
	var replicas [buckets]replica
	var leaders reporter.Leaders
	for b := range replicas {
		r := replica{acts: collector.NewActivators(clock.RealClock{}, 0), poked: make(chan string, 16)}
		ep, err := collector.NewActivatorEndpoint(collector.EndpointConfig{Tokens: []string{token}, Sink: r.acts,
			OnPoke: func(s string) { r.poked <- s }})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(ep)
		t.Cleanup(srv.Close)
		t.Cleanup(func() { ep.Close() })
		r.addr = strings.TrimPrefix(srv.URL, "http://")
		replicas[b] = r
		leaders = append(leaders, r.addr)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	var pools []*reporter.Pool
	for _, name := range f.actNames {
		// The URL's host is no replica's: each is dialled at its address.
		p, err := reporter.NewPool(reporter.PoolConfig{
			Config: reporter.Config{URL: "ws://autoscaler.invalid" + network.ActivatorReportPath, Token: token, Name: name,
				Source: activatorSource{f: f, period: 100 * time.Millisecond}, Period: 100 * time.Millisecond},
			DialerFor: dialerTo,
		})
		if err != nil {
			t.Fatal(err)
		}
		p.SetLeaders(leaders)
		pools = append(pools, p)
		wg.Go(func() { p.Run(ctx) })
	}
	for b := range buckets {
		pools[0].Poke(inBucket[b][0])
	}

	deadline := time.Now().Add(5 * time.Second)
	for b, r := range replicas {
		for _, k := range inBucket[b] {
			for {
				l := r.acts.Load(k)
				if l.Activators == 3 && math.Abs(l.Concurrency-70) < 1e-6 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("bucket %d's leader has %+v for %s; want 3 activators holding 70", b, l, k)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		select {
		case k := <-r.poked:
			if k != inBucket[b][0] {
				t.Errorf("bucket %d's leader was poked for %s, want %s", b, k, inBucket[b][0])
			}
		case <-time.After(time.Until(deadline)):
			t.Errorf("bucket %d's leader was not poked", b)
		}
		for _, k := range inBucket[1-b] {
			if l := r.acts.Load(k); l.Activators != 0 {
				t.Errorf("bucket %d's leader has %s, of the other bucket: %+v", b, k, l)
			}
		}
	}
	for b, r := range replicas {
		select {
		case k := <-r.poked:
			t.Errorf("bucket %d's leader was poked for %s too", b, k)
		default:
		}
	}
}
