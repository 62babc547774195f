package decider

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/swell-run/swell/autoscaler/window"
	"github.com/swell-run/swell/pkg/autoscaling"
)

func TestNeedActivator(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*autoscaling.Spec)
		o    Observation
		want bool
	}{
		{"enough spare capacity", nil, obs(0, 10, 100, 100), false},
		{"negative EBC", nil, obs(0, 2, 100, 100), true},
		{"TBC -1", func(s *autoscaling.Spec) { s.TargetBurstCapacity = -1 }, obs(0, 10, 100, 100), true},
		{"TBC 0", func(s *autoscaling.Spec) { s.TargetBurstCapacity = 0 }, obs(0, 1, 60, 60), false},
		{"on the way to zero", func(s *autoscaling.Spec) { s.TargetBurstCapacity = 0 }, obs(0, 1, 0, 0), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := testSpec()
			if tt.mod != nil {
				tt.mod(&s)
			}
			got := New(s, at(0), 0).Decide(tt.o)
			if got.NeedActivator != tt.want {
				t.Fatalf("NeedActivator = %v, want %v (%+v)", got.NeedActivator, tt.want, got)
			}
		})
	}
}

func TestDecisionEchoesInputs(t *testing.T) {
	d := New(testSpec(), at(0), 0)
	o := obs(3.5, 4, 123.4, 99.9)
	got := d.Decide(o)
	if !got.Now.Equal(o.Now) || got.Ready != 4 || got.Stable != 123.4 || got.Panic != 99.9 {
		t.Fatalf("echo: %+v", got)
	}
}

func TestLastTrafficIsDerivedFromPanicAndPending(t *testing.T) {
	s := testSpec(func(s *autoscaling.Spec) { s.TargetBurstCapacity = 0 })
	d := Resume(s, at(0), 0)
	// Traffic only in the panic window at 10 (no LastTraffic given).
	d.Decide(obs(10, 1, 0, 0.2))
	if got := d.Decide(obs(39, 1, 0, 0)); got.Scale != 1 {
		t.Fatalf("within grace after panic traffic: %+v", got)
	}
	if got := d.Decide(obs(40, 1, 0, 0)); got.Scale != 0 {
		t.Fatalf("after grace: %+v", got)
	}
	// A LastTraffic in the future is taken as now, not later.
	d2 := Resume(s, at(0), 0)
	o := obs(100, 1, 0, 0)
	o.LastTraffic = at(1000)
	d2.Decide(o)
	if got := d2.Decide(obs(130, 1, 0, 0)); got.Scale != 0 {
		t.Fatalf("future LastTraffic held the service: %+v", got)
	}
}

func TestClockGoingBackwardsIsTakenAsThePreviousTime(t *testing.T) {
	s := testSpec(func(s *autoscaling.Spec) { s.Target, s.TargetUtilization, s.TargetBurstCapacity = 10, 1, 0 })
	d := New(s, at(0), 0)
	d.Decide(obs(100, 2, 20, 40)) // panic at 100
	// A decision stamped before 100 cannot end the episode early or
	// confuse the windows.
	got := d.Decide(obs(50, 4, 0, 0))
	if !got.InPanic || got.Desired != 4 {
		t.Fatalf("backwards: %+v", got)
	}
	if got := d.Decide(obs(161, 4, 0, 0)); got.InPanic {
		t.Fatalf("panic should end at 161: %+v", got)
	}
}

func TestBadObservationsReadAsZero(t *testing.T) {
	d := New(testSpec(), at(0), 0)
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), -5} {
		got := d.Decide(obs(1, 1, v, v))
		if got.Desired != 0 || got.Scale != 1 {
			t.Fatalf("observation %v: %+v", v, got)
		}
	}
	// A huge value over a tiny target does not wrap.
	s := testSpec(func(s *autoscaling.Spec) {
		s.Target, s.TargetUtilization, s.MaxScaleUpRate, s.PanicThreshold = 0.01, 0.01, 0, 1e300
	})
	got := New(s, at(0), 0).Decide(obs(0, 1, 1e300, 1e300))
	if got.Desired != maxPods {
		t.Fatalf("huge: %+v", got)
	}
}

func TestSetSpec(t *testing.T) {
	s := testSpec(func(s *autoscaling.Spec) { s.Target, s.TargetUtilization, s.TargetBurstCapacity = 10, 1, 0 })
	d := New(s, at(0), 0)
	if got := d.Decide(obs(0, 2, 20, 40)); !got.InPanic || got.Desired != 4 {
		t.Fatalf("setup: %+v", got)
	}
	// Same class: the panic episode goes on under the new settings.
	s.MaxScale = 3
	s.ScaleDownDelay = 20 * time.Second
	d.SetSpec(s)
	if d.Spec().MaxScale != 3 {
		t.Fatal("Spec() did not change")
	}
	got := d.Decide(obs(2, 4, 0, 0))
	if !got.InPanic || got.Desired != 4 || got.Scale != 3 {
		t.Fatalf("after SetSpec: %+v", got)
	}
	// The delay window added by SetSpec holds the last panic decision, at
	// 60, for 20s.
	if got := d.Decide(obs(60, 4, 0, 0)); !got.InPanic || got.Desired != 4 {
		t.Fatalf("end of panic: %+v", got)
	}
	if got := d.Decide(obs(63, 4, 0, 0)); got.InPanic || got.Desired != 4 {
		t.Fatalf("delay after panic: %+v", got)
	}
	s.ScaleDownDelay = 0
	d.SetSpec(s)
	if got := d.Decide(obs(64, 4, 0, 0)); got.Desired != 2 {
		t.Fatalf("delay removed: %+v", got)
	}
	// A change of class starts the new policy fresh.
	s.Class = autoscaling.ClassExponential
	s.MaxScale = 0
	d.SetSpec(s)
	if got := d.Decide(obs(66, 2, 80, 80)); got.InPanic || got.Desired != 8 {
		t.Fatalf("exponential after kpa: %+v", got)
	}
}

func TestMeasure(t *testing.T) {
	s := testSpec()
	d := New(s, at(0), 0)
	w := window.New(s.StableWindow)
	o := Observation{Now: at(0)}
	d.Measure(w, &o)
	if !o.NoData || o.Stable != 0 || o.Panic != 0 {
		t.Fatalf("empty window: %+v", o)
	}
	for sec := 0; sec < 60; sec++ {
		v := 0.0
		if sec >= 50 {
			v = 60
		}
		w.Record(at(float64(sec)), v)
	}
	o = Observation{Now: at(59.5)}
	d.Measure(w, &o)
	if o.NoData || o.Stable != 10 || o.Panic != 60 || !o.LastTraffic.Equal(at(59)) {
		t.Fatalf("linear: %+v", o)
	}
	s.Averaging = autoscaling.AveragingExponential
	d.SetSpec(s)
	o = Observation{Now: at(59.5)}
	d.Measure(w, &o)
	if math.Abs(o.Panic-60) > 1e-9 || !(o.Stable > 10 && o.Stable < 60) {
		t.Fatalf("exponential: %+v", o)
	}
	// A later LastTraffic given by the caller (the activator) is kept.
	o = Observation{Now: at(59.5), LastTraffic: at(59.4)}
	d.Measure(w, &o)
	if !o.LastTraffic.Equal(at(59.4)) {
		t.Fatalf("LastTraffic: %v", o.LastTraffic)
	}
	o = Observation{Now: at(200)}
	d.Measure(w, &o)
	if !o.NoData {
		t.Fatalf("a window-old history is no data: %+v", o)
	}
}

func TestInitialScaleZero(t *testing.T) {
	s := testSpec(func(s *autoscaling.Spec) { s.InitialScale = 0 })
	d := New(s, at(0), 0)
	o := Observation{Now: at(0), NoData: true, ActivatorInPath: true}
	if got := d.Decide(o); got.Scale != 0 || !got.NeedActivator {
		t.Fatalf("initial-scale 0: %+v", got)
	}
	// Without the activator confirmed in the path, a service must have a
	// pod to receive its traffic.
	o = Observation{Now: at(1), NoData: true}
	if got := d.Decide(o); got.Scale != 1 || !strings.Contains(got.Reason, "activator") {
		t.Fatalf("initial-scale 0, no activator: %+v", got)
	}
}

func TestReasonIsReusedWhileUnchanged(t *testing.T) {
	d := New(testSpec(), at(0), 0)
	a := d.Decide(obs(0, 3, 150, 150)).Reason
	b := d.Decide(obs(2, 3, 151, 149)).Reason
	if a != b || a != "stable at target 70" {
		t.Fatalf("reasons %q, %q", a, b)
	}
	if unsafeStringData(a) != unsafeStringData(b) {
		t.Fatal("an unchanged reason was rebuilt")
	}
}

func TestSteadyStateDecisionsDoNotAllocate(t *testing.T) {
	for _, class := range autoscaling.Classes() {
		t.Run(string(class), func(t *testing.T) {
			s := testSpec(func(s *autoscaling.Spec) {
				s.Class = class
				s.ScaleDownDelay = 30 * time.Second
			})
			d := New(s, at(0), 0)
			w := window.New(s.StableWindow)
			rng := rand.New(rand.NewPCG(3, 4))
			sec := 0
			tick := func() {
				sec++
				now := at(float64(sec))
				w.Record(now, 350*(1+0.1*(rng.Float64()-0.5)))
				o := Observation{Now: now, Ready: 5, ActivatorInPath: true}
				d.Measure(w, &o)
				d.Decide(o)
			}
			for range 300 {
				tick()
			}
			if allocs := testing.AllocsPerRun(500, tick); allocs != 0 {
				t.Fatalf("%v allocations per decision", allocs)
			}
		})
	}
}

func TestExtremumAgainstBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := 0; trial < 200; trial++ {
		span := rng.IntN(8)
		isMin := rng.IntN(2) == 0
		e := newExtremum(time.Duration(span)*time.Second, isMin)
		type rec struct {
			sec int64
			v   int
		}
		var all []rec
		sec := int64(100)
		for step := 0; step < 100; step++ {
			sec += int64(rng.IntN(3))
			if rng.IntN(5) == 0 {
				// Record with a value, at times twice in the same second.
				v := rng.IntN(10)
				e.record(time.Unix(sec, 0), v)
				all = append(all, rec{sec, v})
			}
			got, ok := e.value(time.Unix(sec, 0))
			want, wok := 0, false
			for _, r := range all {
				if r.sec > sec-int64(span) {
					if !wok || (isMin && r.v < want) || (!isMin && r.v > want) {
						want, wok = r.v, true
					}
				}
			}
			if got != want || ok != wok {
				t.Fatalf("trial %d span %d min %v at %d: got %d,%v want %d,%v", trial, span, isMin, sec, got, ok, want, wok)
			}
		}
		// Resize keeps what still fits.
		e.resize(time.Duration(span+2) * time.Second)
		if _, ok := e.value(time.Unix(sec, 0)); span > 0 && len(all) > 0 && all[len(all)-1].sec > sec-int64(span) && !ok {
			t.Fatalf("trial %d: resize lost the window", trial)
		}
	}
}

func TestRestartedNonKPAPoliciesHoldForAStableWindow(t *testing.T) {
	for _, class := range []autoscaling.Class{autoscaling.ClassExponential, autoscaling.ClassPID, autoscaling.ClassHPA} {
		s := policySpec(class, 1, func(s *autoscaling.Spec) { s.HPA.ScaleDown.StabilizationWindow = 0 })
		d := New(s, at(0), 6)
		if got := d.Decide(obs(1, 6, 0, 0)); got.Desired != 6 || got.InPanic {
			t.Fatalf("%s at 1: %+v", class, got)
		}
		if got := d.Decide(obs(60, 6, 0, 0)); got.Desired != 6 {
			t.Fatalf("%s at 60: %+v", class, got)
		}
		if got := d.Decide(obs(61, 6, 0, 0)); got.Desired >= 6 {
			t.Fatalf("%s at 61 still holds: %+v", class, got)
		}
	}
}

// TestWindowsAndDecider drives a new service's first seconds through a real
// window: its first second reads its full load (not 1/60 of it), so a
// burst on a new service panics at once; when the load stops the panic
// window empties first, the stable window a minute later.
func TestWindowsAndDecider(t *testing.T) {
	s := testSpec()
	d := New(s, at(0), 0)
	w := window.New(s.StableWindow)
	ready := 1
	decide := func(sec int) Decision {
		o := Observation{Now: at(float64(sec)), Ready: ready, ActivatorInPath: true}
		d.Measure(w, &o)
		got := d.Decide(o)
		ready = got.Scale
		return got
	}
	w.Record(at(0), 700)
	if got := decide(0); !got.InPanic || got.Scale != 10 || got.Stable != 700 {
		t.Fatalf("first second: %+v", got)
	}
	for sec := 1; sec < 30; sec++ {
		w.Record(at(float64(sec)), 700)
		if got := decide(sec); got.Scale != 10 {
			t.Fatalf("second %d: %+v", sec, got)
		}
	}
	// Load stops at 30; the scraper keeps reporting zeros.
	for sec := 30; sec < 200; sec++ {
		w.Record(at(float64(sec)), 0)
		got := decide(sec)
		switch {
		case sec < 89 && got.Scale == 0:
			t.Fatalf("second %d: zero while the stable window holds traffic: %+v", sec, got)
		case sec == 199 && got.Scale != 0:
			t.Fatalf("second %d: not at zero: %+v", sec, got)
		}
	}
}

// A min-scale-schedule raises the fewest pods while a rule holds, for
// every policy, and lets the service go to zero outside it.
func TestMinScaleSchedule(t *testing.T) {
	for _, class := range autoscaling.Classes() {
		t.Run(string(class), func(t *testing.T) {
			spec := autoscaling.DefaultSpec()
			spec.Class = class
			sch, problem := autoscaling.ParseSchedule("Mon 09:00-10:00=3")
			if problem != "" {
				t.Fatal(problem)
			}
			spec.MinScaleSchedule = sch
			// 2024-01-01 is a Monday.
			at := func(hh, mm int) time.Time { return time.Date(2024, 1, 1, hh, mm, 0, 0, time.UTC) }
			d := Resume(spec, at(8, 0), 0)
			if got := d.Decide(Observation{Now: at(8, 59), ActivatorInPath: true}); got.Scale != 0 {
				t.Errorf("08:59: %+v, want zero before the rule", got)
			}
			got := d.Decide(Observation{Now: at(9, 0), ActivatorInPath: true})
			if got.Scale != 3 || !strings.HasPrefix(got.Reason, "min-scale-schedule: 3 pods") {
				t.Errorf("09:00: %+v, want 3 pods by the schedule", got)
			}
			if got := d.Decide(Observation{Now: at(9, 59), Ready: 3, ActivatorInPath: true}); got.Scale != 3 {
				t.Errorf("09:59: %+v, want 3", got)
			}
			// Past the rule the pods are free to go as the policy says.
			var last Decision
			for m := range 20 {
				last = d.Decide(Observation{Now: at(10, m), Ready: last.Scale, ActivatorInPath: true})
			}
			if last.Scale >= 3 {
				t.Errorf("10:19: %+v, want the schedule's pods released", last)
			}
		})
	}
}

// TestMeasureEmptyPanicWindow: a panic window without a recorded second,
// older seconds known, reads as the stable average, not as zero load: at
// 10,000 services with samples missing, zero flipped busy services off the
// activator and back every few seconds.
func TestMeasureEmptyPanicWindow(t *testing.T) {
	for _, avg := range []autoscaling.Averaging{autoscaling.AveragingLinear, autoscaling.AveragingExponential} {
		s := testSpec(func(s *autoscaling.Spec) { s.Averaging = avg })
		d := New(s, at(0), 0)
		w := window.New(s.StableWindow)
		for sec := range 50 {
			w.Record(at(float64(sec)), 30)
		}
		// Nothing recorded for the last 10 s, longer than the 6 s panic
		// window.
		o := Observation{Now: at(59.5)}
		d.Measure(w, &o)
		if o.NoData || math.Abs(o.Stable-30) > 1e-9 || o.Panic != o.Stable {
			t.Errorf("%s: stable %v, panic %v; want the panic window read as the stable average, 30", avg, o.Stable, o.Panic)
		}
		// A recorded second in the panic window is read as it is.
		w.Record(at(59), 0)
		o = Observation{Now: at(59.5)}
		d.Measure(w, &o)
		if o.Panic != 0 {
			t.Errorf("%s: panic %v after a recorded idle second, want 0", avg, o.Panic)
		}
	}
}
