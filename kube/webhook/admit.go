package webhook

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"go.uber.org/zap"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/kube/inject"
	"github.com/swell-run/swell/pkg/autoscaling"
)

// Warnings for objects that look meant for Swell but that Swell ignores.
const (
	warnNotLabelled      = "not labelled " + kube.LabelEnabled + "=true: Swell ignores its autoscaling.swell.run annotations"
	warnTemplateUnlabled = "labelled " + kube.LabelEnabled + "=true but its pod template is not: Swell does not inject it; label the pod template too"
)

// admitter makes the admission decisions.
type admitter struct {
	inject   inject.Config
	defaults func() autoscaling.Defaults
	pushURL  func() string
	log      *zap.Logger
}

// config is how to inject now: with the cluster's current defaults when
// they are known.
func (a *admitter) config() inject.Config {
	cfg := a.inject
	if a.pushURL != nil {
		cfg.PushURL = a.pushURL()
	}
	if a.defaults != nil {
		cfg.Defaults = a.defaults()
	}
	return cfg
}

// object is what the webhooks read of an admitted workload or pod.
type object struct {
	kind, namespace, name string
	// meta is the workload's own metadata, whose annotations configure it.
	meta metav1.ObjectMeta
	// tpl is its pod template; for a pod, its metadata and spec.
	tpl corev1.PodTemplateSpec
	pod bool
}

// enabled says whether injection acts on o: its pod template opts in.
func (o *object) enabled() bool { return inject.Enabled(o.tpl.Labels) }

// injectedPod says whether o is a pod created from an injected template.
// Its annotations are the template's, not its workload's, so injecting or
// validating it again would read the wrong settings.
func (o *object) injectedPod() bool {
	_, ok := o.tpl.Annotations[inject.AnnotationInjected]
	return o.pod && ok
}

// mutate injects the queue-proxy into an opted-in workload or pod.
func (a *admitter) mutate(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if req.Kind == serviceKind {
		return a.mutateService(req)
	}
	o, denied := decode(req)
	switch {
	case denied != nil:
		return a.decided("mutate", req, nil, denied, "malformed object")
	case o == nil:
		return a.decided("mutate", req, nil, allowed(), "not a Swell kind or operation")
	case !o.enabled():
		return a.decided("mutate", req, o, allowed(), "not enabled")
	case o.injectedPod():
		return a.decided("mutate", req, o, allowed(), "pod of an injected template")
	}

	// Template builds the injected template on a deep copy of its own and
	// leaves o.tpl's maps and slices as they were.
	tpl := o.tpl
	if err := inject.Template(o.meta, &tpl, a.config()); err != nil {
		// One webhook denies, the validating one: its failure policy is
		// the one that decides whether invalid settings may pass.
		return a.decided("mutate", req, o, allowed(), "invalid: left to validation")
	}
	if equality.Semantic.DeepEqual(&tpl, &o.tpl) {
		return a.decided("mutate", req, o, allowed(), "already injected")
	}

	var ops []patchOp
	if o.pod {
		// Injection changes only the pod's spec and annotations, which it
		// always sets (swell.run/injected).
		op := "replace"
		if o.tpl.Annotations == nil {
			op = "add"
		}
		ops = []patchOp{
			{Op: "replace", Path: "/spec", Value: tpl.Spec},
			{Op: op, Path: "/metadata/annotations", Value: tpl.Annotations},
		}
	} else {
		// The template exists: its labels enabled the workload.
		ops = []patchOp{{Op: "replace", Path: "/spec/template", Value: tpl}}
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		return a.decided("mutate", req, o, deny(http.StatusInternalServerError, metav1.StatusReasonInternalError, fmt.Sprintf("encode patch: %v", err)), "patch failed")
	}
	resp := allowed()
	pt := admissionv1.PatchTypeJSONPatch
	resp.Patch, resp.PatchType = patch, &pt
	return a.decided("mutate", req, o, resp, "injected")
}

// validate denies an opted-in workload or pod whose Swell annotations
// injection would reject, with every problem, one per line.
func (a *admitter) validate(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	// A dry run is judged like the real request: `kubectl apply
	// --dry-run=server` must show the same errors. The webhook has no side
	// effects, so nothing else differs.
	o, denied := decode(req)
	switch {
	case denied != nil:
		return a.decided("validate", req, nil, denied, "malformed object")
	case o == nil:
		return a.decided("validate", req, nil, allowed(), "not a Swell kind or operation")
	case o.injectedPod():
		return a.decided("validate", req, o, allowed(), "pod of an injected template")
	case !o.enabled():
		resp := allowed()
		if !o.pod && inject.Enabled(o.meta.Labels) {
			resp.Warnings = append(resp.Warnings, warnTemplateUnlabled)
		} else if hasAutoscaling(o.meta.Annotations) {
			resp.Warnings = append(resp.Warnings, warnNotLabelled)
		}
		return a.decided("validate", req, o, resp, "not enabled")
	}
	tpl := o.tpl
	if err := inject.Template(o.meta, &tpl, a.config()); err != nil {
		return a.decided("validate", req, o, invalid(err.Error()), "invalid")
	}
	return a.decided("validate", req, o, allowed(), "valid")
}

// decided logs a decision and returns it.
func (a *admitter) decided(webhook string, req *admissionv1.AdmissionRequest, o *object, resp *admissionv1.AdmissionResponse, why string) *admissionv1.AdmissionResponse {
	kind, namespace, name := req.Kind.Kind, req.Namespace, req.Name
	if o != nil {
		kind, namespace, name = o.kind, o.namespace, o.name
	}
	fields := []zap.Field{
		zap.String("webhook", webhook),
		zap.String("kind", kind),
		zap.String("namespace", namespace),
		zap.String("name", name),
		zap.String("operation", string(req.Operation)),
		zap.String("uid", string(req.UID)),
		zap.Bool("allowed", resp.Allowed),
		zap.String("decision", why),
	}
	if resp.Allowed {
		a.log.Debug("admission decided", fields...)
		return resp
	}
	a.log.Info("admission denied", append(fields, zap.String("message", resp.Result.Message))...)
	return resp
}

// decode reads the object of a request the webhooks look at: one of
// inject.Kinds at one of its operations. It returns nil and nil for any
// other request, and a denial for an object it cannot read.
func decode(req *admissionv1.AdmissionRequest) (*object, *admissionv1.AdmissionResponse) {
	if req.SubResource != "" {
		// status, scale, ephemeralcontainers...: not the pod template.
		return nil, nil
	}
	gvk := req.Kind
	k, ok := inject.KindOf(gvk)
	if !ok || !slices.Contains(k.Operations, req.Operation) {
		return nil, nil
	}
	pod := k.Pod
	what := gvk.Kind + " " + objectKey(req.Namespace, req.Name)
	if len(req.Object.Raw) == 0 {
		return nil, badRequest(fmt.Sprintf("%s: the request has no object", what))
	}

	o := &object{kind: gvk.Kind, pod: pod}
	var tm metav1.TypeMeta
	if pod {
		var p corev1.Pod
		if err := json.Unmarshal(req.Object.Raw, &p); err != nil {
			return nil, badRequest(fmt.Sprintf("%s: decode object: %v", what, err))
		}
		tm, o.meta = p.TypeMeta, p.ObjectMeta
		o.tpl = corev1.PodTemplateSpec{ObjectMeta: p.ObjectMeta, Spec: p.Spec}
	} else {
		// Only what injection reads: the fields the workload kinds have
		// in common.
		var w struct {
			metav1.TypeMeta `json:",inline"`
			Metadata        metav1.ObjectMeta `json:"metadata"`
			Spec            struct {
				Template corev1.PodTemplateSpec `json:"template"`
			} `json:"spec"`
		}
		if err := json.Unmarshal(req.Object.Raw, &w); err != nil {
			return nil, badRequest(fmt.Sprintf("%s: decode object: %v", what, err))
		}
		tm, o.meta, o.tpl = w.TypeMeta, w.Metadata, w.Spec.Template
	}
	apiVersion := k.APIVersion()
	if (tm.Kind != "" || tm.APIVersion != "") && (tm.Kind != gvk.Kind || tm.APIVersion != apiVersion) {
		return nil, badRequest(fmt.Sprintf("%s: the object is apiVersion %q kind %q; accepted: apiVersion %q kind %q, as the request says", what, tm.APIVersion, tm.Kind, apiVersion, gvk.Kind))
	}

	// A created object may have no namespace (the request's) or no name yet
	// (generateName).
	o.namespace, o.name = req.Namespace, req.Name
	if o.namespace == "" {
		o.namespace = o.meta.Namespace
	}
	if o.name == "" {
		o.name = o.meta.Name
	}
	if o.name == "" {
		o.name = o.meta.GenerateName
	}
	return o, nil
}

// hasAutoscaling says whether annotations hold an autoscaling.swell.run/
// key.
func hasAutoscaling(annotations map[string]string) bool {
	for k := range annotations {
		if strings.HasPrefix(k, autoscaling.Prefix) {
			return true
		}
	}
	return false
}

func objectKey(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// patchOp is one operation of a JSON patch (RFC 6902).
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

func allowed() *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: true}
}

func deny(code int32, reason metav1.StatusReason, message string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Result: &metav1.Status{
		Status:  metav1.StatusFailure,
		Message: message,
		Reason:  reason,
		Code:    code,
	}}
}

func invalid(message string) *admissionv1.AdmissionResponse {
	return deny(http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, message)
}

func badRequest(message string) *admissionv1.AdmissionResponse {
	return deny(http.StatusBadRequest, metav1.StatusReasonBadRequest, message)
}
