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

// statusAnnotation is the status annotation of a Deployment whose loop
// status is ss and backend status st. Every figure is finite, so that it
// encodes.
func statusAnnotation(ss autoscaler.ServiceStatus, st plan.Status) kube.Status {
	a := kube.Status{
		Ready:           st.Ready,
		Desired:         ss.Scale,
		Recommended:     ss.Desired,
		Panic:           ss.PanicMode,
		ActivatorInPath: st.ActivatorInPath(),
		Reason:          ss.Reason,
		Class:           ss.Class,
		Metric:          ss.Metric,
		TargetPerPod:    autoscaler.Finite(ss.TargetPerPod),
		Loads: kube.StatusLoads{
			Time:                ss.Time,
			Load:                autoscaler.Finite(ss.Load()),
			Stable:              autoscaler.Finite(ss.Stable),
			Panic:               autoscaler.Finite(ss.DecisionStatus.Panic),
			ExcessBurstCapacity: autoscaler.Finite(ss.ExcessBurstCapacity),
			Queued:              ss.ActivatorPending,
		},
	}
	if st.Route != plan.RouteUnknown {
		a.Route = st.Route.String()
	}
	return a
}

// sameStatus reports whether the annotation text says what a says, as far
// as writing goes: the loads are left out, so that they alone never cost a
// write; and an annotation from before the policy fields were written is
// not rewritten only to add them (after an upgrade, a leader would
// otherwise patch every Deployment at once, ahead of its scale writes).
func sameStatus(text string, a kube.Status) bool {
	if text == "" || len(text) > 64<<10 {
		return false
	}
	var old kube.Status
	if json.Unmarshal([]byte(text), &old) != nil {
		return false
	}
	if old.Class == "" && old.Metric == "" && old.TargetPerPod == 0 {
		old.Class, old.Metric, old.TargetPerPod = a.Class, a.Metric, a.TargetPerPod
	}
	old.Loads, a.Loads = kube.StatusLoads{}, kube.StatusLoads{}
	return old == a
}

// writeStatus brings d's status annotation up to date with a metadata
// merge patch, which does not start a rollout. Nothing is written when the
// content is unchanged but for the loads (sameStatus), and nothing before
// the loop's first decision for the Deployment.
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
	if sameStatus(d.Annotations[kube.AnnotationStatus], sa) || sameStatus(st.status, sa) && st.statusRV == d.ResourceVersion {
		return nil
	}
	b, err := json.Marshal(sa)
	if err != nil {
		return fmt.Errorf("status annotation of deployment %s: %w", key, err)
	}
	text := string(b)
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
