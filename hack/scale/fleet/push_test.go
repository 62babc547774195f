//go:build linux

package main

import (
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/swell-run/swell/autoscaler/collector"
	"github.com/swell-run/swell/pkg/service"
)

func TestClosedAt(t *testing.T) {
	const ms = time.Millisecond
	s := time.Second
	step := Step{At: 5300 * ms, Factor: 3}
	for _, tt := range []struct {
		name     string
		elapsed  time.Duration
		s        Step
		sharp    bool
		from, to time.Duration
		ok       bool
	}{
		{name: "before the first close", elapsed: 1100 * ms},
		{name: "the first close", elapsed: 1200 * ms, from: 200 * ms, to: 1200 * ms, ok: true},
		{name: "a second on", elapsed: 4900 * ms, from: 3200 * ms, to: 4200 * ms, ok: true},
		// Scraped, a step moves no period.
		{name: "scraped, after a step", elapsed: 5350 * ms, s: step, from: 4200 * ms, to: 5200 * ms, ok: true},
		// Pushing, the step closes one at once, the next 100 ms later,
		// and the periods close a second apart from there.
		{name: "pushing, before the step", elapsed: 5250 * ms, s: step, sharp: true, from: 4200 * ms, to: 5200 * ms, ok: true},
		{name: "pushing, at the step", elapsed: 5300 * ms, s: step, sharp: true, from: 5200 * ms, to: 5300 * ms, ok: true},
		{name: "pushing, the follow-up", elapsed: 5450 * ms, s: step, sharp: true, from: 5300 * ms, to: 5400 * ms, ok: true},
		{name: "pushing, a second on", elapsed: 6400 * ms, s: step, sharp: true, from: 5400 * ms, to: 6400 * ms, ok: true},
		{name: "pushing, later", elapsed: 9000 * ms, s: step, sharp: true, from: 7400 * ms, to: 8400 * ms, ok: true},
		// A step on a close closes nothing at once.
		{name: "a step on a close", elapsed: 5210 * ms, s: Step{At: 5200 * ms, Factor: 3}, sharp: true, from: 4200 * ms, to: 5200 * ms, ok: true},
		{name: "a step before the first close", elapsed: 650 * ms, s: Step{At: 600 * ms, Factor: 3}, sharp: true, from: 200 * ms, to: 600 * ms, ok: true},
	} {
		from, to, ok := closedAt(200*ms, tt.elapsed, tt.s, tt.sharp)
		if from != tt.from || to != tt.to || ok != tt.ok {
			t.Errorf("%s: [%v, %v) %v; want [%v, %v) %v", tt.name, from, to, ok, tt.from, tt.to, tt.ok)
		}
	}
	if slotOf(0) != 0 || slotOf(5*time.Millisecond) != 1 || slotOf(995*time.Millisecond) != 0 || slotOf(3*s+10*time.Millisecond) != 1 {
		t.Errorf("slots %d %d %d %d", slotOf(0), slotOf(5*time.Millisecond), slotOf(995*time.Millisecond), slotOf(3*s+10*time.Millisecond))
	}
}

// resolverFunc is a collector.PodResolver made of a function.
type resolverFunc func(svc service.Key, remote netip.AddrPort, claimed string) (string, bool)

func (f resolverFunc) PodAddr(svc service.Key, remote netip.AddrPort, claimed string) (string, bool) {
	return f(svc, remote, claimed)
}

// testEndpoint is an autoscaler's pod endpoint on a test server.
type testEndpoint struct {
	ep     *collector.PodEndpoint
	pushes *collector.Pushes
	addr   netip.AddrPort
	mu     sync.Mutex
	sharp  []string
	allow  atomic.Pointer[func(svc, addr string) bool]
}

func newTestEndpoint(t *testing.T, route func(service.Key) (bool, string)) *testEndpoint {
	t.Helper()
	te := &testEndpoint{pushes: collector.NewPushes(clock.RealClock{}, 0)}
	all := func(string, string) bool { return true }
	te.allow.Store(&all)
	ep, err := collector.NewPodEndpoint(collector.PodEndpointConfig{
		Pushes: te.pushes,
		Resolver: resolverFunc(func(svc service.Key, remote netip.AddrPort, claimed string) (string, bool) {
			return claimed, remote.Addr().IsLoopback() && (*te.allow.Load())(svc.String(), claimed)
		}),
		OnSharp: func(svc service.Key) {
			te.mu.Lock()
			te.sharp = append(te.sharp, svc.String())
			te.mu.Unlock()
		},
		Route: route,
	})
	if err != nil {
		t.Fatal(err)
	}
	te.ep = ep
	srv := httptest.NewServer(ep)
	t.Cleanup(func() {
		ep.Close()
		srv.Close()
	})
	te.addr = netip.MustParseAddrPort(strings.TrimPrefix(srv.URL, "http://"))
	return te
}

func (te *testEndpoint) sharps() []string {
	te.mu.Lock()
	defer te.mu.Unlock()
	return append([]string(nil), te.sharp...)
}

// recent is the latest frame of the service's pod at addr, if fresh.
func (te *testEndpoint) recent(svc, addr string) (collector.PodRecent, bool) {
	var r collector.PodRecent
	n := te.pushes.Recent(svc, []string{addr}, func(_ string, got collector.PodRecent) { r = got })
	return r, n == 1
}

// pushFleet is a fleet of two busy services of two pods each pushing to
// to, every pod's periods closed for ten seconds, and its pusher running
// until the test ends.
func pushFleet(t *testing.T, to ...netip.AddrPort) (*fleet, *pusher) {
	t.Helper()
	patterns := []Pattern{{Kind: Busy, Level: 60}, {Kind: Busy, Level: 30}}
	f, err := newFleet(patterns, 2, netip.MustParseAddr("127.1.251.1"), 9090, 0, 1, time.Now().Add(-10*time.Second).Truncate(time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	f.push = true
	p, err := newPusher(f, 0, len(f.addrs), to, "/pods", 1000, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := p.run(&stop); err != nil {
			t.Error(err)
		}
	})
	t.Cleanup(func() {
		stop.Store(true)
		wg.Wait()
	})
	return f, p
}

// waitFor polls cond until it holds or d passed.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The pods the autoscaler scraped push to its real endpoint, which takes
// their frames as their reports; a step closes a period at once and
// another 100 ms later, which shows the rise sharply.
func TestPodsPushToTheEndpoint(t *testing.T) {
	te := newTestEndpoint(t, nil)
	f, p := pushFleet(t, te.addr)
	svc0, svc1 := f.keys[0], f.keys[1]
	pod := func(i int) string { return f.addrs[i].String() }

	// Not yet scraped: no pod exists to push.
	time.Sleep(1200 * time.Millisecond)
	if n := p.dialed.Load(); n != 0 {
		t.Fatalf("%d dials before any scrape", n)
	}
	for i := range f.addrs {
		f.table.scraped[i].Store(1)
	}
	waitFor(t, 3*time.Second, "every pod pushing", func() bool { return te.ep.Pushing() == 4 && te.pushes.Len() == 4 })
	if r, ok := te.recent(svc0, pod(1)); !ok || r.Concurrency != 60 {
		t.Errorf("pod 1's frame %+v, %v; want concurrency 60", r, ok)
	}
	if r, ok := te.recent(svc1, pod(2)); !ok || r.Concurrency != 30 {
		t.Errorf("pod 2's frame %+v, %v; want concurrency 30", r, ok)
	}

	// Once a second each: in 2 s, two frames or three a pod.
	before := p.frames.Load()
	time.Sleep(2 * time.Second)
	if n := p.frames.Load() - before; n < 8 || n > 12 {
		t.Errorf("%d frames in 2 s from 4 pods", n)
	}
	if s := te.sharps(); len(s) != 0 {
		t.Errorf("sharp rises %q without a step", s)
	}

	// A step: the service's pods push at once and 100 ms later, at three
	// times the level: sharp.
	at := time.Since(f.epoch)
	f.table.setStep(0, Step{At: at, Factor: 3})
	began := time.Now()
	waitFor(t, time.Second, "a sharp rise of the stepped service", func() bool { return len(te.sharps()) > 0 })
	if d := time.Since(began); d < sharpFollow || d > sharpFollow+300*time.Millisecond {
		t.Errorf("the sharp rise came %v after the step, want just after %v", d, sharpFollow)
	}
	if s := te.sharps(); s[0] != svc0 {
		t.Errorf("sharp rises %q, want %s's", s, svc0)
	}
	if r, ok := te.recent(svc0, pod(0)); !ok || r.Concurrency != 180 {
		t.Errorf("the stepped pod's frame %+v, %v; want concurrency 180", r, ok)
	}

	// Closed by the autoscaler, a pod dials again and pushes on.
	te.ep.CloseWhere(func(k service.Key) bool { return k.String() == svc1 })
	waitFor(t, 4*time.Second, "the closed pods back", func() bool { return te.ep.Pushing() == 4 && p.closedBy.Load() == 2 })
}

// A pod the endpoint refuses (403) waits for its next scrape; one sent to
// another replica (307) pushes there.
func TestPushRefusedAndRedirected(t *testing.T) {
	other := newTestEndpoint(t, nil)
	f := (*fleet)(nil)
	te := newTestEndpoint(t, func(k service.Key) (bool, string) {
		if k.String() == f.keys[1] {
			return false, other.addr.String()
		}
		return true, ""
	})
	refused := func(string, string) bool { return false }
	te.allow.Store(&refused)
	var p *pusher
	f, p = pushFleet(t, te.addr)
	for i := range f.addrs {
		f.table.scraped[i].Store(1)
	}
	// svc-00001's pods go to the other replica; svc-00000's are refused.
	waitFor(t, 3*time.Second, "the redirected pods pushing", func() bool { return other.ep.Pushing() == 2 })
	waitFor(t, 3*time.Second, "the refusals", func() bool { return p.refusedN.Load() == 2 })
	if te.ep.Pushing() != 0 || p.redirects.Load() != 2 {
		t.Fatalf("%d pushing to the first, %d redirects", te.ep.Pushing(), p.redirects.Load())
	}
	// Allowed now, they wait for a scrape, then push.
	all := func(string, string) bool { return true }
	te.allow.Store(&all)
	time.Sleep(1200 * time.Millisecond)
	if n := te.ep.Pushing(); n != 0 {
		t.Fatalf("%d refused pods pushing before a scrape", n)
	}
	sec := int32(time.Since(f.epoch)/time.Second) + 1
	for i := range f.addrs {
		f.table.scraped[i].Store(sec)
	}
	waitFor(t, 3*time.Second, "the refused pods pushing once scraped", func() bool { return te.ep.Pushing() == 2 })
	// The redirected pods' frames are the other replica's.
	if _, ok := other.recent(f.keys[1], f.addrs[3].String()); !ok {
		t.Error("no frame of a redirected pod at the replica it was sent to")
	}
}

// Given several endpoints, the pods spread over them, as over a
// Service's.
func TestPodsSpreadOverEndpoints(t *testing.T) {
	a, b := newTestEndpoint(t, nil), newTestEndpoint(t, nil)
	f, _ := pushFleet(t, a.addr, b.addr)
	for i := range f.addrs {
		f.table.scraped[i].Store(1)
	}
	waitFor(t, 3*time.Second, "two pods pushing to each", func() bool { return a.ep.Pushing() == 2 && b.ep.Pushing() == 2 })
	if _, ok := b.recent(f.keys[0], f.addrs[1].String()); !ok {
		t.Error("pod 1 pushes elsewhere than to the second endpoint")
	}
}

// A pod's frame is a client's, masked, and the endpoint's websocket
// library reads it back.
func TestMaskedFrame(t *testing.T) {
	for _, n := range []int{0, 91, 125, 126, 283, 70000} {
		payload := make([]byte, n)
		for i := range payload {
			payload[i] = byte(i * 7)
		}
		b := appendMaskedFrame(nil, payload, 0xa1b2c3d4)
		if b[0] != 0x82 || b[1]&0x80 == 0 {
			t.Fatalf("%d bytes: header % x", n, b[:2])
		}
		hdr := 2 + 4
		switch {
		case n >= 1<<16:
			hdr += 8
		case n >= 126:
			hdr += 2
		}
		if len(b) != hdr+n {
			t.Fatalf("%d bytes: frame of %d", n, len(b))
		}
		key := b[hdr-4 : hdr]
		for i, c := range b[hdr:] {
			if c^key[i&3] != payload[i] {
				t.Fatalf("%d bytes: byte %d unmasks to %x, want %x", n, i, c^key[i&3], payload[i])
			}
		}
	}
	if b := appendMaskedCloseFrame(nil, websocket.CloseGoingAway, 0); b[0] != 0x88 || b[1] != 0x82 || b[6] != 0x03 || b[7] != 0xe9 {
		t.Errorf("close frame % x", b)
	}
}
