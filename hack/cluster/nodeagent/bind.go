package nodeagent

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// binder plays the scheduler for a cluster of one Node: every pod without
// a node is bound to it, whatever its schedulerName.
type binder struct {
	client  kubernetes.Interface
	node    string
	log     *slog.Logger
	factory informers.SharedInformerFactory
	pods    corelisters.PodLister
	synced  cache.InformerSynced
	queue   workqueue.TypedRateLimitingInterface[string]
}

func newBinder(client kubernetes.Interface, node string, log *slog.Logger) *binder {
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", "").String()
	}))
	inf := f.Core().V1().Pods()
	return &binder{
		client:  client,
		node:    node,
		log:     log,
		factory: f,
		pods:    inf.Lister(),
		synced:  inf.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "binding"}),
	}
}

func (b *binder) start(ctx context.Context) error {
	enqueue := func(obj any) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			b.queue.Add(key)
		}
	}
	if _, err := b.factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return err
	}
	b.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), b.synced) {
		return fmt.Errorf("unscheduled pod informer: %w", ctx.Err())
	}
	return nil
}

func (b *binder) run(ctx context.Context) {
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				key, quit := b.queue.Get()
				if quit {
					return
				}
				if err := b.bind(ctx, key); err != nil {
					b.log.Warn("bind pod", "pod", key, "err", err)
					b.queue.AddRateLimited(key)
				} else {
					b.queue.Forget(key)
				}
				b.queue.Done(key)
			}
		})
	}
	<-ctx.Done()
	b.queue.ShutDown()
	wg.Wait()
	b.factory.Shutdown()
}

func (b *binder) bind(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := b.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil || len(pod.Spec.SchedulingGates) > 0 ||
		pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return nil
	}
	err = b.client.CoreV1().Pods(ns).Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: b.node},
	}, metav1.CreateOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone, or bound meanwhile
	}
	if err != nil {
		return fmt.Errorf("bind to %s: %w", b.node, err)
	}
	b.log.Debug("pod bound", "pod", key, "node", b.node)
	return nil
}
