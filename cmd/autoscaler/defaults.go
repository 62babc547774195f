package main

import (
	"sync"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/pkg/autoscaling"
)

// webhookDefaults keeps the cluster's autoscaling defaults for the
// webhooks, on every replica (the controller, which reports a bad
// ConfigMap, runs on the leader only). A ConfigMap that does not parse
// keeps the previous defaults.
type webhookDefaults struct {
	log *zap.Logger

	mu      sync.Mutex
	current autoscaling.Defaults
}

// newWebhookDefaults returns the defaults and the informer factory to
// start; it watches only the defaults ConfigMap.
func newWebhookDefaults(client kubernetes.Interface, namespace string, log *zap.Logger) (*webhookDefaults, informers.SharedInformerFactory) {
	w := &webhookDefaults{log: log, current: autoscaling.DefaultDefaults()}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", kube.DefaultsConfigMap).String()
		}))
	factory.Core().V1().ConfigMaps().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.set(obj) },
		UpdateFunc: func(_, obj any) { w.set(obj) },
		DeleteFunc: func(any) { w.store(autoscaling.DefaultDefaults()) },
	})
	return w, factory
}

func (w *webhookDefaults) set(obj any) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return
	}
	d, err := autoscaling.ParseDefaults(cm.Data)
	if err != nil {
		w.log.Warn("the defaults ConfigMap does not parse; the webhooks keep the previous defaults", zap.Error(err))
		return
	}
	w.store(d)
}

func (w *webhookDefaults) store(d autoscaling.Defaults) {
	w.mu.Lock()
	w.current = d
	w.mu.Unlock()
}

// Current returns the defaults now.
func (w *webhookDefaults) Current() autoscaling.Defaults {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.current
}
