package controller

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/swell-run/swell/autoscaler"
	"github.com/swell-run/swell/autoscaler/decider"
	"github.com/swell-run/swell/autoscaler/plan"
	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/pkg/service"
)

// loaded is a decided loop status with the given replicas and loads.
func loaded(at time.Time, scale int, stable, panic, burst float64, pending int) autoscaler.ServiceStatus {
	return autoscaler.ServiceStatus{
		Class: "kpa", Metric: "concurrency", TargetPerPod: 70, Decided: true,
		LastSample: &autoscaler.SampleStatus{Time: at, Concurrency: panic + 1, RPS: 999},
		DecisionStatus: autoscaler.DecisionStatus{
			Time: at, Ready: scale, Desired: scale, Scale: scale, Stable: stable, Panic: panic,
			ExcessBurstCapacity: burst, ActivatorPending: pending, Reason: "stable at target 70",
		},
	}
}

// The loads ride along when the status is written for another reason, and
// never cost a write of their own.
func TestStatusLoadsAloneWriteNothing(t *testing.T) {
	h := newHarness(t)
	h.start()
	key := service.Key{Namespace: testNS, Name: "hello"}
	h.create(deployment("hello", nil))
	h.router.setPods(key, "10.0.0.1", "10.0.0.2")
	h.router.setRoute(key, plan.RoutePods, plan.RoutePods)
	decide := func(ss autoscaler.ServiceStatus) {
		h.scaling.setStatus(key, ss)
		h.b.OnNotable(autoscaler.Notable{Service: key, Decision: decider.Decision{Scale: ss.Scale}})
		h.drain()
	}

	t0 := h.clock.Now()
	decide(loaded(t0, 2, 120, 130, 10, 0))
	if p := statusPatches(h); len(p) != 1 {
		t.Fatalf("patches %q, want 1", p)
	}
	first := kube.StatusLoads{Time: t0, Load: 131, Stable: 120, Panic: 130, ExcessBurstCapacity: 10}
	if got, _ := statusOf(t, h, "hello"); got.Loads != first || got.Class != "kpa" || got.Metric != "concurrency" || got.TargetPerPod != 70 {
		t.Fatalf("status annotation %+v, want the policy and loads %+v", got, first)
	}

	// The loads move, the replicas do not: nothing is written, before and
	// after the cache shows the first write.
	decide(loaded(t0.Add(2*time.Second), 2, 100, 90, 40, 3))
	h.cached(key, func(d *appsv1.Deployment) bool { return d.Annotations[kube.AnnotationStatus] != "" })
	decide(loaded(t0.Add(4*time.Second), 2, 95, 80, 50, 1))
	h.sync(key)
	if p := statusPatches(h); len(p) != 1 {
		t.Fatalf("loads alone: patches %q, want still 1", p)
	}
	if got, _ := statusOf(t, h, "hello"); got.Loads != first {
		t.Errorf("loads %+v, want those of the write %+v", got.Loads, first)
	}

	// The desired replicas change: the write carries that decision's
	// loads, an always-in-the-path burst capacity as the most negative
	// float.
	t1 := t0.Add(6 * time.Second)
	decide(loaded(t1, 3, 180, 200, math.Inf(-1), 7))
	if p := statusPatches(h); len(p) != 2 {
		t.Fatalf("patches %q, want 2", p)
	}
	want := kube.StatusLoads{Time: t1, Load: 201, Stable: 180, Panic: 200, ExcessBurstCapacity: -math.MaxFloat64, Queued: 7}
	if got, _ := statusOf(t, h, "hello"); got.Desired != 3 || got.Loads != want {
		t.Errorf("status annotation %+v, want desired 3 and loads %+v", got, want)
	}
}

func TestSameStatus(t *testing.T) {
	at := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)
	a := kube.Status{Ready: 2, Desired: 3, Recommended: 3, Route: "pods", Reason: "stable at target 70",
		Class: "kpa", Metric: "rps", TargetPerPod: 140,
		Loads: kube.StatusLoads{Time: at, Load: 1, Stable: 2, Panic: 3, ExcessBurstCapacity: -math.MaxFloat64, Queued: 4}}
	text := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	other := a
	other.Loads = kube.StatusLoads{Time: at.Add(time.Hour), Load: 100}
	classless := `{"ready":2,"desired":3,"recommended":3,"panic":false,"activatorInPath":false,"route":"pods","reason":"stable at target 70"}`
	for _, tc := range []struct {
		name, text string
		same       bool
	}{
		{"itself", text(a), true},
		{"other loads", text(other), true},
		{"an annotation from before the policy and loads", classless, true},
		{"another desired", text(func() kube.Status { b := a; b.Desired = 4; return b }()), false},
		{"another metric", text(func() kube.Status { b := a; b.Metric = "concurrency"; return b }()), false},
		{"another target", text(func() kube.Status { b := a; b.TargetPerPod = 70; return b }()), false},
		{"another memory", text(func() kube.Status { b := a; b.Memory = "AQI="; return b }()), false},
		{"none", "", false},
		{"not JSON", "{", false},
	} {
		if got := sameStatus(tc.text, a); got != tc.same {
			t.Errorf("%s: sameStatus = %v, want %v", tc.name, got, tc.same)
		}
	}
}

// An annotation written by an older autoscaler reads, the next leader
// finds the memory in a new one, and a new one reads back as written,
// infinities included.
func TestStatusAnnotationJSON(t *testing.T) {
	var old kube.Status
	if err := json.Unmarshal([]byte(`{"ready":1,"desired":1,"recommended":1,"panic":false,"activatorInPath":true,"reason":"r","memory":"AQI="}`), &old); err != nil {
		t.Fatal(err)
	}
	if old.Memory != "AQI=" || old.Class != "" || !old.Loads.Time.IsZero() {
		t.Errorf("old annotation read as %+v", old)
	}

	at := time.Date(2031, 3, 4, 5, 6, 7, 8, time.UTC)
	ss := loaded(at, 2, 1.5, 2.25, math.Inf(1), 3)
	sa := statusAnnotation(ss, plan.Status{Ready: 2, Desired: 2, Route: plan.RouteActivator, Requested: plan.RouteActivator})
	sa.Memory = "AQI="
	b, err := json.Marshal(sa)
	if err != nil {
		t.Fatalf("an infinite burst capacity does not encode: %v", err)
	}
	var back kube.Status
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back != sa || back.Loads.ExcessBurstCapacity != math.MaxFloat64 {
		t.Errorf("round trip of %s:\n got %+v\nwant %+v", b, back, sa)
	}
	d := deployment("hello", map[string]string{kube.AnnotationStatus: string(b)})
	if got := annotatedMemory(d); string(got) != "\x01\x02" {
		t.Errorf("memory %x read from %s", got, b)
	}
}
