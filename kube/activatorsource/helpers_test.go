package activatorsource

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/swell-run/swell/activator"
	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/pkg/service"
)

// testTimeout bounds every wait on the informers; reaching it is a failure.
const testTimeout = 10 * time.Second

// podsService is the pods-Service of Deployment d as the autoscaler writes
// it; annotations are alternating keys and values.
func podsService(ns, d string, annotations ...string) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: kube.PodsServiceName(d),
			Labels:      map[string]string{kube.LabelDeployment: d, kube.LabelManagedBy: kube.ManagedBy},
			Annotations: map[string]string{},
		},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone},
	}
	for i := 0; i+1 < len(annotations); i += 2 {
		svc.Annotations[annotations[i]] = annotations[i+1]
	}
	return svc
}

// endpointSlice is a slice of the Service svc as Kubernetes' EndpointSlice
// controller writes it: the Service's labels copied, its name, and one port
// named portName.
func endpointSlice(svc *corev1.Service, name string, family discoveryv1.AddressType, portName string, port int32, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	labels := map[string]string{discoveryv1.LabelServiceName: svc.Name}
	for k, v := range svc.Labels {
		labels[k] = v
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: svc.Namespace, Name: name, Labels: labels},
		AddressType: family,
		Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &port}},
		Endpoints:   eps,
	}
}

// endpoint is a pod's endpoint; pod "" leaves targetRef out.
func endpoint(ip, pod string, ready, terminating bool) discoveryv1.Endpoint {
	ep := discoveryv1.Endpoint{
		Addresses:  []string{ip},
		Conditions: discoveryv1.EndpointConditions{Ready: &ready, Terminating: &terminating},
	}
	if pod != "" {
		ep.TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: pod}
	}
	return ep
}

// started runs a Source over a fake cluster holding objs and waits for its
// first sync.
func started(t *testing.T, objs ...runtime.Object) (*Source, *fake.Clientset) {
	t.Helper()
	return startedWith(t, nil, objs...)
}

// startedWith is started with the Source logging to log.
func startedWith(t *testing.T, log *zap.Logger, objs ...runtime.Object) (*Source, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset(objs...)
	src, err := New(Config{Client: client, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { src.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	sctx, scancel := context.WithTimeout(ctx, testTimeout)
	defer scancel()
	if !src.WaitForSync(sctx) {
		t.Fatal("the source never synced")
	}
	return src, client
}

// waitUntil waits, on the source's Changed signal, until cond holds for
// its services.
func waitUntil(t *testing.T, src *Source, what string, cond func([]activator.Service) bool) {
	t.Helper()
	timeout := time.After(testTimeout)
	for !cond(src.Services()) {
		select {
		case <-src.Changed():
		case <-timeout:
			t.Fatalf("never %s; services: %+v", what, src.Services())
		}
	}
}

// webKey is the service of Deployment web in namespace shop.
var webKey = service.Key{Namespace: "shop", Name: "web"}

// find returns the service whose key reads key.
func find(svcs []activator.Service, key string) (activator.Service, bool) {
	for _, s := range svcs {
		if s.Key.String() == key {
			return s, true
		}
	}
	return activator.Service{}, false
}

// directory is a pod directory holding pods.
func directory(pods ...*corev1.Pod) *podDirectory {
	d := newPodDirectory()
	for _, p := range pods {
		ref, _ := podTransform(p)
		d.set(ref, nil, ref)
	}
	return d
}
