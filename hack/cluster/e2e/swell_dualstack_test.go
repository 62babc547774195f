package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestSwellWakesOverIPv6: a Swell service at zero behind a Service of both
// families gets a route slice of each, the IPv6 one listing the
// activators' IPv6 addresses on the service's own port; a request to the
// IPv6 ClusterIP, with a Host the activators know nothing of, wakes it
// and is answered by its pod.
func TestSwellWakesOverIPv6(t *testing.T) {
	t.Parallel()
	e := swellSetup(t)
	const name = "six"
	d := swellHello(name, int32p(0), map[string]string{"autoscaling.swell.run/min-scale": "0"})
	if _, err := e.cs.AppsV1().Deployments(e.ns).Create(t.Context(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := helloService(name)
	svc.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyRequireDualStack)
	svc, err := e.cs.CoreV1().Services(e.ns).Create(t.Context(), svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create service %s of both families: %v", name, err)
	}
	if len(svc.Spec.ClusterIPs) != 2 {
		t.Fatalf("service %s: ClusterIPs %v, want one of each family", name, svc.Spec.ClusterIPs)
	}
	v6, err := netip.ParseAddr(svc.Spec.ClusterIPs[1])
	if err != nil || !v6.Is6() {
		t.Fatalf("service %s: second ClusterIP %q is not IPv6", name, svc.Spec.ClusterIPs[1])
	}

	e.eventually(name+" at zero, its IPv6 route slice listing the activators' IPv6 addresses on its own port", func(ctx context.Context) error {
		if n, err := e.replicas(ctx, name); err != nil || n != 0 {
			return fmt.Errorf("scale %d %v, want 0", n, err)
		}
		s, err := e.cs.DiscoveryV1().EndpointSlices(e.ns).Get(ctx, name+"-swell-ipv6", metav1.GetOptions{})
		if err != nil {
			return err
		}
		acts, err := activatorIPv6(ctx, e)
		if err != nil {
			return err
		}
		if s.AddressType != discoveryv1.AddressTypeIPv6 || s.Labels[labelRoute] != "activator" || !slices.Equal(sliceIPs(s), acts) {
			return fmt.Errorf("IPv6 route slice: %s, route %q, endpoints %v; want IPv6, activator, %v", s.AddressType, s.Labels[labelRoute], sliceIPs(s), acts)
		}
		own, err := e.servicePort(ctx, name)
		if err != nil {
			return err
		}
		if len(s.Ports) != 1 || ptr.Deref(s.Ports[0].Port, 0) != own {
			return fmt.Errorf("IPv6 route slice ports %v, want the service's own port %d", s.Ports, own)
		}
		return e.routeIs(ctx, name, "activator")
	})
	e.eventually("kube-proxy sending both ClusterIPs of "+name+" to the activators", func(ctx context.Context) error {
		return proxiedAsListed(ctx, e.cs, e.ns, name)
	})

	url := "http://" + net.JoinHostPort(v6.String(), fmt.Sprint(svc.Spec.Ports[0].Port)) + "/?status=200"
	start := time.Now()
	code, body, err := hostGet(t.Context(), url, "six.example.com")
	if err != nil || code != http.StatusOK || !strings.HasPrefix(body, helloGreeting) {
		t.Fatalf("GET %s at zero: %d %q %v; want 200 and the app's greeting", url, code, body, err)
	}
	t.Logf("cold start over the IPv6 ClusterIP answered in %v", time.Since(start).Round(time.Millisecond))
	if n, err := e.replicas(t.Context(), name); err != nil || n < 1 {
		t.Errorf("scale after the request: %d %v, want at least 1", n, err)
	}
}

// activatorIPv6 lists the ready activators' IPv6 addresses, sorted.
func activatorIPv6(ctx context.Context, e *env) ([]string, error) {
	list, err := e.cs.DiscoveryV1().EndpointSlices(swellNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=activator",
	})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range list.Items {
		if s.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		for _, ep := range s.Endpoints {
			if ptr.Deref(ep.Conditions.Ready, true) && len(ep.Addresses) > 0 {
				out = append(out, ep.Addresses[0])
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the activators' Service lists no IPv6 address")
	}
	slices.Sort(out)
	return out, nil
}
