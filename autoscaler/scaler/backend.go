// Package scaler applies the decider's decisions to a backend: it sets each
// service's replica count and routes its traffic through the activator or
// straight to its pods, by the rules of package plan (which order, hold and
// rate-limit those changes so that a service is never left without an
// endpoint), with workers, retries and timers around them.
package scaler

import (
	"context"
	"errors"

	"github.com/swell-run/swell/autoscaler/plan"
	"github.com/swell-run/swell/pkg/service"
)

// ErrNotFound is wrapped by backend errors for a service the backend does
// not know.
var ErrNotFound = errors.New("service not found")

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
	Status(ctx context.Context, svc service.Key) (plan.Status, error)
	// SetScale sets the service's desired replica count.
	SetScale(ctx context.Context, svc service.Key, replicas int) error
	// SetRoute asks for the service's traffic to go through the activator
	// or straight to its pods, and records the request in
	// Status.Requested. It may return before the switch takes effect;
	// Status.Route reports when it has. The executor asks only when
	// Status.Requested differs from what it wants, and waits for
	// Status.Route.
	SetRoute(ctx context.Context, svc service.Key, route plan.Route) error
}

// Trimmer is a Backend that can be told which pods should go first when a
// service scales down: on Kubernetes the pods' deletion cost, which the
// ReplicaSet reads when it picks the pods to delete; in swell local the
// backend's own choice. The ReplicaSet alone picks among ready pods by age
// and spreading, blind to load, and may stop a busy pod while an idle one
// stays.
type Trimmer interface {
	// PreferRemoval marks pods (by the addresses the loop scrapes them at,
	// Config.LeastBusy's answer) as the first to go at svc's next
	// scale-down. The executor calls it just before every scale-down that
	// leaves pods running; an error is logged and the scale-down goes
	// ahead, chosen by the backend alone.
	PreferRemoval(ctx context.Context, svc service.Key, pods []string) error
}
