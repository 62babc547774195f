package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/swell-run/swell/local"
	"github.com/swell-run/swell/local/config"
)

func TestConfigIsValidSwellYAML(t *testing.T) {
	svcs := makeServices(12, 2)
	var b strings.Builder
	if err := writeConfig(&b, svcs, "/soak dir/bin/swell"); err != nil {
		t.Fatal(err)
	}
	f, err := config.Parse("swell.yaml", []byte(b.String()))
	if err != nil {
		t.Fatalf("the soak's swell.yaml does not parse: %v\n%s", err, b.String())
	}
	if len(f.Services) != len(svcs) {
		t.Fatalf("%d services parsed, want %d", len(f.Services), len(svcs))
	}
	if !f.Defaults.AllowZeroInitialScale || f.Defaults.ScaleToZeroGracePeriod != graceToZero {
		t.Errorf("defaults: allow zero initial scale %v, grace %s", f.Defaults.AllowZeroInitialScale, f.Defaults.ScaleToZeroGracePeriod)
	}
	for i, s := range f.Services {
		want := svcs[i]
		if s.Name != want.name || !slices.Equal(s.Command, []string{"/soak dir/bin/swell", "hello"}) {
			t.Errorf("service %d: %s %q", i, s.Name, s.Command)
		}
		sp := s.Spec
		lo, hi, initial := 0, maxScale, 0
		if want.pinned {
			lo, hi, initial = 1, 1, 1
		}
		if sp.MinScale != lo || sp.MaxScale != hi || sp.InitialScale != initial {
			t.Errorf("%s: min %d max %d initial %d, want %d %d %d", s.Name, sp.MinScale, sp.MaxScale, sp.InitialScale, lo, hi, initial)
		}
		if sp.StableWindow != window || string(sp.Metric) != want.metric || s.ContainerConcurrency != want.containerConcurrency {
			t.Errorf("%s: window %s metric %s cc %d", s.Name, sp.StableWindow, sp.Metric, s.ContainerConcurrency)
		}
	}
}

func TestPlan(t *testing.T) {
	const total, maxRate = 30 * time.Minute, 200
	svcs := makeServices(30, 3)
	plan := makePlan(svcs, total, 7, maxRate)
	if !slices.EqualFunc(plan, makePlan(svcs, total, 7, maxRate), func(a, b burst) bool { return a == b }) {
		t.Fatal("the same seed made two plans")
	}
	if slices.EqualFunc(plan, makePlan(svcs, total, 8, maxRate), func(a, b burst) bool { return a == b }) {
		t.Fatal("two seeds made the same plan")
	}

	half := total / 2
	var first, second []burst
	by := map[int][]burst{}
	for _, b := range plan {
		if b.until-b.start < minBurst || b.rate < 1 {
			t.Errorf("burst %+v: shorter than %s or slower than 1/s", b, minBurst)
		}
		if b.sleep > 0 && b.rate*b.sleep.Seconds() > maxInFlight+0.1 {
			t.Errorf("burst %+v: about %.1f in flight, more than %d", b, b.rate*b.sleep.Seconds(), maxInFlight)
		}
		switch {
		case b.until <= half:
			first = append(first, b)
		case b.start >= half && b.until <= total:
			second = append(second, b)
		default:
			t.Errorf("burst %+v straddles the half or ends after the run", b)
		}
		by[b.service] = append(by[b.service], b)
	}
	// The second half is the first again.
	if len(first) != len(second) {
		t.Fatalf("%d bursts in the first half, %d in the second", len(first), len(second))
	}
	for i := range first {
		b := first[i]
		b.start, b.until = b.start+half, b.until+half
		if !slices.Contains(second, b) {
			t.Errorf("burst %+v of the first half is not replayed", first[i])
		}
	}
	// Every service is sent traffic, and its bursts follow one another
	// with gaps; most gaps are long enough to reach zero. (Across the
	// half, where the replay begins, a gap may be shorter.)
	zeroGaps := 0
	for i := range svcs {
		bs := by[i]
		if len(bs) < 2 {
			t.Errorf("service %d: %d bursts", i, len(bs))
		}
		for k := 1; k < len(bs); k++ {
			if bs[k-1].until <= half && bs[k].start >= half {
				continue
			}
			gap := bs[k].start - bs[k-1].until
			if gap < shortGapMin {
				t.Errorf("service %d: bursts %+v and %+v %s apart, less than %s", i, bs[k-1], bs[k], gap, shortGapMin)
			}
			if gap >= zeroGapMin {
				zeroGaps++
			}
		}
	}
	// Besides, every round begins with every service at zero.
	if zeroGaps < 6*len(svcs) {
		t.Errorf("%d gaps long enough to reach zero, want at least 6 a service", zeroGaps)
	}
	// The rate is bounded at every moment.
	for _, b := range plan {
		if p := peakRate(plan, b.start, b.until); p > maxRate+1e-9 {
			t.Errorf("%.1f requests/s during %+v, more than %d", p, b, maxRate)
		}
	}
	if s := statsOf(plan, total); s.peak > maxRate+1e-9 || s.mean < 20 || s.bursts != len(plan) {
		t.Errorf("stats %+v: peak above %d, or hardly any traffic", s, maxRate)
	}
}

func TestShortPlanSendsToEveryService(t *testing.T) {
	svcs := makeServices(5, 1)
	plan := makePlan(svcs, 20*time.Second, 1, 200)
	seen := map[int]int{}
	for _, b := range plan {
		seen[b.service]++
	}
	for i := range svcs {
		if seen[i] != 2 {
			t.Errorf("service %d: %d bursts in a 20s run, want one in each half", i, seen[i])
		}
	}
}

func TestPeakRate(t *testing.T) {
	s := time.Second
	plan := []burst{
		{start: 0, until: 10 * s, rate: 5},
		{start: 5 * s, until: 15 * s, rate: 7},
		{start: 10 * s, until: 20 * s, rate: 11},
	}
	for _, c := range []struct {
		from, to time.Duration
		want     float64
	}{
		{0, 5 * s, 5},
		{0, 6 * s, 12},
		{10 * s, 11 * s, 18},  // the first has ended at 10s
		{15 * s, 30 * s, 11},  // only the last
		{20 * s, 30 * s, 0},   // nothing
		{-5 * s, 100 * s, 18}, // the busiest moment
	} {
		if got := peakRate(plan, c.from, c.to); got != c.want {
			t.Errorf("peakRate(%s, %s) = %g, want %g", c.from, c.to, got, c.want)
		}
	}
}

func TestBurstQuery(t *testing.T) {
	for _, c := range []struct {
		b    burst
		want string
	}{
		{burst{}, ""},
		{burst{sleep: 300 * time.Millisecond}, "?sleep=300ms"},
		{burst{size: 1024}, "?size=1024"},
		{burst{sleep: 2 * time.Second, size: 65536}, "?sleep=2000ms&size=65536"},
	} {
		if got := c.b.query(); got != c.want {
			t.Errorf("%+v: query %q, want %q", c.b, got, c.want)
		}
	}
}

func TestRounds(t *testing.T) {
	for _, c := range []struct{ total, round, quiet time.Duration }{
		{30 * time.Minute, 5 * time.Minute, 150 * time.Second},
		{time.Hour, 5 * time.Minute, 150 * time.Second},
		{20 * time.Minute, 5 * time.Minute, 150 * time.Second},
		{14 * time.Minute, 7 * time.Minute, 150 * time.Second},
		{4 * time.Minute, 2 * time.Minute, time.Minute},
		{20 * time.Second, 10 * time.Second, 5 * time.Second},
	} {
		round, quiet := rounds(c.total)
		if round != c.round || quiet != c.quiet {
			t.Errorf("rounds(%s) = %s, %s; want %s, %s", c.total, round, quiet, c.round, c.quiet)
		}
	}
}

func TestRoundsEndQuiet(t *testing.T) {
	const total = 30 * time.Minute
	plan := makePlan(makeServices(30, 3), total, 3, 200)
	round, quiet := rounds(total)
	for end := round; end <= total; end += round {
		for _, b := range plan {
			if b.until > end-quiet && b.start < end+roundOffset {
				t.Errorf("burst %+v in the quiet before %s or the moment after", b, end)
			}
		}
	}
}

func TestSampleTimes(t *testing.T) {
	got := sampleTimes(30*time.Minute, time.Minute)
	if len(got) != 30 || got[0].at != time.Minute || got[29].at != 30*time.Minute {
		t.Fatalf("%d samples from %v to %v, want 30 from 1m to 30m", len(got), got[0], got[len(got)-1])
	}
	var ends []time.Duration
	for _, s := range got {
		if s.roundEnd {
			ends = append(ends, s.at)
		}
	}
	if want := []time.Duration{5, 10, 15, 20, 25, 30}; len(ends) != len(want) || ends[0] != 5*time.Minute || ends[5] != 30*time.Minute {
		t.Errorf("round ends at %v, want every 5 minutes", ends)
	}
	// An interval that misses the rounds' ends still samples them.
	got = sampleTimes(30*time.Minute, 7*time.Minute)
	var at []time.Duration
	for _, s := range got {
		at = append(at, s.at)
	}
	want := []time.Duration{5, 7, 10, 14, 15, 20, 21, 25, 28, 30}
	for i := range want {
		want[i] *= time.Minute
	}
	if !slices.Equal(at, want) {
		t.Errorf("samples at %v, want %v", at, want)
	}
}

func TestAtRest(t *testing.T) {
	svcs := makeServices(3, 1) // s1 pinned
	svc := func(name string, desired, ready, replicas int) local.ServiceStatus {
		return local.ServiceStatus{Name: name, Desired: desired, Ready: ready, Replicas: make([]local.ReplicaStatus, replicas)}
	}
	for _, c := range []struct {
		name string
		st   local.Status
		want bool
	}{
		{"as at the start", local.Status{Services: []local.ServiceStatus{svc("s1", 1, 1, 1), svc("s2", 0, 0, 0), svc("s3", 0, 0, 0)}}, true},
		{"a replica still stopping", local.Status{Services: []local.ServiceStatus{svc("s1", 1, 1, 1), svc("s2", 0, 0, 1), svc("s3", 0, 0, 0)}}, false},
		{"a service still wanting one", local.Status{Services: []local.ServiceStatus{svc("s1", 1, 1, 1), svc("s2", 1, 0, 0), svc("s3", 0, 0, 0)}}, false},
		{"the pinned one not ready", local.Status{Services: []local.ServiceStatus{svc("s1", 1, 0, 1), svc("s2", 0, 0, 0), svc("s3", 0, 0, 0)}}, false},
		{"a service missing", local.Status{Services: []local.ServiceStatus{svc("s1", 1, 1, 1), svc("s2", 0, 0, 0)}}, false},
	} {
		if got := atRest(c.st, svcs); got != c.want {
			t.Errorf("%s: atRest = %v, want %v", c.name, got, c.want)
		}
	}
}
