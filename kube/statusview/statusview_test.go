package statusview

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	ktesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/swell-run/swell/kube"
)

var (
	now = time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)
	// decided is a status annotation as the autoscaler writes it.
	decided = kube.Status{Ready: 3, Desired: 4, Recommended: 5, Panic: true, Route: "pods",
		Reason: "panic: wants 5 pods for 3 ready at target 70", Memory: "AQI=",
		Class: "kpa", Metric: "concurrency", TargetPerPod: 70,
		Loads: kube.StatusLoads{Time: now.Add(-time.Minute), Load: 301, Stable: 180.5, Panic: 290,
			ExcessBurstCapacity: -math.MaxFloat64, Queued: 12}}
)

func annotation(t *testing.T, st any) string {
	t.Helper()
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// deployment is an opted-in Deployment with status annotation status (none
// when empty).
func deployment(ns, name, status string, replicas, ready int32) *appsv1.Deployment {
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "-" + name),
			Labels: map[string]string{kube.LabelEnabled: "true"}},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{kube.LabelEnabled: "true"}}}},
		Status: appsv1.DeploymentStatus{ReadyReplicas: ready},
	}
	if status != "" {
		d.Annotations = map[string]string{kube.AnnotationStatus: status}
	}
	return d
}

// event is an Event the autoscaler's recorder would write on d.
func event(d *appsv1.Deployment, name, typ, reason, msg string, at time.Time, count int32) *corev1.Event {
	return &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: d.Namespace, Name: name},
		InvolvedObject: corev1.ObjectReference{Kind: "Deployment", APIVersion: "apps/v1",
			Namespace: d.Namespace, Name: d.Name, UID: d.UID},
		Type: typ, Reason: reason, Message: msg, Count: count,
		FirstTimestamp: metav1.NewTime(at), LastTimestamp: metav1.NewTime(at),
		Source:              corev1.EventSource{Component: kube.AutoscalerComponent, Host: "autoscaler-0"},
		ReportingController: kube.AutoscalerComponent,
	}
}

func cluster(t *testing.T) *fake.Clientset {
	t.Helper()
	hello := deployment("default", "hello", annotation(t, decided), 4, 3)
	fresh := deployment("default", "fresh", "", 2, 1)
	broken := deployment("default", "broken", `{"ready":`, 1, 1)
	plain := deployment("default", "plain", "", 1, 1)
	delete(plain.Labels, kube.LabelEnabled)
	half := deployment("default", "half", annotation(t, decided), 1, 0)
	delete(half.Spec.Template.Labels, kube.LabelEnabled)
	old := deployment("team-a", "old", `{"ready":1,"desired":1,"recommended":1,"panic":false,"activatorInPath":true,"route":"activator","reason":"stable at target 10"}`, 1, 1)

	kubelet := event(hello, "e-kubelet", "Normal", "ScalingReplicaSet", "scaled up", now, 1)
	kubelet.Source, kubelet.ReportingController = corev1.EventSource{Component: "deployment-controller"}, "deployment-controller"
	earlier := event(hello, "e-earlier", "Normal", "ScaledUp", "0 → 1: poke", now, 1)
	earlier.InvolvedObject.UID = "a-deleted-hello"
	return fake.NewClientset(hello, fresh, broken, plain, half, old,
		event(hello, "e2", "Normal", "PanicStarted", "panic: wants 5 pods for 3 ready at target 70", now.Add(-30*time.Second), 1),
		event(hello, "e1", "Normal", "ScaledUp", "1 → 3: stable at target 70", now.Add(-2*time.Minute), 1),
		event(hello, "e3", "Warning", "ScaleFailed", "set scale: boom (retry in 400ms)", now.Add(-10*time.Second), 3),
		kubelet, earlier,
	)
}

func TestGet(t *testing.T) {
	clock := clocktesting.NewFakePassiveClock(now)
	v, err := Get(t.Context(), Config{Client: cluster(t), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	if !v.Time.Equal(now) || v.Namespace != "" {
		t.Errorf("view at %v in %q, want %v in every namespace", v.Time, v.Namespace, now)
	}
	var names []string
	for _, s := range v.Services {
		names = append(names, s.Namespace+"/"+s.Name)
	}
	if got, want := strings.Join(names, " "), "default/broken default/fresh default/half default/hello team-a/old"; got != want {
		t.Fatalf("services %s, want %s", got, want)
	}
	by := func(name string) Service {
		for _, s := range v.Services {
			if s.Name == name {
				return s
			}
		}
		t.Fatalf("no service %s", name)
		return Service{}
	}

	hello := by("hello")
	wantHello := Service{Namespace: "default", Name: "hello", Ready: 3, Desired: 4, Decided: true, Recommended: 5,
		Route: "pods", Class: "kpa", Metric: "concurrency", TargetPerPod: 70, PanicMode: true,
		LoadsAsOf: now.Add(-time.Minute), Load: 301, Stable: 180.5, Panic: 290, ExcessBurstCapacity: -math.MaxFloat64, Queued: 12,
		Reason: "panic: wants 5 pods for 3 ready at target 70",
		Events: []Event{
			{Time: now.Add(-2 * time.Minute), Text: "ScaledUp 1 → 3: stable at target 70", Type: "Normal", Reason: "ScaledUp", Count: 1},
			{Time: now.Add(-30 * time.Second), Text: "PanicStarted panic: wants 5 pods for 3 ready at target 70", Type: "Normal", Reason: "PanicStarted", Count: 1},
			{Time: now.Add(-10 * time.Second), Text: "ScaleFailed set scale: boom (retry in 400ms)", Type: "Warning", Reason: "ScaleFailed", Count: 3},
		}}
	if !equalService(hello, wantHello) {
		t.Errorf("hello:\n got %+v\nwant %+v", hello, wantHello)
	}

	// Not decided yet: what the Deployment says, nothing more.
	if got, want := by("fresh"), (Service{Namespace: "default", Name: "fresh", Ready: 1, Desired: 2, Events: []Event{}}); !equalService(got, want) {
		t.Errorf("fresh:\n got %+v\nwant %+v", got, want)
	}
	// A status that does not read is the reason, and hides nothing else.
	if got := by("broken"); got.Decided || got.Desired != 1 || !strings.HasPrefix(got.Reason, "status annotation unreadable: ") {
		t.Errorf("broken: %+v", got)
	}
	// Labelled but not its pod template: not autoscaled, and its
	// annotation is stale.
	if got := by("half"); got.Decided || got.Route != "" || !strings.Contains(got.Reason, "not autoscaled: its pod template is not labelled swell.run/enabled") {
		t.Errorf("half: %+v", got)
	}
	// An annotation from an autoscaler before the policy and loads.
	if got := by("old"); !got.Decided || got.Route != "activator" || got.Metric != "" || !got.LoadsAsOf.IsZero() || got.Reason != "stable at target 10" {
		t.Errorf("old: %+v", got)
	}

	// One namespace.
	v, err = Get(t.Context(), Config{Client: cluster(t), Namespace: "team-a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Services) != 1 || v.Services[0].Name != "old" || v.Namespace != "team-a" {
		t.Errorf("namespace team-a: %+v", v)
	}
}

func equalService(a, b Service) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// The view is what the JSON of `swell status` prints: its field names are
// those of swell local's where they mean the same, and it reads back.
func TestViewJSON(t *testing.T) {
	v, err := Get(t.Context(), Config{Client: cluster(t), Namespace: "default", Clock: clocktesting.NewFakePassiveClock(now)})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("the view does not encode: %v", err)
	}
	var doc struct {
		Namespace string           `json:"namespace"`
		Services  []map[string]any `json:"services"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	s := doc.Services[3] // hello
	for _, k := range []string{"namespace", "name", "ready", "desired", "route", "class", "metric", "targetPerPod",
		"load", "stable", "panic", "panicMode", "excessBurstCapacity", "queued", "reason", "events", "decided", "loadsAsOf"} {
		if _, ok := s[k]; !ok {
			t.Errorf("service lacks %q: %s", k, b)
		}
	}
	if _, ok := doc.Services[1]["loadsAsOf"]; ok {
		t.Errorf("an undecided service has loadsAsOf: %v", doc.Services[1])
	}
	var back View
	if err := json.Unmarshal(b, &back); err != nil || !equalService(back.Services[3], v.Services[3]) {
		t.Errorf("round trip: %v\n got %+v\nwant %+v", err, back.Services[3], v.Services[3])
	}
}

func TestWatch(t *testing.T) {
	cs := cluster(t)
	ctx, cancel := context.WithCancel(t.Context())
	views := make(chan View, 100)
	done := make(chan error, 1)
	go func() { done <- Watch(ctx, Config{Client: cs, Namespace: "default"}, func(v View) { views <- v }) }()
	next := func(what string, ok func(View) bool) View {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case v := <-views:
				if ok(v) {
					return v
				}
			case err := <-done:
				t.Fatalf("watch ended waiting for %s: %v", what, err)
			case <-timeout:
				t.Fatalf("no view with %s", what)
			}
		}
	}
	find := func(v View, name string) (Service, bool) {
		for _, s := range v.Services {
			if s.Name == name {
				return s, true
			}
		}
		return Service{}, false
	}

	first := next("the services", func(v View) bool { return len(v.Services) == 4 })
	if s, _ := find(first, "hello"); s.Desired != 4 {
		t.Fatalf("hello: %+v", s)
	}

	// A new decision is a new view.
	st := decided
	st.Desired, st.Reason, st.Loads.Load = 6, "panic: wants 6 pods for 3 ready at target 70", 420
	d, err := cs.AppsV1().Deployments("default").Get(ctx, "hello", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d.Annotations[kube.AnnotationStatus] = annotation(t, st)
	d.Spec.Replicas = new(int32(6))
	if _, err := cs.AppsV1().Deployments("default").Update(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	next("hello at 6", func(v View) bool {
		s, _ := find(v, "hello")
		return s.Desired == 6 && s.Load == 420 && s.Reason == st.Reason
	})

	// So is an event, and a Deployment that opts in.
	if _, err := cs.CoreV1().Events("default").Create(ctx, event(d, "e4", "Normal", "ScaledUp", "4 → 6: panic", now, 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	next("the event", func(v View) bool {
		s, _ := find(v, "hello")
		return len(s.Events) == 4 && s.Events[3].Text == "ScaledUp 4 → 6: panic"
	})
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, deployment("default", "new", "", 0, 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	next("the new deployment", func(v View) bool { _, ok := find(v, "new"); return ok })

	// Gone, and out of the view.
	if err := cs.AppsV1().Deployments("default").Delete(ctx, "fresh", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	next("fresh gone", func(v View) bool { _, ok := find(v, "fresh"); return !ok })

	cancel()
	if err := <-done; err != nil {
		t.Errorf("watch ended with %v, want nil", err)
	}
}

// What the server refuses at the start is the answer, not a hang.
func TestListRefused(t *testing.T) {
	cs := cluster(t)
	cs.PrependReactor("list", "events", func(ktesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "events"}, "", errors.New(`User "dev" cannot list resource "events"`))
	})
	_, err := Get(t.Context(), Config{Client: cs, Namespace: "default"})
	if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "read namespace default: list events: ") {
		t.Errorf("Get: %v, want the refusal to list events in namespace default", err)
	}
	err = Watch(t.Context(), Config{Client: cs}, func(View) { t.Error("a view without events") })
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "every namespace") {
		t.Errorf("Watch: %v, want the refusal", err)
	}
}
