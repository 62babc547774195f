package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/swell-run/swell/hack/cluster/netns"
)

// shardBuckets and shardReplicas are the division the sharding test runs:
// more buckets than replicas, so that they cannot split evenly.
const (
	shardBuckets  = 10
	shardReplicas = 3
	// tick is the autoscaler's tick interval in the suite (the default).
	tick = 2 * time.Second
)

// bucketOf is the bucket of the service ns/name out of n: FNV-1a 32 of its
// key, as pkg/shard computes it (worked out here apart, so that a change
// of the hash, which would split activators and autoscalers of different
// versions, fails this test too).
func bucketOf(ns, name string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(ns + "/" + name))
	return int(h.Sum32() % uint32(n))
}

func bucketLease(b, n int) string {
	if n == 1 {
		return leaseName
	}
	return fmt.Sprintf("%s-%d-of-%d", leaseName, b, n)
}

// TestSwellShardedBuckets runs the autoscaler divided into 10 buckets over
// 3 replicas: the buckets spread 4, 3, 3; each replica decides only the
// services of its buckets; a replica deleted under load has its buckets
// taken by the others, whose first decision for a moved service comes
// within a tick of the Lease's takeover, and the services keep scaling;
// the replica that replaces it gets its share back. It is not parallel: it
// changes the autoscaler for the whole cluster, and puts it back after.
func TestSwellShardedBuckets(t *testing.T) {
	e := swellSetup(t)
	// Put back whatever happens, before anything changes: the tests after
	// this one need the autoscaler as the suite installed it. Deferred
	// rather than a Cleanup, which runs after the test's context is
	// cancelled.
	defer e.setBuckets(1, 2)
	e.setBuckets(shardBuckets, shardReplicas)
	e.eventuallyWithin("the buckets spread over the replicas", 3*scaleTimeout, func(ctx context.Context) error {
		_, err := e.bucketHolders(ctx, true)
		return err
	})

	// Six services, always at one pod at least, so that every tick
	// decides each.
	var names []string
	for i := range 6 {
		name := "shard-" + strconv.Itoa(i)
		names = append(names, name)
		e.createHello(swellHello(name, nil, map[string]string{
			"autoscaling.swell.run/initial-scale": "1",
			"autoscaling.swell.run/min-scale":     "1",
			// Routed to the pods, not through the activators.
			"autoscaling.swell.run/target-burst-capacity": "0",
		}))
	}
	for _, name := range names {
		e.waitServingSwell(name, 1)
		e.waitProxied(name, "pods")
	}

	// Each replica decides exactly the services of the buckets it leads.
	holders, err := e.bucketHolders(t.Context(), true)
	if err != nil {
		t.Fatal(err)
	}
	e.eventually("each replica deciding the services of its buckets, and only them", func(ctx context.Context) error {
		want := map[string][]string{}
		for _, name := range names {
			h := holders[bucketOf(e.ns, name, shardBuckets)]
			want[h] = append(want[h], name)
		}
		for _, pod := range slices.Sorted(maps.Keys(countHolders(holders))) {
			st, err := e.replicaStatus(ctx, pod)
			if err != nil {
				return err
			}
			var got []string
			for _, s := range st.Services {
				if s.Namespace == e.ns && s.Decided {
					got = append(got, s.Name)
				}
			}
			slices.Sort(got)
			slices.Sort(want[pod])
			if !slices.Equal(got, want[pod]) {
				return fmt.Errorf("%s decides %v, want %v", pod, got, want[pod])
			}
		}
		return nil
	})

	// Each bucket's leader published itself, and every activator reports
	// to every replica (each leads a bucket).
	acts, err := activatorAddrs(t.Context(), e.cs)
	if err != nil {
		t.Fatal(err)
	}
	e.eventually("every activator connected to every replica", func(ctx context.Context) error {
		for b, h := range holders {
			p, err := e.cs.CoreV1().Pods(swellNamespace).Get(ctx, h, metav1.GetOptions{})
			if err != nil {
				return err
			}
			es, err := e.cs.DiscoveryV1().EndpointSlices(swellNamespace).Get(ctx, fmt.Sprintf("autoscaler-%d-of-%d", b, shardBuckets), metav1.GetOptions{})
			if err != nil {
				return err
			}
			if got := sliceIPs(es); !slices.Equal(got, []string{p.Status.PodIP}) {
				return fmt.Errorf("bucket %d's slice lists %v, want its leader %s at %s", b, got, h, p.Status.PodIP)
			}
		}
		for pod := range countHolders(holders) {
			st, err := e.replicaStatus(ctx, pod)
			if err != nil {
				return err
			}
			if len(st.Activators) != len(acts) {
				return fmt.Errorf("%s has activators %v connected, want %d", pod, st.Activators, len(acts))
			}
		}
		return nil
	})
	// A service at zero is woken through an activator, which pokes its
	// bucket's leader.
	e.createHello(swellHello("shard-cold", int32p(0), map[string]string{"autoscaling.swell.run/min-scale": "0"}))
	e.eventually("shard-cold routed to the activators", func(ctx context.Context) error {
		return e.routeIs(ctx, "shard-cold", "activator")
	})
	e.waitProxied("shard-cold", "activator")
	if code, body, err := e.viaService(t.Context(), "shard-cold", "/"); err != nil || code != http.StatusOK {
		t.Fatalf("GET shard-cold at zero (bucket %d, led by %s): %d %q %v", bucketOf(e.ns, "shard-cold", shardBuckets),
			holders[bucketOf(e.ns, "shard-cold", shardBuckets)], code, body, err)
	}

	// Under load (a GET every 50 ms at each service), the replica that
	// leads shard-0's bucket is deleted.
	loadCtx, stopLoad := context.WithCancel(t.Context())
	defer stopLoad()
	failed := make(chan string, 1024)
	for _, name := range names {
		go func() {
			tk := time.NewTicker(50 * time.Millisecond)
			defer tk.Stop()
			for {
				select {
				case <-loadCtx.Done():
					return
				case <-tk.C:
				}
				code, _, err := e.viaService(loadCtx, name, "/")
				if loadCtx.Err() == nil && (err != nil || code != http.StatusOK) {
					select {
					case failed <- fmt.Sprintf("%s: %d %v", name, code, err):
					default:
					}
				}
			}
		}()
	}
	moved := bucketOf(e.ns, names[0], shardBuckets)
	victim := holders[moved]
	var victimBuckets []int
	for b, h := range holders {
		if h == victim {
			victimBuckets = append(victimBuckets, b)
		}
	}
	t.Logf("buckets %v; deleting %s, which leads %v (shard-0 is in %d)", holders, victim, victimBuckets, moved)
	if err := e.cs.CoreV1().Pods(swellNamespace).Delete(t.Context(), victim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	took := map[int]time.Time{}
	newHolder := map[int]string{}
	e.eventuallyWithin("the deleted replica's buckets taken by the others", scaleTimeout, func(ctx context.Context) error {
		for _, b := range victimBuckets {
			l, err := e.cs.CoordinationV1().Leases(swellNamespace).Get(ctx, bucketLease(b, shardBuckets), metav1.GetOptions{})
			if err != nil {
				return err
			}
			h := ptrOr(l.Spec.HolderIdentity, "")
			if h == "" || h == victim || l.Spec.AcquireTime == nil {
				return fmt.Errorf("bucket %d held by %q", b, h)
			}
			took[b], newHolder[b] = l.Spec.AcquireTime.Time, h
		}
		return nil
	})
	t.Logf("taken over: %v", newHolder)

	// The new leader of shard-0's bucket decides it within a tick of
	// taking the Lease.
	var first time.Time
	e.eventually("shard-0 decided by its bucket's new leader", func(ctx context.Context) error {
		st, err := e.replicaStatus(ctx, newHolder[moved])
		if err != nil {
			return err
		}
		for _, s := range st.Services {
			if s.Namespace == e.ns && s.Name == names[0] && s.Decided {
				first = s.firstDecision()
				return nil
			}
		}
		return fmt.Errorf("%s has not decided %s yet", newHolder[moved], names[0])
	})
	gap := first.Sub(took[moved])
	t.Logf("shard-0: Lease taken at %s, first decision %v later", took[moved].Format(time.RFC3339Nano), gap.Round(time.Millisecond))
	// The Lease's times are in microseconds; the decision follows the
	// takeover, its Deployment read from the informer's cache.
	if gap > tick+500*time.Millisecond {
		t.Errorf("the first decision for shard-0 came %v after its bucket's Lease was taken; want within a tick (%v)\n%s",
			gap, tick, e.autoscalerLines(newHolder[moved], "bucket", names[0]))
	}

	// The services keep scaling: shard-0 asked for 2 pods gets them from
	// its bucket's new leader.
	patch := []byte(`{"metadata":{"annotations":{"autoscaling.swell.run/min-scale":"2"}}}`)
	if _, err := e.cs.AppsV1().Deployments(e.ns).Patch(t.Context(), names[0], types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.eventuallyWithin(names[0]+" scaled to 2 by its bucket's new leader", scaleTimeout, func(ctx context.Context) error {
		if n, err := e.replicas(ctx, names[0]); err != nil || n != 2 {
			return fmt.Errorf("scale %d %v, want 2", n, err)
		}
		return nil
	})

	// The replica that replaced the deleted one gets its share back.
	e.waitDeployment(swellNamespace, "autoscaler")
	e.eventuallyWithin("the buckets spread again over the three replicas", 3*scaleTimeout, func(ctx context.Context) error {
		_, err := e.bucketHolders(ctx, true)
		return err
	})
	stopLoad()
	close(failed)
	var lost []string
	for f := range failed {
		lost = append(lost, f)
	}
	if len(lost) > 0 {
		t.Errorf("%d requests failed while a replica's buckets moved, e.g. %s", len(lost), lost[0])
	}
}

// shardStatus is what the test reads of an autoscaler replica's /status.
type shardStatus struct {
	Time         time.Time      `json:"time"`
	Leading      *bool          `json:"leading"`
	TickInterval string         `json:"tickInterval"`
	Activators   []string       `json:"activators"`
	PodsPushing  int            `json:"podsPushing"`
	Services     []shardService `json:"services"`
}

type shardService struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	Decided   bool      `json:"decided"`
	Time      time.Time `json:"time"` // the latest decision's
	// LastSample is the newest second of the service's load collected.
	LastSample *struct {
		Time        time.Time `json:"time"`
		Concurrency float64   `json:"concurrency"`
		// Read is the pods the round read, Pushed those read from a push.
		Read   int `json:"read"`
		Pushed int `json:"pushed"`
	} `json:"lastSample"`
	Decisions []struct {
		Time time.Time `json:"time"`
	} `json:"decisions"`
}

// firstDecision is the earliest decision the status keeps (the first one
// is always kept).
func (s shardService) firstDecision() time.Time {
	t := s.Time
	for _, d := range s.Decisions {
		if d.Time.Before(t) {
			t = d.Time
		}
	}
	return t
}

func (e *env) replicaStatus(ctx context.Context, pod string) (shardStatus, error) {
	return replicaStatus(ctx, e.cs, pod)
}

// autoscalerStatusPort is where each autoscaler replica serves its
// /status: on its pod's loopback only (STATUS_PORT's default).
const autoscalerStatusPort = 8023

// replicaStatus reads the /status of the autoscaler pod as kubectl
// port-forward does: from inside the pod's network namespace, at
// 127.0.0.1, as the status listens on loopback only.
func replicaStatus(ctx context.Context, cs kubernetes.Interface, pod string) (shardStatus, error) {
	var st shardStatus
	p, err := cs.CoreV1().Pods(swellNamespace).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return st, err
	}
	pid, err := podProcess(p)
	if err != nil {
		return st, err
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy:             nil,
		DialContext:       netns.DialerAt(fmt.Sprintf("/proc/%d/ns/net", pid), p.Namespace+"/"+p.Name),
		DisableKeepAlives: true,
	}}
	url := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(autoscalerStatusPort)) + "/status"
	code, body, err := getWith(ctx, c, url)
	if err != nil || code != http.StatusOK {
		return st, fmt.Errorf("GET /status of %s: %d %v", pod, code, err)
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		return st, fmt.Errorf("status of %s %q: %w", pod, body, err)
	}
	return st, nil
}

// activatorsConnected reports, as an error, when an autoscaler replica
// that leads a bucket does not have every ready activator connected: the
// autoscaler holds a service at zero until an activator it hears from
// pokes it.
func activatorsConnected(ctx context.Context, cs kubernetes.Interface) error {
	ready, err := readyAutoscalers(ctx, cs)
	if err != nil {
		return err
	}
	leases, err := cs.CoordinationV1().Leases(swellNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	leaders := map[string]bool{}
	for _, l := range leases.Items {
		// A Lease of another number of buckets may linger, held by a
		// replica long gone.
		h := ptrOr(l.Spec.HolderIdentity, "")
		if (l.Name == leaseName || strings.HasPrefix(l.Name, leaseName+"-")) && slices.Contains(ready, h) {
			leaders[h] = true
		}
	}
	if len(leaders) == 0 {
		return fmt.Errorf("no ready autoscaler replica of %v leads", ready)
	}
	pods, err := cs.CoreV1().Pods(swellNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=swell-activator"})
	if err != nil {
		return err
	}
	var acts []string
	for i := range pods.Items {
		if p := &pods.Items[i]; p.DeletionTimestamp == nil && isReady(p) {
			acts = append(acts, p.Name)
		}
	}
	for _, leader := range slices.Sorted(maps.Keys(leaders)) {
		st, err := replicaStatus(ctx, cs, leader)
		if err != nil {
			return err
		}
		for _, a := range acts {
			if !slices.Contains(st.Activators, a) {
				return fmt.Errorf("autoscaler %s has activators %v connected, not yet %s", leader, st.Activators, a)
			}
		}
	}
	return nil
}

// bucketHolders reads every bucket's Lease: its holder, which must be a
// ready autoscaler pod. With balanced, the holders must also be every
// ready replica, each with ⌊n/r⌋ or ⌈n/r⌉ buckets.
func (e *env) bucketHolders(ctx context.Context, balanced bool) ([]string, error) {
	ready, err := readyAutoscalers(ctx, e.cs)
	if err != nil {
		return nil, err
	}
	holders := make([]string, shardBuckets)
	for b := range shardBuckets {
		l, err := e.cs.CoordinationV1().Leases(swellNamespace).Get(ctx, bucketLease(b, shardBuckets), metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		h := ptrOr(l.Spec.HolderIdentity, "")
		if !slices.Contains(ready, h) {
			return nil, fmt.Errorf("bucket %d held by %q, not a ready replica of %v", b, h, ready)
		}
		holders[b] = h
	}
	if balanced {
		counts := countHolders(holders)
		lo, hi := shardBuckets/len(ready), (shardBuckets+len(ready)-1)/len(ready)
		for _, r := range ready {
			if c := counts[r]; c < lo || c > hi {
				return nil, fmt.Errorf("buckets held %v: %s leads %d, want %d to %d", counts, r, c, lo, hi)
			}
		}
	}
	return holders, nil
}

func countHolders(holders []string) map[string]int {
	c := map[string]int{}
	for _, h := range holders {
		c[h]++
	}
	return c
}

func readyAutoscalers(ctx context.Context, cs kubernetes.Interface) ([]string, error) {
	pods, err := cs.CoreV1().Pods(swellNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=swell-autoscaler"})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				out = append(out, p.Name)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// setBuckets runs the autoscaler with BUCKETS=n and replicas replicas:
// scaled to zero first, as docs/kubernetes.md says to change the number of
// buckets, then back, and waits until every bucket has a leader and
// Swell is ready again.
func (e *env) setBuckets(n int, replicas int32) {
	e.t.Helper()
	ctx := e.t.Context()
	deps := e.cs.AppsV1().Deployments(swellNamespace)
	setScale := func(r int32) {
		e.t.Helper()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			s, err := deps.GetScale(ctx, "autoscaler", metav1.GetOptions{})
			if err != nil {
				return err
			}
			s.Spec.Replicas = r
			_, err = deps.UpdateScale(ctx, "autoscaler", s, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			e.t.Fatalf("scale the autoscaler to %d: %v", r, err)
		}
	}
	setScale(0)
	e.eventuallyWithin("the autoscaler at zero", 3*scaleTimeout, func(ctx context.Context) error {
		pods, err := e.cs.CoreV1().Pods(swellNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=swell-autoscaler"})
		if err != nil {
			return err
		}
		if len(pods.Items) > 0 {
			return fmt.Errorf("%d autoscaler pods left", len(pods.Items))
		}
		return nil
	})
	patch := fmt.Appendf(nil, `{"spec":{"template":{"spec":{"containers":[{"name":"autoscaler","env":[{"name":"BUCKETS","value":"%d"}]}]}}}}`, n)
	if _, err := deps.Patch(ctx, "autoscaler", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		e.t.Fatalf("set BUCKETS=%d: %v", n, err)
	}
	setScale(replicas)
	e.waitDeployment(swellNamespace, "autoscaler")
	e.eventuallyWithin(fmt.Sprintf("a leader for each of %d buckets, and Swell ready", n), 3*scaleTimeout, func(ctx context.Context) error {
		ready, err := readyAutoscalers(ctx, e.cs)
		if err != nil {
			return err
		}
		for b := range n {
			l, err := e.cs.CoordinationV1().Leases(swellNamespace).Get(ctx, bucketLease(b, n), metav1.GetOptions{})
			if err != nil {
				return err
			}
			if h := ptrOr(l.Spec.HolderIdentity, ""); !slices.Contains(ready, h) {
				return fmt.Errorf("lease %s held by %q", l.Name, h)
			}
		}
		return swellReady(ctx, e.cs)
	})
}

// autoscalerLines are the lines of an autoscaler pod's log that hold any of
// words, for failures.
func (e *env) autoscalerLines(pod string, words ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := e.cs.CoreV1().Pods(swellNamespace).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	logs, err := e.podLogs(ctx, p, "autoscaler", false)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for line := range strings.Lines(logs) {
		if slices.ContainsFunc(words, func(w string) bool { return strings.Contains(line, w) }) {
			b.WriteString(line)
		}
	}
	return b.String()
}
