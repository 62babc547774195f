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
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/swell-run/swell/kube/inject"
)

// manifests returns every YAML document under dir but kustomizations and
// the Helm chart (templates, not manifests: hack/helm renders and checks
// them), by file.
func manifests(t *testing.T, dir string) map[string][][]byte {
	t.Helper()
	docs := map[string][][]byte{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == "chart" {
			return filepath.SkipDir
		}
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

// objects decodes every object of the base (this directory) strictly.
func objects(t *testing.T) []runtime.Object {
	t.Helper()
	strict := kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
		kjson.SerializerOptions{Yaml: true, Strict: true})
	var objs []runtime.Object
	for path, docs := range manifests(t, ".") {
		if filepath.Dir(path) != "." {
			continue
		}
		for _, doc := range docs {
			obj, _, err := strict.Decode(doc, nil, nil)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			objs = append(objs, obj)
		}
	}
	return objs
}

// policies returns the base's ValidatingAdmissionPolicies and their
// bindings, by name.
func policies(t *testing.T) (map[string]*admissionregistrationv1.ValidatingAdmissionPolicy, map[string]*admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	ps := map[string]*admissionregistrationv1.ValidatingAdmissionPolicy{}
	bs := map[string]*admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	for _, obj := range objects(t) {
		switch o := obj.(type) {
		case *admissionregistrationv1.ValidatingAdmissionPolicy:
			ps[o.Name] = o
		case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
			bs[o.Name] = o
		}
	}
	if len(ps) == 0 {
		t.Fatal("the base holds no ValidatingAdmissionPolicy")
	}
	return ps, bs
}

var usernameCondition = regexp.MustCompile(`^request\.userInfo\.username == '([^']+)'$`)

// TestPoliciesJudgeTheAutoscaler: every admission policy matches the
// requests of exactly the service account the autoscaler runs as — the
// one its Deployment names and its ClusterRoleBinding grants, in the
// kustomization's namespace — and is bound, to deny.
func TestPoliciesJudgeTheAutoscaler(t *testing.T) {
	data, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Namespace string `json:"namespace"`
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		t.Fatal(err)
	}
	var account string
	var subjects []rbacv1.Subject
	for _, obj := range objects(t) {
		switch o := obj.(type) {
		case *appsv1.Deployment:
			if o.Name == "autoscaler" {
				account = o.Spec.Template.Spec.ServiceAccountName
			}
		case *rbacv1.ClusterRoleBinding:
			if o.RoleRef.Name == "swell-autoscaler" {
				subjects = o.Subjects
			}
		}
	}
	if account == "" || k.Namespace == "" {
		t.Fatalf("the autoscaler runs as ServiceAccount %q in namespace %q; want both set", account, k.Namespace)
	}
	want := "system:serviceaccount:" + k.Namespace + ":" + account
	if len(subjects) != 1 || subjects[0].Kind != rbacv1.ServiceAccountKind || subjects[0].Name != account || subjects[0].Namespace != k.Namespace {
		t.Errorf("ClusterRoleBinding swell-autoscaler binds %v; want the one ServiceAccount %s/%s", subjects, k.Namespace, account)
	}

	ps, bs := policies(t)
	for name, p := range ps {
		if p.Spec.FailurePolicy == nil {
			t.Errorf("policy %s: no failurePolicy; say which", name)
		}
		var users []string
		for _, c := range p.Spec.MatchConditions {
			if m := usernameCondition.FindStringSubmatch(c.Expression); m != nil {
				users = append(users, m[1])
			}
		}
		if !slices.Equal(users, []string{want}) {
			t.Errorf("policy %s matches the users %q; want exactly %q (a matchCondition request.userInfo.username == '%s')", name, users, want, want)
		}
		b, ok := bs[name]
		switch {
		case !ok || b.Spec.PolicyName != name:
			t.Errorf("policy %s has no binding of the same name", name)
		case !slices.Equal(b.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}):
			t.Errorf("binding %s: validationActions %v; want [Deny]", name, b.Spec.ValidationActions)
		case (p.Spec.ParamKind != nil) != (b.Spec.ParamRef != nil):
			t.Errorf("policy %s: paramKind %v but binding paramRef %v: both or neither", name, p.Spec.ParamKind, b.Spec.ParamRef)
		}
	}
	for name, b := range bs {
		if _, ok := ps[b.Spec.PolicyName]; !ok {
			t.Errorf("binding %s binds policy %s, which the base does not hold", name, b.Spec.PolicyName)
		}
	}
}

// unpoliced lists the writes RBAC grants the autoscaler cluster-wide that
// no admission policy judges (outside kube-system), with why.
var unpoliced = map[string]string{
	"/events":                            "an Event changes nothing but what `kubectl describe` shows",
	"authentication.k8s.io/tokenreviews": "a TokenReview stores nothing: it asks the API server who a token belongs to, and the answer is all it changes",
}

// TestEveryClusterWideWriteIsPoliced: each write the autoscaler's
// ClusterRole grants (create, update, patch, delete) falls under an
// admission policy that judges it in every namespace, or is listed in
// unpoliced: a new grant cannot widen what the autoscaler may do unseen.
func TestEveryClusterWideWriteIsPoliced(t *testing.T) {
	operation := map[string]admissionregistrationv1.OperationType{
		"create": admissionregistrationv1.Create, "update": admissionregistrationv1.Update,
		"patch": admissionregistrationv1.Update, "delete": admissionregistrationv1.Delete,
	}
	ps, _ := policies(t)
	judged := func(group, resource string, op admissionregistrationv1.OperationType) bool {
		for _, p := range ps {
			mc := p.Spec.MatchConstraints
			if mc == nil || mc.NamespaceSelector != nil && len(mc.NamespaceSelector.MatchLabels)+len(mc.NamespaceSelector.MatchExpressions) > 0 {
				continue
			}
			for _, r := range mc.ResourceRules {
				if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Operations, op) {
					return true
				}
			}
		}
		return false
	}
	n := 0
	for _, obj := range objects(t) {
		role, ok := obj.(*rbacv1.ClusterRole)
		if !ok || role.Name != "swell-autoscaler" {
			continue
		}
		for _, r := range role.Rules {
			for _, verb := range r.Verbs {
				op, write := operation[verb]
				if !write {
					continue
				}
				for _, g := range r.APIGroups {
					for _, res := range r.Resources {
						n++
						if _, ok := unpoliced[g+"/"+res]; ok {
							continue
						}
						if !judged(g, res, op) {
							t.Errorf("ClusterRole swell-autoscaler grants %s on %s/%s, which no admission policy in policy.yaml judges (operation %s): add one, or list it in unpoliced with why", verb, g, res, op)
						}
					}
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("ClusterRole swell-autoscaler grants no write")
	}
}

// TestServicePolicyKeepsEverySpecField: the Service policy's restKept
// compares every field of corev1.ServiceSpec but the selector, so a
// takeover or a give-back cannot change one; a field Kubernetes adds fails
// this test until the policy compares it too.
func TestServicePolicyKeepsEverySpecField(t *testing.T) {
	ps, _ := policies(t)
	p, ok := ps["swell-autoscaler-services"]
	if !ok {
		t.Fatal("no policy swell-autoscaler-services")
	}
	var kept string
	for _, v := range p.Spec.Variables {
		if v.Name == "restKept" {
			kept = v.Expression
		}
	}
	if kept == "" {
		t.Fatal("policy swell-autoscaler-services has no variable restKept")
	}
	typ := reflect.TypeFor[corev1.ServiceSpec]()
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		if name == "selector" || name == "" || name == "-" {
			continue
		}
		if cmp := "object.spec.?" + name + " == oldObject.spec.?" + name; !strings.Contains(kept, cmp) {
			t.Errorf("restKept does not compare spec.%s (want %q)", name, cmp)
		}
	}
	for _, f := range []string{"ownerReferences", "finalizers"} {
		if cmp := "object.metadata.?" + f + " == oldObject.metadata.?" + f; !strings.Contains(kept, cmp) {
			t.Errorf("restKept does not compare metadata.%s (want %q)", f, cmp)
		}
	}
}

// TestNoServiceLinks: Swell's pods get no variables from the Services of
// their namespace. The kubelet would set <SERVICE>_PORT for each, and the
// Services autoscaler and activator would set AUTOSCALER_PORT and
// ACTIVATOR_PORT, which the components read as their own ports.
func TestNoServiceLinks(t *testing.T) {
	n := 0
	for path, docs := range manifests(t, ".") {
		if strings.HasPrefix(path, "examples") {
			continue
		}
		for _, doc := range docs {
			var d appsv1.Deployment
			if err := yaml.Unmarshal(doc, &d); err != nil || d.Kind != "Deployment" {
				continue
			}
			n++
			if l := d.Spec.Template.Spec.EnableServiceLinks; l == nil || *l {
				t.Errorf("%s: Deployment %s: enableServiceLinks is not false", path, d.Name)
			}
		}
	}
	if n < 2 {
		t.Errorf("checked %d Deployments; want the autoscaler's and the activator's", n)
	}
}
