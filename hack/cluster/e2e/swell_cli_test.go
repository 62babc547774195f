package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/swell-run/swell/hack/cluster/nodeimages"
)

// swellCLI runs Swell's command line as built from this tree (SWELL_CLI)
// against the cluster (KUBECONFIG), with stdin, and returns what it wrote
// to stdout and to stderr.
func swellCLI(ctx context.Context, stdin []byte, args ...string) (stdout, stderr string, err error) {
	bin := os.Getenv("SWELL_CLI")
	if bin == "" {
		return "", "", fmt.Errorf("SWELL_CLI is not set: %s", runHint)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// TestSwellImportedKnativeServiceServesFromZero: a Knative Service in the
// shape of Knative's hello-world sample (the suite's hello image for its
// container), converted by `swell import` and applied as it comes out,
// goes to zero behind the activator and serves a request from zero, with
// its Knative settings carried over.
func TestSwellImportedKnativeServiceServesFromZero(t *testing.T) {
	t.Parallel()
	e := swellSetup(t)
	const name = "knative-hello"
	ksvc := fmt.Sprintf(`apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: %s
  namespace: %s
  annotations:
    # The suite's requests come from the node, which is no pod
    # (swellHello says why).
    %s: "*"
spec:
  template:
    metadata:
      annotations:
        autoscaling.knative.dev/min-scale: "0"
        autoscaling.knative.dev/target: "10"
    spec:
      containerConcurrency: 4
      timeoutSeconds: 60
      containers:
        - image: %s
          env:
            - name: TARGET
              value: Swell
`, name, e.ns, allowedCallers, nodeimages.Hello)
	dir := t.TempDir()
	file := filepath.Join(dir, "service.yaml")
	if err := os.WriteFile(file, []byte(ksvc), 0o644); err != nil {
		t.Fatal(err)
	}
	out, warnings, err := swellCLI(t.Context(), nil, "import", file)
	if err != nil {
		t.Fatalf("swell import: %v\n%s", err, warnings)
	}
	t.Logf("swell import warned:\n%s", warnings)
	// Knative makes a Service public through its ingress; Swell's stays
	// inside the cluster, and the import says so.
	if !strings.Contains(warnings, "visibility") {
		t.Errorf("swell import did not warn that the service is no longer public:\n%s", warnings)
	}
	if res, err := kubectl(t.Context(), []byte(out), "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply of swell import's output: %v\n%s\n%s", err, res, out)
	}

	d, err := e.cs.AppsV1().Deployments(e.ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"autoscaling.swell.run/class":     "kpa",
		"autoscaling.swell.run/min-scale": "0",
		"autoscaling.swell.run/target":    "10",
		"swell.run/container-concurrency": "4",
	} {
		if got := d.Annotations[k]; got != want {
			t.Errorf("the imported Deployment's %s = %q, want %q", k, got, want)
		}
	}

	e.eventuallyWithin(name+" at zero with no pod left, the activators in its path", scaleTimeout, func(ctx context.Context) error {
		if n, err := e.replicas(ctx, name); err != nil || n != 0 {
			return fmt.Errorf("scale %d %v, want 0", n, err)
		}
		if err := e.noPods(ctx, name); err != nil {
			return err
		}
		return e.routeIs(ctx, name, "activator")
	})
	e.waitProxied(name, "activator")

	start := time.Now()
	url, err := e.serviceURL(t.Context(), name, "/")
	if err != nil {
		t.Fatal(err)
	}
	code, body, err := hostGet(t.Context(), url, name+".example.com")
	if err != nil || code != http.StatusOK || !strings.HasPrefix(body, helloGreeting) {
		t.Fatalf("GET the imported service at zero: %d %q %v", code, body, err)
	}
	t.Logf("the imported service answered from zero in %v", time.Since(start).Round(time.Millisecond))
	if n, err := e.replicas(t.Context(), name); err != nil || n < 1 {
		t.Errorf("scale after the request: %d %v, want at least 1", n, err)
	}
}

// cliStatus is what the suite reads of `swell status -o json` on a
// cluster (docs/status.md).
type cliStatus struct {
	Services []cliService `json:"services"`
}

type cliService struct {
	Namespace string  `json:"namespace"`
	Name      string  `json:"name"`
	Ready     int     `json:"ready"`
	Desired   int     `json:"desired"`
	Decided   bool    `json:"decided"`
	Route     string  `json:"route"`
	Class     string  `json:"class"`
	Metric    string  `json:"metric"`
	Target    float64 `json:"targetPerPod"`
	Reason    string  `json:"reason"`
	Events    []struct {
		Reason string `json:"reason"`
		Text   string `json:"text"`
	} `json:"events"`
}

func (s cliStatus) service(ns, name string) (cliService, bool) {
	i := slices.IndexFunc(s.Services, func(v cliService) bool { return v.Namespace == ns && v.Name == name })
	if i < 0 {
		return cliService{}, false
	}
	return s.Services[i], true
}

func (v cliService) hasEvent(reason string) bool {
	return slices.ContainsFunc(v.Events, func(e struct {
		Reason string `json:"reason"`
		Text   string `json:"text"`
	}) bool {
		return e.Reason == reason
	})
}

// TestSwellStatusShowsTheClusterScaling: `swell status -A -o json` lists
// the services of every namespace, as the autoscaler's status annotation
// and Events describe them, while one scales up under load and another
// sits at zero behind the activators; and `-w` follows the busy one back
// down once the load stops.
func TestSwellStatusShowsTheClusterScaling(t *testing.T) {
	t.Parallel()
	e := swellSetup(t)
	const busy, idle = "status-busy", "status-idle"
	e.createHello(swellHello(busy, nil, map[string]string{
		"swell.run/container-concurrency": "1",
		"autoscaling.swell.run/min-scale": "1",
		"autoscaling.swell.run/max-scale": "4",
	}))
	e.createHello(swellHello(idle, int32p(0), map[string]string{"autoscaling.swell.run/min-scale": "0"}))
	e.eventually(busy+" ready and routed", func(ctx context.Context) error {
		if n, err := e.cs.AppsV1().Deployments(e.ns).Get(ctx, busy, metav1.GetOptions{}); err != nil || n.Status.ReadyReplicas < 1 {
			return fmt.Errorf("deployment %v, %v: want a ready pod", n, err)
		}
		_, err := e.routeSlice(ctx, busy)
		return err
	})
	e.waitProxied(busy, "")

	status := func(ctx context.Context) (cliStatus, error) {
		out, errOut, err := swellCLI(ctx, nil, "status", "-A", "-o", "json")
		if err != nil {
			return cliStatus{}, fmt.Errorf("swell status -A -o json: %v\n%s", err, errOut)
		}
		var st cliStatus
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			return cliStatus{}, fmt.Errorf("swell status -A -o json printed no status: %v\n%s", err, out)
		}
		return st, nil
	}

	// Load: more requests in flight than one pod takes.
	ctx, stopLoad := context.WithTimeout(t.Context(), scaleTimeout)
	var wg sync.WaitGroup
	defer func() {
		stopLoad()
		wg.Wait()
	}()
	for range 6 {
		wg.Go(func() {
			for ctx.Err() == nil {
				e.viaService(ctx, busy, "/?sleep=2s")
			}
		})
	}
	var last cliStatus
	e.eventuallyWithin("swell status -A listing "+busy+" scaled up and "+idle+" at zero", scaleTimeout, func(ctx context.Context) error {
		st, err := status(ctx)
		if err != nil {
			return err
		}
		last = st
		b, ok := st.service(e.ns, busy)
		if !ok {
			return fmt.Errorf("no %s/%s among %d services", e.ns, busy, len(st.Services))
		}
		i, ok := st.service(e.ns, idle)
		if !ok {
			return fmt.Errorf("no %s/%s among %d services", e.ns, idle, len(st.Services))
		}
		if b.Desired < 3 || !b.Decided || b.Class == "" || b.Metric != "concurrency" || b.Target <= 0 || b.Reason == "" || b.Route == "" || !b.hasEvent("ScaledUp") {
			return fmt.Errorf("%s: %+v; want at least 3 desired, its policy, metric, target, route, reason and a ScaledUp event", busy, b)
		}
		if i.Desired != 0 || i.Route != "activator" {
			return fmt.Errorf("%s: %+v; want 0 desired, routed to the activator", idle, i)
		}
		return nil
	})
	// -A is every namespace: the other tests' services too, whichever run
	// beside this one; at least this test's two.
	namespaces := map[string]bool{}
	for _, v := range last.Services {
		namespaces[v.Namespace] = true
	}
	t.Logf("swell status -A listed %d services in %d namespaces", len(last.Services), len(namespaces))

	// The same binary as kubectl's plugin: kubectl runs kubectl-swell from
	// PATH for `kubectl swell`.
	plugins := t.TempDir()
	if err := os.Symlink(os.Getenv("SWELL_CLI"), filepath.Join(plugins, "kubectl-swell")); err != nil {
		t.Fatal(err)
	}
	plugin := exec.CommandContext(t.Context(), "kubectl", "swell", "status", "-n", e.ns, "-o", "json", busy)
	plugin.Env = append(os.Environ(), "PATH="+plugins+string(os.PathListSeparator)+os.Getenv("PATH"))
	var pluginErr bytes.Buffer
	plugin.Stderr = &pluginErr
	out, err := plugin.Output()
	if err != nil {
		t.Fatalf("kubectl swell status -n %s -o json %s: %v\n%s", e.ns, busy, err, pluginErr.String())
	}
	var st cliStatus
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("kubectl swell status printed no status: %v\n%s", err, out)
	}
	if len(st.Services) != 1 || st.Services[0].Name != busy || st.Services[0].Namespace != e.ns || st.Services[0].Desired < 1 {
		t.Errorf("kubectl swell status -n %s %s: %+v, want %s alone", e.ns, busy, st.Services, busy)
	}

	// Follow: one JSON document a line, the changed services in each.
	wctx, stopWatch := context.WithTimeout(t.Context(), scaleTimeout)
	cmd := exec.CommandContext(wctx, os.Getenv("SWELL_CLI"), "status", "-A", "-w", "-o", "json")
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stopWatch()
		cmd.Wait()
	}()
	stopLoad()
	sc := bufio.NewScanner(pipe)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	docs, peak := 0, 0
	for sc.Scan() {
		docs++
		var st cliStatus
		if err := json.Unmarshal(sc.Bytes(), &st); err != nil {
			t.Fatalf("swell status -w -o json line %d: %v\n%s", docs, err, sc.Bytes())
		}
		b, ok := st.service(e.ns, busy)
		if !ok {
			continue
		}
		peak = max(peak, b.Desired)
		if peak >= 3 && b.Desired == 1 {
			t.Logf("swell status -w followed %s from %d desired down to 1 in %d documents", busy, peak, docs)
			stopWatch()
			return
		}
	}
	t.Fatalf("swell status -A -w -o json ended after %d documents (%v) without showing %s back at 1 desired (peak %d):\n%s", docs, wctx.Err(), busy, peak, errOut.String())
}
