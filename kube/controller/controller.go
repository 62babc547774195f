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
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/swell-run/swell/autoscaler"
	"github.com/swell-run/swell/autoscaler/plan"
	"github.com/swell-run/swell/kube"
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

// Config configures a Controller. Client, Informers, Router and Recorder are
// required.
type Config struct {
	Client kubernetes.Interface
	// Informers watches every namespace; New registers its Deployment
	// informer. The defaults ConfigMap is watched by an informer of the
	// controller's own, on SystemNamespace only.
	Informers informers.SharedInformerFactory
	// SystemNamespace holds the defaults ConfigMap (default
	// kube.DefaultSystemNamespace).
	SystemNamespace string
	Router          Router
	// Recorder records the Events on Deployments and on the defaults
	// ConfigMap.
	Recorder record.EventRecorder
	// StatsPort is the queue-proxy's metrics port: the loop scrapes
	// "<pod IP>:<StatsPort>" (default network.DefaultQueueMetricsPort).
	StatsPort int
	// Clock drives the work queue's retry delays (default the real clock).
	Clock  clock.WithTicker
	Logger *zap.Logger
}

// Controller is the autoscaler's Kubernetes side. It is the loop's
// scaler.Backend (Status, SetScale, SetRoute) and the source of its
// services: a rate-limited work queue of Deployment keys, each reconciled
// by reading the Deployment from the informer's cache and telling Scaling
// about it.
type Controller struct {
	client      kubernetes.Interface
	informers   informers.SharedInformerFactory
	cmFactory   informers.SharedInformerFactory
	deployments appslisters.DeploymentLister
	configMaps  corelisters.ConfigMapNamespaceLister
	synced      []cache.DoneChecker
	systemNS    string
	router      Router
	recorder    record.EventRecorder
	statsPort   int
	log         *zap.Logger
	queue       workqueue.TypedRateLimitingInterface[item]
	running     atomic.Bool

	scaling atomic.Pointer[Scaling]

	// mu guards the cluster defaults and the map of Deployments; a
	// Deployment's own state is touched only by the worker holding its key
	// (the queue never hands a key to two workers at once).
	mu              sync.Mutex
	defaults        autoscaling.Defaults
	defaultsLoaded  bool
	defaultsInvalid string // the message last recorded for a bad ConfigMap
	states          map[service.Key]*state

	// afterSync, if set (by tests), is called after each queue item is
	// processed.
	afterSync func(item, error)
}

// item is one unit of work: a Deployment's key, or the defaults ConfigMap.
type item struct {
	key      service.Key
	defaults bool
}

// defaultsItem stands for the defaults ConfigMap in the queue.
var defaultsItem = item{defaults: true}

// String returns "namespace/name", or "defaults" for the ConfigMap.
func (it item) String() string {
	if it.defaults {
		return "defaults"
	}
	return it.key.String()
}

// state is what the controller remembers of one opted-in Deployment.
type state struct {
	// spec is the spec last given to Upsert, valid when upserted.
	spec     autoscaling.Spec
	upserted bool
	// invalid is the message last recorded for invalid annotations.
	invalid string
	// status is the status annotation last written, at Deployment
	// resourceVersion statusRV: until the cache shows a newer version, it
	// is not written again.
	status   string
	statusRV string
}

// Reasons of the Events the controller records.
const (
	ReasonScaledUp           = "ScaledUp"
	ReasonScaledDown         = "ScaledDown"
	ReasonScaledToZero       = "ScaledToZero"
	ReasonRouteActivator     = "RouteActivator"
	ReasonRoutePods          = "RoutePods"
	ReasonScaleFailed        = "ScaleFailed"
	ReasonPanicStarted       = "PanicStarted"
	ReasonPanicEnded         = "PanicEnded"
	ReasonInvalidAnnotations = "InvalidAnnotations"
	ReasonInvalidDefaults    = "InvalidDefaults"
)

// fieldManager names the controller's writes in managedFields.
const fieldManager = "swell-autoscaler"

// New returns a Controller and registers its informers: Run starts them.
func New(cfg Config) (*Controller, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("kubernetes controller: Config.Client is required")
	case cfg.Informers == nil:
		return nil, errors.New("kubernetes controller: Config.Informers is required")
	case cfg.Router == nil:
		return nil, errors.New("kubernetes controller: Config.Router is required")
	case cfg.Recorder == nil:
		return nil, errors.New("kubernetes controller: Config.Recorder is required")
	case cfg.StatsPort < 0 || cfg.StatsPort > 65535:
		return nil, fmt.Errorf("kubernetes controller: stats port %d is out of range; accepted: 1 to 65535, or 0 for %d",
			cfg.StatsPort, network.DefaultQueueMetricsPort)
	}
	if cfg.SystemNamespace == "" {
		cfg.SystemNamespace = kube.DefaultSystemNamespace
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
		systemNS:  cfg.SystemNamespace,
		router:    cfg.Router,
		recorder:  cfg.Recorder,
		statsPort: cfg.StatsPort,
		log:       cfg.Logger,
		defaults:  autoscaling.DefaultDefaults(),
		states:    make(map[service.Key]*state),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[item](),
			workqueue.TypedRateLimitingQueueConfig[item]{Name: "swell_autoscaler_deployments", Clock: cfg.Clock}),
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

	// Only the one ConfigMap, in the system namespace: watching every
	// ConfigMap in the cluster would cost memory for nothing.
	c.cmFactory = informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0,
		informers.WithNamespace(cfg.SystemNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", kube.DefaultsConfigMap).String()
		}))
	cmInf := c.cmFactory.Core().V1().ConfigMaps()
	c.configMaps = cmInf.Lister().ConfigMaps(cfg.SystemNamespace)
	cmReg, err := cmInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.configMapChanged,
		UpdateFunc: func(_, obj any) { c.configMapChanged(obj) },
		DeleteFunc: c.configMapChanged,
	})
	if err != nil {
		c.queue.ShutDown()
		return nil, fmt.Errorf("kubernetes controller: watch ConfigMap %s/%s: %w", cfg.SystemNamespace, kube.DefaultsConfigMap, err)
	}
	c.synced = []cache.DoneChecker{dReg.HasSyncedChecker(), cmReg.HasSyncedChecker()}

	cfg.Router.OnChange(c.routeChanged)
	return c, nil
}

// SetScaling sets the loop the controller feeds. It must be called before
// Run: the loop is built with the controller as its backend, so it comes
// second.
func (c *Controller) SetScaling(s Scaling) { c.scaling.Store(&s) }

func (c *Controller) getScaling() Scaling {
	if p := c.scaling.Load(); p != nil {
		return *p
	}
	return nil
}

// OptedIn reports whether a Deployment and its pod template both carry
// kube.LabelEnabled "true".
func OptedIn(d *appsv1.Deployment) bool {
	return d.Labels[kube.LabelEnabled] == "true" && d.Spec.Template.Labels[kube.LabelEnabled] == "true"
}

// Run starts the informers New registered (starting an already started
// factory is harmless), waits for their caches, loads the cluster defaults,
// and reconciles Deployments on workers goroutines until ctx ends. It
// returns nil when ctx ends; Run may be called once.
func (c *Controller) Run(ctx context.Context, workers int) error {
	if workers < 1 {
		return fmt.Errorf("kubernetes controller: %d workers; accepted: at least 1", workers)
	}
	if c.getScaling() == nil {
		return errors.New("kubernetes controller: SetScaling must be called before Run")
	}
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("kubernetes controller: Run called more than once")
	}
	defer c.queue.ShutDown()
	c.informers.Start(ctx.Done())
	c.cmFactory.Start(ctx.Done())
	defer c.cmFactory.Shutdown()
	if !cache.WaitFor(ctx, "", c.synced...) {
		return nil
	}
	// Before any Deployment is parsed, so none is parsed with the built-in
	// defaults when the cluster has its own.
	if err := c.syncDefaults(); err != nil {
		c.log.Warn("load the autoscaling defaults", zap.Error(err))
		c.queue.AddRateLimited(defaultsItem)
	}
	c.log.Info("kubernetes controller running", zap.Int("workers", workers),
		zap.String("defaults", c.systemNS+"/"+kube.DefaultsConfigMap))

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
	it, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(it)
	var err error
	if it.defaults {
		err = c.syncDefaults()
	} else {
		err = c.syncDeployment(ctx, it.key)
	}
	switch {
	case err == nil:
		c.queue.Forget(it)
	case ctx.Err() != nil:
		// Stopping: the error is most likely ours.
	default:
		lvl := zap.WarnLevel
		if apierrors.IsConflict(err) {
			lvl = zap.DebugLevel // the cache was behind; the retry reads it again
		}
		c.log.Log(lvl, "reconcile failed, retrying", zap.Stringer("item", it), zap.Error(err))
		c.queue.AddRateLimited(it)
	}
	if c.afterSync != nil {
		c.afterSync(it, err)
	}
	return true
}

// enqueue schedules key's reconcile.
func (c *Controller) enqueue(key service.Key) { c.queue.Add(item{key: key}) }

func (c *Controller) tracked(key service.Key) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.states[key]
	return ok
}

func keyOf(d *appsv1.Deployment) service.Key {
	return service.Key{Namespace: d.Namespace, Name: d.Name}
}

// deploymentChanged enqueues a Deployment that is opted in, was, or is
// known: the many Deployments that are not Swell's cost nothing more.
func (c *Controller) deploymentChanged(old, obj any) {
	d, ok := obj.(*appsv1.Deployment)
	if !ok {
		return
	}
	key := keyOf(d)
	if o, ok := old.(*appsv1.Deployment); OptedIn(d) || ok && OptedIn(o) || c.tracked(key) {
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
	if d, ok := obj.(*appsv1.Deployment); ok && (OptedIn(d) || c.tracked(keyOf(d))) {
		c.enqueue(keyOf(d))
	}
}

func (c *Controller) configMapChanged(obj any) {
	if cm, ok := obj.(*corev1.ConfigMap); ok && cm.Name != kube.DefaultsConfigMap {
		return
	}
	c.queue.Add(defaultsItem)
}

// routeChanged is the Router's OnChange: the Deployment's status and the
// executor's view of it are out of date.
func (c *Controller) routeChanged(key service.Key) {
	c.enqueue(key)
	if s := c.getScaling(); s != nil {
		s.Resync(key)
	}
}

// syncDefaults loads the cluster defaults from the ConfigMap (the built-in
// ones when it is absent) and, when they changed, re-reconciles every
// opted-in Deployment. A bad ConfigMap keeps the defaults in force.
func (c *Controller) syncDefaults() error {
	d := autoscaling.DefaultDefaults()
	cm, err := c.configMaps.Get(kube.DefaultsConfigMap)
	switch {
	case apierrors.IsNotFound(err):
		cm, err = nil, nil
	case err != nil:
		return fmt.Errorf("read ConfigMap %s/%s: %w", c.systemNS, kube.DefaultsConfigMap, err)
	default:
		d, err = autoscaling.ParseDefaults(cm.Data)
	}
	if err != nil {
		msg := err.Error()
		c.mu.Lock()
		dup := msg == c.defaultsInvalid
		c.defaultsInvalid = msg
		c.mu.Unlock()
		if !dup {
			c.log.Warn("invalid autoscaling defaults; keeping the previous ones",
				zap.String("configMap", c.systemNS+"/"+kube.DefaultsConfigMap), zap.Error(err))
			c.recorder.Event(configMapRef(cm), corev1.EventTypeWarning, ReasonInvalidDefaults, msg)
		}
		return nil // retrying would not help: a change to the ConfigMap will
	}

	c.mu.Lock()
	changed := !c.defaultsLoaded || !reflect.DeepEqual(d, c.defaults)
	c.defaults, c.defaultsLoaded, c.defaultsInvalid = d, true, ""
	c.mu.Unlock()
	if !changed {
		return nil
	}
	source := "ConfigMap " + c.systemNS + "/" + kube.DefaultsConfigMap
	if cm == nil {
		source = "built-in (no ConfigMap " + c.systemNS + "/" + kube.DefaultsConfigMap + ")"
	}
	c.log.Info("autoscaling defaults loaded", zap.String("from", source))
	list, err := c.deployments.List(labels.SelectorFromSet(labels.Set{kube.LabelEnabled: "true"}))
	if err != nil {
		return fmt.Errorf("list opted-in Deployments: %w", err)
	}
	for _, dep := range list {
		if OptedIn(dep) {
			c.enqueue(keyOf(dep))
		}
	}
	return nil
}

func configMapRef(cm *corev1.ConfigMap) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "ConfigMap", APIVersion: "v1",
		Namespace: cm.Namespace, Name: cm.Name, UID: cm.UID, ResourceVersion: cm.ResourceVersion}
}

func deploymentRef(d *appsv1.Deployment) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Deployment", APIVersion: "apps/v1",
		Namespace: d.Namespace, Name: d.Name, UID: d.UID, ResourceVersion: d.ResourceVersion}
}

// syncDeployment reconciles one Deployment: an opted-in one is given to
// the loop with its spec and ready pods, and its status annotation is
// brought up to date; any other is removed from the loop.
func (c *Controller) syncDeployment(ctx context.Context, key service.Key) error {
	sc := c.getScaling()
	d, err := c.deployments.Deployments(key.Namespace).Get(key.Name)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("read deployment %s: %w", key, err)
	}
	if err != nil || !OptedIn(d) {
		c.mu.Lock()
		st := c.states[key]
		delete(c.states, key)
		c.mu.Unlock()
		if st != nil && st.upserted {
			c.log.Info("deployment no longer autoscaled", zap.Stringer("deployment", key))
		}
		sc.Remove(key)
		return nil
	}

	c.mu.Lock()
	st := c.states[key]
	if st == nil {
		st = &state{}
		c.states[key] = st
	}
	defaults := c.defaults
	c.mu.Unlock()

	spec, err := parse(d.Annotations, defaults)
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

// parse reads a Deployment's spec, reporting every problem at once.
func parse(annotations map[string]string, d autoscaling.Defaults) (autoscaling.Spec, error) {
	cc, ccErr := autoscaling.ParseContainerConcurrency(annotations)
	spec, err := autoscaling.Parse(annotations, cc, d)
	if ccErr != nil || err != nil {
		return autoscaling.Spec{}, errors.Join(ccErr, err)
	}
	return spec, nil
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
