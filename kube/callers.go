package kube

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/swell-run/swell/pkg/autoscaling"
)

// AnnotationAllowedCallers lists, on a Deployment and on its pods-Service
// (the autoscaler copies it, validated), the namespaces whose pods may call
// the Deployment's Services through the activator besides the
// Deployment's own: a comma-separated list of namespace names, or "*" for
// any caller, also one that is no pod (a node, a hostNetwork pod, a load
// balancer's SNAT). It adds to what the activator admits anyway: exactly
// the callers the NetworkPolicies selecting the Deployment's pods would
// admit reaching them directly (every caller, if none selects them).
const AnnotationAllowedCallers = Prefix + "allowed-callers"

// CallersHint ends the activator's refusal of a caller: what would admit
// it.
const CallersHint = "The annotation " + AnnotationAllowedCallers + " on the service's Deployment admits more: " + allowedCallersAccepted + " (docs/kubernetes.md)."

const allowedCallersAccepted = "a comma-separated list of namespaces, such as ingress-nginx,monitoring, or * for any caller"

// AllowedCallers is what AnnotationAllowedCallers admits besides what the
// pods' NetworkPolicies admit.
type AllowedCallers struct {
	// Any admits every caller, also one that is no pod.
	Any bool
	// Namespaces admits the pods of these namespaces, sorted, each once.
	Namespaces []string
}

// ParseAllowedCallers reads the value of AnnotationAllowedCallers: "" (no
// other namespace), "*", or namespace names separated by commas, spaces
// around each allowed. The namespaces come back sorted, each once. A value
// that is none of these is an *autoscaling.Error naming the annotation,
// the value, every problem in it and what is accepted; the caller then
// admits no other namespace (fails closed). The webhook validates the
// annotation with it, the autoscaler copies it to the pods-Service with
// it, and the activator reads it with it.
func ParseAllowedCallers(v string) (AllowedCallers, error) {
	trimmed := strings.TrimSpace(v)
	switch trimmed {
	case "":
		return AllowedCallers{}, nil
	case "*":
		return AllowedCallers{Any: true}, nil
	}
	var (
		c        AllowedCallers
		problems []string
	)
	items := strings.Split(trimmed, ",")
	for i, item := range items {
		ns := strings.TrimSpace(item)
		switch {
		case ns == "":
			problems = append(problems, fmt.Sprintf("entry %d is empty", i+1))
		case ns == "*":
			problems = append(problems, "* admits any caller and cannot be listed with namespaces")
		case len(validation.IsDNS1123Label(ns)) > 0:
			problems = append(problems, fmt.Sprintf("%s is not a namespace name", strconv.Quote(ns)))
		default:
			c.Namespaces = append(c.Namespaces, ns)
		}
	}
	if len(problems) > 0 {
		return AllowedCallers{}, &autoscaling.Error{Key: AnnotationAllowedCallers, Name: AnnotationAllowedCallers, Value: v,
			Problem: "is not a list of namespaces: " + strings.Join(problems, "; "), Accepted: allowedCallersAccepted}
	}
	slices.Sort(c.Namespaces)
	c.Namespaces = slices.Compact(c.Namespaces)
	return c, nil
}

// String is the value of AnnotationAllowedCallers that ParseAllowedCallers
// reads as c.
func (c AllowedCallers) String() string {
	if c.Any {
		return "*"
	}
	return strings.Join(c.Namespaces, ",")
}
