package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestSwellScaleDownKeepsTheBusyPod: of three pods, the one that became
// ready last holds a long request; when the service scales down to one,
// Swell has the two idle pods removed, and the busy one stays and answers.
// Left to itself, the ReplicaSet would remove the busy one first: among
// ready pods it removes the one ready the shortest time (by powers of two
// of that time), and the busy pod was ready well under half as long as
// the others.
func TestSwellScaleDownKeepsTheBusyPod(t *testing.T) {
	t.Parallel()
	e := swellSetup(t)
	const name = "trim"
	e.createHello(swellHello(name, int32p(2), map[string]string{
		"autoscaling.swell.run/min-scale": "2",
		"autoscaling.swell.run/max-scale": "3",
	}))
	readyPods := func(ctx context.Context, n int) ([]corev1.Pod, error) {
		pods, err := e.pods(ctx, name)
		if err != nil {
			return nil, err
		}
		var ready []corev1.Pod
		for _, p := range pods {
			if isReady(&p) && p.DeletionTimestamp == nil {
				ready = append(ready, p)
			}
		}
		if len(ready) != n {
			return nil, fmt.Errorf("%d ready pods, want %d", len(ready), n)
		}
		return ready, nil
	}
	var first []corev1.Pod
	e.eventuallyWithin("2 ready pods of "+name, scaleTimeout, func(ctx context.Context) error {
		var err error
		first, err = readyPods(ctx, 2)
		return err
	})
	// The first two age; the third is ready under half as long as they
	// are, whenever the scale-down comes.
	oldest := slices.MinFunc(first, func(a, b corev1.Pod) int {
		return podReady(&a).LastTransitionTime.Compare(podReady(&b).LastTransitionTime.Time)
	})
	e.eventuallyWithin("the first pods of "+name+" ready for 30 s", time.Minute, func(context.Context) error {
		if age := time.Since(podReady(&oldest).LastTransitionTime.Time); age < 30*time.Second {
			return fmt.Errorf("ready for %v", age.Round(time.Second))
		}
		return nil
	})
	setMinScale := func(n int) {
		t.Helper()
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"autoscaling.swell.run/min-scale":"%d"}}}`, n)
		if _, err := e.cs.AppsV1().Deployments(e.ns).Patch(t.Context(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setMinScale(3)
	var busy corev1.Pod
	e.eventuallyWithin("a third ready pod of "+name, scaleTimeout, func(ctx context.Context) error {
		ready, err := readyPods(ctx, 3)
		if err != nil {
			return err
		}
		for _, p := range ready {
			if !slices.ContainsFunc(first, func(f corev1.Pod) bool { return f.UID == p.UID }) {
				busy = p
			}
		}
		return nil
	})
	t.Logf("pod %s (ready at %s, the others at %s or before) gets the long request", busy.Name,
		podReady(&busy).LastTransitionTime.Format("15:04:05"), podReady(&oldest).LastTransitionTime.Format("15:04:05"))

	// Straight to its queue-proxy, so that it is that pod's; the
	// autoscaler sees its load from the pod's stats.
	type answer struct {
		code int
		body string
		err  error
	}
	answered := make(chan answer, 1)
	go func() {
		url := "http://" + net.JoinHostPort(busy.Status.PodIP, fmt.Sprint(queueProxyPort)) + "/?sleep=45s"
		code, body, err := hostGet(t.Context(), url, name+"."+e.ns+".svc.cluster.local")
		answered <- answer{code, body, err}
	}()
	e.eventually("the long request in flight at pod "+busy.Name, func(ctx context.Context) error {
		_, body, err := get(ctx, podURL(&busy, "/stats"))
		if err != nil {
			return err
		}
		if !strings.Contains(body, `"inflight":1`) {
			return fmt.Errorf("stats %s", body)
		}
		return nil
	})

	// The autoscaler knows a pod's load only from its scrapes, a round a
	// second, of the report the queue-proxy makes each second
	// (docs/scaling.md, "Which pods go"). Until a scrape has seen the
	// request, the busy pod counts as idle, and as the newest it would go
	// first. The request is the service's only load: once the leader's
	// newest second of it reads a whole request in flight, its scrapes
	// have seen the busy pod busy.
	e.eventually("the leader's newest second of "+name+" reading the long request", func(ctx context.Context) error {
		s, err := e.leaderServiceStatus(ctx, name)
		if err != nil {
			return err
		}
		if s.LastSample == nil || s.LastSample.Concurrency < 0.99 {
			return fmt.Errorf("last sample %+v", s.LastSample)
		}
		return nil
	})
	setMinScale(1)
	e.eventuallyWithin(name+" down to its busy pod", scaleTimeout, func(ctx context.Context) error {
		p, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, busy.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.DeletionTimestamp != nil {
			t.Fatalf("the busy pod %s is being deleted (deletion cost %q)", p.Name, p.Annotations[corev1.PodDeletionCost])
		}
		if n, err := e.replicas(ctx, name); err != nil || n != 1 {
			return fmt.Errorf("scale %d %v", n, err)
		}
		pods, err := e.pods(ctx, name)
		if err != nil {
			return err
		}
		var others []string
		for _, o := range pods {
			if o.Name != busy.Name && o.DeletionTimestamp == nil {
				others = append(others, o.Name)
			}
		}
		if len(others) > 0 {
			return fmt.Errorf("pods %v still running", others)
		}
		return nil
	})
	select {
	case a := <-answered:
		t.Fatalf("the long request was answered before its time: %d %q %v", a.code, a.body, a.err)
	default:
	}
	a := <-answered
	if a.err != nil || a.code != http.StatusOK {
		t.Errorf("the long request at the busy pod: %d %q %v", a.code, a.body, a.err)
	}
	if _, err := e.cs.CoreV1().Pods(e.ns).Get(t.Context(), busy.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("the busy pod after its request: %v", err)
	}
}

// leaderServiceStatus reads the service's part of the /status of the
// autoscaler that leads it: the suite runs the autoscaler with one bucket
// outside TestSwellShardedBuckets.
func (e *env) leaderServiceStatus(ctx context.Context, name string) (shardService, error) {
	l, err := e.cs.CoordinationV1().Leases(swellNamespace).Get(ctx, leaseName, metav1.GetOptions{})
	if err != nil {
		return shardService{}, err
	}
	leader := ptrOr(l.Spec.HolderIdentity, "")
	if leader == "" {
		return shardService{}, fmt.Errorf("lease %s has no holder", leaseName)
	}
	st, err := e.replicaStatus(ctx, leader)
	if err != nil {
		return shardService{}, err
	}
	for _, s := range st.Services {
		if s.Namespace == e.ns && s.Name == name {
			return s, nil
		}
	}
	return shardService{}, fmt.Errorf("leader %s does not hold %s/%s", leader, e.ns, name)
}
