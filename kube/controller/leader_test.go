package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/pkg/network"
)

func TestPublishLeader(t *testing.T) {
	ctx := t.Context()
	cs := fake.NewClientset()
	if err := PublishLeader(ctx, cs, testSystem, "autoscaler-0", "10.0.0.5", LeaderPorts{Reports: 8080, Push: 8081}); err != nil {
		t.Fatal(err)
	}

	svc, err := cs.CoreV1().Services(testSystem).Get(ctx, kube.AutoscalerService, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.Selector != nil {
		t.Errorf("Service selector %v, want none", svc.Spec.Selector)
	}
	if p := svc.Spec.Ports; len(p) != 2 || p[0].Name != kube.PortNameHTTP || p[0].Port != network.DefaultAutoscalerPort ||
		p[1].Name != kube.PortNamePush || p[1].Port != network.DefaultAutoscalerPushPort {
		t.Errorf("Service ports %+v, want %s %d and %s %d", p, kube.PortNameHTTP, network.DefaultAutoscalerPort,
			kube.PortNamePush, network.DefaultAutoscalerPushPort)
	}

	check := func(ip, pod string) {
		t.Helper()
		s, err := cs.DiscoveryV1().EndpointSlices(testSystem).Get(ctx, kube.AutoscalerService, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if s.Labels[discoveryv1.LabelServiceName] != kube.AutoscalerService ||
			s.Labels[discoveryv1.LabelManagedBy] != kube.EndpointSliceController {
			t.Errorf("slice labels %v", s.Labels)
		}
		if s.AddressType != discoveryv1.AddressTypeIPv4 {
			t.Errorf("address type %s", s.AddressType)
		}
		if len(s.Endpoints) != 1 {
			t.Fatalf("endpoints %+v, want 1", s.Endpoints)
		}
		e := s.Endpoints[0]
		if len(e.Addresses) != 1 || e.Addresses[0] != ip || e.TargetRef == nil || e.TargetRef.Kind != "Pod" ||
			e.TargetRef.Name != pod || e.Conditions.Ready == nil || !*e.Conditions.Ready {
			t.Errorf("endpoint %+v (target %+v), want %s of pod %s, ready", e, e.TargetRef, ip, pod)
		}
		if len(s.Ports) != 2 || *s.Ports[0].Name != kube.PortNameHTTP || *s.Ports[0].Port != 8080 ||
			*s.Ports[0].Protocol != corev1.ProtocolTCP || *s.Ports[1].Name != kube.PortNamePush || *s.Ports[1].Port != 8081 {
			t.Errorf("ports %+v, want http 8080 and push 8081", s.Ports)
		}
	}
	check("10.0.0.5", "autoscaler-0")

	// The same leader again: nothing written.
	cs.ClearActions()
	if err := PublishLeader(ctx, cs, testSystem, "autoscaler-0", "10.0.0.5", LeaderPorts{Reports: 8080, Push: 8081}); err != nil {
		t.Fatal(err)
	}
	if w := writes(cs); len(w) != 0 {
		t.Errorf("republishing wrote %v", w)
	}

	// A new leader: the slice is updated, the Service left alone.
	cs.ClearActions()
	if err := PublishLeader(ctx, cs, testSystem, "autoscaler-1", "10.0.0.6", LeaderPorts{Reports: 8080, Push: 8081}); err != nil {
		t.Fatal(err)
	}
	w := writes(cs)
	if len(w) != 1 || w[0].GetVerb() != "update" || w[0].GetResource().Resource != "endpointslices" {
		t.Errorf("writes %v, want one update of the slice", w)
	}
	check("10.0.0.6", "autoscaler-1")
}

func TestPublishLeaderKeepsAnExistingService(t *testing.T) {
	ctx := t.Context()
	existing := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: kube.AutoscalerService, Namespace: testSystem, UID: "svc-uid"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: kube.PortNameHTTP, Port: 8080}}},
	}
	cs := fake.NewClientset(existing)
	if err := PublishLeader(ctx, cs, testSystem, "autoscaler-0", "fd00::5", LeaderPorts{Reports: 9000}); err != nil {
		t.Fatal(err)
	}
	for _, a := range writes(cs) {
		if a.GetResource().Resource == "services" {
			t.Errorf("an existing Service was written: %v", a)
		}
	}
	s, err := cs.DiscoveryV1().EndpointSlices(testSystem).Get(ctx, kube.AutoscalerService, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.AddressType != discoveryv1.AddressTypeIPv6 || s.Endpoints[0].Addresses[0] != "fd00::5" {
		t.Errorf("slice %s %v, want IPv6 fd00::5", s.AddressType, s.Endpoints[0].Addresses)
	}
	if o := s.OwnerReferences; len(o) != 1 || o[0].UID != "svc-uid" || o[0].Kind != "Service" {
		t.Errorf("owner references %+v, want the Service", o)
	}

	// The pod moved to IPv4: the slice's immutable address type changes
	// by recreating it.
	if err := PublishLeader(ctx, cs, testSystem, "autoscaler-0", "10.0.0.5", LeaderPorts{Reports: 9000}); err != nil {
		t.Fatal(err)
	}
	s, err = cs.DiscoveryV1().EndpointSlices(testSystem).Get(ctx, kube.AutoscalerService, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.AddressType != discoveryv1.AddressTypeIPv4 || s.Endpoints[0].Addresses[0] != "10.0.0.5" {
		t.Errorf("slice %s %v, want IPv4 10.0.0.5", s.AddressType, s.Endpoints[0].Addresses)
	}
}

func TestPublishLeaderRejectsBadInput(t *testing.T) {
	cs := fake.NewClientset()
	for name, args := range map[string]struct {
		ns, pod, ip string
		port        int
	}{
		"no namespace": {"", "p", "10.0.0.1", 8080},
		"no pod":       {testSystem, "", "10.0.0.1", 8080},
		"bad ip":       {testSystem, "p", "10.0.0", 8080},
		"bad port":     {testSystem, "p", "10.0.0.1", 0},
	} {
		if err := PublishLeader(t.Context(), cs, args.ns, args.pod, args.ip, LeaderPorts{Reports: args.port}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if w := writes(cs); len(w) != 0 {
		t.Errorf("bad input wrote %v", w)
	}
}

func TestPublishBucketLeader(t *testing.T) {
	ctx := t.Context()
	cs := fake.NewClientset()
	if err := PublishLeader(ctx, cs, testSystem, "autoscaler-0", "10.0.0.5", LeaderPorts{Reports: 8080}); err != nil {
		t.Fatal(err)
	}
	// Sharded into three buckets: bucket 1's leader has its own slice,
	// labelled, and the single leader's slice goes.
	if err := PublishBucketLeader(ctx, cs, testSystem, "autoscaler-1", "10.0.0.6", LeaderPorts{Reports: 8080}, 1, 3); err != nil {
		t.Fatal(err)
	}
	names := func() map[string]map[string]string {
		list, err := cs.DiscoveryV1().EndpointSlices(testSystem).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]map[string]string{}
		for _, es := range list.Items {
			out[es.Name] = es.Labels
		}
		return out
	}
	got := names()
	l, ok := got["autoscaler-1-of-3"]
	if len(got) != 1 || !ok || l[kube.LabelBucket] != "1" || l[kube.LabelBuckets] != "3" {
		t.Fatalf("slices after bucket 1 of 3 was published: %v", got)
	}
	if err := PublishBucketLeader(ctx, cs, testSystem, "autoscaler-0", "10.0.0.5", LeaderPorts{Reports: 8080}, 0, 3); err != nil {
		t.Fatal(err)
	}
	if got := names(); len(got) != 2 {
		t.Fatalf("slices after buckets 0 and 1 of 3: %v", got)
	}
	// Back to one leader: the buckets' slices go.
	if err := PublishLeader(ctx, cs, testSystem, "autoscaler-0", "10.0.0.5", LeaderPorts{Reports: 8080}); err != nil {
		t.Fatal(err)
	}
	if got := names(); len(got) != 1 || got[kube.AutoscalerService] == nil {
		t.Fatalf("slices after a single leader published itself again: %v", got)
	}
	for _, bad := range [][2]int{{3, 3}, {-1, 3}} {
		if err := PublishBucketLeader(ctx, cs, testSystem, "autoscaler-0", "10.0.0.5", LeaderPorts{Reports: 8080}, bad[0], bad[1]); err == nil {
			t.Errorf("bucket %d of %d published", bad[0], bad[1])
		}
	}
}
