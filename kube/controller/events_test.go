package controller

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/types"
	ktesting "k8s.io/client-go/testing"

	"github.com/swell-run/swell/autoscaler"
	"github.com/swell-run/swell/autoscaler/decider"
	"github.com/swell-run/swell/autoscaler/plan"
	"github.com/swell-run/swell/autoscaler/scaler"
	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/pkg/service"
	"github.com/swell-run/swell/pkg/stats"
)

func TestEventsOnTheDeployment(t *testing.T) {
	h := newHarness(t)
	h.start()
	key := service.Key{Namespace: testNS, Name: "hello"}
	h.create(deployment("hello", nil))
	plain := deployment("plain", nil)
	delete(plain.Labels, kube.LabelEnabled)
	h.create(plain)

	for _, tc := range []struct {
		name   string
		do     func(service.Key)
		events []string
	}{
		{"scale up", func(k service.Key) {
			h.b.OnEvent(scaler.Event{Service: k, Kind: scaler.EventScale, From: 1, To: 3, Reason: "stable at target 70"})
		}, []string{onDeployment("Normal ScaledUp 1 → 3: stable at target 70")}},
		{"scale down", func(k service.Key) {
			h.b.OnEvent(scaler.Event{Service: k, Kind: scaler.EventScale, From: 3, To: 2, Reason: "stable at target 70"})
		}, []string{onDeployment("Normal ScaledDown 3 → 2: stable at target 70")}},
		{"scale to zero", func(k service.Key) {
			h.b.OnEvent(scaler.Event{Service: k, Kind: scaler.EventScale, From: 2, To: 0, Reason: "scale to zero after 30s idle"})
		}, []string{onDeployment("Normal ScaledToZero 2 → 0: scale to zero after 30s idle")}},
		{"route activator", func(k service.Key) {
			h.b.OnEvent(scaler.Event{Service: k, Kind: scaler.EventRoute, FromRoute: plan.RoutePods, ToRoute: plan.RouteActivator,
				Reason: "before scale to zero"})
		}, []string{onDeployment("Normal RouteActivator before scale to zero")}},
		{"route pods", func(k service.Key) {
			h.b.OnEvent(scaler.Event{Service: k, Kind: scaler.EventRoute, FromRoute: plan.RouteActivator, ToRoute: plan.RoutePods,
				Reason: "stable at target 70"})
		}, []string{onDeployment("Normal RoutePods stable at target 70")}},
		{"error", func(k service.Key) {
			h.b.OnEvent(scaler.Event{Service: k, Kind: scaler.EventError, Err: errors.New("set scale: boom"), RetryIn: 400 * time.Millisecond})
		}, []string{onDeployment("Warning ScaleFailed set scale: boom (retry in 400ms)")}},
		{"panic started", func(k service.Key) {
			h.b.OnNotable(autoscaler.Notable{Service: k, From: 1, PanicChanged: true,
				Decision: decider.Decision{Scale: 3, InPanic: true, Reason: "panic: wants 3 pods for 1 ready at target 70"}})
		}, []string{onDeployment("Normal PanicStarted panic: wants 3 pods for 1 ready at target 70")}},
		{"panic ended", func(k service.Key) {
			h.b.OnNotable(autoscaler.Notable{Service: k, From: 3, PanicChanged: true,
				Decision: decider.Decision{Scale: 3, Reason: "stable at target 70"}})
		}, []string{onDeployment("Normal PanicEnded stable at target 70")}},
		{"gauge unreadable", func(k service.Key) {
			h.b.OnGaugeProblem(autoscaler.GaugeProblem{Service: k, Gauge: "num_requests_waiting", Problem: stats.GaugeTooLarge, Pods: 2})
		}, []string{onDeployment("Warning GaugeUnreadable 2 pods cannot read the app gauge num_requests_waiting: too large (see the queue-proxy's log); scaling on the other metrics meanwhile")}},
		{"gauge readable", func(k service.Key) {
			h.b.OnGaugeProblem(autoscaler.GaugeProblem{Service: k, Gauge: "num_requests_waiting"})
		}, []string{onDeployment("Normal GaugeReadable the pods read the app gauge num_requests_waiting again")}},
		{"scale change without panic change", func(k service.Key) {
			h.b.OnNotable(autoscaler.Notable{Service: k, From: 3, Decision: decider.Decision{Scale: 4, Reason: "stable at target 70"}})
		}, nil},
	} {
		tc.do(key)
		if ev := h.events(); !slices.Equal(ev, tc.events) {
			t.Errorf("%s: events %q, want %q", tc.name, ev, tc.events)
		}
		// Each one schedules the status annotation's update.
		if n := h.c.queue.Len(); n != 1 {
			t.Errorf("%s: queue holds %d items, want the deployment", tc.name, n)
		}
		h.drain()

		// Nothing is recorded on a Deployment that is not opted in, or
		// gone.
		tc.do(kube.KeyOf(plain))
		tc.do(service.Key{Namespace: testNS, Name: "missing"})
		if ev := h.events(); len(ev) != 0 {
			t.Errorf("%s: events on deployments that are not opted in: %q", tc.name, ev)
		}
		h.drain()
	}
}

// statusPatches returns the merge patches written to Deployments.
func statusPatches(h *harness) []string {
	var out []string
	for _, a := range h.cs.Actions() {
		if p, ok := a.(ktesting.PatchAction); ok && a.GetResource() == deploymentsGVR {
			if p.GetPatchType() != types.MergePatchType {
				h.t.Errorf("patch type %s, want a merge patch", p.GetPatchType())
			}
			out = append(out, string(p.GetPatch()))
		}
	}
	return out
}

func statusOf(t *testing.T, h *harness, name string) (kube.Status, bool) {
	t.Helper()
	obj, err := h.cs.Tracker().Get(deploymentsGVR, testNS, name)
	if err != nil {
		t.Fatal(err)
	}
	text, ok := obj.(*appsv1.Deployment).Annotations[kube.AnnotationStatus]
	if !ok {
		return kube.Status{}, false
	}
	var a kube.Status
	if err := json.Unmarshal([]byte(text), &a); err != nil {
		t.Fatalf("status annotation %q: %v", text, err)
	}
	return a, true
}

func TestStatusAnnotationIsPatchedOnlyWhenItChanges(t *testing.T) {
	h := newHarness(t)
	h.start()
	key := service.Key{Namespace: testNS, Name: "hello"}
	d := deployment("hello", map[string]string{"keep": "me"})
	h.create(d)
	h.router.setPods(key, "10.0.0.1", "10.0.0.2")
	h.router.setRoute(key, plan.RouteActivator, plan.RouteActivator)

	// Before the first decision there is nothing to report; the
	// controller looks again after a tick.
	h.sync(key)
	if p := statusPatches(h); len(p) != 0 {
		t.Fatalf("patched before a decision: %q", p)
	}
	h.clock.Step(autoscaler.DefaultTickInterval)
	h.eventually("the deployment to be requeued after a tick", func() bool { return h.c.queue.Len() == 1 })
	h.drain()

	ss := autoscaler.ServiceStatus{Decided: true, DecisionStatus: autoscaler.DecisionStatus{
		Time: h.clock.Now(), Ready: 2, Desired: 4, Scale: 3, PanicMode: true,
		Reason: "panic: wants 4 pods for 2 ready at target 70",
	}}
	h.scaling.setStatus(key, ss)
	h.b.OnNotable(autoscaler.Notable{Service: key, From: 2, Decision: decider.Decision{Scale: 3}})
	h.drain()
	if p := statusPatches(h); len(p) != 1 {
		t.Fatalf("patches %q, want 1", p)
	}
	want := kube.Status{Ready: 2, Desired: 3, Recommended: 4, Panic: true, ActivatorInPath: true, Route: "activator",
		Reason: "panic: wants 4 pods for 2 ready at target 70", Loads: kube.StatusLoads{Time: h.clock.Now()}}
	if got, ok := statusOf(t, h, "hello"); !ok || got != want {
		t.Errorf("status annotation %+v (present %v), want %+v", got, ok, want)
	}

	// The same content, before and after the cache shows the patch: no
	// write. A newer decision time alone changes nothing.
	ss.Time = ss.Time.Add(time.Minute)
	h.scaling.setStatus(key, ss)
	h.b.OnNotable(autoscaler.Notable{Service: key, From: 2, Decision: decider.Decision{Scale: 3}})
	h.drain()
	h.cached(key, func(d *appsv1.Deployment) bool { return d.Annotations[kube.AnnotationStatus] != "" })
	h.sync(key)
	if p := statusPatches(h); len(p) != 1 {
		t.Errorf("patches %q, want still 1", p)
	}

	// A change: written again.
	ss.Scale, ss.PanicMode = 4, false
	h.scaling.setStatus(key, ss)
	h.router.setRoute(key, plan.RoutePods, plan.RoutePods)
	h.b.OnEvent(scaler.Event{Service: key, Kind: scaler.EventScale, From: 3, To: 4})
	h.drain()
	if p := statusPatches(h); len(p) != 2 {
		t.Fatalf("patches %q, want 2", p)
	}
	want.Desired, want.Panic, want.ActivatorInPath, want.Route = 4, false, false, "pods"
	want.Loads.Time = ss.Time
	if got, _ := statusOf(t, h, "hello"); got != want {
		t.Errorf("status annotation %+v, want %+v", got, want)
	}
	obj, err := h.cs.Tracker().Get(deploymentsGVR, testNS, "hello")
	if err != nil {
		t.Fatal(err)
	}
	if got := obj.(*appsv1.Deployment); got.Annotations["keep"] != "me" || *got.Spec.Replicas != 1 {
		t.Errorf("the patch touched more than the annotation: %+v", got.ObjectMeta)
	}
}

func TestStatusAnnotationNeverOnDeploymentsNotOptedIn(t *testing.T) {
	h := newHarness(t)
	h.start()
	plain := deployment("plain", nil)
	delete(plain.Spec.Template.Labels, kube.LabelEnabled)
	h.create(plain)
	key := kube.KeyOf(plain)
	h.scaling.known[key] = true // as if it had been opted in before
	h.scaling.setStatus(key, autoscaler.ServiceStatus{Decided: true, DecisionStatus: autoscaler.DecisionStatus{Scale: 2}})
	h.b.OnEvent(scaler.Event{Service: key, Kind: scaler.EventScale, From: 1, To: 2})
	h.drain()
	if p := statusPatches(h); len(p) != 0 {
		t.Errorf("patches %q on a deployment not opted in", p)
	}
	if _, ok := statusOf(t, h, "plain"); ok {
		t.Error("a deployment not opted in has a status annotation")
	}
}

// What the loop keeps goes into the status annotation, is read back by
// Recall (as a new leader reads it from its cache), and a status written
// before the loop keeps anything again does not erase it.
func TestMemoryKeptInTheStatusAnnotation(t *testing.T) {
	h := newHarness(t)
	h.start()
	key := service.Key{Namespace: testNS, Name: "hello"}
	h.create(deployment("hello", nil))
	h.router.setPods(key, "10.0.0.1")
	h.router.setRoute(key, plan.RouteActivator, plan.RouteActivator)
	ss := autoscaler.ServiceStatus{Decided: true, DecisionStatus: autoscaler.DecisionStatus{
		Time: h.clock.Now(), Ready: 1, Desired: 1, Scale: 1, Reason: "stable at target 70"}}
	h.scaling.setStatus(key, ss)

	mem := []byte{1, 23, 203, 0, 1, 26, 20}
	if got := h.b.Recall(key); got != nil {
		t.Fatalf("recalled %x before anything was kept", got)
	}
	h.b.Keep(key, mem)
	h.drain()
	got, ok := statusOf(t, h, "hello")
	if !ok || got.Memory != base64.StdEncoding.EncodeToString(mem) || got.Reason != "stable at target 70" {
		t.Fatalf("status annotation %+v, want the memory with the status", got)
	}
	h.cached(key, func(d *appsv1.Deployment) bool { return d.Annotations[kube.AnnotationStatus] != "" })
	if got := h.b.Recall(key); !bytes.Equal(got, mem) {
		t.Errorf("recalled %x, want %x", got, mem)
	}

	// A new leader: it has kept nothing, and a changed status keeps the
	// memory that is there.
	h.b.forget(key)
	ss.Scale, ss.Reason = 2, "panic"
	h.scaling.setStatus(key, ss)
	h.b.OnNotable(autoscaler.Notable{Service: key, From: 1, Decision: decider.Decision{Scale: 2}})
	h.drain()
	if got, _ := statusOf(t, h, "hello"); got.Desired != 2 || got.Memory != base64.StdEncoding.EncodeToString(mem) {
		t.Errorf("status annotation %+v: the memory is gone", got)
	}

	// What is not a memory is not recalled.
	for _, bad := range []string{`{"memory":"%%%"}`, `{"memory":` + strconv.Quote(strings.Repeat("A", maxMemoryText+4)) + `}`, `not json`} {
		d := deployment("hello", map[string]string{kube.AnnotationStatus: bad})
		if got := annotatedMemory(d); got != nil {
			t.Errorf("annotation %.40q: recalled %x", bad, got)
		}
	}
}
