package routing

import (
	"fmt"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/swell-run/swell/autoscaler/plan"
	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/pkg/service"
)

// BenchmarkTickLookups is what the executor asks the Router of one service
// at every tick (its route in effect and its ready pods), with 10 and
// 1,000 services in the namespace: it must not grow with them (with a
// label scan it took most of a core at 1,000 on the test cluster).
func BenchmarkTickLookups(b *testing.B) {
	for _, n := range []int{10, 1000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			var objs []runtime.Object
			for i := range n {
				name := fmt.Sprintf("s%04d", i)
				objs = append(objs, podsSliceOf(name), routeSliceOf(name))
			}
			client := fake.NewClientset(objs...)
			factory := informers.NewSharedInformerFactory(client, 0)
			r, err := New(Config{Client: client, Informers: factory, SystemNamespace: sysNS})
			if err != nil {
				b.Fatal(err)
			}
			factory.Start(b.Context().Done())
			factory.WaitForCacheSync(b.Context().Done())
			b.Cleanup(func() { factory.Shutdown(); r.queue.ShutDown() })
			key := service.Key{Namespace: ns, Name: "s0007"}
			if eff, _ := r.Route(key); eff != plan.RouteActivator || len(r.ReadyPods(key)) != 1 {
				b.Fatalf("route %v, pods %v", eff, r.ReadyPods(key))
			}
			b.ReportAllocs()
			for b.Loop() {
				r.Route(key)
				r.ReadyPods(key)
			}
		})
	}
}

func podsSliceOf(d string) *discoveryv1.EndpointSlice {
	return slice(ns, d+"-pods", kube.PodsServiceName(d), sliceController, 8012, ep{ip: "10.1.0.1", pod: d + "-a", ready: true})
}

func routeSliceOf(d string) *discoveryv1.EndpointSlice {
	s := slice(ns, d+"-swell", d, kube.EndpointSliceController, 8012, ep{ip: "10.2.0.1", ready: true})
	s.Labels[kube.LabelDeployment] = d
	s.Labels[kube.LabelRoute] = kube.RouteActivator
	return s
}
