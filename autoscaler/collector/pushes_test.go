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
	if err := pushes.Push("ns/web", a.addr(), &pushed); err != nil {
		t.Fatal(err)
	}
	s := r.round(t)["ns/web"]
	if a.hits.Load() != 0 || b.hits.Load() != 1 {
		t.Fatalf("scrapes: a %d (pushed), b %d; want 0 and 1", a.hits.Load(), b.hits.Load())
	}
	if n := r.counter(t, "swell_autoscaler_pushed_reads_total", ""); n != 1 {
		t.Fatalf("%v pushed reads counted, want 1", n)
	}
	if s.Scraped != 2 || s.Sampled != 2 || !near(s.PodConcurrency, 3+2) || !near(s.PodProxiedConcurrency, 2+1) ||
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
		if err := pushes.Push("ns/big", addrs[i], &rp); err != nil {
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
		if err := pushes.Push("ns/big", addrs[i], &rp); err != nil {
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
	if err := pushes.Push("ns/other", p.addr(), &other); err != nil {
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
	if err := p.Push("ns/web", "10.0.0.1:9091", &good); err != nil {
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
		if err := p.Push(c.service, c.addr, &c.r); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Push(%q, %q, %+v) = %v, want an error containing %q", c.service, c.addr, c.r, err, c.want)
		}
	}
	j := job{pod: podID{service: "ns/web", addr: "10.0.0.1:9091"}}
	if !p.fill(&j, r.clock.Now()) || !near(j.concurrency, 1) {
		t.Fatalf("after refused pushes, the good one: %+v", j)
	}
	if err := p.Push("ns/web", "10.0.0.2:9091", &good); err != nil {
		t.Fatal(err)
	}
	p.Forget("ns/web", []string{"10.0.0.2:9091"})
	if p.Len() != 1 {
		t.Fatalf("%d pushes kept after Forget, want the one still listed", p.Len())
	}
	r.clock.Step(3 * time.Second)
	p.Forget("ns/other", nil)
	if p.Len() != 0 {
		t.Fatalf("%d pushes kept, want the stale one dropped", p.Len())
	}
}
