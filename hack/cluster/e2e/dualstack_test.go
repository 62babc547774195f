package e2e

import (
	"context"
	"fmt"
	"io"
	"maps"
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

	"github.com/swell-run/swell/hack/cluster/netns"
)

// dualStackRequests bounds the requests TestDualStackService sends from a
// pod to the IPv6 ClusterIP until every replica has answered. kube-proxy
// picks an endpoint per connection at random: 32 connections all reach
// the same one of two replicas with a chance of 2 in 2^32.
const dualStackRequests = 32

// TestDualStackService: the cluster is dual-stack, IPv4 first. Its Node
// has an InternalIP and a pod range of each family. A plain Deployment of
// two hello pods behind a Service of ipFamilyPolicy RequireDualStack: each
// pod has an IPv4 and an IPv6 address, the Service an IPv4 and an IPv6
// ClusterIP, and Kubernetes writes an EndpointSlice of each family listing
// exactly the pods' addresses of that family, ready. Once kube-proxy's
// iptables and ip6tables rules send both ClusterIPs to exactly those
// endpoints, a request to http://[IPv6 ClusterIP]:80/ is answered by the
// app, from the cluster's namespace and from another pod, and reaches it
// over IPv6 from the caller's own IPv6 address (the app's Demo-Peer); every
// pod answers in turn. A Service of the same pods that asks for no family
// stays IPv4 only, as every other test's does.
func TestDualStackService(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const name, replicas = "dual", 2
	podsV4 := netip.MustParsePrefix(netns.PodCIDR)
	podsV6 := netip.MustParsePrefix(netns.PodCIDRV6)
	servicesV4 := netip.MustParsePrefix(netns.ServiceCIDR)
	servicesV6 := netip.MustParsePrefix(netns.ServiceCIDRV6)

	if _, err := e.cs.AppsV1().Deployments(e.ns).Create(t.Context(), helloDeployment(name, replicas), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create deployment %s: %v", name, err)
	}
	dual := helloService(name)
	dual.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyRequireDualStack)
	svc, err := e.cs.CoreV1().Services(e.ns).Create(t.Context(), dual, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create service %s of ipFamilyPolicy RequireDualStack: %v", name, err)
	}
	plain := helloService(name)
	plain.Name = name + "-default"
	plainSvc, err := e.cs.CoreV1().Services(e.ns).Create(t.Context(), plain, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create service %s: %v", plain.Name, err)
	}

	if fams := svc.Spec.IPFamilies; !slices.Equal(fams, []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}) || len(svc.Spec.ClusterIPs) != 2 {
		t.Fatalf("service %s: IP families %v, ClusterIPs %v; want IPv4 then IPv6, a ClusterIP of each", name, fams, svc.Spec.ClusterIPs)
	}
	if ip, err := netip.ParseAddr(svc.Spec.ClusterIPs[0]); err != nil || !servicesV4.Contains(ip) || svc.Spec.ClusterIP != svc.Spec.ClusterIPs[0] {
		t.Errorf("service %s: ClusterIP %s, ClusterIPs %v; want the first, IPv4, in %s", name, svc.Spec.ClusterIP, svc.Spec.ClusterIPs, servicesV4)
	}
	clusterIPv6, err := netip.ParseAddr(svc.Spec.ClusterIPs[1])
	if err != nil || !clusterIPv6.Is6() || !servicesV6.Contains(clusterIPv6) {
		t.Fatalf("service %s: second ClusterIP %q, want an IPv6 address in %s", name, svc.Spec.ClusterIPs[1], servicesV6)
	}
	if p, fams := plainSvc.Spec.IPFamilyPolicy, plainSvc.Spec.IPFamilies; p == nil || *p != corev1.IPFamilyPolicySingleStack ||
		!slices.Equal(fams, []corev1.IPFamily{corev1.IPv4Protocol}) || len(plainSvc.Spec.ClusterIPs) != 1 {
		t.Errorf("service %s, which asks for no family: policy %v, families %v, ClusterIPs %v; want SingleStack IPv4 with one ClusterIP",
			plain.Name, ptr.Deref(p, ""), fams, plainSvc.Spec.ClusterIPs)
	}

	// The pods, and an EndpointSlice of each family listing exactly their
	// addresses of that family.
	var pods []corev1.Pod
	e.eventually(fmt.Sprintf("%d ready pods of %s with an IPv4 and an IPv6 address, each family's exactly listed ready in an EndpointSlice of that family", replicas, name), func(ctx context.Context) error {
		ps, err := e.pods(ctx, name)
		if err != nil {
			return err
		}
		if len(ps) != replicas {
			return fmt.Errorf("%d pods, want %d", len(ps), replicas)
		}
		want := map[discoveryv1.AddressType][]string{}
		for i := range ps {
			p := &ps[i]
			if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || !isReady(p) {
				return fmt.Errorf("pod %s is not Running and Ready", p.Name)
			}
			if err := dualStackPodIPs(p, podsV4, podsV6); err != nil {
				return err
			}
			want[discoveryv1.AddressTypeIPv4] = append(want[discoveryv1.AddressTypeIPv4], p.Status.PodIPs[0].IP)
			want[discoveryv1.AddressTypeIPv6] = append(want[discoveryv1.AddressTypeIPv6], p.Status.PodIPs[1].IP)
		}
		list, err := e.cs.DiscoveryV1().EndpointSlices(e.ns).List(ctx, metav1.ListOptions{
			LabelSelector: discoveryv1.LabelServiceName + "=" + name,
		})
		if err != nil {
			return err
		}
		got := map[discoveryv1.AddressType][]string{}
		for _, s := range list.Items {
			if !slices.ContainsFunc(s.Ports, func(p discoveryv1.EndpointPort) bool { return p.Port != nil && *p.Port == helloPort }) {
				return fmt.Errorf("EndpointSlice %s (%s) has ports %v, want %d among them", s.Name, s.AddressType, describePorts(s.Ports), helloPort)
			}
			for _, ep := range s.Endpoints {
				if ep.Conditions.Ready == nil || !*ep.Conditions.Ready {
					return fmt.Errorf("EndpointSlice %s (%s) lists %v not ready", s.Name, s.AddressType, ep.Addresses)
				}
				got[s.AddressType] = append(got[s.AddressType], ep.Addresses...)
			}
		}
		for _, ips := range want {
			slices.Sort(ips)
		}
		for _, ips := range got {
			slices.Sort(ips)
		}
		if !maps.EqualFunc(got, want, slices.Equal) {
			return fmt.Errorf("EndpointSlices list %v, want the pods' addresses %v", got, want)
		}
		pods = ps
		return nil
	})

	node, err := e.cs.CoreV1().Nodes().Get(t.Context(), pods[0].Spec.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var internal []string
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			internal = append(internal, a.Address)
		}
	}
	if want := []string{netns.Gateway, netns.GatewayV6}; !slices.Equal(internal, want) {
		t.Errorf("node %s has InternalIPs %v, want %v", node.Name, internal, want)
	}
	if want := []string{netns.PodCIDR, netns.PodCIDRV6}; !slices.Equal(node.Spec.PodCIDRs, want) {
		t.Errorf("node %s has pod CIDRs %v, want %v", node.Name, node.Spec.PodCIDRs, want)
	}

	e.eventually("kube-proxy sending both ClusterIPs of "+name+" to exactly its ready endpoints of their family", func(ctx context.Context) error {
		return proxiedAsListed(ctx, e.cs, e.ns, name)
	})

	// A query makes the app name the address the request came from: an
	// IPv6 address is a request that reached it over IPv6.
	url := "http://" + net.JoinHostPort(clusterIPv6.String(), fmt.Sprint(svc.Spec.Ports[0].Port)) + "/?status=200"
	ask := func(c *http.Client, from, peer string) (answeredBy string) {
		t.Helper()
		code, body, h, err := getHeader(t.Context(), c, url)
		if err != nil {
			t.Fatalf("GET %s from %s: %v", url, from, err)
		}
		if code != http.StatusOK || !strings.HasPrefix(body, helloGreeting) {
			t.Fatalf("GET %s from %s: %d %q, want 200 and the app's greeting", url, from, code, body)
		}
		if got := h.Get("Demo-Peer"); got != peer {
			t.Fatalf("GET %s from %s reached the app from %q, want the caller's own IPv6 address %s", url, from, got, peer)
		}
		for _, p := range pods {
			if strings.Contains(body, p.Name) {
				return p.Name
			}
		}
		t.Fatalf("GET %s from %s: %q names none of the pods", url, from, body)
		return ""
	}

	// From the cluster's namespace, as the node: its route to the IPv6
	// service CIDR leaves from its IPv6 address.
	ask(httpClient, "the cluster's namespace", netns.GatewayV6)

	// From a pod, through its IPv6 default route.
	client := e.idlePod(e.ns, "client")
	if err := dualStackPodIPs(client, podsV4, podsV6); err != nil {
		t.Fatal(err)
	}
	c := e.clientIn(client, 10*time.Second)
	answered := map[string]int{}
	for i := 0; i < dualStackRequests && len(answered) < len(pods); i++ {
		answered[ask(c, "pod "+client.Name, client.Status.PodIPs[1].IP)]++
	}
	t.Logf("%s from pod %s (%s): answered by %v", url, client.Name, client.Status.PodIPs[1].IP, answered)
	if len(answered) != len(pods) {
		t.Errorf("%d requests from pod %s at the IPv6 ClusterIP were answered by %v, want each of the %d pods", dualStackRequests, client.Name, answered, len(pods))
	}
}

// dualStackPodIPs says how the pod's addresses are not one IPv4 address
// in v4 and one IPv6 address in v6, in that order, the first its PodIP.
func dualStackPodIPs(p *corev1.Pod, v4, v6 netip.Prefix) error {
	var ips []string
	for _, ip := range p.Status.PodIPs {
		ips = append(ips, ip.IP)
	}
	if len(ips) != 2 || p.Status.PodIP != ips[0] {
		return fmt.Errorf("pod %s has PodIP %q and PodIPs %v, want an IPv4 then an IPv6 address", p.Name, p.Status.PodIP, ips)
	}
	a, err4 := netip.ParseAddr(ips[0])
	b, err6 := netip.ParseAddr(ips[1])
	if err4 != nil || err6 != nil || !a.Is4() || !v4.Contains(a) || !b.Is6() || !v6.Contains(b) {
		return fmt.Errorf("pod %s has PodIPs %v, want one in %s then one in %s", p.Name, ips, v4, v6)
	}
	return nil
}

// getHeader is getWith that returns the answer's header too.
func getHeader(ctx context.Context, c *http.Client, url string) (int, string, http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), resp.Header, err
}
