package collector

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/swell-run/swell/pkg/stats"
)

// A pod that pushed within the freshness is read from its push and not
// scraped; the others are scraped as before; a pod whose pushes stopped is
// scraped again once its last push is stale.
func TestPushedPodsAreNotScraped(t *testing.T) {
	var pushes *Pushes
	r := newRig(t, func(c *Config) {
		c.Sampling = &Sampling{} // every pod: the sums are exact
		pushes = NewPushes(c.Clock, 0)
		c.Pushes = pushes
	})
	a := newFakePod(t, rep(100, 0, 1000, 0)) // what a scrape of a would say
	b := newFakePod(t, rep(3, 1, 30, 10))
	r.pods.Set("ns/web", a.addr(), b.addr())

	pushed := rep(5, 2, 50, 20)
	if _, err := pushes.Push("ns/web", a.addr(), &pushed); err != nil {
		t.Fatal(err)
	}
	s := r.round(t)["ns/web"]
	if a.hits.Load() != 0 || b.hits.Load() != 1 {
		t.Fatalf("scrapes: a %d (pushed), b %d; want 0 and 1", a.hits.Load(), b.hits.Load())
	}
	if n := r.counter(t, "swell_autoscaler_pushed_reads_total", ""); n != 1 {
		t.Fatalf("%v pushed reads counted, want 1", n)
	}
	if s.Scraped != 2 || s.Sampled != 2 || s.Pushed != 1 || !near(s.PodConcurrency, 3+2) || !near(s.PodProxiedConcurrency, 2+1) ||
		!near(s.PodRPS, 30+20) || !near(s.PodProxiedRPS, 20+10) {
		t.Fatalf("sample %+v: want a's push and b's scrape", s)
	}

	// One second later the push still stands; at three it is stale.
	r.round(t)
	if a.hits.Load() != 0 {
		t.Fatalf("a scraped %d times within its push's freshness", a.hits.Load())
	}
	r.clock.Step(time.Second)
	s = r.round(t)["ns/web"]
	if a.hits.Load() != 1 || !near(s.PodConcurrency, 100+2) {
		t.Fatalf("a stale push: a scraped %d times, pod concurrency %v; want it scraped, 102", a.hits.Load(), s.PodConcurrency)
	}
}

// With a sample smaller than the pods, every pod that pushed is in it and
// the rest of it is drawn from the others: a service whose pods all push
// has every pod's figures every round, and no scrape.
func TestPushesFillTheSample(t *testing.T) {
	const N = 40
	var pushes *Pushes
	r := newRig(t, func(c *Config) {
		pushes = NewPushes(c.Clock, 0)
		c.Pushes = pushes
	})
	pods := make([]*fakePod, N)
	addrs := make([]string, N)
	for i := range pods {
		pods[i] = newFakePod(t, rep(1, 0, 10, 0))
		addrs[i] = pods[i].addr()
	}
	r.pods.Set("ns/big", addrs...)
	n := DefaultSampling.Size(N)

	// Half of them push, loads that tell them apart.
	for i := range N / 2 {
		rp := rep(float64(uint64(1)<<(i+8)), 0, 0, 0)
		if _, err := pushes.Push("ns/big", addrs[i], &rp); err != nil {
			t.Fatal(err)
		}
	}
	s := r.round(t)["ns/big"]
	if s.Sampled != N/2 || s.Scraped != N/2 {
		t.Fatalf("%d sampled, %d read; want the %d that pushed (the sample of %d is full)", s.Sampled, s.Scraped, N/2, n)
	}
	var hits int64
	for _, p := range pods {
		hits += p.hits.Load()
	}
	if hits != 0 {
		t.Fatalf("%d scrapes, want none: the pushes fill the sample", hits)
	}
	want := 0.0
	for i := range N / 2 {
		want += float64(uint64(1) << (i + 8))
	}
	if got := s.PodConcurrency * float64(N/2) / N; math.Abs(got-want) > 1e-6*want {
		t.Fatalf("the pushed pods' sum %v, want %v", got, want)
	}

	// Every pod pushes: all of them, every round.
	for i := range N {
		rp := rep(1, 0, 10, 0)
		if _, err := pushes.Push("ns/big", addrs[i], &rp); err != nil {
			t.Fatal(err)
		}
	}
	s = r.round(t)["ns/big"]
	if s.Sampled != N || s.Scraped != N || !near(s.PodConcurrency, N) || !near(s.PodRPS, 10*N) {
		t.Fatalf("every pod pushing: %+v, want all %d exactly", s, N)
	}
}

// A push is kept under its service: the same address pushing for another
// service is another pod (an address reused after a pod left), and is
// not read for this one.
func TestPushesKeptByService(t *testing.T) {
	var pushes *Pushes
	r := newRig(t, func(c *Config) {
		c.Sampling = &Sampling{}
		pushes = NewPushes(c.Clock, 0)
		c.Pushes = pushes
	})
	p := newFakePod(t, rep(2, 0, 20, 0))
	r.pods.Set("ns/web", p.addr())
	other := rep(50, 0, 500, 0)
	if _, err := pushes.Push("ns/other", p.addr(), &other); err != nil {
		t.Fatal(err)
	}
	if s := r.round(t)["ns/web"]; p.hits.Load() != 1 || !near(s.PodConcurrency, 2) {
		t.Fatalf("scraped %d times, concurrency %v: another service's push was read", p.hits.Load(), s.PodConcurrency)
	}
}

// A report that does not validate is refused and changes nothing; so is
// a push without a service or an address. Forget drops what left.
func TestPushValidates(t *testing.T) {
	r := newRig(t, nil)
	p := NewPushes(r.clock, 0)
	good := rep(1, 0, 10, 0)
	if _, err := p.Push("ns/web", "10.0.0.1:9091", &good); err != nil {
		t.Fatal(err)
	}
	bad := rep(1, 2, 10, 0) // more proxied than in all
	for _, c := range []struct {
		service, addr string
		r             stats.Report
		want          string
	}{
		{"ns/web", "10.0.0.1:9091", bad, "push from 10.0.0.1:9091 of ns/web"},
		{"", "10.0.0.1:9091", good, "a service"},
		{"ns/web", "", good, "an address"},
		{"ns/web", "10.0.0.1:9091", stats.Report{Period: -time.Second}, "push from"},
	} {
		if _, err := p.Push(c.service, c.addr, &c.r); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Push(%q, %q, %+v) = %v, want an error containing %q", c.service, c.addr, c.r, err, c.want)
		}
	}
	j := job{pod: podID{service: "ns/web", addr: "10.0.0.1:9091"}}
	if !p.fill(&j, r.clock.Now()) || !near(j.concurrency, 1) {
		t.Fatalf("after refused pushes, the good one: %+v", j)
	}
	if _, err := p.Push("ns/web", "10.0.0.2:9091", &good); err != nil {
		t.Fatal(err)
	}
	p.Forget("ns/web", []string{"10.0.0.2:9091"})
	if p.Len() != 1 {
		t.Fatalf("%d pushes kept after Forget, want the one still listed", p.Len())
	}
	r.clock.Step(3 * time.Second)
	p.Sweep()
	if p.Len() != 0 {
		t.Fatalf("%d pushes kept, want the stale one swept", p.Len())
	}
}

// The periods a pod pushed between two rounds are merged, weighted by
// their lengths, so a frame pushed early (a sharp change) loses none of
// the second's requests; a round's read starts them anew, and a round
// with nothing new reads the last again, as a scrape would.
func TestPushesMergeBetweenRounds(t *testing.T) {
	clk := newRig(t, nil).clock
	p := NewPushes(clk, 0)
	push := func(r stats.Report) {
		t.Helper()
		if _, err := p.Push("ns/web", "a", &r); err != nil {
			t.Fatal(err)
		}
	}
	short := func(conc, proxied float64, reqs, preqs uint64, d time.Duration) stats.Report {
		r := rep(conc, proxied, reqs, preqs)
		r.Period = d
		r.Attributed = true
		if preqs > 0 {
			r.ByActivator = []stats.ActivatorShare{{Activator: 7, Concurrency: proxied, Requests: preqs}}
		}
		return r
	}
	push(short(2, 0, 8, 0, 800*time.Millisecond))
	push(short(10, 4, 2, 2, 200*time.Millisecond))
	read := func() job {
		j := job{pod: podID{service: "ns/web", addr: "a"}}
		if !p.fill(&j, clk.Now()) {
			t.Fatal("no fresh push read")
		}
		return j
	}
	j := read()
	// Own: 2 over 0.8 s and 6 over 0.2 s; 8 requests then none of its own.
	if !near(j.concurrency, 2*0.8+6*0.2) || !near(j.rps, 8) || !near(j.proxiedConcurrency, 4*0.2) || !near(j.proxiedRPS, 2) {
		t.Fatalf("merged figures %+v, want the second's", j.figures)
	}
	if j.nshares != 1 || !near(j.shares[0].concurrency, 4*0.2) || !near(j.shares[0].rps, 2) {
		t.Fatalf("merged shares %+v, want activator 7's over the second", j.shares[:j.nshares])
	}
	if again := read(); !near(again.concurrency, j.concurrency) {
		t.Fatalf("a second read with nothing new: %v, want the last figures again", again.concurrency)
	}
	push(short(1, 0, 1, 0, time.Second))
	if j := read(); !near(j.concurrency, 1) || !near(j.rps, 1) {
		t.Fatalf("after a read, a new push: %+v, want it alone", j.figures)
	}
}

// A push is sharp when the pod's concurrency at least doubled since its
// previous push, by at least one request; Recent gives each fresh pod's
// latest frame.
func TestPushSharp(t *testing.T) {
	clk := newRig(t, nil).clock
	p := NewPushes(clk, 0)
	steps := []struct {
		conc  float64
		sharp bool
	}{
		{0, false},   // a first push is nothing to compare
		{0.5, false}, // up from none, by less than a request
		{3, true},
		{5, false}, // not doubled
		{10, true},
		{4, false}, // down
	}
	for _, st := range steps {
		r := rep(st.conc, 0, 0, 0)
		sharp, err := p.Push("ns/web", "a", &r)
		if err != nil || sharp != st.sharp {
			t.Fatalf("push of %v: sharp %t, %v; want %t", st.conc, sharp, err, st.sharp)
		}
	}
	r := rep(6, 2, 30, 10)
	if _, err := p.Push("ns/web", "b", &r); err != nil {
		t.Fatal(err)
	}
	got := map[string]PodRecent{}
	n := p.Recent("ns/web", []string{"a", "b", "c"}, func(addr string, r PodRecent) { got[addr] = r })
	if n != 2 || got["a"].Total != 4 || got["b"] != (PodRecent{Concurrency: 4, RPS: 20, ProxiedRPS: 10, Total: 6, At: clk.Now()}) {
		t.Fatalf("Recent: %d pods %+v", n, got)
	}
	clk.Step(3 * time.Second)
	if n := p.Recent("ns/web", []string{"a", "b"}, func(string, PodRecent) {}); n != 0 {
		t.Fatalf("Recent after the pushes went stale: %d pods", n)
	}
	// Stale, the previous push is no reference: a pod that comes back
	// busy after a gap is not sharp by it.
	r = rep(50, 0, 0, 0)
	if sharp, _ := p.Push("ns/web", "a", &r); sharp {
		t.Fatal("a push after a stale one counted sharp")
	}
}
