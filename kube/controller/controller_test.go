package controller

import (
	"context"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/kube/defaults"
	"github.com/swell-run/swell/kube/inject"
	"github.com/swell-run/swell/pkg/autoscaling"
	"github.com/swell-run/swell/pkg/service"
)

func mustParse(t *testing.T, d *appsv1.Deployment, defs autoscaling.Defaults) autoscaling.Spec {
	t.Helper()
	spec, err := parse(d, defs)
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

func parseError(d *appsv1.Deployment, defs autoscaling.Defaults) string {
	_, err := parse(d, defs)
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestOptedInDeploymentIsUpsertedWithItsSpecAndPods(t *testing.T) {
	h := newHarness(t)
	h.start()
	key := service.Key{Namespace: testNS, Name: "hello"}
	h.router.setPods(key, "10.0.0.1", "10.0.0.2")
	ann := map[string]string{
		autoscaling.Prefix + autoscaling.KeyMinScale: "1",
		autoscaling.ContainerConcurrencyKey:          "10",
		"example.com/unrelated":                      "x",
	}
	d := deployment("hello", ann)
	h.create(d)
	h.sync(key)

	calls := h.scaling.take()
	want := []call{
		{op: "upsert", key: key, spec: mustParse(t, d, autoscaling.DefaultDefaults())},
		{op: "pods", key: key, pods: []string{"10.0.0.1:9090", "10.0.0.2:9090"}},
	}
	if !reflect.DeepEqual(calls, want) {
		t.Fatalf("calls = %+v\nwant %+v", calls, want)
	}
	if got := calls[0].spec; got.MinScale != 1 || got.ContainerConcurrency != 10 || got.Target != 10 {
		t.Errorf("spec min-scale %d, container concurrency %d, target %v; want 1, 10, 10",
			got.MinScale, got.ContainerConcurrency, got.Target)
	}

	// The same spec is not upserted again; the pods are set again.
	h.router.setPods(key, "10.0.0.3")
	h.sync(key)
	if calls := h.scaling.take(); !reflect.DeepEqual(calls, []call{{op: "pods", key: key, pods: []string{"10.0.0.3:9090"}}}) {
		t.Errorf("second reconcile: calls = %+v, want only pods", calls)
	}

	// Changed annotations: a new spec.
	d.Annotations[autoscaling.Prefix+autoscaling.KeyMinScale] = "2"
	h.update(d)
	h.sync(key)
	ups := only(h.scaling.take(), "upsert")
	if len(ups) != 1 || ups[0].spec.MinScale != 2 {
		t.Fatalf("after the annotation changed: upserts %+v, want one with min-scale 2", ups)
	}
	if !reflect.DeepEqual(ups[0].spec, mustParse(t, d, autoscaling.DefaultDefaults())) {
		t.Errorf("spec = %+v, want the parsed annotations", ups[0].spec)
	}
	if ev := h.events(); len(ev) != 0 {
		t.Errorf("events %q, want none", ev)
	}
}

// controllerWithStatsPort is a controller over a fake router whose pods
// serve their stats on port.
func controllerWithStatsPort(t *testing.T, port int) *Controller {
	t.Helper()
	h := newHarness(t)
	cfg := Config{Client: h.cs, Informers: informers.NewSharedInformerFactory(h.cs, 0), Router: newFakeRouter(),
		Backend: h.b, Scaling: h.scaling, Defaults: h.store, Recorder: h.rec, StatsPort: port}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.queue.ShutDown)
	return c
}

func TestStatsPortIsConfigurable(t *testing.T) {
	c := controllerWithStatsPort(t, 9999)
	r := c.router.(*fakeRouter)
	key := service.Key{Namespace: testNS, Name: "a"}
	r.setPods(key, "10.0.0.1", "fd00::1")
	if got, want := c.podAddrs(key), []string{"10.0.0.1:9999", "[fd00::1]:9999"}; !slices.Equal(got, want) {
		t.Errorf("podAddrs = %q, want %q", got, want)
	}
}

// A push connection is the pod its source address is, among the
// service's ready pods, at the stats address the collector scrapes; what
// the pod claims is not read, and an address that is no ready pod of the
// service is refused.
func TestPodAddrResolvesReadyPodsOnly(t *testing.T) {
	c := controllerWithStatsPort(t, 9999)
	web := service.Key{Namespace: testNS, Name: "web"}
	shop := service.Key{Namespace: testNS, Name: "shop"}
	c.router.(*fakeRouter).setPods(web, "10.0.0.1", "fd00::1")
	c.router.(*fakeRouter).setPods(shop, "10.0.0.2")
	for _, tc := range []struct {
		svc    service.Key
		remote string
		want   string
		ok     bool
	}{
		{web, "10.0.0.1:41000", "10.0.0.1:9999", true},
		{web, "[::ffff:10.0.0.1]:41000", "10.0.0.1:9999", true}, // the same address, IPv4-mapped
		{web, "[fd00::1]:41000", "[fd00::1]:9999", true},
		{web, "10.0.0.2:41000", "", false}, // shop's pod pushing as web's
		{shop, "10.0.0.1:41000", "", false},
		{web, "10.9.9.9:41000", "", false},
	} {
		got, ok := c.PodAddr(tc.svc, netip.MustParseAddrPort(tc.remote), "10.0.0.1:9999")
		if got != tc.want || ok != tc.ok {
			t.Errorf("PodAddr(%s, %s) = %q, %v; want %q, %v", tc.svc, tc.remote, got, ok, tc.want, tc.ok)
		}
	}
	if _, ok := c.PodAddr(web, netip.AddrPort{}, "10.0.0.1:9999"); ok {
		t.Error("a connection without an address resolved")
	}
}

func TestInvalidAnnotationsKeepThePreviousSpec(t *testing.T) {
	h := newHarness(t)
	h.start()
	key := service.Key{Namespace: testNS, Name: "hello"}
	d := deployment("hello", map[string]string{autoscaling.Prefix + autoscaling.KeyMinScale: "1"})
	h.create(d)
	h.sync(key)
	if ups := only(h.scaling.take(), "upsert"); len(ups) != 1 {
		t.Fatalf("upserts %+v, want 1", ups)
	}

	d.Annotations[autoscaling.Prefix+autoscaling.KeyMinScale] = "abc"
	h.update(d)
	h.sync(key)
	msg := parseError(d, autoscaling.DefaultDefaults())
	if msg == "" {
		t.Fatal("the annotations parse; the test needs invalid ones")
	}
	want := []string{onDeployment("Warning InvalidAnnotations " + msg)}
	if ev := h.events(); !slices.Equal(ev, want) {
		t.Fatalf("events %q\nwant %q", ev, want)
	}
	// The service keeps running on its previous spec.
	if calls := h.scaling.take(); len(only(calls, "upsert")) != 0 || len(only(calls, "remove")) != 0 || len(only(calls, "pods")) != 1 {
		t.Errorf("calls %+v, want only pods", calls)
	}

	// The same problem is reported once.
	h.sync(key)
	if ev := h.events(); len(ev) != 0 {
		t.Errorf("second reconcile: events %q, want none", ev)
	}

	// Another problem is reported.
	d.Annotations[autoscaling.Prefix+autoscaling.KeyMinScale] = "-1"
	h.update(d)
	h.sync(key)
	if ev := h.events(); len(ev) != 1 {
		t.Errorf("after a new problem: events %q, want 1", ev)
	}

	// Fixed: the new spec is upserted.
	d.Annotations[autoscaling.Prefix+autoscaling.KeyMinScale] = "3"
	h.update(d)
	h.sync(key)
	if ups := only(h.scaling.take(), "upsert"); len(ups) != 1 || ups[0].spec.MinScale != 3 {
		t.Errorf("after the fix: upserts %+v, want one with min-scale 3", ups)
	}

	// A new Deployment with invalid annotations is not scaled at all;
	// every problem is in the one event.
	key2 := service.Key{Namespace: testNS, Name: "broken"}
	d2 := deployment("broken", map[string]string{
		autoscaling.Prefix + autoscaling.KeyMinScale: "abc",
		autoscaling.ContainerConcurrencyKey:          "-5",
	})
	h.create(d2)
	h.sync(key2)
	if calls := h.scaling.take(); len(calls) != 0 {
		t.Errorf("invalid new deployment: calls %+v, want none", calls)
	}
	ev := h.events()
	msg2 := parseError(d2, autoscaling.DefaultDefaults())
	if len(ev) != 1 || ev[0] != onDeployment("Warning InvalidAnnotations "+msg2) {
		t.Fatalf("events %q, want one with %q", ev, msg2)
	}
	for _, part := range []string{autoscaling.ContainerConcurrencyKey, autoscaling.KeyMinScale} {
		if !strings.Contains(msg2, part) {
			t.Errorf("message %q does not name %s", msg2, part)
		}
	}
}

// TestPercentageTargetsTakeTheAppsRequests: a percentage cpu-target is
// taken of the app container's request (not the queue-proxy's), and a
// template whose app has no request is an invalid spec, treated as bad
// annotations are: the previous spec is kept, a new Deployment is not
// autoscaled, and the user is told once.
func TestPercentageTargetsTakeTheAppsRequests(t *testing.T) {
	h := newHarness(t)
	h.start()
	key := service.Key{Namespace: testNS, Name: "hello"}
	d := deployment("hello", map[string]string{autoscaling.Prefix + autoscaling.KeyMetric: "concurrency,cpu"})
	tpl := &d.Spec.Template.Spec
	tpl.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}
	tpl.Containers = append(tpl.Containers, corev1.Container{Name: inject.ContainerName, Resources: inject.DefaultResources()})
	h.create(d)
	h.sync(key)
	ups := only(h.scaling.take(), "upsert")
	if len(ups) != 1 || ups[0].spec.CPURequest != 0.5 || ups[0].spec.CPUPerPod() != 0.35 {
		t.Fatalf("upserts %+v, want one with the app's CPU request 0.5 and 0.35 cores per pod", ups)
	}

	// The request removed: the previous spec stays, and one event says why.
	tpl.Containers[0].Resources = corev1.ResourceRequirements{}
	h.updateTemplate(d)
	h.sync(key)
	msg := parseError(d, autoscaling.DefaultDefaults())
	if !strings.Contains(msg, `autoscaling.swell.run/cpu-target: "70%" is a percentage of the app container's request, and it has none`) {
		t.Fatalf("message %q, want the one of Spec.WithRequests", msg)
	}
	if ev, want := h.events(), []string{onDeployment("Warning InvalidAnnotations " + msg)}; !slices.Equal(ev, want) {
		t.Fatalf("events %q\nwant %q", ev, want)
	}
	if calls := h.scaling.take(); len(only(calls, "upsert")) != 0 || len(only(calls, "remove")) != 0 || len(only(calls, "pods")) != 1 {
		t.Errorf("calls %+v, want only pods", calls)
	}
	h.sync(key)
	if ev := h.events(); len(ev) != 0 {
		t.Errorf("second reconcile: events %q, want none", ev)
	}

	// A limit alone is the request Kubernetes gives the container.
	tpl.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}
	h.updateTemplate(d)
	h.sync(key)
	if ups := only(h.scaling.take(), "upsert"); len(ups) != 1 || ups[0].spec.CPURequest != 2 {
		t.Errorf("after the limit: upserts %+v, want one with CPU request 2", ups)
	}

	// A new Deployment whose app has no request is not autoscaled.
	key2 := service.Key{Namespace: testNS, Name: "broken"}
	d2 := deployment("broken", map[string]string{autoscaling.Prefix + autoscaling.KeyMetric: "memory"})
	h.create(d2)
	h.sync(key2)
	if calls := h.scaling.take(); len(calls) != 0 {
		t.Errorf("new deployment without a request: calls %+v, want none", calls)
	}
	msg2 := parseError(d2, autoscaling.DefaultDefaults())
	if ev := h.events(); len(ev) != 1 || ev[0] != onDeployment("Warning InvalidAnnotations "+msg2) || !strings.Contains(msg2, "memory-target") {
		t.Errorf("events %q, want one naming memory-target", ev)
	}
}

func TestOptOutAndDeleteRemove(t *testing.T) {
	h := newHarness(t)
	h.start()
	key := service.Key{Namespace: testNS, Name: "hello"}
	d := deployment("hello", nil)
	h.create(d)
	h.sync(key)
	if ups := only(h.scaling.take(), "upsert"); len(ups) != 1 {
		t.Fatalf("upserts %+v, want 1", ups)
	}

	// Opting the pod template out opts the Deployment out.
	delete(d.Spec.Template.Labels, kube.LabelEnabled)
	h.update(d)
	h.sync(key)
	if calls := h.scaling.take(); !reflect.DeepEqual(calls, []call{{op: "remove", key: key}}) {
		t.Errorf("after opting out: calls %+v, want remove", calls)
	}
	if h.c.tracked(key) {
		t.Error("an opted-out deployment is still tracked")
	}

	// Opted in again, then deleted.
	d.Spec.Template.Labels[kube.LabelEnabled] = "true"
	h.update(d)
	h.sync(key)
	if ups := only(h.scaling.take(), "upsert"); len(ups) != 1 {
		t.Fatalf("opted in again: upserts %+v, want 1", ups)
	}
	if err := h.cs.AppsV1().Deployments(testNS).Delete(h.ctx, "hello", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.cached(key, nil)
	h.sync(key)
	if calls := h.scaling.take(); !reflect.DeepEqual(calls, []call{{op: "remove", key: key}}) {
		t.Errorf("after delete: calls %+v, want remove", calls)
	}
	for _, a := range writes(h.cs) {
		if a.GetResource().Resource == "deployments" && a.GetVerb() != "create" && a.GetVerb() != "update" && a.GetVerb() != "delete" {
			t.Errorf("the controller wrote a deployment: %v", a)
		}
	}
}

func TestRouterChangeResyncsAndReconciles(t *testing.T) {
	h := newHarness(t)
	h.start()
	key := service.Key{Namespace: testNS, Name: "hello"}
	h.create(deployment("hello", nil))
	h.sync(key)
	h.scaling.take()

	h.router.setPods(key, "10.0.0.9")
	h.router.change(key)
	if calls := h.scaling.take(); !reflect.DeepEqual(calls, []call{{op: "resync", key: key}}) {
		t.Errorf("on change: calls %+v, want resync", calls)
	}
	if n := h.c.queue.Len(); n != 1 {
		t.Fatalf("queue holds %d items, want the deployment", n)
	}
	h.drain()
	if calls := h.scaling.take(); !reflect.DeepEqual(calls, []call{{op: "pods", key: key, pods: []string{"10.0.0.9:9090"}}}) {
		t.Errorf("reconcile: calls %+v, want the new pods", calls)
	}
}

// TestDefaultsChangeReparsesEveryDeployment: specs are parsed against the
// defaults store's defaults, and a change of them reconciles every opted-in
// Deployment again. (The store itself is tested in kube/defaults.)
func TestDefaultsChangeReparsesEveryDeployment(t *testing.T) {
	const target = autoscaling.KeyContainerConcurrencyTargetDefault
	h := newHarness(t, defaultsConfigMap(map[string]string{target: "50"}))
	h.start()
	key := service.Key{Namespace: testNS, Name: "hello"}
	h.create(deployment("hello", nil))
	h.sync(key)
	if ups := only(h.scaling.take(), "upsert"); len(ups) != 1 || ups[0].spec.Target != 50 {
		t.Fatalf("upserts %+v, want one with the ConfigMap's target 50", ups)
	}
	if _, err := h.cs.CoreV1().ConfigMaps(testSystem).Update(h.ctx, defaultsConfigMap(map[string]string{target: "60"}), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually("the store to hold the new defaults", func() bool { return h.store.Current().ConcurrencyTarget == 60 })
	h.eventually("the Deployment to be queued again", func() bool { return h.c.queue.Len() > 0 })
	h.drain()
	if ups := only(h.scaling.take(), "upsert"); len(ups) != 1 || ups[0].spec.Target != 60 {
		t.Fatalf("after the ConfigMap changed: upserts %+v, want one with target 60", ups)
	}
}

// TestNameThatIsNotAKey: a Deployment whose name cannot be a service key
// is not autoscaled, and the user is told once.
func TestNameThatIsNotAKey(t *testing.T) {
	h := newHarness(t)
	h.start()
	d := deployment("my.app", nil)
	h.create(d)
	h.sync(kube.KeyOf(d))
	h.sync(kube.KeyOf(d))
	if ups := only(h.scaling.take(), "upsert"); len(ups) != 0 {
		t.Fatalf("upserts %+v for a Deployment whose name is no key", ups)
	}
	ev := h.events()
	if len(ev) != 1 || !strings.Contains(ev[0], "Warning InvalidName not autoscaled: service key") {
		t.Fatalf("events %q, want one InvalidName warning", ev)
	}
}

func TestRunReconcilesOnWorkers(t *testing.T) {
	h := newHarness(t)
	key := service.Key{Namespace: testNS, Name: "hello"}
	h.router.setPods(key, "10.0.0.1")
	done := make(chan error, 1)
	go func() { done <- h.c.Run(h.ctx, 2) }()

	// Informer events, not the test, enqueue the Deployment.
	if _, err := h.cs.AppsV1().Deployments(testNS).Create(h.ctx, deployment("hello", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.scaling.wait(t, "upsert", key)
	if c := h.scaling.wait(t, "pods", key); !slices.Equal(c.pods, []string{"10.0.0.1:9090"}) {
		t.Errorf("pods %q", c.pods)
	}
	if err := h.cs.AppsV1().Deployments(testNS).Delete(h.ctx, "hello", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.scaling.wait(t, "remove", key)

	// A Deployment that is not opted in is never looked at.
	plain := deployment("plain", nil)
	delete(plain.Labels, kube.LabelEnabled)
	delete(plain.Spec.Template.Labels, kube.LabelEnabled)
	if _, err := h.cs.AppsV1().Deployments(testNS).Create(h.ctx, plain, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.cached(kube.KeyOf(plain), func(*appsv1.Deployment) bool { return true })

	if err := h.c.Run(h.ctx, 1); err == nil {
		t.Error("a second Run: no error")
	}
	h.cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v, want nil when its context ends", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	for _, c := range h.scaling.take() {
		if c.key == kube.KeyOf(plain) {
			t.Errorf("a plain deployment reached the loop: %+v", c)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	cs := fake.NewClientset()
	f := informers.NewSharedInformerFactory(cs, 0)
	rec := record.NewFakeRecorder(1)
	store, err := defaults.New(defaults.Config{Client: cs})
	if err != nil {
		t.Fatal(err)
	}
	// Its queue lives until Run returns: run it for no time.
	t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		store.Run(ctx)
	})
	b, err := NewBackend(BackendConfig{Client: cs, Informers: f, Router: newFakeRouter(), Recorder: rec})
	if err != nil {
		t.Fatal(err)
	}
	ok := Config{Client: cs, Informers: f, Router: newFakeRouter(), Backend: b, Scaling: newFakeScaling(), Defaults: store, Recorder: rec}
	for name, mod := range map[string]func(*Config){
		"no client":    func(c *Config) { c.Client = nil },
		"no informers": func(c *Config) { c.Informers = nil },
		"no router":    func(c *Config) { c.Router = nil },
		"no backend":   func(c *Config) { c.Backend = nil },
		"no scaling":   func(c *Config) { c.Scaling = nil },
		"no defaults":  func(c *Config) { c.Defaults = nil },
		"no recorder":  func(c *Config) { c.Recorder = nil },
		"bad port":     func(c *Config) { c.StatsPort = 70000 },
	} {
		cfg := ok
		mod(&cfg)
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	c, err := New(ok)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.queue.ShutDown)
	if err := c.Run(t.Context(), 0); err == nil {
		t.Error("Run with 0 workers: no error")
	}
}

func TestDeleteHandlerEnqueuesOnlySwellDeployments(t *testing.T) {
	h := newHarness(t)
	plain := deployment("plain", nil)
	delete(plain.Labels, kube.LabelEnabled)
	opted := deployment("opted", nil)
	tracked := service.Key{Namespace: testNS, Name: "tracked"}
	h.c.states[tracked] = &state{}

	for _, obj := range []any{
		plain,
		cache.DeletedFinalStateUnknown{Key: "default/plain", Obj: plain},
		cache.DeletedFinalStateUnknown{Key: "default/opted", Obj: opted},
		cache.DeletedFinalStateUnknown{Key: "default/tracked", Obj: plain},
	} {
		h.c.deploymentDeleted(obj)
	}
	var got []string
	for h.c.queue.Len() > 0 {
		it, _ := h.c.queue.Get()
		got = append(got, it.String())
		h.c.queue.Done(it)
	}
	slices.Sort(got)
	if want := []string{"default/opted", "default/tracked"}; !slices.Equal(got, want) {
		t.Errorf("enqueued %q, want %q", got, want)
	}
}

// TestOwnsLimitsTheLoopToTheBucketsLed: sharded, the controller gives the
// loop only the Deployments of the buckets the replica leads; a bucket
// taken brings its Deployments in on Resync, one given up takes them out,
// and neither writes to the Deployment.
func TestOwnsLimitsTheLoopToTheBucketsLed(t *testing.T) {
	h := newHarness(t)
	var owned atomic.Bool
	h.c.owns = func(service.Key) bool { return owned.Load() }
	h.start()
	key := service.Key{Namespace: testNS, Name: "hello"}
	all := func(service.Key) bool { return true }
	h.create(deployment("hello", nil))
	h.sync(key)
	if calls := h.scaling.take(); len(calls) != 0 || h.c.tracked(key) {
		t.Fatalf("a Deployment of a bucket not led: calls %+v, tracked %v; want none", calls, h.c.tracked(key))
	}

	owned.Store(true)
	h.c.Resync(all)
	h.drain()
	if ups := only(h.scaling.take(), "upsert"); len(ups) != 1 || ups[0].key != key {
		t.Fatalf("after its bucket was taken: upserts %+v, want %v", ups, key)
	}

	owned.Store(false)
	h.c.Resync(func(k service.Key) bool { return k.Name == "other" })
	h.drain()
	if calls := h.scaling.take(); len(calls) != 0 {
		t.Fatalf("a Resync that does not match it: calls %+v, want none", calls)
	}
	h.c.Resync(all)
	h.drain()
	if calls := h.scaling.take(); !reflect.DeepEqual(calls, []call{{op: "remove", key: key}}) || h.c.tracked(key) {
		t.Errorf("after its bucket was given up: calls %+v, tracked %v; want one remove", calls, h.c.tracked(key))
	}
	for _, a := range writes(h.cs) {
		if a.GetResource().Resource == "deployments" && a.GetVerb() != "create" {
			t.Errorf("the controller wrote to a Deployment: %v", a)
		}
	}
}
