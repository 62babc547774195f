package activatorsource

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/swell-run/swell/activator"
	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/pkg/autoscaling"
)

const (
	v4 = discoveryv1.AddressTypeIPv4
	v6 = discoveryv1.AddressTypeIPv6
)

func TestToServiceHostsAndConcurrency(t *testing.T) {
	svc := podsService("shop", "web",
		kube.AnnotationServices, "cart, ,front,",
		kube.AnnotationContainerConcurrency, "4")
	got, err := toService(webKey, svc, nil, newPodDirectory(), "corp.internal")
	want := activator.Service{
		Key: webKey,
		Hosts: []string{
			"cart.shop", "cart.shop.svc", "cart.shop.svc.corp.internal",
			"front.shop", "front.shop.svc", "front.shop.svc.corp.internal",
		},
		ContainerConcurrency: 4,
	}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, %v\nwant %+v", got, err, want)
	}
}

// TestToServiceClusterIPsAndClaims: the routed Services' cluster IPs are
// the service's own hosts; its claimed hosts come with the pods-Service's
// creation time, which orders competing claims; a claim that does not
// parse claims nothing.
func TestToServiceClusterIPsAndClaims(t *testing.T) {
	svc := podsService("shop", "web",
		kube.AnnotationServices, "front",
		kube.AnnotationClusterIPs, "10.96.0.20,fd00:96::20",
		kube.AnnotationHosts, "shop.example.com")
	created := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	svc.CreationTimestamp = metav1.NewTime(created)
	got, err := toService(webKey, svc, nil, newPodDirectory(), "cluster.local")
	want := activator.Service{
		Key:          webKey,
		Hosts:        []string{"front.shop", "front.shop.svc", "front.shop.svc.cluster.local", "10.96.0.20", "[fd00:96::20]"},
		ClaimedHosts: []string{"shop.example.com"},
		ClaimedAt:    created,
	}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, %v\nwant %+v", got, err, want)
	}
	svc.Annotations[kube.AnnotationHosts] = "web.payments"
	if got, err := toService(webKey, svc, nil, newPodDirectory(), "cluster.local"); err == nil || len(got.ClaimedHosts) != 0 {
		t.Errorf("a claim of a cluster-local name: %v, %v; want refused, nothing claimed", got.ClaimedHosts, err)
	}
}

func TestToServiceWithoutAnnotations(t *testing.T) {
	got, err := toService(webKey, podsService("shop", "web"), nil, newPodDirectory(), "cluster.local")
	if want := (activator.Service{Key: webKey}); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, %v; want %+v", got, err, want)
	}
}

// TestToServiceAllowedCallers: the allowed-callers annotation becomes the
// service's Callers, namespaces sorted, each once.
func TestToServiceAllowedCallers(t *testing.T) {
	for v, want := range map[string]activator.Callers{
		"":                             {},
		"*":                            {Any: true},
		" * ":                          {Any: true},
		"ingress-nginx":                {Namespaces: []string{"ingress-nginx"}},
		"monitoring, ingress-nginx ,a": {Namespaces: []string{"a", "ingress-nginx", "monitoring"}},
		"b,a,b":                        {Namespaces: []string{"a", "b"}},
	} {
		got, err := toService(webKey, podsService("shop", "web", kube.AnnotationAllowedCallers, v), nil, newPodDirectory(), "cluster.local")
		if err != nil || !reflect.DeepEqual(got.Callers, want) {
			t.Errorf("%s %q: callers %+v, %v; want %+v", kube.AnnotationAllowedCallers, v, got.Callers, err, want)
		}
	}
}

// TestToServiceBadAnnotations: an annotation that does not parse is
// reported, naming the key and the value, all of them at once, and read
// the safe way meanwhile: container concurrency 0, no other namespace
// admitted, no host for a name that is not a Service's.
func TestToServiceBadAnnotations(t *testing.T) {
	for _, tc := range []struct {
		key, value string
		problem    string
	}{
		{kube.AnnotationContainerConcurrency, "abc", "integer"},
		{kube.AnnotationContainerConcurrency, "-1", "integer"},
		{kube.AnnotationContainerConcurrency, "1.5", "integer"},
		{kube.AnnotationContainerConcurrency, "", "integer"},
		{kube.AnnotationAllowedCallers, "*,ingress", "cannot be listed"},
		{kube.AnnotationAllowedCallers, "a,,b", "entry 2 is empty"},
		{kube.AnnotationAllowedCallers, "Ingress", `"Ingress" is not a namespace name`},
		{kube.AnnotationAllowedCallers, "a b", `"a b" is not a namespace name`},
		{kube.AnnotationAllowedCallers, ",", "entry 1 is empty; entry 2 is empty"},
		{kube.AnnotationServices, "front,Back_end", `"Back_end", not a Service name`},
	} {
		svc := podsService("shop", "web", tc.key, tc.value, kube.AnnotationAllowedCallers+"x", "ignored")
		got, err := toService(webKey, svc, nil, newPodDirectory(), "cluster.local")
		var ae *autoscaling.Error
		if !errors.As(err, &ae) || ae.Key != tc.key || ae.Value != tc.value {
			t.Errorf("%s %q: error %v, want one naming the key and the value", tc.key, tc.value, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, tc.key) || !strings.Contains(msg, strconv.Quote(tc.value)) || !strings.Contains(msg, tc.problem) {
			t.Errorf("%s %q: %q, want it to name the key, the quoted value and %q", tc.key, tc.value, msg, tc.problem)
		}
		if got.ContainerConcurrency != 0 || got.Callers.Any || len(got.Callers.Namespaces) != 0 {
			t.Errorf("%s %q: read as %+v, want the safe reading", tc.key, tc.value, got)
		}
		if tc.key == kube.AnnotationServices && !reflect.DeepEqual(got.Hosts, kube.HostNames("front", "shop", "cluster.local")) {
			t.Errorf("%s %q: hosts %v, want front's only", tc.key, tc.value, got.Hosts)
		}
	}
	// Every problem at once.
	svc := podsService("shop", "web", kube.AnnotationContainerConcurrency, "x", kube.AnnotationAllowedCallers, "Y")
	_, err := toService(webKey, svc, nil, newPodDirectory(), "cluster.local")
	for _, want := range []string{kube.AnnotationContainerConcurrency, kube.AnnotationAllowedCallers} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("two bad annotations: %v, want both named (%s)", err, want)
		}
	}
}

// TestBadAnnotationsLoggedOnce: the source logs a pods-Service's bad
// annotations when they appear, naming the pods-Service and the problem,
// and not again on every rebuild of the service.
func TestBadAnnotationsLoggedOnce(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	web := podsService("shop", "web", kube.AnnotationAllowedCallers, "*,x")
	es := endpointSlice(web, "web-1", v4, kube.PortNameHTTP, 8012, endpoint("10.0.0.1", "web-a", false, false))
	src, client := startedWith(t, zap.New(core), web, es, pod("shop", "web-a", "10.0.0.1"), pod("shop", "web-b", "10.0.0.2"))
	es.Endpoints = append(es.Endpoints, endpoint("10.0.0.2", "web-b", false, false))
	if _, err := client.DiscoveryV1().EndpointSlices("shop").Update(bg, es, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, src, "listed the second pod", func(s []activator.Service) bool {
		sv, _ := find(s, "shop/web")
		return len(sv.Pods) == 2
	})
	entries := logs.All()
	if len(entries) != 1 {
		t.Fatalf("%d log entries, want 1: %v", len(entries), entries)
	}
	if f := entries[0].ContextMap(); f["service"] != "shop/"+kube.PodsServiceName("web") || !strings.Contains(fmt.Sprint(f["error"]), kube.AnnotationAllowedCallers) {
		t.Errorf("logged %v, want the pods-Service and the annotation's error", f)
	}
}

func TestPods(t *testing.T) {
	svc := podsService("shop", "web")
	for _, tc := range []struct {
		name   string
		slices []*discoveryv1.EndpointSlice
		want   []activator.Pod
	}{{
		name: "ready and not ready, sorted by name",
		slices: []*discoveryv1.EndpointSlice{endpointSlice(svc, "s1", v4, kube.PortNameHTTP, 8012,
			endpoint("10.0.0.2", "web-b", true, false),
			endpoint("10.0.0.1", "web-a", false, false))},
		want: []activator.Pod{{Name: "web-a", Addr: "10.0.0.1:8012"}, {Name: "web-b", Addr: "10.0.0.2:8012"}},
	}, {
		name: "terminating excluded, ready or not",
		slices: []*discoveryv1.EndpointSlice{endpointSlice(svc, "s1", v4, kube.PortNameHTTP, 8012,
			endpoint("10.0.0.1", "web-a", true, false),
			endpoint("10.0.0.2", "web-b", false, true),
			endpoint("10.0.0.3", "web-c", true, true))},
		want: []activator.Pod{{Name: "web-a", Addr: "10.0.0.1:8012"}},
	}, {
		name: "unset conditions mean not terminating",
		slices: []*discoveryv1.EndpointSlice{endpointSlice(svc, "s1", v4, kube.PortNameHTTP, 8012,
			discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}})},
		want: []activator.Pod{{Name: "10.0.0.1", Addr: "10.0.0.1:8012"}},
	}, {
		name: "an address in two slices is one pod",
		slices: []*discoveryv1.EndpointSlice{
			endpointSlice(svc, "s2", v4, kube.PortNameHTTP, 8012, endpoint("10.0.0.1", "web-a", true, false)),
			endpointSlice(svc, "s1", v4, kube.PortNameHTTP, 8012,
				endpoint("10.0.0.1", "web-a", false, false),
				endpoint("10.0.0.2", "", true, false)),
		},
		want: []activator.Pod{{Name: "10.0.0.2", Addr: "10.0.0.2:8012"}, {Name: "web-a", Addr: "10.0.0.1:8012"}},
	}, {
		name: "a terminating copy does not hide a live one",
		slices: []*discoveryv1.EndpointSlice{
			endpointSlice(svc, "s1", v4, kube.PortNameHTTP, 8012, endpoint("10.0.0.1", "web-a", false, true)),
			endpointSlice(svc, "s2", v4, kube.PortNameHTTP, 8012, endpoint("10.0.0.1", "web-a", true, false)),
		},
		want: []activator.Pod{{Name: "web-a", Addr: "10.0.0.1:8012"}},
	}, {
		name: "IPv6, and a dual-stack pod once by its IPv4 address",
		slices: []*discoveryv1.EndpointSlice{
			endpointSlice(svc, "a6", v6, kube.PortNameHTTP, 8012,
				endpoint("fd00::1", "web-a", true, false),
				endpoint("fd00::2", "web-b", true, false)),
			endpointSlice(svc, "z4", v4, kube.PortNameHTTP, 8012, endpoint("10.0.0.1", "web-a", true, false)),
		},
		want: []activator.Pod{{Name: "web-a", Addr: "10.0.0.1:8012"}, {Name: "web-b", Addr: "[fd00::2]:8012"}},
	}, {
		name: "slices without the http port or with FQDN addresses skipped",
		slices: []*discoveryv1.EndpointSlice{
			endpointSlice(svc, "s1", v4, kube.PortNameStats, 9090, endpoint("10.0.0.1", "web-a", true, false)),
			endpointSlice(svc, "s2", discoveryv1.AddressTypeFQDN, kube.PortNameHTTP, 8012, endpoint("web.example.com", "web-b", true, false)),
			endpointSlice(svc, "s3", v4, kube.PortNameHTTP, 8013, endpoint("10.0.0.3", "web-c", true, false)),
		},
		want: []activator.Pod{{Name: "web-c", Addr: "10.0.0.3:8013"}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			in := directory(pod("shop", "web-a", "10.0.0.1", "fd00::1"), pod("shop", "web-b", "10.0.0.2", "fd00::2"),
				pod("shop", "web-c", "10.0.0.3"))
			if got := pods(tc.slices, "shop", in); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestPodsOnlyOfTheNamespace: a slice in the service's namespace that
// lists an address of another namespace's pod, or one no pod holds, or
// references a pod that does not hold its address, lists no pod: the
// activator would carry the namespace's calls there (second security
// review, finding 1).
func TestPodsOnlyOfTheNamespace(t *testing.T) {
	svc := podsService("shop", "web")
	in := directory(pod("shop", "web-a", "10.0.0.1"), pod("bank", "vault-a", "10.0.9.1"),
		pod("shop", "web-b", "10.0.0.2"), pod("bank", "vault-b", "10.0.0.2"), // an address moving between namespaces
		pod("shop", "web-c", "10.0.0.3"), pod("shop", "web-d", "10.0.0.3")) // between two pods of one
	ref := func(ip string, r corev1.ObjectReference) discoveryv1.Endpoint {
		ep := endpoint(ip, "", true, false)
		ep.TargetRef = &r
		return ep
	}
	for _, tc := range []struct {
		name string
		ep   discoveryv1.Endpoint
		want []activator.Pod
	}{
		{"the namespace's pod", endpoint("10.0.0.1", "web-a", true, false), []activator.Pod{{Name: "web-a", Addr: "10.0.0.1:8012"}}},
		{"no reference", endpoint("10.0.0.1", "", true, false), []activator.Pod{{Name: "10.0.0.1", Addr: "10.0.0.1:8012"}}},
		{"another namespace's pod", endpoint("10.0.9.1", "web-a", true, false), nil},
		{"another namespace's pod, no reference", endpoint("10.0.9.1", "", true, false), nil},
		{"another namespace's pod by its own name", ref("10.0.9.1", corev1.ObjectReference{Kind: "Pod", Namespace: "bank", Name: "vault-a"}), nil},
		{"an address no pod holds", endpoint("10.0.0.99", "web-z", true, false), nil},
		{"a pod that does not hold the address", endpoint("10.0.0.1", "web-c", true, false), nil},
		{"an address two namespaces' pods hold", endpoint("10.0.0.2", "web-b", true, false), nil},
		{"an address two of the namespace's pods hold", endpoint("10.0.0.3", "web-d", true, false), []activator.Pod{{Name: "web-d", Addr: "10.0.0.3:8012"}}},
		{"a reference to something else", ref("10.0.0.1", corev1.ObjectReference{Kind: "Node", Name: "web-a"}), nil},
		{"a reference into another namespace", ref("10.0.0.1", corev1.ObjectReference{Kind: "Pod", Namespace: "bank", Name: "web-a"}), nil},
		{"an address that does not parse", endpoint("10.0.0.1.5", "", true, false), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			es := endpointSlice(svc, "s1", v4, kube.PortNameHTTP, 8012, tc.ep)
			if got := pods([]*discoveryv1.EndpointSlice{es}, "shop", in); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestReadyAddr(t *testing.T) {
	svc := podsService(kube.DefaultSystemNamespace, "x")
	svc.Name = kube.AutoscalerService
	ready := discoveryv1.Endpoint{Addresses: []string{"10.0.0.7"}} // nil ready means ready
	for _, tc := range []struct {
		name   string
		slices []*discoveryv1.EndpointSlice
		want   string
		ok     bool
	}{
		{"no slice", nil, "", false},
		{"not ready", []*discoveryv1.EndpointSlice{endpointSlice(svc, "a", v4, kube.PortNameHTTP, 8080,
			endpoint("10.0.0.5", "as-0", false, false))}, "", false},
		{"terminating", []*discoveryv1.EndpointSlice{endpointSlice(svc, "a", v4, kube.PortNameHTTP, 8080,
			endpoint("10.0.0.5", "as-0", true, true))}, "", false},
		{"no http port", []*discoveryv1.EndpointSlice{endpointSlice(svc, "a", v4, "metrics", 9090,
			endpoint("10.0.0.5", "as-0", true, false))}, "", false},
		{"the ready one", []*discoveryv1.EndpointSlice{endpointSlice(svc, "a", v4, kube.PortNameHTTP, 8080,
			endpoint("10.0.0.5", "as-0", false, false), endpoint("10.0.0.6", "as-1", true, false))}, "10.0.0.6:8080", true},
		{"unset conditions", []*discoveryv1.EndpointSlice{endpointSlice(svc, "a", v4, kube.PortNameHTTP, 8080, ready)}, "10.0.0.7:8080", true},
		{"IPv6", []*discoveryv1.EndpointSlice{endpointSlice(svc, "a", v6, kube.PortNameHTTP, 8080,
			endpoint("fd00::5", "as-0", true, false))}, "[fd00::5]:8080", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := readyAddr(tc.slices, kube.PortNameHTTP)
			if got != tc.want || ok != tc.ok {
				t.Errorf("got %q %v, want %q %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestLeaders(t *testing.T) {
	svc := podsService(kube.DefaultSystemNamespace, "x")
	svc.Name = kube.AutoscalerService
	// bucket is the slice bucket b of n's leader writes, at ip.
	bucket := func(b, n int, ip string) *discoveryv1.EndpointSlice {
		es := endpointSlice(svc, kube.BucketSliceName(b, n), v4, kube.PortNameHTTP, 8080, endpoint(ip, "as", true, false))
		es.Labels[kube.LabelBucket], es.Labels[kube.LabelBuckets] = strconv.Itoa(b), strconv.Itoa(n)
		return es
	}
	withLabels := func(es *discoveryv1.EndpointSlice, b, n string) *discoveryv1.EndpointSlice {
		es.Labels[kube.LabelBucket], es.Labels[kube.LabelBuckets] = b, n
		return es
	}
	single := endpointSlice(svc, kube.AutoscalerService, v4, kube.PortNameHTTP, 8080, endpoint("10.0.0.1", "as-0", true, false))
	for _, tc := range []struct {
		name   string
		slices []*discoveryv1.EndpointSlice
		want   []string
	}{
		{"no slice: one bucket, no leader", nil, []string{""}},
		{"one bucket", []*discoveryv1.EndpointSlice{single}, []string{"10.0.0.1:8080"}},
		{"three buckets, one without a leader", []*discoveryv1.EndpointSlice{bucket(0, 3, "10.0.0.2"), bucket(2, 3, "10.0.0.3")},
			[]string{"10.0.0.2:8080", "", "10.0.0.3:8080"}},
		{"the old single slice is ignored beside buckets", []*discoveryv1.EndpointSlice{single, bucket(0, 2, "10.0.0.2"), bucket(1, 2, "10.0.0.2")},
			[]string{"10.0.0.2:8080", "10.0.0.2:8080"}},
		{"the number most slices carry wins", []*discoveryv1.EndpointSlice{bucket(0, 2, "10.0.0.2"), bucket(1, 3, "10.0.0.4"), bucket(2, 3, "10.0.0.5")},
			[]string{"", "10.0.0.4:8080", "10.0.0.5:8080"}},
		{"bad labels are ignored", []*discoveryv1.EndpointSlice{
			withLabels(bucket(0, 2, "10.0.0.2"), "2", "2"),
			withLabels(bucket(0, 2, "10.0.0.3"), "-1", "2"),
			withLabels(bucket(0, 2, "10.0.0.4"), "0", "1000"),
			withLabels(bucket(0, 2, "10.0.0.5"), "zero", "2"),
			bucket(1, 2, "10.0.0.6"),
		}, []string{"", "10.0.0.6:8080"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := leaders(tc.slices, kube.PortNameHTTP); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
