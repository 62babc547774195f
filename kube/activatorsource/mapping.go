package activatorsource

import (
	"cmp"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/swell-run/swell/activator"
	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/pkg/autoscaling"
	"github.com/swell-run/swell/pkg/service"
	"github.com/swell-run/swell/pkg/shard"
)

// toService is the activator's view of the Deployment served by the
// pods-Service svc, whose EndpointSlices are eps: the host names of the
// Services Swell routes to it, its container concurrency, who may call it
// (besides its own namespace), and every pod that is not terminating,
// ready or not (the activator probes each before sending it traffic).
//
// An annotation that does not parse comes back as an *autoscaling.Error
// naming the key and the value (all of them, joined), and is read the safe
// way meanwhile: a bad container concurrency as 0 (unbounded: the
// queue-proxy enforces the limit), bad allowed callers as none but the
// Deployment's own namespace, a name in the services list that is not a
// Service's as no host.
//
// A pod is taken only where the cluster's pods say it is one of the
// namespace's (in): an EndpointSlice is anyone's to write who may write
// them in the namespace, and one naming another namespace's pod would
// have the activator carry the namespace's calls to it.
func toService(key service.Key, svc *corev1.Service, eps []*discoveryv1.EndpointSlice, in podHolder, domain string) (activator.Service, error) {
	sv := activator.Service{Key: key}
	var errs []error
	if v, ok := svc.Annotations[kube.AnnotationServices]; ok {
		var bad []string
		for name := range strings.SplitSeq(v, ",") {
			switch name = strings.TrimSpace(name); {
			case name == "":
			case len(validation.IsDNS1035Label(name)) > 0:
				bad = append(bad, strconv.Quote(name))
			default:
				sv.Hosts = append(sv.Hosts, kube.HostNames(name, svc.Namespace, domain)...)
			}
		}
		if len(bad) > 0 {
			errs = append(errs, &autoscaling.Error{Key: kube.AnnotationServices, Name: kube.AnnotationServices, Value: v,
				Problem: "lists " + strings.Join(bad, ", ") + ", not a Service name", Accepted: "Service names separated by commas"})
		}
	}
	if v, ok := svc.Annotations[kube.AnnotationContainerConcurrency]; ok {
		cc, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || cc < 0 {
			errs = append(errs, &autoscaling.Error{Key: kube.AnnotationContainerConcurrency, Name: kube.AnnotationContainerConcurrency, Value: v,
				Problem: "is not an integer ≥ 0", Accepted: "an integer ≥ 0 (0: unbounded); the activator reads it as 0"})
			cc = 0
		}
		sv.ContainerConcurrency = cc
	}
	if v, ok := svc.Annotations[kube.AnnotationAllowedCallers]; ok {
		c, err := kube.ParseAllowedCallers(v)
		if err != nil {
			errs = append(errs, err)
		}
		sv.Callers = activator.Callers{Any: c.Any, Namespaces: c.Namespaces}
	}
	if v, ok := svc.Annotations[kube.AnnotationClusterIPs]; ok {
		ips, err := kube.ParseClusterIPs(v)
		if err != nil {
			errs = append(errs, err)
		}
		sv.Hosts = append(sv.Hosts, ips...)
	}
	if v, ok := svc.Annotations[kube.AnnotationHosts]; ok {
		hosts, err := kube.ParseHosts(v)
		if err != nil {
			errs = append(errs, err)
		}
		sv.ClaimedHosts, sv.ClaimedAt = hosts, svc.CreationTimestamp.Time
	}
	sv.Pods = pods(eps, svc.Namespace, in)
	return sv, errors.Join(errs...)
}

// podHolder tells whether an address is held by a pod of a namespace
// (podDirectory.holds).
type podHolder interface {
	holds(ip netip.Addr, ns, name string) bool
}

// pods lists the endpoints of eps that are not terminating, on the port
// named kube.PortNameHTTP, sorted by name. An address listed in two slices
// (while Kubernetes moves endpoints between them) is one pod, and so is a
// pod listed under both of its addresses (dual stack): the IPv4 one is kept.
//
// An endpoint counts only if in holds its address as a pod of namespace
// ns, and of no other, and, when it references a pod, as that pod: labels
// and owners can be written by anyone who writes the slice, but not which
// pod holds which address. An endpoint of a pod the pods informer has not
// seen yet is left out until it has.
func pods(eps []*discoveryv1.EndpointSlice, ns string, in podHolder) []activator.Pod {
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
			addr, err := netip.ParseAddr(ip)
			if err != nil {
				continue
			}
			name, ref := ip, ""
			if r := ep.TargetRef; r != nil {
				if r.Kind != "" && r.Kind != "Pod" || r.Namespace != "" && r.Namespace != ns {
					continue
				}
				if r.Name != "" {
					name, ref = r.Name, r.Name
				}
			}
			if seenIP[ip] || seenName[name] || !in.holds(addr, ns, ref) {
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

// leaders is the address of each bucket's leader among the autoscaler's
// slices eps (AutoscalerLeaders). The number of buckets is the one most
// slices carry (the larger on a tie): while the autoscaler changes its
// number of buckets, the old slices are ignored until they are deleted.
// Without a slice that names its bucket, there is one bucket, led by the
// first ready endpoint of any slice.
func leaders(eps []*discoveryv1.EndpointSlice, portName string) []string {
	byN := map[int][]*discoveryv1.EndpointSlice{}
	n := 0
	for _, es := range eps {
		b, errB := strconv.Atoi(es.Labels[kube.LabelBucket])
		bn, errN := strconv.Atoi(es.Labels[kube.LabelBuckets])
		if errB != nil || errN != nil || shard.Check(bn) != nil || b < 0 || b >= bn {
			continue
		}
		byN[bn] = append(byN[bn], es)
		if len(byN[bn]) > len(byN[n]) || len(byN[bn]) == len(byN[n]) && bn > n {
			n = bn
		}
	}
	if n == 0 {
		addr, _ := readyAddr(eps, portName)
		return []string{addr}
	}
	out := make([]string, n)
	perBucket := make([][]*discoveryv1.EndpointSlice, n)
	for _, es := range byN[n] {
		b, _ := strconv.Atoi(es.Labels[kube.LabelBucket])
		perBucket[b] = append(perBucket[b], es)
	}
	for b, ss := range perBucket {
		out[b], _ = readyAddr(ss, portName)
	}
	return out
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
	return a.Key == b.Key && a.Port == b.Port && a.ContainerConcurrency == b.ContainerConcurrency &&
		slices.Equal(a.Hosts, b.Hosts) && slices.Equal(a.Pods, b.Pods) &&
		slices.Equal(a.ClaimedHosts, b.ClaimedHosts) && a.ClaimedAt.Equal(b.ClaimedAt) &&
		a.Callers.Any == b.Callers.Any && slices.Equal(a.Callers.Namespaces, b.Callers.Namespaces)
}
