// Package scaler applies the decider's decisions to a backend: it sets each
// service's replica count and routes its traffic through the activator or
// straight to its pods, deduplicating, rate limiting and ordering those
// changes so that a service is never left without an endpoint.
package scaler

import (
	"context"
	"errors"
	"fmt"

	"github.com/swell-run/swell/pkg/service"
)

// ErrNotFound is wrapped by backend errors for a service the backend does
// not know.
var ErrNotFound = errors.New("service not found")

// Route says where a service's traffic goes.
type Route uint8

// The routes.
const (
	// RouteUnknown: the backend has not routed the service yet, or cannot
	// tell. The executor treats it as "not through the activator".
	RouteUnknown Route = iota
	// RouteActivator: traffic goes through the activator, which holds
	// requests while the service has no ready pod and buffers bursts.
	RouteActivator
	// RoutePods: traffic goes straight to the service's ready pods.
	RoutePods
)

// String returns "unknown", "activator" or "pods".
func (r Route) String() string {
	switch r {
	case RouteActivator:
		return "activator"
	case RoutePods:
		return "pods"
	case RouteUnknown:
		return "unknown"
	}
	return fmt.Sprintf("Route(%d)", uint8(r))
}

// Status is a service's state as the backend sees it now.
type Status struct {
	// Desired is the replica count the backend has been asked to run
	// (a Deployment's spec.replicas), whoever asked.
	Desired int
	// Ready is the number of pods ready to serve.
	Ready int
	// Route is the routing in effect: confirmed, not merely requested. A
	// switch asked for with SetRoute shows here only once every path into
	// the service follows it.
	Route Route
	// Requested is the route last asked for with SetRoute (by anyone),
	// in effect or not: the spec to Route's status.
	Requested Route
}

// ActivatorInPath says the activator is in the service's path and staying
// there: in effect, with no switch to the pods pending. It is the
// decider's Observation.ActivatorInPath, and the executor's condition for
// applying zero replicas.
func (s Status) ActivatorInPath() bool {
	return s.Route == RouteActivator && s.Requested == RouteActivator
}

// Backend is what the executor drives: Kubernetes (the scale subresource
// and the service's endpoints), local processes, or a fake.
//
// Every method must be safe for concurrent use; the executor never calls
// two of them at once for the same service. Errors should wrap ErrNotFound
// when the service does not exist.
type Backend interface {
	// Status reads the service's current state. The executor calls it at
	// the start of every reconcile, so it should read from a cache (an
	// informer's lister) rather than make a remote call.
	Status(ctx context.Context, svc service.Key) (Status, error)
	// SetScale sets the service's desired replica count.
	SetScale(ctx context.Context, svc service.Key, replicas int) error
	// SetRoute asks for the service's traffic to go through the activator
	// or straight to its pods, and records the request in
	// Status.Requested. It may return before the switch takes effect;
	// Status.Route reports when it has. The executor asks only when
	// Status.Requested differs from what it wants, and waits for
	// Status.Route.
	SetRoute(ctx context.Context, svc service.Key, route Route) error
}
