package controller

import (
	"context"
	"fmt"
	"math"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/swell-run/swell/autoscaler/plan"
	"github.com/swell-run/swell/autoscaler/scaler"
	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/pkg/service"
)

var _ scaler.Backend = (*Controller)(nil)

// deployment returns key's Deployment from the cache if it is opted in, or
// an error wrapping scaler.ErrNotFound.
func (c *Controller) deployment(key service.Key) (*appsv1.Deployment, error) {
	d, err := c.deployments.Deployments(key.Namespace).Get(key.Name)
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("deployment %s: %w", key, scaler.ErrNotFound)
	case err != nil:
		return nil, fmt.Errorf("deployment %s: %w", key, err)
	case !OptedIn(d):
		return nil, fmt.Errorf("deployment %s is not opted in (label %s=true on it and its pod template): %w",
			key, kube.LabelEnabled, scaler.ErrNotFound)
	}
	return d, nil
}

// Status implements scaler.Backend from the caches alone: Desired is the
// Deployment's spec.replicas (1 when unset, as Kubernetes defaults it),
// Ready its ready pods and the routes the Router's.
func (c *Controller) Status(_ context.Context, key service.Key) (plan.Status, error) {
	d, err := c.deployment(key)
	if err != nil {
		return plan.Status{}, err
	}
	return c.status(key, d), nil
}

func (c *Controller) status(key service.Key, d *appsv1.Deployment) plan.Status {
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
func (c *Controller) SetScale(ctx context.Context, key service.Key, n int) error {
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
func (c *Controller) SetRoute(ctx context.Context, key service.Key, r plan.Route) error {
	return c.router.SetRoute(ctx, key, r)
}
