package controller

import (
	"context"
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/swell-run/swell/autoscaler"
	"github.com/swell-run/swell/autoscaler/plan"
	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/pkg/service"
)

// StatusAnnotation is the JSON of the kube.AnnotationStatus annotation on
// an autoscaled Deployment. It holds no time, so that it changes only when
// the autoscaler's view of the Deployment does.
type StatusAnnotation struct {
	// Ready is the Deployment's ready pods now.
	Ready int `json:"ready"`
	// Desired is the replica count the latest decision asked for;
	// Recommended is the policy's recommendation before bounds and
	// scale-to-zero gating.
	Desired     int `json:"desired"`
	Recommended int `json:"recommended"`
	// Panic says the latest decision was in panic mode.
	Panic bool `json:"panic"`
	// ActivatorInPath says the activator is in the path and staying there
	// (plan.Status.ActivatorInPath).
	ActivatorInPath bool `json:"activatorInPath"`
	// Route is the route in effect, "activator" or "pods"; absent while
	// the Deployment has not been routed.
	Route string `json:"route,omitempty"`
	// Reason is the latest decision's reason.
	Reason string `json:"reason"`
	// Memory is what the service's policy has learned (base64 of
	// decider.Decider.Memory, well under 1 KB), kept here so that it
	// survives an autoscaler restart and a leader change; absent for a
	// policy that learns nothing.
	Memory string `json:"memory,omitempty"`
}

func statusAnnotation(ss autoscaler.ServiceStatus, st plan.Status) StatusAnnotation {
	a := StatusAnnotation{
		Ready:           st.Ready,
		Desired:         ss.Scale,
		Recommended:     ss.Desired,
		Panic:           ss.PanicMode,
		ActivatorInPath: st.ActivatorInPath(),
		Reason:          ss.Reason,
	}
	if st.Route != plan.RouteUnknown {
		a.Route = st.Route.String()
	}
	return a
}

// writeStatus brings d's status annotation up to date with a metadata
// merge patch, which does not start a rollout. Nothing is written when the
// content is unchanged, and nothing before the loop's first decision for
// the Deployment.
func (c *Controller) writeStatus(ctx context.Context, sc Scaling, key service.Key, d *appsv1.Deployment, st *state) error {
	ss, ok := sc.ServiceStatus(key)
	if !ok || !ss.Decided {
		// Not yet taken in by the loop (Upsert is applied by its
		// goroutine), or not decided for: the first decision may change
		// nothing and so report nothing (OnNotable, OnEvent). Look again
		// after a tick.
		c.queue.AddAfter(key, autoscaler.DefaultTickInterval)
		return nil
	}
	sa := statusAnnotation(ss, c.backend.status(key, d))
	sa.Memory = c.backend.memoryText(key, d)
	b, err := json.Marshal(sa)
	if err != nil {
		return fmt.Errorf("status annotation of deployment %s: %w", key, err)
	}
	text := string(b)
	if d.Annotations[kube.AnnotationStatus] == text || st.status == text && st.statusRV == d.ResourceVersion {
		return nil
	}
	meta := map[string]any{"annotations": map[string]string{kube.AnnotationStatus: text}}
	if d.ResourceVersion != "" {
		// Only onto the Deployment as read: one that has opted out since
		// fails with a conflict instead of being written.
		meta["resourceVersion"] = d.ResourceVersion
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return fmt.Errorf("status annotation of deployment %s: %w", key, err)
	}
	_, err = c.client.AppsV1().Deployments(key.Namespace).Patch(ctx, key.Name, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: fieldManager})
	if err != nil {
		return fmt.Errorf("write status annotation of deployment %s: %w", key, err)
	}
	st.status, st.statusRV = text, d.ResourceVersion
	return nil
}
