package autoscaling

import (
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestDefaultsAreKnatives pins every default to Knative's KPA (and
// Kubernetes' HPA) documented value, written out here rather than read
// from DefaultDefaults — but the class: Swell's default is its own,
// adaptive, which reads the same settings.
func TestDefaultsAreKnatives(t *testing.T) {
	want := Spec{
		Class:                   ClassAdaptive,
		Metric:                  MetricConcurrency,
		Metrics:                 []Metric{MetricConcurrency},
		Averaging:               AveragingLinear,
		CPUTarget:               ResourceTarget{Percent: 70},
		MemoryTarget:            ResourceTarget{Percent: 80},
		Gauge:                   GaugeSpec{Path: "/metrics", Aggregation: GaugeAverage},
		ContainerConcurrency:    0,
		Target:                  100, // container-concurrency-target-default
		TargetUtilization:       0.7,
		StableWindow:            60 * time.Second,
		PanicWindow:             6 * time.Second, // 10% of 60s
		PanicThreshold:          2.0,
		MaxScaleUpRate:          1000,
		MaxScaleDownRate:        2,
		MinScale:                0,
		MaxScale:                0,
		InitialScale:            1,
		ActivationScale:         1,
		ScaleDownDelay:          0,
		ScaleToZeroGracePeriod:  30 * time.Second,
		ScaleToZeroPodRetention: 0,
		ScaleToZeroEnabled:      true,
		TargetBurstCapacity:     211,
		HPA: HPAParams{
			ToleranceUp: 0.1, ToleranceDown: 0.1,
			ScaleUp: HPARules{StabilizationWindow: 0, SelectPolicy: "Max", Policies: []HPAPolicy{
				{Type: "Pods", Value: 4, Period: 15 * time.Second},
				{Type: "Percent", Value: 100, Period: 15 * time.Second},
			}},
			ScaleDown: HPARules{StabilizationWindow: 300 * time.Second, SelectPolicy: "Max", Policies: []HPAPolicy{
				{Type: "Percent", Value: 100, Period: 15 * time.Second},
			}},
		},
		Exponential: ExponentialParams{GrowthFactor: 2.0, ShrinkFactor: 1.5},
		PID:         PIDParams{Kp: 0.5, Ki: 0.1, Kd: 0.1, DerivativeFilter: 5 * time.Second},
	}
	if got := DefaultSpec(); !reflect.DeepEqual(got, want) {
		t.Errorf("DefaultSpec:\n got %+v\nwant %+v", got, want)
	}
	d := DefaultDefaults()
	if d.RPSTarget != 200 || d.ConcurrencyTarget != 100 || d.TickInterval != 2*time.Second ||
		!d.EnableScaleToZero || d.AllowZeroInitialScale || d.MaxScaleLimit != 0 || d.PanicWindowPercentage != 10 {
		t.Errorf("cluster-only defaults: %+v", d)
	}
	rps, err := Parse(map[string]string{Prefix + KeyMetric: "rps"}, 0, d)
	if err != nil || rps.Target != 200 {
		t.Errorf("rps default target = %v, %v; want 200", rps.Target, err)
	}
	if got := want.TargetPerPod(); got != 70 {
		t.Errorf("TargetPerPod = %v, want 70", got)
	}
	// An empty ConfigMap gives the built-in defaults.
	if got, err := ParseDefaults(nil); err != nil || !reflect.DeepEqual(got, d) {
		t.Errorf("ParseDefaults(nil) = %+v, %v", got, err)
	}
}

func TestTargetPerPodFloor(t *testing.T) {
	s := Spec{Target: TargetMin, TargetUtilization: 0.01}
	if got := s.TargetPerPod(); got != TargetMin {
		t.Errorf("TargetPerPod = %v, want %v", got, TargetMin)
	}
}

// TestTarget covers Knative's resolution of the target from the metric,
// containerConcurrency and the target key.
func TestTarget(t *testing.T) {
	for _, c := range []struct {
		metric, target string
		cc             int
		want           float64
	}{
		{"concurrency", "", 0, 100},
		{"concurrency", "", 10, 10},   // containerConcurrency is the default
		{"concurrency", "5", 10, 5},   // below it: as given
		{"concurrency", "50", 10, 10}, // above it: lowered to it
		{"concurrency", "50", 0, 50},
		{"rps", "", 0, 200},
		{"rps", "", 10, 200},  // containerConcurrency is not a rate
		{"rps", "50", 10, 50}, // and does not cap one
	} {
		m := map[string]string{Prefix + KeyMetric: c.metric}
		if c.target != "" {
			m[Prefix+KeyTarget] = c.target
		}
		s, err := Parse(m, c.cc, DefaultDefaults())
		if err != nil {
			t.Fatal(err)
		}
		if s.Target != c.want || s.ContainerConcurrency != c.cc {
			t.Errorf("%s target=%q cc=%d: target %v, want %v", c.metric, c.target, c.cc, s.Target, c.want)
		}
	}
}

// TestDefaultsPrecedence: a service's key beats the cluster's, and the
// cluster's beats the built-in one; derived values follow whichever wins.
func TestDefaultsPrecedence(t *testing.T) {
	d, err := ParseDefaults(map[string]string{
		KeyWindow:                "120s",
		KeyPanicWindowPercentage: "5",
		KeyHPAToleranceUp:        "0.2",
		KeyMinScale:              "1",
		KeyMaxScale:              "50",
		KeyMaxScaleLimit:         "100",
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		ann  map[string]string
		want func(Spec) bool
	}{
		{"cluster window and percentage", nil, func(s Spec) bool {
			return s.StableWindow == 120*time.Second && s.PanicWindow == 6*time.Second
		}},
		{"service window, cluster percentage", map[string]string{KeyWindow: "30s"}, func(s Spec) bool {
			return s.PanicWindow == 1500*time.Millisecond
		}},
		{"panic window at least 1s", map[string]string{KeyWindow: "10s"}, func(s Spec) bool {
			return s.PanicWindow == time.Second
		}},
		{"cluster direction, built-in other", nil, func(s Spec) bool {
			return s.HPA.ToleranceUp == 0.2 && s.HPA.ToleranceDown == 0.1
		}},
		{"service both beats cluster direction", map[string]string{KeyHPATolerance: "0.05"}, func(s Spec) bool {
			return s.HPA.ToleranceUp == 0.05 && s.HPA.ToleranceDown == 0.05
		}},
		{"service direction beats service both", map[string]string{KeyHPATolerance: "0.05", KeyHPAToleranceDown: "0.3"}, func(s Spec) bool {
			return s.HPA.ToleranceUp == 0.05 && s.HPA.ToleranceDown == 0.3
		}},
		{"cluster bounds", nil, func(s Spec) bool { return s.MinScale == 1 && s.MaxScale == 50 }},
		{"service bounds", map[string]string{KeyMinScale: "0", KeyMaxScale: "100"}, func(s Spec) bool {
			return s.MinScale == 0 && s.MaxScale == 100
		}},
	} {
		ann := map[string]string{}
		for k, v := range c.ann {
			ann[Prefix+k] = v
		}
		s, err := Parse(ann, 0, d)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
		} else if !c.want(s) {
			t.Errorf("%s: %+v", c.name, s)
		}
	}
}

// TestConflicts covers values each fine alone but contradicting another,
// with the whole message, which blames the key the user wrote.
func TestConflicts(t *testing.T) {
	d := DefaultDefaults()
	d.MaxScale = 5
	for _, c := range []struct {
		name string
		ann  map[string]string
		d    Defaults
		want []string
	}{
		{"min over max", map[string]string{KeyMinScale: "5", KeyMaxScale: "3"}, DefaultDefaults(), []string{
			`autoscaling.swell.run/min-scale: "5" is greater than max-scale 3; accepted: an integer ≥ 0, at most max-scale when that is > 0`}},
		{"min over cluster max", map[string]string{KeyMinScale: "10"}, d, []string{
			`autoscaling.swell.run/min-scale: "10" is greater than max-scale 5 (cluster default); accepted: an integer ≥ 0, at most max-scale when that is > 0`}},
		{"max under cluster min", map[string]string{KeyMaxScale: "2"}, func() Defaults { d := DefaultDefaults(); d.MinScale = 3; return d }(), []string{
			`autoscaling.swell.run/max-scale: "2" is less than min-scale 3 (cluster default); accepted: 0 (no limit) or an integer ≥ min-scale`}},
		{"max 0 means none", map[string]string{KeyMinScale: "100", KeyMaxScale: "0"}, DefaultDefaults(), nil},
		{"min equal max", map[string]string{KeyMinScale: "3", KeyMaxScale: "3"}, DefaultDefaults(), nil},
		{"initial over max", map[string]string{KeyInitialScale: "4", KeyMaxScale: "3"}, DefaultDefaults(), []string{
			`autoscaling.swell.run/initial-scale: "4" is greater than max-scale 3; accepted: an integer at most max-scale when that is > 0`}},
		{"activation over max", map[string]string{KeyActivationScale: "4", KeyMaxScale: "3"}, DefaultDefaults(), []string{
			`autoscaling.swell.run/activation-scale: "4" is greater than max-scale 3; accepted: an integer ≥ 1, at most max-scale when that is > 0`}},
		{"activation over min is fine", map[string]string{KeyActivationScale: "2", KeyMinScale: "5"}, DefaultDefaults(), nil},
		{"all three over max", map[string]string{KeyMinScale: "4", KeyInitialScale: "4", KeyActivationScale: "4", KeyMaxScale: "3"}, DefaultDefaults(), []string{
			`autoscaling.swell.run/min-scale: "4" is greater than max-scale 3`,
			`autoscaling.swell.run/initial-scale: "4" is greater than max-scale 3`,
			`autoscaling.swell.run/activation-scale: "4" is greater than max-scale 3`}},
		{"max over limit", map[string]string{KeyMaxScale: "20"}, func() Defaults { d := DefaultDefaults(); d.MaxScale, d.MaxScaleLimit = 10, 10; return d }(), []string{
			`autoscaling.swell.run/max-scale: "20" is greater than max-scale-limit 10 (cluster default); accepted: an integer from 1 to max-scale-limit (10)`}},
		{"unlimited under limit", map[string]string{KeyMaxScale: "0"}, func() Defaults { d := DefaultDefaults(); d.MaxScale, d.MaxScaleLimit = 10, 10; return d }(), []string{
			`autoscaling.swell.run/max-scale: "0" means no limit, which is not allowed with max-scale-limit 10 (cluster default)`}},
		{"zero initial scale not allowed", map[string]string{KeyInitialScale: "0"}, DefaultDefaults(), []string{
			`autoscaling.swell.run/initial-scale: "0" is not allowed with allow-zero-initial-scale false (cluster default); accepted: an integer ≥ 1, or 0 when enable-scale-to-zero and allow-zero-initial-scale are both true`}},
		{"pid without gain", map[string]string{KeyPIDKp: "0", KeyPIDKi: "0"}, DefaultDefaults(), []string{
			`autoscaling.swell.run/pid-kp: "0" leaves the controller without a gain along with pid-ki 0; accepted: a number > 0 when pid-ki is 0`}},
		{"pid without gain, ki given", map[string]string{KeyPIDKi: "0"}, func() Defaults { d := DefaultDefaults(); d.PID.Kp = 0; return d }(), []string{
			`autoscaling.swell.run/pid-ki: "0" leaves the controller without a gain along with pid-kp 0 (cluster default)`}},
		// A key with its own problem is not also reported in a conflict.
		{"bad value no conflict", map[string]string{KeyMinScale: "x", KeyMaxScale: "3"}, DefaultDefaults(), []string{
			`autoscaling.swell.run/min-scale: "x" is not an integer`}},
	} {
		ann := map[string]string{}
		for k, v := range c.ann {
			ann[Prefix+k] = v
		}
		_, err := Parse(ann, 0, c.d)
		got := splitErrors(err)
		if len(got) != len(c.want) {
			t.Errorf("%s: got %d errors %q, want %d", c.name, len(got), got, len(c.want))
			continue
		}
		for i := range got {
			if !strings.HasPrefix(got[i], c.want[i]) {
				t.Errorf("%s:\n got %s\nwant %s", c.name, got[i], c.want[i])
			}
		}
	}
}

// splitErrors returns each joined error's message.
func splitErrors(err error) []string {
	if err == nil {
		return nil
	}
	var out []string
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			out = append(out, e.Error())
		}
		return out
	}
	return []string{err.Error()}
}

func TestClusterDefaultsConflicts(t *testing.T) {
	for _, c := range []struct {
		data map[string]string
		want string
	}{
		{map[string]string{KeyMinScale: "5", KeyMaxScale: "3"}, `min-scale: "5" is greater than max-scale 3`},
		{map[string]string{KeyMaxScaleLimit: "10"}, `max-scale-limit: "10" does not allow the unlimited max-scale 0 (built-in default); accepted: 0 (no limit), or set max-scale from 1 to max-scale-limit`},
		{map[string]string{KeyInitialScale: "0", KeyAllowZeroInitialScale: "true", KeyEnableScaleToZero: "false"}, `initial-scale: "0" is not allowed with enable-scale-to-zero false`},
		{map[string]string{KeyEnableScaleToZero: "false", KeyAllowZeroInitialScale: "true", KeyInitialScale: "0"}, `initial-scale: "0" is not allowed`},
	} {
		_, err := ParseDefaults(c.data)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%v:\n got %v\nwant %s", c.data, err, c.want)
		}
	}
	// Flags blame the flag given when the other value is a default.
	d := DefaultDefaults()
	d.InitialScale, d.AllowZeroInitialScale = 0, true
	_, _, err := resolveFlags(t, d, "--enable-scale-to-zero=false")
	if want := `--enable-scale-to-zero: "false" does not allow initial-scale 0 (default); accepted: true, or an initial-scale ≥ 1`; err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}

func TestUnknownKeys(t *testing.T) {
	for _, c := range []struct {
		key, want string
	}{
		{"autoscaling.swell.run/minScale", `autoscaling.swell.run/minScale: unknown key (value "1"); accepted: a key listed in docs/configuration.md; did you mean autoscaling.swell.run/min-scale?`},
		{"autoscaling.swell.run/min_scale", "did you mean autoscaling.swell.run/min-scale?"},
		{"autoscaling.swell.run/MIN-SCALE", "did you mean autoscaling.swell.run/min-scale?"},
		{"autoscaling.swell.run/min-scal", "did you mean autoscaling.swell.run/min-scale?"},
		{"autoscaling.swell.run/mni-scale", "did you mean autoscaling.swell.run/min-scale?"},
		{"autoscaling.swell.run/stable-window", "did you mean autoscaling.swell.run/window?"},
		{"autoscaling.swell.run/target-utilization", "did you mean autoscaling.swell.run/target-utilization-percentage?"},
		{"autoscaling.swell.run/hpa-tolerence-up", "did you mean autoscaling.swell.run/hpa-tolerance-up?"},
		{"autoscaling.swell.run/metric-aggregation-algorithm", "did you mean autoscaling.swell.run/window-averaging?"},
		{"autoscaling.swell.run/scale", `autoscaling.swell.run/scale: unknown key (value "1"); accepted: a key listed in docs/configuration.md`},
		{"autoscaling.swell.run/zzzzzzzz", "accepted: a key listed in docs/configuration.md"},
		{"autoscaling.swell.run/", "unknown key"},
		// A near miss of the prefix in front of a known key.
		{"autoscaling.swel.run/min-scale", `autoscaling.swel.run/min-scale: unknown key (value "1"); accepted: a key listed in docs/configuration.md; did you mean autoscaling.swell.run/min-scale?`},
		{"Autoscaling.Swell.Run/min-scale", "did you mean autoscaling.swell.run/min-scale?"},
		// Cluster-wide settings are not per service.
		{"autoscaling.swell.run/enable-scale-to-zero", `autoscaling.swell.run/enable-scale-to-zero: is a cluster-wide setting, not a per-service key (value "1"); accepted: only in the cluster defaults, as enable-scale-to-zero`},
		{"autoscaling.swell.run/tick-interval", "is a cluster-wide setting"},
	} {
		_, err := Parse(map[string]string{c.key: "1"}, 0, DefaultDefaults())
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s:\n got %v\nwant %s", c.key, err, c.want)
		}
		var ke *Error
		if !errors.As(err, &ke) || ke.Name != c.key || ke.Value != "1" {
			t.Errorf("%s: error %#v", c.key, ke)
		}
	}
	// Outside the prefix, anything goes: other tools' annotations.
	for _, k := range []string{"autoscaling.knative.dev/min-scale", "swell.run/container-concurrency", "kubectl.kubernetes.io/last-applied-configuration",
		"autoscaling.swell.run.min-scale", "autoscaling.swell.io/whatever", "app"} {
		if _, err := Parse(map[string]string{k: "x"}, 0, DefaultDefaults()); err != nil {
			t.Errorf("%s: %v", k, err)
		}
	}
}

func TestUnknownDefaultsKeys(t *testing.T) {
	for _, c := range []struct {
		key, want string
	}{
		{"stable-window", `stable-window: unknown key (value "1"); accepted: a key listed in docs/configuration.md; did you mean window?`},
		{"container-concurrency-target-percentage", "did you mean target-utilization-percentage?"},
		{"autoscaling.swell.run/min-scale", "did you mean min-scale?"},
		{"tick-intervall", "did you mean tick-interval?"},
		{"target", `target: is a per-service key, not a cluster-wide default (value "1"); accepted: container-concurrency-target-default or requests-per-second-target-default`},
	} {
		_, err := ParseDefaults(map[string]string{c.key: "1"})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s:\n got %v\nwant %s", c.key, err, c.want)
		}
	}
	if _, err := ParseDefaults(map[string]string{"_example": "# documentation\nwindow: nonsense"}); err != nil {
		t.Errorf("_example: %v", err)
	}
}

// TestAllErrorsStableOrder: every problem is reported, unknown keys
// first, then each key in documentation order, then conflicts — the same
// every time, whatever the map's iteration order.
func TestAllErrorsStableOrder(t *testing.T) {
	ann := map[string]string{
		Prefix + "zz-unknown":                   "1",
		Prefix + "aa-unknown":                   "1",
		Prefix + KeyPIDKd:                       "-1",
		Prefix + KeyClass:                       "nope",
		Prefix + KeyWindow:                      "1s",
		Prefix + KeyInitialScale:                "9",
		Prefix + KeyMaxScale:                    "3",
		Prefix + KeyMinScale:                    "4",
		Prefix + KeyTargetUtilizationPercentage: "500",
		"unrelated":                             "x",
	}
	want := []string{
		Prefix + "aa-unknown: unknown key",
		Prefix + "zz-unknown: unknown key",
		Prefix + KeyClass + `: "nope"`,
		Prefix + KeyTargetUtilizationPercentage + `: "500"`,
		Prefix + KeyWindow + `: "1s"`,
		Prefix + KeyPIDKd + `: "-1"`,
		ContainerConcurrencyKey + `: "-5"`,
		Prefix + KeyMinScale + `: "4" is greater than max-scale 3`,
		Prefix + KeyInitialScale + `: "9" is greater than max-scale 3`,
	}
	var first string
	for i := 0; i < 20; i++ {
		_, err := Parse(ann, -5, DefaultDefaults())
		got := splitErrors(err)
		if i == 0 {
			first = err.Error()
			if len(got) != len(want) {
				t.Fatalf("got %d errors, want %d:\n%s", len(got), len(want), first)
			}
			for j := range want {
				if !strings.HasPrefix(got[j], want[j]) {
					t.Errorf("error %d: got %s, want %s…", j, got[j], want[j])
				}
			}
		} else if err.Error() != first {
			t.Fatalf("order changed:\n%s\n---\n%s", first, err)
		}
	}
}

// TestDefaultsNotAliased: changing a Spec's policies does not change the
// Defaults it came from, nor later Specs.
func TestDefaultsNotAliased(t *testing.T) {
	d := DefaultDefaults()
	s, err := Parse(nil, 0, d)
	if err != nil {
		t.Fatal(err)
	}
	s.HPA.ScaleUp.Policies[0].Value = 99
	if d.HPA.ScaleUp.Policies[0].Value != 4 {
		t.Error("Spec shares its policies with the Defaults")
	}
	s2, _ := Parse(nil, 0, d)
	if s2.HPA.ScaleUp.Policies[0].Value != 4 {
		t.Error("a later Spec sees the change")
	}
}

func TestParseContainerConcurrency(t *testing.T) {
	for _, c := range []struct {
		ann  map[string]string
		want int
		err  string
	}{
		{nil, 0, ""},
		{map[string]string{ContainerConcurrencyKey: "10"}, 10, ""},
		{map[string]string{ContainerConcurrencyKey: " 0 "}, 0, ""},
		{map[string]string{ContainerConcurrencyKey: "-1"}, 0, `swell.run/container-concurrency: "-1" is out of range; accepted: an integer ≥ 0 (0: no limit)`},
		{map[string]string{ContainerConcurrencyKey: "x"}, 0, `swell.run/container-concurrency: "x" is not an integer; accepted: an integer ≥ 0 (0: no limit)`},
	} {
		got, err := ParseContainerConcurrency(c.ann)
		if c.err != "" {
			if err == nil || err.Error() != c.err {
				t.Errorf("%v: got %v, want %s", c.ann, err, c.err)
			}
		} else if err != nil || got != c.want {
			t.Errorf("%v: got %d, %v", c.ann, got, err)
		}
	}
}

func TestValidate(t *testing.T) {
	mod := func(f func(*Spec)) Spec {
		s := DefaultSpec()
		f(&s)
		return s
	}
	for _, c := range []struct {
		name string
		spec Spec
		want []string
	}{
		{"default", DefaultSpec(), nil},
		{"panic window over stable", mod(func(s *Spec) { s.PanicWindow = 2 * time.Minute }),
			[]string{`autoscaling.swell.run/panic-window-percentage: "200" is out of range`}},
		{"panic window under 1s", mod(func(s *Spec) { s.StableWindow, s.PanicWindow = 6*time.Second, 500*time.Millisecond }),
			[]string{`autoscaling.swell.run/panic-window-percentage: "8.333333333333334" gives a panic window of 500ms, shorter than one 1s bucket`}},
		{"target over containerConcurrency", mod(func(s *Spec) { s.ContainerConcurrency, s.Target = 10, 20 }),
			[]string{`autoscaling.swell.run/target: "20" is greater than swell.run/container-concurrency 10`}},
		{"rps target over containerConcurrency is fine", mod(func(s *Spec) { s.Metric, s.ContainerConcurrency, s.Target = MetricRPS, 10, 20 }), nil},
		{"negative containerConcurrency", mod(func(s *Spec) { s.ContainerConcurrency = -1 }),
			[]string{`swell.run/container-concurrency: "-1" is out of range`}},
		{"NaN target", mod(func(s *Spec) { s.Target = math.NaN() }),
			[]string{`autoscaling.swell.run/target: "NaN" is out of range`}},
		{"hpa tolerance 1", mod(func(s *Spec) { s.HPA.ToleranceDown = 1 }),
			[]string{`autoscaling.swell.run/hpa-tolerance-down: "1" is out of range`}},
		{"no policies", mod(func(s *Spec) { s.HPA.ScaleDown.Policies = nil }),
			[]string{`autoscaling.swell.run/hpa-scale-down-policies: "" is not a policy list: it has no policy`}},
		{"bad policy", mod(func(s *Spec) { s.HPA.ScaleUp.Policies = []HPAPolicy{{Type: "Pods", Value: 0, Period: time.Second}} }),
			[]string{`autoscaling.swell.run/hpa-scale-up-policies: "Pods=0/1s" is not a policy list: "Pods=0/1s" is out of range`}},
		{"zero initial scale without scale to zero", mod(func(s *Spec) { s.InitialScale, s.ScaleToZeroEnabled = 0, false }),
			[]string{`autoscaling.swell.run/initial-scale: "0" is not allowed with enable-scale-to-zero false`}},
		{"zero initial scale with scale to zero", mod(func(s *Spec) { s.InitialScale = 0 }), nil},
		{"min over max", mod(func(s *Spec) { s.MinScale, s.MaxScale = 3, 2 }),
			[]string{`autoscaling.swell.run/min-scale: "3" is greater than max-scale 2`}},
	} {
		got := splitErrors(c.spec.Validate())
		if len(got) != len(c.want) {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
			continue
		}
		for i := range got {
			if !strings.HasPrefix(got[i], c.want[i]) {
				t.Errorf("%s:\n got %s\nwant %s", c.name, got[i], c.want[i])
			}
		}
	}
	// The zero Spec is invalid, and says so without panicking.
	if err := (Spec{}).Validate(); err == nil {
		t.Error("zero Spec is valid")
	}
}

func TestErrorFields(t *testing.T) {
	_, err := Parse(map[string]string{Prefix + KeyMinScale: "abc"}, 0, DefaultDefaults())
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("%v is not an *Error", err)
	}
	want := Error{Key: KeyMinScale, Name: Prefix + KeyMinScale, Value: "abc", Problem: "is not an integer",
		Accepted: "an integer ≥ 0, at most max-scale when that is > 0"}
	if *e != want {
		t.Errorf("got %+v, want %+v", *e, want)
	}
	if got := e.Error(); got != `autoscaling.swell.run/min-scale: "abc" is not an integer; accepted: an integer ≥ 0, at most max-scale when that is > 0` {
		t.Errorf("message %s", got)
	}
}

// TestErrorMessage: the three shapes of a message, for a bad value, a bad
// key and a problem with nothing to quote.
func TestErrorMessage(t *testing.T) {
	for _, tc := range []struct {
		e    Error
		want string
	}{
		{Error{Name: "--window", Value: "5s", Problem: "is out of range", Accepted: "a duration from 6s to 1h"},
			`--window: "5s" is out of range; accepted: a duration from 6s to 1h`},
		{Error{Name: "class", Value: "kap", Problem: "is not a known policy", Accepted: "kpa or hpa", Suggestion: `"kpa"`},
			`class: "kap" is not a known policy; accepted: kpa or hpa; did you mean "kpa"?`},
		{Error{Name: "class", Problem: "is not a known policy"}, `class: "" is not a known policy`},
		{Error{Name: "min-scal", Value: "1", Problem: "unknown key", KeyProblem: true, Accepted: "a known key", Suggestion: "min-scale"},
			`min-scal: unknown key (value "1"); accepted: a known key; did you mean min-scale?`},
		{Error{Name: "services[0]", Problem: "has no command", NoValue: true, Accepted: "a list of words"},
			`services[0]: has no command; accepted: a list of words`},
		{Error{Value: "Hello", Problem: "is not a valid name"}, `"Hello" is not a valid name`},
		{Error{Problem: "the file is empty", NoValue: true, KeyProblem: true}, `the file is empty`},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("%+v:\n got %s\nwant %s", tc.e, got, tc.want)
		}
	}
}

func TestKeysLists(t *testing.T) {
	keys, cluster := Keys(), ClusterKeys()
	if keys[0] != KeyClass || !slices.Contains(keys, KeyTarget) || slices.Contains(keys, KeyTickInterval) {
		t.Errorf("Keys = %v", keys)
	}
	if slices.Contains(cluster, KeyTarget) || !slices.Contains(cluster, KeyTickInterval) || !slices.Contains(cluster, KeyWindow) {
		t.Errorf("ClusterKeys = %v", cluster)
	}
	if i, ok := Info(KeyWindow); !ok || i.Default != "1m" || i.Type != "duration" {
		t.Errorf("Info(window) = %+v", i)
	}
	if i, _ := Info(KeyClass); i.Type != "kpa|hpa|exponential|pid|adaptive|hybrid" || i.Default != "adaptive" {
		t.Errorf("Info(class) = %+v", i)
	}
	if _, ok := Info("nope"); ok {
		t.Error("Info(nope) found")
	}
}
