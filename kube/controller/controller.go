// Package controller is the autoscaler's Kubernetes side: it feeds the
// autoscaling loop with the opted-in Deployments and their parsed specs,
// scales them through the scale subresource, and reports what the loop does
// on each Deployment as Events and a status annotation. Routing a
// Deployment's Services is a Router's job (package kube/routing).
// docs/kubernetes-controller.md describes it.
package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/swell-run/swell/autoscaler"
	"github.com/swell-run/swell/autoscaler/plan"
	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/kube/defaults"
	"github.com/swell-run/swell/kube/inject"
	"github.com/swell-run/swell/pkg/autoscaling"
	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/service"
)

// Router is the routing reconciler (package kube/routing
// implements it): it knows a Deployment's ready pods and where its
// Services' traffic goes.
type Router interface {
	// Route returns the route in effect and the route last asked for.
	Route(key service.Key) (effective, requested plan.Route)
	// SetRoute asks for key's traffic to go through route.
	SetRoute(ctx context.Context, key service.Key, route plan.Route) error
	// ReadyPods returns the IPs of key's ready pods, sorted.
	ReadyPods(key service.Key) []string
	// ReadyPodNames returns the names of key's ready pods by IP.
	ReadyPodNames(key service.Key) map[string]string
	// OnChange installs f, called with a Deployment's key when its ready
	// pods or the route in effect changed.
	OnChange(f func(service.Key))
}

// Scaling is what the controller tells the autoscaling loop;
// *autoscaler.Autoscaler implements it.
type Scaling interface {
	Upsert(service.Key, autoscaling.Spec)
	SetPods(service.Key, []string)
	Remove(service.Key)
	Resync(service.Key)
	ServiceStatus(service.Key) (autoscaler.ServiceStatus, bool)
}

var _ Scaling = (*autoscaler.Autoscaler)(nil)

// Config configures a Controller. Every field but StatsPort, Clock and
// Logger is required.
type Config struct {
	Client kubernetes.Interface
	// Informers watches every namespace; New registers its Deployment
	// informer, and Run starts it.
	Informers informers.SharedInformerFactory
	Router    Router
	// Backend is the loop's backend, whose changes the controller shows
	// in each Deployment's status annotation.
	Backend *Backend
	// Scaling is the loop the controller feeds.
	Scaling Scaling
	// Defaults are the cluster's autoscaling defaults, which every spec is
	// parsed against; a change re-reconciles every opted-in Deployment.
	Defaults *defaults.Store
	// Recorder records the Events on Deployments.
	Recorder record.EventRecorder
	// StatsPort is the queue-proxy's metrics port: the loop scrapes
	// "<pod IP>:<StatsPort>" (default network.DefaultQueueMetricsPort).
	StatsPort int
	// Owns, if set, says which Deployments this replica autoscales: those
	// of the buckets of services it leads (package kube/buckets). Others
	// are left out of the loop, and taken out when they leave. Nil: all.
	Owns func(service.Key) bool
	// Clock drives the work queue's retry delays (default the real clock).
	Clock  clock.WithTicker
	Logger *zap.Logger
}

// Controller feeds the autoscaling loop with the opted-in Deployments: a
// rate-limited work queue of Deployment keys, each reconciled by reading
// the Deployment from the informer's cache, telling Scaling about it and
// bringing its status annotation up to date.
type Controller struct {
	client      kubernetes.Interface
	informers   informers.SharedInformerFactory
	deployments appslisters.DeploymentLister
	synced      cache.DoneChecker
	router      Router
	backend     *Backend
	scaling     Scaling
	defaults    *defaults.Store
	recorder    record.EventRecorder
	statsPort   int
	owns        func(service.Key) bool
	log         *zap.Logger
	queue       workqueue.TypedRateLimitingInterface[service.Key]
	running     atomic.Bool

	// mu guards the map of Deployments; a Deployment's own state is
	// touched only by the worker holding its key (the queue never hands a
	// key to two workers at once).
	mu     sync.Mutex
	states map[service.Key]*state
}

// state is what the controller remembers of one opted-in Deployment.
type state struct {
	// spec is the spec last given to Upsert, valid when upserted.
	spec     autoscaling.Spec
	upserted bool
	// invalid is the message last recorded for invalid annotations or an
	// invalid name.
	invalid string
	// status is the status annotation last written, at Deployment
	// resourceVersion statusRV: until the cache shows a newer version, it
	// is not written again.
	status   string
	statusRV string
}

// Reasons of the Events the controller and the Backend record.
const (
	ReasonScaledUp           = "ScaledUp"
	ReasonScaledDown         = "ScaledDown"
	ReasonScaledToZero       = "ScaledToZero"
	ReasonRouteActivator     = "RouteActivator"
	ReasonRoutePods          = "RoutePods"
	ReasonScaleFailed        = "ScaleFailed"
	ReasonPanicStarted       = "PanicStarted"
	ReasonPanicEnded         = "PanicEnded"
	ReasonGaugeUnreadable    = "GaugeUnreadable"
	ReasonGaugeReadable      = "GaugeReadable"
	ReasonInvalidAnnotations = "InvalidAnnotations"
	ReasonInvalidName        = "InvalidName"
)

// fieldManager names the controller's writes in managedFields.
const fieldManager = "swell-autoscaler"

// New returns a Controller and registers its informer: Run starts it.
func New(cfg Config) (*Controller, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("kubernetes controller: Config.Client is required")
	case cfg.Informers == nil:
		return nil, errors.New("kubernetes controller: Config.Informers is required")
	case cfg.Router == nil:
		return nil, errors.New("kubernetes controller: Config.Router is required")
	case cfg.Backend == nil:
		return nil, errors.New("kubernetes controller: Config.Backend is required")
	case cfg.Scaling == nil:
		return nil, errors.New("kubernetes controller: Config.Scaling is required")
	case cfg.Defaults == nil:
		return nil, errors.New("kubernetes controller: Config.Defaults is required")
	case cfg.Recorder == nil:
		return nil, errors.New("kubernetes controller: Config.Recorder is required")
	case cfg.StatsPort < 0 || cfg.StatsPort > 65535:
		return nil, fmt.Errorf("kubernetes controller: stats port %d is out of range; accepted: 1 to 65535, or 0 for %d",
			cfg.StatsPort, network.DefaultQueueMetricsPort)
	}
	if cfg.StatsPort == 0 {
		cfg.StatsPort = network.DefaultQueueMetricsPort
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	c := &Controller{
		client:    cfg.Client,
		informers: cfg.Informers,
		router:    cfg.Router,
		backend:   cfg.Backend,
		scaling:   cfg.Scaling,
		defaults:  cfg.Defaults,
		recorder:  cfg.Recorder,
		statsPort: cfg.StatsPort,
		owns:      cfg.Owns,
		log:       cfg.Logger,
		states:    make(map[service.Key]*state),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[service.Key](),
			workqueue.TypedRateLimitingQueueConfig[service.Key]{Name: "swell_autoscaler_deployments", Clock: cfg.Clock}),
	}

	dInf := cfg.Informers.Apps().V1().Deployments()
	c.deployments = dInf.Lister()
	dReg, err := dInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.deploymentChanged(nil, obj) },
		UpdateFunc: c.deploymentChanged,
		DeleteFunc: c.deploymentDeleted,
	})
	if err != nil {
		c.queue.ShutDown()
		return nil, fmt.Errorf("kubernetes controller: watch Deployments: %w", err)
	}
	c.synced = dReg.HasSyncedChecker()

	cfg.Router.OnChange(c.routeChanged)
	cfg.Backend.OnChange(c.enqueue)
	cfg.Defaults.OnChange(c.defaultsChanged)
	return c, nil
}

// Run starts the informers New registered (starting an already started
// factory is harmless), waits for their caches and for the defaults, and
// reconciles Deployments on workers goroutines until ctx ends. It returns
// nil when ctx ends; Run may be called once.
func (c *Controller) Run(ctx context.Context, workers int) error {
	if workers < 1 {
		return fmt.Errorf("kubernetes controller: %d workers; accepted: at least 1", workers)
	}
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("kubernetes controller: Run called more than once")
	}
	defer c.queue.ShutDown()
	c.informers.Start(ctx.Done())
	if !cache.WaitFor(ctx, "", c.synced) {
		return nil
	}
	// Before any Deployment is parsed, so none is parsed with the built-in
	// defaults when the cluster has its own.
	select {
	case <-c.defaults.Loaded():
	case <-ctx.Done():
		return nil
	}
	c.log.Info("kubernetes controller running", zap.Int("workers", workers))

	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for c.processNext(ctx) {
			}
		})
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	return nil
}

func (c *Controller) processNext(ctx context.Context) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)
	if c.owns != nil && !c.owns(key) {
		c.release(key)
		c.queue.Forget(key)
		return true
	}
	err := c.syncDeployment(ctx, key)
	switch {
	case err == nil:
		c.queue.Forget(key)
	case ctx.Err() != nil:
		// Stopping: the error is most likely ours.
	default:
		lvl := zap.WarnLevel
		if apierrors.IsConflict(err) {
			lvl = zap.DebugLevel // the cache was behind; the retry reads it again
		}
		c.log.Log(lvl, "reconcile failed, retrying", zap.Stringer("deployment", key), zap.Error(err))
		c.queue.AddRateLimited(key)
	}
	return true
}

// release takes key out of the loop, as a Deployment no longer opted in,
// leaving the Deployment as it is: another replica autoscales it now.
func (c *Controller) release(key service.Key) {
	c.mu.Lock()
	st := c.states[key]
	delete(c.states, key)
	c.mu.Unlock()
	if st == nil {
		return
	}
	c.log.Debug("deployment left to the replica that leads its bucket", zap.Stringer("deployment", key))
	c.scaling.Remove(key)
	c.backend.forget(key)
}

// Resync reconciles again every opted-in or tracked Deployment which
// match accepts: after this replica took or gave up a bucket of services
// (Config.Owns), so that the bucket's Deployments join or leave its loop.
// A Deployment that joins is resumed at its running scale.
func (c *Controller) Resync(match func(service.Key) bool) {
	list, err := c.deployments.List(labels.SelectorFromSet(labels.Set{kube.LabelEnabled: "true"}))
	if err != nil {
		c.log.Warn("list opted-in Deployments", zap.Error(err))
	}
	for _, d := range list {
		if k := kube.KeyOf(d); kube.OptedIn(d) && match(k) {
			c.enqueue(k)
		}
	}
	c.mu.Lock()
	var tracked []service.Key
	for k := range c.states {
		if match(k) {
			tracked = append(tracked, k)
		}
	}
	c.mu.Unlock()
	for _, k := range tracked {
		c.enqueue(k)
	}
}

// enqueue schedules key's reconcile.
func (c *Controller) enqueue(key service.Key) { c.queue.Add(key) }

func (c *Controller) tracked(key service.Key) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.states[key]
	return ok
}

// deploymentChanged enqueues a Deployment that is opted in, was, or is
// known: the many Deployments that are not Swell's cost nothing more.
func (c *Controller) deploymentChanged(old, obj any) {
	d, ok := obj.(*appsv1.Deployment)
	if !ok {
		return
	}
	key := kube.KeyOf(d)
	if o, ok := old.(*appsv1.Deployment); kube.OptedIn(d) || ok && kube.OptedIn(o) || c.tracked(key) {
		c.enqueue(key)
	}
}

func (c *Controller) deploymentDeleted(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		// The watch missed the delete; the last state seen may be stale.
		if key, err := service.Parse(t.Key); err == nil && c.tracked(key) {
			c.enqueue(key)
			return
		}
		obj = t.Obj
	}
	if d, ok := obj.(*appsv1.Deployment); ok && (kube.OptedIn(d) || c.tracked(kube.KeyOf(d))) {
		c.enqueue(kube.KeyOf(d))
	}
}

// routeChanged is the Router's OnChange: the Deployment's status and the
// executor's view of it are out of date.
func (c *Controller) routeChanged(key service.Key) {
	c.enqueue(key)
	c.scaling.Resync(key)
}

// defaultsChanged is the defaults store's OnChange: every opted-in
// Deployment is parsed again against the new defaults.
func (c *Controller) defaultsChanged(autoscaling.Defaults) {
	list, err := c.deployments.List(labels.SelectorFromSet(labels.Set{kube.LabelEnabled: "true"}))
	if err != nil {
		c.log.Warn("list opted-in Deployments after a change of the defaults", zap.Error(err))
		return
	}
	for _, d := range list {
		if kube.OptedIn(d) {
			c.enqueue(kube.KeyOf(d))
		}
	}
}

func deploymentRef(d *appsv1.Deployment) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Deployment", APIVersion: "apps/v1",
		Namespace: d.Namespace, Name: d.Name, UID: d.UID, ResourceVersion: d.ResourceVersion}
}

// syncDeployment reconciles one Deployment: an opted-in one is given to
// the loop with its spec and ready pods, and its status annotation is
// brought up to date; any other is removed from the loop.
func (c *Controller) syncDeployment(ctx context.Context, key service.Key) error {
	sc := c.scaling
	d, err := c.deployments.Deployments(key.Namespace).Get(key.Name)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("read deployment %s: %w", key, err)
	}
	if err != nil || !kube.OptedIn(d) {
		c.mu.Lock()
		st := c.states[key]
		delete(c.states, key)
		c.mu.Unlock()
		if st != nil && st.upserted {
			c.log.Info("deployment no longer autoscaled", zap.Stringer("deployment", key))
		}
		sc.Remove(key)
		c.backend.forget(key)
		return nil
	}

	c.mu.Lock()
	st := c.states[key]
	if st == nil {
		st = &state{}
		c.states[key] = st
	}
	c.mu.Unlock()

	// A name Swell cannot carry as a key (a dot, more than 63 characters)
	// could not be routed or reported: say so once, and leave it alone.
	if _, err := service.New(key.Namespace, key.Name); err != nil {
		if msg := err.Error(); msg != st.invalid {
			st.invalid = msg
			c.log.Warn("deployment not autoscaled: its name cannot be a service key", zap.Stringer("deployment", key), zap.Error(err))
			c.recorder.Event(deploymentRef(d), corev1.EventTypeWarning, ReasonInvalidName, "not autoscaled: "+msg)
		}
		return nil
	}

	spec, err := parse(d, c.defaults.Current())
	if err != nil {
		if msg := err.Error(); msg != st.invalid {
			st.invalid = msg
			kept := "not autoscaled until they are fixed"
			if st.upserted {
				kept = "keeping the previous autoscaling settings"
			}
			c.log.Warn("invalid autoscaling annotations; "+kept, zap.Stringer("deployment", key), zap.Error(err))
			c.recorder.Event(deploymentRef(d), corev1.EventTypeWarning, ReasonInvalidAnnotations, msg)
		}
		if !st.upserted {
			return nil
		}
	} else {
		st.invalid = ""
		if !st.upserted || !reflect.DeepEqual(spec, st.spec) {
			sc.Upsert(key, spec)
			st.spec, st.upserted = spec, true
		}
	}
	sc.SetPods(key, c.podAddrs(key))
	return c.writeStatus(ctx, sc, key, d, st)
}

// parse reads a Deployment's spec, reporting every problem at once: its
// annotations, and the app container's requests that a percentage
// cpu-target or memory-target is taken of.
func parse(d *appsv1.Deployment, defs autoscaling.Defaults) (autoscaling.Spec, error) {
	cc, ccErr := autoscaling.ParseContainerConcurrency(d.Annotations)
	spec, err := autoscaling.Parse(d.Annotations, cc, defs)
	if ccErr != nil || err != nil {
		return autoscaling.Spec{}, errors.Join(ccErr, err)
	}
	var cpu, memory float64
	tpl := &d.Spec.Template.Spec
	app, appErr := inject.AppContainer(tpl, d.Annotations[inject.AnnotationContainer])
	if appErr == nil {
		cpu, memory = inject.Requests(&tpl.Containers[app])
	}
	spec, err = spec.WithRequests(cpu, memory)
	if err != nil && appErr != nil {
		// The requests are missing because the app is not known, which
		// says more than "it has none".
		return autoscaling.Spec{}, fmt.Errorf("a percentage cpu-target or memory-target needs the app container's requests: %w", appErr)
	}
	return spec, err
}

// PodAddr is the pods' push connections' resolver
// (collector.PodResolver): a connection from remote is the pod at that
// address if it is one of svc's ready pods, as the collector scrapes
// them, and its stats address is the one the collector lists it at; the
// address the pod claims is not read. An address that is no ready pod of
// svc, or that svc does not opt into Swell, is refused.
func (c *Controller) PodAddr(svc service.Key, remote netip.AddrPort, _ string) (string, bool) {
	ip := remote.Addr().Unmap()
	if !ip.IsValid() {
		return "", false
	}
	for _, p := range c.router.ReadyPods(svc) {
		if a, err := netip.ParseAddr(p); err == nil && a.Unmap() == ip {
			return net.JoinHostPort(p, strconv.Itoa(c.statsPort)), true
		}
	}
	return "", false
}

// podAddrs are the stats addresses of key's ready pods.
func (c *Controller) podAddrs(key service.Key) []string {
	ips := c.router.ReadyPods(key)
	addrs := make([]string, len(ips))
	port := strconv.Itoa(c.statsPort)
	for i, ip := range ips {
		addrs[i] = net.JoinHostPort(ip, port)
	}
	return addrs
}
