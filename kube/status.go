package kube

import "time"

// AutoscalerComponent names the autoscaler to the API server: its user
// agent, and the source (source.component, reportingComponent) of the
// Events it records.
const AutoscalerComponent = "swell-autoscaler"

// Status is the JSON of the AnnotationStatus annotation: the autoscaler's
// view of a Deployment, written by package kube/controller and read by
// `swell status` (package kube/statusview) and by the next leader (its
// Memory). Every field after Memory came later and is optional, so that an
// annotation written by an older autoscaler still reads.
type Status struct {
	// Ready is the Deployment's ready pods, as the autoscaler counts them.
	Ready int `json:"ready"`
	// Desired is the replica count the latest decision asked for;
	// Recommended is the policy's recommendation before bounds and
	// scale-to-zero gating.
	Desired     int `json:"desired"`
	Recommended int `json:"recommended"`
	// Panic says the latest decision was in panic mode.
	Panic bool `json:"panic"`
	// ActivatorInPath says the activator is in the path and staying there.
	ActivatorInPath bool `json:"activatorInPath"`
	// Route is the route in effect, "activator" or "pods"; absent while
	// the Deployment has not been routed.
	Route string `json:"route,omitempty"`
	// Reason is the latest decision's reason.
	Reason string `json:"reason"`
	// Memory is what the service's policy has learned (base64, well
	// under 1 KB), kept here so that it survives an autoscaler restart
	// and a leader change; absent for a policy that learns nothing.
	Memory string `json:"memory,omitempty"`

	// Class, Metric and TargetPerPod are the service's policy, what it
	// scales on, and the metric's value one pod should see.
	Class        string  `json:"class,omitempty"`
	Metric       string  `json:"metric,omitempty"`
	TargetPerPod float64 `json:"targetPerPod,omitempty"`
	// Loads are the loads when the annotation was written. They are
	// absent from an annotation written before they were added.
	Loads StatusLoads `json:"loads,omitzero"`
}

// StatusLoads are a service's loads at the decision its Status was written
// for. A change of loads alone does not rewrite the annotation (the write
// budget is kept for scaling), so they are those of the last decision that
// changed anything else: the replicas, the route, panic mode, the reason.
// A load further than about one pod's target from them would have changed
// the desired replicas, unless min-scale or max-scale held them.
//
// Every figure is finite: an excess burst capacity of ±Inf (the activator
// always in the path, or never) is written as ±math.MaxFloat64, as the
// autoscaler's own status writes it (autoscaler.Finite), since JSON has no
// infinities.
type StatusLoads struct {
	// Time is when the decision was made.
	Time time.Time `json:"time"`
	// Load is the metric's newest second collected
	// (autoscaler.ServiceStatus.Load); Stable and Panic its averages over
	// the stable and panic windows.
	Load   float64 `json:"load"`
	Stable float64 `json:"stable"`
	Panic  float64 `json:"panic"`
	// ExcessBurstCapacity is the spare capacity beyond the target burst:
	// the activator stays in the path while it is negative.
	ExcessBurstCapacity float64 `json:"excessBurstCapacity"`
	// Queued is the requests held at the activators.
	Queued int `json:"queued"`
}
