package stats

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// step is one line of a Tracker script: an event, or a report to check.
type step struct {
	ms   int
	op   string // start, end, pstart, pend (proxied), report
	want Report // for report: End and Period are derived from ms
}

func runScript(t *testing.T, steps []step) {
	t.Helper()
	tr := NewTracker(t0)
	prev := 0
	for i, s := range steps {
		now := at(s.ms)
		switch s.op {
		case "start":
			tr.Start(now, false)
		case "pstart":
			tr.Start(now, true)
		case "end":
			tr.End(now, false)
		case "pend":
			tr.End(now, true)
		case "report":
			want := s.want
			want.End = now
			want.Period = time.Duration(s.ms-prev) * time.Millisecond
			prev = s.ms
			if got := tr.Report(now); !sameReport(got, want) {
				t.Errorf("step %d, report at %dms:\n got %+v\nwant %+v", i, s.ms, got, want)
			}
		default:
			t.Fatalf("step %d: unknown op %q", i, s.op)
		}
	}
}

func TestTracker(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"idle", []step{
			{ms: 1000, op: "report", want: Report{}},
		}},
		{"four held across the whole period", []step{
			{0, "start", Report{}}, {0, "start", Report{}}, {0, "start", Report{}}, {0, "start", Report{}},
			{1000, "report", Report{Concurrency: 4, Requests: 4}},
			// Still held: the next period sees 4 too, with no new arrivals.
			{2000, "report", Report{Concurrency: 4}},
		}},
		{"held half the period", []step{
			{250, "start", Report{}},
			{750, "end", Report{}},
			{1000, "report", Report{Concurrency: 0.5, Requests: 1}},
		}},
		{"proxied split", []step{
			{0, "start", Report{}},
			{0, "pstart", Report{}},
			{0, "pstart", Report{}},
			{500, "pend", Report{}},
			{1000, "report", Report{Concurrency: 2.5, ProxiedConcurrency: 1.5, Requests: 3, ProxiedRequests: 2}},
		}},
		{"arrivals counted in the period they arrive", []step{
			{100, "start", Report{}},
			{900, "pstart", Report{}},
			{1000, "report", Report{Concurrency: 1, ProxiedConcurrency: 0.1, Requests: 2, ProxiedRequests: 1}},
			{1500, "end", Report{}},
			{1600, "pend", Report{}},
			{2000, "report", Report{Concurrency: 1.1, ProxiedConcurrency: 0.6}},
		}},
		{"boundary-spanning request", []step{
			{500, "start", Report{}},
			{1000, "report", Report{Concurrency: 0.5, Requests: 1}},
			{2000, "report", Report{Concurrency: 1}},
			{2250, "end", Report{}},
			{3000, "report", Report{Concurrency: 0.25}},
			{4000, "report", Report{}},
		}},
		{"short requests", []step{
			{0, "start", Report{}}, {10, "end", Report{}},
			{10, "start", Report{}}, {30, "end", Report{}},
			{50, "start", Report{}}, {60, "start", Report{}}, {80, "end", Report{}}, {100, "end", Report{}},
			{200, "report", Report{Concurrency: 0.5, Requests: 4}},
		}},
		{"uneven periods", []step{
			{0, "start", Report{}},
			{250, "report", Report{Concurrency: 1, Requests: 1}},
			{300, "end", Report{}},
			{2250, "report", Report{Concurrency: 0.025}},
		}},
		{"end without start is ignored", []step{
			{0, "end", Report{}},
			{0, "pend", Report{}},
			{100, "start", Report{}},
			{1000, "report", Report{Concurrency: 0.9, Requests: 1}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { runScript(t, tc.steps) })
	}
}

func TestTrackerInFlight(t *testing.T) {
	tr := NewTracker(t0)
	tr.Start(at(1), false)
	tr.Start(at(2), true)
	tr.Report(at(3))
	if got := tr.InFlight(); got != 2 {
		t.Fatalf("InFlight() = %d, want 2", got)
	}
	tr.End(at(4), true)
	if got := tr.InFlight(); got != 1 {
		t.Fatalf("InFlight() = %d, want 1", got)
	}
}

func TestTrackerClockBackwards(t *testing.T) {
	tr := NewTracker(t0)
	tr.Start(at(0), false)
	tr.Report(at(1000))
	tr.Start(at(1100), true)

	// The clock jumps back before the period start.
	r := tr.Report(at(500))
	want := Report{End: at(1000), Requests: 1, ProxiedRequests: 1}
	if !sameReport(r, want) {
		t.Fatalf("report with now before the period start:\n got %+v\nwant %+v", r, want)
	}
	if err := r.Validate(); err != nil {
		t.Fatalf("report with now before the period start is invalid: %v", err)
	}

	// The next period still starts at 1000ms and keeps the 100ms of area
	// between 1000 and 1100 that the empty report could not carry.
	r = tr.Report(at(2000))
	want = Report{End: at(2000), Period: time.Second, Concurrency: 1.9, ProxiedConcurrency: 0.9}
	if !sameReport(r, want) {
		t.Fatalf("report after the clock recovered:\n got %+v\nwant %+v", r, want)
	}
}

// TestTrackerOutOfOrder stamps events earlier than ones already recorded,
// as happens when goroutines read the clock before they reach the lock.
func TestTrackerOutOfOrder(t *testing.T) {
	tr := NewTracker(t0)
	tr.Start(at(500), false)
	tr.Start(at(400), false) // taken as 500
	tr.End(at(300), false)   // taken as 500
	r := tr.Report(at(1000))
	if r.Concurrency != 0.5 || r.Requests != 2 {
		t.Fatalf("got %+v, want concurrency 0.5 and 2 requests", r)
	}
	// An event stamped after a report that has already been taken counts in
	// the next period, and nothing comes out negative.
	tr2 := NewTracker(t0)
	tr2.Start(at(1200), false)
	r = tr2.Report(at(1000))
	if r.Concurrency != 0 || r.Requests != 1 {
		t.Fatalf("first period: %+v", r)
	}
	r = tr2.Report(at(2000))
	if r.Concurrency != 0.8 {
		t.Fatalf("second period: %+v, want concurrency 0.8", r)
	}
}

// TestTrackerConservation is a property test: for random request traces and
// random report times, the reports' Concurrency×Period add up to the total
// time requests were held, and their Requests to the number of requests;
// likewise for the proxied part. Every report is valid on the way.
func TestTrackerConservation(t *testing.T) {
	const (
		report = iota
		start
		end
	)
	type ev struct {
		at      time.Duration
		kind    int
		proxied bool
	}
	for seed := uint64(1); seed <= 200; seed++ {
		rng := rand.New(rand.NewPCG(seed, 42))
		var evs []ev
		var held, proxiedHeld time.Duration
		nReq := 1 + rng.IntN(50)
		var nProxied uint64
		for range nReq {
			s := time.Duration(rng.Int64N(int64(10 * time.Second)))
			d := time.Duration(rng.Int64N(int64(3 * time.Second)))
			p := rng.IntN(3) == 0
			evs = append(evs, ev{s, start, p}, ev{s + d, end, p})
			held += d
			if p {
				proxiedHeld += d
				nProxied++
			}
		}
		// Reports at random times, one on top of an event, and one past the
		// end of every request.
		for range 1 + rng.IntN(20) {
			evs = append(evs, ev{at: time.Duration(rng.Int64N(int64(13 * time.Second)))})
		}
		evs = append(evs, ev{at: evs[rng.IntN(len(evs))].at}, ev{at: 14 * time.Second})
		// A stable sort keeps each request's start before its end, even for
		// zero-length requests.
		slices.SortStableFunc(evs, func(a, b ev) int { return cmp.Compare(a.at, b.at) })

		tr := NewTracker(t0)
		var area, proxiedArea float64
		var reqs, proxiedReqs uint64
		for _, e := range evs {
			now := t0.Add(e.at)
			switch e.kind {
			case start:
				tr.Start(now, e.proxied)
			case end:
				tr.End(now, e.proxied)
			case report:
				r := tr.Report(now)
				if err := r.Validate(); err != nil {
					t.Fatalf("seed %d: invalid report %+v: %v", seed, r, err)
				}
				area += r.Concurrency * r.Period.Seconds()
				proxiedArea += r.ProxiedConcurrency * r.Period.Seconds()
				reqs += r.Requests
				proxiedReqs += r.ProxiedRequests
			}
		}
		if !approxEqual(area, held.Seconds()) || !approxEqual(proxiedArea, proxiedHeld.Seconds()) {
			t.Errorf("seed %d: reports add up to %.9fs held (%.9fs proxied), requests were held %.9fs (%.9fs)",
				seed, area, proxiedArea, held.Seconds(), proxiedHeld.Seconds())
		}
		if reqs != uint64(nReq) || proxiedReqs != nProxied {
			t.Errorf("seed %d: reports count %d requests (%d proxied), want %d (%d)", seed, reqs, proxiedReqs, nReq, nProxied)
		}
		if tr.InFlight() != 0 {
			t.Errorf("seed %d: %d requests still in flight", seed, tr.InFlight())
		}
	}
}

// approxEqual allows for the float rounding of Concurrency×Period.
func approxEqual(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// TestTrackerConcurrent hammers one Tracker from many goroutines (run with
// -race) at fixed timestamps, so the exact figures are known regardless of
// interleaving.
func TestTrackerConcurrent(t *testing.T) {
	const goroutines, perG = 16, 500
	tr := NewTracker(t0)
	run := func(f func(proxied bool)) {
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range perG {
					f(g%2 == 0)
				}
			}()
		}
		wg.Wait()
	}
	const n = goroutines * perG
	run(func(p bool) { tr.Start(at(0), p) })
	if r := tr.Report(at(1000)); r.Concurrency != n || r.ProxiedConcurrency != n/2 || r.Requests != n || r.ProxiedRequests != n/2 {
		t.Fatalf("after concurrent starts: %+v", r)
	}
	// Ends at 500ms into the next period, while reports run alongside: each
	// report closes a period, but the total over them is fixed.
	var wg sync.WaitGroup
	wg.Add(1)
	var mid []Report
	go func() {
		defer wg.Done()
		for range 100 {
			mid = append(mid, tr.Report(at(1500)))
		}
	}()
	run(func(p bool) { tr.End(at(1500), p) })
	wg.Wait()
	last := tr.Report(at(2000))
	var area float64
	for _, r := range append(mid, last) {
		area += r.Concurrency * r.Period.Seconds()
	}
	if !approxEqual(area, n*0.5) || tr.InFlight() != 0 {
		t.Fatalf("concurrent ends: %.6f request-seconds held, want %v; %d in flight", area, n*0.5, tr.InFlight())
	}
}

// The Tracker benchmarks pass a fixed time: the caller's clock read is not
// the Tracker's cost. Each op is one proxied request (Start and End).
func BenchmarkTrackerStartEnd(b *testing.B) {
	tr := NewTracker(t0)
	now := at(1)
	b.ReportAllocs()
	for b.Loop() {
		tr.Start(now, true)
		tr.End(now, true)
	}
}

func BenchmarkTrackerStartEndParallel(b *testing.B) {
	tr := NewTracker(t0)
	now := at(1)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tr.Start(now, true)
			tr.End(now, true)
		}
	})
}

// BenchmarkTrackerStartEndParallelNow is the queue-proxy's real hot path,
// clock reads included, with a report every 10000 requests.
func BenchmarkTrackerStartEndParallelNow(b *testing.B) {
	tr := NewTracker(time.Now())
	var n atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tr.Start(time.Now(), false)
			tr.End(time.Now(), false)
			if n.Add(1)%10000 == 0 {
				tr.Report(time.Now())
			}
		}
	})
}

// TestTrackerSharesByActivator: requests from activators that named
// themselves are counted in their shares, within the proxied figures; a
// share lives while it holds a request; past MaxActivatorShares, or
// unnamed, a request counts as proxied in no share.
func TestTrackerSharesByActivator(t *testing.T) {
	tr := NewTracker(t0)
	a, b := ActivatorKey("activator-a"), ActivatorKey("activator-b")
	if !tr.StartFrom(at(0), a) || !tr.StartFrom(at(500), b) || tr.StartFrom(at(500), 0) {
		t.Fatal("StartFrom counted a named request in no share, or an unnamed one in one")
	}
	tr.EndFrom(at(750), b)
	tr.End(at(750), true)
	r := tr.Report(at(1000))
	want := Report{End: at(1000), Period: time.Second, Concurrency: 1.5, ProxiedConcurrency: 1.5, Requests: 3, ProxiedRequests: 3,
		ByActivator: []ActivatorShare{{Activator: a, Concurrency: 1, Requests: 1}, {Activator: b, Concurrency: 0.25, Requests: 1}}}
	if !sameReport(r, want) {
		t.Fatalf("report\n got %+v\nwant %+v", r, want)
	}
	r.Attributed = true
	if err := r.Validate(); err != nil {
		t.Fatalf("the tracker's report does not validate: %v", err)
	}

	// b held nothing at the report: its share is gone, and a's stays.
	r = tr.Report(at(2000))
	if len(r.ByActivator) != 1 || r.ByActivator[0] != (ActivatorShare{Activator: a, Concurrency: 1}) {
		t.Fatalf("second period's shares %+v, want a's alone, holding 1", r.ByActivator)
	}
	tr.EndFrom(at(2000), a)
	if r := tr.Report(at(3000)); len(r.ByActivator) != 0 {
		t.Fatalf("shares after every request left: %+v", r.ByActivator)
	}

	// Every share taken: the next activator's requests are proxied, in
	// no share.
	for i := range MaxActivatorShares {
		if !tr.StartFrom(at(3000), ActivatorKey(fmt.Sprint("activator-", i))) {
			t.Fatalf("activator %d found no share", i)
		}
	}
	if tr.StartFrom(at(3000), ActivatorKey("one-too-many")) {
		t.Fatal("a share past MaxActivatorShares")
	}
	r = tr.Report(at(4000))
	if len(r.ByActivator) != MaxActivatorShares || r.ProxiedConcurrency != MaxActivatorShares+1 {
		t.Fatalf("%d shares, proxied %v; want %d shares and every request proxied", len(r.ByActivator), r.ProxiedConcurrency, MaxActivatorShares)
	}
}
