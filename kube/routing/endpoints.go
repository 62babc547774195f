package routing

import (
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/swell-run/swell/autoscaler/plan"
	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/service"
)

// maxEndpoints is the most endpoints one EndpointSlice may hold.
const maxEndpoints = 1000

// The managed-by values of the EndpointSlices Kubernetes writes for a
// Service: from its selector, and mirrored from its Endpoints object.
const (
	sliceController          = "endpointslice-controller.k8s.io"
	sliceMirroringController = "endpointslicemirroring-controller.k8s.io"
)

// endpoint is one ready address a route slice lists.
type endpoint struct {
	ip        netip.Addr
	nodeName  *string
	targetRef *corev1.ObjectReference
}

// anyFamily asks readyEndpoints for the endpoints of both families.
const anyFamily discoveryv1.AddressType = ""

// readyEndpoints returns the ready endpoints of family (anyFamily: IPv4
// and IPv6) of slices that keep accepts (nil: all), each address once (the
// first slice by name that lists it wins), sorted by address.
func readyEndpoints(ss []*discoveryv1.EndpointSlice, family discoveryv1.AddressType, keep func(*discoveryv1.Endpoint) bool) []endpoint {
	ss = slices.Clone(ss)
	slices.SortFunc(ss, func(a, b *discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	seen := map[netip.Addr]bool{}
	var out []endpoint
	for _, s := range ss {
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 ||
			family != anyFamily && s.AddressType != family {
			continue
		}
		is4 := s.AddressType == discoveryv1.AddressTypeIPv4
		for _, e := range s.Endpoints {
			c := e.Conditions
			if (c.Ready != nil && !*c.Ready) || (c.Terminating != nil && *c.Terminating) || len(e.Addresses) == 0 || keep != nil && !keep(&e) {
				continue
			}
			ip, err := netip.ParseAddr(e.Addresses[0])
			if err != nil || ip.Is4() != is4 || ip.Is4In6() || ip.Zone() != "" || seen[ip] {
				continue
			}
			seen[ip] = true
			out = append(out, endpoint{ip: ip, nodeName: e.NodeName, targetRef: e.TargetRef})
		}
	}
	slices.SortFunc(out, func(a, b endpoint) int { return a.ip.Compare(b.ip) })
	return out
}

// The EndpointSlice informer's indexes: a Service's slices, and the route
// slices Swell writes for a Deployment, each by "namespace/name".
const (
	indexByService    = "swell.run/by-service"
	indexRouteSliceOf = "swell.run/route-slice-of"
)

// addSliceIndexers adds the indexes to inf, which must not have started
// (an index already there, from another Router on the same factory, is
// kept).
func addSliceIndexers(inf cache.SharedIndexInformer) error {
	have := inf.GetIndexer().GetIndexers()
	want := cache.Indexers{}
	if _, ok := have[indexByService]; !ok {
		want[indexByService] = func(obj any) ([]string, error) {
			es, ok := obj.(*discoveryv1.EndpointSlice)
			if !ok || es.Labels[discoveryv1.LabelServiceName] == "" {
				return nil, nil
			}
			return []string{es.Namespace + "/" + es.Labels[discoveryv1.LabelServiceName]}, nil
		}
	}
	if _, ok := have[indexRouteSliceOf]; !ok {
		want[indexRouteSliceOf] = func(obj any) ([]string, error) {
			es, ok := obj.(*discoveryv1.EndpointSlice)
			if !ok || es.Labels[discoveryv1.LabelManagedBy] != kube.EndpointSliceController || es.Labels[kube.LabelDeployment] == "" {
				return nil, nil
			}
			return []string{es.Namespace + "/" + es.Labels[kube.LabelDeployment]}, nil
		}
	}
	if len(want) == 0 {
		return nil
	}
	return inf.AddIndexers(want)
}

// indexed returns the slices of index under ns/name that keep accepts.
func (r *Router) indexed(index, ns, name string, keep func(*discoveryv1.EndpointSlice) bool) []*discoveryv1.EndpointSlice {
	objs, err := r.sliceIndex.ByIndex(index, ns+"/"+name)
	if err != nil {
		return nil
	}
	out := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		if es, ok := o.(*discoveryv1.EndpointSlice); ok && (keep == nil || keep(es)) {
			out = append(out, es)
		}
	}
	return out
}

// slicesOf returns the EndpointSlices of the Service ns/name.
func (r *Router) slicesOf(ns, name string) []*discoveryv1.EndpointSlice {
	return r.indexed(indexByService, ns, name, nil)
}

// podEndpoints returns D's ready pods, and whether Kubernetes has written
// any EndpointSlice for D's pods-Service yet.
//
// Only endpoints that reference a pod of D's namespace count, as
// Kubernetes writes them for the pods-Service's selector: a slice anyone
// in the namespace may write could otherwise name another namespace's
// pod, copied from its own slice. Whether a pod of the namespace holds
// the address is the activator's to check (it watches every pod, the
// autoscaler none); through the autoscaler, such an address reaches no
// further than the namespace's own Service without a selector would: the
// route slice keeps the caller's address, so the pod's NetworkPolicies
// still apply.
func (r *Router) podEndpoints(key service.Key) ([]endpoint, bool) {
	return r.podEndpointsOf(key, discoveryv1.AddressTypeIPv4)
}

// podEndpointsOf is podEndpoints of one address family.
func (r *Router) podEndpointsOf(key service.Key, family discoveryv1.AddressType) ([]endpoint, bool) {
	ss := r.slicesOf(key.Namespace, kube.PodsServiceName(key.Name))
	return readyEndpoints(ss, family, func(e *discoveryv1.Endpoint) bool {
		ref := e.TargetRef
		return ref != nil && ref.Kind == "Pod" && ref.Name != "" && (ref.Namespace == "" || ref.Namespace == key.Namespace)
	}), len(ss) > 0
}

// activator is where the activator is reached.
type activator struct {
	endpoints []endpoint
	port      int32
}

// activatorEndpoints returns the ready endpoints of the activator's
// Service on its port kube.PortNameHTTP, of family (anyFamily: both).
// Should its slices disagree on that port (a change being rolled out),
// the port most endpoints have wins, the lowest on a tie.
func (r *Router) activatorEndpoints(family discoveryv1.AddressType) activator {
	ss := r.slicesOf(r.sysNS, kube.ActivatorService)
	byPort := map[int32][]*discoveryv1.EndpointSlice{}
	for _, s := range ss {
		for _, p := range s.Ports {
			if p.Name != nil && *p.Name == kube.PortNameHTTP && p.Port != nil {
				byPort[*p.Port] = append(byPort[*p.Port], s)
				break
			}
		}
	}
	var best activator
	for _, port := range slices.Sorted(maps.Keys(byPort)) {
		eps := readyEndpoints(byPort[port], family, nil)
		if len(eps) > len(best.endpoints) {
			best = activator{endpoints: eps, port: port}
		}
	}
	for i := range best.endpoints {
		// The activator's pods live in another namespace than the
		// routed Service: no reference to them.
		best.endpoints[i].targetRef = nil
	}
	return best
}

// choice is what a route slice is to list.
type choice struct {
	route     string
	endpoints []endpoint
	port      int32
}

// choose applies NEVER EMPTY: the route asked for when it has a ready
// endpoint, else the other one when that has; ok is false when neither
// has.
func choose(want plan.Route, pods []endpoint, act activator) (choice, bool) {
	podsRoute := choice{route: kube.RoutePods, endpoints: pods, port: network.DefaultQueueServingPort}
	actRoute := choice{route: kube.RouteActivator, endpoints: act.endpoints, port: act.port}
	order := []choice{podsRoute, actRoute}
	if want == plan.RouteActivator {
		order = []choice{actRoute, podsRoute}
	}
	for _, c := range order {
		if len(c.endpoints) > 0 && c.port != 0 {
			return c, true
		}
	}
	return choice{}, false
}

// routeSlicesOf returns Swell's route EndpointSlices of the Service ns/name.
func (r *Router) routeSlicesOf(ns, name string) []*discoveryv1.EndpointSlice {
	return r.indexed(indexByService, ns, name, func(es *discoveryv1.EndpointSlice) bool {
		return es.Labels[discoveryv1.LabelManagedBy] == kube.EndpointSliceController
	})
}

// activatorRoutes returns, in every namespace, the route EndpointSlices
// listing the activator.
func (r *Router) activatorRoutes() []*discoveryv1.EndpointSlice {
	ss, err := r.slices.List(labels.SelectorFromSet(labels.Set{
		discoveryv1.LabelManagedBy: kube.EndpointSliceController,
		kube.LabelRoute:            kube.RouteActivator,
	}))
	if err != nil {
		return nil
	}
	return ss
}

// routeSlicesFor returns the route EndpointSlices of D's Services.
func (r *Router) routeSlicesFor(key service.Key) []*discoveryv1.EndpointSlice {
	return r.indexed(indexRouteSliceOf, key.Namespace, key.Name, nil)
}

// cachedRoute is the route D's route slices list, as the cache has them:
// the activator if any lists it; ok is false when D has none.
func (r *Router) cachedRoute(key service.Key) (route plan.Route, ok bool) {
	for _, s := range r.routeSlicesFor(key) {
		switch s.Labels[kube.LabelRoute] {
		case kube.RouteActivator:
			return plan.RouteActivator, true
		case kube.RoutePods:
			route, ok = plan.RoutePods, true
		}
	}
	return route, ok
}
