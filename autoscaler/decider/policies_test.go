package decider

import (
	"strings"
	"testing"
	"time"

	"github.com/swell-run/swell/pkg/autoscaling"
)

// step is one observation and the expected Desired (and Scale when
// scale >= 0) for the policy tests.
type pstep struct {
	t             float64
	ready         int
	stable        float64
	desired       int
	scale         int // -1: same as desired
	reasonContain string
}

// runSteps feeds steps to d (panic = stable) and checks them.
func runSteps(t *testing.T, d *Decider, steps []pstep) {
	t.Helper()
	for _, s := range steps {
		got := d.Decide(obs(s.t, s.ready, s.stable, s.stable))
		wantScale := s.scale
		if wantScale < 0 {
			wantScale = s.desired
		}
		if got.Desired != s.desired || got.Scale != wantScale {
			t.Fatalf("t=%v: desired %d scale %d, want %d %d (%s)", s.t, got.Desired, got.Scale, s.desired, wantScale, got.Reason)
		}
		if s.reasonContain != "" && !strings.Contains(got.Reason, s.reasonContain) {
			t.Fatalf("t=%v: reason %q, want %q", s.t, got.Reason, s.reasonContain)
		}
	}
}

// policySpec is a service of the given class with a target per pod of 10
// and no burst capacity, starting at initial pods.
func policySpec(class autoscaling.Class, initial int, mods ...func(*autoscaling.Spec)) autoscaling.Spec {
	return testSpec(append([]func(*autoscaling.Spec){func(s *autoscaling.Spec) {
		s.Class = class
		s.Target, s.TargetUtilization, s.TargetBurstCapacity = 10, 1, 0
		s.InitialScale = initial
	}}, mods...)...)
}

func TestHPA(t *testing.T) {
	noDownWindow := func(s *autoscaling.Spec) { s.HPA.ScaleDown.StabilizationWindow = 0 }
	tests := []struct {
		name    string
		initial int
		mods    []func(*autoscaling.Spec)
		steps   []pstep
	}{
		{"tolerance keeps the current count", 4, []func(*autoscaling.Spec){noDownWindow}, []pstep{
			{0, 4, 44, 4, -1, "within tolerance"}, // ratio 1.1: not above
			{2, 4, 45, 5, -1, "hpa: 5 pods"},      // ratio 1.125
			{4, 5, 46, 5, -1, ""},
			{6, 5, 45, 5, -1, "within tolerance"}, // 0.9: not below
			{8, 5, 44, 5, -1, ""},                 // 0.88: ceil(4.4) = 5
			{10, 5, 39, 4, -1, ""},                // 0.78: ceil(3.9) = 4
		}},
		{"tolerance per direction", 10, []func(*autoscaling.Spec){noDownWindow, func(s *autoscaling.Spec) {
			s.HPA.ToleranceUp, s.HPA.ToleranceDown = 0.3, 0.02
		}}, []pstep{
			{0, 10, 125, 10, -1, "within tolerance"}, // 1.25 ≤ 1.3
			{2, 10, 97, 10, -1, ""},                  // 0.97 < 0.98: ceil(9.7) = 10
			{4, 10, 89, 9, -1, ""},
		}},
		{"default scale-up policies: max(4 pods, 100%) per 15s", 1, nil, []pstep{
			{0, 1, 100, 5, -1, "scale-up policy limits to 5 pods"}, // 1+4 beats 1×2
			{2, 5, 100, 5, -1, ""},                                 // the period's +4 is spent
			{14, 5, 100, 5, -1, ""},
			{15, 5, 100, 10, -1, ""}, // the event of 0 left the period: max(5+4, 5×2)
			{17, 10, 300, 10, -1, ""},
			{30, 10, 300, 20, -1, ""},
		}},
		{"select Min takes the smaller change", 1, []func(*autoscaling.Spec){func(s *autoscaling.Spec) {
			s.HPA.ScaleUp.SelectPolicy = autoscaling.SelectMin
		}}, []pstep{
			{0, 1, 100, 2, -1, ""},
		}},
		{"select Disabled never scales up", 3, []func(*autoscaling.Spec){func(s *autoscaling.Spec) {
			s.HPA.ScaleUp.SelectPolicy = autoscaling.SelectDisabled
		}}, []pstep{
			{0, 3, 100, 3, -1, ""},
		}},
		{"scale-down stabilization holds the window's highest", 10, nil, []pstep{
			{0, 10, 100, 10, -1, "within tolerance"},
			{10, 10, 20, 10, -1, "stabilized at 10 pods"},
			{299, 10, 20, 10, -1, ""},
			// The 10 of second 0 leaves the 300s window; max-scale-down-rate 2
			// (a guard rail shared by every policy) halves at most.
			{300, 10, 20, 5, -1, "max-scale-down-rate limits to 5 pods"},
			{302, 5, 20, 2, -1, ""},
		}},
		{"scale-down Pods policy counts the period's events", 10, []func(*autoscaling.Spec){noDownWindow, func(s *autoscaling.Spec) {
			s.HPA.ScaleDown.Policies = []autoscaling.HPAPolicy{{Type: autoscaling.PolicyPods, Value: 1, Period: time.Minute}}
		}}, []pstep{
			{0, 10, 20, 9, -1, "scale-down policy limits to 9 pods"},
			{2, 9, 20, 9, -1, ""},
			{59, 9, 20, 9, -1, ""},
			{60, 9, 20, 8, -1, ""},
		}},
		{"scale-down Percent truncates", 10, []func(*autoscaling.Spec){noDownWindow, func(s *autoscaling.Spec) {
			s.HPA.ScaleDown.Policies = []autoscaling.HPAPolicy{{Type: autoscaling.PolicyPercent, Value: 25, Period: time.Minute}}
		}}, []pstep{
			{0, 10, 10, 7, -1, ""}, // int(10 × 0.75) = 7
		}},
		{"scale-up stabilization takes the window's lowest", 1, []func(*autoscaling.Spec){func(s *autoscaling.Spec) {
			s.HPA.ScaleUp.StabilizationWindow = 30 * time.Second
		}}, []pstep{
			{0, 1, 10, 1, -1, "within tolerance"},
			{2, 1, 50, 1, -1, "stabilized at 1 pod"},
			{29, 1, 50, 1, -1, ""},
			{30, 1, 50, 5, -1, ""},
		}},
		{"no ready pod holds the current count", 3, nil, []pstep{
			{0, 0, 100, 3, -1, "no ready pod"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runSteps(t, New(policySpec(autoscaling.ClassHPA, tt.initial, tt.mods...), at(0), 0), tt.steps)
		})
	}
}

func TestHPARestartStartsTheScaleDownWindowAtTheCurrentCount(t *testing.T) {
	d := Resume(policySpec(autoscaling.ClassHPA, 1), at(0), 6)
	runSteps(t, d, []pstep{
		{1, 6, 10, 6, -1, ""},
		{100, 6, 10, 6, -1, ""},
		{299, 6, 10, 6, -1, ""},
		{300, 6, 10, 3, -1, ""}, // halving: the shared rate limit
	})
}

func TestExponential(t *testing.T) {
	tests := []struct {
		name  string
		mods  []func(*autoscaling.Spec)
		steps []pstep
	}{
		{"growth multiplies until enough", nil, []pstep{
			{0, 1, 50, 8, -1, "growing ×2 to 8 pods"}, // 1, 2, 4, 8 ≥ 5
			{2, 3, 70, 12, -1, ""},                    // 6 < 7, 12
			{4, 12, 70, 8, -1, "shrinking ÷1.5 to 8"},
			{6, 8, 70, 7, -1, ""}, // floor(8/1.5) = 5, not below 7
			{8, 7, 70, 7, -1, "at target"},
		}},
		{"from zero the ladder starts at one", nil, []pstep{
			{0, 0, 10, 1, -1, ""},
			{2, 0, 30, 4, -1, ""},
		}},
		{"shrinks one gentle step per decision", nil, []pstep{
			{0, 8, 0, 5, -1, ""},
			{2, 5, 0, 3, -1, ""},
			{4, 3, 0, 2, -1, ""},
			{6, 2, 0, 1, -1, ""},
			// Started at zero (initial-scale 0) and never saw traffic: no
			// grace period to wait out.
			{8, 1, 0, 0, 0, "scale to zero"},
		}},
		{"the shared rate limits apply after it", []func(*autoscaling.Spec){func(s *autoscaling.Spec) { s.MaxScaleUpRate = 2 }}, []pstep{
			{0, 1, 1000, 2, -1, "max-scale-up-rate limits to 2 pods"},
		}},
		{"a growth factor of 3", []func(*autoscaling.Spec){func(s *autoscaling.Spec) { s.Exponential.GrowthFactor = 3 }}, []pstep{
			{0, 2, 100, 18, -1, ""}, // 2, 6, 18 ≥ 10
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runSteps(t, New(policySpec(autoscaling.ClassExponential, 0, tt.mods...), at(0), 0), tt.steps)
		})
	}
	for _, c := range []struct {
		base, g float64
		need    int
		want    int
	}{{1, 2, 1, 1}, {1, 2, 1024, 1024}, {1, 2, 1025, 2048}, {5, 1.1, 6, 6}, {1, 1, 7, 7}, {3, 1.5, 4, 5}} {
		if got := grow(c.base, c.g, c.need); got != c.want {
			t.Errorf("grow(%v, %v, %d) = %d, want %d", c.base, c.g, c.need, got, c.want)
		}
	}
}

// simulate runs d over a plant where the observed concurrency is the load
// and pods become ready `delay` ticks after they are decided (and go away
// at once), deciding every 2s from second 0 to end. It returns the ready
// pods and the demand (ceil(load / 10)) at every tick.
func simulate(d *Decider, start, delay int, end float64, load func(t float64) float64) (ready, need []int) {
	decided := []int{}
	r := start
	for t := 0.0; t <= end; t += 2 {
		l := load(t)
		got := d.Decide(obs(t, r, l, l))
		decided = append(decided, got.Scale)
		ready = append(ready, r)
		need = append(need, ceilPods(l, 10))
		// Next tick's ready pods: removals are immediate, additions arrive
		// after the delay.
		if k := len(decided) - delay; k >= 0 {
			r = min(got.Scale, max(decided[k], min(r, got.Scale)))
		} else {
			r = min(got.Scale, r)
		}
	}
	return ready, need
}

func TestPIDSettlesOnAStepWithoutOscillating(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delay int
		kd    float64
		from  float64
		to    float64
		// signs bounds the sign changes of the error; over the overshoot
		// (or undershoot), in pods.
		signs, over int
	}{
		{"up, pods ready after 1 tick", 1, 0.1, 10, 285, 0, 0},
		{"up, pods ready after 5 ticks", 5, 0.1, 10, 285, 0, 0},
		{"down", 3, 0.1, 285, 25, 0, 0},
		// A strong derivative (4s of trend) overshoots a step — the trend it
		// extrapolates stops at once — then settles: damped, not oscillating.
		{"up, strong derivative", 3, 4, 10, 285, 2, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := policySpec(autoscaling.ClassPID, 0, func(s *autoscaling.Spec) { s.PID.Kd = tc.kd })
			start := ceilPods(tc.from, 10)
			d := Resume(s, at(0), start)
			load := func(t float64) float64 {
				if t < 100 {
					return tc.from
				}
				return tc.to
			}
			ready, need := simulate(d, start, tc.delay, 400, load)
			final := need[len(need)-1]
			// Settled: the last 100 seconds at the demand.
			for i := len(ready) - 50; i < len(ready); i++ {
				if ready[i] != final {
					t.Fatalf("not settled at tick %d: ready %v", i, ready)
				}
			}
			// Without oscillating: the error changes sign at most once, and the
			// overshoot stays within a pod.
			signs, last := 0, 0
			peak, low := 0, 1<<30
			for i := 50; i < len(ready); i++ { // from the step on
				e := need[i] - ready[i]
				sg := 0
				if e > 0 {
					sg = 1
				} else if e < 0 {
					sg = -1
				}
				if sg != 0 && last != 0 && sg != last {
					signs++
				}
				if sg != 0 {
					last = sg
				}
				peak, low = max(peak, ready[i]), min(low, ready[i])
			}
			if signs > tc.signs {
				t.Fatalf("error changed sign %d times: ready %v", signs, ready[50:])
			}
			if tc.to > tc.from && peak > final+tc.over {
				t.Fatalf("overshoot to %d for %d: %v", peak, final, ready[50:])
			}
			if tc.to < tc.from && low < final-tc.over {
				t.Fatalf("undershoot to %d for %d: %v", low, final, ready[50:])
			}
			t.Logf("ready after the step: %v", ready[50:80])
		})
	}
}

func TestPIDAntiWindup(t *testing.T) {
	// Pinned at max-scale for five minutes by a load needing 50 pods, then
	// the load needs 3: a wound-up integral would hold the maximum for
	// minutes; with anti-windup the count leaves it at once.
	s := policySpec(autoscaling.ClassPID, 0, func(s *autoscaling.Spec) { s.MaxScale = 10 })
	d := Resume(s, at(0), 10)
	load := func(t float64) float64 {
		if t < 300 {
			return 500
		}
		return 30
	}
	ready, _ := simulate(d, 10, 1, 400, load)
	if ready[149] != 10 {
		t.Fatalf("pinned at max: %v", ready[140:150])
	}
	// The first decision after the drop (tick 150) already leaves the
	// maximum, as far as max-scale-down-rate allows.
	if ready[151] != 5 {
		t.Fatalf("ready %d after the first decision since the load dropped, want 5: %v", ready[151], ready[148:160])
	}
	if ready[len(ready)-1] != 3 {
		t.Fatalf("settled at %d, want 3: %v", ready[len(ready)-1], ready[148:])
	}
}

func TestPIDDerivativeLeadsARamp(t *testing.T) {
	ramp := func(t float64) float64 { return 10 + 2*t } // 0.2 pods more per second
	run := func(kd float64) []int {
		s := policySpec(autoscaling.ClassPID, 0, func(s *autoscaling.Spec) { s.PID.Kd = kd })
		ready, _ := simulate(Resume(s, at(0), 1), 1, 1, 200, ramp)
		return ready
	}
	plain, lead := run(0), run(20)
	ahead := 0
	for i := range plain {
		if lead[i] < plain[i] {
			t.Fatalf("tick %d: with derivative %d < %d without", i, lead[i], plain[i])
		}
		if lead[i] > plain[i] {
			ahead++
		}
	}
	if ahead < len(plain)/2 {
		t.Fatalf("derivative ahead on only %d of %d ticks", ahead, len(plain))
	}
}

func TestPIDStartsBumpless(t *testing.T) {
	s := policySpec(autoscaling.ClassPID, 0)
	// A restart with 10 pods under a load for 10 keeps them.
	d := Resume(s, at(0), 10)
	for i := 0; i < 100; i++ {
		if got := d.Decide(obs(float64(2*i), 10, 100, 100)); got.Desired != 10 {
			t.Fatalf("tick %d: %+v", i, got)
		}
	}
	// A new service under load gets its demand at once.
	d = New(s, at(0), 0)
	if got := d.Decide(obs(0, 0, 100, 100)); got.Desired != 10 {
		t.Fatalf("new service: %+v", got)
	}
}
