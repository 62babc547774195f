package engine

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/swell-run/swell/autoscaler/decider"
	"github.com/swell-run/swell/pkg/autoscaling"
)

// t0 is a whole second; tests record a second's sample at that second and
// decide half a second later, as the autoscaler's loop does.
var t0 = time.Unix(1_800_000_000, 0)

func sec(s int) time.Time          { return t0.Add(time.Duration(s) * time.Second) }
func mid(s int) time.Time          { return sec(s).Add(500 * time.Millisecond) }
func near(a, b float64) bool       { return math.Abs(a-b) <= 1e-6*math.Max(1, math.Abs(b)) }
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

func TestRecordPicksTheSpecsMetric(t *testing.T) {
	c := New(spec(t), sec(0), 0)
	r := New(spec(t, "metric", "rps"), sec(0), 0)
	s := Sample{Time: sec(0), Concurrency: 35, RPS: 410}
	c.Record(s)
	r.Record(s)
	if d := c.Decide(Inputs{Now: mid(0)}); !near(d.Stable, 35) || !near(d.Panic, 35) {
		t.Errorf("concurrency service observed stable %v panic %v, want 35", d.Stable, d.Panic)
	}
	if d := r.Decide(Inputs{Now: mid(0)}); !near(d.Stable, 410) || !near(d.Panic, 410) {
		t.Errorf("rps service observed stable %v panic %v, want 410", d.Stable, d.Panic)
	}
}

func TestSamplesOfOneSecondAddUp(t *testing.T) {
	e := New(spec(t), sec(0), 0)
	// Pods and an activator report the same second separately.
	e.Record(Sample{Time: sec(0), Concurrency: 20, RPS: 100})
	e.Record(Sample{Time: sec(0).Add(300 * time.Millisecond), Concurrency: 5, RPS: 30})
	d := e.Decide(Inputs{Now: mid(0)})
	if !near(d.Stable, 25) {
		t.Errorf("stable = %v, want 25", d.Stable)
	}
	ls, ok := e.LastSample()
	if !ok || !ls.Time.Equal(sec(0)) || !near(ls.Concurrency, 25) || !near(ls.RPS, 130) {
		t.Errorf("LastSample = %+v, %v; want second 0 with 25 and 130", ls, ok)
	}
	e.Record(Sample{Time: sec(1), Concurrency: 7, RPS: 9})
	if ls, _ := e.LastSample(); !ls.Time.Equal(sec(1)) || ls.Concurrency != 7 || ls.RPS != 9 {
		t.Errorf("LastSample after a new second = %+v", ls)
	}
	// A late sample for an older second reaches the window, not the display.
	e.Record(Sample{Time: sec(0), Concurrency: 1})
	if ls, _ := e.LastSample(); ls.Concurrency != 7 {
		t.Errorf("late sample changed LastSample: %+v", ls)
	}
}

func TestWindowsAreReadAtNow(t *testing.T) {
	e := New(spec(t), sec(0), 0) // 60s, panic window 6s
	for s := range 10 {
		e.Record(conc(s, float64(s))) // 0, 1, ..., 9
	}
	d := e.Decide(Inputs{Now: mid(9)})
	if !near(d.Stable, 4.5) || !near(d.Panic, 6.5) {
		t.Errorf("at 9.5s: stable %v panic %v, want 4.5 and 6.5", d.Stable, d.Panic)
	}
	// Seconds not recorded yet after the last record are unknown, not zero:
	// at 11.5 the panic window is seconds 6-11, of which 6-9 are known.
	d = e.Decide(Inputs{Now: mid(11)})
	if !near(d.Panic, 7.5) {
		t.Errorf("at 11.5s with nothing since 9s: panic %v, want 7.5 (unknown seconds left out)", d.Panic)
	}
}

func TestExponentialAveraging(t *testing.T) {
	le := New(spec(t), sec(0), 0)
	ee := New(spec(t, "window-averaging", "exponential"), sec(0), 0)
	for s := range 60 {
		v := 0.0
		if s >= 50 {
			v = 100
		}
		le.Record(conc(s, v))
		ee.Record(conc(s, v))
	}
	lin := le.Decide(Inputs{Now: mid(59), Ready: 1})
	exp := ee.Decide(Inputs{Now: mid(59), Ready: 1})
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
	e := Resume(spec(t), sec(0), 3)

	// Before the first sample: a new service holds its initial scale, a
	// resumed one what it had — at zero too.
	for _, c := range []struct {
		name  string
		core  *Service
		ready int
		want  int
	}{{"new", New(spec(t), sec(0), 0), 0, 1}, {"restarted", e, 3, 3}, {"at-zero", Resume(spec(t), sec(0), 0), 0, 0}} {
		d := c.core.Decide(Inputs{Now: mid(0), Ready: c.ready, ActivatorInPath: true})
		if d.Scale != c.want || (c.want > 0 && !strings.HasPrefix(d.Reason, "no data")) {
			t.Errorf("%s without samples: %+v, want a no-data hold at %d", c.name, d, c.want)
		}
	}

	// One sample is data; a whole stable window without one is not.
	e.Record(conc(1, 350))
	d := e.Decide(Inputs{Now: mid(1), Ready: 3})
	if strings.HasPrefix(d.Reason, "no data") || d.Scale < 5 {
		t.Fatalf("with a sample of 350: %+v, want at least 5 pods", d)
	}
	held := d.Scale
	if d := e.Decide(Inputs{Now: mid(70), Ready: held}); !strings.HasPrefix(d.Reason, "no data") || d.Scale != held {
		t.Fatalf("a stable window after the last sample: %+v, want a no-data hold at %d", d, held)
	}
}

func TestPokeDecidesWithoutData(t *testing.T) {
	e := Resume(spec(t), sec(0), 0) // at zero before a restart
	if d := e.Decide(Inputs{Now: mid(0), ActivatorInPath: true}); d.Scale != 0 {
		t.Fatalf("at zero, no data, nothing pending: %+v, want 0", d)
	}
	// A request arrives at the activator before any scrape: the service
	// at zero must wake now, not after the first sample.
	d := e.Decide(Inputs{Now: mid(0), ActivatorInPath: true, ActivatorPending: 1, Poked: true})
	if d.Scale < 1 {
		t.Fatalf("poke without data: %+v, want at least activation scale 1", d)
	}
	// Pending alone (the poke handled, the request still waiting) too.
	d = e.Decide(Inputs{Now: mid(1), ActivatorInPath: true, ActivatorPending: 1})
	if d.Scale < 1 {
		t.Fatalf("pending without data: %+v", d)
	}
}

func TestSetSpec(t *testing.T) {
	e := New(spec(t), sec(0), 0)
	for s := range 10 {
		e.Record(Sample{Time: sec(s), Concurrency: 10, RPS: 50})
	}
	// A longer window keeps the history.
	e.SetSpec(spec(t, "window", "120s"))
	if got := e.Spec(); got.StableWindow != 120*time.Second {
		t.Fatalf("spec not updated: stable window %v", got.StableWindow)
	}
	if d := e.Decide(Inputs{Now: mid(9), Ready: 1}); !near(d.Stable, 10) {
		t.Fatalf("after a window change: stable %v, want 10 (history kept)", d.Stable)
	}
	// Another metric: the concurrency history does not apply.
	e.SetSpec(spec(t, "metric", "rps", "window", "120s"))
	if d := e.Decide(Inputs{Now: mid(9), Ready: 1}); !strings.HasPrefix(d.Reason, "no data") {
		t.Fatalf("after a metric change: %+v, want no data", d)
	}
	e.Record(Sample{Time: sec(10), Concurrency: 10, RPS: 50})
	if d := e.Decide(Inputs{Now: mid(10), Ready: 1}); !near(d.Stable, 50) {
		t.Fatalf("rps after the change: stable %v, want 50", d.Stable)
	}
}

// driver runs one service second by second as the autoscaler would: record
// the second's load, decide half a second later, and let the ready pods
// follow the decision at once.
type driver struct {
	t     *testing.T
	e     *Service
	s     int // the next second
	ready int
	in    Inputs // template: ActivatorInPath, ActivatorPending
	last  decider.Decision
}

// run applies load for n seconds and returns the last decision.
func (d *driver) run(n int, load float64) decider.Decision {
	d.t.Helper()
	for range n {
		d.e.Record(conc(d.s, load))
		in := d.in
		in.Now, in.Ready = mid(d.s), d.ready
		d.last = d.e.Decide(in)
		if d.last.Scale < 0 {
			d.t.Fatalf("second %d: negative scale %+v", d.s, d.last)
		}
		d.ready = d.last.Scale
		d.s++
	}
	return d.last
}

func TestScenario(t *testing.T) {
	e := New(spec(t, "class", "kpa"), sec(0), 0) // target 100 × 70%: 70 per pod, Knative's panic
	dr := &driver{t: t, e: e}

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
	d = e.Decide(Inputs{Now: mid(dr.s), ActivatorInPath: true, ActivatorPending: 1, Poked: true})
	if d.Scale < 1 {
		t.Fatalf("poke at zero: %+v, want at least 1", d)
	}
}

func TestRestartWithReadyPodsHolds(t *testing.T) {
	e := New(spec(t), sec(0), 5)
	// Before the first scrape: hold what is running.
	if d := e.Decide(Inputs{Now: mid(0), Ready: 5}); d.Scale != 5 {
		t.Fatalf("before data: %+v, want 5", d)
	}
	// The first seconds of a new history read low (the pods are not busy
	// yet, or the scrape caught a lull): the restarted decider holds 5.
	dr := &driver{t: t, e: e, ready: 5}
	for range 10 {
		if d := dr.run(1, 10); d.Scale < 5 {
			t.Fatalf("second %d after a restart: %+v, want no scale-down below 5", dr.s-1, d)
		}
	}
}

func TestTickDoesNotAllocate(t *testing.T) {
	f := newFleet(t, 200)
	f.warm()
	allocs := testing.AllocsPerRun(20, f.step)
	if allocs != 0 {
		t.Fatalf("a tick of %d services allocates %v times, want 0", len(f.cores), allocs)
	}
}

// The pods' own figures reach the adaptive policy summed over the seconds
// since the last decision: with them it knows a request's time in a pod
// (2 busy over 8 a second: 0.25 s) although the activator queues 40, and
// sizes by work; without them the queue says nothing of the work, and
// the pod starting is held.
func TestPodFiguresSizeByWork(t *testing.T) {
	sp := spec(t, "class", "adaptive")
	sp.ContainerConcurrency, sp.Target = 4, 4
	for _, pods := range []bool{true, false} {
		e := Resume(sp, sec(0), 1)
		var d decider.Decision
		for s := 1; s <= 6; s++ {
			sm := Sample{Time: sec(s), Concurrency: 42, RPS: 8}
			if pods {
				sm.PodConcurrency, sm.PodRPS = 2, 8
			}
			e.Record(sm)
			if s%2 == 0 {
				d = e.Decide(Inputs{Now: mid(s), Ready: 1, ActivatorInPath: true, ActivatorPending: 41})
			}
		}
		if sized := strings.HasPrefix(d.Reason, "work: "); sized != pods {
			t.Errorf("pods' figures %v: decision %q (%d pods)", pods, d.Reason, d.Scale)
		}
		// 8/s × 0.25 s at 2.8 a pod, and 37 queued × 0.25 s drained within
		// 6 s at 4 slots a pod: 1 + 1.
		if pods && d.Scale != 2 {
			t.Errorf("sized by work: %d pods (%q), want 2", d.Scale, d.Reason)
		}
	}
}
