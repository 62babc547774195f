package engine

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swell-run/swell/autoscaler/decider"
	"github.com/swell-run/swell/pkg/autoscaling"
	"github.com/swell-run/swell/pkg/service"
)

// t0 is a whole second; tests record a second's sample at that second and
// decide half a second later, as the autoscaler's loop does.
var t0 = time.Unix(1_800_000_000, 0)

func sec(s int) time.Time          { return t0.Add(time.Duration(s) * time.Second) }
func mid(s int) time.Time          { return sec(s).Add(500 * time.Millisecond) }
func near(a, b float64) bool       { return math.Abs(a-b) <= 1e-6*math.Max(1, math.Abs(b)) }
func key(name string) service.Key  { return service.Key{Namespace: "default", Name: name} }
func conc(s int, c float64) Sample { return Sample{Time: sec(s), Concurrency: c} }

// spec parses annotations written without the prefix, as a user would in
// `swell sim` flags; a bad one fails the test.
func spec(t testing.TB, kv ...string) autoscaling.Spec {
	t.Helper()
	ann := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		ann[autoscaling.Prefix+kv[i]] = kv[i+1]
	}
	s, err := autoscaling.Parse(ann, 0, autoscaling.DefaultDefaults())
	if err != nil {
		t.Fatalf("spec %v: %v", kv, err)
	}
	return s
}

func mustDecide(t testing.TB, e *Engine, k service.Key, in Inputs) decider.Decision {
	t.Helper()
	d, ok := e.Decide(k, in)
	if !ok {
		t.Fatalf("Decide(%s): unknown service", k)
	}
	return d
}

func TestUnknownServices(t *testing.T) {
	e := New()
	if e.Record(key("nope"), conc(0, 1)) {
		t.Fatal("Record for an unknown service reported true")
	}
	if _, ok := e.Decide(key("nope"), Inputs{Now: mid(0)}); ok {
		t.Fatal("Decide for an unknown service reported ok")
	}
	if _, ok := e.Spec(key("nope")); ok {
		t.Fatal("Spec for an unknown service reported ok")
	}
	if _, ok := e.LastSample(key("nope")); ok {
		t.Fatal("LastSample for an unknown service reported ok")
	}
	e.Remove(key("nope")) // no-op
}

func TestRecordPicksTheSpecsMetric(t *testing.T) {
	e := New()
	e.Upsert(key("c"), spec(t), sec(0), 0)
	e.Upsert(key("r"), spec(t, "metric", "rps"), sec(0), 0)
	s := Sample{Time: sec(0), Concurrency: 35, RPS: 410}
	for _, k := range []service.Key{key("c"), key("r")} {
		if !e.Record(k, s) {
			t.Fatalf("Record(%s) = false", k)
		}
	}
	if d := mustDecide(t, e, key("c"), Inputs{Now: mid(0)}); !near(d.Stable, 35) || !near(d.Panic, 35) {
		t.Errorf("concurrency service observed stable %v panic %v, want 35", d.Stable, d.Panic)
	}
	if d := mustDecide(t, e, key("r"), Inputs{Now: mid(0)}); !near(d.Stable, 410) || !near(d.Panic, 410) {
		t.Errorf("rps service observed stable %v panic %v, want 410", d.Stable, d.Panic)
	}
}

func TestSamplesOfOneSecondAddUp(t *testing.T) {
	e := New()
	e.Upsert(key("a"), spec(t), sec(0), 0)
	// Pods and an activator report the same second separately.
	e.Record(key("a"), Sample{Time: sec(0), Concurrency: 20, RPS: 100})
	e.Record(key("a"), Sample{Time: sec(0).Add(300 * time.Millisecond), Concurrency: 5, RPS: 30})
	d := mustDecide(t, e, key("a"), Inputs{Now: mid(0)})
	if !near(d.Stable, 25) {
		t.Errorf("stable = %v, want 25", d.Stable)
	}
	ls, ok := e.LastSample(key("a"))
	if !ok || !ls.Time.Equal(sec(0)) || !near(ls.Concurrency, 25) || !near(ls.RPS, 130) {
		t.Errorf("LastSample = %+v, %v; want second 0 with 25 and 130", ls, ok)
	}
	e.Record(key("a"), Sample{Time: sec(1), Concurrency: 7, RPS: 9})
	if ls, _ := e.LastSample(key("a")); !ls.Time.Equal(sec(1)) || ls.Concurrency != 7 || ls.RPS != 9 {
		t.Errorf("LastSample after a new second = %+v", ls)
	}
	// A late sample for an older second reaches the window, not the display.
	e.Record(key("a"), Sample{Time: sec(0), Concurrency: 1})
	if ls, _ := e.LastSample(key("a")); ls.Concurrency != 7 {
		t.Errorf("late sample changed LastSample: %+v", ls)
	}
}

func TestWindowsAreReadAtNow(t *testing.T) {
	e := New()
	e.Upsert(key("a"), spec(t), sec(0), 0) // 60s, panic window 6s
	for s := range 10 {
		e.Record(key("a"), conc(s, float64(s))) // 0, 1, ..., 9
	}
	d := mustDecide(t, e, key("a"), Inputs{Now: mid(9)})
	if !near(d.Stable, 4.5) || !near(d.Panic, 6.5) {
		t.Errorf("at 9.5s: stable %v panic %v, want 4.5 and 6.5", d.Stable, d.Panic)
	}
	// Seconds not recorded yet after the last record are unknown, not zero:
	// at 11.5 the panic window is seconds 6-11, of which 6-9 are known.
	d = mustDecide(t, e, key("a"), Inputs{Now: mid(11)})
	if !near(d.Panic, 7.5) {
		t.Errorf("at 11.5s with nothing since 9s: panic %v, want 7.5 (unknown seconds left out)", d.Panic)
	}
}

func TestExponentialAveraging(t *testing.T) {
	e := New()
	e.Upsert(key("lin"), spec(t), sec(0), 0)
	e.Upsert(key("exp"), spec(t, "window-averaging", "exponential"), sec(0), 0)
	for s := range 60 {
		v := 0.0
		if s >= 50 {
			v = 100
		}
		e.Record(key("lin"), conc(s, v))
		e.Record(key("exp"), conc(s, v))
	}
	lin := mustDecide(t, e, key("lin"), Inputs{Now: mid(59), Ready: 1})
	exp := mustDecide(t, e, key("exp"), Inputs{Now: mid(59), Ready: 1})
	// The last 10 of 60 seconds at 100: linear reads 16.7; exponential
	// weighs the recent seconds more.
	if !near(lin.Stable, 100.0/6) {
		t.Errorf("linear stable = %v, want %v", lin.Stable, 100.0/6)
	}
	if !(exp.Stable > lin.Stable) {
		t.Errorf("exponential stable %v not above linear %v after a recent rise", exp.Stable, lin.Stable)
	}
}

func TestNoDataHolds(t *testing.T) {
	e := New()
	e.Upsert(key("new"), spec(t), sec(0), 0)
	e.Resume(key("restarted"), spec(t), sec(0), 3)
	e.Resume(key("at-zero"), spec(t), sec(0), 0)

	// Before the first sample: a new service holds its initial scale, a
	// resumed one what it had — at zero too.
	for _, c := range []struct {
		name  string
		ready int
		want  int
	}{{"new", 0, 1}, {"restarted", 3, 3}, {"at-zero", 0, 0}} {
		d := mustDecide(t, e, key(c.name), Inputs{Now: mid(0), Ready: c.ready, ActivatorInPath: true})
		if d.Scale != c.want || (c.want > 0 && !strings.HasPrefix(d.Reason, "no data")) {
			t.Errorf("%s without samples: %+v, want a no-data hold at %d", c.name, d, c.want)
		}
	}

	// One sample is data; a whole stable window without one is not.
	e.Record(key("restarted"), conc(1, 350))
	d := mustDecide(t, e, key("restarted"), Inputs{Now: mid(1), Ready: 3})
	if strings.HasPrefix(d.Reason, "no data") || d.Scale < 5 {
		t.Fatalf("with a sample of 350: %+v, want at least 5 pods", d)
	}
	held := d.Scale
	if d := mustDecide(t, e, key("restarted"), Inputs{Now: mid(70), Ready: held}); !strings.HasPrefix(d.Reason, "no data") || d.Scale != held {
		t.Fatalf("a stable window after the last sample: %+v, want a no-data hold at %d", d, held)
	}
}

func TestPokeDecidesWithoutData(t *testing.T) {
	e := New()
	e.Resume(key("a"), spec(t), sec(0), 0) // at zero before a restart
	if d := mustDecide(t, e, key("a"), Inputs{Now: mid(0), ActivatorInPath: true}); d.Scale != 0 {
		t.Fatalf("at zero, no data, nothing pending: %+v, want 0", d)
	}
	// A request arrives at the activator before any scrape: the service
	// at zero must wake now, not after the first sample.
	d := mustDecide(t, e, key("a"), Inputs{Now: mid(0), ActivatorInPath: true, ActivatorPending: 1, Poked: true})
	if d.Scale < 1 {
		t.Fatalf("poke without data: %+v, want at least activation scale 1", d)
	}
	// Pending alone (the poke handled, the request still waiting) too.
	d = mustDecide(t, e, key("a"), Inputs{Now: mid(1), ActivatorInPath: true, ActivatorPending: 1})
	if d.Scale < 1 {
		t.Fatalf("pending without data: %+v", d)
	}
}

func TestUpsertUpdates(t *testing.T) {
	e := New()
	k := key("a")
	e.Upsert(k, spec(t), sec(0), 0)
	for s := range 10 {
		e.Record(k, Sample{Time: sec(s), Concurrency: 10, RPS: 50})
	}
	// A longer window keeps the history.
	e.Upsert(k, spec(t, "window", "120s"), sec(10), 1)
	if got, _ := e.Spec(k); got.StableWindow != 120*time.Second {
		t.Fatalf("spec not updated: stable window %v", got.StableWindow)
	}
	if d := mustDecide(t, e, k, Inputs{Now: mid(9), Ready: 1}); !near(d.Stable, 10) {
		t.Fatalf("after a window change: stable %v, want 10 (history kept)", d.Stable)
	}
	if e.Len() != 1 {
		t.Fatalf("Len = %d after an update, want 1", e.Len())
	}
	// Another metric: the concurrency history does not apply.
	e.Upsert(k, spec(t, "metric", "rps", "window", "120s"), sec(10), 1)
	if d := mustDecide(t, e, k, Inputs{Now: mid(9), Ready: 1}); !strings.HasPrefix(d.Reason, "no data") {
		t.Fatalf("after a metric change: %+v, want no data", d)
	}
	e.Record(k, Sample{Time: sec(10), Concurrency: 10, RPS: 50})
	if d := mustDecide(t, e, k, Inputs{Now: mid(10), Ready: 1}); !near(d.Stable, 50) {
		t.Fatalf("rps after the change: stable %v, want 50", d.Stable)
	}
}

func TestRemove(t *testing.T) {
	e := New()
	for _, n := range []string{"a", "b", "c"} {
		e.Upsert(key(n), spec(t), sec(0), 0)
	}
	e.Remove(key("a"))
	if e.Record(key("a"), conc(0, 1)) {
		t.Fatal("Record after Remove reported true")
	}
	if _, ok := e.Decide(key("a"), Inputs{Now: mid(0)}); ok {
		t.Fatal("Decide after Remove reported ok")
	}
	got := map[service.Key]int{}
	e.Tick(func(service.Key) Inputs { return Inputs{Now: mid(0)} },
		func(k service.Key, _ decider.Decision) { got[k]++ })
	if len(got) != 2 || got[key("b")] != 1 || got[key("c")] != 1 {
		t.Fatalf("Tick after removing a decided %v, want b and c once each", got)
	}
	if keys := e.Services(nil); len(keys) != 2 {
		t.Fatalf("Services = %v", keys)
	}
	// Re-adding starts afresh.
	e.Record(key("b"), conc(0, 50))
	e.Upsert(key("a"), spec(t), sec(1), 0)
	if d := mustDecide(t, e, key("a"), Inputs{Now: mid(1)}); !strings.HasPrefix(d.Reason, "no data") {
		t.Fatalf("re-added service: %+v, want no data", d)
	}
}

func TestTickRemovingDuringTheTick(t *testing.T) {
	e := New()
	for i := range 10 {
		e.Upsert(key(fmt.Sprint(i)), spec(t), sec(0), 0)
	}
	decided := map[service.Key]bool{}
	removed := false
	e.Tick(func(k service.Key) Inputs {
		if !removed {
			// The first service's inputs remove it and another: neither
			// gets a decision, every other service does.
			removed = true
			e.Remove(k)
			e.Remove(key("7"))
			if k == key("7") {
				e.Remove(key("3"))
			}
		}
		return Inputs{Now: mid(0)}
	}, func(k service.Key, _ decider.Decision) { decided[k] = true })
	if len(decided) != 8 || decided[key("7")] {
		t.Fatalf("decided %v, want the 8 services not removed", decided)
	}
}

// driver runs one service second by second as the autoscaler would: record
// the second's load, decide half a second later, and let the ready pods
// follow the decision at once.
type driver struct {
	t     *testing.T
	e     *Engine
	k     service.Key
	s     int // the next second
	ready int
	in    Inputs // template: ActivatorInPath, ActivatorPending
	last  decider.Decision
}

// run applies load for n seconds and returns the last decision.
func (d *driver) run(n int, load float64) decider.Decision {
	d.t.Helper()
	for range n {
		d.e.Record(d.k, conc(d.s, load))
		in := d.in
		in.Now, in.Ready = mid(d.s), d.ready
		d.last = mustDecide(d.t, d.e, d.k, in)
		if d.last.Scale < 0 {
			d.t.Fatalf("second %d: negative scale %+v", d.s, d.last)
		}
		d.ready = d.last.Scale
		d.s++
	}
	return d.last
}

func TestScenario(t *testing.T) {
	e := New()
	k := key("hello")
	e.Upsert(k, spec(t), sec(0), 0) // target 100 × 70%: 70 per pod
	dr := &driver{t: t, e: e, k: k}

	// Constant load of 210 in flight: 3 pods, once the start's panic is over.
	d := dr.run(180, 210)
	if d.Scale != 3 || d.Desired != 3 || d.InPanic {
		t.Fatalf("constant 210: %+v, want 3 pods, not in panic", d)
	}
	if !near(d.Stable, 210) || !near(d.Panic, 210) {
		t.Fatalf("constant 210 observed as %v / %v", d.Stable, d.Panic)
	}
	// EBC = 3 pods × 100 − 211 − 210 < 0: the activator stays in the path.
	if !near(d.ExcessBurstCapacity, math.Floor(3*100-211-210)) || !d.NeedActivator {
		t.Fatalf("EBC %v need activator %v, want %v and true", d.ExcessBurstCapacity, d.NeedActivator, math.Floor(3*100-211-210))
	}

	// A spike to ten times the load: panic at once, and up.
	d = dr.run(2, 2100)
	if !d.InPanic || d.Scale <= 3 {
		t.Fatalf("spike: %+v, want panic and more than 3 pods", d)
	}
	peak := d.Scale
	// Back to 210: panic never lowers the scale.
	for range 30 {
		d = dr.run(1, 210)
		if d.InPanic && d.Scale < peak {
			t.Fatalf("panic lowered the scale from %d: %+v", peak, d)
		}
		peak = max(peak, d.Scale)
	}
	// After the stable window without the condition: calm, back to 3.
	d = dr.run(240, 210)
	if d.InPanic || d.Scale != 3 {
		t.Fatalf("after the spike settled: %+v, want 3 pods, not in panic", d)
	}

	// Idle without the activator in the path: never zero.
	for range 240 {
		d = dr.run(1, 0)
		if d.Scale == 0 {
			t.Fatalf("scaled to zero without the activator in the path: %+v", d)
		}
	}
	if !d.NeedActivator {
		t.Fatalf("idle for 4 min: %+v, want the activator asked for", d)
	}
	// A request held at the activator: still never zero.
	dr.in = Inputs{ActivatorInPath: true, ActivatorPending: 1}
	for range 60 {
		if d = dr.run(1, 0); d.Scale == 0 {
			t.Fatalf("scaled to zero with a request pending at the activator: %+v", d)
		}
	}
	// The activator in the path, nothing pending: zero.
	// The activator in the path, nothing pending: zero once the grace
	// period since the last request has passed.
	dr.in = Inputs{ActivatorInPath: true}
	if d = dr.run(40, 0); d.Scale != 0 {
		t.Fatalf("idle with the activator in the path: %+v, want 0", d)
	}
	// A poke wakes it, before any sample of the new traffic.
	d = mustDecide(t, e, k, Inputs{Now: mid(dr.s), ActivatorInPath: true, ActivatorPending: 1, Poked: true})
	if d.Scale < 1 {
		t.Fatalf("poke at zero: %+v, want at least 1", d)
	}
}

func TestRestartWithReadyPodsHolds(t *testing.T) {
	e := New()
	k := key("running")
	e.Upsert(k, spec(t), sec(0), 5)
	// Before the first scrape: hold what is running.
	if d := mustDecide(t, e, k, Inputs{Now: mid(0), Ready: 5}); d.Scale != 5 {
		t.Fatalf("before data: %+v, want 5", d)
	}
	// The first seconds of a new history read low (the pods are not busy
	// yet, or the scrape caught a lull): the restarted decider holds 5.
	dr := &driver{t: t, e: e, k: k, ready: 5}
	for range 10 {
		if d := dr.run(1, 10); d.Scale < 5 {
			t.Fatalf("second %d after a restart: %+v, want no scale-down below 5", dr.s-1, d)
		}
	}
}

func TestConcurrentRecordAndTick(t *testing.T) {
	e := New()
	const n = 50
	sp := spec(t)
	for i := range n {
		e.Upsert(key(fmt.Sprint(i)), sp, sec(0), 1)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for s := range 30 {
				for i := g; i < n; i += 4 {
					e.Record(key(fmt.Sprint(i)), conc(s, 70))
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 20 {
			e.Upsert(key(fmt.Sprint("churn", i%3)), sp, sec(i), 0)
			e.Remove(key(fmt.Sprint("churn", (i+1)%3)))
		}
	})
	for s := range 30 {
		e.Tick(func(service.Key) Inputs { return Inputs{Now: mid(s), Ready: 1} },
			func(service.Key, decider.Decision) {})
	}
	wg.Wait()
	for i := range n {
		d := mustDecide(t, e, key(fmt.Sprint(i)), Inputs{Now: mid(29), Ready: 1})
		if !near(d.Stable, 70) {
			t.Fatalf("service %d: stable %v, want 70", i, d.Stable)
		}
	}
}

// TestTickDoesNotAllocate checks the steady state: services known, windows
// full, every service recording and deciding each second.
func TestTickDoesNotAllocate(t *testing.T) {
	f := newFleet(t, 200)
	f.warm()
	allocs := testing.AllocsPerRun(20, f.step)
	if allocs != 0 {
		t.Fatalf("a tick of %d services allocates %v times, want 0", len(f.keys), allocs)
	}
}
