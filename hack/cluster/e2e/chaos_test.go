package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The chaos suite's knobs, from the environment (`make chaos` sets them).
const (
	// chaosEnv turns the suite on; it is skipped otherwise, being long.
	chaosEnv = "SWELL_CHAOS"
	// chaosReportEnv names a file the suite writes its Markdown table to.
	chaosReportEnv = "SWELL_CHAOS_REPORT"
	// chaosRepeatEnv says how many times each fault is caused (default 2).
	chaosRepeatEnv = "SWELL_CHAOS_REPEAT"
	// chaosFaultsEnv, if set, picks the faults caused: those whose name
	// holds one of its comma-separated words (to try one fault at a time).
	chaosFaultsEnv = "SWELL_CHAOS_FAULTS"
	// kubeletDirEnv is the kubelet's root directory (swell-cluster e2e
	// sets it), where the activators' token volumes are.
	kubeletDirEnv = "SWELL_KUBELET_DIR"
)

// requestClass is one kind of request of the chaos load, sent open loop at
// its own rate.
type requestClass struct {
	name   string
	method string
	path   string
	body   []byte
	rate   float64 // per second
}

// chaosLoad is the steady load every fault runs under: mostly short GETs,
// POSTs with a body (which nobody may retry once they may have reached the
// app), and 40-second GETs that outlast every fault's recovery.
var chaosLoad = []requestClass{
	{name: "GET 20 ms", method: http.MethodGet, path: "/?sleep=20ms", rate: 150},
	{name: "POST 50 ms", method: http.MethodPost, path: "/?sleep=50ms", body: bytes.Repeat([]byte("x"), 1024), rate: 20},
	{name: "GET 40 s", method: http.MethodGet, path: "/?sleep=40s", rate: 0.2},
}

// outcome is what came of one request.
type outcome struct {
	phase   string
	code    int    // 0: no answer
	reason  string // Swell-Reason of a Swell error
	err     string // why there was no answer
	latency time.Duration
}

// chaosTally keeps every request's outcome.
type chaosTally struct {
	mu       sync.Mutex
	phase    string
	outcomes []outcome
	wg       sync.WaitGroup
}

func (c *chaosTally) setPhase(p string) {
	c.mu.Lock()
	c.phase = p
	c.mu.Unlock()
}

func (c *chaosTally) currentPhase() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.phase
}

func (c *chaosTally) add(o outcome) {
	c.mu.Lock()
	c.outcomes = append(c.outcomes, o)
	c.mu.Unlock()
}

// chaosClient sends the load: connections are kept, as clients of a
// Service keep theirs, so a fault finds requests on old connections too.
var chaosClient = &http.Client{
	Transport: &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 200,
		IdleConnTimeout:     90 * time.Second,
	},
	Timeout: 2 * time.Minute,
}

// TestChaos runs a steady open-loop load at a service's ClusterIP while it
// causes one fault at a time, each repeated, and counts every request:
// answered 2xx, answered with a Swell error (by reason), or lost (no
// answer: a reset, a timeout). It writes the table to SWELL_CHAOS_REPORT
// and fails if a request was lost or answered with an error Swell does not
// document. Run it with `make chaos`; it is skipped otherwise.
func TestChaos(t *testing.T) {
	if os.Getenv(chaosEnv) == "" {
		t.Skipf("the chaos suite runs with `make chaos` (%s=1)", chaosEnv)
	}
	repeat := 2
	if v := os.Getenv(chaosRepeatEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a count of at least 1", chaosRepeatEnv, v)
		}
		repeat = n
	}
	e := swellSetup(t)
	const name = "chaos"
	e.createHello(swellHello(name, int32p(3), map[string]string{
		"autoscaling.swell.run/initial-scale":         "3",
		"autoscaling.swell.run/min-scale":             "0",
		"autoscaling.swell.run/max-scale":             "8",
		"autoscaling.swell.run/target":                "4",
		"swell.run/container-concurrency":             "10",
		"autoscaling.swell.run/target-burst-capacity": "4",
	}))
	e.waitProxied(name, "")
	base, err := e.serviceURL(t.Context(), name, "")
	if err != nil {
		t.Fatal(err)
	}
	host := name + "." + e.ns + ".svc.cluster.local"

	tally := &chaosTally{phase: "baseline"}
	loadCtx, stopLoad := context.WithCancel(t.Context())
	var paused atomic.Bool
	var senders sync.WaitGroup
	for _, class := range chaosLoad {
		senders.Go(func() { sendClass(loadCtx, tally, class, base, host, &paused) })
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			stopLoad()
			senders.Wait()
			tally.wg.Wait()
		}
	}
	defer stop()

	phase := func(name string, f func()) {
		t.Helper()
		tally.setPhase(name)
		start := time.Now()
		f()
		t.Logf("phase %q took %v", name, time.Since(start).Round(time.Second))
	}
	settle := func(d time.Duration) {
		select {
		case <-time.After(d):
		case <-t.Context().Done():
		}
	}

	// The 40-second requests take that long to reach their steady number
	// in flight, and the autoscaler as long to size the service for them:
	// what comes of the warm-up is not counted.
	phase("warm-up", func() { settle(60 * time.Second) })
	phase("baseline", func() { settle(20 * time.Second) })
	type fault struct {
		name  string
		cause func()
	}
	faults := []fault{
		{"autoscaler leader killed (SIGKILL)", func() { e.killLeader(true) }},
		{"autoscaler leader deleted gracefully", func() { e.killLeader(false) }},
		{"an activator deleted", func() { e.deleteOne(swellNamespace, "app.kubernetes.io/name=swell-activator", "activator") }},
		{"activators rolled", func() { e.roll(swellNamespace, "activator") }},
		{"an app pod deleted", func() { e.deleteOne(e.ns, "app="+name, name) }},
		{"app rolled (new env)", func() { e.roll(e.ns, name) }},
		{"activators cut from the autoscaler for 30 s", func() { e.cutActivators(30 * time.Second) }},
		{"activators' tokens rotated, connections reset", func() { e.rotateActivatorTokens() }},
		{"scale 0 → N → 0, load stopped and resumed", func() {
			paused.Store(true)
			e.eventuallyWithin(name+" at zero", 3*scaleTimeout, func(ctx context.Context) error {
				if n, err := e.replicas(ctx, name); err != nil || n != 0 {
					return fmt.Errorf("scale %d %v", n, err)
				}
				return nil
			})
			paused.Store(false)
		}},
	}
	if only := os.Getenv(chaosFaultsEnv); only != "" {
		faults = slices.DeleteFunc(faults, func(f fault) bool {
			return !slices.ContainsFunc(strings.Split(only, ","), func(w string) bool { return w != "" && strings.Contains(f.name, w) })
		})
		if len(faults) == 0 {
			t.Fatalf("%s=%q names none of the faults", chaosFaultsEnv, only)
		}
	}
	for _, f := range faults {
		for i := 1; i <= repeat; i++ {
			phase(f.name, func() {
				f.cause()
				// The load goes on a while after recovery, so that what the
				// fault left behind shows.
				settle(15 * time.Second)
			})
		}
	}
	stop()

	table, bad := chaosTable(tally.outcomes, func() []string {
		names := []string{"baseline"}
		for _, f := range faults {
			names = append(names, f.name)
		}
		return names
	}())
	t.Logf("chaos results:\n%s", table)
	if path := os.Getenv(chaosReportEnv); path != "" {
		if err := os.WriteFile(path, []byte(table), 0o644); err != nil {
			t.Errorf("write the report: %v", err)
		}
	}
	for _, b := range bad {
		t.Error(b)
	}
}

// sendClass sends class's requests open loop until ctx ends, none while
// paused.
func sendClass(ctx context.Context, tally *chaosTally, class requestClass, base, host string, paused *atomic.Bool) {
	every := time.Duration(float64(time.Second) / class.rate)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if paused.Load() {
				continue
			}
			phase := tally.currentPhase()
			tally.wg.Go(func() { tally.add(chaosRequest(ctx, class, base, host, phase)) })
		}
	}
}

// chaosRequest sends one request and says what came of it. A request the
// suite itself cut short (its end) counts as answered: it was not lost.
func chaosRequest(ctx context.Context, class requestClass, base, host, phase string) outcome {
	o := outcome{phase: phase}
	var body io.Reader
	if class.body != nil {
		body = bytes.NewReader(class.body)
	}
	// The suite's own end does not cut requests short: they finish.
	req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), class.method, base+class.path, body)
	if err != nil {
		o.err = err.Error()
		return o
	}
	req.Host = host
	start := time.Now()
	res, err := chaosClient.Do(req)
	if err != nil {
		o.err = err.Error()
		return o
	}
	_, err = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	o.latency = time.Since(start)
	if err != nil {
		o.err = "body: " + err.Error()
		return o
	}
	o.code = res.StatusCode
	if res.StatusCode >= 300 {
		o.reason = res.Header.Get("Swell-Reason")
	}
	return o
}

// swellReasons are the reasons Swell documents for the errors it answers
// with (docs/activator.md, docs/queue-proxy.md), with their status.
var swellReasons = map[string]int{
	"queue-full":      http.StatusServiceUnavailable,
	"service-gone":    http.StatusServiceUnavailable,
	"draining":        http.StatusServiceUnavailable,
	"not-ready":       http.StatusServiceUnavailable,
	"app-unreachable": http.StatusBadGateway,
	"request-timeout": http.StatusGatewayTimeout,
}

// chaosTable renders the outcomes by phase, in order, as Markdown, and
// lists what breaks the suite's promise: a lost request, or an error with
// no documented reason.
func chaosTable(outcomes []outcome, phases []string) (string, []string) {
	type row struct {
		sent, ok, lost int
		reasons        map[string]int
		latencies      []time.Duration
		lostWhy        map[string]int
	}
	rows := map[string]*row{}
	for _, p := range phases {
		rows[p] = &row{reasons: map[string]int{}, lostWhy: map[string]int{}}
	}
	var bad []string
	for _, o := range outcomes {
		r := rows[o.phase]
		if r == nil {
			continue
		}
		r.sent++
		switch {
		case o.code == 0:
			r.lost++
			why := o.err
			if i := strings.LastIndex(why, ": "); i >= 0 {
				why = why[i+2:]
			}
			r.lostWhy[why]++
		case o.code < 300:
			r.ok++
			r.latencies = append(r.latencies, o.latency)
		default:
			key := fmt.Sprintf("%d %s", o.code, o.reason)
			r.reasons[key]++
			r.latencies = append(r.latencies, o.latency)
			if want, ok := swellReasons[o.reason]; !ok || want != o.code {
				bad = append(bad, fmt.Sprintf("%s: an answer %d with reason %q, which Swell does not document", o.phase, o.code, o.reason))
			}
		}
	}
	var b strings.Builder
	b.WriteString("| fault | sent | 2xx | Swell errors | lost | p50 | p99 |\n|---|---:|---:|---|---:|---:|---:|\n")
	for _, p := range phases {
		r := rows[p]
		errs := "—"
		if len(r.reasons) > 0 {
			var parts []string
			for _, k := range slices.Sorted(maps.Keys(r.reasons)) {
				parts = append(parts, fmt.Sprintf("%d × %s", r.reasons[k], k))
			}
			errs = strings.Join(parts, ", ")
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %s | %d | %s | %s |\n", p, r.sent, r.ok, errs, r.lost, quantile(r.latencies, 0.5), quantile(r.latencies, 0.99))
		if r.lost > 0 {
			var why []string
			for _, k := range slices.Sorted(maps.Keys(r.lostWhy)) {
				why = append(why, fmt.Sprintf("%d × %s", r.lostWhy[k], k))
			}
			bad = append(bad, fmt.Sprintf("%s: %d requests lost (%s)", p, r.lost, strings.Join(why, "; ")))
		}
	}
	return b.String(), bad
}

// quantile is the q-quantile of ds, rounded for the table.
func quantile(ds []time.Duration, q float64) string {
	if len(ds) == 0 {
		return "—"
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	d := s[min(len(s)-1, int(q*float64(len(s))))]
	if d >= time.Second {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Millisecond).String()
}

// killLeader deletes the autoscaler leader's pod, at once (SIGKILL) or
// gracefully, and waits for another replica to lead and for the
// Deployment to be whole again.
func (e *env) killLeader(now bool) {
	e.t.Helper()
	lease, err := e.cs.CoordinationV1().Leases(swellNamespace).Get(e.t.Context(), leaseName, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	old := ptrOr(lease.Spec.HolderIdentity, "")
	opts := metav1.DeleteOptions{}
	if now {
		opts.GracePeriodSeconds = new(int64(0))
	}
	if err := e.cs.CoreV1().Pods(swellNamespace).Delete(e.t.Context(), old, opts); err != nil {
		e.t.Fatalf("delete the leader %s: %v", old, err)
	}
	e.eventuallyWithin("a new autoscaler leader", scaleTimeout, func(ctx context.Context) error {
		l, err := e.cs.CoordinationV1().Leases(swellNamespace).Get(ctx, leaseName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if h := ptrOr(l.Spec.HolderIdentity, ""); h == "" || h == old {
			return fmt.Errorf("holder %q", h)
		}
		return nil
	})
	e.waitDeployment(swellNamespace, "autoscaler")
}

// deleteOne deletes one pod the selector selects, gracefully, and waits
// for the Deployment to be whole again.
func (e *env) deleteOne(ns, selector, deployment string) {
	e.t.Helper()
	pods, err := e.cs.CoreV1().Pods(ns).List(e.t.Context(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		e.t.Fatal(err)
	}
	var live []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && isReady(&p) {
			live = append(live, p)
		}
	}
	if len(live) == 0 {
		e.t.Fatalf("no ready pod of %s/%s to delete", ns, deployment)
	}
	victim := live[0]
	if err := e.cs.CoreV1().Pods(ns).Delete(e.t.Context(), victim.Name, metav1.DeleteOptions{}); err != nil {
		e.t.Fatalf("delete pod %s: %v", victim.Name, err)
	}
	// The Deployment's status may not know of the deletion yet: first the
	// pod goes, drained.
	e.eventuallyWithin("pod "+victim.Name+" gone", 3*scaleTimeout, func(ctx context.Context) error {
		p, err := e.cs.CoreV1().Pods(ns).Get(ctx, victim.Name, metav1.GetOptions{})
		if err == nil && p.UID == victim.UID {
			return fmt.Errorf("still there, deleting since %v", p.DeletionTimestamp)
		}
		return nil
	})
	e.waitDeployment(ns, deployment)
}

// roll changes a Deployment's pod template (an env variable), as a new
// release does, and waits for the rollout to finish.
func (e *env) roll(ns, deployment string) {
	e.t.Helper()
	d, err := e.cs.AppsV1().Deployments(ns).Get(e.t.Context(), deployment, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	container := d.Spec.Template.Spec.Containers[0].Name
	patch := fmt.Appendf(nil, `{"spec":{"template":{"spec":{"containers":[{"name":%q,"env":[{"name":"CHAOS_ROLL","value":%q}]}]}}}}`,
		container, time.Now().Format(time.RFC3339Nano))
	if _, err := e.cs.AppsV1().Deployments(ns).Patch(e.t.Context(), deployment, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		e.t.Fatalf("roll %s/%s: %v", ns, deployment, err)
	}
	e.waitDeployment(ns, deployment)
}

// waitDeployment waits until a Deployment's rollout is complete: every
// replica updated, ready and available, and no old one left.
func (e *env) waitDeployment(ns, name string) {
	e.t.Helper()
	e.eventuallyWithin(fmt.Sprintf("deployment %s/%s whole", ns, name), 3*scaleTimeout, func(ctx context.Context) error {
		d, err := e.cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		want := ptrOr(d.Spec.Replicas, 1)
		st := d.Status
		if st.ObservedGeneration < d.Generation || st.UpdatedReplicas != want || st.ReadyReplicas != want || st.AvailableReplicas != want || st.Replicas != want {
			return fmt.Errorf("want %d: %d updated, %d ready, %d available, %d in all", want, st.UpdatedReplicas, st.ReadyReplicas, st.AvailableReplicas, st.Replicas)
		}
		return nil
	})
}

// cutActivators drops every packet the activators send to the
// autoscaler's port for d, inside each activator pod's network namespace,
// and then lets them through again.
func (e *env) cutActivators(d time.Duration) {
	e.t.Helper()
	pods, err := e.cs.CoreV1().Pods(swellNamespace).List(e.t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=swell-activator"})
	if err != nil {
		e.t.Fatal(err)
	}
	rule := []string{"OUTPUT", "-p", "tcp", "--dport", "8080", "-j", "DROP"}
	var cut []int
	defer func() {
		for _, pid := range cut {
			if out, err := nsenterIptables(pid, append([]string{"-D"}, rule...)...); err != nil {
				e.t.Errorf("reconnect the activator of pid %d: %v %s", pid, err, out)
			}
		}
	}()
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		pid, err := podProcess(&p)
		if err != nil {
			e.t.Fatal(err)
		}
		if out, err := nsenterIptables(pid, append([]string{"-I"}, rule...)...); err != nil {
			e.t.Fatalf("cut activator %s off: %v %s", p.Name, err, out)
		}
		cut = append(cut, pid)
	}
	e.t.Logf("cut %d activators off the autoscaler", len(cut))
	select {
	case <-time.After(d):
	case <-e.t.Context().Done():
	}
}

// rotateActivatorTokens does for every activator at once what the kubelet
// does when a pod's service-account token nears its expiry (which it does
// after some 48 minutes, too late for a test): it asks the API server for a
// new token bound to the pod and swaps it into the pod's token volume as
// the kubelet's atomic writer does, a new directory first and then the
// ..data link renamed onto it. The activators' connections to the
// autoscaler are then reset, so that each reconnects and presents the new
// token; the fault is over when the leader has taken a hello from every
// activator since, and refused none. (The kubelet may later write back the
// token it holds: still valid, another rotation.)
func (e *env) rotateActivatorTokens() {
	e.t.Helper()
	kubelet := os.Getenv(kubeletDirEnv)
	if kubelet == "" {
		e.t.Fatalf("%s is not set: run the suite with swell-cluster e2e", kubeletDirEnv)
	}
	ctx := e.t.Context()
	pods, err := e.cs.CoreV1().Pods(swellNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=swell-activator"})
	if err != nil {
		e.t.Fatal(err)
	}
	before, err := e.leaderActivatorCounts(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	var live []int
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		var volume string
		for _, v := range p.Spec.Volumes {
			if v.Projected != nil && strings.HasPrefix(v.Name, "kube-api-access-") {
				volume = v.Name
			}
		}
		if volume == "" {
			e.t.Fatalf("activator %s mounts no service-account token volume", p.Name)
		}
		tr, err := e.cs.CoreV1().ServiceAccounts(swellNamespace).CreateToken(ctx, p.Spec.ServiceAccountName, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{
				ExpirationSeconds: new(int64(3607)),
				BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			e.t.Fatalf("a new token for activator %s: %v", p.Name, err)
		}
		dir := filepath.Join(kubelet, "pods", string(p.UID), "volumes", "kubernetes.io~projected", volume)
		if err := swapToken(dir, tr.Status.Token); err != nil {
			e.t.Fatalf("rotate activator %s's token: %v", p.Name, err)
		}
		pid, err := podProcess(&p)
		if err != nil {
			e.t.Fatal(err)
		}
		live = append(live, pid)
	}
	// A reset for every packet to the autoscaler's port for a moment: the
	// open connections end at their next frame, and the first attempts to
	// reconnect are refused too.
	rule := []string{"OUTPUT", "-p", "tcp", "--dport", "8080", "-j", "REJECT", "--reject-with", "tcp-reset"}
	for _, pid := range live {
		if out, err := nsenterIptables(pid, append([]string{"-I"}, rule...)...); err != nil {
			e.t.Fatalf("reset the connections of the activator of pid %d: %v %s", pid, err, out)
		}
	}
	select {
	case <-time.After(3 * time.Second):
	case <-ctx.Done():
	}
	for _, pid := range live {
		if out, err := nsenterIptables(pid, append([]string{"-D"}, rule...)...); err != nil {
			e.t.Errorf("let the activator of pid %d reconnect: %v %s", pid, err, out)
		}
	}
	e.t.Logf("rotated %d activators' tokens and reset their connections", len(live))
	e.eventuallyWithin("every activator back with its new token", scaleTimeout, func(ctx context.Context) error {
		now, err := e.leaderActivatorCounts(ctx)
		switch {
		case err != nil:
			return err
		case now.rejected > before.rejected:
			return fmt.Errorf("the leader refused %v activator connections", now.rejected-before.rejected)
		case now.hellos < before.hellos+float64(len(live)):
			return fmt.Errorf("%v hellos since the rotation, want %d", now.hellos-before.hellos, len(live))
		case now.connected != float64(len(live)):
			return fmt.Errorf("%v activators connected, want %d", now.connected, len(live))
		}
		return nil
	})
}

// swapToken writes token into a projected volume's directory as the
// kubelet's atomic writer does: the volume's files are links through
// ..data to a timestamped directory, so a new directory with every file
// and then one rename of a new ..data link changes them all at once.
func swapToken(dir, token string) error {
	next, err := os.MkdirTemp(dir, "..swell_rotated_")
	if err != nil {
		return err
	}
	for _, f := range []string{"ca.crt", "namespace"} {
		b, err := os.ReadFile(filepath.Join(dir, "..data", f))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(next, f), b, 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(next, "token"), []byte(token), 0o644); err != nil {
		return err
	}
	if err := os.Chmod(next, 0o755); err != nil {
		return err
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(next), tmp); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, "..data"))
}

// activatorCounts are the leader's counts of activator connections.
type activatorCounts struct {
	hellos, rejected, connected float64
}

// leaderActivatorCounts reads the autoscaler leader's metrics of its
// activator endpoint: hellos taken, connections refused, activators
// connected.
func (e *env) leaderActivatorCounts(ctx context.Context) (activatorCounts, error) {
	lease, err := e.cs.CoordinationV1().Leases(swellNamespace).Get(ctx, leaseName, metav1.GetOptions{})
	if err != nil {
		return activatorCounts{}, err
	}
	leader, err := e.cs.CoreV1().Pods(swellNamespace).Get(ctx, ptrOr(lease.Spec.HolderIdentity, ""), metav1.GetOptions{})
	if err != nil {
		return activatorCounts{}, fmt.Errorf("the leader's pod: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(leader.Status.PodIP, "9090")+"/metrics", nil)
	if err != nil {
		return activatorCounts{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return activatorCounts{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return activatorCounts{}, err
	}
	var c activatorCounts
	for line := range strings.Lines(string(body)) {
		name, value, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		switch {
		case name == `swell_autoscaler_activator_frames_total{type="hello"}`:
			c.hellos = v
		case strings.HasPrefix(name, "swell_autoscaler_activator_rejected_total{"):
			c.rejected += v
		case name == "swell_autoscaler_activators_connected":
			c.connected = v
		}
	}
	return c, nil
}

// nsenterIptables runs iptables in the network namespace of process pid.
func nsenterIptables(pid int, args ...string) (string, error) {
	cmd := exec.Command("nsenter", append([]string{"--net=/proc/" + strconv.Itoa(pid) + "/ns/net", "iptables", "-w"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil && errors.Is(err, exec.ErrNotFound) {
		return "", fmt.Errorf("nsenter or iptables not found: %w", err)
	}
	return string(out), err
}
