package activatorsource

import (
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
)

// podDirectory is the namespace and labels of every pod of the cluster,
// by its addresses, kept from a pod informer: who a caller is
// (callerJudge).
//
// An address counts only while the pods that hold it are all of one
// namespace: while Kubernetes hands a freed address to a new pod, both may
// be listed, and the address then belongs to no namespace until the old
// one goes. A pod on its node's network is left out (podTransform): its
// address is the node's, not a namespace's.
type podDirectory struct {
	// byIP maps each address held by pods of one namespace to it. Read on
	// every request without a lock, and without allocating.
	byIP sync.Map // netip.Addr → string

	// mu serialises writers (the informer's handler).
	mu sync.Mutex
	// owners lists every address's pods.
	owners map[netip.Addr][]owner

	// changed, if set, is called after each change of an address's pods
	// or of their labels (outside mu): what callers are judged by.
	changed func()
	// moved, if set, is told the addresses whose pods changed, after
	// the change (outside mu).
	moved func([]netip.Addr)
}

// owner is a pod holding an address.
type owner struct {
	namespace, name string
	labels          podLabels
}

// is reports whether o is the pod namespace/name.
func (o owner) is(namespace, name string) bool { return o.namespace == namespace && o.name == name }

func newPodDirectory() *podDirectory {
	return &podDirectory{owners: map[netip.Addr][]owner{}}
}

// Namespace is the namespace of the pods holding ip, if they are all of
// one (activator.CallerDirectory).
func (d *podDirectory) Namespace(ip netip.Addr) (string, bool) {
	v, ok := d.byIP.Load(ip)
	if !ok {
		return "", false
	}
	return v.(string), true
}

// holds reports whether the address ip is a pod's of namespace ns, and of
// no other namespace's, and, unless name is "", whether one of those pods
// is called name: whether an endpoint at ip that names the pod name (or
// none) may be taken as a pod of a service of ns.
func (d *podDirectory) holds(ip netip.Addr, ns, name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	owners := d.owners[ip.Unmap()]
	named := name == ""
	for _, o := range owners {
		if o.namespace != ns {
			return false
		}
		named = named || o.name == name
	}
	return len(owners) > 0 && named
}

// at lists the pods holding ip.
func (d *podDirectory) at(ip netip.Addr) []owner {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.owners[ip.Unmap()])
}

// handler is the pod informer's event handler.
func (d *podDirectory) handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { d.set(obj, nil, obj) },
		UpdateFunc: func(old, obj any) { d.set(obj, old, obj) },
		DeleteFunc: func(obj any) { d.set(obj, obj, nil) },
	}
}

// set moves the pod which from the addresses of old to those of now
// (either may be nil), with now's labels.
func (d *podDirectory) set(which, old, now any) {
	p, ok := unwrap(which).(*podRef)
	if !ok {
		return
	}
	var labels podLabels
	if n, ok := unwrap(now).(*podRef); ok {
		labels = n.PodLabels
	}
	me := owner{p.Namespace, p.Name, labels}
	mine := func(o owner) bool { return o.is(me.namespace, me.name) }
	was, is := addrsOf(old), addrsOf(now)
	relabelled := false
	var moved []netip.Addr
	d.mu.Lock()
	for _, ip := range was {
		if slices.Contains(is, ip) {
			continue
		}
		owners := slices.DeleteFunc(d.owners[ip], mine)
		if len(owners) == 0 {
			delete(d.owners, ip)
		} else {
			d.owners[ip] = owners
		}
		d.resolveLocked(ip)
		moved = append(moved, ip)
	}
	for _, ip := range is {
		owners := d.owners[ip]
		switch i := slices.IndexFunc(owners, mine); {
		case i < 0:
			d.owners[ip] = append(owners, me)
			d.resolveLocked(ip)
			moved = append(moved, ip)
		case owners[i].labels != labels:
			owners[i].labels = labels
			relabelled = true
		}
	}
	d.mu.Unlock()
	if len(moved) > 0 && d.moved != nil {
		d.moved(moved)
	}
	if (len(moved) > 0 || relabelled) && d.changed != nil {
		d.changed()
	}
}

// resolveLocked sets what Namespace answers for ip from its owners.
func (d *podDirectory) resolveLocked(ip netip.Addr) {
	owners := d.owners[ip]
	one := len(owners) > 0
	for _, o := range owners {
		one = one && o.namespace == owners[0].namespace
	}
	if !one {
		d.byIP.Delete(ip)
		return
	}
	if prev, had := d.byIP.Load(ip); !had || prev.(string) != owners[0].namespace {
		d.byIP.Store(ip, owners[0].namespace)
	}
}

// addrsOf lists the addresses of the pod obj (nil for anything else).
func addrsOf(obj any) []netip.Addr {
	if p, ok := unwrap(obj).(*podRef); ok {
		return p.IPs
	}
	return nil
}

// podRef is what the pod informer keeps of a pod (podTransform): its name,
// namespace, labels and addresses. About 290 bytes and its share of its
// labels, where a Pod is 1,240 before any of its contents.
type podRef struct {
	metav1.ObjectMeta
	// PodLabels are the pod's labels, which NetworkPolicies select callers
	// by (ObjectMeta.Labels stays empty: a map costs more).
	PodLabels podLabels
	// IPs are the pod's addresses, none for a pod on its node's network
	// or one that has ended.
	IPs []netip.Addr
}

// GetObjectKind implements runtime.Object. A podRef keeps no kind: the
// informer knows what it holds, and the bytes are the pod's to spend.
func (p *podRef) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object.
func (p *podRef) DeepCopyObject() runtime.Object {
	c := *p
	p.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	c.IPs = slices.Clone(p.IPs)
	return &c
}

// podLabels are a pod's labels, interned as one string: the pods of one
// ReplicaSet have the same labels, so that they share it, and a pod's
// labels cost it one pointer (BenchmarkPodDirectoryMemory). The zero value
// is no label.
type podLabels struct{ h unique.Handle[string] }

// newPodLabels interns m: each key and value followed by a NUL, keys
// sorted. Neither can hold one (the API server validates labels).
func newPodLabels(m map[string]string) podLabels {
	if len(m) == 0 {
		return podLabels{}
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(m[k])
		b.WriteByte(0)
	}
	return podLabels{unique.Make(b.String())}
}

// Map returns the labels as a map, as label selectors read them.
func (l podLabels) Map() map[string]string {
	var zero unique.Handle[string]
	if l.h == zero {
		return nil
	}
	m := map[string]string{}
	rest := l.h.Value()
	for rest != "" {
		k, after, _ := strings.Cut(rest, "\x00")
		v, after, _ := strings.Cut(after, "\x00")
		m[k], rest = v, after
	}
	return m
}

// podTransform keeps of a pod what the directory needs — its name,
// namespace, labels and addresses — so that the informer's cache of every
// pod of the cluster stays small. A pod on its node's network keeps no
// address (it is the node's), and neither does one whose containers have
// all ended (Succeeded or Failed: its address may already be another
// pod's). Anything else, a podRef included, passes unchanged.
func podTransform(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &podRef{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, ResourceVersion: p.ResourceVersion},
		PodLabels: newPodLabels(p.Labels)}
	if p.Spec.HostNetwork || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return out, nil
	}
	add := func(s string) {
		if ip, err := netip.ParseAddr(s); err == nil && !slices.Contains(out.IPs, ip.Unmap()) {
			out.IPs = append(out.IPs, ip.Unmap())
		}
	}
	for _, ip := range p.Status.PodIPs {
		add(ip.IP)
	}
	if p.Status.PodIP != "" {
		add(p.Status.PodIP)
	}
	return out, nil
}
