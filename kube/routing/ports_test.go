package routing

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/swell-run/swell/autoscaler/plan"
	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/kube/ports"
)

// listening is a fake Config.Dial: the addresses whose activator has
// opened its port.
type listening struct {
	mu     sync.Mutex
	open   map[string]bool
	dialed []string
}

func (l *listening) dial(_ context.Context, addr string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dialed = append(l.dialed, addr)
	if !l.open[addr] {
		return errors.New("connection refused")
	}
	return nil
}

func (l *listening) set(addr string, open bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open[addr] = open
}

func (l *listening) calls() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.dialed
	l.dialed = nil
	return out
}

var testPorts = ports.Range{First: 20000, Last: 20099}

// webPort reads web's port from the table as the API server has it.
func (h *harness) webPort() int {
	h.t.Helper()
	list, err := h.client.CoreV1().ConfigMaps(sysNS).List(h.ctx, metav1.ListOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	for _, cm := range list.Items {
		for k, v := range cm.Data {
			if v == web.String() {
				p, _ := strconv.Atoi(k)
				return p
			}
		}
	}
	return 0
}

// TestServicePortRoute: with service ports, the activator route lists
// the activators on the Deployment's own port, and only those that have
// opened it; one that has not is dialled again at the next reconcile,
// and listed once it takes a connection. None having opened it, the pods
// stay. A settled route dials nothing. Once the Deployment is gone and
// nothing of it routed, its port is given back.
func TestServicePortRoute(t *testing.T) {
	l := &listening{open: map[string]bool{}}
	h := newHarnessWith(t, func(c *Config) { c.ServicePorts = testPorts; c.Dial = l.dial },
		webDeployment(), userService("web", map[string]string{"app": "web"}), twoPods(), twoActivators())
	h.sync()
	port := h.webPort()
	if port < testPorts.First || port > testPorts.Last {
		t.Fatalf("web's port %d, outside %s", port, testPorts)
	}
	equal(t, "route while no activator opened the port", h.routeSlice("web").Labels[kube.LabelRoute], kube.RoutePods)

	a1, a2 := "10.9.0.1:"+strconv.Itoa(port), "10.9.0.2:"+strconv.Itoa(port)
	l.set(a1, true)
	l.calls()
	h.setRoute(plan.RouteActivator)
	s := h.routeSlice("web")
	equal(t, "route", s.Labels[kube.LabelRoute], kube.RouteActivator)
	equal(t, "ports", slicePorts(s), []string{fmt.Sprintf("http/TCP/%d", port)})
	equal(t, "endpoints", addresses(s), []string{"10.9.0.1@n1"})
	equal(t, "dialled", len(l.calls()), 2)

	l.set(a2, true)
	h.sync()
	equal(t, "endpoints once both opened", addresses(h.routeSlice("web")), []string{"10.9.0.1@n1", "10.9.0.2@n2"})
	equal(t, "dialled", l.calls(), []string{a2})
	h.sync()
	equal(t, "dialled when settled", l.calls(), []string(nil))

	// Gone: the Services are given back, the slices go, then the port.
	if err := h.client.AppsV1().Deployments(ns).Delete(h.ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		h.clock.Step(ReleaseTimeout)
		h.sync()
	}
	equal(t, "web's port after it went", h.webPort(), 0)
	cm, err := h.client.CoreV1().ConfigMaps(sysNS).Get(h.ctx, ports.ConfigMapName(port), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := cm.Data[strconv.Itoa(port)]; len(v) < len("released ") || v[:len("released ")] != "released " {
		t.Errorf("the table says %q of web's old port, want it released", v)
	}
}

// ipv6 returns s as its IPv6 twin: named apart, of family IPv6.
func ipv6(s *discoveryv1.EndpointSlice, eps ...ep) *discoveryv1.EndpointSlice {
	t := slice(s.Namespace, s.Name+"-v6", s.Labels[discoveryv1.LabelServiceName], s.Labels[discoveryv1.LabelManagedBy], *s.Ports[0].Port, eps...)
	t.AddressType = discoveryv1.AddressTypeIPv6
	return t
}

// TestDualStackRoute: a Service of both families gets a route slice of
// each, listing the pods, then the activators, of that family (on the
// Deployment's own port, once each address took a connection there); a
// single-stack Service gets one; when the Service drops a family, its
// slice goes.
func TestDualStackRoute(t *testing.T) {
	l := &listening{open: map[string]bool{}}
	svc := userService("web", map[string]string{"app": "web"})
	svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	pods6 := ipv6(twoPods(), ep{ip: "fd00::9", ready: true, pod: "web-a", node: "n1"}, ep{ip: "fd00::a", ready: true, pod: "web-b", node: "n2"})
	acts6 := ipv6(twoActivators(), ep{ip: "fd00:9::1", ready: true, node: "n1"}, ep{ip: "::ffff:10.9.0.2", ready: true, node: "n2"})
	h := newHarnessWith(t, func(c *Config) { c.ServicePorts = testPorts; c.Dial = l.dial },
		webDeployment(), svc, twoPods(), pods6, twoActivators(), acts6)
	h.sync()
	v4, v6 := h.routeSlice("web"), h.routeSliceNamed(kube.RouteSliceNameIPv6("web"))
	equal(t, "IPv4 endpoints", addresses(v4), []string{"10.0.0.9:web-a@n1", "10.0.0.10:web-b@n2"})
	equal(t, "IPv6 family", v6.AddressType, discoveryv1.AddressTypeIPv6)
	equal(t, "IPv6 endpoints", addresses(v6), []string{"fd00::9:web-a@n1", "fd00::a:web-b@n2"})

	port := strconv.Itoa(h.webPort())
	for _, a := range []string{"10.9.0.1:" + port, "10.9.0.2:" + port, "[fd00:9::1]:" + port} {
		l.set(a, true)
	}
	h.setRoute(plan.RouteActivator)
	v6 = h.routeSliceNamed(kube.RouteSliceNameIPv6("web"))
	equal(t, "IPv6 route", v6.Labels[kube.LabelRoute], kube.RouteActivator)
	// An IPv4 address written as IPv6 is not an IPv6 endpoint.
	equal(t, "IPv6 activators", addresses(v6), []string{"fd00:9::1@n1"})
	equal(t, "IPv6 ports", slicePorts(v6), []string{"http/TCP/" + port})
	equal(t, "IPv4 activators", addresses(h.routeSlice("web")), []string{"10.9.0.1@n1", "10.9.0.2@n2"})

	cur, err := h.client.CoreV1().Services(ns).Get(h.ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
	if _, err := h.client.CoreV1().Services(ns).Update(h.ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.sync()
	if _, err := h.client.DiscoveryV1().EndpointSlices(ns).Get(h.ctx, kube.RouteSliceNameIPv6("web"), metav1.GetOptions{}); err == nil {
		t.Error("the IPv6 route slice stayed after the Service became IPv4 only")
	}
}
