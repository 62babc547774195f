package activatorsource

import (
	"cmp"
	"net"
	"slices"
	"strconv"
	"strings"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"

	"github.com/swell-run/swell/activator"
	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/pkg/service"
)

// toService is the activator's view of the Deployment served by the
// pods-Service svc, whose EndpointSlices are eps: the host names of the
// Services Swell routes to it, its container concurrency, and every pod that
// is not terminating, ready or not (the activator probes each before sending
// it traffic). A bad container-concurrency annotation is logged and read as
// 0 (unbounded): the pods still serve, the queue-proxy enforces the limit.
func toService(key service.Key, svc *corev1.Service, eps []*discoveryv1.EndpointSlice, domain string, log *zap.Logger) activator.Service {
	sv := activator.Service{Key: key}
	for name := range strings.SplitSeq(svc.Annotations[kube.AnnotationServices], ",") {
		if name = strings.TrimSpace(name); name != "" {
			sv.Hosts = append(sv.Hosts, kube.HostNames(name, svc.Namespace, domain)...)
		}
	}
	if v, ok := svc.Annotations[kube.AnnotationContainerConcurrency]; ok {
		cc, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || cc < 0 {
			log.Warn("invalid container concurrency on a pods-Service; using 0 (unbounded): want an integer ≥ 0",
				zap.String("service", svc.Namespace+"/"+svc.Name), zap.String("annotation", kube.AnnotationContainerConcurrency),
				zap.String("value", v))
			cc = 0
		}
		sv.ContainerConcurrency = cc
	}
	sv.Pods = pods(eps)
	return sv
}

// pods lists the endpoints of eps that are not terminating, on the port
// named kube.PortNameHTTP, sorted by name. An address listed in two slices
// (while Kubernetes moves endpoints between them) is one pod, and so is a
// pod listed under both of its addresses (dual stack): the IPv4 one is kept.
func pods(eps []*discoveryv1.EndpointSlice) []activator.Pod {
	eps = slices.Clone(eps)
	// IPv4 before IPv6, then by name: which duplicate is kept does not
	// depend on the informer's order.
	slices.SortFunc(eps, func(a, b *discoveryv1.EndpointSlice) int {
		return cmp.Or(cmp.Compare(a.AddressType, b.AddressType), cmp.Compare(a.Name, b.Name))
	})
	var out []activator.Pod
	seenIP, seenName := map[string]bool{}, map[string]bool{}
	for _, es := range eps {
		if es.AddressType != discoveryv1.AddressTypeIPv4 && es.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		port, ok := portNamed(es, kube.PortNameHTTP)
		if !ok {
			continue
		}
		for _, ep := range es.Endpoints {
			if len(ep.Addresses) == 0 || ptr.Deref(ep.Conditions.Terminating, false) {
				continue
			}
			// Every address of an endpoint reaches the same pod; the
			// API lets consumers use the first.
			ip := ep.Addresses[0]
			name := ip
			if ep.TargetRef != nil && ep.TargetRef.Name != "" {
				name = ep.TargetRef.Name
			}
			if seenIP[ip] || seenName[name] {
				continue
			}
			seenIP[ip], seenName[name] = true, true
			out = append(out, activator.Pod{Name: name, Addr: net.JoinHostPort(ip, port)})
		}
	}
	slices.SortFunc(out, func(a, b activator.Pod) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// readyAddr is the address of the first ready endpoint of eps on the port
// named portName, in slice name order.
func readyAddr(eps []*discoveryv1.EndpointSlice, portName string) (string, bool) {
	eps = slices.Clone(eps)
	slices.SortFunc(eps, func(a, b *discoveryv1.EndpointSlice) int { return cmp.Compare(a.Name, b.Name) })
	for _, es := range eps {
		if es.AddressType != discoveryv1.AddressTypeIPv4 && es.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		port, ok := portNamed(es, portName)
		if !ok {
			continue
		}
		for _, ep := range es.Endpoints {
			// A nil ready condition means ready (the API's rule).
			if len(ep.Addresses) == 0 || !ptr.Deref(ep.Conditions.Ready, true) || ptr.Deref(ep.Conditions.Terminating, false) {
				continue
			}
			return net.JoinHostPort(ep.Addresses[0], port), true
		}
	}
	return "", false
}

// portNamed returns the number of es's port called name.
func portNamed(es *discoveryv1.EndpointSlice, name string) (string, bool) {
	for _, p := range es.Ports {
		if p.Name != nil && *p.Name == name && p.Port != nil {
			return strconv.Itoa(int(*p.Port)), true
		}
	}
	return "", false
}

// equal reports whether a and b would route the same.
func equal(a, b activator.Service) bool {
	return a.Key == b.Key && a.ContainerConcurrency == b.ContainerConcurrency &&
		slices.Equal(a.Hosts, b.Hosts) && slices.Equal(a.Pods, b.Pods)
}
