package webhook

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.yaml from the current answers")

// TestGolden: the webhooks' answers to whole AdmissionReviews, patches
// included, pinned in testdata/CASE.golden.yaml (go test -update rewrites
// them; review the diff).
func TestGolden(t *testing.T) {
	cases := []struct {
		name, input, path string
		op                admissionv1.Operation
		kind              metav1.GroupVersionKind
	}{
		{"mutate-deployment", "deployment.yaml", "/mutate", admissionv1.Create, deploymentKind},
		{"validate-deployment", "deployment.yaml", "/validate", admissionv1.Create, deploymentKind},
		{"mutate-deployment-bad", "deployment-bad.yaml", "/mutate", admissionv1.Update, deploymentKind},
		{"validate-deployment-bad", "deployment-bad.yaml", "/validate", admissionv1.Update, deploymentKind},
		{"mutate-service-reapplied", "service-reapplied.yaml", "/mutate", admissionv1.Update, serviceKind},
		{"mutate-deployment-cpu", "deployment-cpu.yaml", "/mutate", admissionv1.Create, deploymentKind},
		{"validate-deployment-cpu-bad", "deployment-cpu-bad.yaml", "/validate", admissionv1.Create, deploymentKind},
		{"mutate-deployment-cpu-bad", "deployment-cpu-bad.yaml", "/mutate", admissionv1.Create, deploymentKind},
	}
	h := newHandler(t, nil)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("testdata", tc.input))
			if err != nil {
				t.Fatal(err)
			}
			obj, err := yaml.YAMLToJSON(raw)
			if err != nil {
				t.Fatalf("%s: %v", tc.input, err)
			}
			resp := post(t, h, tc.path, reviewBody(t, tc.op, tc.kind, json.RawMessage(obj), false))
			// The patch as a document, not base64, so the golden file
			// reads as what it does.
			shown := struct {
				Allowed   bool                   `json:"allowed"`
				Result    *metav1.Status         `json:"result,omitempty"`
				Warnings  []string               `json:"warnings,omitempty"`
				PatchType *admissionv1.PatchType `json:"patchType,omitempty"`
				Patch     json.RawMessage        `json:"patch,omitempty"`
			}{resp.Allowed, resp.Result, resp.Warnings, resp.PatchType, resp.Patch}
			js, err := json.Marshal(shown)
			if err != nil {
				t.Fatal(err)
			}
			got, err := yaml.JSONToYAML(js)
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", tc.name+".golden.yaml")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to write it)", err)
			}
			if string(got) != string(want) {
				t.Errorf("answer to %s %s:\n%s\nwant (%s):\n%s", tc.path, tc.input, got, golden, want)
			}
		})
	}
}
