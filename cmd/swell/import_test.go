package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// knativeService is a Knative Service in the shape of Knative's autoscale
// sample, exposed outside the cluster (one warning).
const knativeService = `apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: web
  namespace: shop
spec:
  template:
    metadata:
      annotations:
        autoscaling.knative.dev/target: "10"
        autoscaling.knative.dev/min-scale: "1"
    spec:
      containerConcurrency: 20
      containers:
        - image: example.com/web:1
`

const plainConfigMap = `# settings of web
apiVersion: v1
kind: ConfigMap
metadata: {name: web-settings, namespace: shop}
data: {greeting: hello}
`

// withStdin runs f with os.Stdin reading content.
func withStdin(t *testing.T, content string, f func()) {
	t.Helper()
	path := writeManifest(t, "stdin", content)
	file, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	saved := os.Stdin
	os.Stdin = file
	defer func() { os.Stdin = saved }()
	f()
}

// importedKinds returns the kinds of the YAML documents out holds, and
// the annotations of its Deployment.
func importedKinds(t *testing.T, out string) ([]string, map[string]string) {
	t.Helper()
	var kinds []string
	var annotations map[string]string
	for _, doc := range strings.Split(out, "---\n") {
		var obj struct {
			Kind     string
			Metadata struct{ Annotations map[string]string }
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("output is not YAML: %v\n%s", err, out)
		}
		kinds = append(kinds, obj.Kind)
		if obj.Kind == "Deployment" {
			annotations = obj.Metadata.Annotations
		}
	}
	return kinds, annotations
}

func TestImportFileStdinAndDirectory(t *testing.T) {
	manifest := plainConfigMap + "---\n" + knativeService
	file := writeManifest(t, "app.yaml", manifest)
	code, stdout, stderr := swell(t, "import", file)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	kinds, annotations := importedKinds(t, stdout)
	if strings.Join(kinds, ",") != "ConfigMap,Deployment,Service" {
		t.Errorf("kinds %v; want the ConfigMap, then the Deployment and Service", kinds)
	}
	if !strings.HasPrefix(stdout, plainConfigMap) {
		t.Errorf("the ConfigMap is not passed through as written:\n%s", stdout)
	}
	for k, v := range map[string]string{"autoscaling.swell.run/class": "kpa", "autoscaling.swell.run/target": "10",
		"autoscaling.swell.run/min-scale": "1", "swell.run/container-concurrency": "20"} {
		if annotations[k] != v {
			t.Errorf("annotation %s = %q; want %q (all: %v)", k, annotations[k], v, annotations)
		}
	}
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "swell import: warning: shop/web: Knative made the Service reachable from outside the cluster") {
		t.Errorf("stderr %q; want one warning about exposure", stderr)
	}

	// The same from stdin, with no argument and with -.
	for _, args := range [][]string{{"import"}, {"import", "-"}} {
		withStdin(t, manifest, func() {
			code, out, errs := swell(t, args...)
			if code != 0 || out != stdout || errs != stderr {
				t.Errorf("swell %v on stdin: exit %d, stdout\n%s\nstderr %q; want what the file gave", args, code, out, errs)
			}
		})
	}

	// A directory: its manifests in name order, other files ignored.
	dir := t.TempDir()
	for name, content := range map[string]string{"a-settings.yml": plainConfigMap, "b-web.yaml": knativeService, "notes.txt": "not a manifest"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errs := swell(t, "import", dir)
	if code != 0 || out != stdout {
		t.Errorf("swell import DIR: exit %d (%s), stdout\n%s\nwant what the file gave", code, errs, out)
	}
}

func TestImportJSON(t *testing.T) {
	file := writeManifest(t, "app.yaml", plainConfigMap+"---\n"+knativeService)
	// Flags may come after the files.
	code, stdout, stderr := swell(t, "import", file, "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var list struct {
		APIVersion string
		Kind       string
		Items      []struct {
			Kind string
			Spec struct {
				Ports []struct{ Port, TargetPort int }
			}
		}
	}
	if err := json.Unmarshal([]byte(stdout), &list); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, stdout)
	}
	if list.APIVersion != "v1" || list.Kind != "List" || len(list.Items) != 3 {
		t.Fatalf("output %s; want a v1 List of 3", stdout)
	}
	svc := list.Items[2]
	if svc.Kind != "Service" || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 80 || svc.Spec.Ports[0].TargetPort != 8080 {
		t.Errorf("Service %+v; want port 80 to the app's 8080", svc)
	}
}

// TestImportOutputInjects: what swell import writes, swell inject (the
// webhook's injection, offline) injects.
func TestImportOutputInjects(t *testing.T) {
	code, imported, stderr := swell(t, "import", writeManifest(t, "app.yaml", knativeService))
	if code != 0 {
		t.Fatalf("import: exit %d: %s", code, stderr)
	}
	code, injected, stderr := swell(t, "inject", "-f", writeManifest(t, "imported.yaml", imported), "--image", "example/qp:1")
	if code != 0 {
		t.Fatalf("inject: exit %d: %s", code, stderr)
	}
	if !strings.Contains(injected, "name: queue-proxy") || !strings.Contains(injected, "swell.run/injected: example/qp:1") {
		t.Errorf("the imported Deployment was not injected:\n%s", injected)
	}
}

func TestImportStrict(t *testing.T) {
	file := writeManifest(t, "app.yaml", knativeService)
	code, stdout, stderr := swell(t, "import", "--strict", file)
	if code != 1 || stdout != "" {
		t.Errorf("exit %d, stdout %q; want exit 1 and nothing written", code, stdout)
	}
	if !strings.Contains(stderr, "swell import: warning: shop/web: ") || !strings.Contains(stderr, "swell import: --strict: 1 warnings; nothing written") {
		t.Errorf("stderr %q", stderr)
	}
	private := strings.Replace(knativeService, "namespace: shop\n", "namespace: shop\n  labels: {networking.knative.dev/visibility: cluster-local}\n", 1)
	if code, _, stderr := swell(t, "import", "--strict", writeManifest(t, "private.yaml", private)); code != 0 || stderr != "" {
		t.Errorf("without warnings: exit %d, stderr %q; want 0 and none", code, stderr)
	}
}

func TestImportDefaults(t *testing.T) {
	zero := strings.Replace(knativeService, `autoscaling.knative.dev/min-scale: "1"`, `autoscaling.knative.dev/initial-scale: "0"`, 1)
	file := writeManifest(t, "zero.yaml", zero)
	if code, _, stderr := swell(t, "import", file); code != 1 || !strings.Contains(stderr, `autoscaling.swell.run/initial-scale: "0" is not allowed with allow-zero-initial-scale false`) {
		t.Errorf("with the built-in defaults: exit %d, stderr %q; want initial-scale 0 refused", code, stderr)
	}
	defaults := writeManifest(t, "defaults.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: swell-defaults}\ndata: {allow-zero-initial-scale: \"true\"}\n")
	if code, _, stderr := swell(t, "import", "--defaults", defaults, file); code != 0 {
		t.Errorf("with the cluster's defaults allowing it: exit %d: %s", code, stderr)
	}
}

func TestImportErrors(t *testing.T) {
	bad := `apiVersion: serving.knative.dev/v1
kind: Service
metadata: {name: broken}
spec:
  template:
    metadata:
      annotations:
        autoscaling.knative.dev/window: 2s
        autoscaling.knative.dev/class: keda.autoscaling.knative.dev
    spec:
      containers: [{image: x}]
`
	good := writeManifest(t, "good.yaml", knativeService)
	tests := []struct {
		args     []string
		code     int
		contains []string
	}{
		// Inputs that cannot be converted: every problem of every input,
		// each naming the file and document, and nothing written.
		{[]string{"import", good, writeManifest(t, "bad.yaml", bad), filepath.Join(t.TempDir(), "missing.yaml")}, 1, []string{
			"swell import: open ", "missing.yaml: no such file or directory",
			`bad.yaml: document 0 (Service broken): autoscaling.knative.dev/class: "keda.autoscaling.knative.dev" is an autoscaler class Swell has no counterpart for`,
			`bad.yaml: document 0 (Service broken): from annotation autoscaling.knative.dev/window "2s": autoscaling.swell.run/window: "2s" is out of range`,
		}},
		{[]string{"import", writeManifest(t, "notyaml.yaml", "a: [1\n")}, 1, []string{"notyaml.yaml: document 0"}},
		{[]string{"import", t.TempDir()}, 1, []string{"no .yaml, .yml or .json file in the directory"}},
		{[]string{"import", writeManifest(t, "twice.yaml", knativeService+"---\n"+knativeService)}, 1, []string{
			"document 1 (Service shop/web): writes Deployment shop/web, as ", "twice.yaml: document 0 (Service shop/web) does"}},
		// Usage errors.
		{[]string{"import", "-o", "xml", good}, 2, []string{`-o "xml": accepted: yaml or json`}},
		{[]string{"import", "--bogus"}, 2, []string{"flag provided but not defined: -bogus"}},
		{[]string{"import", "--defaults", writeManifest(t, "d.yaml", "kind: ConfigMap\ndata: {stable-window: 60s}\n"), good}, 2, []string{
			"--defaults", "stable-window: unknown key", "did you mean window?"}},
		{[]string{"import", "--defaults", writeManifest(t, "d.yaml", "kind: Secret\n"), good}, 2, []string{`kind "Secret"; accepted: a ConfigMap`}},
	}
	for _, tt := range tests {
		code, stdout, stderr := swell(t, tt.args...)
		if code != tt.code || stdout != "" {
			t.Errorf("swell %v: exit %d, stdout %q; want exit %d and no output", tt.args, code, stdout, tt.code)
		}
		for _, want := range tt.contains {
			if !strings.Contains(stderr, want) {
				t.Errorf("swell %v: stderr %q does not mention %q", tt.args, stderr, want)
			}
		}
	}
}

func TestImportHelp(t *testing.T) {
	for _, args := range [][]string{{"help", "import"}, {"import", "--help"}} {
		code, stdout, _ := swell(t, args...)
		if code != 0 || !strings.Contains(stdout, "Usage: swell import") || !strings.Contains(stdout, "--strict") {
			t.Errorf("swell %v: exit %d, stdout %q", args, code, stdout)
		}
	}
	if _, stdout, _ := swell(t, "help"); !strings.Contains(stdout, "import") {
		t.Errorf("swell help does not list import:\n%s", stdout)
	}
}
