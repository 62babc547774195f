// Package activatorsource is the activator's Source on Kubernetes: it learns the
// services to route, and their pods, from Swell's pods-Services and their
// EndpointSlices, through client-go's shared informers.
//
// Every Service labelled kube.LabelDeployment (in any namespace) is the
// pods-Service of the Deployment D named by the label. It becomes the
// activator.Service "<namespace>/D": its hosts are the cluster-local names
// of the Services listed in its kube.AnnotationServices, its container
// concurrency is kube.AnnotationContainerConcurrency, and its pods are the
// endpoints of its EndpointSlices that are not terminating, on the port
// named kube.PortNameHTTP.
//
// The source also follows the EndpointSlices of the Service
// kube.AutoscalerService in Swell's system namespace, so that the activator
// reaches the autoscaler holding the lead without cluster DNS or kube-proxy
// (AutoscalerAddr), and the ConfigMap kube.CAConfigMap there, so that it
// trusts the autoscaler's certificate (AutoscalerRoots). And it follows
// who may call a service (Callers): every pod of the cluster (its
// namespace, labels and addresses), every namespace's labels, every
// NetworkPolicy and the opted-in Deployments' pod templates, so that the
// activator serves only callers the service's NetworkPolicies would admit
// reaching its pods directly (pkg/netpol judges), and those of the
// namespaces its kube.AnnotationAllowedCallers lists.
package activatorsource

import (
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/swell-run/swell/activator"
	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/kube/ports"
	"github.com/swell-run/swell/pkg/service"
)

// Config configures a Source. Only Client is required.
type Config struct {
	// Client reads Services, EndpointSlices and Pods (list and watch,
	// cluster wide).
	Client kubernetes.Interface
	// SystemNamespace is where the Service kube.AutoscalerService lives;
	// kube.DefaultSystemNamespace if empty.
	SystemNamespace string
	// ClusterDomain is the cluster DNS suffix of the host names;
	// activator.DefaultClusterDomain if empty.
	ClusterDomain string
	// Logger; a no-op logger if nil.
	Logger *zap.Logger
}

// The pods-Services' EndpointSlices are indexed by "<namespace>/<service
// name>" and by the address of each endpoint.
const (
	byService = "service"
	byAddress = "address"
)

// activePods selects the pods whose containers have not all ended.
const activePods = "status.phase!=" + string(corev1.PodSucceeded) + ",status.phase!=" + string(corev1.PodFailed)

// Source is an activator.Source over the cluster's pods-Services. Create it
// with New, start it with Run, and wait for WaitForSync before trusting
// Services to be complete. Safe for concurrent use.
type Source struct {
	systemNamespace string
	domain          string
	log             *zap.Logger

	factories  []informers.SharedInformerFactory
	services   corelisters.ServiceLister
	slices     cache.Indexer
	autoscaler discoverylisters.EndpointSliceLister
	// activators lists the slices of the activators' own Service: how
	// many share each service's capacity (Peers).
	activators discoverylisters.EndpointSliceLister
	// autoscalerChanged signals a change of the autoscaler's endpoints or
	// of the CAs that sign its certificate.
	autoscalerChanged chan struct{}
	// roots are the CAs of kube.CAConfigMap; nil while it is absent.
	roots   atomic.Pointer[x509.CertPool]
	callers *podDirectory
	// ports is the table of the services' own ports (package kube/ports).
	ports *ports.Index
	// judge tells the activator who calls and whether a service's
	// NetworkPolicies admit them.
	judge  *callerJudge
	synced []cache.InformerSynced

	changed chan struct{}

	// mu serialises rebuilding a service from the caches with storing it,
	// so that two informers' handlers never store an older view over a
	// newer one.
	mu    sync.Mutex
	byKey map[service.Key]activator.Service
	list  []activator.Service // byKey sorted by key; rebuilt when stale
	stale bool
	// problems is what was last logged of each service's annotations, so
	// that a problem is logged when it appears, not on every rebuild.
	problems map[service.Key]string
}

// New returns a Source; its informers start with Run.
//
// Informers, each listing only what it needs: Services labelled
// kube.LabelDeployment; EndpointSlices labelled kube.LabelDeployment but not
// kube.LabelRoute, which are the pods-Services' own slices, since
// Kubernetes' EndpointSlice controller copies a Service's labels onto its
// slices (Swell's route slices carry kube.LabelRoute); in the system
// namespace, the slices of kube.AutoscalerService and kube.ActivatorService
// and the CA's ConfigMap; the pods that have not ended, of which the cache
// keeps only names, labels and addresses (podTransform); and what callers
// are judged by besides (watchPolicies).
func New(cfg Config) (*Source, error) {
	if cfg.Client == nil {
		return nil, errors.New("activatorsource: Config.Client is nil")
	}
	s := &Source{
		systemNamespace: cmp.Or(cfg.SystemNamespace, kube.DefaultSystemNamespace),
		domain:          cmp.Or(cfg.ClusterDomain, activator.DefaultClusterDomain),
		log:             cfg.Logger,
		changed:         make(chan struct{}, 1),
		byKey:           map[service.Key]activator.Service{},
		stale:           true,
		problems:        map[service.Key]string{},
		callers:         newPodDirectory(),
	}
	s.judge = newCallerJudge(s.callers)
	s.ports = ports.NewIndex()
	if s.log == nil {
		s.log = zap.NewNop()
	}
	selected := func(selector string, opts ...informers.SharedInformerOption) informers.SharedInformerFactory {
		opts = append(opts, informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
		f := informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0, opts...)
		s.factories = append(s.factories, f)
		return f
	}

	svcInf := selected(kube.LabelDeployment).Core().V1().Services()
	s.services = svcInf.Lister()
	svcReg, err := svcInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.serviceChanged(nil, obj) },
		UpdateFunc: s.serviceChanged,
		DeleteFunc: func(obj any) { s.serviceChanged(obj, nil) },
	})
	if err != nil {
		return nil, err
	}

	sliceInf := selected(kube.LabelDeployment + ",!" + kube.LabelRoute).Discovery().V1().EndpointSlices().Informer()
	if err := sliceInf.AddIndexers(cache.Indexers{byService: indexByService, byAddress: indexByAddress}); err != nil {
		return nil, err
	}
	s.slices = sliceInf.GetIndexer()
	sliceReg, err := sliceInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: s.sliceChanged,
		UpdateFunc: func(old, obj any) {
			if sliceService(old) != sliceService(obj) {
				s.sliceChanged(old)
			}
			s.sliceChanged(obj)
		},
		DeleteFunc: s.sliceChanged,
	})
	if err != nil {
		return nil, err
	}

	asInf := selected(discoveryv1.LabelServiceName+"="+kube.AutoscalerService,
		informers.WithNamespace(s.systemNamespace)).Discovery().V1().EndpointSlices()
	s.autoscaler = asInf.Lister()
	s.autoscalerChanged = make(chan struct{}, 1)
	if _, err := asInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.notifyAutoscaler() },
		UpdateFunc: func(any, any) { s.notifyAutoscaler() },
		DeleteFunc: func(any) { s.notifyAutoscaler() },
	}); err != nil {
		return nil, err
	}

	// The activators themselves, ready: each admits its share of a
	// service's capacity. A change of their number re-reads the services.
	actInf := selected(discoveryv1.LabelServiceName+"="+kube.ActivatorService,
		informers.WithNamespace(s.systemNamespace)).Discovery().V1().EndpointSlices()
	s.activators = actInf.Lister()
	actReg, err := actInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.notify() },
		UpdateFunc: func(any, any) { s.notify() },
		DeleteFunc: func(any) { s.notify() },
	})
	if err != nil {
		return nil, err
	}

	// The CAs the autoscaler's certificate is signed by, which it
	// publishes. Not among the caches waited for: the activator serves
	// without them, only its reports wait.
	caFactory := informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0, informers.WithNamespace(s.systemNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", kube.CAConfigMap).String()
		}))
	s.factories = append(s.factories, caFactory)
	if _, err := caFactory.Core().V1().ConfigMaps().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.caChanged(obj, false) },
		UpdateFunc: func(_, obj any) { s.caChanged(obj, false) },
		DeleteFunc: func(obj any) { s.caChanged(obj, true) },
	}); err != nil {
		return nil, err
	}

	// The table of the services' own ports, which the autoscaler writes
	// in the system namespace: a service's port comes from it, never from
	// anything a tenant can write. Among the caches waited for: until the
	// activator has opened every port, it is not ready.
	portsFactory := selected(ports.LabelTable+"=true", informers.WithNamespace(s.systemNamespace))
	portsReg, err := portsFactory.Core().V1().ConfigMaps().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.portsChanged(obj, false) },
		UpdateFunc: func(_, obj any) { s.portsChanged(obj, false) },
		DeleteFunc: func(obj any) { s.portsChanged(obj, true) },
	})
	if err != nil {
		return nil, err
	}

	// A pod that has ended no longer holds its address: the API server
	// sends its deletion as it leaves the selection.
	// A pod that comes to hold an address, or leaves it, changes which
	// endpoints are pods of their namespace (pods).
	s.callers.moved = s.podsMoved
	podFactory := informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = activePods }),
		informers.WithTransform(podTransform))
	s.factories = append(s.factories, podFactory)
	podReg, err := podFactory.Core().V1().Pods().Informer().AddEventHandler(s.callers.handler())
	if err != nil {
		return nil, err
	}

	judged, err := s.watchPolicies(cfg.Client)
	if err != nil {
		return nil, err
	}
	s.synced = append([]cache.InformerSynced{svcReg.HasSynced, sliceReg.HasSynced, asInf.Informer().HasSynced, podReg.HasSynced, actReg.HasSynced, portsReg.HasSynced}, judged...)
	return s, nil
}

// watchPolicies starts following what a caller's verdict depends on,
// besides the pods: every NetworkPolicy, the namespaces (their names and
// labels only) and the opted-in Deployments (their pod templates' labels
// and app ports only). Until all three are listed no verdict can be
// trusted, since a policy not listed yet admits everyone: they are among
// the caches waited for.
func (s *Source) watchPolicies(client kubernetes.Interface) ([]cache.InformerSynced, error) {
	npFactory := informers.NewSharedInformerFactory(client, 0)
	s.factories = append(s.factories, npFactory)
	npInf := npFactory.Networking().V1().NetworkPolicies().Informer()
	s.judge.policyStore = npInf.GetIndexer()
	npReg, err := npInf.AddEventHandler(onEvents(s.judge.policiesChanged))
	if err != nil {
		return nil, err
	}

	nsFactory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(namespaceTransform))
	s.factories = append(s.factories, nsFactory)
	nsReg, err := nsFactory.Core().V1().Namespaces().Informer().AddEventHandler(onEvents(s.judge.namespaceChanged))
	if err != nil {
		return nil, err
	}

	depFactory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = kube.LabelEnabled + "=true" }),
		informers.WithTransform(workloadTransform))
	s.factories = append(s.factories, depFactory)
	depReg, err := depFactory.Apps().V1().Deployments().Informer().AddEventHandler(onEvents(s.judge.workloadChanged))
	if err != nil {
		return nil, err
	}
	return []cache.InformerSynced{npReg.HasSynced, nsReg.HasSynced, depReg.HasSynced}, nil
}

// Run starts the informers and returns, always nil, once ctx has ended and
// they have stopped.
func (s *Source) Run(ctx context.Context) error {
	for _, f := range s.factories {
		f.Start(ctx.Done())
	}
	<-ctx.Done()
	for _, f := range s.factories {
		f.Shutdown()
	}
	return nil
}

// WaitForSync waits until the informers have listed everything once and
// Services reflects it. It reports false if ctx ended first.
func (s *Source) WaitForSync(ctx context.Context) bool {
	return cache.WaitForCacheSync(ctx.Done(), s.synced...)
}

// Services implements activator.Source: the services sorted by namespace,
// then name. The slice is shared until the next change; the caller must not
// modify it.
func (s *Source) Services() []activator.Service {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stale {
		s.list = make([]activator.Service, 0, len(s.byKey))
		for _, sv := range s.byKey {
			s.list = append(s.list, sv)
		}
		slices.SortFunc(s.list, func(a, b activator.Service) int {
			return a.Key.Compare(b.Key)
		})
		s.stale = false
	}
	return s.list
}

// Changed implements activator.Source. Signals coalesce: one pending
// signal covers every change made before it is received.
func (s *Source) Changed() <-chan struct{} { return s.changed }

// Callers tells who a caller is by its address, from every pod of the
// cluster, and whether a service's NetworkPolicies admit it
// (activator.Config.Callers).
func (s *Source) Callers() activator.CallerDirectory { return s.judge }

// AutoscalerChanged delivers a value after the autoscaler Service's
// endpoints changed: a new leader published itself. Signals coalesce.
func (s *Source) AutoscalerChanged() <-chan struct{} { return s.autoscalerChanged }

func (s *Source) notifyAutoscaler() {
	select {
	case s.autoscalerChanged <- struct{}{}:
	default:
	}
}

// Peers implements activator.PeerSource: the ready activators the
// Service kube.ActivatorService in the system namespace lists, at least 1 (this
// activator, before it is ready or listed).
func (s *Source) Peers() int {
	eps, err := s.activators.EndpointSlices(s.systemNamespace).List(labels.Everything())
	if err != nil {
		return 1
	}
	// An activator is listed once per address family (the Service
	// prefers dual stack): counted by its pod where the endpoint names
	// it, else by its IPv4 address alone.
	seen := map[string]bool{}
	for _, es := range eps {
		for _, ep := range es.Endpoints {
			if len(ep.Addresses) == 0 || !ptr.Deref(ep.Conditions.Ready, true) || ptr.Deref(ep.Conditions.Terminating, false) {
				continue
			}
			switch {
			case ep.TargetRef != nil && ep.TargetRef.Name != "":
				seen["pod "+ep.TargetRef.Name] = true
			case es.AddressType == discoveryv1.AddressTypeIPv4:
				seen[ep.Addresses[0]] = true
			}
		}
	}
	return max(len(seen), 1)
}

// AutoscalerRoots returns the CAs the autoscaler's serving certificate is
// signed by, from the ConfigMap kube.CAConfigMap in the system namespace;
// nil while there is none.
func (s *Source) AutoscalerRoots() *x509.CertPool { return s.roots.Load() }

// caChanged loads the CA bundle of obj, the CA ConfigMap, or forgets it
// once deleted. A bundle that does not parse leaves no roots: the
// activator trusts nothing rather than something it cannot read.
func (s *Source) caChanged(obj any, deleted bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok || cm.Name != kube.CAConfigMap {
		return // the informer lists only the CA's ConfigMap; a fake may list more
	}
	var pool *x509.CertPool
	if !deleted {
		p := x509.NewCertPool()
		if p.AppendCertsFromPEM([]byte(cm.Data[kube.CAConfigMapKey])) {
			pool = p
		} else {
			s.log.Error("the CA ConfigMap holds no certificate; reports to the autoscaler wait for one",
				zap.String("configMap", s.systemNamespace+"/"+kube.CAConfigMap), zap.String("key", kube.CAConfigMapKey))
		}
	}
	s.roots.Store(pool)
	s.notifyAutoscaler()
}

// AutoscalerAddr is ip:port of a ready endpoint of the Service
// kube.AutoscalerService in the system namespace, on its port named
// kube.PortNameHTTP: the autoscaler that holds the lead. It reports false
// while there is none.
func (s *Source) AutoscalerAddr() (string, bool) {
	// The informer holds only this Service's slices.
	eps, err := s.autoscaler.EndpointSlices(s.systemNamespace).List(labels.Everything())
	if err != nil {
		return "", false
	}
	return readyAddr(eps, kube.PortNameHTTP)
}

// AutoscalerLeaders is, for each bucket of services, the address ip:port
// of the autoscaler replica that leads it ("" while none does), from the
// EndpointSlices of the Service kube.AutoscalerService: one per bucket,
// labelled kube.LabelBucket and kube.LabelBuckets, when the autoscaler is
// sharded; else its one slice, as AutoscalerAddr.
func (s *Source) AutoscalerLeaders() []string {
	eps, err := s.autoscaler.EndpointSlices(s.systemNamespace).List(labels.Everything())
	if err != nil {
		return []string{""}
	}
	return leaders(eps, kube.PortNameHTTP)
}

// portsChanged records what the table's ConfigMap obj says now, and
// rebuilds the services whose port changed.
func (s *Source) portsChanged(obj any, deleted bool) {
	cm, ok := unwrap(obj).(*corev1.ConfigMap)
	if !ok {
		return
	}
	changed, problems := s.ports.Set(cm, deleted)
	if len(problems) > 0 {
		s.log.Error("the service ports table holds entries Swell did not write; ignored", zap.Errors("problems", problems))
	}
	for _, k := range changed {
		s.sync(k.Namespace, k.Name)
	}
}

// serviceChanged rebuilds the services that old and obj (either may be nil)
// stand for.
func (s *Source) serviceChanged(old, obj any) {
	prev := ""
	for _, o := range []any{old, obj} {
		svc, ok := unwrap(o).(*corev1.Service)
		if !ok {
			continue
		}
		if d := svc.Labels[kube.LabelDeployment]; d != "" && d != prev {
			s.sync(svc.Namespace, d)
			prev = d
		}
	}
}

// sliceChanged rebuilds the service whose pods-Service owns the slice obj.
// A slice that arrives before its Service is skipped: the Service's own
// event rebuilds the service from every slice cached by then.
func (s *Source) sliceChanged(obj any) {
	es, ok := unwrap(obj).(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	name := es.Labels[discoveryv1.LabelServiceName]
	if name == "" {
		return
	}
	svc, err := s.services.Services(es.Namespace).Get(name)
	if err != nil {
		return
	}
	if d := svc.Labels[kube.LabelDeployment]; d != "" {
		s.sync(es.Namespace, d)
	}
}

// podsMoved rebuilds the services whose slices list an address of ips,
// whose pods changed.
func (s *Source) podsMoved(ips []netip.Addr) {
	for _, ip := range ips {
		objs, err := s.slices.ByIndex(byAddress, ip.String())
		if err != nil {
			continue
		}
		for _, o := range objs {
			s.sliceChanged(o)
		}
	}
}

// sync rebuilds the service of Deployment d in namespace ns from the
// caches, and signals Changed if it differs from what Services had. A
// Deployment whose name is not a service key (longer than a DNS label, or
// with a dot) is logged and left out: Swell cannot name it.
func (s *Source) sync(ns, d string) {
	key, err := service.New(ns, d)
	if err != nil {
		s.log.Error("ignoring a pods-Service: its Deployment cannot be a Swell service",
			zap.String("service", ns+"/"+kube.PodsServiceName(d)), zap.Error(err))
		return
	}
	s.mu.Lock()
	sv, ok, problems := s.build(key)
	if msg := errString(problems); msg != s.problems[key] {
		if msg == "" {
			delete(s.problems, key)
		} else {
			s.problems[key] = msg
			s.log.Error("invalid annotations on a pods-Service; the activator reads them the safe way",
				zap.String("service", key.Namespace+"/"+kube.PodsServiceName(key.Name)), zap.Error(problems))
		}
	}
	old, had := s.byKey[key]
	switch {
	case !ok && !had, ok && had && equal(old, sv):
		s.mu.Unlock()
		return
	case !ok:
		delete(s.byKey, key)
	default:
		s.byKey[key] = sv
	}
	s.stale = true
	s.mu.Unlock()
	s.notify()
}

// notify signals Changed; signals coalesce.
func (s *Source) notify() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// build reads the service of the Deployment named by key from the caches;
// false if it has no pods-Service. The error is toService's: what of the
// pods-Service's annotations does not parse.
func (s *Source) build(key service.Key) (activator.Service, bool, error) {
	// Only the pods-Service: a Service the autoscaler routes carries the
	// label too.
	svc, err := s.services.Services(key.Namespace).Get(kube.PodsServiceName(key.Name))
	if err != nil || svc.Labels[kube.LabelDeployment] != key.Name {
		return activator.Service{}, false, nil
	}
	objs, err := s.slices.ByIndex(byService, key.Namespace+"/"+svc.Name)
	if err != nil {
		return activator.Service{}, false, nil
	}
	eps := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		if es, ok := o.(*discoveryv1.EndpointSlice); ok {
			eps = append(eps, es)
		}
	}
	sv, err := toService(key, svc, eps, s.callers, s.domain)
	sv.Port, _ = s.ports.Port(key)
	return sv, true, err
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// sliceService is "<namespace>/<service name>" of the EndpointSlice obj, or
// "" if it names no Service.
func sliceService(obj any) string {
	es, ok := unwrap(obj).(*discoveryv1.EndpointSlice)
	if !ok || es.Labels[discoveryv1.LabelServiceName] == "" {
		return ""
	}
	return es.Namespace + "/" + es.Labels[discoveryv1.LabelServiceName]
}

// indexByService is the byService index function.
func indexByService(obj any) ([]string, error) {
	if key := sliceService(obj); key != "" {
		return []string{key}, nil
	}
	return nil, nil
}

// indexByAddress is the byAddress index function: the address of each
// endpoint, as netip writes it (the one pods goes by).
func indexByAddress(obj any) ([]string, error) {
	es, ok := unwrap(obj).(*discoveryv1.EndpointSlice)
	if !ok {
		return nil, nil
	}
	var out []string
	for _, ep := range es.Endpoints {
		if len(ep.Addresses) == 0 {
			continue
		}
		if ip, err := netip.ParseAddr(ep.Addresses[0]); err == nil {
			out = append(out, ip.Unmap().String())
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// unwrap returns the last known object of a deletion the informer missed.
func unwrap(obj any) any {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return obj
}
