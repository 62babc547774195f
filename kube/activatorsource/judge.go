package activatorsource

import (
	"maps"
	"net/netip"
	"sync"
	"sync/atomic"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/swell-run/swell/activator"
	"github.com/swell-run/swell/kube/inject"
	"github.com/swell-run/swell/pkg/netpol"
	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/service"
)

// callerJudge is the activator's activator.CallerDirectory on Kubernetes:
// who a caller is, from every pod of the cluster by its addresses
// (podDirectory), and whether a service's NetworkPolicies would admit it,
// from every NetworkPolicy, the namespaces' labels and the opted-in
// Deployments' pod templates.
//
// A service's pods are judged as their Deployment's pod template makes
// them: its labels, and the app's port (the one its Services reach). The
// activator stands in for them most when there are none, at zero, so the
// template is the one source that always has them; a pod also carries
// pod-template-hash, which a policy that selects by it does not see here.
type callerJudge struct {
	*podDirectory

	// mu guards the maps; they are written by the informers' handlers,
	// read (and policies filled) when a verdict is not cached.
	mu sync.Mutex
	// policyStore is the NetworkPolicy informer's cache.
	policyStore cache.Indexer
	// policies are the NetworkPolicies of the namespaces callers were
	// judged for, compiled when first needed after a change of any of
	// them: most namespaces' policies never are, and a namespace's many
	// policies listed at start are compiled once, not once each.
	policies map[string]*netpol.Set
	// namespaces are the namespaces' labels.
	namespaces map[string]map[string]string
	// workloads are the opted-in Deployments, by service key.
	workloads map[service.Key]*workloadRef

	// gen grows, and updated is closed and replaced, at every change of
	// the pods or of the maps.
	gen     atomic.Uint64
	updated atomic.Pointer[chan struct{}]
}

func newCallerJudge(pods *podDirectory) *callerJudge {
	j := &callerJudge{
		podDirectory: pods,
		policies:     map[string]*netpol.Set{},
		namespaces:   map[string]map[string]string{},
		workloads:    map[service.Key]*workloadRef{},
	}
	ch := make(chan struct{})
	j.updated.Store(&ch)
	pods.changed = j.bump
	return j
}

// Generation implements activator.CallerDirectory.
func (j *callerJudge) Generation() uint64 { return j.gen.Load() }

// Updated implements activator.CallerDirectory: the channel is closed at
// the next change of what Namespace or Admits answers.
func (j *callerJudge) Updated() <-chan struct{} { return *j.updated.Load() }

// bump records a change of what callers are judged by: the generation
// grows first, so that whoever wakes on updated judges anew.
func (j *callerJudge) bump() {
	j.gen.Add(1)
	ch := make(chan struct{})
	close(*j.updated.Swap(&ch))
}

// Admits implements activator.CallerDirectory. A caller that is a pod is
// judged by its namespace, its namespace's labels and its labels; an
// address several pods hold at once (while it is being reused) is
// admitted only if each of them would be; an address no pod holds is
// judged by the address alone. A service whose Deployment the judge does
// not know (not yet listed, or no longer opted in) admits nobody: what
// its pods would admit cannot be told.
func (j *callerJudge) Admits(key service.Key, ip netip.Addr) activator.CallerVerdict {
	ip = ip.Unmap()
	pods := j.podDirectory.at(ip)
	j.mu.Lock()
	defer j.mu.Unlock()
	w := j.workloads[key]
	switch {
	case w == nil:
		return activator.CallerVerdict{Why: "refused: the activator knows no opted-in Deployment " + key.String() + ", whose pods' labels the policies select by"}
	case w.Problem != "":
		return activator.CallerVerdict{Why: "refused: the app's port of Deployment " + key.String() + " is not known: " + w.Problem}
	}
	set := j.policiesOfLocked(key.Namespace)
	to := netpol.Target{Namespace: key.Namespace, Labels: w.PodLabels, Port: w.Port}
	if len(pods) == 0 {
		return verdictOf(set.Admits(to, netpol.Peer{IP: ip}))
	}
	var v netpol.Verdict
	for _, p := range pods {
		v = set.Admits(to, netpol.Peer{IP: ip, Pod: &netpol.Pod{
			Namespace: p.namespace, NamespaceLabels: j.namespaces[p.namespace], Labels: p.labels.Map(),
		}})
		if !v.Allowed {
			break
		}
	}
	return verdictOf(v)
}

func verdictOf(v netpol.Verdict) activator.CallerVerdict {
	return activator.CallerVerdict{Allowed: v.Allowed, Why: v.String()}
}

// policiesOfLocked returns the compiled NetworkPolicies of namespace ns,
// compiling them if they changed since last asked.
func (j *callerJudge) policiesOfLocked(ns string) *netpol.Set {
	if set, ok := j.policies[ns]; ok {
		return set
	}
	var set *netpol.Set
	if j.policyStore != nil {
		objs, _ := j.policyStore.ByIndex(cache.NamespaceIndex, ns)
		ps := make([]*networkingv1.NetworkPolicy, 0, len(objs))
		for _, o := range objs {
			if p, ok := o.(*networkingv1.NetworkPolicy); ok {
				ps = append(ps, p)
			}
		}
		set = netpol.Compile(ps)
	}
	j.policies[ns] = set
	return set
}

// policiesChanged forgets the compiled policies of the namespace of obj, a
// policy added, changed or deleted: the informer's cache has it already,
// and the next verdict there compiles them again.
func (j *callerJudge) policiesChanged(obj any, _ bool) {
	np, ok := unwrap(obj).(*networkingv1.NetworkPolicy)
	if !ok {
		return
	}
	j.mu.Lock()
	delete(j.policies, np.Namespace)
	j.mu.Unlock()
	j.bump()
}

// namespaceChanged keeps the labels of obj, a namespace, or forgets them
// once it is deleted.
func (j *callerJudge) namespaceChanged(obj any, deleted bool) {
	ns, ok := unwrap(obj).(*corev1.Namespace)
	if !ok {
		return
	}
	j.mu.Lock()
	old, had := j.namespaces[ns.Name]
	switch {
	case deleted:
		delete(j.namespaces, ns.Name)
	case had && maps.Equal(old, ns.Labels):
		j.mu.Unlock()
		return
	default:
		j.namespaces[ns.Name] = ns.Labels
	}
	j.mu.Unlock()
	j.bump()
}

// workloadChanged keeps what obj, an opted-in Deployment, tells of its
// pods, or forgets it once it is deleted.
func (j *callerJudge) workloadChanged(obj any, deleted bool) {
	w, ok := unwrap(obj).(*workloadRef)
	if !ok {
		return
	}
	key := service.Key{Namespace: w.Namespace, Name: w.Name}
	j.mu.Lock()
	old := j.workloads[key]
	switch {
	case deleted:
		delete(j.workloads, key)
	case old != nil && old.Port == w.Port && old.Problem == w.Problem && maps.Equal(old.PodLabels, w.PodLabels):
		j.mu.Unlock()
		return
	default:
		j.workloads[key] = w
	}
	j.mu.Unlock()
	j.bump()
}

// onEvents is an informer's event handler calling changed with each object
// and whether it was deleted.
func onEvents(changed func(obj any, deleted bool)) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { changed(obj, false) },
		UpdateFunc: func(_, obj any) { changed(obj, false) },
		DeleteFunc: func(obj any) { changed(obj, true) },
	}
}

// namespaceTransform keeps of a namespace its name and labels, which is
// all that policies select namespaces by.
func namespaceTransform(obj any) (any, error) {
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return obj, nil
	}
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns.Name, ResourceVersion: ns.ResourceVersion, Labels: ns.Labels}}, nil
}

// workloadRef is what the Deployments informer keeps of an opted-in
// Deployment (workloadTransform): what its pods look like to a
// NetworkPolicy.
type workloadRef struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	// PodLabels are the pod template's labels.
	PodLabels map[string]string
	// Port is the app's port, as injection and routing find it: the first
	// port of the app container, network.DefaultUserPort (unnamed) when it
	// declares none. The Services Swell routes reach the pods there, so it
	// is the port a policy sees a caller reach, whatever port the
	// activator itself reaches them on (the queue-proxy's).
	Port netpol.Port
	// Problem says why the app container cannot be told, "" when it can.
	Problem string
}

// DeepCopyObject implements runtime.Object.
func (w *workloadRef) DeepCopyObject() runtime.Object {
	c := *w
	w.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	c.PodLabels = maps.Clone(w.PodLabels)
	return &c
}

// workloadTransform keeps of a Deployment its name, namespace, pod
// labels and app port (workloadRef). Anything else, a workloadRef
// included, passes unchanged.
func workloadTransform(obj any) (any, error) {
	d, ok := obj.(*appsv1.Deployment)
	if !ok {
		return obj, nil
	}
	w := &workloadRef{
		ObjectMeta: metav1.ObjectMeta{Name: d.Name, Namespace: d.Namespace, ResourceVersion: d.ResourceVersion},
		PodLabels:  d.Spec.Template.Labels,
	}
	spec := &d.Spec.Template.Spec
	name := d.Annotations[inject.AnnotationContainer]
	if name == "" {
		name = d.Spec.Template.Annotations[inject.AnnotationContainer]
	}
	app, err := inject.AppContainer(spec, name)
	if err != nil {
		w.Problem = err.Error()
		return w, nil
	}
	w.Port = netpol.Port{Number: network.DefaultUserPort}
	if ports := spec.Containers[app].Ports; len(ports) > 0 {
		w.Port = netpol.Port{Number: ports[0].ContainerPort, Name: ports[0].Name, Protocol: ports[0].Protocol}
	}
	return w, nil
}
