package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

	e.eventuallyWithin(name+" at zero, the activators in its path", scaleTimeout, func(ctx context.Context) error {
		if n, err := e.replicas(ctx, name); err != nil || n != 0 {
			return fmt.Errorf("scale %d %v, want 0", n, err)
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
