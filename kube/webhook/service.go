package webhook

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/swell-run/swell/kube"
)

var serviceKind = metav1.GroupVersionKind{Group: "", Version: "v1", Kind: "Service"}

// mutateService keeps a Service Swell routes without a selector. Swell
// moves a routed Service's selector into the kube.AnnotationSelector
// annotation and writes its endpoints itself (docs/routing.md); a
// `kubectl apply` of the user's manifest puts the selector back, and for
// as long as it stays, Kubernetes sends part of the traffic straight to the
// app's port. Here the selector is taken out again as it is written, and
// kept in the annotation: where it changed, the annotation takes the new
// one, so the routing controller sees what the user asked for.
func (a *admitter) mutateService(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if req.SubResource != "" || (req.Operation != admissionv1.Create && req.Operation != admissionv1.Update) {
		return a.decided("mutate", req, nil, allowed(), "not a Service write")
	}
	what := "Service " + objectKey(req.Namespace, req.Name)
	if len(req.Object.Raw) == 0 {
		return a.decided("mutate", req, nil, badRequest(what+": the request has no object"), "malformed object")
	}
	var svc corev1.Service
	if err := json.Unmarshal(req.Object.Raw, &svc); err != nil {
		return a.decided("mutate", req, nil, badRequest(fmt.Sprintf("%s: decode object: %v", what, err)), "malformed object")
	}
	saved, routed := svc.Annotations[kube.AnnotationSelector]
	switch {
	case !routed || svc.Labels[kube.LabelDeployment] == "":
		return a.decided("mutate", req, nil, allowed(), "not routed by Swell")
	case len(svc.Spec.Selector) == 0:
		return a.decided("mutate", req, nil, allowed(), "routed, no selector")
	}

	ops := []patchOp{{Op: "remove", Path: "/spec/selector"}}
	var old map[string]string
	if err := json.Unmarshal([]byte(saved), &old); err != nil || !maps.Equal(old, svc.Spec.Selector) {
		raw, err := json.Marshal(svc.Spec.Selector)
		if err != nil {
			return a.decided("mutate", req, nil, deny(http.StatusInternalServerError, metav1.StatusReasonInternalError, fmt.Sprintf("encode selector: %v", err)), "patch failed")
		}
		ops = append(ops, patchOp{Op: "replace", Path: "/metadata/annotations/" + escapePointer(kube.AnnotationSelector), Value: string(raw)})
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		return a.decided("mutate", req, nil, deny(http.StatusInternalServerError, metav1.StatusReasonInternalError, fmt.Sprintf("encode patch: %v", err)), "patch failed")
	}
	resp := allowed()
	pt := admissionv1.PatchTypeJSONPatch
	resp.Patch, resp.PatchType = patch, &pt
	return a.decided("mutate", req, nil, resp, "selector kept in "+kube.AnnotationSelector)
}

// escapePointer escapes a key for a JSON pointer (RFC 6901).
func escapePointer(key string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(key)
}
