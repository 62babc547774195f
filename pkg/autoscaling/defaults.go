package autoscaling

import (
	"slices"
	"time"
)

// Defaults are the cluster-wide settings: the default of every per-service
// key, and the settings that exist only cluster-wide. ParseDefaults reads
// them from a ConfigMap's data, whose keys are the per-service keys without
// the Prefix (see docs/configuration.md); Parse fills in every key a
// service leaves out from them.
//
// Fields are in the keys' own units where the Spec's would lose the
// user's intent: PanicWindowPercentage stays a percentage because a
// service that sets only window gets its panic window from it.
type Defaults struct {
	Class Class
	// Metrics is the metric key's list.
	Metrics   []Metric
	Averaging Averaging

	// CPUTarget and MemoryTarget aim the cpu and memory metrics.
	CPUTarget, MemoryTarget ResourceTarget
	// Gauge is per service only (the gauge keys); it is here so that the
	// keys share one store.
	Gauge GaugeSpec

	// ConcurrencyTarget and RPSTarget are the target of a service that sets
	// none (and, for concurrency, has no containerConcurrency):
	// container-concurrency-target-default and
	// requests-per-second-target-default.
	ConcurrencyTarget float64
	RPSTarget         float64

	// TargetUtilization is a fraction, as in Spec (0.7 for 70%).
	TargetUtilization float64

	StableWindow time.Duration
	// PanicWindowPercentage is a percentage of the stable window (10).
	PanicWindowPercentage float64
	// PanicThreshold is a ratio, as in Spec (2.0 for 200%).
	PanicThreshold float64

	MaxScaleUpRate   float64
	MaxScaleDownRate float64

	MinScale        int
	MaxScale        int
	InitialScale    int
	ActivationScale int
	// MinScaleSchedule is per service only (min-scale-schedule); it is
	// here so that the keys share one store.
	MinScaleSchedule Schedule

	ScaleDownDelay          time.Duration
	ScaleToZeroGracePeriod  time.Duration
	ScaleToZeroPodRetention time.Duration

	TargetBurstCapacity float64

	HPA         HPAParams
	Exponential ExponentialParams
	PID         PIDParams

	// EnableScaleToZero lets services go to zero pods at all
	// (enable-scale-to-zero). Off, min-scale 0 behaves as 1.
	EnableScaleToZero bool
	// AllowZeroInitialScale lets a service ask for initial-scale 0, which
	// also needs EnableScaleToZero (allow-zero-initial-scale).
	AllowZeroInitialScale bool
	// MaxScaleLimit caps every service's max-scale; 0 means no cap
	// (max-scale-limit). With a cap, max-scale 0 ("none") is refused.
	MaxScaleLimit int
	// TickInterval is how often the autoscaler decides for every service
	// (tick-interval).
	TickInterval time.Duration
}

// DefaultDefaults returns the built-in cluster-wide defaults: Knative's KPA
// defaults, Kubernetes' HPA behavior defaults, and starting values for the
// exponential and pid policies. This is the one place they are written.
// The class is Swell's own, adaptive, which decides as kpa does until it
// has learned the service (docs/autoscaling.md); class kpa is Knative's
// exactly.
func DefaultDefaults() Defaults {
	return Defaults{
		Class:     ClassAdaptive,
		Metrics:   []Metric{MetricConcurrency},
		Averaging: AveragingLinear,

		// The HPA has no default target; 70% of the request leaves a pod
		// room for a burst while a new one starts, the share the
		// concurrency target's utilization keeps too. Memory is fuller
		// before it hurts, and does not spike as CPU does.
		CPUTarget:    ResourceTarget{Percent: 70},
		MemoryTarget: ResourceTarget{Percent: 80},
		Gauge:        GaugeSpec{Path: "/metrics", Aggregation: GaugeAverage},

		ConcurrencyTarget: 100,
		RPSTarget:         200,
		TargetUtilization: 0.7,

		StableWindow:          60 * time.Second,
		PanicWindowPercentage: 10,
		PanicThreshold:        2.0,

		MaxScaleUpRate:   1000,
		MaxScaleDownRate: 2,

		MinScale:        0,
		MaxScale:        0,
		InitialScale:    1,
		ActivationScale: 1,

		ScaleDownDelay:          0,
		ScaleToZeroGracePeriod:  30 * time.Second,
		ScaleToZeroPodRetention: 0,

		TargetBurstCapacity: 211,

		// Kubernetes' HPA v2 defaults (the behavior a HorizontalPodAutoscaler
		// gets when it sets none).
		HPA: HPAParams{
			ToleranceUp:   0.1,
			ToleranceDown: 0.1,
			ScaleUp: HPARules{
				StabilizationWindow: 0,
				SelectPolicy:        SelectMax,
				Policies: []HPAPolicy{
					{Type: PolicyPods, Value: 4, Period: 15 * time.Second},
					{Type: PolicyPercent, Value: 100, Period: 15 * time.Second},
				},
			},
			ScaleDown: HPARules{
				StabilizationWindow: 300 * time.Second,
				SelectPolicy:        SelectMax,
				Policies: []HPAPolicy{
					{Type: PolicyPercent, Value: 100, Period: 15 * time.Second},
				},
			},
		},

		// Doubling up matches the pace of the HPA's Percent=100 policy per
		// decision; shrinking by a third at a time is gentler, because
		// scaling down too far costs cold starts while a spare pod only
		// costs money.
		Exponential: ExponentialParams{
			GrowthFactor: 2.0,
			ShrinkFactor: 1.5,
		},

		// Starting gains for the pid policy; docs/autoscaling.md says what
		// they multiply. The derivative reads a signal filtered over a few
		// seconds so that 1-second noise does not kick it.
		PID: PIDParams{
			Kp:               0.5,
			Ki:               0.1,
			Kd:               0.1,
			DerivativeFilter: 5 * time.Second,
		},

		EnableScaleToZero:     true,
		AllowZeroInitialScale: false,
		MaxScaleLimit:         0,
		TickInterval:          2 * time.Second,
	}
}

// DefaultSpec is the Spec of a service that sets no key, under
// DefaultDefaults and without containerConcurrency.
func DefaultSpec() Spec {
	s, err := Parse(nil, 0, DefaultDefaults())
	if err != nil {
		// DefaultDefaults is valid; TestDefaultsAreKnatives keeps it so.
		panic("autoscaling: built-in defaults are invalid: " + err.Error())
	}
	return s
}

// clone returns d with its own copies of the policy slices, so a Spec
// built from d and later changed never changes d.
func (d Defaults) clone() Defaults {
	d.HPA = d.HPA.clone()
	d.MinScaleSchedule = d.MinScaleSchedule.clone()
	d.Metrics = slices.Clone(d.Metrics)
	return d
}

func (p HPAParams) clone() HPAParams {
	p.ScaleUp.Policies = slices.Clone(p.ScaleUp.Policies)
	p.ScaleDown.Policies = slices.Clone(p.ScaleDown.Policies)
	return p
}
