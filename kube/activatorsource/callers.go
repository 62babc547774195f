package activatorsource

import (
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
)

// podDirectory is the activator's activator.CallerDirectory on
// Kubernetes: the namespace of every pod of the cluster, by its
// addresses, kept from a pod informer.
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

	updated atomic.Pointer[chan struct{}]
	// moved, if set, is told the addresses whose pods changed, after
	// the change (outside mu).
	moved func([]netip.Addr)
}

// owner is a pod holding an address.
type owner struct{ namespace, name string }

func newPodDirectory() *podDirectory {
	d := &podDirectory{owners: map[netip.Addr][]owner{}}
	ch := make(chan struct{})
	d.updated.Store(&ch)
	return d
}

// Namespace implements activator.CallerDirectory.
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

// Updated implements activator.CallerDirectory.
func (d *podDirectory) Updated() <-chan struct{} { return *d.updated.Load() }

// handler is the pod informer's event handler.
func (d *podDirectory) handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { d.set(obj, nil, obj) },
		UpdateFunc: func(old, obj any) { d.set(obj, old, obj) },
		DeleteFunc: func(obj any) { d.set(obj, obj, nil) },
	}
}

// set moves the pod which from the addresses of old to those of now
// (either may be nil).
func (d *podDirectory) set(which, old, now any) {
	p, ok := unwrap(which).(*podRef)
	if !ok {
		return
	}
	me := owner{p.Namespace, p.Name}
	was, is := addrsOf(old), addrsOf(now)
	changed := false
	var moved []netip.Addr
	d.mu.Lock()
	for _, ip := range was {
		if slices.Contains(is, ip) {
			continue
		}
		owners := slices.DeleteFunc(d.owners[ip], func(o owner) bool { return o == me })
		if len(owners) == 0 {
			delete(d.owners, ip)
		} else {
			d.owners[ip] = owners
		}
		changed = d.resolveLocked(ip) || changed
		moved = append(moved, ip)
	}
	for _, ip := range is {
		if owners := d.owners[ip]; !slices.Contains(owners, me) {
			d.owners[ip] = append(owners, me)
			changed = d.resolveLocked(ip) || changed
			moved = append(moved, ip)
		}
	}
	d.mu.Unlock()
	if len(moved) > 0 && d.moved != nil {
		d.moved(moved)
	}
	if changed {
		ch := make(chan struct{})
		close(*d.updated.Swap(&ch))
	}
}

// resolveLocked sets what Namespace answers for ip from its owners, and
// reports whether that changed.
func (d *podDirectory) resolveLocked(ip netip.Addr) bool {
	owners := d.owners[ip]
	one := len(owners) > 0
	for _, o := range owners {
		one = one && o.namespace == owners[0].namespace
	}
	prev, had := d.byIP.Load(ip)
	if !one {
		d.byIP.Delete(ip)
		return had
	}
	if had && prev.(string) == owners[0].namespace {
		return false
	}
	d.byIP.Store(ip, owners[0].namespace)
	return true
}

// addrsOf lists the addresses of the pod obj (nil for anything else).
func addrsOf(obj any) []netip.Addr {
	if p, ok := unwrap(obj).(*podRef); ok {
		return p.IPs
	}
	return nil
}

// podRef is what the pod informer keeps of a pod (podTransform): its name,
// namespace and addresses. About 290 bytes, where a Pod is 1,240 before
// any of its contents.
type podRef struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	// IPs are the pod's addresses, none for a pod on its node's network
	// or one that has ended.
	IPs []netip.Addr
}

// DeepCopyObject implements runtime.Object.
func (p *podRef) DeepCopyObject() runtime.Object {
	c := *p
	p.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	c.IPs = slices.Clone(p.IPs)
	return &c
}

// podTransform keeps of a pod what the directory needs — its name,
// namespace and addresses — so that the informer's cache of every pod of
// the cluster stays small. A pod on its node's network keeps no address
// (it is the node's), and neither does one whose containers have all
// ended (Succeeded or Failed: its address may already be another pod's).
// Anything else, a podRef included, passes unchanged.
func podTransform(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &podRef{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, ResourceVersion: p.ResourceVersion}}
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
