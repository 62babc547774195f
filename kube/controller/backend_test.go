package controller

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ktesting "k8s.io/client-go/testing"

	"github.com/swell-run/swell/autoscaler/plan"
	"github.com/swell-run/swell/autoscaler/scaler"
	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/pkg/service"
)

// scaleActions returns the actions on Deployments' scale subresource, as
// "get" or "update".
func scaleActions(h *harness) []string {
	var out []string
	for _, a := range h.cs.Actions() {
		if a.GetResource() == deploymentsGVR && a.GetSubresource() == "scale" {
			out = append(out, a.GetVerb())
		}
	}
	return out
}

func replicasOf(t *testing.T, h *harness, name string) int32 {
	t.Helper()
	obj, err := h.cs.Tracker().Get(deploymentsGVR, testNS, name)
	if err != nil {
		t.Fatal(err)
	}
	return *obj.(*appsv1.Deployment).Spec.Replicas
}

func TestSetScaleUsesTheScaleSubresource(t *testing.T) {
	h := newHarness(t)
	h.start()
	key := service.Key{Namespace: testNS, Name: "hello"}
	h.create(deployment("hello", nil))

	h.cs.ClearActions()
	if err := h.b.SetScale(h.ctx, key, 3); err != nil {
		t.Fatal(err)
	}
	if got := scaleActions(h); !slices.Equal(got, []string{"get", "update"}) {
		t.Errorf("scale actions %q, want get, update", got)
	}
	for _, a := range h.cs.Actions() {
		if a.GetVerb() == "update" && a.GetSubresource() != "scale" {
			t.Errorf("the deployment itself was written: %v", a)
		}
	}
	if n := replicasOf(t, h, "hello"); n != 3 {
		t.Errorf("replicas %d, want 3", n)
	}

	// Already at 3: read, not written.
	h.cs.ClearActions()
	if err := h.b.SetScale(h.ctx, key, 3); err != nil {
		t.Fatal(err)
	}
	if got := scaleActions(h); !slices.Equal(got, []string{"get"}) {
		t.Errorf("scale actions %q, want only get", got)
	}

	// A conflict is retried on a fresh read.
	conflicts := 1
	h.cs.PrependReactor("update", "deployments", func(a ktesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "scale" || conflicts == 0 {
			return false, nil, nil
		}
		conflicts--
		return true, nil, apierrors.NewConflict(deploymentsGVR.GroupResource(), "hello", errors.New("changed"))
	})
	h.cs.ClearActions()
	if err := h.b.SetScale(h.ctx, key, 5); err != nil {
		t.Fatal(err)
	}
	if got := scaleActions(h); !slices.Equal(got, []string{"get", "update", "get", "update"}) {
		t.Errorf("scale actions %q, want get, update (conflict), get, update", got)
	}
	if n := replicasOf(t, h, "hello"); n != 5 {
		t.Errorf("replicas %d, want 5", n)
	}

	if err := h.b.SetScale(h.ctx, key, -1); err == nil {
		t.Error("SetScale(-1): no error")
	}
}

func TestSetScaleRefusesDeploymentsNotOptedIn(t *testing.T) {
	h := newHarness(t)
	h.start()
	plain := deployment("plain", nil)
	delete(plain.Spec.Template.Labels, kube.LabelEnabled)
	h.create(plain)

	h.cs.ClearActions()
	for _, name := range []string{"plain", "missing"} {
		err := h.b.SetScale(h.ctx, service.Key{Namespace: testNS, Name: name}, 3)
		if !errors.Is(err, scaler.ErrNotFound) {
			t.Errorf("SetScale(%s) = %v, want ErrNotFound", name, err)
		}
	}
	if got := scaleActions(h); len(got) != 0 {
		t.Errorf("scale actions %q, want none", got)
	}
	if n := replicasOf(t, h, "plain"); n != 1 {
		t.Errorf("replicas %d, want 1", n)
	}
}

func TestStatusFromListers(t *testing.T) {
	h := newHarness(t)
	h.start()
	key := service.Key{Namespace: testNS, Name: "hello"}
	d := deployment("hello", nil)
	d.Spec.Replicas = new(int32(3))
	h.create(d)
	unset := deployment("unset", nil)
	unset.Spec.Replicas = nil
	h.create(unset)
	plain := deployment("plain", nil)
	delete(plain.Labels, kube.LabelEnabled)
	h.create(plain)
	h.router.setPods(key, "10.0.0.1", "10.0.0.2")
	h.router.setRoute(key, plan.RoutePods, plan.RouteActivator)

	h.cs.ClearActions()
	st, err := h.b.Status(h.ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	want := plan.Status{Desired: 3, Ready: 2, Route: plan.RoutePods, Requested: plan.RouteActivator}
	if st != want {
		t.Errorf("Status = %+v, want %+v", st, want)
	}
	st, err = h.b.Status(h.ctx, kube.KeyOf(unset))
	if err != nil || st.Desired != 1 || st.Ready != 0 {
		t.Errorf("Status of a deployment without replicas = %+v, %v; want desired 1", st, err)
	}
	for _, name := range []string{"plain", "missing"} {
		if _, err := h.b.Status(h.ctx, service.Key{Namespace: testNS, Name: name}); !errors.Is(err, scaler.ErrNotFound) {
			t.Errorf("Status(%s) = %v, want ErrNotFound", name, err)
		}
	}
	if a := h.cs.Actions(); len(a) != 0 {
		t.Errorf("Status called the API: %v", a)
	}

	// SetRoute is the Router's.
	if err := h.b.SetRoute(h.ctx, key, plan.RoutePods); err != nil {
		t.Fatal(err)
	}
	if _, req := h.router.Route(key); req != plan.RoutePods {
		t.Errorf("requested route %v after SetRoute(pods)", req)
	}
}

func pod(name string, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, Annotations: annotations}}
}

func costOf(t *testing.T, h *harness, name string) (string, bool) {
	t.Helper()
	p, err := h.cs.CoreV1().Pods(testNS).Get(h.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, ok := p.Annotations[corev1.PodDeletionCost]
	return c, ok
}

// TestPreferRemovalLowersTheChosenPodsCost: the pods the loop names get a
// negative pod-deletion-cost, the later choice the lower, so that a pod
// marked before (for a scale-down a scale-up overtook) goes after the new
// choice; other annotations stay; a pod gone is skipped; a Deployment whose
// template sets the cost itself is left alone.
func TestPreferRemovalLowersTheChosenPodsCost(t *testing.T) {
	h := newHarness(t,
		pod("pod-1", map[string]string{"team": "a"}), pod("pod-2", nil), pod("pod-3", nil))
	h.start()
	key := service.Key{Namespace: testNS, Name: "hello"}
	h.create(deployment("hello", nil))
	h.router.setPods(key, "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4")

	if err := h.b.PreferRemoval(h.ctx, key, []string{"10.0.0.1:9090", "10.0.0.4:9090"}); err != nil {
		t.Fatal(err)
	}
	first, ok := costOf(t, h, "pod-1")
	if !ok || !strings.HasPrefix(first, "-") {
		t.Fatalf("pod-1's cost %q (%v), want a negative one", first, ok)
	}
	if p, _ := h.cs.CoreV1().Pods(testNS).Get(h.ctx, "pod-1", metav1.GetOptions{}); p.Annotations["team"] != "a" {
		t.Errorf("pod-1's other annotations: %v", p.Annotations)
	}
	for _, name := range []string{"pod-2", "pod-3"} {
		if c, ok := costOf(t, h, name); ok {
			t.Errorf("%s not chosen, but its cost is %q", name, c)
		}
	}

	h.clock.Step(time.Minute)
	if err := h.b.PreferRemoval(h.ctx, key, []string{"10.0.0.2:9090"}); err != nil {
		t.Fatal(err)
	}
	second, _ := costOf(t, h, "pod-2")
	a, _ := strconv.Atoi(first)
	b, _ := strconv.Atoi(second)
	if b >= a {
		t.Errorf("the later choice costs %d, the earlier %d: want the later lower", b, a)
	}

	own := deployment("own", nil)
	own.Spec.Template.Annotations = map[string]string{corev1.PodDeletionCost: "5"}
	h.create(own)
	ownKey := service.Key{Namespace: testNS, Name: "own"}
	h.router.setPods(ownKey, "10.0.0.3")
	h.cs.ClearActions()
	if err := h.b.PreferRemoval(h.ctx, ownKey, []string{"10.0.0.3:9090"}); err != nil {
		t.Fatal(err)
	}
	for _, a := range h.cs.Actions() {
		if a.GetVerb() == "patch" {
			t.Errorf("a Deployment with its own deletion costs had a pod patched: %v", a)
		}
	}
}

func TestDeletionCostCountsDown(t *testing.T) {
	for _, tc := range []struct {
		at   time.Time
		want int32
	}{
		{costEpoch.Add(-time.Hour), -1},
		{costEpoch, -1},
		{costEpoch.Add(90 * time.Second), -90},
		{costEpoch.Add(100 * 365 * 24 * time.Hour), -math.MaxInt32},
	} {
		if got := deletionCost(tc.at); got != tc.want {
			t.Errorf("deletionCost(%v) = %d, want %d", tc.at, got, tc.want)
		}
	}
}
