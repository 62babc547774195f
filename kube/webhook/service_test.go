package webhook

import (
	"encoding/json"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/swell-run/swell/kube"
)

// routedService is a Service as Swell's routing leaves it, with selector
// put back on it (as `kubectl apply` of the user's manifest does).
func routedService(saved string, selector map[string]string) *corev1.Service {
	svc := &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "default",
			Labels:      map[string]string{kube.LabelDeployment: "app"},
			Annotations: map[string]string{kube.AnnotationSelector: saved, "keep": "me"},
		},
		Spec: corev1.ServiceSpec{Selector: selector, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}
	return svc
}

func TestMutateServiceKeepsRoutedServicesWithoutSelector(t *testing.T) {
	h := newHandler(t, nil)
	cases := []struct {
		name      string
		op        admissionv1.Operation
		svc       *corev1.Service
		patched   bool
		wantSaved string
	}{
		{name: "selector put back", op: admissionv1.Update, svc: routedService(`{"app":"app"}`, map[string]string{"app": "app"}),
			patched: true, wantSaved: `{"app":"app"}`},
		{name: "selector changed", op: admissionv1.Update, svc: routedService(`{"app":"app"}`, map[string]string{"app": "other"}),
			patched: true, wantSaved: `{"app":"other"}`},
		{name: "saved selector damaged", op: admissionv1.Update, svc: routedService(`{`, map[string]string{"app": "app"}),
			patched: true, wantSaved: `{"app":"app"}`},
		{name: "created routed", op: admissionv1.Create, svc: routedService(`{"app":"app"}`, map[string]string{"app": "app"}),
			patched: true, wantSaved: `{"app":"app"}`},
		{name: "routed without selector", op: admissionv1.Update, svc: routedService(`{"app":"app"}`, nil)},
		{name: "not routed", op: admissionv1.Update, svc: func() *corev1.Service {
			s := routedService(`{"app":"app"}`, map[string]string{"app": "app"})
			delete(s.Labels, kube.LabelDeployment)
			return s
		}()},
		{name: "given back by Swell", op: admissionv1.Update, svc: func() *corev1.Service {
			s := routedService("", map[string]string{"app": "app"})
			delete(s.Annotations, kube.AnnotationSelector)
			return s
		}()},
		{name: "delete", op: admissionv1.Delete, svc: routedService(`{"app":"app"}`, map[string]string{"app": "app"})},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, h, "/mutate", reviewBody(t, tc.op, serviceKind, tc.svc, false))
			if !resp.Allowed {
				t.Fatalf("denied: %+v", resp.Result)
			}
			if !tc.patched {
				if resp.Patch != nil {
					t.Fatalf("unexpected patch %s", resp.Patch)
				}
				return
			}
			var got corev1.Service
			if err := json.Unmarshal(applyPatch(t, mustJSON(t, tc.svc), resp.Patch), &got); err != nil {
				t.Fatal(err)
			}
			if len(got.Spec.Selector) != 0 {
				t.Errorf("selector %v left on a routed Service", got.Spec.Selector)
			}
			if s := got.Annotations[kube.AnnotationSelector]; s != tc.wantSaved {
				t.Errorf("saved selector %q, want %q", s, tc.wantSaved)
			}
			if got.Annotations["keep"] != "me" || len(got.Spec.Ports) != 1 {
				t.Errorf("the patch touched more than the selector: %+v", got)
			}
		})
	}
}

func TestMutateServiceMalformed(t *testing.T) {
	h := newHandler(t, nil)
	body := reviewBody(t, admissionv1.Update, serviceKind, json.RawMessage(`{"spec":{"selector":7}}`), false)
	if resp := post(t, h, "/mutate", body); resp.Allowed || resp.Result == nil || resp.Result.Code != 400 {
		t.Fatalf("a malformed Service: %+v, want a 400 denial", resp)
	}
}
