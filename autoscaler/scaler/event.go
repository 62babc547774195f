package scaler

import (
	"fmt"
	"time"

	"github.com/swell-run/swell/autoscaler/plan"
	"github.com/swell-run/swell/pkg/service"
)

// EventKind says what an Event reports.
type EventKind uint8

// The kinds of event.
const (
	// EventScale: the executor set the service's replicas (From → To).
	EventScale EventKind = iota + 1
	// EventRoute: the executor asked for the service's traffic to be
	// routed differently (FromRoute → ToRoute). The switch takes effect
	// when the backend confirms it.
	EventRoute
	// EventError: a backend call failed; the service is retried after
	// RetryIn.
	EventError
)

// String returns "scale", "route" or "error".
func (k EventKind) String() string {
	switch k {
	case EventScale:
		return "scale"
	case EventRoute:
		return "route"
	case EventError:
		return "error"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event reports one change the executor made to a service, or a failure.
type Event struct {
	Time    time.Time
	Service service.Key
	Kind    EventKind
	// From and To are replica counts (EventScale).
	From, To int
	// FromRoute and ToRoute are routes (EventRoute).
	FromRoute, ToRoute plan.Route
	// Reason is the decision's reason, with what the executor added to it
	// (an overwritten manual change, "before scale to zero").
	Reason string
	// Err and RetryIn describe a failure (EventError).
	Err     error
	RetryIn time.Duration
}

// String formats e for a person: "default/hello: scale 0→1 (poke)",
// "default/hello: route pods→activator (before scale to zero)",
// "default/hello: error: set scale: ... (retry in 400ms)".
func (e Event) String() string {
	switch e.Kind {
	case EventScale:
		return fmt.Sprintf("%s: scale %d→%d (%s)", e.Service, e.From, e.To, e.Reason)
	case EventRoute:
		return fmt.Sprintf("%s: route %s→%s (%s)", e.Service, e.FromRoute, e.ToRoute, e.Reason)
	case EventError:
		return fmt.Sprintf("%s: error: %v (retry in %v)", e.Service, e.Err, e.RetryIn)
	}
	return fmt.Sprintf("%s: %s", e.Service, e.Kind)
}
