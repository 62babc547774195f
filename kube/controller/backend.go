package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"

	"github.com/swell-run/swell/autoscaler/plan"
	"github.com/swell-run/swell/autoscaler/scaler"
	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/pkg/service"
)

var (
	_ scaler.Backend = (*Backend)(nil)
	_ scaler.Trimmer = (*Backend)(nil)
)

// Backend is the autoscaling loop's scaler.Backend on Kubernetes: it reads
// a Deployment's state from the informers' caches, scales it through the
// scale subresource and routes it through the Router. It records what the
// loop and the executor do to each Deployment as Events on it (OnEvent,
// OnNotable) and tells whoever keeps the Deployment's status annotation
// (OnChange). The loop is built on it, and the Controller after the loop:
// nothing is joined after construction.
type Backend struct {
	client      kubernetes.Interface
	deployments appslisters.DeploymentLister
	router      Router
	recorder    record.EventRecorder
	clock       clock.PassiveClock

	mu        sync.Mutex
	listeners []func(service.Key)
	// memories are what the loop kept (Keep), for the status annotation.
	memories map[service.Key][]byte
}

// BackendConfig configures a Backend; every field but Clock is required.
type BackendConfig struct {
	Client kubernetes.Interface
	// Informers watches every namespace; NewBackend registers its
	// Deployment informer, and the caller starts it.
	Informers informers.SharedInformerFactory
	Router    Router
	// Recorder records the Events on Deployments.
	Recorder record.EventRecorder
	// Clock dates the pods' deletion costs (default the real clock).
	Clock clock.PassiveClock
}

// NewBackend returns a Backend and registers its informer.
func NewBackend(cfg BackendConfig) (*Backend, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("kubernetes backend: BackendConfig.Client is required")
	case cfg.Informers == nil:
		return nil, errors.New("kubernetes backend: BackendConfig.Informers is required")
	case cfg.Router == nil:
		return nil, errors.New("kubernetes backend: BackendConfig.Router is required")
	case cfg.Recorder == nil:
		return nil, errors.New("kubernetes backend: BackendConfig.Recorder is required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Backend{
		client:      cfg.Client,
		deployments: cfg.Informers.Apps().V1().Deployments().Lister(),
		router:      cfg.Router,
		recorder:    cfg.Recorder,
		clock:       cfg.Clock,
	}, nil
}

// OnChange registers f, called with a Deployment's key after the loop or
// the executor did something to it worth showing in its status. It is
// called from the loop's and the executor's goroutines and must not block.
func (c *Backend) OnChange(f func(service.Key)) {
	c.mu.Lock()
	c.listeners = append(c.listeners, f)
	c.mu.Unlock()
}

func (c *Backend) changed(key service.Key) {
	c.mu.Lock()
	listeners := c.listeners
	c.mu.Unlock()
	for _, f := range listeners {
		f(key)
	}
}

// deployment returns key's Deployment from the cache if it is opted in, or
// an error wrapping scaler.ErrNotFound.
func (c *Backend) deployment(key service.Key) (*appsv1.Deployment, error) {
	d, err := c.deployments.Deployments(key.Namespace).Get(key.Name)
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("deployment %s: %w", key, scaler.ErrNotFound)
	case err != nil:
		return nil, fmt.Errorf("deployment %s: %w", key, err)
	case !kube.OptedIn(d):
		return nil, fmt.Errorf("deployment %s is not opted in (label %s=true on it and its pod template): %w",
			key, kube.LabelEnabled, scaler.ErrNotFound)
	}
	return d, nil
}

// Status implements scaler.Backend from the caches alone: Desired is the
// Deployment's spec.replicas (1 when unset, as Kubernetes defaults it),
// Ready its ready pods and the routes the Router's.
func (c *Backend) Status(_ context.Context, key service.Key) (plan.Status, error) {
	d, err := c.deployment(key)
	if err != nil {
		return plan.Status{}, err
	}
	return c.status(key, d), nil
}

func (c *Backend) status(key service.Key, d *appsv1.Deployment) plan.Status {
	st := plan.Status{Desired: 1, Ready: len(c.router.ReadyPods(key))}
	if d.Spec.Replicas != nil {
		st.Desired = int(*d.Spec.Replicas)
	}
	st.Route, st.Requested = c.router.Route(key)
	return st
}

// SetScale implements scaler.Backend through the Deployment's scale
// subresource, which changes nothing else of it. Only an opted-in
// Deployment in the cache is scaled. A conflicting write is retried on a
// fresh read; a Deployment already at n is not written.
func (c *Backend) SetScale(ctx context.Context, key service.Key, n int) error {
	if n < 0 || n > math.MaxInt32 {
		return fmt.Errorf("scale deployment %s to %d: out of range; accepted: 0 to %d", key, n, math.MaxInt32)
	}
	if _, err := c.deployment(key); err != nil {
		return fmt.Errorf("scale: %w", err)
	}
	deployments := c.client.AppsV1().Deployments(key.Namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := deployments.GetScale(ctx, key.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if s.Spec.Replicas == int32(n) {
			return nil
		}
		s.Spec.Replicas = int32(n)
		_, err = deployments.UpdateScale(ctx, key.Name, s, metav1.UpdateOptions{FieldManager: fieldManager})
		return err
	})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("scale deployment %s to %d: %w: %w", key, n, scaler.ErrNotFound, err)
	case err != nil:
		return fmt.Errorf("scale deployment %s to %d: %w", key, n, err)
	}
	return nil
}

// SetRoute implements scaler.Backend: the Router switches the route.
func (c *Backend) SetRoute(ctx context.Context, key service.Key, r plan.Route) error {
	return c.router.SetRoute(ctx, key, r)
}

// costEpoch is where deletion costs count down from (deletionCost).
var costEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// deletionCost is the pod-deletion-cost PreferRemoval writes at now: minus
// the seconds since costEpoch, so that the latest choice is always the
// lowest cost. A pod marked for a scale-down that never came (a scale-up
// overtook it) keeps its older, higher cost, and the next choice goes
// before it; no mark ever needs clearing. Unmarked pods cost 0 and go
// last. It stays negative and in int32 for 68 years.
func deletionCost(now time.Time) int32 {
	s := int64(now.Sub(costEpoch) / time.Second)
	return int32(-min(max(s, 1), math.MaxInt32))
}

// PreferRemoval implements scaler.Trimmer: it gives the pods at addrs
// (the loop's "ip:port") the lowest pod-deletion-cost, which the
// ReplicaSet removes first when the scale-down that follows reaches it.
// A Deployment whose pod template sets the annotation itself keeps its
// own costs: Swell writes nothing then. A pod gone meanwhile is skipped.
func (c *Backend) PreferRemoval(ctx context.Context, key service.Key, addrs []string) error {
	d, err := c.deployment(key)
	if err != nil {
		return fmt.Errorf("prefer removal: %w", err)
	}
	if _, own := d.Spec.Template.Annotations[corev1.PodDeletionCost]; own {
		return nil
	}
	names := c.router.ReadyPodNames(key)
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		corev1.PodDeletionCost: strconv.Itoa(int(deletionCost(c.clock.Now()))),
	}}})
	if err != nil {
		return err
	}
	pods := c.client.CoreV1().Pods(key.Namespace)
	var errs []error
	for _, a := range addrs {
		host, _, err := net.SplitHostPort(a)
		if err != nil {
			host = a
		}
		name, ok := names[host]
		if !ok {
			continue
		}
		_, err = pods.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: fieldManager})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("pod %s/%s: %w", key.Namespace, name, err))
		}
	}
	return errors.Join(errs...)
}
