// Package deploy holds Swell's Kubernetes manifests (a kustomize base, an
// example app and a Grafana dashboard); its test checks them.
package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/swell-run/swell/kube/inject"
)

// manifests returns every YAML document under dir but kustomizations, by
// file.
func manifests(t *testing.T, dir string) map[string][][]byte {
	t.Helper()
	docs := map[string][][]byte{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") || d.Name() == "kustomization.yaml" {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
			if !onlyComments(doc) {
				docs[path] = append(docs[path], doc)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

// TestManifestsDecodeStrictly: every object is a known kind whose every
// field is known to Kubernetes' types, so a typo cannot hide.
func TestManifestsDecodeStrictly(t *testing.T) {
	strict := kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
		kjson.SerializerOptions{Yaml: true, Strict: true})
	n := 0
	for path, docs := range manifests(t, ".") {
		for _, doc := range docs {
			obj, _, err := strict.Decode(doc, nil, nil)
			if err != nil {
				t.Errorf("%s: %v", path, err)
				continue
			}
			n++
			if rb, ok := obj.(*rbacv1.ClusterRole); ok {
				checkRules(t, path+" ClusterRole "+rb.Name, rb.Rules)
			}
			if rb, ok := obj.(*rbacv1.Role); ok {
				checkRules(t, path+" Role "+rb.Name, rb.Rules)
			}
		}
	}
	if n < 20 {
		t.Errorf("decoded %d objects; want the whole install (at least 20)", n)
	}
}

// checkRules refuses wildcards: least privilege lists each verb.
func checkRules(t *testing.T, what string, rules []rbacv1.PolicyRule) {
	for _, r := range rules {
		for _, list := range [][]string{r.Verbs, r.Resources, r.APIGroups} {
			if slices.Contains(list, "*") {
				t.Errorf("%s: rule %v uses *", what, r)
			}
		}
	}
}

// TestKustomizationsListTheirFiles: a manifest that is not listed in its
// directory's kustomization is never installed.
func TestKustomizationsListTheirFiles(t *testing.T) {
	for _, dir := range []string{".", "examples/hello"} {
		data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var k struct {
			Resources []string `json:"resources"`
		}
		if err := yaml.Unmarshal(data, &k); err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
		var want []string
		for _, f := range files {
			if b := filepath.Base(f); b != "kustomization.yaml" {
				want = append(want, b)
			}
		}
		slices.Sort(want)
		got := slices.Clone(k.Resources)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s/kustomization.yaml lists %v; the directory holds %v", dir, got, want)
		}
	}
}

// TestWebhookRulesMatchInjectedKinds: the webhooks that inject and
// validate are registered for exactly the kinds and operations Swell
// injects (inject.Kinds), so the apiserver neither leaves one of them
// unchecked nor calls for anything else.
func TestWebhookRulesMatchInjectedKinds(t *testing.T) {
	var want []string
	for _, k := range inject.Kinds() {
		for _, op := range k.Operations {
			want = append(want, k.Group+"/"+k.Version+"/"+k.Resource+" "+string(op))
		}
	}
	slices.Sort(want)

	rules := map[string][]admissionregistrationv1.RuleWithOperations{}
	strict := kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
		kjson.SerializerOptions{Yaml: true, Strict: true})
	for _, doc := range manifests(t, ".")["webhooks.yaml"] {
		obj, _, err := strict.Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("webhooks.yaml: %v", err)
		}
		switch c := obj.(type) {
		case *admissionregistrationv1.MutatingWebhookConfiguration:
			for _, w := range c.Webhooks {
				rules[w.Name] = w.Rules
			}
		case *admissionregistrationv1.ValidatingWebhookConfiguration:
			for _, w := range c.Webhooks {
				rules[w.Name] = w.Rules
			}
		}
	}
	for _, name := range []string{"inject.swell.run", "validate.swell.run"} {
		rs, ok := rules[name]
		if !ok {
			t.Errorf("webhooks.yaml has no webhook %s", name)
			continue
		}
		var got []string
		for _, r := range rs {
			for _, g := range r.APIGroups {
				for _, v := range r.APIVersions {
					for _, res := range r.Resources {
						for _, op := range r.Operations {
							got = append(got, g+"/"+v+"/"+res+" "+string(op))
						}
					}
				}
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("webhooks.yaml: %s's rules match\n  %s\nSwell injects (inject.Kinds)\n  %s",
				name, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
	}
}

var metricName = regexp.MustCompile(`\bswell_[a-z_]+`)

// TestDashboardMetricsExist: every metric the Grafana dashboard queries is
// one Swell exports (its name appears in Swell's Go source).
func TestDashboardMetricsExist(t *testing.T) {
	data, err := os.ReadFile("grafana/swell.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Targets []struct{ Expr string } `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("grafana/swell.json: %v", err)
	}
	var source bytes.Buffer
	for _, dir := range []string{"../queueproxy", "../activator", "../autoscaler"} {
		filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
				b, _ := os.ReadFile(path)
				source.Write(b)
			}
			return nil
		})
	}
	n := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, m := range metricName.FindAllString(tg.Expr, -1) {
				n++
				base := strings.TrimSuffix(m, "_bucket")
				if !bytes.Contains(source.Bytes(), []byte(`"`+base+`"`)) {
					t.Errorf("the dashboard queries %s; no Swell metric is named %s", m, base)
				}
			}
		}
	}
	if n == 0 {
		t.Error("the dashboard queries no Swell metric")
	}
}

// onlyComments says a YAML document holds nothing but comments and space.
func onlyComments(doc []byte) bool {
	for line := range strings.SplitSeq(string(doc), "\n") {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") && l != "---" {
			return false
		}
	}
	return true
}
