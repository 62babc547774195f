package controller

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	ktesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/swell-run/swell/autoscaler"
	"github.com/swell-run/swell/autoscaler/plan"
	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/kube/defaults"
	"github.com/swell-run/swell/pkg/autoscaling"
	"github.com/swell-run/swell/pkg/service"
)

const (
	testNS     = "default"
	testSystem = "swell-test-system"
)

var deploymentsGVR = appsv1.SchemeGroupVersion.WithResource("deployments")

// fakeRouter is a Router whose pods and routes the test sets.
type fakeRouter struct {
	mu        sync.Mutex
	pods      map[service.Key][]string
	effective map[service.Key]plan.Route
	requested map[service.Key]plan.Route
	set       []plan.Route
	onChange  func(service.Key)
}

func newFakeRouter() *fakeRouter {
	return &fakeRouter{
		pods:      map[service.Key][]string{},
		effective: map[service.Key]plan.Route{},
		requested: map[service.Key]plan.Route{},
	}
}

func (r *fakeRouter) Route(key service.Key) (plan.Route, plan.Route) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.effective[key], r.requested[key]
}

func (r *fakeRouter) SetRoute(_ context.Context, key service.Key, route plan.Route) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requested[key] = route
	r.set = append(r.set, route)
	return nil
}

func (r *fakeRouter) ReadyPods(key service.Key) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.pods[key])
}

// ReadyPodNames names each ready pod "pod-" and its IP's last octet.
func (r *fakeRouter) ReadyPodNames(key service.Key) map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	names := map[string]string{}
	for _, ip := range r.pods[key] {
		names[ip] = "pod-" + ip[strings.LastIndexByte(ip, '.')+1:]
	}
	return names
}

func (r *fakeRouter) OnChange(f func(service.Key)) {
	r.mu.Lock()
	r.onChange = f
	r.mu.Unlock()
}

// setPods sets key's ready pods without telling OnChange.
func (r *fakeRouter) setPods(key service.Key, ips ...string) {
	r.mu.Lock()
	r.pods[key] = ips
	r.mu.Unlock()
}

func (r *fakeRouter) setRoute(key service.Key, effective, requested plan.Route) {
	r.mu.Lock()
	r.effective[key], r.requested[key] = effective, requested
	r.mu.Unlock()
}

func (r *fakeRouter) change(key service.Key) {
	r.mu.Lock()
	f := r.onChange
	r.mu.Unlock()
	f(key)
}

// call is one call the fake Scaling received.
type call struct {
	op   string // "upsert", "pods", "remove", "resync"
	key  service.Key
	spec autoscaling.Spec
	pods []string
}

// fakeScaling is a Scaling that records its calls and reports the status
// the test sets.
type fakeScaling struct {
	mu     sync.Mutex
	calls  []call
	known  map[service.Key]bool
	status map[service.Key]autoscaler.ServiceStatus
	c      chan call
}

func newFakeScaling() *fakeScaling {
	return &fakeScaling{
		known:  map[service.Key]bool{},
		status: map[service.Key]autoscaler.ServiceStatus{},
		c:      make(chan call, 1000),
	}
}

func (s *fakeScaling) record(c call) {
	s.mu.Lock()
	s.calls = append(s.calls, c)
	s.mu.Unlock()
	select {
	case s.c <- c:
	default: // a test that waits on calls takes them as they come
	}
}

func (s *fakeScaling) Upsert(key service.Key, spec autoscaling.Spec) {
	s.mu.Lock()
	s.known[key] = true
	s.mu.Unlock()
	s.record(call{op: "upsert", key: key, spec: spec})
}

func (s *fakeScaling) SetPods(key service.Key, pods []string) {
	s.record(call{op: "pods", key: key, pods: pods})
}

func (s *fakeScaling) Remove(key service.Key) {
	s.mu.Lock()
	delete(s.known, key)
	s.mu.Unlock()
	s.record(call{op: "remove", key: key})
}

func (s *fakeScaling) Resync(key service.Key) { s.record(call{op: "resync", key: key}) }

func (s *fakeScaling) ServiceStatus(key service.Key) (autoscaler.ServiceStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status[key], s.known[key]
}

func (s *fakeScaling) setStatus(key service.Key, ss autoscaler.ServiceStatus) {
	s.mu.Lock()
	s.status[key] = ss
	s.mu.Unlock()
}

// take returns the calls received since the last take.
func (s *fakeScaling) take() []call {
	s.mu.Lock()
	defer s.mu.Unlock()
	calls := s.calls
	s.calls = nil
	return calls
}

// wait returns the next call of kind op for key, skipping others. It is
// for tests where workers run; tests that drain the queue themselves use
// take.
func (s *fakeScaling) wait(t *testing.T, op string, key service.Key) call {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case c := <-s.c:
			if c.op == op && c.key == key {
				return c
			}
		case <-timeout:
			t.Fatalf("no %s call for %s", op, key)
		}
	}
}

func only(calls []call, op string) []call {
	var out []call
	for _, c := range calls {
		if c.op == op {
			out = append(out, c)
		}
	}
	return out
}

// harness is a Controller on a fake clientset, a fake Router, a fake
// Scaling and a fake recorder.
type harness struct {
	t       *testing.T
	ctx     context.Context
	cancel  context.CancelFunc
	cs      *fake.Clientset
	c       *Controller
	b       *Backend
	store   *defaults.Store
	router  *fakeRouter
	scaling *fakeScaling
	rec     *record.FakeRecorder
	clock   *clocktesting.FakeClock
}

func newHarness(t *testing.T, objs ...runtime.Object) *harness {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	cs := fake.NewClientset(objs...)
	scaleSubresource(cs)
	h := &harness{
		t:       t,
		ctx:     ctx,
		cancel:  cancel,
		cs:      cs,
		router:  newFakeRouter(),
		scaling: newFakeScaling(),
		rec:     record.NewFakeRecorder(100),
		clock:   clocktesting.NewFakeClock(time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)),
	}
	factory := informers.NewSharedInformerFactory(cs, 0)
	store, err := defaults.New(defaults.Config{Client: cs, Namespace: testSystem, Recorder: h.rec})
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewBackend(BackendConfig{Client: cs, Informers: factory, Router: h.router, Recorder: h.rec, Clock: h.clock})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{
		Client:    cs,
		Informers: factory,
		Router:    h.router,
		Backend:   b,
		Scaling:   h.scaling,
		Defaults:  store,
		Recorder:  h.rec,
		Clock:     h.clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	h.rec.IncludeObject = true
	h.c, h.b, h.store = c, b, store
	storeDone := make(chan struct{})
	go func() { defer close(storeDone); store.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-storeDone
		c.queue.ShutDown()
		factory.Shutdown()
	})
	return h
}

// start starts the informers and loads the defaults as Run does, without
// workers: the test drives the queue with drain.
func (h *harness) start() {
	h.t.Helper()
	h.c.informers.Start(h.ctx.Done())
	if !cache.WaitFor(h.ctx, "", h.c.synced) {
		h.t.Fatal("caches did not sync")
	}
	select {
	case <-h.store.Loaded():
	case <-time.After(5 * time.Second):
		h.t.Fatal("the defaults were not loaded")
	}
}

// drain processes every queued item, as a worker would.
func (h *harness) drain() {
	h.t.Helper()
	for h.c.queue.Len() > 0 {
		h.c.processNext(h.ctx)
	}
}

// sync enqueues key and processes the queue.
func (h *harness) sync(key service.Key) {
	h.c.enqueue(key)
	h.drain()
}

// eventually polls cond until it holds, for at most 5 seconds.
func (h *harness) eventually(what string, cond func() bool) {
	h.t.Helper()
	err := wait.PollUntilContextTimeout(h.ctx, time.Millisecond, 5*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		h.t.Fatalf("waiting for %s: %v", what, err)
	}
}

// cached waits until the lister shows key's Deployment passing ok (or
// gone, for a nil ok).
func (h *harness) cached(key service.Key, ok func(*appsv1.Deployment) bool) {
	h.t.Helper()
	h.eventually("the cache to show deployment "+key.String(), func() bool {
		d, err := h.c.deployments.Deployments(key.Namespace).Get(key.Name)
		if ok == nil {
			return err != nil
		}
		return err == nil && ok(d)
	})
}

func (h *harness) create(d *appsv1.Deployment) {
	h.t.Helper()
	if _, err := h.cs.AppsV1().Deployments(d.Namespace).Create(h.ctx, d, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
	h.cached(kube.KeyOf(d), func(got *appsv1.Deployment) bool { return got.Generation == d.Generation })
}

// update writes d and waits for the cache to show its annotations and
// labels.
func (h *harness) update(d *appsv1.Deployment) {
	h.t.Helper()
	if _, err := h.cs.AppsV1().Deployments(d.Namespace).Update(h.ctx, d, metav1.UpdateOptions{}); err != nil {
		h.t.Fatal(err)
	}
	h.cached(kube.KeyOf(d), func(got *appsv1.Deployment) bool {
		return maps.Equal(got.Annotations, d.Annotations) && maps.Equal(got.Labels, d.Labels) &&
			maps.Equal(got.Spec.Template.Labels, d.Spec.Template.Labels)
	})
}

// updateTemplate writes d and waits for the cache to show its pod
// template.
func (h *harness) updateTemplate(d *appsv1.Deployment) {
	h.t.Helper()
	if _, err := h.cs.AppsV1().Deployments(d.Namespace).Update(h.ctx, d, metav1.UpdateOptions{}); err != nil {
		h.t.Fatal(err)
	}
	h.cached(kube.KeyOf(d), func(got *appsv1.Deployment) bool {
		return equality.Semantic.DeepEqual(got.Spec.Template, d.Spec.Template)
	})
}

// events returns the events recorded so far.
func (h *harness) events() []string {
	var out []string
	for {
		select {
		case e := <-h.rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// onDeployment is how the fake recorder shows an event on a Deployment.
func onDeployment(event string) string {
	return event + " involvedObject{kind=Deployment,apiVersion=apps/v1}"
}

// deployment returns an opted-in Deployment with the annotations.
func deployment(name string, annotations map[string]string) *appsv1.Deployment {
	labels := map[string]string{"app": name, kube.LabelEnabled: "true"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, Labels: labels, Annotations: annotations},
		Spec: appsv1.DeploymentSpec{
			Replicas: new(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: maps.Clone(labels)},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example/app:1"}}},
			},
		},
	}
}

func defaultsConfigMap(data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: kube.DefaultsConfigMap, Namespace: testSystem},
		Data:       data,
	}
}

// scaleSubresource makes the fake clientset serve Deployments' scale
// subresource from the Deployments it holds, as the API server does.
func scaleSubresource(cs *fake.Clientset) {
	tracker := cs.Tracker()
	cs.PrependReactor("get", "deployments", func(a ktesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "scale" {
			return false, nil, nil
		}
		obj, err := tracker.Get(deploymentsGVR, a.GetNamespace(), a.(ktesting.GetAction).GetName())
		if err != nil {
			return true, nil, err
		}
		d := obj.(*appsv1.Deployment)
		return true, &autoscalingv1.Scale{
			ObjectMeta: metav1.ObjectMeta{Name: d.Name, Namespace: d.Namespace, ResourceVersion: d.ResourceVersion},
			Spec:       autoscalingv1.ScaleSpec{Replicas: *d.Spec.Replicas},
		}, nil
	})
	cs.PrependReactor("update", "deployments", func(a ktesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "scale" {
			return false, nil, nil
		}
		s := a.(ktesting.UpdateAction).GetObject().(*autoscalingv1.Scale)
		obj, err := tracker.Get(deploymentsGVR, a.GetNamespace(), s.Name)
		if err != nil {
			return true, nil, err
		}
		d := obj.(*appsv1.Deployment).DeepCopy()
		d.Spec.Replicas = new(s.Spec.Replicas)
		return true, s, tracker.Update(deploymentsGVR, d, a.GetNamespace())
	})
}

// writes returns the actions that are not reads.
func writes(cs *fake.Clientset) []ktesting.Action {
	var out []ktesting.Action
	for _, a := range cs.Actions() {
		switch a.GetVerb() {
		case "get", "list", "watch":
		default:
			out = append(out, a)
		}
	}
	return out
}
