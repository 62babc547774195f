// Package kube holds what Swell's Kubernetes components agree on: the
// labels and annotations they write, the names of the objects they create,
// and how a component finds its API server.
//
// The objects, for an opted-in Deployment D in namespace N served by a
// Service S (see docs/kubernetes.md):
//
//   - the pods-Service PodsServiceName(D): a headless Service selecting D's
//     pods on the queue-proxy's ports, created by the autoscaler. Its
//     EndpointSlices, kept by Kubernetes, are the private list of D's pods
//     that the activator routes to and the autoscaler scrapes.
//   - S itself, taken over: its selector moves to AnnotationSelector, so
//     Kubernetes stops writing endpoints for it, and Swell writes one
//     EndpointSlice, RouteSliceName(S), listing either D's ready pods on the
//     queue-proxy port or the activator.
package kube

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/swell-run/swell/pkg/service"
)

// Prefix starts every label and annotation key Swell reads or writes
// outside the autoscaling ones (autoscaling.Prefix).
const Prefix = "swell.run/"

// LabelEnabled, set to "true" on a workload and its pod template, opts the
// workload in.
const LabelEnabled = Prefix + "enabled"

// Labels Swell writes on the objects it creates or takes over.
const (
	// LabelDeployment names, on a pods-Service and a route EndpointSlice,
	// the Deployment they serve.
	LabelDeployment = Prefix + "deployment"
	// LabelRoute is on a route EndpointSlice: RouteActivator or RoutePods,
	// saying whose endpoints the slice holds.
	LabelRoute = Prefix + "route"
	// LabelBucket and LabelBuckets are on the EndpointSlice of the Service
	// AutoscalerService that the leader of one bucket of services writes
	// when the autoscaler is sharded (package shard): the bucket, and the
	// number of buckets. With one bucket the slice carries neither.
	LabelBucket  = Prefix + "bucket"
	LabelBuckets = Prefix + "buckets"
	// LabelManagedBy is the standard label on every object Swell creates.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedBy is LabelManagedBy's value.
	ManagedBy = "swell"
	// EndpointSliceController is the endpointslice.kubernetes.io/managed-by
	// value on Swell's route EndpointSlices, so Kubernetes' own controllers
	// leave them alone.
	EndpointSliceController = "controller.swell.run"
)

// The values of LabelRoute.
const (
	RouteActivator = "activator"
	RoutePods      = "pods"
)

// Annotations.
const (
	// AnnotationSelector holds, on a Service Swell routes, the selector it
	// had (JSON), so that Swell can give it back.
	AnnotationSelector = Prefix + "selector"
	// AnnotationServices lists, on a pods-Service, the names of the
	// Services Swell routes to the Deployment, comma-separated, sorted: the
	// activator routes their host names to it.
	AnnotationServices = Prefix + "services"
	// AnnotationContainerConcurrency is copied from the Deployment to its
	// pods-Service, validated, for the activator.
	AnnotationContainerConcurrency = Prefix + "container-concurrency"
	// AnnotationStatus is the autoscaler's status of a Deployment, JSON.
	// The autoscaler writes it; it is accepted on a workload and never read
	// as a setting.
	AnnotationStatus = Prefix + "status"
)

// Ports and names in Swell's own namespace.
const (
	// DefaultSystemNamespace is where deploy/ installs Swell.
	DefaultSystemNamespace = "swell-system"
	// ActivatorService is the activator's Service; its EndpointSlices are
	// the endpoints a routed Service gets while the activator is in its
	// path. Its port PortNameHTTP is the activator's serving port.
	ActivatorService = "activator"
	// AutoscalerService is the Service the activators report to. It has no
	// selector: the autoscaler that holds the lead writes its one endpoint.
	AutoscalerService = "autoscaler"
	// WebhookService is the admission webhooks' Service.
	WebhookService = "swell-webhook"
	// WebhookConfiguration names both the mutating and the validating
	// webhook configuration.
	WebhookConfiguration = "swell-webhook"
	// WebhookCertSecret holds the CA and the serving certificate of the
	// autoscaler's TLS servers (the webhooks' and the activators').
	WebhookCertSecret = "swell-webhook-certs"
	// CAConfigMap holds, under CAConfigMapKey, the PEM bundle of the CAs
	// that sign the autoscaler's serving certificate: the activators trust
	// it when they dial the autoscaler.
	CAConfigMap    = "swell-ca"
	CAConfigMapKey = "ca.crt"
	// ActivatorServiceAccount is the activators' service account: the
	// autoscaler accepts a report only with a token of it bound to the pod
	// the report names.
	ActivatorServiceAccount = "activator"
	// DefaultsConfigMap holds the cluster-wide autoscaling defaults.
	DefaultsConfigMap = "swell-defaults"
	// LeaseName is the autoscalers' leader election lock; sharded, bucket
	// b of n has its own, BucketLeaseName(b, n).
	LeaseName = "swell-autoscaler"

	// PortNameHTTP names the serving port on a pods-Service (the
	// queue-proxy's serving port) and on the activator's Service.
	PortNameHTTP = "http"
	// PortNameStats names the queue-proxy's metrics port (it serves
	// /stats) on a pods-Service.
	PortNameStats = "stats"
	// PortNamePush names the autoscaler's push port, where queue-proxies
	// push their stats, on the autoscaler's Service.
	PortNamePush = "push"
)

// maxName is the longest Service and EndpointSlice name that is also a DNS
// label.
const maxName = 63

// PodsServiceName is the name of deployment's pods-Service.
func PodsServiceName(deployment string) string { return suffixed(deployment, "-swell-pods") }

// RouteSliceName is the name of the EndpointSlice Swell writes for the
// Service named service.
func RouteSliceName(service string) string { return suffixed(service, "-swell") }

// RouteSliceNameIPv6 is the name of the EndpointSlice Swell writes for
// the IPv6 family of the Service named service, when it has one.
func RouteSliceNameIPv6(service string) string { return suffixed(service, "-swell-ipv6") }

// suffixed appends suffix to name. A result that would not be a DNS-1035
// label (too long, a dot, a leading digit) is made one: the name is cleaned
// and cut, and a hash of all of it keeps names distinct.
func suffixed(name, suffix string) string {
	if len(name)+len(suffix) <= maxName && len(validation.IsDNS1035Label(name)) == 0 {
		return name + suffix
	}
	sum := sha256.Sum256([]byte(name))
	h := hex.EncodeToString(sum[:])[:8]
	clean := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, strings.ToLower(name))
	if clean == "" || clean[0] < 'a' || clean[0] > 'z' {
		clean = "s-" + clean
	}
	if cut := maxName - len(suffix) - len(h) - 1; len(clean) > cut {
		clean = clean[:cut]
	}
	return strings.TrimRight(clean, "-") + "-" + h + suffix
}

// HostNames are the names a Service is reached by inside the cluster, as
// the activator matches the Host header: name.namespace, name.namespace.svc
// and name.namespace.svc.<domain>.
func HostNames(name, namespace, domain string) []string {
	base := name + "." + namespace
	return []string{base, base + ".svc", base + ".svc." + domain}
}

// OptedIn is Swell's one rule for a Deployment it autoscales and routes:
// it and its pod template both carry LabelEnabled "true", and it is not
// being deleted (a Deployment on its way out is given back, not scaled).
func OptedIn(d *appsv1.Deployment) bool {
	return d.DeletionTimestamp == nil &&
		d.Labels[LabelEnabled] == "true" && d.Spec.Template.Labels[LabelEnabled] == "true"
}

// KeyOf returns the service key of Deployment d, as it is: whether it is
// a valid key (service.New) is for the reconciler to judge and report.
func KeyOf(d *appsv1.Deployment) service.Key {
	return service.Key{Namespace: d.Namespace, Name: d.Name}
}

// BucketLeaseName is the Lease of bucket b of n when the autoscaler is
// sharded ("swell-autoscaler-3-of-10"); with one bucket it is LeaseName.
// The number of buckets is in the name so that replicas configured with
// different numbers never take the same Lease for different services.
func BucketLeaseName(b, n int) string {
	if n <= 1 {
		return LeaseName
	}
	return fmt.Sprintf("%s-%d-of-%d", LeaseName, b, n)
}

// BucketSliceName is the name of the EndpointSlice of the Service
// AutoscalerService that the leader of bucket b of n writes; with one
// bucket it is the Service's name.
func BucketSliceName(b, n int) string {
	if n <= 1 {
		return AutoscalerService
	}
	return fmt.Sprintf("%s-%d-of-%d", AutoscalerService, b, n)
}
