package autoscaling

import (
	"errors"
	"flag"
	"io"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"
)

// good is a value a key accepts and what it becomes.
type good struct {
	text string
	want any
	// with are other keys, bare, that the value needs alongside.
	with map[string]string
}

// bad is a value a key refuses and a piece of the problem reported.
type bad struct {
	text    string
	problem string
	with    map[string]string
}

// keyCase is every case for one key, and how to read its value back.
type keyCase struct {
	key  string
	get  func(Spec, Defaults) any
	good []good
	bad  []bad
}

func sec(n float64) time.Duration { return time.Duration(n * float64(time.Second)) }

const (
	notNumber   = "is not a number"
	notInt      = "is not an integer"
	notDuration = "is not a duration"
	outOfRange  = problemRange
)

var keyCases = []keyCase{
	{key: KeyClass, get: func(s Spec, _ Defaults) any { return s.Class },
		good: []good{{"hpa", ClassHPA, nil}, {" PID ", ClassPID, nil}, {"KPA", ClassKPA, nil}, {"exponential", ClassExponential, nil}},
		bad:  []bad{{"kpaa", `is not a known policy; accepted: kpa, hpa, exponential, pid, adaptive or hybrid; did you mean "kpa"?`, nil}, {"", "is not a known policy", nil}, {"cpu", "is not a known policy", nil}}},
	{key: KeyMetric, get: func(s Spec, _ Defaults) any { return []any{s.Metric, s.Metrics} },
		good: []good{
			{"rps", []any{MetricRPS, []Metric{MetricRPS}}, nil},
			{"Concurrency", []any{MetricConcurrency, []Metric{MetricConcurrency}}, nil},
			// Without a request metric, requests still wake and burst as
			// concurrency, but only cpu recommends pods.
			{"cpu", []any{MetricConcurrency, []Metric{MetricCPU}}, nil},
			{" cpu , RPS ", []any{MetricRPS, []Metric{MetricCPU, MetricRPS}}, nil},
			{"concurrency,memory", []any{MetricConcurrency, []Metric{MetricConcurrency, MetricMemory}}, nil},
		},
		bad: []bad{{"gpu", `lists "gpu", not a known metric`, nil}, {"rsp", `did you mean "rps"`, nil},
			{"concurrency,rps", "lists both concurrency and rps", nil}, {"cpu,cpu", "lists cpu twice", nil},
			{"", `lists "", not a known metric`, nil}, {"cpu,", `lists "", not a known metric`, nil},
			{"gauge", `"" is not set, but metric gauge lists gauge`, nil}}},
	{key: KeyTarget, get: func(s Spec, _ Defaults) any { return s.Target },
		good: []good{{"10", 10.0, nil}, {"0.01", 0.01, nil}, {" 2.5 ", 2.5, nil}, {"1e3", 1000.0, nil}},
		bad:  []bad{{"0", outOfRange, nil}, {"0.009", outOfRange, nil}, {"-1", outOfRange, nil}, {"abc", notNumber, nil}, {"NaN", notNumber, nil}, {"Inf", notNumber, nil}, {"1e400", notNumber, nil}, {"10%", notNumber, nil}}},
	{key: KeyTargetUtilizationPercentage, get: func(s Spec, _ Defaults) any { return s.TargetUtilization },
		good: []good{{"70", 0.7, nil}, {"70.5", 0.705, nil}, {"100", 1.0, nil}, {"1", 0.01, nil}, {"85%", 0.85, nil}},
		bad:  []bad{{"0.5", outOfRange, nil}, {"101", outOfRange, nil}, {"0", outOfRange, nil}, {"x", notNumber, nil}}},
	{key: KeyCPUTarget, get: func(s Spec, _ Defaults) any { return s.CPUTarget },
		good: []good{{"70%", ResourceTarget{Percent: 70}, nil}, {" 150 % ", ResourceTarget{Percent: 150}, nil},
			{"500m", ResourceTarget{Amount: 0.5}, nil}, {"1.5", ResourceTarget{Amount: 1.5}, nil}, {"2", ResourceTarget{Amount: 2}, nil},
			{"1%", ResourceTarget{Percent: 1}, nil}, {"1000%", ResourceTarget{Percent: 1000}, nil}},
		bad: []bad{{"0", outOfRange, nil}, {"0.5%", outOfRange, nil}, {"1001%", outOfRange, nil}, {"-1", outOfRange, nil},
			{"abc", "is not a percentage or a quantity", nil}, {"x%", "is not a percentage", nil}, {"NaN", "is not a percentage or a quantity", nil},
			{"Inf", outOfRange, nil}, {"500n", "is not a percentage or a quantity", nil}}},
	{key: KeyMemoryTarget, get: func(s Spec, _ Defaults) any { return s.MemoryTarget },
		good: []good{{"80%", ResourceTarget{Percent: 80}, nil}, {"512Mi", ResourceTarget{Amount: 512 << 20}, nil},
			{"1G", ResourceTarget{Amount: 1e9}, nil}, {"1Gi", ResourceTarget{Amount: 1 << 30}, nil}, {"1000000", ResourceTarget{Amount: 1e6}, nil}},
		bad: []bad{{"0Mi", outOfRange, nil}, {"-1Gi", outOfRange, nil}, {"1 GB", "is not a percentage or a quantity", nil}, {"%", "is not a percentage", nil}}},
	{key: KeyGauge, get: func(s Spec, _ Defaults) any { return s.Gauge.Selector },
		good: []good{{"num_requests_waiting", "num_requests_waiting", map[string]string{KeyMetric: "gauge", KeyGaugeTarget: "5"}},
			{`vllm:num_requests_waiting{model_name="llama"}`, `vllm:num_requests_waiting{model_name="llama"}`, map[string]string{KeyMetric: "concurrency,gauge", KeyGaugeTarget: "5"}},
			{"", "", nil}},
		bad: []bad{{"1abc", "is not a selector", map[string]string{KeyMetric: "gauge", KeyGaugeTarget: "5"}},
			{`x{a=b}`, "is not a selector", map[string]string{KeyMetric: "gauge", KeyGaugeTarget: "5"}},
			{"waiting", `"waiting" is set, but metric concurrency`, nil}}},
	{key: KeyGaugeTarget, get: func(s Spec, _ Defaults) any { return s.Gauge.Target },
		good: []good{{"5", 5.0, map[string]string{KeyMetric: "gauge", KeyGauge: "waiting"}}, {"0.25", 0.25, map[string]string{KeyMetric: "gauge", KeyGauge: "waiting"}}},
		bad: []bad{{"-1", outOfRange, nil}, {"x", notNumber, nil},
			{"0", "is not set, but metric gauge lists gauge", map[string]string{KeyMetric: "gauge", KeyGauge: "waiting"}}}},
	{key: KeyGaugePort, get: func(s Spec, _ Defaults) any { return s.Gauge.Port },
		good: []good{{"9090", 9090, nil}, {"0", 0, nil}, {"65535", 65535, nil}},
		bad:  []bad{{"65536", outOfRange, nil}, {"-1", outOfRange, nil}, {"http", notInt, nil}}},
	{key: KeyGaugePath, get: func(s Spec, _ Defaults) any { return s.Gauge.Path },
		good: []good{{"/metrics", "/metrics", nil}, {" /stats/prometheus ", "/stats/prometheus", nil}, {"/m?format=text", "/m?format=text", nil}},
		bad: []bad{{"metrics", "is not an absolute path", nil}, {"//evil.example/x", "is not an absolute path", nil},
			{"/a#b", "holds a fragment", nil}, {"/a b", "holds a fragment or a space", nil}, {"/" + strings.Repeat("a", 256), "longer than 256", nil},
			{"/a\x01", "control character", nil}}},
	{key: KeyGaugeAggregation, get: func(s Spec, _ Defaults) any { return s.Gauge.Aggregation },
		good: []good{{"sum", GaugeSum, nil}, {"Average", GaugeAverage, nil}},
		bad:  []bad{{"max", "is not a known aggregation", nil}}},
	{key: KeyWindow, get: func(s Spec, _ Defaults) any { return s.StableWindow },
		good: []good{{"60s", sec(60), nil}, {"1m30s", sec(90), nil}, {"90", sec(90), nil}, {"6s", sec(6), nil}, {"1h", time.Hour, nil}, {"3600", time.Hour, nil}},
		bad:  []bad{{"5s", outOfRange, nil}, {"1h1s", outOfRange, nil}, {"6.5s", problemWholeSeconds, nil}, {"abc", notDuration, nil}, {"-10s", outOfRange, nil}, {"0", outOfRange, nil}}},
	{key: KeyWindowAveraging, get: func(s Spec, _ Defaults) any { return s.Averaging },
		good: []good{{"exponential", AveragingExponential, nil}, {"Linear", AveragingLinear, nil}},
		bad:  []bad{{"ewma", "is not a known averaging", nil}}},
	{key: KeyPanicWindowPercentage, get: func(s Spec, _ Defaults) any { return s.PanicWindow },
		good: []good{{"10", sec(6), nil}, {"1", sec(1), nil}, {"100", sec(60), nil}, {"12.5", sec(7.5), nil}, {"5", sec(10), map[string]string{KeyWindow: "200s"}}},
		bad:  []bad{{"0.5", outOfRange, nil}, {"101", outOfRange, nil}, {"x", notNumber, nil}}},
	{key: KeyPanicThresholdPercentage, get: func(s Spec, _ Defaults) any { return s.PanicThreshold },
		good: []good{{"110", 1.1, nil}, {"1000", 10.0, nil}, {"200%", 2.0, nil}, {"150.5", 1.505, nil}},
		bad:  []bad{{"109.9", outOfRange, nil}, {"1001", outOfRange, nil}, {"x", notNumber, nil}}},
	{key: KeyMaxScaleUpRate, get: func(s Spec, _ Defaults) any { return s.MaxScaleUpRate },
		good: []good{{"1.01", 1.01, nil}, {"1000", 1000.0, nil}, {"1e6", 1e6, nil}},
		bad:  []bad{{"1", outOfRange, nil}, {"0.5", outOfRange, nil}, {"x", notNumber, nil}}},
	{key: KeyMaxScaleDownRate, get: func(s Spec, _ Defaults) any { return s.MaxScaleDownRate },
		good: []good{{"2", 2.0, nil}, {"1.5", 1.5, nil}},
		bad:  []bad{{"1", outOfRange, nil}, {"", notNumber, nil}}},
	{key: KeyMinScale, get: func(s Spec, _ Defaults) any { return s.MinScale },
		good: []good{{"0", 0, nil}, {"3", 3, nil}, {" 3 ", 3, nil}, {"3.0", 3, nil}, {"+2", 2, nil}},
		bad:  []bad{{"-1", outOfRange, nil}, {"1.5", notInt, nil}, {"abc", notInt, nil}, {"3000000000", outOfRange, nil}, {"99999999999999999999", outOfRange, nil}}},
	{key: KeyMinScaleSchedule, get: func(s Spec, _ Defaults) any { return s.MinScaleSchedule.String() },
		good: []good{
			{"Mon-Fri 08:00-18:00=3", "Mon-Fri 08:00-18:00=3", nil},
			{" tz=Europe/Berlin ; sat,SUN 10:00-14:00=1;Mon,Wed,Thu 22:00-06:00=2 ", "tz=Europe/Berlin; Sat,Sun 10:00-14:00=1; Mon,Wed,Thu 22:00-06:00=2", nil},
			{"Fri-Mon 00:00-24:00=1", "Mon,Fri-Sun 00:00-24:00=1", nil},
			{"* 9:00-17:30=4; tz=UTC", "* 09:00-17:30=4", nil},
			{"", "", nil},
			{"Mon-Fri 08:00-18:00=5", "Mon-Fri 08:00-18:00=5", map[string]string{KeyMaxScale: "5"}},
		},
		bad: []bad{
			{"Mon-Fri 08:00-18:00", "has no =PODS", nil},
			{"Mon-Fri 08:00-18:00=0", `asks for "0" pods`, nil},
			{"Mun 08:00-18:00=1", `names the day "Mun"`, nil},
			{"Mon 25:00-26:00=1", `starts at "25:00"`, nil},
			{"Mon 08:00-24:01=1", `ends at "24:01"`, nil},
			{"Mon 08:00-08:00=1", "spans no time", nil},
			{"Mon08:00-09:00=1", "is not DAYS HH:MM-HH:MM=PODS", nil},
			{"tz=Mars/Olympus; Mon 08:00-09:00=1", `unknown time zone "Mars/Olympus"`, nil},
			{"tz=UTC; tz=UTC", "names a time zone twice", nil},
			{"Mon 08:00-18:00=6", "asks for 6 pods, more than max-scale 5", map[string]string{KeyMaxScale: "5"}},
		}},
	{key: KeyMaxScale, get: func(s Spec, _ Defaults) any { return s.MaxScale },
		good: []good{{"0", 0, nil}, {"10", 10, nil}},
		bad:  []bad{{"-1", outOfRange, nil}, {"ten", notInt, nil}}},
	{key: KeyInitialScale, get: func(s Spec, _ Defaults) any { return s.InitialScale },
		good: []good{{"1", 1, nil}, {"5", 5, nil},
			{"0", 0, map[string]string{KeyEnableScaleToZero: "true", KeyAllowZeroInitialScale: "true"}}},
		bad: []bad{{"-1", outOfRange, nil}, {"0", "is not allowed with allow-zero-initial-scale false", nil},
			{"0", "is not allowed with enable-scale-to-zero false", map[string]string{KeyEnableScaleToZero: "false", KeyAllowZeroInitialScale: "true"}}}},
	{key: KeyActivationScale, get: func(s Spec, _ Defaults) any { return s.ActivationScale },
		good: []good{{"1", 1, nil}, {"3", 3, nil}},
		bad:  []bad{{"0", outOfRange, nil}, {"-1", outOfRange, nil}}},
	{key: KeyScaleDownDelay, get: func(s Spec, _ Defaults) any { return s.ScaleDownDelay },
		good: []good{{"0", 0 * time.Second, nil}, {"0s", 0 * time.Second, nil}, {"5m", 5 * time.Minute, nil}, {"1h", time.Hour, nil}},
		bad:  []bad{{"1.5s", problemWholeSeconds, nil}, {"-1s", outOfRange, nil}, {"1h1s", outOfRange, nil}}},
	{key: KeyScaleToZeroGracePeriod, get: func(s Spec, _ Defaults) any { return s.ScaleToZeroGracePeriod },
		good: []good{{"30s", sec(30), nil}, {"1ms", time.Millisecond, nil}, {"2h", 2 * time.Hour, nil}},
		bad:  []bad{{"0s", outOfRange, nil}, {"-1s", outOfRange, nil}, {"30 s", notDuration, nil}}},
	{key: KeyScaleToZeroPodRetentionPeriod, get: func(s Spec, _ Defaults) any { return s.ScaleToZeroPodRetention },
		good: []good{{"0s", 0 * time.Second, nil}, {"1m", time.Minute, nil}, {"1h", time.Hour, nil}, {"1.5s", sec(1.5), nil}},
		bad:  []bad{{"-1s", outOfRange, nil}, {"2h", outOfRange, nil}}},
	{key: KeyTargetBurstCapacity, get: func(s Spec, _ Defaults) any { return s.TargetBurstCapacity },
		good: []good{{"-1", -1.0, nil}, {"0", 0.0, nil}, {"211", 211.0, nil}, {"1.5", 1.5, nil}},
		bad:  []bad{{"-2", outOfRange, nil}, {"-0.5", outOfRange, nil}, {"lots", notNumber, nil}}},
	{key: KeyHPATolerance, get: func(s Spec, _ Defaults) any { return [2]float64{s.HPA.ToleranceUp, s.HPA.ToleranceDown} },
		good: []good{{"0.05", [2]float64{0.05, 0.05}, nil}, {"10%", [2]float64{0.1, 0.1}, nil}, {"0", [2]float64{0, 0}, nil},
			{"0.05", [2]float64{0.05, 0.3}, map[string]string{KeyHPAToleranceDown: "0.3"}}},
		bad: []bad{{"1", outOfRange, nil}, {"-0.1", outOfRange, nil}, {"100%", outOfRange, nil}}},
	{key: KeyHPAToleranceUp, get: func(s Spec, _ Defaults) any { return s.HPA.ToleranceUp },
		good: []good{{"0.2", 0.2, nil}, {"0.999", 0.999, nil}},
		bad:  []bad{{"1", outOfRange, nil}}},
	{key: KeyHPAToleranceDown, get: func(s Spec, _ Defaults) any { return s.HPA.ToleranceDown },
		good: []good{{"0.2", 0.2, nil}},
		bad:  []bad{{"1.5", outOfRange, nil}}},
	{key: KeyHPAScaleUpStabilizationWindow, get: func(s Spec, _ Defaults) any { return s.HPA.ScaleUp.StabilizationWindow },
		good: []good{{"0", 0 * time.Second, nil}, {"30s", sec(30), nil}},
		bad:  []bad{{"2h", outOfRange, nil}, {"-1s", outOfRange, nil}}},
	{key: KeyHPAScaleUpPolicies, get: func(s Spec, _ Defaults) any { return s.HPA.ScaleUp.Policies },
		good: []good{
			{"Pods=2/10s", []HPAPolicy{{PolicyPods, 2, sec(10)}}, nil},
			{"pods=2/10s, percent=50/1m", []HPAPolicy{{PolicyPods, 2, sec(10)}, {PolicyPercent, 50, time.Minute}}, nil},
			{" Pods = 2 / 10 ", []HPAPolicy{{PolicyPods, 2, sec(10)}}, nil},
		},
		bad: []bad{{"", `has no "="`, nil}, {"Pods", `has no "="`, nil}, {"Pods=2", `has no "/period"`, nil},
			{"Pods=0/10s", "not an integer ≥ 1", nil}, {"Pods=2/0s", "not a duration from 1s to 30m", nil},
			{"Pods=2/31m", "not a duration from 1s to 30m", nil}, {"Nodes=2/10s", `has type "Nodes"`, nil},
			{"Pods=2/10s,", `policy 2 ("")`, nil}}},
	{key: KeyHPAScaleUpSelectPolicy, get: func(s Spec, _ Defaults) any { return s.HPA.ScaleUp.SelectPolicy },
		good: []good{{"Min", SelectMin, nil}, {"disabled", SelectDisabled, nil}},
		bad:  []bad{{"Mx", `is not a known select policy; accepted: Max, Min or Disabled; did you mean "Max"?`, nil}, {"", "is not a known select policy", nil}}},
	{key: KeyHPAScaleDownStabilizationWindow, get: func(s Spec, _ Defaults) any { return s.HPA.ScaleDown.StabilizationWindow },
		good: []good{{"0", 0 * time.Second, nil}, {"10m", 10 * time.Minute, nil}},
		bad:  []bad{{"-5m", outOfRange, nil}}},
	{key: KeyHPAScaleDownPolicies, get: func(s Spec, _ Defaults) any { return s.HPA.ScaleDown.Policies },
		good: []good{{"Pods=1/1m", []HPAPolicy{{PolicyPods, 1, time.Minute}}, nil}},
		bad:  []bad{{"Percent=-5/15s", "not an integer ≥ 1", nil}}},
	{key: KeyHPAScaleDownSelectPolicy, get: func(s Spec, _ Defaults) any { return s.HPA.ScaleDown.SelectPolicy },
		good: []good{{"MAX", SelectMax, nil}, {"Disabled", SelectDisabled, nil}},
		bad:  []bad{{"None", "is not a known select policy", nil}}},
	{key: KeyExponentialGrowthFactor, get: func(s Spec, _ Defaults) any { return s.Exponential.GrowthFactor },
		good: []good{{"3", 3.0, nil}, {"1.1", 1.1, nil}},
		bad:  []bad{{"1", outOfRange, nil}}},
	{key: KeyExponentialShrinkFactor, get: func(s Spec, _ Defaults) any { return s.Exponential.ShrinkFactor },
		good: []good{{"1.2", 1.2, nil}},
		bad:  []bad{{"0.5", outOfRange, nil}}},
	{key: KeyPIDKp, get: func(s Spec, _ Defaults) any { return s.PID.Kp },
		good: []good{{"0.8", 0.8, nil}, {"0", 0.0, nil}},
		bad:  []bad{{"-1", outOfRange, nil}, {"0", "leaves the controller without a gain along with pid-ki 0", map[string]string{KeyPIDKi: "0"}}}},
	{key: KeyPIDKi, get: func(s Spec, _ Defaults) any { return s.PID.Ki },
		good: []good{{"0", 0.0, nil}, {"2", 2.0, nil}},
		bad:  []bad{{"-0.1", outOfRange, nil}}},
	{key: KeyPIDKd, get: func(s Spec, _ Defaults) any { return s.PID.Kd },
		good: []good{{"0", 0.0, nil}},
		bad:  []bad{{"-1", outOfRange, nil}}},
	{key: KeyPIDDerivativeFilter, get: func(s Spec, _ Defaults) any { return s.PID.DerivativeFilter },
		good: []good{{"0s", 0 * time.Second, nil}, {"10", sec(10), nil}},
		bad:  []bad{{"-1s", outOfRange, nil}, {"2h", outOfRange, nil}}},

	{key: KeyEnableScaleToZero, get: func(s Spec, d Defaults) any { return [2]bool{d.EnableScaleToZero, s.ScaleToZeroEnabled} },
		good: []good{{"false", [2]bool{false, false}, nil}, {"yes", [2]bool{true, true}, nil}, {"TRUE", [2]bool{true, true}, nil}},
		bad:  []bad{{"maybe", "is not a boolean", nil}}},
	{key: KeyAllowZeroInitialScale, get: func(_ Spec, d Defaults) any { return d.AllowZeroInitialScale },
		good: []good{{"true", true, nil}, {"0", false, nil}},
		bad:  []bad{{"sure", "is not a boolean", nil}}},
	{key: KeyContainerConcurrencyTargetDefault, get: func(s Spec, d Defaults) any { return [2]float64{d.ConcurrencyTarget, s.Target} },
		good: []good{{"50", [2]float64{50, 50}, nil}, {"0.5", [2]float64{0.5, 0.5}, nil}},
		bad:  []bad{{"0", outOfRange, nil}}},
	{key: KeyRequestsPerSecondTargetDefault, get: func(_ Spec, d Defaults) any { return d.RPSTarget },
		good: []good{{"150", 150.0, nil}},
		bad:  []bad{{"-3", outOfRange, nil}}},
	{key: KeyMaxScaleLimit, get: func(_ Spec, d Defaults) any { return d.MaxScaleLimit },
		good: []good{{"0", 0, nil}, {"10", 10, map[string]string{KeyMaxScale: "5"}}, {"10", 10, map[string]string{KeyMaxScale: "10"}}},
		bad: []bad{{"-1", outOfRange, nil}, {"10", "does not allow the unlimited max-scale 0", nil},
			{"10", "is greater than max-scale-limit 10", map[string]string{KeyMaxScale: "11"}}}},
	{key: KeyTickInterval, get: func(_ Spec, d Defaults) any { return d.TickInterval },
		good: []good{{"100ms", 100 * time.Millisecond, nil}, {"1m", time.Minute, nil}, {"0.5", 500 * time.Millisecond, nil}},
		bad:  []bad{{"99ms", outOfRange, nil}, {"2m", outOfRange, nil}}},
}

// A path is one way settings reach the parser. Each case runs through
// every path that accepts its key, and they must agree.
type path struct {
	name string
	// run parses key=text alongside with (bare keys), returning the Spec
	// and Defaults it gives, and the prefix errors name the key with.
	run    func(key, text string, with map[string]string) (Spec, Defaults, error)
	prefix string
	accept func(Scope) bool
}

var paths = []path{
	{name: "annotations", prefix: Prefix, accept: func(s Scope) bool { return s != ScopeCluster },
		run: func(key, text string, with map[string]string) (Spec, Defaults, error) {
			cluster, service := map[string]string{}, map[string]string{Prefix + key: text}
			for k, v := range with {
				if byName[k].Scope == ScopeCluster {
					cluster[k] = v
				} else {
					service[Prefix+k] = v
				}
			}
			d, err := ParseDefaults(cluster)
			if err != nil {
				return Spec{}, Defaults{}, err
			}
			s, err := Parse(service, 0, d)
			return s, d, err
		}},
	{name: "defaults", prefix: "", accept: func(s Scope) bool { return s != ScopeService },
		run: func(key, text string, with map[string]string) (Spec, Defaults, error) {
			m := maps.Clone(with)
			if m == nil {
				m = map[string]string{}
			}
			m[key] = text
			d, err := ParseDefaults(m)
			if err != nil {
				return Spec{}, Defaults{}, err
			}
			s, err := Parse(nil, 0, d)
			return s, d, err
		}},
	{name: "flags", prefix: "--", accept: func(Scope) bool { return true },
		run: func(key, text string, with map[string]string) (Spec, Defaults, error) {
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f := RegisterFlags(fs)
			args := []string{"--" + key + "=" + text}
			for k, v := range with {
				args = append(args, "--"+k+"="+v)
			}
			if err := fs.Parse(args); err != nil {
				return Spec{}, Defaults{}, err
			}
			return f.Resolve(0, DefaultDefaults())
		}},
}

func TestEveryKeyHasGoodAndBadCases(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range keyCases {
		if seen[c.key] {
			t.Errorf("%s: two cases", c.key)
		}
		seen[c.key] = true
		if len(c.good) == 0 || len(c.bad) == 0 {
			t.Errorf("%s: needs good and bad values", c.key)
		}
	}
	for _, e := range table {
		if !seen[e.Name] {
			t.Errorf("%s: no test cases", e.Name)
		}
	}
}

func TestKeyValues(t *testing.T) {
	for _, c := range keyCases {
		e := byName[c.key]
		if e == nil {
			t.Fatalf("%s: not a key", c.key)
		}
		for _, p := range paths {
			if !p.accept(e.Scope) {
				continue
			}
			for _, g := range c.good {
				s, d, err := p.run(c.key, g.text, g.with)
				if err != nil {
					t.Errorf("%s %s=%q: %v", p.name, c.key, g.text, err)
					continue
				}
				if got := c.get(s, d); !reflect.DeepEqual(got, g.want) {
					t.Errorf("%s %s=%q: got %v, want %v", p.name, c.key, g.text, got, g.want)
				}
				if err := s.Validate(); err != nil {
					t.Errorf("%s %s=%q: Parse accepted a Spec Validate refuses: %v", p.name, c.key, g.text, err)
				}
			}
			for _, b := range c.bad {
				_, _, err := p.run(c.key, b.text, b.with)
				if err == nil {
					t.Errorf("%s %s=%q: accepted", p.name, c.key, b.text)
					continue
				}
				var ke *Error
				if !errors.As(err, &ke) {
					t.Errorf("%s %s=%q: %v is not an *Error", p.name, c.key, b.text, err)
					continue
				}
				msg := err.Error()
				if !strings.Contains(msg, b.problem) {
					t.Errorf("%s %s=%q:\n got %s\nwant it to contain %q", p.name, c.key, b.text, msg, b.problem)
				}
				// The message names the key as the user wrote it, quotes the
				// value and says what is accepted.
				named := strings.Contains(msg, p.prefix+c.key+": ") || strings.Contains(msg, "default)")
				for k := range b.with {
					named = named || strings.Contains(msg, p.prefix+k+": ")
				}
				if !named {
					t.Errorf("%s %s=%q: %q does not name the key", p.name, c.key, b.text, msg)
				}
				if !strings.Contains(msg, "; accepted: ") {
					t.Errorf("%s %s=%q: %q does not say what is accepted", p.name, c.key, b.text, msg)
				}
			}
		}
	}
}
