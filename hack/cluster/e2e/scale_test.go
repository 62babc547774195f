package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

// scaleEnv, set to a number of services, runs TestScaleOnTheAPIServer
// (`make scale-cluster`); the suite skips it otherwise.
const scaleEnv = "SWELL_SCALE_SERVICES"

// TestScaleOnTheAPIServer measures the autoscaler through the real API
// server, kubelet and kube-proxy of the test cluster at the largest size
// the one-node cluster holds: SWELL_SCALE_SERVICES opted-in Deployments,
// each with its Service, all at zero (a node runs about a hundred pods, so
// the services have no pods: what is measured is the Kubernetes side —
// informers, the Services taken over and routed to the activators, status
// writes — which the fake fleet of the scale scenario leaves out). It
// reports how long the autoscaler took to route them all, the leader's CPU
// and memory while they idle, and cold starts through the activators with
// that many services around.
func TestScaleOnTheAPIServer(t *testing.T) {
	n, err := strconv.Atoi(os.Getenv(scaleEnv))
	if err != nil || n < 1 {
		t.Skipf("set %s to a number of services to run it (make scale-cluster)", scaleEnv)
	}
	e := swellSetup(t)
	ctx := t.Context()
	// The autoscaler serves its profiles for this run, which reads one.
	e.setAutoscalerEnv("PROFILE", "true")
	defer e.setAutoscalerEnv("PROFILE", "false")

	start := time.Now()
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("s%05d", i)
	}
	work := make(chan string)
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	for range 8 {
		wg.Go(func() {
			for name := range work {
				d := swellHello(name, int32p(0), map[string]string{"autoscaling.swell.run/min-scale": "0"})
				// A new service gets a pod until the activators are in its
				// path; a thousand would swamp the one node, so theirs are
				// never scheduled.
				d.Spec.Template.Spec.NodeSelector = map[string]string{"swell.test/scale": "never"}
				// The webhooks' Service may still lead to a replica the
				// rollout above replaced, for as long as kube-proxy takes.
				var err error
				wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
					_, err = e.cs.AppsV1().Deployments(e.ns).Create(ctx, d, metav1.CreateOptions{})
					return err == nil || !apierrors.IsInternalError(err), nil
				})
				if err == nil {
					_, err = e.cs.CoreV1().Services(e.ns).Create(ctx, helloService(name), metav1.CreateOptions{})
				}
				if err != nil {
					select {
					case errs <- fmt.Errorf("create %s: %w", name, err):
					default:
					}
				}
			}
		})
	}
	for _, name := range names {
		work <- name
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	created := time.Since(start)
	t.Logf("%d Deployments and Services created in %v", n, created.Round(time.Millisecond))

	e.eventuallyWithin(fmt.Sprintf("all %d services routed to the activators, at zero", n), 30*time.Minute, func(ctx context.Context) error {
		list, err := e.cs.DiscoveryV1().EndpointSlices(e.ns).List(ctx, metav1.ListOptions{LabelSelector: labelRoute + "=activator"})
		if err != nil {
			return err
		}
		if len(list.Items) < n {
			return fmt.Errorf("%d of %d routed", len(list.Items), n)
		}
		deps, err := e.cs.AppsV1().Deployments(e.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		up := 0
		for _, d := range deps.Items {
			if ptrOr(d.Spec.Replicas, 1) > 0 {
				up++
			}
		}
		if up > 0 {
			return fmt.Errorf("%d of %d not at zero yet", up, n)
		}
		return nil
	})
	routed := time.Since(start)

	// The leader while the services idle, once it has settled.
	leader, err := e.cs.CoordinationV1().Leases(swellNamespace).Get(ctx, leaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod, err := e.cs.CoreV1().Pods(swellNamespace).Get(ctx, ptrOr(leader.Spec.HolderIdentity, ""), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	metrics := "http://" + net.JoinHostPort(pod.Status.PodIP, "9090") + "/metrics"
	// Two windows of a minute: right after the last service was routed,
	// when the writes that follow it may still be going, and two minutes
	// later, idle.
	window := func() (cpu float64, f procFigures) {
		t.Helper()
		before, err := processFigures(ctx, metrics)
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		time.Sleep(time.Minute) // a measurement window, not a synchronisation
		after, err := processFigures(ctx, metrics)
		if err != nil {
			t.Fatal(err)
		}
		return (after.cpuSeconds - before.cpuSeconds) / time.Since(t0).Seconds(), after
	}
	cpuAfter, _ := window()
	time.Sleep(2 * time.Minute) // the services idle
	cpu, after := window()
	e.profileLeader(ctx, "http://"+net.JoinHostPort(pod.Status.PodIP, "8022")+"/debug/pprof/profile?seconds=30")

	// Cold starts through the activators, with n services around: three
	// more services, whose pods can run, each at zero first.
	var wakes []time.Duration
	for i := range 3 {
		name := fmt.Sprintf("wake-%d", i)
		e.createHello(swellHello(name, int32p(0), map[string]string{"autoscaling.swell.run/min-scale": "0"}))
		e.eventuallyWithin(name+" at zero behind the activators", 5*time.Minute, func(ctx context.Context) error {
			if r, err := e.replicas(ctx, name); err != nil || r != 0 {
				return fmt.Errorf("scale %d %v", r, err)
			}
			return e.routeIs(ctx, name, "activator")
		})
		e.waitProxied(name, "activator")
		t1 := time.Now()
		code, body, err := e.viaService(ctx, name, "/")
		if err != nil || code != http.StatusOK {
			t.Errorf("GET %s at zero: %d %q %v", name, code, body, err)
			continue
		}
		wakes = append(wakes, time.Since(t1))
	}
	slices.Sort(wakes)
	med := time.Duration(0)
	if len(wakes) > 0 {
		med = wakes[len(wakes)/2]
	}
	t.Logf("scale-cluster services=%d created_s=%.1f routed_s=%.1f cpu_cores_after=%.3f cpu_cores=%.3f rss_mib=%.0f wake_p50_ms=%d wakes=%v",
		n, created.Seconds(), routed.Seconds(), cpuAfter, cpu, after.rssBytes/(1<<20), med.Milliseconds(), wakes)
}

// procFigures are a process's CPU and memory, from its Prometheus metrics.
type procFigures struct {
	cpuSeconds, rssBytes float64
}

func processFigures(ctx context.Context, url string) (procFigures, error) {
	var f procFigures
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return f, err
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}).Do(req)
	if err != nil {
		return f, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		switch name {
		case "process_cpu_seconds_total":
			f.cpuSeconds, _ = strconv.ParseFloat(value, 64)
		case "process_resident_memory_bytes":
			f.rssBytes, _ = strconv.ParseFloat(value, 64)
		}
	}
	if f.rssBytes == 0 {
		return f, fmt.Errorf("%s: no process_resident_memory_bytes", url)
	}
	return f, sc.Err()
}

// setAutoscalerEnv sets an environment variable of the autoscaler's
// container and waits for the rollout.
func (e *env) setAutoscalerEnv(name, value string) {
	e.t.Helper()
	patch := fmt.Appendf(nil, `{"spec":{"template":{"spec":{"containers":[{"name":"autoscaler","env":[{"name":%q,"value":%q}]}]}}}}`, name, value)
	if _, err := e.cs.AppsV1().Deployments(swellNamespace).Patch(e.t.Context(), "autoscaler", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		e.t.Fatalf("set %s=%s on the autoscaler: %v", name, value, err)
	}
	e.waitDeployment(swellNamespace, "autoscaler")
	e.eventually("an autoscaler leader", func(ctx context.Context) error {
		l, err := e.cs.CoordinationV1().Leases(swellNamespace).Get(ctx, leaseName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ready, err := readyAutoscalers(ctx, e.cs)
		if err != nil {
			return err
		}
		if h := ptrOr(l.Spec.HolderIdentity, ""); !slices.Contains(ready, h) {
			return fmt.Errorf("lease held by %q, not one of %v", h, ready)
		}
		return swellReady(ctx, e.cs)
	})
}

// profileLeader takes a CPU profile of the leader from url into
// $SWELL_SCALE_PROFILE (else the test's temporary directory) and logs its
// top functions.
func (e *env) profileLeader(ctx context.Context, url string) {
	e.t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	resp, err := (&http.Client{Timeout: time.Minute, Transport: &http.Transport{Proxy: nil}}).Do(req)
	if err != nil {
		e.t.Errorf("profile the leader: %v", err)
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		e.t.Errorf("profile the leader: %d %v", resp.StatusCode, err)
		return
	}
	dir := os.Getenv("SWELL_SCALE_PROFILE")
	if dir == "" {
		dir = e.t.TempDir()
	}
	path := filepath.Join(dir, "autoscaler-cpu.pprof")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		e.t.Errorf("write the profile: %v", err)
		return
	}
	out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=30", path).CombinedOutput()
	e.t.Logf("the leader's CPU profile, 30 s idle (%s):\n%s%v", path, out, err)
}
