package inject

import (
	"slices"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Kind is a kind of object Swell injects.
type Kind struct {
	metav1.GroupVersionKind
	// Resource names the kind in webhook rules and API paths.
	Resource string
	// Operations are the admission operations at which the webhooks
	// inject and validate it.
	Operations []admissionv1.Operation
	// Pod says the object is a pod, its own metadata and spec the
	// template; any other kind holds its pod template in spec.template.
	Pod bool
}

// kinds are the kinds Swell injects. A Pod only at its creation: its spec
// cannot change afterwards.
var kinds = []Kind{
	workload("Deployment", "deployments"),
	workload("StatefulSet", "statefulsets"),
	workload("ReplicaSet", "replicasets"),
	{
		GroupVersionKind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource:         "pods",
		Operations:       []admissionv1.Operation{admissionv1.Create},
		Pod:              true,
	},
}

func workload(kind, resource string) Kind {
	return Kind{
		GroupVersionKind: metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: kind},
		Resource:         resource,
		Operations:       []admissionv1.Operation{admissionv1.Create, admissionv1.Update},
	}
}

// Kinds returns every kind Swell injects: the webhooks, `swell inject` and
// the webhook registration in deploy/ all act on these.
func Kinds() []Kind { return slices.Clone(kinds) }

// KindOf returns the kind gvk names, and false for a kind Swell does not
// inject.
func KindOf(gvk metav1.GroupVersionKind) (Kind, bool) {
	i := slices.IndexFunc(kinds, func(k Kind) bool { return k.GroupVersionKind == gvk })
	if i < 0 {
		return Kind{}, false
	}
	return kinds[i], true
}

// APIVersion is the kind's apiVersion as manifests write it: "apps/v1",
// "v1".
func (k Kind) APIVersion() string {
	if k.Group == "" {
		return k.Version
	}
	return k.Group + "/" + k.Version
}
