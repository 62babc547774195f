// Package autoscaling defines a service's autoscaling settings — the
// autoscaling.swell.run/* keys — and the one parser and validator that
// Kubernetes annotations, `swell local` files and `swell sim` flags share.
package autoscaling

import "time"

// Prefix starts every autoscaling key, in annotations and elsewhere.
const Prefix = "autoscaling.swell.run/"

// Class names an autoscaling policy.
type Class string

// The policies.
const (
	ClassKPA         Class = "kpa"
	ClassHPA         Class = "hpa"
	ClassExponential Class = "exponential"
	ClassPID         Class = "pid"
	ClassAdaptive    Class = "adaptive"
	ClassHybrid      Class = "hybrid"
)

// Classes returns every policy, in documentation order: the values the
// class key accepts.
func Classes() []Class {
	return []Class{ClassKPA, ClassHPA, ClassExponential, ClassPID, ClassAdaptive, ClassHybrid}
}

// Metric names what the autoscaler scales on.
type Metric string

// The metrics.
const (
	MetricConcurrency Metric = "concurrency"
	MetricRPS         Metric = "rps"
)

// Averaging names how a window averages its 1-second buckets.
type Averaging string

// The averaging methods.
const (
	AveragingLinear      Averaging = "linear"
	AveragingExponential Averaging = "exponential"
)

// Spec is one service's complete, validated autoscaling configuration:
// defaults filled in, every value in range. Deciders take it as it is.
type Spec struct {
	Class Class
	// Metric is the request metric: the concurrency or rps that Metrics
	// lists, or concurrency when it lists neither, since burst capacity
	// and the wake from zero count requests whatever decides the pods.
	Metric Metric
	// Metrics recommend pods, as the metric key lists them; the largest
	// recommendation wins. Empty means Metric alone (Votes).
	Metrics   []Metric
	Averaging Averaging

	// CPUTarget and MemoryTarget aim the cpu and memory metrics.
	CPUTarget, MemoryTarget ResourceTarget
	// CPURequest (cores) and MemoryRequest (bytes) are the app container's
	// requests, which percentage targets are taken of (WithRequests).
	// Like ContainerConcurrency they are not keys: they come from the
	// workload.
	CPURequest, MemoryRequest float64
	// Gauge is the app gauge the gauge metric reads.
	Gauge GaugeSpec

	// ContainerConcurrency is the service's hard per-pod limit (0 = none).
	// It is not an autoscaling key (swell.run/container-concurrency), but
	// the default target and the target's cap derive from it.
	ContainerConcurrency int

	// Target is the per-pod value of Metric the autoscaler aims at before
	// utilization: the "capacity per pod" in excess burst capacity.
	Target float64
	// TargetUtilization is the fraction of Target aimed at (0.7 for 70%).
	TargetUtilization float64

	StableWindow time.Duration
	// PanicWindow is StableWindow × panic-window-percentage, at least 1s.
	PanicWindow time.Duration
	// PanicThreshold is a ratio (2.0 for 200%).
	PanicThreshold float64

	MaxScaleUpRate   float64
	MaxScaleDownRate float64

	MinScale        int
	MaxScale        int // 0 = no upper bound
	InitialScale    int
	ActivationScale int
	// MinScaleSchedule raises MinScale at times of the week.
	MinScaleSchedule Schedule

	ScaleDownDelay          time.Duration
	ScaleToZeroGracePeriod  time.Duration
	ScaleToZeroPodRetention time.Duration
	// ScaleToZeroEnabled is the cluster-wide switch enable-scale-to-zero,
	// copied from Defaults: no per-service key sets it.
	ScaleToZeroEnabled bool

	// TargetBurstCapacity: 0 never puts the activator in the path for
	// bursts, -1 always keeps it there.
	TargetBurstCapacity float64

	HPA         HPAParams
	Exponential ExponentialParams
	PID         PIDParams
}

// TargetMin is the smallest target, and the smallest target per pod, the
// autoscaler works with (Knative's bound). It keeps the pod count a
// decider computes, observed / target per pod, finite.
const TargetMin = 0.01

// TargetPerPod is the value of Metric one pod should see: Target ×
// TargetUtilization, at least TargetMin (a 0.01 target at 1% would
// otherwise ask for a pod per 0.0001 requests).
func (s Spec) TargetPerPod() float64 { return max(TargetMin, s.Target*s.TargetUtilization) }

// HPAParams are the hpa policy's own settings (Kubernetes HPA v2 behavior).
type HPAParams struct {
	// Tolerance below which no change is made, per direction (0.1 = 10%).
	ToleranceUp, ToleranceDown float64
	ScaleUp, ScaleDown         HPARules
}

// HPARules is one direction of an HPA behavior.
type HPARules struct {
	StabilizationWindow time.Duration
	// SelectPolicy is SelectMax, SelectMin or SelectDisabled.
	SelectPolicy string
	Policies     []HPAPolicy
}

// The HPA select policies: the largest change any policy allows, the
// smallest, or no change in that direction at all.
const (
	SelectMax      = "Max"
	SelectMin      = "Min"
	SelectDisabled = "Disabled"
)

// The HPA policy types: Value is a number of pods, or a percentage of the
// current count.
const (
	PolicyPods    = "Pods"
	PolicyPercent = "Percent"
)

// HPAPolicy limits the change over Period to Value pods ("Pods") or Value
// percent of the current count ("Percent").
type HPAPolicy struct {
	// Type is PolicyPods or PolicyPercent.
	Type   string
	Value  int
	Period time.Duration
}

// ExponentialParams are the exponential policy's own settings.
type ExponentialParams struct {
	// GrowthFactor multiplies the pod count per decision while above
	// target (2.0 doubles).
	GrowthFactor float64
	// ShrinkFactor divides it per decision while below target.
	ShrinkFactor float64
}

// PIDParams are the pid policy's own settings.
type PIDParams struct {
	Kp, Ki, Kd float64
	// DerivativeFilter is the time constant of the low-pass filter on the
	// measured signal the derivative term uses.
	DerivativeFilter time.Duration
}
