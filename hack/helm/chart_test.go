package helm

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

const (
	deployDir = "../../deploy"
	chartDir  = "../../deploy/chart"
	namespace = "swell-system"
)

// object is one rendered manifest, as YAML decodes it.
type object = map[string]any

// render runs `helm template` on the chart with args (values) and returns
// its objects by kind/namespace/name.
func render(t *testing.T, ns string, args ...string) map[string]object {
	t.Helper()
	cmd := exec.Command("go", append([]string{"tool", "helm", "template", "swell", chartDir, "--namespace", ns}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return decode(t, out)
}

// kustomize renders deploy/ as `kubectl kustomize deploy/` does, with the
// same kustomize library kubectl links.
func kustomize(t *testing.T) map[string]object {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), deployDir)
	if err != nil {
		t.Fatalf("kustomize %s: %v", deployDir, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, out)
}

func decode(t *testing.T, data []byte) map[string]object {
	t.Helper()
	objs := map[string]object{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var o object
		if err := yaml.Unmarshal(doc, &o); err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		if o == nil {
			continue
		}
		k := key(o)
		if _, dup := objs[k]; dup {
			t.Fatalf("%s rendered twice", k)
		}
		objs[k] = o
	}
	return objs
}

func key(o object) string {
	md, _ := o["metadata"].(map[string]any)
	ns, _ := md["namespace"].(string)
	return fmt.Sprintf("%s/%s/%s", o["kind"], ns, md["name"])
}

// helmLabels are the labels the chart adds to every object's metadata
// beside deploy/'s: Helm's recommended ones.
var helmLabels = []string{"app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version", "helm.sh/chart"}

// TestChartRendersDeploy: with its default values, the chart renders the
// objects of `kubectl kustomize deploy/`, field for field, but for the
// deliberate differences it names here (and docs/kubernetes.md lists).
func TestChartRendersDeploy(t *testing.T) {
	chart, base := render(t, namespace), kustomize(t)
	for k, o := range chart {
		labels := lookup(o, "metadata", "labels").(map[string]any)
		for _, l := range helmLabels {
			if labels[l] == nil {
				t.Errorf("%s: no label %s", k, l)
			}
			delete(labels, l)
		}
	}
	// 1. The Namespace stays when the release is uninstalled.
	ns := chart["Namespace//"+namespace]
	if got := lookup(ns, "metadata", "annotations", "helm.sh/resource-policy"); got != "keep" {
		t.Errorf("Namespace: helm.sh/resource-policy %v, want keep", got)
	}
	delete(ns["metadata"].(map[string]any), "annotations")
	// 2. The activators' HPA owns their count: the Deployment names none,
	// so that an upgrade does not reset what the HPA chose.
	const activator = "Deployment/" + namespace + "/activator"
	if got := lookup(chart[activator], "spec", "replicas"); got != nil {
		t.Errorf("%s: replicas %v in the chart, want none while the HPA is on", activator, got)
	}
	if got := lookup(base[activator], "spec", "replicas"); got != float64(2) {
		t.Errorf("%s: replicas %v in deploy/, want 2", activator, got)
	}
	delete(base[activator]["spec"].(map[string]any), "replicas")

	for _, k := range sortedKeys(base) {
		c, ok := chart[k]
		if !ok {
			t.Errorf("%s: in deploy/, not in the chart", k)
			continue
		}
		for _, d := range diff(k, base[k], c) {
			t.Error(d)
		}
	}
	for _, k := range sortedKeys(chart) {
		if _, ok := base[k]; !ok {
			t.Errorf("%s: in the chart, not in deploy/", k)
		}
	}
}

// TestChartObjectsDecodeStrictly: every object the chart renders, with its
// defaults and with every value changed, is a known kind whose every field
// Kubernetes knows.
func TestChartObjectsDecodeStrictly(t *testing.T) {
	strict := kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
		kjson.SerializerOptions{Yaml: true, Strict: true})
	for name, args := range map[string][]string{
		"defaults": nil,
		"changed":  {"--values", "testdata/changed.yaml"},
	} {
		for k, o := range render(t, namespace, args...) {
			b, err := yaml.Marshal(o)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := strict.Decode(b, nil, nil); err != nil {
				t.Errorf("%s: %s: %v", name, k, err)
			}
		}
	}
}

// TestChartValues: each value changes what it says, and only that.
func TestChartValues(t *testing.T) {
	objs := render(t, "platform", "--values", "testdata/changed.yaml")
	const (
		autoscaler = "Deployment/platform/autoscaler"
		activator  = "Deployment/platform/activator"
	)
	container := func(k string) object {
		return lookup(objs[k], "spec", "template", "spec", "containers").([]any)[0].(object)
	}
	env := func(k, name string) any {
		for _, e := range container(k)["env"].([]any) {
			if e.(object)["name"] == name {
				return e.(object)["value"]
			}
		}
		return nil
	}
	checks := []struct {
		what      string
		got, want any
	}{
		{"autoscaler image by digest", container(autoscaler)["image"], "registry.example/swell/autoscaler@sha256:" + strings.Repeat("a", 64)},
		{"activator image by tag", container(activator)["image"], "registry.example/swell/activator:v9.9.9"},
		{"queue-proxy image", env(autoscaler, "QUEUE_PROXY_IMAGE"), "registry.example/swell/queue-proxy@sha256:" + strings.Repeat("c", 64)},
		{"pull policy", container(activator)["imagePullPolicy"], "IfNotPresent"},
		{"pull secrets", lookup(objs[autoscaler], "spec", "template", "spec", "imagePullSecrets"), []any{object{"name": "regcred"}}},
		{"autoscaler replicas", lookup(objs[autoscaler], "spec", "replicas"), float64(3)},
		{"buckets", env(autoscaler, "BUCKETS"), "4"},
		{"autoscaler extra env", env(autoscaler, "KUBE_API_QPS"), "100"},
		{"activator replicas without its HPA", lookup(objs[activator], "spec", "replicas"), float64(5)},
		{"drain timeout", env(activator, "DRAIN_TIMEOUT"), "60s"},
		{"grace period", lookup(objs[activator], "spec", "template", "spec", "terminationGracePeriodSeconds"), float64(70)},
		{"GOMEMLIMIT", env(activator, "GOMEMLIMIT"), "900MiB"},
		{"activator resources", lookup(container(activator), "resources", "limits", "memory"), "1Gi"},
		{"node selector", lookup(objs[activator], "spec", "template", "spec", "nodeSelector", "pool"), "system"},
		{"priority class", lookup(objs[autoscaler], "spec", "template", "spec", "priorityClassName"), "system-cluster-critical"},
		{"pod annotations", lookup(objs[autoscaler], "spec", "template", "metadata", "annotations", "example.com/team"), "platform"},
		{"defaults", lookup(objs["ConfigMap/platform/swell-defaults"], "data"), object{"enable-scale-to-zero": "false", "target": "50", "window": "30s"}},
		{"HPA", has(objs, "HorizontalPodAutoscaler/platform/activator"), false},
		{"NetworkPolicies", has(objs, "NetworkPolicy/platform/activator") || has(objs, "NetworkPolicy/platform/autoscaler"), false},
		{"Namespace", has(objs, "Namespace//platform"), false},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s: got %#v, want %#v", c.what, c.got, c.want)
		}
	}

	// Another namespace: nothing names swell-system, and the admission
	// policies and bindings hold the account of the namespace installed.
	for k, o := range objs {
		b, _ := yaml.Marshal(o)
		if bytes.Contains(b, []byte("swell-system")) {
			t.Errorf("%s names swell-system, installed in platform", k)
		}
	}
	b, _ := yaml.Marshal(objs["ValidatingAdmissionPolicy//swell-autoscaler-deployments"])
	if !bytes.Contains(b, []byte("system:serviceaccount:platform:autoscaler")) {
		t.Errorf("the deployments policy does not match the autoscaler of namespace platform:\n%s", b)
	}

	// Prometheus elsewhere.
	prom := render(t, namespace, "--set", "networkPolicies.prometheus.namespace=observability",
		"--set", "networkPolicies.prometheus.podLabels.app=prom")
	from := lookup(prom["NetworkPolicy/"+namespace+"/autoscaler"], "spec", "ingress").([]any)[3].(object)["from"].([]any)[0].(object)
	want := object{
		"namespaceSelector": object{"matchLabels": object{"kubernetes.io/metadata.name": "observability"}},
		"podSelector":       object{"matchLabels": object{"app": "prom", "app.kubernetes.io/name": "prometheus"}},
	}
	if !reflect.DeepEqual(from, want) {
		t.Errorf("Prometheus's peer: got %v, want %v", from, want)
	}
}

func has(objs map[string]object, k string) bool {
	_, ok := objs[k]
	return ok
}

// lookup returns the value at path in o, or nil.
func lookup(o any, path ...string) any {
	for _, p := range path {
		m, ok := o.(map[string]any)
		if !ok {
			return nil
		}
		o = m[p]
	}
	return o
}

// diff lists where got differs from want, by path.
func diff(path string, want, got any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: deploy/ has %v, the chart %v", path, want, got)}
		}
		var out []string
		for _, k := range sortedKeys(w) {
			if _, ok := g[k]; !ok {
				out = append(out, fmt.Sprintf("%s.%s: in deploy/ (%v), not in the chart", path, k, w[k]))
				continue
			}
			out = append(out, diff(path+"."+k, w[k], g[k])...)
		}
		for _, k := range sortedKeys(g) {
			if _, ok := w[k]; !ok {
				out = append(out, fmt.Sprintf("%s.%s: in the chart (%v), not in deploy/", path, k, g[k]))
			}
		}
		return out
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return []string{fmt.Sprintf("%s: deploy/ has %v, the chart %v", path, want, got)}
		}
		var out []string
		for i := range w {
			out = append(out, diff(fmt.Sprintf("%s[%d]", path, i), w[i], g[i])...)
		}
		return out
	}
	if w, ok := want.(string); ok && strings.HasSuffix(path, ".expression") {
		// 3. kustomize's YAML writer puts a blank line before each more
		// indented line of a folded CEL expression: whitespace to CEL.
		want = strings.ReplaceAll(w, "\n\n", "\n")
	}
	if !reflect.DeepEqual(want, got) {
		return []string{fmt.Sprintf("%s: deploy/ has %#v, the chart %#v", path, want, got)}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func TestMain(m *testing.M) {
	// The chart is rendered by the helm this module pins, run from here.
	if _, err := os.Stat(filepath.Join(chartDir, "Chart.yaml")); err != nil {
		fmt.Fprintln(os.Stderr, "no chart:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// TestChartRefusesBadValues: a misspelt or mistyped value fails the
// install with a message naming it (values.schema.json), rather than being
// ignored.
func TestChartRefusesBadValues(t *testing.T) {
	for set, want := range map[string]string{
		"autoscaler.replica=3":            "additional properties 'replica' not allowed",
		"autoscaler.buckets=0":            "/autoscaler/buckets",
		"activator.drainTimeout=soon":     "/activator/drainTimeout",
		"images.autoscaler.digest=latest": "/images/autoscaler/digest",
		"images.pullPolicy=Sometimes":     "/images/pullPolicy",
		"networkPolicies.enabled=maybe":   "/networkPolicies/enabled",
	} {
		cmd := exec.Command("go", "tool", "helm", "template", "swell", chartDir, "--namespace", namespace, "--set", set)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Errorf("--set %s: rendered, want an error", set)
			continue
		}
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("--set %s: %s\nwant it to name %q", set, out, want)
		}
	}
}
