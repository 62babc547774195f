package engine

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/swell-run/swell/pkg/autoscaling"
)

// TestMetricsBeyondRequests: each case records the same second of load for
// ten seconds and decides, with the pods ready that the case names. The
// request target per pod is 70 (the default 100 at 70%), so one pod's
// worth of concurrency is 70; the expected pods are worked out by hand.
func TestMetricsBeyondRequests(t *testing.T) {
	for _, tt := range []struct {
		name   string
		keys   []string
		sample Sample
		ready  int
		// cpu and memory requests of the app container, when a target
		// is a percentage of them.
		cpuRequest float64
		want       int
		// by is the reason's first word when a metric beyond requests
		// decides; "" when requests do.
		by string
	}{
		{name: "cpu outweighs concurrency: 2 cores at 500m a pod is 4 pods, 7 in flight is 0.1",
			keys:   []string{"metric", "concurrency,cpu", "cpu-target", "500m"},
			sample: Sample{Concurrency: 7, CPU: 2, HasCPU: true}, ready: 4, want: 4, by: "cpu"},
		{name: "concurrency outweighs cpu: 280 in flight is 4 pods, 0.25 cores is 0.5",
			keys:   []string{"metric", "concurrency,cpu", "cpu-target", "500m"},
			sample: Sample{Concurrency: 280, CPU: 0.25, HasCPU: true}, ready: 4, want: 4},
		{name: "cpu alone: requests keep one pod, no more (350 in flight, no CPU)",
			keys:   []string{"metric", "cpu", "cpu-target", "500m"},
			sample: Sample{Concurrency: 350, HasCPU: true}, ready: 1, want: 1},
		{name: "cpu alone: 1 core at 500m is 2 pods; 350 in flight count as one",
			keys:   []string{"metric", "cpu", "cpu-target", "500m"},
			sample: Sample{Concurrency: 350, CPU: 1, HasCPU: true}, ready: 2, want: 2, by: "cpu"},
		{name: "cpu at rest: 0.04 cores is 0.08 of a pod, under a tenth: idle",
			keys:   []string{"metric", "concurrency,cpu", "cpu-target", "500m"},
			sample: Sample{CPU: 0.04, HasCPU: true}, ready: 0, want: 0},
		{name: "cpu just above rest: 0.06 cores is 0.12 of a pod: one pod",
			keys:   []string{"metric", "concurrency,cpu", "cpu-target", "500m"},
			sample: Sample{CPU: 0.06, HasCPU: true}, ready: 1, want: 1, by: "cpu"},
		{name: "cpu at 70% of a 500m request is 350m a pod: 0.7 cores is 2 pods",
			keys:   []string{"metric", "cpu"},
			sample: Sample{CPU: 0.7, HasCPU: true}, ready: 2, cpuRequest: 0.5, want: 2, by: "cpu"},
		{name: "memory without work does not hold pods",
			keys:   []string{"metric", "concurrency,memory", "memory-target", "100Mi"},
			sample: Sample{Memory: 300 << 20, HasMemory: true}, ready: 0, want: 0},
		{name: "memory with work: 300Mi at 100Mi a pod is 3 pods",
			keys:   []string{"metric", "concurrency,memory", "memory-target", "100Mi"},
			sample: Sample{Concurrency: 7, Memory: 300 << 20, HasMemory: true}, ready: 3, want: 3, by: "memory"},
		{name: "gauge, average: 30 waiting over all pods at 5 a pod is 6 pods",
			keys:   []string{"metric", "gauge", "gauge", "waiting", "gauge-target", "5"},
			sample: Sample{Gauge: 30, HasGauge: true}, ready: 6, want: 6, by: "gauge"},
		{name: "gauge, sum: a total of 30 against 10 on 3 pods asks for 9",
			keys:   []string{"metric", "gauge", "gauge", "waiting", "gauge-target", "10", "gauge-aggregation", "sum"},
			sample: Sample{Gauge: 30, HasGauge: true}, ready: 3, want: 9, by: "gauge"},
		{name: "gauge at zero and no requests: idle",
			keys:   []string{"metric", "concurrency,gauge", "gauge", "waiting", "gauge-target", "5"},
			sample: Sample{HasGauge: true}, ready: 0, want: 0},
		{name: "no pod reported the gauge: the service scales on concurrency",
			keys:   []string{"metric", "concurrency,gauge", "gauge", "waiting", "gauge-target", "5"},
			sample: Sample{Concurrency: 140}, ready: 2, want: 2},
		{name: "an unlisted metric is not read",
			keys:   []string{"cpu-target", "500m"},
			sample: Sample{Concurrency: 70, CPU: 8, HasCPU: true}, ready: 1, want: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sp, err := spec(t, tt.keys...).WithRequests(tt.cpuRequest, 0)
			if err != nil {
				t.Fatal(err)
			}
			e := New(sp, sec(0), 0)
			for s := range 10 {
				sm := tt.sample
				sm.Time = sec(s)
				e.Record(sm)
			}
			d := e.Decide(Inputs{Now: mid(9), Ready: tt.ready})
			if d.Desired != tt.want {
				t.Errorf("desired %d, want %d (stable %v, panic %v: %s)", d.Desired, tt.want, d.Stable, d.Panic, d.Reason)
			}
			by, _, _ := strings.Cut(d.Reason, ": ")
			switch {
			case tt.by != "" && by != tt.by:
				t.Errorf("reason %q does not name %s", d.Reason, tt.by)
			case tt.by == "" && slices.Contains([]string{"cpu", "memory", "gauge"}, by):
				t.Errorf("reason %q names %s, but requests decide", d.Reason, by)
			}
		})
	}
}

// TestTargetChangeRestartsItsWindow: a window in pods' worth means nothing
// under another target, so a new target starts it afresh, while a change
// elsewhere keeps it.
func TestTargetChangeRestartsItsWindow(t *testing.T) {
	e := New(spec(t, "metric", "concurrency,cpu", "cpu-target", "500m"), sec(0), 0)
	for s := range 10 {
		e.Record(Sample{Time: sec(s), CPU: 2, HasCPU: true})
	}
	e.SetSpec(spec(t, "metric", "concurrency,cpu", "cpu-target", "500m", "min-scale", "1"))
	if d := e.Decide(Inputs{Now: mid(9), Ready: 4}); d.Desired != 4 {
		t.Errorf("after an unrelated change: desired %d, want the 4 pods the CPU asks for", d.Desired)
	}
	e.SetSpec(spec(t, "metric", "concurrency,cpu", "cpu-target", "1"))
	if d := e.Decide(Inputs{Now: mid(9), Ready: 4}); d.Stable != 0 {
		t.Errorf("after a new cpu-target: stable %v, want nothing read from the old window", d.Stable)
	}
	e.Record(Sample{Time: sec(10), CPU: 2, HasCPU: true})
	if d := e.Decide(Inputs{Now: mid(10), Ready: 4}); d.Desired != 2 {
		t.Errorf("2 cores at 1 core a pod: desired %d, want 2 (%s)", d.Desired, d.Reason)
	}
}

func TestPercentTargetNeedsARequest(t *testing.T) {
	_, err := spec(t, "metric", "cpu").WithRequests(0, 0)
	var ae *autoscaling.Error
	if err == nil || !errors.As(err, &ae) || ae.Key != autoscaling.KeyCPUTarget ||
		!strings.Contains(err.Error(), "set the app container's resources.requests.cpu") {
		t.Errorf("cpu at 70%% without a request: %v", err)
	}
	if _, err := spec(t, "metric", "memory", "memory-target", "1Gi").WithRequests(0, 0); err != nil {
		t.Errorf("an amount needs no request: %v", err)
	}
	if _, err := spec(t, "cpu-target", "70%").WithRequests(0, 0); err != nil {
		t.Errorf("an unlisted metric needs no request: %v", err)
	}
}

// TestReasonNamesTheMetricsTarget: when a metric beyond requests decides,
// the reason names it and its own target, not the request target.
func TestReasonNamesTheMetricsTarget(t *testing.T) {
	for _, tt := range []struct {
		keys   []string
		sample Sample
		want   string
	}{
		{[]string{"metric", "concurrency,cpu", "cpu-target", "500m"}, Sample{CPU: 2, HasCPU: true}, "cpu: stable at cpu-target 500m"},
		{[]string{"metric", "gauge", "gauge", "waiting", "gauge-target", "5"}, Sample{Gauge: 30, HasGauge: true}, "gauge: stable at gauge-target 5"},
		{[]string{"metric", "concurrency,cpu", "cpu-target", "500m"}, Sample{Concurrency: 280, CPU: 0.25, HasCPU: true}, "stable at target 70"},
	} {
		e := New(spec(t, tt.keys...), sec(0), 0)
		for s := range 10 {
			sm := tt.sample
			sm.Time = sec(s)
			e.Record(sm)
		}
		ready := 4
		if tt.sample.HasGauge {
			ready = 6
		}
		if d := e.Decide(Inputs{Now: mid(9), Ready: ready}); d.Reason != tt.want {
			t.Errorf("%v: reason %q, want %q", tt.keys, d.Reason, tt.want)
		}
	}
}
