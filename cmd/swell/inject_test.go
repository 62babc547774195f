package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/swell-run/swell/kube/inject"
	"github.com/swell-run/swell/pkg/autoscaling"
)

const injectManifest = `# The web service.
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {swell.run/enabled: "true"}
  annotations: {swell.run/timeout: 30s}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata:
      labels: {app: web, swell.run/enabled: "true"}
    spec:
      containers:
      - name: app
        image: example/web:1
        ports: [{containerPort: 8000}]
---
apiVersion: v1
kind: Service
metadata:
  name: web   # kept as written
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8012}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {greeting: hello}
`

func writeManifest(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestInjectYAMLChangesOnlyTheDeployment(t *testing.T) {
	in := writeManifest(t, "app.yaml", injectManifest)
	out := filepath.Join(t.TempDir(), "out.yaml")
	code, stdout, stderr := swell(t, "inject", "-f", in, "-o", out, "--image", "example/qp:1")
	if code != 0 || stdout != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(b), "---\n")
	if len(docs) != 3 {
		t.Fatalf("%d documents out; want 3:\n%s", len(docs), b)
	}
	inDocs := strings.Split(injectManifest, "---\n")
	if docs[1] != inDocs[1] || docs[2] != inDocs[2] {
		t.Errorf("the Service or ConfigMap changed:\n%s", b)
	}
	var d struct {
		Spec struct {
			Template struct {
				Metadata struct {
					Annotations map[string]string
				}
				Spec struct {
					Containers                    []struct{ Name, Image string }
					TerminationGracePeriodSeconds int
				}
			}
		}
	}
	if err := yaml.Unmarshal([]byte(docs[0]), &d); err != nil {
		t.Fatal(err)
	}
	tpl := d.Spec.Template
	if len(tpl.Spec.Containers) != 2 || tpl.Spec.Containers[1].Name != "queue-proxy" || tpl.Spec.Containers[1].Image != "example/qp:1" {
		t.Errorf("containers %+v; want app then queue-proxy example/qp:1", tpl.Spec.Containers)
	}
	if tpl.Metadata.Annotations["swell.run/injected"] != "example/qp:1" || tpl.Spec.TerminationGracePeriodSeconds != 45 {
		t.Errorf("template %+v", tpl)
	}
	if strings.Contains(docs[0], "creationTimestamp") {
		t.Errorf("output carries an empty creationTimestamp:\n%s", docs[0])
	}

	// Injecting the output again changes nothing.
	again := filepath.Join(t.TempDir(), "again.yaml")
	if code, _, stderr := swell(t, "inject", "-f", out, "-o", again, "--image", "example/qp:1"); code != 0 {
		t.Fatalf("second injection: exit %d: %s", code, stderr)
	}
	b2, err := os.ReadFile(again)
	if err != nil {
		t.Fatal(err)
	}
	if string(b2) != string(b) {
		t.Errorf("injecting twice differs from once:\n%s\nonce:\n%s", b2, b)
	}
}

func TestInjectJSONList(t *testing.T) {
	list := `{"apiVersion": "v1", "kind": "List", "items": [
  {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}},
  {"apiVersion": "v1", "kind": "Pod",
   "metadata": {"name": "p", "labels": {"swell.run/enabled": "true"}},
   "spec": {"containers": [{"name": "app", "image": "example/app:1"}]}},
  {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "s"},
   "spec": {"selector": {"matchLabels": {"app": "s"}}, "template": {
     "metadata": {"labels": {"app": "s", "swell.run/enabled": "true"}},
     "spec": {"containers": [{"name": "app", "image": "example/s:1", "ports": [{"containerPort": 7000}]}]}}}}
]}`
	code, stdout, stderr := swell(t, "inject", "-f", writeManifest(t, "list.json", list))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var out struct {
		Kind  string
		Items []struct {
			Kind     string
			Metadata struct{ Annotations map[string]string }
			Data     map[string]string
			Spec     struct {
				Containers []struct{ Name string }
				Template   struct {
					Spec struct{ Containers []struct{ Name string } }
				}
			}
		}
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, stdout)
	}
	if out.Kind != "List" || len(out.Items) != 3 {
		t.Fatalf("output %s", stdout)
	}
	if out.Items[0].Data["k"] != "v" {
		t.Errorf("ConfigMap changed: %+v", out.Items[0])
	}
	if c := out.Items[1].Spec.Containers; len(c) != 2 || c[1].Name != "queue-proxy" || out.Items[1].Metadata.Annotations["swell.run/injected"] == "" {
		t.Errorf("Pod not injected: %+v", out.Items[1])
	}
	if c := out.Items[2].Spec.Template.Spec.Containers; len(c) != 2 || c[1].Name != "queue-proxy" {
		t.Errorf("StatefulSet not injected: %+v", out.Items[2])
	}
}

func TestInjectErrors(t *testing.T) {
	bad := `apiVersion: v1
kind: ConfigMap
metadata: {name: fine}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: broken
  annotations: {swell.run/timeout: forever}
spec:
  template:
    metadata: {labels: {swell.run/enabled: "true"}}
    spec:
      containers: [{name: app, image: x, ports: [{containerPort: 8022}]}]
`
	tests := []struct {
		args     []string
		contains []string
	}{
		{[]string{"inject"}, []string{"give the manifests with -f FILE"}},
		{[]string{"inject", "-f", filepath.Join(t.TempDir(), "missing.yaml")}, []string{"missing.yaml", "no such file"}},
		{[]string{"inject", "-f", writeManifest(t, "bad.yaml", bad)}, []string{
			`document 1 (Deployment broken): swell.run/timeout: "forever" is not a duration`}},
		{[]string{"inject", "-f", writeManifest(t, "notyaml.yaml", "a: [1\n")}, []string{"document 0"}},
		{[]string{"inject", "-f", writeManifest(t, "typo.yaml", strings.Replace(bad, "containers:", "containerz:", 1))}, []string{
			"document 1 (Deployment broken): spec.template", "containerz"}},
		{[]string{"inject", "-f", writeManifest(t, "bad.json", `{"kind": "List", "items": [1]}`)}, []string{"item 0: not an object"}},
		{[]string{"inject", "-f", writeManifest(t, "ok.yaml", "a: 1\n"), "--image", ""}, []string{"--image is empty"}},
		{[]string{"inject", "-f", writeManifest(t, "ok.yaml", "a: 1\n"), "--push-url", "wss://autoscaler/pods"}, []string{
			`--push-url "wss://autoscaler/pods": must be a ws:// URL`}},
	}
	for _, tt := range tests {
		code, stdout, stderr := swell(t, tt.args...)
		if code != 2 || stdout != "" {
			t.Errorf("swell %v: exit %d, stdout %q; want exit 2 and no output", tt.args, code, stdout)
		}
		for _, want := range tt.contains {
			if !strings.Contains(stderr, want) {
				t.Errorf("swell %v: stderr %q does not mention %q", tt.args, stderr, want)
			}
		}
	}
}

// TestInjectEveryKind: swell inject injects every kind the webhook does
// (inject.Kinds), names each in its help, and leaves other kinds with a
// pod template alone.
func TestInjectEveryKind(t *testing.T) {
	cfg := inject.Config{Image: "example/qp:1", Resources: inject.DefaultResources(), Defaults: autoscaling.DefaultDefaults()}
	object := func(apiVersion, kind string, pod bool) map[string]any {
		spec := map[string]any{"containers": []any{map[string]any{"name": "app", "image": "example/app:1"}}}
		meta := map[string]any{"name": "x", "labels": map[string]any{"swell.run/enabled": "true"}}
		if pod {
			return map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": meta, "spec": spec}
		}
		return map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": meta,
			"spec": map[string]any{"template": map[string]any{"metadata": meta, "spec": spec}}}
	}
	for _, k := range inject.Kinds() {
		if changed, err := injectObject(object(k.APIVersion(), k.Kind, k.Pod), cfg); err != nil || !changed {
			t.Errorf("%s %s: injected %v, %v; want injected", k.APIVersion(), k.Kind, changed, err)
		}
		if !strings.Contains(injectUsage, k.Kind) {
			t.Errorf("swell inject --help does not name %s", k.Kind)
		}
	}
	for _, other := range [][2]string{{"apps/v1", "DaemonSet"}, {"batch/v1", "Job"}, {"apps/v1beta1", "Deployment"}} {
		if changed, err := injectObject(object(other[0], other[1], false), cfg); err != nil || changed {
			t.Errorf("%s %s: injected %v, %v; want left alone", other[0], other[1], changed, err)
		}
	}
}
