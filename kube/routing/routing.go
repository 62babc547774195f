// Package routing puts the activator in, or takes it out of, the path of the
// Services that reach an opted-in Deployment, by writing their
// EndpointSlices (see docs/routing.md).
//
// For each opted-in Deployment D it keeps D's pods-Service, takes over the
// user Services that select D's pods (their selector moves to an
// annotation, and one EndpointSlice written by Swell lists either D's ready
// pods on the queue-proxy's port or the activator), and gives them back
// when D opts out or goes. It never writes an empty endpoint list while
// either D's pods or the activator has a ready endpoint.
package routing

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/swell-run/swell/autoscaler/plan"
	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/kube/ports"
	"github.com/swell-run/swell/pkg/service"
)

// ReleaseTimeout bounds how long a Service given back keeps Swell's
// EndpointSlice while Kubernetes has not listed the Service's endpoints
// again.
const ReleaseTimeout = 30 * time.Second

// The reasons of the Warning events the Router records.
const (
	// ReasonNotRouted is on a Service Swell does not route, or on a
	// Deployment none of whose Services can be routed, with why.
	ReasonNotRouted = "NotRouted"
	// ReasonPortsNotRouted is on a routed Service some of whose ports do
	// not reach the app and are left out of its endpoints.
	ReasonPortsNotRouted = "PortsNotRouted"
	// ReasonSelectorLost is on a Service Swell cannot give its selector
	// back to: the annotation that held it is gone or not JSON.
	ReasonSelectorLost = "SelectorLost"
	// ReasonInvalidAnnotations is on a Deployment whose
	// container-concurrency annotation does not parse.
	ReasonInvalidAnnotations = "InvalidAnnotations"
)

// Config is what a Router needs.
type Config struct {
	// Client writes Services and EndpointSlices; required.
	Client kubernetes.Interface
	// Informers watches all namespaces; required. New registers the
	// Services, EndpointSlices and Deployments informers on it; the
	// caller starts it.
	Informers informers.SharedInformerFactory
	// SystemNamespace holds the activator's Service; default
	// kube.DefaultSystemNamespace.
	SystemNamespace string
	// Logger; default none.
	Logger *zap.Logger
	// Recorder, when set, gets Warning events on the Services and
	// Deployments Swell cannot route as asked.
	Recorder record.EventRecorder
	// Owns, if set, says which Deployments this replica routes: those of
	// the buckets of services it leads (package kube/buckets). Nil: all.
	Owns func(service.Key) bool
	// ServicePorts, when set, gives every routed Deployment a port of its
	// own on the activators, from this range (package kube/ports): route
	// slices list the activators on it, and the activators know the
	// service from the port. Zero: route slices list the activators'
	// shared port, where they route by Host (tests of other things).
	ServicePorts ports.Range
	// SystemInformers watches the system namespace; required with
	// ServicePorts. New registers the ConfigMaps informer of the ports
	// table on it; the caller starts it.
	SystemInformers informers.SharedInformerFactory
	// Dial reports whether addr (ip:port) takes connections; a route slice
	// lists an activator on a service's port only once it does. Default:
	// a TCP connection, closed at once, within DialTimeout.
	Dial func(ctx context.Context, addr string) error
}

// DialTimeout bounds the default Config.Dial.
const DialTimeout = time.Second

// Router reconciles the routing of opted-in Deployments, keyed by the
// Deployment's namespace/name. Its methods are safe for concurrent use.
type Router struct {
	client  kubernetes.Interface
	sysNS   string
	log     *zap.Logger
	rec     record.EventRecorder
	owns    func(service.Key) bool
	clock   clock.PassiveClock
	timeout time.Duration

	services    corelisters.ServiceLister
	slices      discoverylisters.EndpointSliceLister
	sliceIndex  cache.Indexer
	deployments appslisters.DeploymentLister
	synced      []cache.InformerSynced

	// queue hands a Deployment's key to one worker at a time: the one
	// serialisation of its reconciles.
	queue workqueue.TypedRateLimitingInterface[service.Key]

	// notifying serialises notify, so callbacks see changes in order.
	notifying sync.Mutex

	mu        sync.Mutex
	started   bool
	requested map[service.Key]plan.Route
	// releasing holds when the release of a route EndpointSlice began.
	releasing map[types.NamespacedName]time.Time
	// warned holds, by object and reason, the message last recorded, so a
	// problem is recorded once rather than at every reconcile.
	warned   map[types.UID]map[string]string
	seen     map[service.Key]observed
	onChange []func(service.Key)

	// ports hands out the service ports; nil without Config.ServicePorts.
	ports *ports.Allocator
	dial  func(ctx context.Context, addr string) error
	// opened holds the activators' addresses with a service's port that
	// took a connection: the activator there has opened it.
	opened map[netip.AddrPort]bool
}

// observed is what OnChange callbacks were last told about a Deployment.
type observed struct {
	pods  string
	route plan.Route
}

// New returns a Router watching cfg.Informers. Nothing is written before
// Run.
func New(cfg Config) (*Router, error) {
	if cfg.Client == nil {
		return nil, errors.New("routing: no Kubernetes client given")
	}
	if cfg.Informers == nil {
		return nil, errors.New("routing: no informer factory given")
	}
	if cfg.SystemNamespace == "" {
		cfg.SystemNamespace = kube.DefaultSystemNamespace
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	svcInf := cfg.Informers.Core().V1().Services()
	sliceInf := cfg.Informers.Discovery().V1().EndpointSlices()
	depInf := cfg.Informers.Apps().V1().Deployments()
	r := &Router{
		client:      cfg.Client,
		sysNS:       cfg.SystemNamespace,
		log:         cfg.Logger,
		rec:         cfg.Recorder,
		owns:        cfg.Owns,
		clock:       clock.RealClock{},
		timeout:     ReleaseTimeout,
		services:    svcInf.Lister(),
		slices:      sliceInf.Lister(),
		deployments: depInf.Lister(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[service.Key](),
			workqueue.TypedRateLimitingQueueConfig[service.Key]{Name: "swell-routing"}),
		requested: map[service.Key]plan.Route{},
		releasing: map[types.NamespacedName]time.Time{},
		warned:    map[types.UID]map[string]string{},
		seen:      map[service.Key]observed{},
	}
	// A Service's slices and a Deployment's route slices are looked up
	// for every service at every tick: by index, not by matching the
	// labels of every slice of the namespace (with a thousand services in
	// one namespace that scan took most of a core).
	if err := addSliceIndexers(sliceInf.Informer()); err != nil {
		return nil, fmt.Errorf("routing: %w", err)
	}
	r.sliceIndex = sliceInf.Informer().GetIndexer()
	if cfg.ServicePorts != (ports.Range{}) {
		if err := r.watchPorts(cfg); err != nil {
			return nil, err
		}
	}
	handlers := []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}{
		{svcInf.Informer(), handler(r.serviceChanged, sameService)},
		{sliceInf.Informer(), handler(r.sliceChanged, sameLabels)},
		{depInf.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { r.deploymentChanged(nil, obj) },
			UpdateFunc: r.deploymentChanged,
			DeleteFunc: r.deploymentDeleted,
		}},
	}
	for _, h := range handlers {
		reg, err := h.inf.AddEventHandler(h.h)
		if err != nil {
			return nil, fmt.Errorf("routing: watch: %w", err)
		}
		r.synced = append(r.synced, reg.HasSynced)
	}
	return r, nil
}

// handler calls f with every object an event names: for an update, with
// the old object too unless same says f would read nothing different of
// it (a resync, or a change to what routing does not look at).
func handler[T any](f func(obj any, deleted bool), same func(old, obj T) bool) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { f(obj, false) },
		UpdateFunc: func(old, obj any) {
			o, ok1 := old.(T)
			n, ok2 := obj.(T)
			if !ok1 || !ok2 || !same(o, n) {
				f(old, false)
			}
			f(obj, false)
		},
		DeleteFunc: func(obj any) { f(obj, true) },
	}
}

// sameLabels says whether two versions of an EndpointSlice agree on all
// sliceChanged reads of them.
func sameLabels(old, obj *discoveryv1.EndpointSlice) bool {
	return maps.Equal(old.Labels, obj.Labels)
}

// sameService says whether two versions of a Service agree on all
// serviceChanged reads of them: the Deployments they concern.
func sameService(old, obj *corev1.Service) bool {
	return maps.Equal(old.Labels, obj.Labels) && maps.Equal(old.Spec.Selector, obj.Spec.Selector) &&
		old.Annotations[kube.AnnotationSelector] == obj.Annotations[kube.AnnotationSelector]
}

// Run waits for the informers' caches, then reconciles with workers
// goroutines until ctx ends. It is called once, by the leader.
func (r *Router) Run(ctx context.Context, workers int) error {
	if workers < 1 {
		return fmt.Errorf("routing: %d workers; accepted: 1 or more", workers)
	}
	r.mu.Lock()
	if r.started {
		r.mu.Unlock()
		return errors.New("routing: Run called twice")
	}
	r.started = true
	r.mu.Unlock()
	if !cache.WaitForCacheSync(ctx.Done(), r.synced...) {
		r.queue.ShutDown()
		return fmt.Errorf("routing: wait for the informers' caches: %w", context.Cause(ctx))
	}
	r.log.Info("routing running", zap.Int("workers", workers), zap.String("system-namespace", r.sysNS))
	if r.ports != nil {
		// A port whose Deployment went while no replica routed it is
		// given back by that Deployment's reconcile.
		for _, k := range r.ports.Index.Keys() {
			r.queue.Add(k)
		}
	}

	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for r.next(ctx) {
			}
		})
	}
	<-ctx.Done()
	r.queue.ShutDown()
	wg.Wait()
	return nil
}

// next reconciles one key; false once the queue is shut down.
func (r *Router) next(ctx context.Context) bool {
	key, quit := r.queue.Get()
	if quit {
		return false
	}
	defer r.queue.Done(key)
	if r.owns != nil && !r.owns(key) {
		// Another replica routes it now; a route requested here is stale.
		r.mu.Lock()
		delete(r.requested, key)
		r.mu.Unlock()
		r.queue.Forget(key)
		return true
	}
	err := r.sync(ctx, key)
	if err == nil {
		r.queue.Forget(key)
		return true
	}
	if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		// The namespace is going, and everything in it with it.
		r.log.Debug("namespace terminating; not retried", zap.Stringer("deployment", key), zap.Error(err))
		r.queue.Forget(key)
		return true
	}
	if ctx.Err() == nil {
		lvl := zapcore.WarnLevel
		if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
			// A cache behind the API server's state: retried, expected.
			lvl = zapcore.DebugLevel
		}
		r.log.Log(lvl, "routing reconcile failed; retrying", zap.Stringer("deployment", key), zap.Error(err))
		r.queue.AddRateLimited(key)
	}
	return true
}

// Route reports D's route in effect, as the informer cache shows the
// EndpointSlices of the Services routed to D ("activator" when any of them
// lists the activator), and the route last requested, initialised from
// the route in effect when first asked. A Deployment with no routed
// Service has the requested route in effect; RouteUnknown before anything
// is known.
func (r *Router) Route(key service.Key) (effective, requested plan.Route) {
	requested = r.requestedRoute(key)
	effective, ok := r.cachedRoute(key)
	if !ok {
		effective = requested
	}
	return effective, requested
}

// SetRoute records route as D's requested route and queues D's
// reconcile, which writes the EndpointSlices of D's routed Services; a
// failed write is retried by the queue. The route in effect (Route) shows
// the switch once the informers see it, and OnChange reports it. ctx is
// unused: nothing is written here.
func (r *Router) SetRoute(_ context.Context, key service.Key, route plan.Route) error {
	if route != plan.RouteActivator && route != plan.RoutePods {
		return fmt.Errorf("routing: route %v for %s; accepted: activator or pods", route, key)
	}
	r.mu.Lock()
	r.requested[key] = route
	r.mu.Unlock()
	r.queue.Add(key)
	r.notify(key)
	return nil
}

// ReadyPods returns the IPv4 addresses of D's ready pods, as the
// EndpointSlices of D's pods-Service list them: sorted, each once.
func (r *Router) ReadyPods(key service.Key) []string {
	eps, _ := r.podEndpoints(key)
	ips := make([]string, len(eps))
	for i, e := range eps {
		ips[i] = e.ip.String()
	}
	return ips
}

// ReadyPodNames returns the names of D's ready pods by their IPv4
// addresses, as the EndpointSlices of its pods-Service reference them; a
// ready address that references no pod is left out.
func (r *Router) ReadyPodNames(key service.Key) map[string]string {
	eps, _ := r.podEndpoints(key)
	names := make(map[string]string, len(eps))
	for _, e := range eps {
		if ref := e.targetRef; ref != nil && ref.Kind == "Pod" && ref.Name != "" && (ref.Namespace == "" || ref.Namespace == key.Namespace) {
			names[e.ip.String()] = ref.Name
		}
	}
	return names
}

// OnChange registers f, called with D's key whenever D's ready pods or
// route in effect change. It is called from informer goroutines and must
// not block.
func (r *Router) OnChange(f func(service.Key)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.onChange = append(r.onChange, f)
}

// requestedRoute returns D's requested route, taking it from the route in
// effect the first time one is known.
func (r *Router) requestedRoute(key service.Key) plan.Route {
	r.mu.Lock()
	req, ok := r.requested[key]
	r.mu.Unlock()
	if ok {
		return req
	}
	eff, ok := r.cachedRoute(key)
	if !ok {
		return plan.RouteUnknown
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if req, ok := r.requested[key]; ok {
		return req
	}
	r.requested[key] = eff
	return eff
}

// notify calls the OnChange callbacks when D's ready pods or route in
// effect differ from what they were last told.
func (r *Router) notify(key service.Key) {
	r.notifying.Lock()
	defer r.notifying.Unlock()
	now := observed{pods: strings.Join(r.ReadyPods(key), ",")}
	eff, ok := r.cachedRoute(key)
	r.mu.Lock()
	if !ok {
		eff = r.requested[key]
	}
	now.route = eff
	if r.seen[key] == now {
		r.mu.Unlock()
		return
	}
	if now == (observed{}) {
		delete(r.seen, key)
	} else {
		r.seen[key] = now
	}
	fs := r.onChange
	r.mu.Unlock()
	for _, f := range fs {
		f(key)
	}
}

// warn records a Warning event on obj, once for each message: a problem
// that lasts is not recorded again at every reconcile.
func (r *Router) warn(obj runtime.Object, uid types.UID, reason, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.mu.Lock()
	byReason := r.warned[uid]
	if byReason == nil {
		byReason = map[string]string{}
		r.warned[uid] = byReason
	}
	same := byReason[reason] == msg
	byReason[reason] = msg
	r.mu.Unlock()
	if same {
		return
	}
	r.log.Warn(msg, zap.String("reason", reason), zap.String("uid", string(uid)))
	if r.rec != nil {
		r.rec.Event(obj, corev1.EventTypeWarning, reason, msg)
	}
}

// unwarn forgets a recorded problem that is gone, so that it is recorded
// again if it comes back.
func (r *Router) unwarn(uid types.UID, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if byReason := r.warned[uid]; byReason != nil {
		delete(byReason, reason)
		if len(byReason) == 0 {
			delete(r.warned, uid)
		}
	}
}

func (r *Router) forget(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.warned, uid)
}

// Resync reconciles again every opted-in Deployment, and every one a
// route was requested for, which match accepts: after this replica took
// or gave up a bucket of services (Config.Owns).
func (r *Router) Resync(match func(service.Key) bool) {
	deps, err := r.deployments.List(everything)
	if err != nil {
		r.log.Warn("list Deployments", zap.Error(err))
	}
	for _, d := range deps {
		if k := kube.KeyOf(d); kube.OptedIn(d) && match(k) {
			r.queue.Add(k)
		}
	}
	r.mu.Lock()
	var keys []service.Key
	for k := range r.requested {
		if match(k) {
			keys = append(keys, k)
		}
	}
	r.mu.Unlock()
	if r.ports != nil {
		for _, k := range r.ports.Index.Keys() {
			if match(k) {
				keys = append(keys, k)
			}
		}
	}
	for _, k := range keys {
		r.queue.Add(k)
	}
}

// The event handlers only enqueue keys (and call OnChange); all the work
// is in sync.

func (r *Router) serviceChanged(obj any, deleted bool) {
	svc, ok := unwrap[*corev1.Service](obj)
	if !ok {
		return
	}
	if deleted {
		r.forget(svc.UID)
	}
	for _, key := range r.deploymentsFor(svc) {
		r.queue.Add(key)
	}
}

func (r *Router) sliceChanged(obj any, _ bool) {
	slice, ok := unwrap[*discoveryv1.EndpointSlice](obj)
	if !ok {
		return
	}
	name := slice.Labels[discoveryv1.LabelServiceName]
	if name == "" {
		return
	}
	if slice.Namespace == r.sysNS && name == kube.ActivatorService {
		r.activatorChanged()
		return
	}
	if isRouteSlice(slice) {
		if d := slice.Labels[kube.LabelDeployment]; d != "" {
			key := service.Key{Namespace: slice.Namespace, Name: d}
			r.queue.Add(key)
			r.notify(key)
		}
	}
	// A route slice waiting for Kubernetes' own slice of its Service.
	for _, s := range r.routeSlicesOf(slice.Namespace, name) {
		r.queue.Add(service.Key{Namespace: s.Namespace, Name: s.Labels[kube.LabelDeployment]})
	}
	svc, err := r.services.Services(slice.Namespace).Get(name)
	if err != nil {
		return
	}
	for _, key := range r.deploymentsFor(svc) {
		r.queue.Add(key)
	}
	if d, ok := podsServiceOf(svc); ok {
		r.notify(service.Key{Namespace: svc.Namespace, Name: d})
	}
}

// activatorChanged enqueues every opted-in Deployment: those routed to the
// activator get its new endpoints, and those that wait for an endpoint may
// now be routed.
func (r *Router) activatorChanged() {
	r.forgetActivators(r.activatorEndpoints(anyFamily).endpoints)
	deps, err := r.deployments.List(everything)
	if err != nil {
		return
	}
	for _, d := range deps {
		if kube.OptedIn(d) {
			r.queue.Add(kube.KeyOf(d))
		}
	}
	for _, s := range r.activatorRoutes() {
		r.queue.Add(service.Key{Namespace: s.Namespace, Name: s.Labels[kube.LabelDeployment]})
	}
}

func (r *Router) deploymentChanged(old, obj any) {
	d, ok := unwrap[*appsv1.Deployment](obj)
	if !ok {
		return
	}
	var prev *appsv1.Deployment
	if old != nil {
		prev, _ = unwrap[*appsv1.Deployment](old)
	}
	// Status updates (replicas, conditions) change nothing Swell routes by.
	if prev != nil && prev.ResourceVersion != d.ResourceVersion && prev.Generation == d.Generation &&
		maps.Equal(prev.Labels, d.Labels) && maps.Equal(prev.Annotations, d.Annotations) &&
		prev.DeletionTimestamp.Equal(d.DeletionTimestamp) {
		return
	}
	r.queue.Add(kube.KeyOf(d))
	// Whether a Service selects one Deployment's pods or several depends
	// on the pod template labels of every Deployment of the namespace:
	// the others are concerned only when d comes, goes or changes them,
	// not when it is scaled or rolled out.
	if prev != nil && maps.Equal(prev.Spec.Template.Labels, d.Spec.Template.Labels) {
		return
	}
	for _, dep := range []*appsv1.Deployment{prev, d} {
		if dep == nil {
			continue
		}
		for _, svc := range r.servicesSelecting(dep) {
			for _, key := range r.deploymentsFor(svc) {
				r.queue.Add(key)
			}
		}
	}
}

func (r *Router) deploymentDeleted(obj any) {
	d, ok := unwrap[*appsv1.Deployment](obj)
	if !ok {
		return
	}
	key := kube.KeyOf(d)
	r.mu.Lock()
	delete(r.requested, key)
	delete(r.seen, key)
	r.mu.Unlock()
	r.forget(d.UID)
	r.deploymentChanged(nil, d)
}

// unwrap returns obj, or the last state of a deleted object, as a T.
func unwrap[T any](obj any) (T, bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	t, ok := obj.(T)
	return t, ok
}
