package decider

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/swell-run/swell/pkg/autoscaling"
)

// t0 is an arbitrary whole second; test times are offsets from it.
var t0 = time.Unix(1_700_000_000, 0)

func at(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }

// testSpec is a service of class kpa that sets no other key: Knative's KPA
// defaults, the Kubernetes HPA behavior defaults, and the exponential and
// pid starting values — autoscaling.DefaultSpec but for the class, written
// out so these tests do not depend on the parser
// (TestTestSpecIsTheDefault keeps the two equal).
func testSpec(mods ...func(*autoscaling.Spec)) autoscaling.Spec {
	s := autoscaling.Spec{
		Class:                  autoscaling.ClassKPA,
		Metric:                 autoscaling.MetricConcurrency,
		Metrics:                []autoscaling.Metric{autoscaling.MetricConcurrency},
		Averaging:              autoscaling.AveragingLinear,
		CPUTarget:              autoscaling.ResourceTarget{Percent: 70},
		MemoryTarget:           autoscaling.ResourceTarget{Percent: 80},
		Gauge:                  autoscaling.GaugeSpec{Path: "/metrics", Aggregation: autoscaling.GaugeAverage},
		Target:                 100,
		TargetUtilization:      0.7,
		StableWindow:           60 * time.Second,
		PanicWindow:            6 * time.Second,
		PanicThreshold:         2,
		MaxScaleUpRate:         1000,
		MaxScaleDownRate:       2,
		InitialScale:           1,
		ActivationScale:        1,
		ScaleToZeroGracePeriod: 30 * time.Second,
		ScaleToZeroEnabled:     true,
		TargetBurstCapacity:    211,
		HPA: autoscaling.HPAParams{
			ToleranceUp:   0.1,
			ToleranceDown: 0.1,
			ScaleUp: autoscaling.HPARules{
				SelectPolicy: autoscaling.SelectMax,
				Policies: []autoscaling.HPAPolicy{
					{Type: autoscaling.PolicyPods, Value: 4, Period: 15 * time.Second},
					{Type: autoscaling.PolicyPercent, Value: 100, Period: 15 * time.Second},
				},
			},
			ScaleDown: autoscaling.HPARules{
				StabilizationWindow: 300 * time.Second,
				SelectPolicy:        autoscaling.SelectMax,
				Policies: []autoscaling.HPAPolicy{
					{Type: autoscaling.PolicyPercent, Value: 100, Period: 15 * time.Second},
				},
			},
		},
		Exponential: autoscaling.ExponentialParams{GrowthFactor: 2, ShrinkFactor: 1.5},
		PID:         autoscaling.PIDParams{Kp: 0.5, Ki: 0.1, Kd: 0.1, DerivativeFilter: 5 * time.Second},
	}
	for _, m := range mods {
		m(&s)
	}
	return s
}

func TestTestSpecIsTheDefault(t *testing.T) {
	want := autoscaling.DefaultSpec()
	want.Class = autoscaling.ClassKPA // the class these tests pin to Knative's
	if got := testSpec(); !reflect.DeepEqual(got, want) {
		t.Fatalf("testSpec() = %+v\nautoscaling.DefaultSpec() = %+v", got, want)
	}
}

// setKey applies one autoscaling key (without the prefix) to s, the way
// the testdata cases name settings. Only what the cases need.
func setKey(s *autoscaling.Spec, key, val string) error {
	num := func() (float64, error) { return strconv.ParseFloat(strings.TrimSuffix(val, "%"), 64) }
	dur := func() (time.Duration, error) { return time.ParseDuration(val) }
	var err error
	var f float64
	var d time.Duration
	switch key {
	case "class":
		s.Class = autoscaling.Class(val)
	case "metric":
		s.Metric = autoscaling.Metric(val)
	case "averaging":
		s.Averaging = autoscaling.Averaging(val)
	case "target":
		f, err = num()
		s.Target = f
	case "target-utilization-percentage":
		f, err = num()
		s.TargetUtilization = f / 100
	case "window":
		d, err = dur()
		pct := float64(s.PanicWindow) / float64(s.StableWindow)
		s.StableWindow = d
		s.PanicWindow = max(time.Second, time.Duration(pct*float64(d)))
	case "panic-window-percentage":
		f, err = num()
		s.PanicWindow = max(time.Second, time.Duration(f/100*float64(s.StableWindow)))
	case "panic-threshold-percentage":
		f, err = num()
		s.PanicThreshold = f / 100
	case "max-scale-up-rate":
		f, err = num()
		s.MaxScaleUpRate = f
	case "max-scale-down-rate":
		f, err = num()
		s.MaxScaleDownRate = f
	case "min-scale":
		s.MinScale, err = strconv.Atoi(val)
	case "max-scale":
		s.MaxScale, err = strconv.Atoi(val)
	case "initial-scale":
		s.InitialScale, err = strconv.Atoi(val)
	case "activation-scale":
		s.ActivationScale, err = strconv.Atoi(val)
	case "scale-down-delay":
		s.ScaleDownDelay, err = dur()
	case "scale-to-zero-grace-period":
		s.ScaleToZeroGracePeriod, err = dur()
	case "scale-to-zero-pod-retention-period":
		s.ScaleToZeroPodRetention, err = dur()
	case "enable-scale-to-zero":
		s.ScaleToZeroEnabled, err = strconv.ParseBool(val)
	case "target-burst-capacity":
		f, err = num()
		s.TargetBurstCapacity = f
	default:
		return fmt.Errorf("unknown key %q", key)
	}
	if err != nil {
		return fmt.Errorf("%s=%s: %w", key, val, err)
	}
	return nil
}

// obs builds an observation at t seconds with the activator in the path,
// the usual state of a service the tests scale.
func obs(t float64, ready int, stable, panic float64) Observation {
	return Observation{Now: at(t), Ready: ready, Stable: stable, Panic: panic, ActivatorInPath: true}
}
