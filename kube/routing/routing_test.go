package routing

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/swell-run/swell/autoscaler/plan"
	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/kube/inject"
	"github.com/swell-run/swell/pkg/service"
)

const (
	ns      = "shop"
	sysNS   = "swell-system"
	actPort = 8081
)

var web = service.Key{Namespace: ns, Name: "web"}

// The fixtures: Deployment web (app container "app" on port 8080 named
// "http"), its Service web (80 → 8080), two ready pods and one not ready,
// two ready activators, and the slice Kubernetes wrote for web.

func deployment(name string, labels map[string]string, annotations map[string]string) *appsv1.Deployment {
	tpl := map[string]string{kube.LabelEnabled: "true"}
	for k, v := range labels {
		tpl[k] = v
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name),
			Labels: map[string]string{kube.LabelEnabled: "true"}, Annotations: annotations},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: tpl},
				Spec: corev1.PodSpec{Containers: []corev1.Container{
					{Name: "app", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "debug", ContainerPort: 6060}}},
					{Name: inject.ContainerName, Ports: []corev1.ContainerPort{{Name: inject.PortNameServing, ContainerPort: 8012}}},
				}},
			},
		},
	}
}

func webDeployment() *appsv1.Deployment {
	return deployment("web", map[string]string{"app": "web"}, map[string]string{"swell.run/container-concurrency": "4"})
}

func userService(name string, selector map[string]string, ports ...corev1.ServicePort) *corev1.Service {
	if len(ports) == 0 {
		ports = []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}
	}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-svc-" + name)},
		Spec:       corev1.ServiceSpec{Selector: selector, Ports: ports},
	}
}

type ep struct {
	ip          string
	ready       bool
	pod, node   string
	terminating bool
}

func slice(namespace, name, svc, managedBy string, port int32, eps ...ep) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, UID: types.UID("uid-slice-" + name),
			Labels: map[string]string{discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: managedBy}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(kube.PortNameHTTP), Port: ptr.To(port), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, e := range eps {
		x := discoveryv1.Endpoint{Addresses: []string{e.ip}, Conditions: discoveryv1.EndpointConditions{
			Ready: ptr.To(e.ready), Serving: ptr.To(e.ready), Terminating: ptr.To(e.terminating)}}
		if e.pod != "" {
			x.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: namespace, Name: e.pod, UID: types.UID("uid-" + e.pod)}
		}
		if e.node != "" {
			x.NodeName = ptr.To(e.node)
		}
		s.Endpoints = append(s.Endpoints, x)
	}
	return s
}

func podsSlice(eps ...ep) *discoveryv1.EndpointSlice {
	return slice(ns, "web-swell-pods-x7k2p", kube.PodsServiceName("web"), sliceController, 8012, eps...)
}

func twoPods() *discoveryv1.EndpointSlice {
	return podsSlice(
		ep{ip: "10.0.0.10", ready: true, pod: "web-b", node: "n2"},
		ep{ip: "10.0.0.9", ready: true, pod: "web-a", node: "n1"},
		ep{ip: "10.0.0.11", ready: false, pod: "web-c", node: "n1"},
	)
}

func activators(eps ...ep) *discoveryv1.EndpointSlice {
	return slice(sysNS, "activator-q9z8w", kube.ActivatorService, sliceController, actPort, eps...)
}

func twoActivators() *discoveryv1.EndpointSlice {
	return activators(ep{ip: "10.9.0.2", ready: true, pod: "activator-b", node: "n2"}, ep{ip: "10.9.0.1", ready: true, pod: "activator-a", node: "n1"})
}

func kubernetesSlice(svc string, eps ...ep) *discoveryv1.EndpointSlice {
	return slice(ns, svc+"-4fn9d", svc, sliceController, 8080, eps...)
}

type harness struct {
	t      *testing.T
	ctx    context.Context
	client *fake.Clientset
	rec    *record.FakeRecorder
	clock  *testingclock.FakeClock
	r      *Router
}

// newHarness starts a Router's informers on a fake clientset holding objs;
// the tests drive sync themselves unless they call run.
func newHarness(t *testing.T, objs ...runtime.Object) *harness {
	t.Helper()
	return newHarnessWith(t, nil, objs...)
}

// newHarnessWith is newHarness with the Config tweak changes.
func newHarnessWith(t *testing.T, tweak func(*Config), objs ...runtime.Object) *harness {
	t.Helper()
	client := fake.NewClientset(objs...)
	factory := informers.NewSharedInformerFactory(client, 0)
	sysFactory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(sysNS))
	rec := record.NewFakeRecorder(100)
	cfg := Config{Client: client, Informers: factory, SystemNamespace: sysNS, Recorder: rec, Logger: zaptest.NewLogger(t)}
	if tweak != nil {
		cfg.SystemInformers = sysFactory
		tweak(&cfg)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	clk := testingclock.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	r.clock = clk
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(func() {
		cancel()
		factory.Shutdown()
		sysFactory.Shutdown()
		r.queue.ShutDown()
	})
	for _, f := range []informers.SharedInformerFactory{factory, sysFactory} {
		f.Start(ctx.Done())
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				t.Fatalf("cache of %v not synced", typ)
			}
		}
	}
	return &harness{t: t, ctx: ctx, client: client, rec: rec, clock: clk, r: r}
}

// setRoute asks for route, as the executor does, and runs the reconcile
// the request queues, as a worker would.
func (h *harness) setRoute(route plan.Route) {
	h.t.Helper()
	if err := h.r.SetRoute(h.ctx, web, route); err != nil {
		h.t.Fatal(err)
	}
	h.sync()
}

var kinds = []struct {
	gvr schema.GroupVersionResource
	gvk schema.GroupVersionKind
}{
	{corev1.SchemeGroupVersion.WithResource("services"), corev1.SchemeGroupVersion.WithKind("Service")},
	{discoveryv1.SchemeGroupVersion.WithResource("endpointslices"), discoveryv1.SchemeGroupVersion.WithKind("EndpointSlice")},
	{appsv1.SchemeGroupVersion.WithResource("deployments"), appsv1.SchemeGroupVersion.WithKind("Deployment")},
}

// settle waits until the informer caches hold what the fake API server
// holds.
func (h *harness) settle() {
	h.t.Helper()
	err := wait.PollUntilContextTimeout(h.ctx, time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return h.cacheMatches(), nil
	})
	if err != nil {
		h.t.Fatalf("informer caches never caught up: %v", err)
	}
}

func (h *harness) cacheMatches() bool {
	for _, k := range kinds {
		list, err := h.client.Tracker().List(k.gvr, k.gvk, "")
		if err != nil {
			h.t.Fatal(err)
		}
		var want []runtime.Object
		switch l := list.(type) {
		case *corev1.ServiceList:
			for i := range l.Items {
				want = append(want, &l.Items[i])
			}
		case *discoveryv1.EndpointSliceList:
			for i := range l.Items {
				want = append(want, &l.Items[i])
			}
		case *appsv1.DeploymentList:
			for i := range l.Items {
				want = append(want, &l.Items[i])
			}
		}
		for _, obj := range want {
			m := obj.(metav1.Object)
			var got runtime.Object
			var err error
			switch k.gvk.Kind {
			case "Service":
				got, err = h.r.services.Services(m.GetNamespace()).Get(m.GetName())
			case "EndpointSlice":
				got, err = h.r.slices.EndpointSlices(m.GetNamespace()).Get(m.GetName())
			case "Deployment":
				got, err = h.r.deployments.Deployments(m.GetNamespace()).Get(m.GetName())
			}
			if err != nil || !equality.Semantic.DeepEqual(got, obj) {
				return false
			}
		}
		n := 0
		switch k.gvk.Kind {
		case "Service":
			l, _ := h.r.services.List(everything)
			n = len(l)
		case "EndpointSlice":
			l, _ := h.r.slices.List(everything)
			n = len(l)
		case "Deployment":
			l, _ := h.r.deployments.List(everything)
			n = len(l)
		}
		if n != len(want) {
			return false
		}
	}
	return true
}

// sync reconciles web once the caches caught up.
func (h *harness) sync() {
	h.t.Helper()
	h.settle()
	if err := h.r.sync(h.ctx, web); err != nil {
		h.t.Fatalf("sync: %v", err)
	}
	h.settle()
}

// writes returns the writes the fake API server received since the last
// call, as "verb resource name".
func (h *harness) writes() []string {
	var out []string
	for _, a := range h.client.Actions() {
		switch a.GetVerb() {
		case "create", "update", "delete", "patch":
		default:
			continue
		}
		name := ""
		switch a := a.(type) {
		case k8stesting.CreateAction: // an UpdateAction too: the two have the same methods
			name = a.GetObject().(metav1.Object).GetName()
		case k8stesting.DeleteAction:
			name = a.GetName()
		case k8stesting.PatchAction:
			name = a.GetName()
		}
		out = append(out, a.GetVerb()+" "+a.GetResource().Resource+" "+name)
	}
	h.client.ClearActions()
	return out
}

func (h *harness) service(name string) *corev1.Service {
	h.t.Helper()
	s, err := h.client.CoreV1().Services(ns).Get(h.ctx, name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return s
}

func (h *harness) routeSlice(svc string) *discoveryv1.EndpointSlice {
	h.t.Helper()
	return h.routeSliceNamed(kube.RouteSliceName(svc))
}

func (h *harness) routeSliceNamed(name string) *discoveryv1.EndpointSlice {
	h.t.Helper()
	s, err := h.client.DiscoveryV1().EndpointSlices(ns).Get(h.ctx, name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return s
}

func (h *harness) noRouteSlice(svc string) {
	h.t.Helper()
	_, err := h.client.DiscoveryV1().EndpointSlices(ns).Get(h.ctx, kube.RouteSliceName(svc), metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		h.t.Fatalf("route slice of %s: err = %v, want not found", svc, err)
	}
}

// events returns the events recorded since the last call.
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

// addresses renders a slice's endpoints as "ip[:pod][@node]".
func addresses(s *discoveryv1.EndpointSlice) []string {
	var out []string
	for _, e := range s.Endpoints {
		a := e.Addresses[0]
		c := e.Conditions
		if !*c.Ready || !*c.Serving || *c.Terminating {
			a += "!"
		}
		if e.TargetRef != nil {
			a += ":" + e.TargetRef.Name
		}
		if e.NodeName != nil {
			a += "@" + *e.NodeName
		}
		out = append(out, a)
	}
	return out
}

// slicePorts renders a slice's ports as "name/protocol/port".
func slicePorts(s *discoveryv1.EndpointSlice) []string {
	var out []string
	for _, p := range s.Ports {
		out = append(out, fmt.Sprintf("%s/%s/%d", *p.Name, *p.Protocol, *p.Port))
	}
	return out
}

func equal(t *testing.T, what string, got, want any) {
	t.Helper()
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func TestTakeOverWritesTheSliceBeforeTheSelectorGoes(t *testing.T) {
	h := newHarness(t, webDeployment(), userService("web", map[string]string{"app": "web"}),
		twoPods(), twoActivators(), kubernetesSlice("web", ep{ip: "10.0.0.9", ready: true}))
	h.sync()

	equal(t, "writes", h.writes(), []string{
		"create services web-swell-pods",
		"create endpointslices web-swell",
		"update services web",
		"delete endpointslices web-4fn9d",
		"delete endpoints web",
	})
	s := h.routeSlice("web")
	equal(t, "labels", s.Labels, map[string]string{
		discoveryv1.LabelServiceName: "web",
		discoveryv1.LabelManagedBy:   kube.EndpointSliceController,
		kube.LabelDeployment:         "web",
		kube.LabelRoute:              kube.RoutePods,
		kube.LabelManagedBy:          kube.ManagedBy,
	})
	equal(t, "owner", s.OwnerReferences, []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: "web", UID: "uid-svc-web", Controller: ptr.To(true)}})
	equal(t, "address type", s.AddressType, discoveryv1.AddressTypeIPv4)
	equal(t, "ports", slicePorts(s), []string{"http/TCP/8012"})
	equal(t, "endpoints", addresses(s), []string{"10.0.0.9:web-a@n1", "10.0.0.10:web-b@n2"})

	svc := h.service("web")
	if len(svc.Spec.Selector) != 0 {
		t.Errorf("selector = %v, want none", svc.Spec.Selector)
	}
	equal(t, "saved selector", svc.Annotations[kube.AnnotationSelector], `{"app":"web"}`)
	equal(t, "label", svc.Labels[kube.LabelDeployment], "web")
	eff, req := h.r.Route(web)
	equal(t, "route", []plan.Route{eff, req}, []plan.Route{plan.RoutePods, plan.RoutePods})
	equal(t, "ready pods", h.r.ReadyPods(web), []string{"10.0.0.9", "10.0.0.10"})
}

func TestTakeOverWaitsForKubernetesToListThePods(t *testing.T) {
	h := newHarness(t, webDeployment(), userService("web", map[string]string{"app": "web"}), twoActivators())
	h.sync()
	equal(t, "writes", h.writes(), []string{"create services web-swell-pods"})
	h.noRouteSlice("web")

	// Kubernetes lists no pod: the activator is all there is.
	if _, err := h.client.DiscoveryV1().EndpointSlices(ns).Create(h.ctx, podsSlice(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.writes()
	h.sync()
	equal(t, "writes", h.writes(), []string{"create endpointslices web-swell", "update services web", "delete endpoints web"})
	equal(t, "route label", h.routeSlice("web").Labels[kube.LabelRoute], kube.RouteActivator)
}

func TestPorts(t *testing.T) {
	tcp := corev1.ProtocolTCP
	for _, tc := range []struct {
		name   string
		ports  []corev1.ServicePort
		want   []string
		event  string
		routed bool
	}{
		{
			name:   "target port by number",
			ports:  []corev1.ServicePort{{Name: "web", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: tcp}},
			want:   []string{"web/TCP/8012"},
			routed: true,
		},
		{
			name:   "target port by container port name",
			ports:  []corev1.ServicePort{{Name: "web", Port: 80, TargetPort: intstr.FromString("http"), Protocol: tcp}},
			want:   []string{"web/TCP/8012"},
			routed: true,
		},
		{
			name:   "target port left out is the port",
			ports:  []corev1.ServicePort{{Port: 8080}},
			want:   []string{"/TCP/8012"},
			routed: true,
		},
		{
			name: "other ports dropped",
			ports: []corev1.ServicePort{
				{Name: "web", Port: 80, TargetPort: intstr.FromString("http"), Protocol: tcp},
				{Name: "debug", Port: 6060, TargetPort: intstr.FromString("debug"), Protocol: tcp},
				{Name: "alt", Port: 81, TargetPort: intstr.FromInt32(8080), Protocol: tcp},
				{Name: "udp", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolUDP},
			},
			want:   []string{"web/TCP/8012", "alt/TCP/8012"},
			event:  "Warning PortsNotRouted Service shop/web: ports debug (6060→debug), udp (80→8080) do not reach the app's port 8080 of Deployment web and get no endpoint",
			routed: true,
		},
		{
			name:  "no port reaches the app",
			ports: []corev1.ServicePort{{Name: "debug", Port: 6060, TargetPort: intstr.FromInt32(6060), Protocol: tcp}},
			event: "Warning NotRouted Service shop/web: no TCP port reaches the app's port 8080 of Deployment web: Swell does not route it",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, webDeployment(), userService("web", map[string]string{"app": "web"}, tc.ports...), twoPods(), twoActivators())
			h.sync()
			var events []string
			if tc.event != "" {
				events = []string{tc.event}
			}
			equal(t, "events", h.events(), events)
			if !tc.routed {
				h.noRouteSlice("web")
				equal(t, "selector", h.service("web").Spec.Selector, map[string]string{"app": "web"})
				equal(t, "services", h.service(kube.PodsServiceName("web")).Annotations[kube.AnnotationServices], "")
				return
			}
			equal(t, "ports", slicePorts(h.routeSlice("web")), tc.want)
			// The same problem is recorded once.
			h.sync()
			equal(t, "events again", h.events(), []string(nil))
		})
	}
}

func TestActivatorRoute(t *testing.T) {
	h := newHarness(t, webDeployment(), userService("web", map[string]string{"app": "web"}), twoPods(), twoActivators())
	h.sync()
	h.writes()
	h.setRoute(plan.RouteActivator)
	equal(t, "writes", h.writes(), []string{"update endpointslices web-swell"})
	s := h.routeSlice("web")
	equal(t, "route label", s.Labels[kube.LabelRoute], kube.RouteActivator)
	equal(t, "ports", slicePorts(s), []string{fmt.Sprintf("http/TCP/%d", actPort)})
	equal(t, "endpoints", addresses(s), []string{"10.9.0.1@n1", "10.9.0.2@n2"})
	h.settle()
	eff, req := h.r.Route(web)
	equal(t, "route", []plan.Route{eff, req}, []plan.Route{plan.RouteActivator, plan.RouteActivator})

	// The activator's endpoints change: the slice follows.
	act := activators(ep{ip: "10.9.0.3", ready: true}, ep{ip: "10.9.0.1", ready: true, node: "n1"}, ep{ip: "10.9.0.2", ready: false})
	if _, err := h.client.DiscoveryV1().EndpointSlices(sysNS).Update(h.ctx, act, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.writes()
	h.sync()
	equal(t, "writes", h.writes(), []string{"update endpointslices web-swell"})
	equal(t, "endpoints", addresses(h.routeSlice("web")), []string{"10.9.0.1@n1", "10.9.0.3"})
}

func TestNeverEmpty(t *testing.T) {
	t.Run("pods asked, none ready", func(t *testing.T) {
		h := newHarness(t, webDeployment(), userService("web", map[string]string{"app": "web"}),
			podsSlice(ep{ip: "10.0.0.11", ready: false, pod: "web-c"}), twoActivators())
		h.setRoute(plan.RoutePods)
		h.settle()
		s := h.routeSlice("web")
		equal(t, "route label", s.Labels[kube.LabelRoute], kube.RouteActivator)
		equal(t, "endpoints", addresses(s), []string{"10.9.0.1@n1", "10.9.0.2@n2"})
		eff, req := h.r.Route(web)
		equal(t, "route", []plan.Route{eff, req}, []plan.Route{plan.RouteActivator, plan.RoutePods})

		// A pod gets ready: the pods route takes effect.
		if _, err := h.client.DiscoveryV1().EndpointSlices(ns).Update(h.ctx, podsSlice(ep{ip: "10.0.0.11", ready: true, pod: "web-c"}), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		h.sync()
		equal(t, "endpoints", addresses(h.routeSlice("web")), []string{"10.0.0.11:web-c"})
		eff, req = h.r.Route(web)
		equal(t, "route", []plan.Route{eff, req}, []plan.Route{plan.RoutePods, plan.RoutePods})
	})
	t.Run("activator asked, none ready", func(t *testing.T) {
		h := newHarness(t, webDeployment(), userService("web", map[string]string{"app": "web"}), twoPods(),
			activators(ep{ip: "10.9.0.1", ready: false}))
		h.setRoute(plan.RouteActivator)
		h.settle()
		s := h.routeSlice("web")
		equal(t, "route label", s.Labels[kube.LabelRoute], kube.RoutePods)
		equal(t, "endpoints", addresses(s), []string{"10.0.0.9:web-a@n1", "10.0.0.10:web-b@n2"})
		eff, req := h.r.Route(web)
		equal(t, "route", []plan.Route{eff, req}, []plan.Route{plan.RoutePods, plan.RouteActivator})
	})
	t.Run("neither ready", func(t *testing.T) {
		h := newHarness(t, webDeployment(), userService("web", map[string]string{"app": "web"}),
			podsSlice(ep{ip: "10.0.0.11", ready: false, pod: "web-c"}))
		h.sync()
		h.writes()
		h.setRoute(plan.RoutePods)
		equal(t, "writes", h.writes(), []string(nil))
		h.noRouteSlice("web")
		equal(t, "selector", h.service("web").Spec.Selector, map[string]string{"app": "web"})
	})
	t.Run("neither ready, taken", func(t *testing.T) {
		h := newHarness(t, webDeployment(), userService("web", map[string]string{"app": "web"}), twoPods())
		h.sync()
		before := h.routeSlice("web")
		if _, err := h.client.DiscoveryV1().EndpointSlices(ns).Update(h.ctx, podsSlice(), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		h.writes()
		h.sync()
		h.setRoute(plan.RouteActivator)
		equal(t, "writes", h.writes(), []string(nil))
		equal(t, "slice", h.routeSlice("web"), before)
	})
}

func TestSteadyStateWritesNothing(t *testing.T) {
	h := newHarness(t, webDeployment(),
		userService("web", map[string]string{"app": "web"}),
		userService("web-admin", map[string]string{"app": "web"}, corev1.ServicePort{Name: "admin", Port: 8080}),
		twoPods(), twoActivators())
	h.sync()
	if len(h.writes()) == 0 {
		t.Fatal("the first sync wrote nothing")
	}
	for range 3 {
		h.sync()
		h.setRoute(plan.RoutePods)
	}
	equal(t, "writes", h.writes(), []string(nil))
}

func TestReleaseOnOptOut(t *testing.T) {
	h := newHarness(t, webDeployment(), userService("web", map[string]string{"app": "web"}), twoPods(), twoActivators())
	h.sync()
	h.writes()

	d := webDeployment()
	delete(d.Labels, kube.LabelEnabled)
	if _, err := h.client.AppsV1().Deployments(ns).Update(h.ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.writes()
	h.sync()
	equal(t, "writes", h.writes(), []string{"update services web"})
	svc := h.service("web")
	equal(t, "selector", svc.Spec.Selector, map[string]string{"app": "web"})
	if _, ok := svc.Annotations[kube.AnnotationSelector]; ok {
		t.Errorf("annotation %s kept", kube.AnnotationSelector)
	}
	if _, ok := svc.Labels[kube.LabelDeployment]; ok {
		t.Errorf("label %s kept", kube.LabelDeployment)
	}
	h.routeSlice("web")

	// Until Kubernetes lists the Service's endpoints, the slice stays.
	h.sync()
	equal(t, "writes", h.writes(), []string(nil))
	h.routeSlice("web")
	if _, err := h.client.DiscoveryV1().EndpointSlices(ns).Create(h.ctx, kubernetesSlice("web", ep{ip: "10.0.0.9", ready: true}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.writes()
	h.sync()
	equal(t, "writes", h.writes(), []string{"delete endpointslices web-swell"})
	h.noRouteSlice("web")

	// Nothing of web is routed any more: its pods-Service goes.
	h.sync()
	equal(t, "writes", h.writes(), []string{"delete services web-swell-pods"})
	h.sync()
	equal(t, "writes", h.writes(), []string(nil))
}

func TestReleaseIsBounded(t *testing.T) {
	h := newHarness(t, webDeployment(), userService("web", map[string]string{"app": "web"}), twoPods(), twoActivators())
	h.sync()
	if err := h.client.AppsV1().Deployments(ns).Delete(h.ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.sync()
	h.sync()
	h.writes()
	h.clock.Step(ReleaseTimeout - time.Second)
	h.sync()
	equal(t, "writes", h.writes(), []string(nil))
	h.clock.Step(time.Second)
	h.sync()
	equal(t, "writes", h.writes(), []string{"delete endpointslices web-swell"})
	h.noRouteSlice("web")
	h.sync()
	equal(t, "writes", h.writes(), []string{"delete services web-swell-pods"})
}

func TestNewRouterReportsTheRouteInEffect(t *testing.T) {
	// A cluster a previous leader routed: web through the activator.
	svc := userService("web", nil)
	svc.Labels = map[string]string{kube.LabelDeployment: "web"}
	svc.Annotations = map[string]string{kube.AnnotationSelector: `{"app":"web"}`}
	act := twoActivators()
	old := routeSlice(svc, "web", svc.Spec.Ports, choice{route: kube.RouteActivator, endpoints: readyEndpoints([]*discoveryv1.EndpointSlice{act}, discoveryv1.AddressTypeIPv4, nil), port: actPort}, discoveryv1.AddressTypeIPv4)
	for i := range old.Endpoints {
		old.Endpoints[i].TargetRef = nil
	}
	d := webDeployment()
	pods := podsService(d, []string{"web"}, map[string]string{kube.AnnotationContainerConcurrency: "4"})
	h := newHarness(t, d, svc, pods, old, twoPods(), act)

	eff, req := h.r.Route(web)
	equal(t, "route", []plan.Route{eff, req}, []plan.Route{plan.RouteActivator, plan.RouteActivator})
	h.sync()
	equal(t, "writes", h.writes(), []string(nil))

	eff, req = h.r.Route(service.Key{Namespace: ns, Name: "other"})
	equal(t, "unknown", []plan.Route{eff, req}, []plan.Route{plan.RouteUnknown, plan.RouteUnknown})
}

func TestSelectorPutBackIsTakenAgain(t *testing.T) {
	h := newHarness(t, webDeployment(), userService("web", map[string]string{"app": "web"}), twoPods(), twoActivators())
	h.sync()

	// kubectl apply puts the selector back, and Kubernetes lists the
	// Service's endpoints again.
	svc := h.service("web")
	svc.Spec.Selector = map[string]string{"app": "web"}
	if _, err := h.client.CoreV1().Services(ns).Update(h.ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.DiscoveryV1().EndpointSlices(ns).Create(h.ctx, kubernetesSlice("web", ep{ip: "10.0.0.9", ready: true}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.writes()
	h.sync()
	equal(t, "writes", h.writes(), []string{"update services web", "delete endpointslices web-4fn9d", "delete endpoints web"})
	svc = h.service("web")
	if len(svc.Spec.Selector) != 0 {
		t.Errorf("selector = %v, want none", svc.Spec.Selector)
	}
	equal(t, "saved selector", svc.Annotations[kube.AnnotationSelector], `{"app":"web"}`)

	// A mirrored copy of the stale Endpoints goes with them.
	mirrored := kubernetesSlice("web", ep{ip: "10.0.0.9", ready: true})
	mirrored.Labels[discoveryv1.LabelManagedBy] = sliceMirroringController
	if _, err := h.client.DiscoveryV1().EndpointSlices(ns).Create(h.ctx, mirrored, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.writes()
	h.sync()
	equal(t, "writes", h.writes(), []string{"delete endpointslices web-4fn9d", "delete endpoints web"})
}

func TestServiceThatNoLongerSelectsIsGivenBack(t *testing.T) {
	h := newHarness(t, webDeployment(), userService("web", map[string]string{"app": "web"}), twoPods(), twoActivators())
	h.sync()
	svc := h.service("web")
	svc.Spec.Selector = map[string]string{"app": "other"}
	if _, err := h.client.CoreV1().Services(ns).Update(h.ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.writes()
	h.sync()
	equal(t, "writes", h.writes(), []string{"update services web-swell-pods", "update services web"})
	svc = h.service("web")
	equal(t, "selector", svc.Spec.Selector, map[string]string{"app": "other"})
	if _, ok := svc.Labels[kube.LabelDeployment]; ok {
		t.Errorf("label %s kept", kube.LabelDeployment)
	}
	equal(t, "services", h.service(kube.PodsServiceName("web")).Annotations[kube.AnnotationServices], "")
	if _, err := h.client.DiscoveryV1().EndpointSlices(ns).Create(h.ctx, kubernetesSlice("web", ep{ip: "10.1.0.1", ready: true}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.writes()
	h.sync()
	equal(t, "writes", h.writes(), []string{"delete endpointslices web-swell"})
}

func TestPodsService(t *testing.T) {
	web, api := userService("web", map[string]string{"app": "web"}), userService("api", map[string]string{"app": "web"})
	web.Spec.ClusterIP, web.Spec.ClusterIPs = "10.96.0.20", []string{"10.96.0.20", "fd00:96::20"}
	api.Spec.ClusterIP = "10.96.0.10" // no clusterIPs: as an older API server writes it
	h := newHarness(t, webDeployment(), web, api,
		userService("other", map[string]string{"app": "other"}),
		twoPods(), twoActivators())
	h.sync()
	p := h.service(kube.PodsServiceName("web"))
	equal(t, "labels", p.Labels, map[string]string{kube.LabelDeployment: "web", kube.LabelManagedBy: kube.ManagedBy})
	equal(t, "annotations", p.Annotations, map[string]string{kube.AnnotationServices: "api,web", kube.AnnotationContainerConcurrency: "4",
		kube.AnnotationAllowedCallers: "", kube.AnnotationHosts: "", kube.AnnotationClusterIPs: "10.96.0.10,10.96.0.20,fd00:96::20"})
	equal(t, "owner", p.OwnerReferences, []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "uid-web", Controller: ptr.To(true)}})
	equal(t, "cluster IP", p.Spec.ClusterIP, corev1.ClusterIPNone)
	equal(t, "selector", p.Spec.Selector, map[string]string{"app": "web"})
	equal(t, "ports", p.Spec.Ports, []corev1.ServicePort{
		{Name: kube.PortNameHTTP, Protocol: corev1.ProtocolTCP, Port: 8012, TargetPort: intstr.FromInt32(8012)},
		{Name: kube.PortNameStats, Protocol: corev1.ProtocolTCP, Port: 9090, TargetPort: intstr.FromInt32(9090)},
	})
	if p.Spec.PublishNotReadyAddresses {
		t.Error("publishNotReadyAddresses set")
	}

	// A container concurrency that does not parse keeps the previous one.
	d := webDeployment()
	d.Annotations["swell.run/container-concurrency"] = "lots"
	if _, err := h.client.AppsV1().Deployments(ns).Update(h.ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.events()
	h.writes()
	h.sync()
	equal(t, "writes", h.writes(), []string(nil))
	events := h.events()
	if len(events) != 1 || !strings.HasPrefix(events[0], "Warning InvalidAnnotations Deployment shop/web: ") ||
		!strings.Contains(events[0], "swell.run/container-concurrency") || !strings.HasSuffix(events[0], "keeps container concurrency 4") {
		t.Errorf("events = %q, want one InvalidAnnotations warning naming the key and keeping 4", events)
	}

	// A Service dropped from the list, and a new concurrency.
	d.Annotations["swell.run/container-concurrency"] = "0"
	if _, err := h.client.AppsV1().Deployments(ns).Update(h.ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := h.client.CoreV1().Services(ns).Delete(h.ctx, "api", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.writes()
	h.sync()
	equal(t, "writes", h.writes(), []string{"update services web-swell-pods", "delete endpointslices api-swell"})
	equal(t, "annotations", h.service(kube.PodsServiceName("web")).Annotations,
		map[string]string{kube.AnnotationServices: "web", kube.AnnotationContainerConcurrency: "0", kube.AnnotationAllowedCallers: "",
			kube.AnnotationHosts: "", kube.AnnotationClusterIPs: "10.96.0.20,fd00:96::20"})

	// The callers allowed are copied, validated; a bad value keeps the
	// previous one, with both problems in one warning.
	d.Annotations[kube.AnnotationAllowedCallers] = "ingress-nginx, monitoring"
	if _, err := h.client.AppsV1().Deployments(ns).Update(h.ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.events()
	h.sync()
	equal(t, "callers", h.service(kube.PodsServiceName("web")).Annotations[kube.AnnotationAllowedCallers], "ingress-nginx,monitoring")
	d.Annotations[kube.AnnotationAllowedCallers] = "Not A Namespace"
	d.Annotations["swell.run/container-concurrency"] = "lots"
	if _, err := h.client.AppsV1().Deployments(ns).Update(h.ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.writes()
	h.sync()
	equal(t, "writes", h.writes(), []string(nil))
	events = h.events()
	if len(events) != 1 || !strings.Contains(events[0], kube.AnnotationAllowedCallers) || !strings.Contains(events[0], "container-concurrency") ||
		!strings.HasSuffix(events[0], "keeps container concurrency 0 and callers ingress-nginx,monitoring") {
		t.Errorf("events = %q, want one warning naming both keys and keeping both values", events)
	}
}

// TestPodsServiceHosts: the extra hosts are copied, validated; a value
// that claims another namespace's cluster-local name keeps the previous
// one, with a warning.
func TestPodsServiceHosts(t *testing.T) {
	d := webDeployment()
	d.Annotations[kube.AnnotationHosts] = "Shop.Example.com, api.example.com"
	h := newHarness(t, d, userService("web", map[string]string{"app": "web"}), twoPods())
	h.sync()
	equal(t, "hosts", h.service(kube.PodsServiceName("web")).Annotations[kube.AnnotationHosts], "api.example.com,shop.example.com")
	d.Annotations[kube.AnnotationHosts] = "web.payments.svc.cluster.local"
	if _, err := h.client.AppsV1().Deployments(ns).Update(h.ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.events()
	h.sync()
	equal(t, "hosts", h.service(kube.PodsServiceName("web")).Annotations[kube.AnnotationHosts], "api.example.com,shop.example.com")
	if events := h.events(); len(events) != 1 || !strings.Contains(events[0], "cluster-local") ||
		!strings.HasSuffix(events[0], "keeps hosts api.example.com,shop.example.com") {
		t.Errorf("events = %q, want one warning keeping the previous hosts", events)
	}
}

func TestInvalidContainerConcurrencyWithoutPrevious(t *testing.T) {
	d := webDeployment()
	d.Annotations["swell.run/container-concurrency"] = "-1"
	h := newHarness(t, d, twoPods())
	h.sync()
	equal(t, "cc", h.service(kube.PodsServiceName("web")).Annotations[kube.AnnotationContainerConcurrency], "0")
	if events := h.events(); len(events) != 1 || !strings.HasPrefix(events[0], "Warning InvalidAnnotations") {
		t.Errorf("events = %q, want one InvalidAnnotations warning", events)
	}
}

func TestServicesNotRouted(t *testing.T) {
	ext := userService("ext", map[string]string{"app": "web"})
	ext.Spec.Type = corev1.ServiceTypeExternalName
	canary := deployment("web-canary", map[string]string{"app": "web", "track": "canary"}, nil)
	headless := userService("direct", map[string]string{"app": "web"})
	headless.Spec.ClusterIP = corev1.ClusterIPNone
	h := newHarness(t, webDeployment(), canary, ext, headless,
		userService("both", map[string]string{"app": "web"}),
		userService("wider", map[string]string{"app": "web", "tier": "front"}),
		userService("empty", nil),
		twoPods(), twoActivators())
	h.sync()
	equal(t, "writes", h.writes(), []string{"create services web-swell-pods"})
	equal(t, "events", h.events(), []string{
		"Warning NotRouted Service shop/both selects the pods of Deployment web and also of web-canary: Swell routes only a Service that selects one Deployment's pods",
		"Warning NotRouted Service shop/direct is headless: its clients dial the pods' addresses on the app's port, which Swell cannot route",
	})
}

func TestNotInjected(t *testing.T) {
	d := webDeployment()
	d.Spec.Template.Spec.Containers = d.Spec.Template.Spec.Containers[:1]
	h := newHarness(t, d, userService("web", map[string]string{"app": "web"}), twoPods(), twoActivators())
	h.sync()
	h.noRouteSlice("web")
	events := h.events()
	if len(events) != 2 || !strings.Contains(events[0], "no queue-proxy container") {
		t.Errorf("events = %q, want warnings that the template has no queue-proxy", events)
	}
}

func TestAppContainer(t *testing.T) {
	qp := corev1.Container{Name: inject.ContainerName, Ports: []corev1.ContainerPort{{ContainerPort: 8012}}}
	for _, tc := range []struct {
		name       string
		annotation string
		containers []corev1.Container
		port       int32
		err        string
	}{
		{"only container, no port", "", []corev1.Container{{Name: "app"}, qp}, 8080, ""},
		{"only container", "", []corev1.Container{{Name: "app", Ports: []corev1.ContainerPort{{ContainerPort: 3000}, {ContainerPort: 3001}}}, qp}, 3000, ""},
		{"only one with ports", "", []corev1.Container{{Name: "log"}, {Name: "app", Ports: []corev1.ContainerPort{{ContainerPort: 3000}}}, qp}, 3000, ""},
		{"named", "side", []corev1.Container{{Name: "app", Ports: []corev1.ContainerPort{{ContainerPort: 3000}}}, {Name: "side", Ports: []corev1.ContainerPort{{ContainerPort: 4000}}}, qp}, 4000, ""},
		{"named, missing", "nope", []corev1.Container{{Name: "app"}, qp}, 0, `swell.run/container: "nope" names no container`},
		{"two with ports", "", []corev1.Container{{Name: "a", Ports: []corev1.ContainerPort{{ContainerPort: 1}}}, {Name: "b", Ports: []corev1.ContainerPort{{ContainerPort: 2}}}, qp}, 0, "containers a and b both declare ports"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := webDeployment()
			d.Spec.Template.Spec.Containers = tc.containers
			if tc.annotation != "" {
				d.Annotations[inject.AnnotationContainer] = tc.annotation
			}
			app := appOf(d)
			if tc.err != "" {
				if app.err == nil || !strings.Contains(app.err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", app.err, tc.err)
				}
				return
			}
			if app.err != nil || app.port != tc.port {
				t.Fatalf("port = %d, %v; want %d", app.port, app.err, tc.port)
			}
		})
	}
}

func TestReadyPods(t *testing.T) {
	other := slice(ns, "web-swell-pods-b2c3d", kube.PodsServiceName("web"), sliceController, 8012,
		ep{ip: "10.0.0.9", ready: true, pod: "web-a"}, ep{ip: "10.0.0.2", ready: true, terminating: true, pod: "web-z"},
		ep{ip: "10.0.0.100", ready: true, pod: "web-d"})
	v6 := slice(ns, "web-swell-pods-v6v6v", kube.PodsServiceName("web"), sliceController, 8012, ep{ip: "fd00::1", ready: true, pod: "web-a"})
	v6.AddressType = discoveryv1.AddressTypeIPv6
	h := newHarness(t, twoPods(), other, v6)
	equal(t, "ready pods", h.r.ReadyPods(web), []string{"10.0.0.9", "10.0.0.10", "10.0.0.100"})
	equal(t, "none", h.r.ReadyPods(service.Key{Namespace: ns, Name: "nope"}), []string{})
	if got, want := h.r.ReadyPodNames(web), map[string]string{"10.0.0.9": "web-a", "10.0.0.10": "web-b", "10.0.0.100": "web-d"}; !maps.Equal(got, want) {
		t.Errorf("ready pod names %v, want %v", got, want)
	}
}

// TestReadyPodsOnlyOfTheNamespace: an endpoint of a pods-Service's slice
// counts only if it references a pod of the service's namespace, as
// Kubernetes writes it; a slice copied from another namespace's, or one
// naming no pod, lists none (second security review, finding 1).
func TestReadyPodsOnlyOfTheNamespace(t *testing.T) {
	forged := slice(ns, "web-swell-pods-aaaaa", kube.PodsServiceName("web"), sliceController, 8012,
		ep{ip: "10.0.5.1", ready: true}, ep{ip: "10.0.5.2", ready: true, pod: "vault-a"}, ep{ip: "10.0.5.3", ready: true, pod: "web-e"})
	forged.Endpoints[1].TargetRef.Namespace = "bank"
	forged.Endpoints[2].TargetRef.Kind = "Node"
	h := newHarness(t, twoPods(), forged)
	equal(t, "ready pods", h.r.ReadyPods(web), []string{"10.0.0.9", "10.0.0.10"})
}

func TestSetRouteRejectsUnknown(t *testing.T) {
	h := newHarness(t)
	err := h.r.SetRoute(h.ctx, web, plan.RouteUnknown)
	if err == nil || !strings.Contains(err.Error(), "accepted: activator or pods") {
		t.Fatalf("err = %v", err)
	}
}

func TestSetRouteBeforeRunWritesNothing(t *testing.T) {
	h := newHarness(t, webDeployment(), userService("web", map[string]string{"app": "web"}), twoPods(), twoActivators())
	if err := h.r.SetRoute(h.ctx, web, plan.RouteActivator); err != nil {
		t.Fatal(err)
	}
	equal(t, "writes", h.writes(), []string(nil))
	eff, req := h.r.Route(web)
	equal(t, "route", []plan.Route{eff, req}, []plan.Route{plan.RouteActivator, plan.RouteActivator})
}

// TestRun drives the Router through its queue: a Deployment is routed as
// soon as it is seen, OnChange reports its pods and route, and a SetRoute
// is written by a worker.
func TestRun(t *testing.T) {
	h := newHarness(t, twoActivators())
	var mu sync.Mutex
	changed := map[service.Key]int{}
	h.r.OnChange(func(k service.Key) {
		mu.Lock()
		changed[k]++
		mu.Unlock()
	})
	changes := func() int {
		mu.Lock()
		defer mu.Unlock()
		return changed[web]
	}
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan error, 1)
	go func() { done <- h.r.Run(ctx, 2) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})

	for _, obj := range []runtime.Object{webDeployment(), userService("web", map[string]string{"app": "web"})} {
		var err error
		switch o := obj.(type) {
		case *appsv1.Deployment:
			_, err = h.client.AppsV1().Deployments(ns).Create(h.ctx, o, metav1.CreateOptions{})
		case *corev1.Service:
			_, err = h.client.CoreV1().Services(ns).Create(h.ctx, o, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	h.eventually("the pods-Service", func() bool {
		_, err := h.r.services.Services(ns).Get(kube.PodsServiceName("web"))
		return err == nil
	})
	// Kubernetes lists web's pods: web is routed to them.
	if _, err := h.client.DiscoveryV1().EndpointSlices(ns).Create(h.ctx, twoPods(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually("the pods route", func() bool {
		eff, _ := h.r.Route(web)
		return eff == plan.RoutePods && changes() >= 2
	})
	equal(t, "ready pods", h.r.ReadyPods(web), []string{"10.0.0.9", "10.0.0.10"})

	before := changes()
	if err := h.r.SetRoute(h.ctx, web, plan.RouteActivator); err != nil {
		t.Fatal(err)
	}
	h.eventually("the activator route", func() bool {
		eff, req := h.r.Route(web)
		return eff == plan.RouteActivator && req == plan.RouteActivator && changes() > before
	})
	equal(t, "endpoints", addresses(h.routeSlice("web")), []string{"10.9.0.1@n1", "10.9.0.2@n2"})

	// A new activator: web's slice lists it.
	act := activators(ep{ip: "10.9.0.1", ready: true, node: "n1"}, ep{ip: "10.9.0.2", ready: true, node: "n2"}, ep{ip: "10.9.0.7", ready: true})
	if _, err := h.client.DiscoveryV1().EndpointSlices(sysNS).Update(h.ctx, act, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually("the new activator listed", func() bool {
		s, err := h.r.slices.EndpointSlices(ns).Get(kube.RouteSliceName("web"))
		return err == nil && len(s.Endpoints) == 3
	})

	// Deleting web gives its Service back.
	if err := h.client.AppsV1().Deployments(ns).Delete(h.ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually("the selector back", func() bool {
		svc, err := h.r.services.Services(ns).Get("web")
		return err == nil && len(svc.Spec.Selector) > 0
	})
	raw, _ := json.Marshal(h.service("web").Spec.Selector)
	equal(t, "selector", string(raw), `{"app":"web"}`)
}

func (h *harness) eventually(what string, cond func() bool) {
	h.t.Helper()
	err := wait.PollUntilContextTimeout(h.ctx, time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		h.t.Fatalf("never saw %s: %v", what, err)
	}
}

func TestChooseOrder(t *testing.T) {
	pods := []endpoint{{}}
	act := activator{endpoints: []endpoint{{}}, port: actPort}
	for _, tc := range []struct {
		want    plan.Route
		pods    []endpoint
		act     activator
		route   string
		ok      bool
		comment string
	}{
		{plan.RoutePods, pods, act, kube.RoutePods, true, "as asked"},
		{plan.RouteActivator, pods, act, kube.RouteActivator, true, "as asked"},
		{plan.RouteUnknown, pods, act, kube.RoutePods, true, "pods by default"},
		{plan.RoutePods, nil, act, kube.RouteActivator, true, "no pod"},
		{plan.RouteActivator, pods, activator{}, kube.RoutePods, true, "no activator"},
		{plan.RouteActivator, pods, activator{endpoints: act.endpoints}, kube.RoutePods, true, "activator without its port"},
		{plan.RoutePods, nil, activator{}, "", false, "neither"},
	} {
		got, ok := choose(tc.want, tc.pods, tc.act)
		if got.route != tc.route || ok != tc.ok {
			t.Errorf("%s: choose(%v) = %q, %v; want %q, %v", tc.comment, tc.want, got.route, ok, tc.route, tc.ok)
		}
	}
}

func TestUpdateHandlerReadsTheOldObjectWhenItDiffers(t *testing.T) {
	var got []string
	h := handler(func(obj any, deleted bool) {
		s := obj.(*corev1.Service)
		got = append(got, fmt.Sprintf("%s %v", s.ResourceVersion, deleted))
	}, sameService)
	svc := func(rv string, mod func(*corev1.Service)) *corev1.Service {
		s := userService("web", map[string]string{"app": "web"})
		s.ResourceVersion = rv
		if mod != nil {
			mod(s)
		}
		return s
	}
	for _, tc := range []struct {
		name     string
		old, obj *corev1.Service
		want     []string
	}{
		{"resync", svc("1", nil), svc("1", nil), []string{"1 false"}},
		{"ports changed", svc("1", nil), svc("2", func(s *corev1.Service) { s.Spec.Ports = nil }), []string{"2 false"}},
		{"selector changed", svc("1", nil), svc("2", func(s *corev1.Service) { s.Spec.Selector = map[string]string{"app": "other"} }),
			[]string{"1 false", "2 false"}},
		{"label changed", svc("1", nil), svc("2", func(s *corev1.Service) { s.Labels = map[string]string{kube.LabelDeployment: "web"} }),
			[]string{"1 false", "2 false"}},
		{"selector taken", svc("1", nil), svc("2", func(s *corev1.Service) {
			s.Spec.Selector = nil
			s.Annotations = map[string]string{kube.AnnotationSelector: `{"app":"web"}`}
		}), []string{"1 false", "2 false"}},
	} {
		got = nil
		h.OnUpdate(tc.old, tc.obj)
		equal(t, tc.name, got, tc.want)
	}
	got = nil
	h.OnDelete(svc("3", nil))
	equal(t, "delete", got, []string{"3 true"})
}

// TestDeploymentChangeConcernsOthersThroughTemplateLabels: a Deployment
// scaled concerns itself only; one whose pod template labels change
// concerns the Deployments whose Services it selected or selects.
func TestDeploymentChangeConcernsOthersThroughTemplateLabels(t *testing.T) {
	canary := deployment("web-canary", map[string]string{"app": "web", "track": "canary"}, nil)
	h := newHarness(t, webDeployment(), canary, userService("both", map[string]string{"app": "web"}))
	if !cache.WaitForCacheSync(h.ctx.Done(), h.r.synced...) {
		t.Fatal("handlers not synced")
	}
	queued := func() []string {
		var out []string
		for h.r.queue.Len() > 0 {
			k, _ := h.r.queue.Get()
			out = append(out, k.String())
			h.r.queue.Done(k)
		}
		slices.Sort(out)
		return out
	}
	queued()

	scaled := canary.DeepCopy()
	scaled.ResourceVersion, scaled.Generation, scaled.Spec.Replicas = "2", 2, ptr.To[int32](3)
	h.r.deploymentChanged(canary, scaled)
	equal(t, "scaled", queued(), []string{"shop/web-canary"})

	relabelled := scaled.DeepCopy()
	relabelled.ResourceVersion, relabelled.Generation = "3", 3
	relabelled.Spec.Template.Labels["app"] = "canary"
	h.r.deploymentChanged(scaled, relabelled)
	equal(t, "relabelled", queued(), []string{"shop/web", "shop/web-canary"})

	h.r.deploymentDeleted(cache.DeletedFinalStateUnknown{Key: "shop/web-canary", Obj: scaled})
	equal(t, "deleted", queued(), []string{"shop/web", "shop/web-canary"})
}

// TestOwnsLimitsRoutingToTheBucketsLed: sharded, a replica routes only the
// Deployments of the buckets it leads; one whose bucket it gave up is
// left alone, and its requested route forgotten; Resync brings one in.
func TestOwnsLimitsRoutingToTheBucketsLed(t *testing.T) {
	h := newHarness(t, webDeployment(), userService("web", map[string]string{"app": "web"}),
		twoPods(), twoActivators(), kubernetesSlice("web", ep{ip: "10.0.0.9", ready: true}))
	owned := false
	h.r.owns = func(service.Key) bool { return owned }
	h.settle()
	if err := h.r.SetRoute(h.ctx, web, plan.RouteActivator); err != nil {
		t.Fatal(err)
	}
	for h.r.queue.Len() > 0 {
		h.r.next(h.ctx)
	}
	equal(t, "writes for a Deployment of a bucket not led", h.writes(), []string(nil))
	h.r.mu.Lock()
	_, kept := h.r.requested[web]
	h.r.mu.Unlock()
	if kept {
		t.Error("the route requested for a Deployment of a bucket not led is kept")
	}

	owned = true
	h.r.Resync(func(k service.Key) bool { return k == web })
	if h.r.queue.Len() != 1 {
		t.Fatalf("Resync queued %d keys, want web's", h.r.queue.Len())
	}
	h.r.next(h.ctx)
	if w := h.writes(); !slices.Contains(w, "create endpointslices web-swell") {
		t.Errorf("after its bucket was taken: writes %q, want web's route slice created", w)
	}
}

// TestRouteSlicesStateEveryCondition: every endpoint of a route slice,
// pods or activators, says ready, serving and not terminating outright.
// Readers differ on a condition left out (the API reads a nil ready as
// ready; some ingress controllers and gateways read it as not ready and
// drop the endpoint).
func TestRouteSlicesStateEveryCondition(t *testing.T) {
	for _, route := range []plan.Route{plan.RoutePods, plan.RouteActivator} {
		h := newHarness(t, webDeployment(), userService("web", map[string]string{"app": "web"}), twoPods(), twoActivators())
		h.setRoute(route)
		h.settle()
		s := h.routeSlice("web")
		if len(s.Endpoints) == 0 {
			t.Fatalf("route %v: no endpoint", route)
		}
		for _, e := range s.Endpoints {
			c := e.Conditions
			if c.Ready == nil || !*c.Ready || c.Serving == nil || !*c.Serving || c.Terminating == nil || *c.Terminating {
				t.Errorf("route %v: endpoint %v has conditions ready %v, serving %v, terminating %v; want each stated: true, true, false",
					route, e.Addresses, c.Ready, c.Serving, c.Terminating)
			}
		}
	}
}
