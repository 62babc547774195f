package autoscaling

import (
	"math"
	"slices"
	"strings"
	"time"

	"github.com/swell-run/swell/pkg/spelling"
)

// The keys, by bare name. A service writes them as annotations after
// Prefix (autoscaling.swell.run/min-scale); the cluster defaults and the
// command line write them bare (min-scale, --min-scale).
const (
	KeyClass                         = "class"
	KeyMetric                        = "metric"
	KeyTarget                        = "target"
	KeyTargetUtilizationPercentage   = "target-utilization-percentage"
	KeyCPUTarget                     = "cpu-target"
	KeyMemoryTarget                  = "memory-target"
	KeyGauge                         = "gauge"
	KeyGaugeTarget                   = "gauge-target"
	KeyGaugePort                     = "gauge-port"
	KeyGaugePath                     = "gauge-path"
	KeyGaugeAggregation              = "gauge-aggregation"
	KeyWindow                        = "window"
	KeyWindowAveraging               = "window-averaging"
	KeyPanicWindowPercentage         = "panic-window-percentage"
	KeyPanicThresholdPercentage      = "panic-threshold-percentage"
	KeyMaxScaleUpRate                = "max-scale-up-rate"
	KeyMaxScaleDownRate              = "max-scale-down-rate"
	KeyMinScale                      = "min-scale"
	KeyMinScaleSchedule              = "min-scale-schedule"
	KeyMaxScale                      = "max-scale"
	KeyInitialScale                  = "initial-scale"
	KeyActivationScale               = "activation-scale"
	KeyScaleDownDelay                = "scale-down-delay"
	KeyScaleToZeroGracePeriod        = "scale-to-zero-grace-period"
	KeyScaleToZeroPodRetentionPeriod = "scale-to-zero-pod-retention-period"
	KeyTargetBurstCapacity           = "target-burst-capacity"

	KeyHPATolerance                      = "hpa-tolerance"
	KeyHPAToleranceUp                    = "hpa-tolerance-up"
	KeyHPAToleranceDown                  = "hpa-tolerance-down"
	KeyHPAScaleUpStabilizationWindow     = "hpa-scale-up-stabilization-window"
	KeyHPAScaleUpPolicies                = "hpa-scale-up-policies"
	KeyHPAScaleUpSelectPolicy            = "hpa-scale-up-select-policy"
	KeyHPAScaleDownStabilizationWindow   = "hpa-scale-down-stabilization-window"
	KeyHPAScaleDownPolicies              = "hpa-scale-down-policies"
	KeyHPAScaleDownSelectPolicy          = "hpa-scale-down-select-policy"
	KeyExponentialGrowthFactor           = "exponential-growth-factor"
	KeyExponentialShrinkFactor           = "exponential-shrink-factor"
	KeyPIDKp                             = "pid-kp"
	KeyPIDKi                             = "pid-ki"
	KeyPIDKd                             = "pid-kd"
	KeyPIDDerivativeFilter               = "pid-derivative-filter"
	KeyEnableScaleToZero                 = "enable-scale-to-zero"
	KeyAllowZeroInitialScale             = "allow-zero-initial-scale"
	KeyContainerConcurrencyTargetDefault = "container-concurrency-target-default"
	KeyRequestsPerSecondTargetDefault    = "requests-per-second-target-default"
	KeyMaxScaleLimit                     = "max-scale-limit"
	KeyTickInterval                      = "tick-interval"
)

// ContainerConcurrencyKey is the annotation holding a service's hard
// per-pod concurrency limit. It is not an autoscaling key — the
// queue-proxy enforces it — but the default target and the target's cap
// derive from it; see ParseContainerConcurrency.
const ContainerConcurrencyKey = "swell.run/container-concurrency"

// The bounds Knative puts on windows: a stable window shorter than 6s
// holds too few 1-second buckets to mean anything, and one longer than an
// hour reacts too late to be autoscaling. The delays that look back over a
// window are bounded alike.
const (
	WindowMin = 6 * time.Second
	WindowMax = time.Hour
)

// Scope says where a key may be written.
type Scope int

const (
	// ScopeBoth keys are set per service, and their cluster-wide default
	// under the same name.
	ScopeBoth Scope = iota
	// ScopeService keys are set per service only (target: its default
	// depends on the metric, so the cluster has one default per metric).
	ScopeService
	// ScopeCluster keys are set cluster-wide only.
	ScopeCluster
)

// KeyInfo describes a key, for flag registration, help texts and docs.
type KeyInfo struct {
	// Name is the bare key: "min-scale".
	Name string
	// Type is the kind of value: "duration", "integer", "number",
	// "percentage", "fraction", "boolean", "policy list", or the accepted
	// names ("kpa|hpa|exponential|pid").
	Type string
	// Default is the built-in default as the key would be written.
	Default string
	// Accepted says which values are accepted.
	Accepted string
	// Policies names the policies the key applies to: "all", "kpa", ...
	Policies string
	// Meaning says what the key does, in one sentence.
	Meaning string
	Scope   Scope
}

// settings holds every key's value in the key's own terms: the cluster
// defaults plus the per-service target. Parsing writes into it; checks and
// formatting read from it. A Spec converts to settings (fromSpec) and back
// (toSpec), so that Parse, ParseDefaults and Spec.Validate share one
// definition of each key.
type settings struct {
	Defaults
	target    float64
	targetSet bool
}

// entry is a key's definition.
type entry struct {
	KeyInfo
	// parse reads text into s if it is valid; otherwise it returns the
	// problem, and maybe a suggested value, and leaves s alone.
	parse func(text string, s *settings) (problem, suggestion string)
	// check returns the problem with the value in s, or "". It is nil for
	// keys with no value of their own (hpa-tolerance sets two others).
	check func(s *settings) string
	// format writes the value in s as the key's text; "" when the key has
	// none.
	format func(s *settings) string
}

const (
	problemRange        = "is out of range"
	problemWholeSeconds = "is not a whole number of seconds"
)

// numRange is an interval of key values.
type numRange struct {
	lo, hi   float64
	loOpen   bool // lo itself is excluded
	noMax    bool
	minusOne bool // -1 is accepted too
}

func (r numRange) contains(v float64) bool {
	if r.minusOne && v == -1 {
		return true
	}
	aboveLo := v >= r.lo
	if r.loOpen {
		aboveLo = v > r.lo
	}
	// Written so NaN, which compares false with everything, fails.
	return aboveLo && (r.noMax || v <= r.hi)
}

// floatKey defines a number key whose value is stored divided by unit (a
// percentage stored as a fraction has unit 100).
func floatKey(info KeyInfo, pm percentMode, unit float64, r numRange, field func(*settings) *float64) *entry {
	// Compare in stored units, against bounds divided the way values are,
	// so a value on a bound stays on it.
	stored := r
	stored.lo, stored.hi = r.lo/unit, r.hi/unit
	check := func(v float64) string {
		if !stored.contains(v) {
			return problemRange
		}
		return ""
	}
	return &entry{
		KeyInfo: info,
		parse: func(text string, s *settings) (string, string) {
			v, clean, ok := parseNumberText(text, pm)
			if !ok {
				return "is not a number", ""
			}
			v = divide(clean, v, unit)
			if p := check(v); p != "" {
				return p, ""
			}
			*field(s) = v
			return "", ""
		},
		check:  func(s *settings) string { return check(*field(s)) },
		format: func(s *settings) string { return formatScaled(*field(s), unit) },
	}
}

func intKey(info KeyInfo, lo int, field func(*settings) *int) *entry {
	check := func(v int) string {
		if v < lo || v > math.MaxInt32 {
			return problemRange
		}
		return ""
	}
	return &entry{
		KeyInfo: info,
		parse: func(text string, s *settings) (string, string) {
			v, isInt, inRange := parseInt(text)
			switch {
			case !isInt:
				return "is not an integer", ""
			case !inRange:
				return problemRange, ""
			}
			if p := check(v); p != "" {
				return p, ""
			}
			*field(s) = v
			return "", ""
		},
		check:  func(s *settings) string { return check(*field(s)) },
		format: func(s *settings) string { return formatNumber(float64(*field(s))) },
	}
}

// durRange is an interval of durations.
type durRange struct {
	lo, hi       time.Duration
	loOpen       bool
	noMax        bool
	wholeSeconds bool
}

func durationKey(info KeyInfo, r durRange, field func(*settings) *time.Duration) *entry {
	check := func(d time.Duration) string {
		if d < r.lo || (r.loOpen && d == r.lo) || (!r.noMax && d > r.hi) {
			return problemRange
		}
		if r.wholeSeconds && d%time.Second != 0 {
			return problemWholeSeconds
		}
		return ""
	}
	return &entry{
		KeyInfo: info,
		parse: func(text string, s *settings) (string, string) {
			d, ok := parseDuration(text)
			if !ok {
				return "is not a duration", ""
			}
			if p := check(d); p != "" {
				return p, ""
			}
			*field(s) = d
			return "", ""
		},
		check:  func(s *settings) string { return check(*field(s)) },
		format: func(s *settings) string { return FormatDuration(*field(s)) },
	}
}

func boolKey(info KeyInfo, field func(*settings) *bool) *entry {
	return &entry{
		KeyInfo: info,
		parse: func(text string, s *settings) (string, string) {
			v, ok := parseBool(text)
			if !ok {
				return "is not a boolean", ""
			}
			*field(s) = v
			return "", ""
		},
		check: func(*settings) string { return "" },
		format: func(s *settings) string {
			if *field(s) {
				return "true"
			}
			return "false"
		},
	}
}

// enumKey defines a key whose value is one of a few names, matched in any
// letter case and stored in its canonical case. The names are its Type and
// what it accepts.
func enumKey[T ~string](info KeyInfo, what string, values []T, field func(*settings) *T) *entry {
	names := make([]string, len(values))
	for i, v := range values {
		names[i] = string(v)
	}
	info.Type = strings.Join(names, "|")
	info.Accepted = orList(names)
	return &entry{
		KeyInfo: info,
		parse: func(text string, s *settings) (string, string) {
			t := strings.TrimSpace(text)
			for _, v := range values {
				if strings.EqualFold(t, string(v)) {
					*field(s) = v
					return "", ""
				}
			}
			return "is not a known " + what, spelling.Suggest(t, names)
		},
		check: func(s *settings) string {
			if slices.Contains(values, *field(s)) {
				return ""
			}
			return "is not a known " + what
		},
		format: func(s *settings) string { return string(*field(s)) },
	}
}

// orList writes "a, b or c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

func policiesKey(info KeyInfo, field func(*settings) *[]HPAPolicy) *entry {
	return &entry{
		KeyInfo: info,
		parse: func(text string, s *settings) (string, string) {
			ps, problem := parsePolicies(text)
			if problem != "" {
				return problem, ""
			}
			*field(s) = ps
			return "", ""
		},
		check:  func(s *settings) string { return checkPolicies(*field(s)) },
		format: func(s *settings) string { return formatPolicies(*field(s)) },
	}
}

// The bounds Kubernetes puts on an HPA policy's period.
const (
	policyPeriodMin = time.Second
	policyPeriodMax = 30 * time.Minute
)

// parsePolicies reads "Pods=4/15s,Percent=100/15s".
func parsePolicies(text string) ([]HPAPolicy, string) {
	var ps []HPAPolicy
	for i, item := range strings.Split(text, ",") {
		item = strings.TrimSpace(item)
		where := "policy " + formatNumber(float64(i+1)) + " (" + quote(item) + ")"
		typ, rest, ok := strings.Cut(item, "=")
		if !ok {
			return nil, "is not a policy list: " + where + " has no \"=\""
		}
		val, period, ok := strings.Cut(rest, "/")
		if !ok {
			return nil, "is not a policy list: " + where + " has no \"/period\""
		}
		var p HPAPolicy
		switch t := strings.TrimSpace(typ); {
		case strings.EqualFold(t, PolicyPods):
			p.Type = PolicyPods
		case strings.EqualFold(t, PolicyPercent):
			p.Type = PolicyPercent
		default:
			return nil, "is not a policy list: " + where + " has type " + quote(t) + ", not Pods or Percent"
		}
		v, isInt, inRange := parseInt(val)
		if !isInt || !inRange || v < 1 {
			return nil, "is not a policy list: " + where + " has value " + quote(strings.TrimSpace(val)) + ", not an integer ≥ 1"
		}
		p.Value = v
		d, ok := parseDuration(period)
		if !ok || d < policyPeriodMin || d > policyPeriodMax {
			return nil, "is not a policy list: " + where + " has period " + quote(strings.TrimSpace(period)) + ", not a duration from 1s to 30m"
		}
		p.Period = d
		ps = append(ps, p)
	}
	return ps, ""
}

func checkPolicies(ps []HPAPolicy) string {
	if len(ps) == 0 {
		return "is not a policy list: it has no policy"
	}
	for _, p := range ps {
		if (p.Type != PolicyPods && p.Type != PolicyPercent) || p.Value < 1 || p.Value > math.MaxInt32 ||
			p.Period < policyPeriodMin || p.Period > policyPeriodMax {
			return "is not a policy list: " + quote(formatPolicies([]HPAPolicy{p})) + " is out of range"
		}
	}
	return ""
}

func formatPolicies(ps []HPAPolicy) string {
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(p.Type)
		b.WriteByte('=')
		b.WriteString(formatNumber(float64(p.Value)))
		b.WriteByte('/')
		b.WriteString(FormatDuration(p.Period))
	}
	return b.String()
}

const acceptedPolicies = `comma-separated TYPE=VALUE/PERIOD, TYPE Pods or Percent, VALUE an integer ≥ 1, PERIOD a duration from 1s to 30m, e.g. "Pods=4/15s,Percent=100/15s"`

// table lists every key in documentation order. Errors come out in this
// order too.
var table = slices.Concat([]*entry{
	enumKey(KeyInfo{Name: KeyClass, Policies: "all",
		Meaning: "the autoscaling policy"},
		"policy", Classes(),
		func(s *settings) *Class { return &s.Class }),
	metricsKey(KeyInfo{Name: KeyMetric, Policies: "all",
		Meaning: "what is measured and aimed at: requests in flight or per second, the app's CPU or memory, an app gauge; with several, the largest recommendation wins"},
		func(s *settings) *[]Metric { return &s.Metrics }),
	floatKey(KeyInfo{Name: KeyTarget, Type: "number", Scope: ScopeService, Policies: "all",
		Default:  "containerConcurrency if > 0, else 100 (concurrency) or 200 (rps)",
		Accepted: "a number ≥ 0.01; above containerConcurrency it is lowered to it (concurrency metric)",
		Meaning:  "the value of the metric one pod is meant to carry, before utilization"},
		noPercent, 1, numRange{lo: TargetMin, noMax: true},
		func(s *settings) *float64 { return &s.target }),
	floatKey(KeyInfo{Name: KeyTargetUtilizationPercentage, Type: "percentage", Policies: "all",
		Accepted: "a percentage from 1 to 100, e.g. 70 or 70.5",
		Meaning:  "the part of target actually aimed at, leaving headroom for bursts"},
		percentKey, 100, numRange{lo: 1, hi: 100},
		func(s *settings) *float64 { return &s.TargetUtilization }),
	resourceKey(KeyInfo{Name: KeyCPUTarget, Type: "percentage or quantity", Policies: "all",
		Accepted: "a percentage of the app container's CPU request from 1% to 1000%, such as 70%, or cores per pod as a quantity, such as 500m or 1.5",
		Meaning:  "the CPU one pod should use (metric cpu)"},
		MetricCPU, func(s *settings) *ResourceTarget { return &s.CPUTarget }),
	resourceKey(KeyInfo{Name: KeyMemoryTarget, Type: "percentage or quantity", Policies: "all",
		Accepted: "a percentage of the app container's memory request from 1% to 1000%, such as 80%, or bytes per pod as a quantity, such as 512Mi or 1G",
		Meaning:  "the memory one pod should use (metric memory)"},
		MetricMemory, func(s *settings) *ResourceTarget { return &s.MemoryTarget }),
}, gaugeKeys(), []*entry{
	durationKey(KeyInfo{Name: KeyWindow, Type: "duration", Policies: "all",
		Accepted: "a duration from 6s to 1h in whole seconds, e.g. 60s, 1m30s or 90",
		Meaning:  "the stable window the metric is averaged over"},
		durRange{lo: WindowMin, hi: WindowMax, wholeSeconds: true},
		func(s *settings) *time.Duration { return &s.StableWindow }),
	enumKey(KeyInfo{Name: KeyWindowAveraging, Policies: "all",
		Meaning: "how a window averages its 1-second buckets: equally, or weighting recent ones more"},
		"averaging", []Averaging{AveragingLinear, AveragingExponential},
		func(s *settings) *Averaging { return &s.Averaging }),
	floatKey(KeyInfo{Name: KeyPanicWindowPercentage, Type: "percentage", Policies: "all",
		Accepted: "a percentage from 1 to 100",
		Meaning:  "the panic window, as a percentage of window (at least 1s): kpa's panic mode and every policy's burst capacity read it"},
		percentKey, 1, numRange{lo: 1, hi: 100},
		func(s *settings) *float64 { return &s.PanicWindowPercentage }),
	floatKey(KeyInfo{Name: KeyPanicThresholdPercentage, Type: "percentage", Policies: "kpa",
		Accepted: "a percentage from 110 to 1000",
		Meaning:  "panic when the panic window asks for this percentage of the ready pods"},
		percentKey, 100, numRange{lo: 110, hi: 1000},
		func(s *settings) *float64 { return &s.PanicThreshold }),
	floatKey(KeyInfo{Name: KeyMaxScaleUpRate, Type: "number", Policies: "all",
		Accepted: "a number greater than 1",
		Meaning:  "one decision scales up to at most this many times the ready pods"},
		noPercent, 1, numRange{lo: 1, loOpen: true, noMax: true},
		func(s *settings) *float64 { return &s.MaxScaleUpRate }),
	floatKey(KeyInfo{Name: KeyMaxScaleDownRate, Type: "number", Policies: "all",
		Accepted: "a number greater than 1",
		Meaning:  "one decision scales down to at least the ready pods divided by this"},
		noPercent, 1, numRange{lo: 1, loOpen: true, noMax: true},
		func(s *settings) *float64 { return &s.MaxScaleDownRate }),
	intKey(KeyInfo{Name: KeyMinScale, Type: "integer", Policies: "all",
		Accepted: "an integer ≥ 0, at most max-scale when that is > 0",
		Meaning:  "the fewest pods; 0 allows scale to zero"},
		0, func(s *settings) *int { return &s.MinScale }),
	{
		KeyInfo: KeyInfo{Name: KeyMinScaleSchedule, Type: "schedule", Default: "none", Scope: ScopeService, Policies: "all",
			Accepted: "rules DAYS HH:MM-HH:MM=PODS separated by semicolons, such as Mon-Fri 08:00-18:00=3; Sat 10:00-14:00=1, and optionally tz=ZONE (an IANA time zone; default UTC); the largest count of the rules that hold applies, at most max-scale when that is > 0",
			Meaning:  "more pods by time of day and day of week: the fewest pods while a rule holds"},
		parse: func(text string, s *settings) (string, string) {
			sch, problem := ParseSchedule(text)
			if problem != "" {
				return problem, ""
			}
			s.MinScaleSchedule = sch
			return "", ""
		},
		check:  func(*settings) string { return "" },
		format: func(s *settings) string { return s.MinScaleSchedule.String() },
	},
	intKey(KeyInfo{Name: KeyMaxScale, Type: "integer", Policies: "all",
		Accepted: "an integer ≥ 0 (0: no limit), at most max-scale-limit when that is > 0",
		Meaning:  "the most pods"},
		0, func(s *settings) *int { return &s.MaxScale }),
	intKey(KeyInfo{Name: KeyInitialScale, Type: "integer", Policies: "all",
		Accepted: "an integer ≥ 1, or 0 when the cluster enables scale to zero and allows zero initial scale; at most max-scale when that is > 0",
		Meaning:  "the pods a new service starts with"},
		0, func(s *settings) *int { return &s.InitialScale }),
	intKey(KeyInfo{Name: KeyActivationScale, Type: "integer", Policies: "all",
		Accepted: "an integer ≥ 1, at most max-scale when that is > 0",
		Meaning:  "the fewest pods a service at zero goes to when traffic arrives"},
		1, func(s *settings) *int { return &s.ActivationScale }),
	durationKey(KeyInfo{Name: KeyScaleDownDelay, Type: "duration", Policies: "all",
		Accepted: "a duration from 0s to 1h in whole seconds",
		Meaning:  "scale down only to the highest decision of this trailing window"},
		durRange{lo: 0, hi: WindowMax, wholeSeconds: true},
		func(s *settings) *time.Duration { return &s.ScaleDownDelay }),
	durationKey(KeyInfo{Name: KeyScaleToZeroGracePeriod, Type: "duration", Policies: "all",
		Accepted: "a duration greater than 0s",
		Meaning:  "how long a service stays without traffic before it may go to zero"},
		durRange{lo: 0, loOpen: true, noMax: true},
		func(s *settings) *time.Duration { return &s.ScaleToZeroGracePeriod }),
	durationKey(KeyInfo{Name: KeyScaleToZeroPodRetentionPeriod, Type: "duration", Policies: "all",
		Accepted: "a duration from 0s to 1h",
		Meaning:  "the least time the last pod is kept after the autoscaler first decided to go to zero (runs alongside the grace period; see autoscaling.md)"},
		durRange{lo: 0, hi: WindowMax},
		func(s *settings) *time.Duration { return &s.ScaleToZeroPodRetention }),
	floatKey(KeyInfo{Name: KeyTargetBurstCapacity, Type: "number", Policies: "all",
		Accepted: "-1 (activator always in the path) or a number ≥ 0 (0: never for bursts)",
		Meaning:  "spare capacity, in units of the metric, below which the activator stays in the path"},
		noPercent, 1, numRange{lo: 0, noMax: true, minusOne: true},
		func(s *settings) *float64 { return &s.TargetBurstCapacity }),

	hpaToleranceKey(),
	floatKey(KeyInfo{Name: KeyHPAToleranceUp, Type: "fraction", Policies: "hpa",
		Accepted: toleranceAccepted,
		Meaning:  "no scale up while metric / target exceeds 1 by at most this"},
		percentOfOne, 1, toleranceRange,
		func(s *settings) *float64 { return &s.HPA.ToleranceUp }),
	floatKey(KeyInfo{Name: KeyHPAToleranceDown, Type: "fraction", Policies: "hpa",
		Accepted: toleranceAccepted,
		Meaning:  "no scale down while metric / target is below 1 by at most this"},
		percentOfOne, 1, toleranceRange,
		func(s *settings) *float64 { return &s.HPA.ToleranceDown }),
	durationKey(KeyInfo{Name: KeyHPAScaleUpStabilizationWindow, Type: "duration", Policies: "hpa",
		Accepted: "a duration from 0s to 1h",
		Meaning:  "scale up only to the lowest recommendation of this trailing window"},
		durRange{lo: 0, hi: WindowMax},
		func(s *settings) *time.Duration { return &s.HPA.ScaleUp.StabilizationWindow }),
	policiesKey(KeyInfo{Name: KeyHPAScaleUpPolicies, Type: "policy list", Policies: "hpa",
		Accepted: acceptedPolicies,
		Meaning:  "how much scaling up each policy allows per period"},
		func(s *settings) *[]HPAPolicy { return &s.HPA.ScaleUp.Policies }),
	enumKey(KeyInfo{Name: KeyHPAScaleUpSelectPolicy, Policies: "hpa",
		Meaning: "take the policy allowing the largest change, the smallest, or never scale up"},
		"select policy", []string{SelectMax, SelectMin, SelectDisabled},
		func(s *settings) *string { return &s.HPA.ScaleUp.SelectPolicy }),
	durationKey(KeyInfo{Name: KeyHPAScaleDownStabilizationWindow, Type: "duration", Policies: "hpa",
		Accepted: "a duration from 0s to 1h",
		Meaning:  "scale down only to the highest recommendation of this trailing window"},
		durRange{lo: 0, hi: WindowMax},
		func(s *settings) *time.Duration { return &s.HPA.ScaleDown.StabilizationWindow }),
	policiesKey(KeyInfo{Name: KeyHPAScaleDownPolicies, Type: "policy list", Policies: "hpa",
		Accepted: acceptedPolicies,
		Meaning:  "how much scaling down each policy allows per period"},
		func(s *settings) *[]HPAPolicy { return &s.HPA.ScaleDown.Policies }),
	enumKey(KeyInfo{Name: KeyHPAScaleDownSelectPolicy, Policies: "hpa",
		Meaning: "take the policy allowing the largest change, the smallest, or never scale down"},
		"select policy", []string{SelectMax, SelectMin, SelectDisabled},
		func(s *settings) *string { return &s.HPA.ScaleDown.SelectPolicy }),

	floatKey(KeyInfo{Name: KeyExponentialGrowthFactor, Type: "number", Policies: "exponential",
		Accepted: "a number greater than 1",
		Meaning:  "multiply the pods by this per decision while above target"},
		noPercent, 1, numRange{lo: 1, loOpen: true, noMax: true},
		func(s *settings) *float64 { return &s.Exponential.GrowthFactor }),
	floatKey(KeyInfo{Name: KeyExponentialShrinkFactor, Type: "number", Policies: "exponential",
		Accepted: "a number greater than 1",
		Meaning:  "divide the pods by this per decision while below target"},
		noPercent, 1, numRange{lo: 1, loOpen: true, noMax: true},
		func(s *settings) *float64 { return &s.Exponential.ShrinkFactor }),

	floatKey(KeyInfo{Name: KeyPIDKp, Type: "number", Policies: "pid",
		Accepted: "a number ≥ 0; pid-kp and pid-ki not both 0",
		Meaning:  "the proportional gain"},
		noPercent, 1, numRange{lo: 0, noMax: true},
		func(s *settings) *float64 { return &s.PID.Kp }),
	floatKey(KeyInfo{Name: KeyPIDKi, Type: "number", Policies: "pid",
		Accepted: "a number ≥ 0; pid-kp and pid-ki not both 0",
		Meaning:  "the integral gain, per second"},
		noPercent, 1, numRange{lo: 0, noMax: true},
		func(s *settings) *float64 { return &s.PID.Ki }),
	floatKey(KeyInfo{Name: KeyPIDKd, Type: "number", Policies: "pid",
		Accepted: "a number ≥ 0",
		Meaning:  "the derivative gain, in seconds"},
		noPercent, 1, numRange{lo: 0, noMax: true},
		func(s *settings) *float64 { return &s.PID.Kd }),
	durationKey(KeyInfo{Name: KeyPIDDerivativeFilter, Type: "duration", Policies: "pid",
		Accepted: "a duration from 0s (no filter) to 1h",
		Meaning:  "the time constant of the low-pass filter the derivative reads through"},
		durRange{lo: 0, hi: WindowMax},
		func(s *settings) *time.Duration { return &s.PID.DerivativeFilter }),

	boolKey(KeyInfo{Name: KeyEnableScaleToZero, Type: "boolean", Scope: ScopeCluster, Policies: "all",
		Accepted: "true or false",
		Meaning:  "whether any service may go to zero pods; when false min-scale 0 acts as 1"},
		func(s *settings) *bool { return &s.EnableScaleToZero }),
	boolKey(KeyInfo{Name: KeyAllowZeroInitialScale, Type: "boolean", Scope: ScopeCluster, Policies: "all",
		Accepted: "true or false",
		Meaning:  "whether a service may set initial-scale 0 (also needs enable-scale-to-zero)"},
		func(s *settings) *bool { return &s.AllowZeroInitialScale }),
	floatKey(KeyInfo{Name: KeyContainerConcurrencyTargetDefault, Type: "number", Scope: ScopeCluster, Policies: "all",
		Accepted: "a number ≥ 0.01",
		Meaning:  "the target of a concurrency service that sets none and has no containerConcurrency"},
		noPercent, 1, numRange{lo: TargetMin, noMax: true},
		func(s *settings) *float64 { return &s.ConcurrencyTarget }),
	floatKey(KeyInfo{Name: KeyRequestsPerSecondTargetDefault, Type: "number", Scope: ScopeCluster, Policies: "all",
		Accepted: "a number ≥ 0.01",
		Meaning:  "the target of an rps service that sets none"},
		noPercent, 1, numRange{lo: TargetMin, noMax: true},
		func(s *settings) *float64 { return &s.RPSTarget }),
	intKey(KeyInfo{Name: KeyMaxScaleLimit, Type: "integer", Scope: ScopeCluster, Policies: "all",
		Accepted: "an integer ≥ 0 (0: no limit)",
		Meaning:  "the highest max-scale a service may set; when > 0, max-scale 0 is refused"},
		0, func(s *settings) *int { return &s.MaxScaleLimit }),
	durationKey(KeyInfo{Name: KeyTickInterval, Type: "duration", Scope: ScopeCluster, Policies: "all",
		Accepted: "a duration from 100ms to 1m",
		Meaning:  "how often the autoscaler decides for every service"},
		durRange{lo: 100 * time.Millisecond, hi: time.Minute},
		func(s *settings) *time.Duration { return &s.TickInterval }),
})

const toleranceAccepted = "a fraction from 0 to below 1, e.g. 0.1 or 10%"

var toleranceRange = numRange{lo: 0, hi: math.Nextafter(1, 0)}

// hpaToleranceKey sets both directions' tolerance at once. A direction's
// own key, applied after it, wins.
func hpaToleranceKey() *entry {
	up := floatKey(KeyInfo{}, percentOfOne, 1, toleranceRange,
		func(s *settings) *float64 { return &s.HPA.ToleranceUp })
	return &entry{
		KeyInfo: KeyInfo{Name: KeyHPATolerance, Type: "fraction", Policies: "hpa",
			Accepted: toleranceAccepted,
			Meaning:  "sets hpa-tolerance-up and hpa-tolerance-down at once; either, when given, wins"},
		parse: func(text string, s *settings) (string, string) {
			if p, sg := up.parse(text, s); p != "" {
				return p, sg
			}
			s.HPA.ToleranceDown = s.HPA.ToleranceUp
			return "", ""
		},
		format: func(s *settings) string {
			if s.HPA.ToleranceUp == s.HPA.ToleranceDown {
				return formatNumber(s.HPA.ToleranceUp)
			}
			return ""
		},
	}
}

// byName indexes table.
var byName = func() map[string]*entry {
	m := make(map[string]*entry, len(table))
	for _, e := range table {
		m[e.Name] = e
	}
	return m
}()

func init() {
	// Fill in each key's documented default from DefaultDefaults, so the
	// docs, flag help and the defaults cannot disagree.
	s := &settings{Defaults: DefaultDefaults()}
	for _, e := range table {
		if e.Default == "" {
			e.Default = e.format(s)
		}
	}
}

// Keys returns the per-service keys' bare names in documentation order:
// the annotations after Prefix, and the flags of `swell sim` and `swell
// local`.
func Keys() []string { return names(func(sc Scope) bool { return sc != ScopeCluster }) }

// ClusterKeys returns the keys of the cluster-wide defaults in
// documentation order: every per-service key but target, then the
// cluster-only keys.
func ClusterKeys() []string { return names(func(sc Scope) bool { return sc != ScopeService }) }

func names(keep func(Scope) bool) []string {
	var out []string
	for _, e := range table {
		if keep(e.Scope) {
			out = append(out, e.Name)
		}
	}
	return out
}

// Info describes the key with the bare name name.
func Info(name string) (KeyInfo, bool) {
	e, ok := byName[name]
	if !ok {
		return KeyInfo{}, false
	}
	return e.KeyInfo, true
}

func quote(s string) string { return `"` + s + `"` }
