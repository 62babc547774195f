package knative

import (
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The objects below are shaped like Knative Serving's serving.knative.dev/v1
// API, only as far as an import reads them: a manifest decodes into them
// strictly, so a field they do not know is reported rather than lost.

// Group is Knative Serving's API group.
const Group = "serving.knative.dev"

// APIVersion is the version of a Service swell import reads.
const APIVersion = Group + "/v1"

// Service is a Knative Service: one revision template, and the traffic
// between its revisions.
type Service struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ServiceSpec `json:"spec,omitempty"`
	// Status is what Knative reported; an import reads nothing of it.
	Status json.RawMessage `json:"status,omitempty"`
}

// ServiceSpec is a Service's desired state.
type ServiceSpec struct {
	Template RevisionTemplateSpec `json:"template"`
	Traffic  []TrafficTarget      `json:"traffic,omitempty"`
}

// RevisionTemplateSpec is the template of the Service's revisions: its
// metadata becomes each revision's, and its pods'.
type RevisionTemplateSpec struct {
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              RevisionSpec `json:"spec,omitempty"`
}

// RevisionSpec is a Kubernetes pod spec and the few settings Knative adds
// to it.
type RevisionSpec struct {
	corev1.PodSpec `json:",inline"`
	// ContainerConcurrency is the most requests one pod serves at once; 0
	// is no limit.
	ContainerConcurrency *int64 `json:"containerConcurrency,omitempty"`
	// TimeoutSeconds bounds a whole request.
	TimeoutSeconds *int64 `json:"timeoutSeconds,omitempty"`
	// ResponseStartTimeoutSeconds bounds the wait for the response to begin.
	ResponseStartTimeoutSeconds *int64 `json:"responseStartTimeoutSeconds,omitempty"`
	// IdleTimeoutSeconds bounds the time the response sends no byte.
	IdleTimeoutSeconds *int64 `json:"idleTimeoutSeconds,omitempty"`
}

// TrafficTarget sends a share of the Service's traffic to a revision.
type TrafficTarget struct {
	Tag               string `json:"tag,omitempty"`
	RevisionName      string `json:"revisionName,omitempty"`
	ConfigurationName string `json:"configurationName,omitempty"`
	LatestRevision    *bool  `json:"latestRevision,omitempty"`
	Percent           *int64 `json:"percent,omitempty"`
	URL               string `json:"url,omitempty"`
}

// DomainMapping maps a domain name (its name) to a Knative Service or
// another addressable object.
type DomainMapping struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		Ref struct {
			APIVersion string `json:"apiVersion,omitempty"`
			Kind       string `json:"kind,omitempty"`
			Name       string `json:"name,omitempty"`
			Namespace  string `json:"namespace,omitempty"`
		} `json:"ref"`
	} `json:"spec"`
}
