//go:build linux

package main

import (
	"context"
	"io"
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
	"github.com/swell-run/swell/pkg/service"
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
	f, err := newFleet(patterns, 2, netip.MustParseAddr("127.1.250.1"), port, 3, 1, time.Now().Add(-time.Minute).Truncate(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	f.steps[1].Store(&Step{At: 0, Factor: 2})
	lfd, err := listen(port)
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
