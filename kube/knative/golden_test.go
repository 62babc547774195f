package knative

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/kube/inject"
	"github.com/swell-run/swell/pkg/autoscaling"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.yaml and docs/knative.md's table from the current output")

// inputs returns the test inputs: testdata's YAML and JSON manifests.
func inputs(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, pattern := range []string{"testdata/*.yaml", "testdata/*.json"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			if !strings.HasSuffix(f, ".golden.yaml") {
				out = append(out, f)
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("no testdata")
	}
	return out
}

// golden is what an import shows for a review: its warnings and errors
// as comments, then the manifests it writes.
func golden(res *Result, err error) ([]byte, error) {
	var b bytes.Buffer
	for _, w := range res.Warnings {
		b.WriteString("# warning: " + w.String() + "\n")
	}
	for _, e := range flatten(err) {
		for _, line := range strings.Split(e.Error(), "\n") {
			b.WriteString("# error: " + line + "\n")
		}
	}
	if err != nil {
		return b.Bytes(), nil
	}
	out, yerr := res.YAML()
	if yerr != nil {
		return nil, yerr
	}
	b.Write(out)
	return b.Bytes(), nil
}

// TestGolden imports each testdata manifest and compares its warnings,
// errors and output with testdata/NAME.golden.yaml (go test -update
// rewrites them; review the diff).
func TestGolden(t *testing.T) {
	for _, in := range inputs(t) {
		name := strings.TrimSuffix(filepath.Base(in), filepath.Ext(in))
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			res, err := Import([]Input{{Name: filepath.Base(in), Data: raw}}, Options{})
			got, gerr := golden(res, err)
			if gerr != nil {
				t.Fatal(gerr)
			}
			path := filepath.Join("testdata", name+".golden.yaml")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to write it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("importing %s gave\n%s\nwant (%s)\n%s", in, got, path, want)
			}
		})
	}
}

// TestImportedDeploymentsInject: every Deployment an import writes is
// opted in as Swell's controller reads it, and Swell's webhook injects it
// (the same inject.Template, with and without pushing, which `swell
// inject` runs offline) without a problem; injecting it twice gives the
// same template.
func TestImportedDeploymentsInject(t *testing.T) {
	n := 0
	for _, in := range inputs(t) {
		raw, err := os.ReadFile(in)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Import([]Input{{Name: in, Data: raw}}, Options{})
		if err != nil {
			continue
		}
		out, err := res.JSON()
		if err != nil {
			t.Fatal(err)
		}
		var list struct {
			Items []map[string]any
		}
		if err := yaml.Unmarshal(out, &list); err != nil {
			t.Fatal(err)
		}
		for _, item := range list.Items {
			if item["kind"] != "Deployment" {
				continue
			}
			n++
			var d appsv1.Deployment
			if err := decodeStrict(item, &d); err != nil {
				t.Fatalf("%s: %v", in, err)
			}
			if !kube.OptedIn(&d) {
				t.Errorf("%s: Deployment %s is not opted in: labels %v, template labels %v", in, d.Name, d.Labels, d.Spec.Template.Labels)
			}
			for _, push := range []string{"", inject.PushURL(kube.DefaultSystemNamespace)} {
				cfg := inject.Config{Image: "example/queue-proxy:test", Resources: inject.DefaultResources(),
					Defaults: autoscaling.DefaultDefaults(), PushURL: push}
				tpl := d.Spec.Template
				if err := inject.Template(d.ObjectMeta, &tpl, cfg); err != nil {
					t.Errorf("%s: Deployment %s does not inject: %v", in, d.Name, err)
					continue
				}
				again := *tpl.DeepCopy()
				if err := inject.Template(d.ObjectMeta, &again, cfg); err != nil {
					t.Errorf("%s: Deployment %s does not inject twice: %v", in, d.Name, err)
				}
				a, _ := yaml.Marshal(tpl)
				b, _ := yaml.Marshal(again)
				if !bytes.Equal(a, b) {
					t.Errorf("%s: Deployment %s injected twice differs:\n%s\nonce:\n%s", in, d.Name, b, a)
				}
			}
		}
	}
	if n < 5 {
		t.Errorf("only %d Deployments checked", n)
	}
}

// TestErrorsNameTheKnativeSetting: a value Swell refuses is reported with
// the Knative setting it came from, Swell's key, the value and what is
// accepted.
func TestErrorsNameTheKnativeSetting(t *testing.T) {
	svc := `apiVersion: serving.knative.dev/v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  template:
    metadata:
      annotations:
        autoscaling.knative.dev/class: hpa.autoscaling.knative.dev
        autoscaling.knative.dev/target: "2000"
    spec:
      containers: [{image: x, resources: {requests: {cpu: 100m}}}]
`
	_, err := Import([]Input{{Name: "web.yaml", Data: []byte(svc)}}, Options{})
	want := `web.yaml: document 0 (Service shop/web): from annotation autoscaling.knative.dev/target "2000": autoscaling.swell.run/cpu-target: "2000%" is out of range; accepted: a percentage of the app container's CPU request from 1% to 1000%`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v\nwant it to contain %s", err, want)
	}
	var ae *autoscaling.Error
	if !errors.As(err, &ae) || ae.Name != autoscaling.Prefix+autoscaling.KeyCPUTarget {
		t.Errorf("error %v does not unwrap to the *autoscaling.Error of cpu-target", err)
	}
}

// TestDefaults: the annotations are validated against the cluster's
// defaults, as the webhook validates them: initial-scale 0 passes only
// where the cluster allows it.
func TestDefaults(t *testing.T) {
	svc := []byte(`apiVersion: serving.knative.dev/v1
kind: Service
metadata: {name: web}
spec:
  template:
    metadata:
      annotations: {autoscaling.knative.dev/initial-scale: "0"}
    spec:
      containers: [{image: x}]
`)
	if _, err := Import([]Input{{Name: "web.yaml", Data: svc}}, Options{}); err == nil || !strings.Contains(err.Error(), "autoscaling.swell.run/initial-scale") {
		t.Errorf("with the built-in defaults: %v; want initial-scale refused", err)
	}
	d, err := autoscaling.ParseDefaults(map[string]string{"allow-zero-initial-scale": "true"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Import([]Input{{Name: "web.yaml", Data: svc}}, Options{Defaults: d}); err != nil {
		t.Errorf("with allow-zero-initial-scale: %v", err)
	}
}

// TestCollisions: two objects written under one name, or two Deployments
// selecting the same pods, are refused, each naming both documents.
func TestCollisions(t *testing.T) {
	svc := func(name, app string) string {
		return `apiVersion: serving.knative.dev/v1
kind: Service
metadata: {name: ` + name + `, namespace: store, labels: {networking.knative.dev/visibility: cluster-local}}
spec:
  template:
    metadata: {labels: {app: ` + app + `}}
    spec: {containers: [{image: x}]}
`
	}
	for _, tc := range []struct {
		name, input, want string
	}{
		{"same pods", svc("web", "shop") + "---\n" + svc("api", "shop"),
			`a.yaml: document 1 (Service store/api): writes a Deployment in namespace "store" selecting {"app":"shop"}, as a.yaml: document 0 (Service store/web) does`},
		{"a Service of the same name", svc("web", "web") + "---\napiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: store}\n",
			`a.yaml: document 1 (Service store/web): writes Service store/web, as a.yaml: document 0 (Service store/web) does`},
	} {
		_, err := Import([]Input{{Name: "a.yaml", Data: []byte(tc.input)}}, Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v; want %s", tc.name, err, tc.want)
		}
	}
	// In two namespaces, the same names and labels are fine.
	other := strings.Replace(svc("web", "shop"), "namespace: store", "namespace: outlet", 1)
	if _, err := Import([]Input{{Name: "a.yaml", Data: []byte(svc("web", "shop"))}, {Name: "b.yaml", Data: []byte(other)}}, Options{}); err != nil {
		t.Errorf("two namespaces: %v", err)
	}
}

// TestPassThrough: documents that are not Knative's come out as they went
// in: YAML as written, comments and all; JSON as YAML in YAML output, as
// itself in a JSON List.
func TestPassThrough(t *testing.T) {
	in := "# just a comment\n---\n{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {\"name\": \"c\"}, \"data\": {\"k\": \"v\"}}\n---\n" +
		"apiVersion: eventing.knative.dev/v1\nkind: Trigger   # Knative, but not Serving's\nmetadata: {name: t}\n"
	res, err := Import([]Input{{Name: "a.yaml", Data: []byte(in)}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := res.YAML()
	if err != nil {
		t.Fatal(err)
	}
	want := "# just a comment\n---\napiVersion: v1\ndata:\n  k: v\nkind: ConfigMap\nmetadata:\n  name: c\n---\n" +
		"apiVersion: eventing.knative.dev/v1\nkind: Trigger   # Knative, but not Serving's\nmetadata: {name: t}\n"
	if string(out) != want {
		t.Errorf("YAML:\n%s\nwant:\n%s", out, want)
	}
	js, err := res.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var list struct{ Items []map[string]any }
	if err := yaml.Unmarshal(js, &list); err != nil || len(list.Items) != 2 || list.Items[1]["kind"] != "Trigger" {
		t.Errorf("JSON %s (%v); want the ConfigMap and the Trigger", js, err)
	}
	if len(res.Warnings) != 0 {
		t.Errorf("warnings %v; want none", res.Warnings)
	}
}
