package webhook

import (
	"bytes"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/kube/inject"
	"github.com/swell-run/swell/pkg/autoscaling"
)

var testInject = inject.Config{
	Image:     "example/queue-proxy:test",
	Resources: inject.DefaultResources(),
	Defaults:  autoscaling.DefaultDefaults(),
}

var (
	deploymentKind = metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	podKind        = metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}
	configMapKind  = metav1.GroupVersionKind{Group: "", Version: "v1", Kind: "ConfigMap"}
)

func newHandler(t testing.TB, logger *zap.Logger) http.Handler {
	t.Helper()
	h, err := New(Config{Inject: testInject, Logger: logger, MaxBody: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// deployment returns a Deployment named app with one container; labelled
// opts it (and its template) in.
func deployment(labelled bool, annotations map[string]string) *appsv1.Deployment {
	labels := map[string]string{"app": "app"}
	if labelled {
		labels[kube.LabelEnabled] = "true"
	}
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "default", Labels: labels, Annotations: annotations},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "app"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: maps.Clone(labels)},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name:  "app",
					Image: "example/app:1",
					Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
				}}},
			},
		},
	}
}

func injected(t *testing.T, d *appsv1.Deployment) *appsv1.Deployment {
	t.Helper()
	d = d.DeepCopy()
	if err := inject.Template(d.ObjectMeta, &d.Spec.Template, testInject); err != nil {
		t.Fatal(err)
	}
	return d
}

func pod(labelled bool) *corev1.Pod {
	d := deployment(labelled, nil)
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "default", Labels: d.Spec.Template.Labels},
		Spec:       d.Spec.Template.Spec,
	}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func reviewBody(t testing.TB, op admissionv1.Operation, kind metav1.GroupVersionKind, obj any, dryRun bool) []byte {
	t.Helper()
	req := &admissionv1.AdmissionRequest{
		UID:       types.UID("uid-1"),
		Kind:      kind,
		Name:      "app",
		Namespace: "default",
		Operation: op,
		DryRun:    &dryRun,
	}
	if obj != nil {
		req.Object = runtime.RawExtension{Raw: mustJSON(t, obj)}
	}
	rv := admissionv1.AdmissionReview{Request: req}
	rv.APIVersion, rv.Kind = reviewAPIVersion, reviewKind
	return mustJSON(t, rv)
}

// post sends body to path and returns the response review's response.
func post(t *testing.T, h http.Handler, path string, body []byte) *admissionv1.AdmissionResponse {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("POST %s: status %d: %s", path, rec.Code, rec.Body)
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("decode response: %v", err)
	}
	if out.APIVersion != reviewAPIVersion || out.Kind != reviewKind || out.Response == nil {
		t.Fatalf("response review: %s", rec.Body)
	}
	if out.Response.UID != "uid-1" {
		t.Errorf("response UID %q, want the request's uid-1", out.Response.UID)
	}
	return out.Response
}

// applyPatch applies a JSON patch of add, replace and remove operations on
// object members to the JSON document doc.
func applyPatch(t *testing.T, doc, patch []byte) []byte {
	t.Helper()
	var ops []struct {
		Op    string          `json:"op"`
		Path  string          `json:"path"`
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(patch, &ops); err != nil {
		t.Fatalf("patch %s: %v", patch, err)
	}
	var root any
	if err := json.Unmarshal(doc, &root); err != nil {
		t.Fatal(err)
	}
	for _, op := range ops {
		keys := strings.Split(strings.TrimPrefix(op.Path, "/"), "/")
		for i, k := range keys {
			keys[i] = strings.NewReplacer("~1", "/", "~0", "~").Replace(k)
		}
		parent := root.(map[string]any)
		for _, k := range keys[:len(keys)-1] {
			next, ok := parent[k].(map[string]any)
			if !ok {
				t.Fatalf("patch path %s: no object at %s", op.Path, k)
			}
			parent = next
		}
		last := keys[len(keys)-1]
		_, exists := parent[last]
		switch {
		case (op.Op == "replace" || op.Op == "remove") && !exists:
			t.Fatalf("patch op %s on %s, which does not exist", op.Op, op.Path)
		case op.Op == "remove":
			delete(parent, last)
			continue
		case op.Op != "replace" && op.Op != "add":
			t.Fatalf("patch op %q not supported here", op.Op)
		}
		var v any
		if err := json.Unmarshal(op.Value, &v); err != nil {
			t.Fatal(err)
		}
		parent[last] = v
	}
	return mustJSON(t, root)
}

func TestMutate(t *testing.T) {
	bad := deployment(true, map[string]string{inject.AnnotationTimeout: "2h"})
	if inject.Template(bad.ObjectMeta, bad.Spec.Template.DeepCopy(), testInject) == nil {
		t.Fatal("inject accepted a 2h timeout")
	}
	tune := map[string]string{inject.AnnotationTimeout: "30s", autoscaling.Prefix + "min-scale": "1"}

	cases := []struct {
		name    string
		op      admissionv1.Operation
		kind    metav1.GroupVersionKind
		obj     any
		patched bool
		denied  string // message, when denied
	}{
		{name: "enabled deployment create", op: admissionv1.Create, kind: deploymentKind, obj: deployment(true, tune), patched: true},
		{name: "enabled deployment update", op: admissionv1.Update, kind: deploymentKind, obj: deployment(true, nil), patched: true},
		{name: "already injected", op: admissionv1.Update, kind: deploymentKind, obj: injected(t, deployment(true, tune))},
		{name: "not enabled", op: admissionv1.Create, kind: deploymentKind, obj: deployment(false, map[string]string{inject.AnnotationTimeout: "2h"})},
		// Left unpatched and allowed: the validating webhook denies it.
		{name: "bad annotation", op: admissionv1.Create, kind: deploymentKind, obj: bad},
		{name: "delete", op: admissionv1.Delete, kind: deploymentKind, obj: bad},
		{name: "pod create", op: admissionv1.Create, kind: podKind, obj: pod(true), patched: true},
		{name: "pod not enabled", op: admissionv1.Create, kind: podKind, obj: pod(false)},
		{name: "pod update", op: admissionv1.Update, kind: podKind, obj: pod(true)},
		{name: "config map", op: admissionv1.Create, kind: configMapKind, obj: &corev1.ConfigMap{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: "app", Labels: map[string]string{kube.LabelEnabled: "true"}},
		}},
		{name: "no object", op: admissionv1.Create, kind: deploymentKind, denied: "Deployment default/app: the request has no object"},
		{name: "wrong kind for the resource", op: admissionv1.Create, kind: deploymentKind, obj: pod(true),
			denied: `Deployment default/app: the object is apiVersion "v1" kind "Pod"; accepted: apiVersion "apps/v1" kind "Deployment", as the request says`},
	}
	h := newHandler(t, nil)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, h, "/mutate", reviewBody(t, tc.op, tc.kind, tc.obj, false))
			if tc.denied != "" {
				if resp.Allowed || resp.Result == nil || resp.Result.Message != tc.denied {
					t.Fatalf("got allowed=%v result=%+v; want denied with %q", resp.Allowed, resp.Result, tc.denied)
				}
				return
			}
			if !resp.Allowed {
				t.Fatalf("denied: %+v", resp.Result)
			}
			if !tc.patched {
				if resp.Patch != nil || resp.PatchType != nil {
					t.Fatalf("unexpected patch %s", resp.Patch)
				}
				return
			}
			if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
				t.Fatalf("patch type %v, want JSONPatch", resp.PatchType)
			}
			got := applyPatch(t, mustJSON(t, tc.obj), resp.Patch)
			switch obj := tc.obj.(type) {
			case *appsv1.Deployment:
				want := injected(t, obj)
				var d appsv1.Deployment
				if err := json.Unmarshal(got, &d); err != nil {
					t.Fatal(err)
				}
				if !equality.Semantic.DeepEqual(&d, want) {
					t.Fatalf("patched deployment:\n%s\nwant:\n%s", got, mustJSON(t, want))
				}
			case *corev1.Pod:
				tpl := corev1.PodTemplateSpec{ObjectMeta: obj.ObjectMeta, Spec: obj.Spec}
				if err := inject.Template(tpl.ObjectMeta, &tpl, testInject); err != nil {
					t.Fatal(err)
				}
				want := obj.DeepCopy()
				want.ObjectMeta, want.Spec = tpl.ObjectMeta, tpl.Spec
				var p corev1.Pod
				if err := json.Unmarshal(got, &p); err != nil {
					t.Fatal(err)
				}
				if !equality.Semantic.DeepEqual(&p, want) {
					t.Fatalf("patched pod:\n%s\nwant:\n%s", got, mustJSON(t, want))
				}
				// The patched pod is injected: a second pass leaves it.
				again := post(t, h, "/mutate", reviewBody(t, tc.op, tc.kind, &p, false))
				if !again.Allowed || again.Patch != nil {
					t.Fatalf("injected pod mutated again: %+v", again)
				}
			}
		})
	}
}

func TestValidate(t *testing.T) {
	badAnnotations := map[string]string{
		inject.AnnotationTimeout:           "2h",
		"swell.run/timout":                 "30s",
		inject.AnnotationQueueDepth:        "5",
		autoscaling.Prefix + "min-scale":   "-1",
		inject.AnnotationStreamIdleTimeout: "soon",
	}
	bad := deployment(true, badAnnotations)
	wantErr := inject.Template(bad.ObjectMeta, bad.Spec.Template.DeepCopy(), testInject)
	if wantErr == nil || strings.Count(wantErr.Error(), "\n") != len(badAnnotations)-1 {
		t.Fatalf("inject gave %v; want one problem per bad annotation", wantErr)
	}
	labelledOnly := deployment(false, nil)
	labelledOnly.Labels[kube.LabelEnabled] = "true"

	cases := []struct {
		name    string
		op      admissionv1.Operation
		obj     any
		dryRun  bool
		denied  string
		warning string
	}{
		{name: "bad annotations", op: admissionv1.Create, obj: bad, denied: wantErr.Error()},
		{name: "bad annotations update", op: admissionv1.Update, obj: bad, denied: wantErr.Error()},
		{name: "good", op: admissionv1.Create, obj: deployment(true, map[string]string{inject.AnnotationTimeout: "30s"})},
		{name: "good injected", op: admissionv1.Update, obj: injected(t, deployment(true, nil))},
		{name: "unlabelled with annotations", op: admissionv1.Create, obj: deployment(false, badAnnotations), warning: warnNotLabelled},
		{name: "unlabelled", op: admissionv1.Create, obj: deployment(false, nil)},
		{name: "template unlabelled", op: admissionv1.Create, obj: labelledOnly, warning: warnTemplateUnlabled},
		{name: "delete", op: admissionv1.Delete, obj: bad},
		{name: "dry run judged alike", op: admissionv1.Create, obj: bad, dryRun: true, denied: wantErr.Error()},
	}
	core, logs := observer.New(zapcore.DebugLevel)
	h := newHandler(t, zap.New(core))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, h, "/validate", reviewBody(t, tc.op, deploymentKind, tc.obj, tc.dryRun))
			if resp.Patch != nil {
				t.Errorf("validate patched: %s", resp.Patch)
			}
			if tc.denied != "" {
				if resp.Allowed || resp.Result == nil {
					t.Fatalf("allowed; want denied with %q", tc.denied)
				}
				r := resp.Result
				if r.Message != tc.denied || r.Reason != metav1.StatusReasonInvalid || r.Code != http.StatusUnprocessableEntity {
					t.Fatalf("result %+v; want reason Invalid, code 422, message %q", r, tc.denied)
				}
				return
			}
			if !resp.Allowed {
				t.Fatalf("denied: %+v", resp.Result)
			}
			var want []string
			if tc.warning != "" {
				want = []string{tc.warning}
			}
			if !equality.Semantic.DeepEqual(resp.Warnings, want) {
				t.Fatalf("warnings %q, want %q", resp.Warnings, want)
			}
		})
	}

	denials := logs.FilterMessage("admission denied").All()
	if len(denials) != 3 {
		t.Fatalf("%d denials logged, want 3 (the dry run too)", len(denials))
	}
	for _, e := range denials {
		f := e.ContextMap()
		if e.Level != zapcore.InfoLevel || f["kind"] != "Deployment" || f["namespace"] != "default" || f["name"] != "app" {
			t.Errorf("denial logged as %v %v", e.Level, f)
		}
	}
	// The three denials are logged at info instead.
	if n := logs.FilterMessage("admission decided").FilterLevelExact(zapcore.DebugLevel).Len(); n != len(cases)-3 {
		t.Errorf("%d decisions logged at debug, want %d", n, len(cases)-3)
	}
}

func TestHTTPErrors(t *testing.T) {
	good := reviewBody(t, admissionv1.Create, deploymentKind, deployment(true, nil), false)
	v1beta1 := bytes.Replace(good, []byte(reviewAPIVersion), []byte("admission.k8s.io/v1beta1"), 1)
	cases := []struct {
		name, method, path, contentType string
		body                            []byte
		status                          int
		text                            string
	}{
		{"get mutate", http.MethodGet, "/mutate", "", nil, http.StatusMethodNotAllowed, ""},
		{"put validate", http.MethodPut, "/validate", "application/json", good, http.StatusMethodNotAllowed, ""},
		{"unknown path", http.MethodPost, "/inject", "application/json", good, http.StatusNotFound, ""},
		{"wrong content type", http.MethodPost, "/mutate", "application/yaml", good, http.StatusUnsupportedMediaType, "accepted: application/json"},
		{"no content type", http.MethodPost, "/validate", "", good, http.StatusUnsupportedMediaType, "accepted: application/json"},
		{"garbage", http.MethodPost, "/mutate", "application/json", []byte("{not json"), http.StatusBadRequest, "decode AdmissionReview"},
		{"trailing garbage", http.MethodPost, "/mutate", "application/json", append(bytes.Clone(good), "x"...), http.StatusBadRequest, "decode AdmissionReview"},
		{"oversized", http.MethodPost, "/mutate", "application/json", bytes.Repeat([]byte(" "), 64<<10+1), http.StatusBadRequest, "larger than 65536 bytes"},
		{"other version", http.MethodPost, "/validate", "application/json", v1beta1, http.StatusBadRequest, "accepted: apiVersion admission.k8s.io/v1"},
		{"no request", http.MethodPost, "/validate", "application/json; charset=utf-8", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), http.StatusBadRequest, "no request"},
		{"healthz", http.MethodGet, "/healthz", "", nil, http.StatusOK, "ok"},
	}
	srv := httptest.NewServer(newHandler(t, nil))
	t.Cleanup(srv.Close)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, srv.URL+tc.path, bytes.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if tc.contentType != "" {
				req.Header.Set("Content-Type", tc.contentType)
			}
			res, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tc.status || !strings.Contains(string(body), tc.text) {
				t.Fatalf("got %d %q; want %d containing %q", res.StatusCode, body, tc.status, tc.text)
			}
		})
	}
}

func TestNew(t *testing.T) {
	if _, err := New(Config{}); err == nil || !strings.Contains(err.Error(), "image") {
		t.Errorf("no image: got %v, want an error naming the image", err)
	}
	if _, err := New(Config{Inject: testInject, MaxBody: -1}); err == nil {
		t.Error("negative MaxBody accepted")
	}
}

// TestValidateWithCurrentDefaults: with Config.Defaults, each request is
// judged against the defaults as they are at that moment.
func TestValidateWithCurrentDefaults(t *testing.T) {
	d := autoscaling.DefaultDefaults()
	h, err := New(Config{Inject: testInject, Defaults: func() autoscaling.Defaults { return d }})
	if err != nil {
		t.Fatal(err)
	}
	obj := deployment(true, map[string]string{autoscaling.Prefix + autoscaling.KeyMaxScale: "10"})
	if resp := post(t, h, "/validate", reviewBody(t, admissionv1.Create, deploymentKind, obj, false)); !resp.Allowed {
		t.Fatalf("max-scale 10 denied under the built-in defaults: %+v", resp.Result)
	}
	d.MaxScaleLimit = 5
	resp := post(t, h, "/validate", reviewBody(t, admissionv1.Create, deploymentKind, obj, false))
	if resp.Allowed || resp.Result == nil || !strings.Contains(resp.Result.Message, autoscaling.KeyMaxScale) {
		t.Fatalf("max-scale 10 under a max-scale-limit of 5: allowed %t, result %+v; want denied naming max-scale", resp.Allowed, resp.Result)
	}
}
