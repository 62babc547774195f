package autoscaling

import (
	"errors"
	"math"
	"strconv"
	"time"
)

// Validate reports every value of s out of range and every contradiction
// between values, as Parse would report them for the keys that set them
// (*Error values joined with errors.Join, named by annotation key). A Spec
// from Parse always passes; Validate is for Specs built or changed in
// code.
//
// The cluster-only rules Parse applies — allow-zero-initial-scale,
// max-scale-limit — are not in a Spec and are not checked; initial-scale 0
// still needs ScaleToZeroEnabled.
func (s Spec) Validate() error {
	p := &parser{s: fromSpec(s), prefix: Prefix, given: map[string]string{}, bad: map[string]bool{}}
	for _, e := range table {
		if e.Scope == ScopeCluster || e.check == nil {
			continue
		}
		if problem := e.check(&p.s); problem != "" {
			p.fail(e.Name, problem, e.Accepted, "")
		}
	}
	// Parse lowers a target above containerConcurrency; a Spec above it
	// was not made by Parse.
	if !p.bad[KeyTarget] && s.Metric == MetricConcurrency && s.ContainerConcurrency > 0 &&
		s.Target > float64(s.ContainerConcurrency) {
		p.fail(KeyTarget, "is greater than "+ContainerConcurrencyKey+" "+strconv.Itoa(s.ContainerConcurrency),
			"at most containerConcurrency when that is > 0 (concurrency metric)", "")
	}
	if !p.bad[KeyPanicWindowPercentage] && s.PanicWindow < time.Second {
		p.fail(KeyPanicWindowPercentage, "gives a panic window of "+s.PanicWindow.String()+", shorter than one 1s bucket",
			"a percentage giving a panic window of at least 1s", "")
	}
	for _, r := range []struct {
		name string
		v    float64
	}{{"CPU request", s.CPURequest}, {"memory request", s.MemoryRequest}} {
		if !(r.v >= 0) || math.IsInf(r.v, 1) {
			p.errs = append(p.errs, &Error{Key: r.name, Name: r.name, Value: strconv.FormatFloat(r.v, 'g', -1, 64),
				Problem: problemRange, Accepted: "a finite number ≥ 0 (0: none)"})
		}
	}
	p.checkContainerConcurrency(s.ContainerConcurrency, ContainerConcurrencyKey)
	p.crossCheck()
	return errors.Join(p.errs...)
}

// fromSpec expresses s in the keys' terms. The settings Spec does not
// hold are set so that they allow whatever s says: zero initial scale is
// allowed, max-scale is not capped.
func fromSpec(s Spec) settings {
	return settings{
		Defaults: Defaults{
			Class:                   s.Class,
			Metrics:                 s.Votes(),
			Averaging:               s.Averaging,
			CPUTarget:               s.CPUTarget,
			MemoryTarget:            s.MemoryTarget,
			Gauge:                   s.Gauge,
			ConcurrencyTarget:       s.Target,
			RPSTarget:               s.Target,
			TargetUtilization:       s.TargetUtilization,
			StableWindow:            s.StableWindow,
			PanicWindowPercentage:   panicWindowPercentage(s.StableWindow, s.PanicWindow),
			PanicThreshold:          s.PanicThreshold,
			MaxScaleUpRate:          s.MaxScaleUpRate,
			MaxScaleDownRate:        s.MaxScaleDownRate,
			MinScale:                s.MinScale,
			MinScaleSchedule:        s.MinScaleSchedule,
			MaxScale:                s.MaxScale,
			InitialScale:            s.InitialScale,
			ActivationScale:         s.ActivationScale,
			ScaleDownDelay:          s.ScaleDownDelay,
			ScaleToZeroGracePeriod:  s.ScaleToZeroGracePeriod,
			ScaleToZeroPodRetention: s.ScaleToZeroPodRetention,
			TargetBurstCapacity:     s.TargetBurstCapacity,
			HPA:                     s.HPA,
			Exponential:             s.Exponential,
			PID:                     s.PID,
			EnableScaleToZero:       s.ScaleToZeroEnabled,
			AllowZeroInitialScale:   true,
			MaxScaleLimit:           0,
			TickInterval:            DefaultDefaults().TickInterval,
		},
		target:    s.Target,
		targetSet: true,
	}
}

// Annotations renders s as annotations: every per-service key, with
// Prefix, in canonical form. It does not include
// swell.run/container-concurrency, and ScaleToZeroEnabled comes from the
// cluster defaults, so Parse(s.Annotations(), s.ContainerConcurrency, d)
// gives s back for any valid s and any d whose EnableScaleToZero matches
// (and, when s.InitialScale is 0, that allows zero initial scale).
func (s Spec) Annotations() map[string]string {
	st := fromSpec(s)
	m := make(map[string]string, len(table))
	for _, e := range table {
		// hpa-tolerance has no value of its own: its two directions do.
		if e.Scope == ScopeCluster || e.check == nil {
			continue
		}
		m[Prefix+e.Name] = e.format(&st)
	}
	return m
}
