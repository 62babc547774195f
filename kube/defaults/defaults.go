// Package defaults keeps the cluster's autoscaling defaults, read from the
// defaults ConfigMap (kube.DefaultsConfigMap in Swell's namespace): the one
// store the webhooks, the controller and the autoscaler's tick share, so
// that an edit of the ConfigMap reaches every key at once.
//
// A ConfigMap that does not parse keeps the defaults in force; the problem
// is logged and recorded as a Warning Event on the ConfigMap, once per
// distinct message. Without the ConfigMap the built-in defaults apply.
package defaults

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/pkg/autoscaling"
)

// ReasonInvalidDefaults is the reason of the Warning Event recorded on a
// defaults ConfigMap that does not parse.
const ReasonInvalidDefaults = "InvalidDefaults"

// Config configures a Store. Client is required.
type Config struct {
	Client kubernetes.Interface
	// Namespace holds the ConfigMap (default kube.DefaultSystemNamespace).
	Namespace string
	// Recorder, when set, records the Warning Events on a bad ConfigMap.
	Recorder record.EventRecorder
	Logger   *zap.Logger
}

// Store holds the defaults in force. Current is safe from any goroutine;
// Run keeps the defaults up to date with the ConfigMap.
type Store struct {
	ns       string
	rec      record.EventRecorder
	log      *zap.Logger
	factory  informers.SharedInformerFactory
	lister   corelisters.ConfigMapNamespaceLister
	synced   cache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[struct{}]
	current  atomic.Pointer[autoscaling.Defaults]
	loaded   chan struct{} // closed once the first sync is done
	loadOnce sync.Once
	running  atomic.Bool

	// Owned by the one worker.
	invalid string // the message last recorded for a bad ConfigMap

	mu        sync.Mutex
	listeners []func(autoscaling.Defaults)
}

// New returns a Store holding the built-in defaults until Run loads the
// ConfigMap's.
func New(cfg Config) (*Store, error) {
	if cfg.Client == nil {
		return nil, errors.New("defaults: Config.Client is required")
	}
	if cfg.Namespace == "" {
		cfg.Namespace = kube.DefaultSystemNamespace
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	s := &Store{
		ns:     cfg.Namespace,
		rec:    cfg.Recorder,
		log:    cfg.Logger,
		loaded: make(chan struct{}),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[struct{}](),
			workqueue.TypedRateLimitingQueueConfig[struct{}]{Name: "swell_defaults"}),
	}
	d := autoscaling.DefaultDefaults()
	s.current.Store(&d)
	// Only the one ConfigMap: watching every ConfigMap of the namespace
	// would cost memory for nothing.
	s.factory = informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0,
		informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", kube.DefaultsConfigMap).String()
		}))
	inf := s.factory.Core().V1().ConfigMaps()
	s.lister = inf.Lister().ConfigMaps(cfg.Namespace)
	enqueue := func(any) { s.queue.Add(struct{}{}) }
	reg, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	})
	if err != nil {
		s.queue.ShutDown()
		return nil, fmt.Errorf("defaults: watch ConfigMap %s/%s: %w", cfg.Namespace, kube.DefaultsConfigMap, err)
	}
	s.synced = reg.HasSynced
	return s, nil
}

// Current returns the defaults in force.
func (s *Store) Current() autoscaling.Defaults { return *s.current.Load() }

// OnChange registers f, called with the new defaults after each change of
// the defaults in force, from the store's goroutine. f must not block.
// Register before Run.
func (s *Store) OnChange(f func(autoscaling.Defaults)) {
	s.mu.Lock()
	s.listeners = append(s.listeners, f)
	s.mu.Unlock()
}

// Loaded is closed once the ConfigMap (or its absence) has been read for
// the first time.
func (s *Store) Loaded() <-chan struct{} { return s.loaded }

// Run watches the ConfigMap and keeps the defaults in force until ctx
// ends. It may be called once.
func (s *Store) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("defaults: Run called more than once")
	}
	defer s.queue.ShutDown()
	s.factory.Start(ctx.Done())
	defer s.factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), s.synced) {
		return nil
	}
	s.queue.Add(struct{}{})
	go func() {
		<-ctx.Done()
		s.queue.ShutDown()
	}()
	for s.next() {
	}
	return nil
}

func (s *Store) next() bool {
	it, quit := s.queue.Get()
	if quit {
		return false
	}
	defer s.queue.Done(it)
	if err := s.sync(); err != nil {
		s.log.Warn("read the autoscaling defaults; retrying", zap.Error(err))
		s.queue.AddRateLimited(it)
		return true
	}
	s.queue.Forget(it)
	return true
}

// sync reads the ConfigMap from the cache and puts its defaults in force.
func (s *Store) sync() error {
	defer s.loadOnce.Do(func() { close(s.loaded) })
	d := autoscaling.DefaultDefaults()
	cm, err := s.lister.Get(kube.DefaultsConfigMap)
	switch {
	case apierrors.IsNotFound(err):
		cm = nil
	case err != nil:
		return fmt.Errorf("read ConfigMap %s/%s: %w", s.ns, kube.DefaultsConfigMap, err)
	default:
		if d, err = autoscaling.ParseDefaults(cm.Data); err != nil {
			// Retrying would not help; an edit of the ConfigMap will.
			if msg := err.Error(); msg != s.invalid {
				s.invalid = msg
				s.log.Warn("invalid autoscaling defaults; keeping the previous ones",
					zap.String("configMap", s.ns+"/"+kube.DefaultsConfigMap), zap.Error(err))
				if s.rec != nil {
					s.rec.Event(configMapRef(cm), corev1.EventTypeWarning, ReasonInvalidDefaults, msg)
				}
			}
			return nil
		}
	}
	s.invalid = ""
	if reflect.DeepEqual(d, s.Current()) {
		return nil
	}
	s.current.Store(&d)
	source := "ConfigMap " + s.ns + "/" + kube.DefaultsConfigMap
	if cm == nil {
		source = "built-in (no ConfigMap " + s.ns + "/" + kube.DefaultsConfigMap + ")"
	}
	s.log.Info("autoscaling defaults in force", zap.String("from", source))
	s.mu.Lock()
	listeners := s.listeners
	s.mu.Unlock()
	for _, f := range listeners {
		f(d)
	}
	return nil
}

func configMapRef(cm *corev1.ConfigMap) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "ConfigMap", APIVersion: "v1",
		Namespace: cm.Namespace, Name: cm.Name, UID: cm.UID, ResourceVersion: cm.ResourceVersion}
}
