package webhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FuzzReview: no body makes either webhook panic; each gets a 200 with a
// response review, or a 4xx.
func FuzzReview(f *testing.F) {
	statefulSet := metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "StatefulSet"}
	f.Add(reviewBody(f, admissionv1.Create, deploymentKind, deployment(true, nil), false))
	f.Add(reviewBody(f, admissionv1.Update, statefulSet, deployment(true, map[string]string{"swell.run/timeout": "x"}), false))
	f.Add(reviewBody(f, admissionv1.Create, podKind, pod(true), false))
	f.Add(reviewBody(f, admissionv1.Create, deploymentKind, nil, false))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"apps","version":"v1","kind":"Deployment"},"operation":"CREATE","object":{"spec":{"template":{"metadata":{"labels":{"swell.run/enabled":"true"}},"spec":{"containers":[{"name":"queue-proxy"},{}]}}}}}}`))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"kind":{"version":"v1","kind":"Pod"},"operation":"CREATE","object":null}}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{}`))

	h := newHandler(f, nil)
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, path := range []string{"/mutate", "/validate"} {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			h.ServeHTTP(rec, req)
			switch {
			case rec.Code == http.StatusOK:
				var out admissionv1.AdmissionReview
				if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
					t.Fatalf("%s: 200 without a response review: %v %s", path, err, rec.Body)
				}
				if !out.Response.Allowed && out.Response.Result == nil {
					t.Fatalf("%s: denied without a reason: %s", path, rec.Body)
				}
			case rec.Code < 400 || rec.Code >= 500:
				t.Fatalf("%s: status %d: %s", path, rec.Code, rec.Body)
			}
		}
	})
}
