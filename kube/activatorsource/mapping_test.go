package activatorsource

import (
	"reflect"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/swell-run/swell/activator"
	"github.com/swell-run/swell/kube"
)

const (
	v4 = discoveryv1.AddressTypeIPv4
	v6 = discoveryv1.AddressTypeIPv6
)

func TestToServiceHostsAndConcurrency(t *testing.T) {
	svc := podsService("shop", "web",
		kube.AnnotationServices, "cart, ,front,",
		kube.AnnotationContainerConcurrency, "4")
	got := toService(webKey, svc, nil, "corp.internal", zap.NewNop())
	want := activator.Service{
		Key: webKey,
		Hosts: []string{
			"cart.shop", "cart.shop.svc", "cart.shop.svc.corp.internal",
			"front.shop", "front.shop.svc", "front.shop.svc.corp.internal",
		},
		ContainerConcurrency: 4,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

func TestToServiceWithoutAnnotations(t *testing.T) {
	got := toService(webKey, podsService("shop", "web"), nil, "cluster.local", zap.NewNop())
	if want := (activator.Service{Key: webKey}); !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestBadContainerConcurrencyIsZeroAndLogged(t *testing.T) {
	for _, v := range []string{"abc", "-1", "1.5", ""} {
		core, logs := observer.New(zapcore.WarnLevel)
		svc := podsService("shop", "web", kube.AnnotationContainerConcurrency, v)
		got := toService(webKey, svc, nil, "cluster.local", zap.New(core))
		if got.ContainerConcurrency != 0 {
			t.Errorf("%q: container concurrency %d, want 0", v, got.ContainerConcurrency)
		}
		entries := logs.All()
		if len(entries) != 1 {
			t.Fatalf("%q: %d warnings, want 1", v, len(entries))
		}
		fields := entries[0].ContextMap()
		if fields["service"] != "shop/"+kube.PodsServiceName("web") || fields["value"] != v {
			t.Errorf("%q: warning fields %v, want the service and the value", v, fields)
		}
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
			if got := pods(tc.slices); !reflect.DeepEqual(got, tc.want) {
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
