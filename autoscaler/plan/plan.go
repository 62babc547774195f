// Package plan is the executor's rules as a function: from a service's
// state as its backend reports it, its latest decision, what the executor
// remembers of it and the time, the changes to make now, in order, and when
// to look again. It is pure — no goroutine, no clock, no I/O — so the
// executor (autoscaler/scaler) performs what it returns against a real
// backend and `swell sim` performs it against simulated pods, and both apply
// the same rules (docs/scaling.md).
//
// The rules, in the order Next applies them:
//
//  1. The activator goes into the path first whenever the decision needs
//     it (negative excess burst capacity) or asks for zero: always safe,
//     never held.
//  2. Replicas follow the decision, except that zero waits until the
//     activator is confirmed in the path (a request arriving then would find
//     no endpoint at all), a scale-down waits out DownHold after the last
//     scale-up, and every change but a wake from zero takes a token from a
//     per-service bucket (ChangeInterval, ChangeBurst).
//  3. The activator leaves the path only once a pod is ready, and not
//     within DownHold of being put in.
package plan

import (
	"fmt"
	"time"

	"golang.org/x/time/rate"

	"github.com/swell-run/swell/autoscaler/decider"
)

// Route says where a service's traffic goes.
type Route uint8

// The routes.
const (
	// RouteUnknown: the backend has not routed the service yet, or cannot
	// tell. It counts as "not through the activator".
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

// Status is a service's state as its backend sees it now.
type Status struct {
	// Desired is the replica count the backend has been asked to run
	// (a Deployment's spec.replicas), whoever asked.
	Desired int
	// Ready is the number of pods ready to serve.
	Ready int
	// Route is the routing in effect: confirmed, not merely requested. A
	// switch asked for shows here only once every path into the service
	// follows it.
	Route Route
	// Requested is the route last asked for (by anyone), in effect or not:
	// the spec to Route's status.
	Requested Route
}

// ActivatorInPath says the activator is in the service's path and staying
// there: in effect, with no switch to the pods pending. It is the
// decider's Observation.ActivatorInPath, and the condition for applying
// zero replicas.
func (s Status) ActivatorInPath() bool {
	return s.Route == RouteActivator && s.Requested == RouteActivator
}

// Defaults of Rules.
const (
	DefaultChangeInterval = time.Second
	DefaultChangeBurst    = 5
	DefaultDownHold       = 10 * time.Second
	DefaultRoutePoll      = time.Second
)

// Rules are the executor's rules. A zero field takes its default; a
// negative ChangeInterval or DownHold turns that rule off.
type Rules struct {
	// ChangeInterval and ChangeBurst rate-limit replica changes per
	// service: a token bucket refilled one change per ChangeInterval,
	// holding up to ChangeBurst. Waking a service from zero never waits
	// for a token.
	ChangeInterval time.Duration
	ChangeBurst    int
	// DownHold keeps a service from scaling down, or from taking the
	// activator out of its path, within DownHold of scaling it up or
	// putting the activator in. Scale-ups and putting the activator in are
	// never held.
	DownHold time.Duration
	// RoutePoll is how soon a service is looked at again while it waits
	// for a route switch to be confirmed or for a ready pod.
	RoutePoll time.Duration
}

// WithDefaults returns r with every zero field set to its default.
func (r Rules) WithDefaults() Rules {
	if r.ChangeInterval == 0 {
		r.ChangeInterval = DefaultChangeInterval
	}
	if r.ChangeBurst <= 0 {
		r.ChangeBurst = DefaultChangeBurst
	}
	if r.DownHold == 0 {
		r.DownHold = DefaultDownHold
	}
	if r.RoutePoll <= 0 {
		r.RoutePoll = DefaultRoutePoll
	}
	return r
}

// Memory is what the rules remember of one service between steps. The
// zero Memory is a service the executor has not acted on yet.
type Memory struct {
	// limiter is the change bucket, made on the first change.
	limiter *rate.Limiter
	// lastUp is when replicas were last raised; lastToActivator when the
	// activator was last asked into the path.
	lastUp, lastToActivator time.Time
	// expected is the replica count the executor expects to read back,
	// when hasExpected: a different one was set by someone else.
	expected    int
	hasExpected bool
	// reason is the reason of the first decision seen asking for scale
	// reasonFor: a change held for a while is reported with why it was
	// asked for, not with the reason of the latest decision.
	reason    string
	reasonFor int
}

// Kind says what an Action changes.
type Kind uint8

// The kinds of action.
const (
	// SetRoute asks for the service's traffic to go through ToRoute.
	SetRoute Kind = iota + 1
	// SetScale sets the service's replicas to To.
	SetScale
)

// Action is one change to make.
type Action struct {
	Kind Kind
	// From and To are replica counts (SetScale).
	From, To int
	// FromRoute and ToRoute are routes (SetRoute): the route in effect and
	// the one asked for.
	FromRoute, ToRoute Route
	// Reason is why: the decision's reason, with what the rules added to
	// it (a change made by someone else overwritten, "before scale to
	// zero").
	Reason string
}

// String returns e.g. "scale 1→3 (poke)" or "route pods→activator (before
// scale to zero)".
func (a Action) String() string {
	switch a.Kind {
	case SetScale:
		return fmt.Sprintf("scale %d→%d (%s)", a.From, a.To, a.Reason)
	case SetRoute:
		return fmt.Sprintf("route %s→%s (%s)", a.FromRoute, a.ToRoute, a.Reason)
	}
	return fmt.Sprintf("Action(%d)", uint8(a.Kind))
}

// Held says why a change the decision asks for is not among the actions.
type Held uint8

// The reasons a change is held.
const (
	// NotHeld: nothing the decision asks for waits.
	NotHeld Held = iota
	// HeldForActivator: zero waits for the activator to be confirmed in
	// the path.
	HeldForActivator
	// HeldByRules: a scale change waits for DownHold or a token.
	HeldByRules
	// HeldForNewer: zero is not applied because a newer decision waits.
	HeldForNewer
)

// Step is what Next returns.
type Step struct {
	// Actions are the changes to make now, in order. Each must succeed
	// before the next is made; after each, call Memory.Done.
	Actions []Action
	// After is when to look at the service again though nothing changes
	// (a route to be confirmed, a hold to end); 0 means only when
	// something changes (a decision, the backend's state).
	After time.Duration
	// Held says why a change the decision asks for waits; Wanted is the
	// replica count it asks for, when held.
	Held   Held
	Wanted int
}

// Next is one step of the rules: what to do now about a service in state
// st for decision d, given what m remembers, and when to look again.
// newer says a newer decision is waiting to be stepped, which a scale to
// zero then leaves to it (it may have been a request at the activator).
// actions is reused for Step.Actions (up to two are returned).
//
// Next updates m with what it decides whether or not the actions are then
// made (the reason kept for a held change, a change token taken); the
// caller reports each action made with m.Done.
func (r Rules) Next(m *Memory, st Status, d decider.Decision, now time.Time, newer bool, actions []Action) Step {
	step := Step{Actions: actions[:0]}
	wait := func(d time.Duration) {
		if d > 0 && (step.After == 0 || d < step.After) {
			step.After = d
		}
	}
	want := RoutePods
	if d.NeedActivator || d.Scale == 0 {
		want = RouteActivator
	}
	// Judged on the state as read, before any action of this step: after
	// asking for the activator, zero waits for a read that confirms it.
	inPath := st.ActivatorInPath()

	// 1. The activator into the path.
	if want == RouteActivator {
		if st.Requested != RouteActivator {
			step.Actions = append(step.Actions, Action{Kind: SetRoute, FromRoute: st.Route, ToRoute: RouteActivator,
				Reason: routeReason(RouteActivator, d)})
		}
		if !inPath {
			wait(r.RoutePoll)
		}
	}

	// 2. Replicas.
	if d.Scale != m.reasonFor || m.reason == "" {
		m.reason, m.reasonFor = d.Reason, d.Scale
	}
	to := d.Scale
	if to == 0 && !inPath {
		to = st.Desired
		if st.Desired != 0 {
			step.Held, step.Wanted = HeldForActivator, 0
		}
	}
	if to != st.Desired {
		switch delay := r.admit(m, now, st.Desired, to); {
		case delay > 0:
			wait(delay)
			step.Held, step.Wanted = HeldByRules, to
		case to == 0 && newer:
			step.Held, step.Wanted = HeldForNewer, to
		default:
			reason := d.Reason
			if to == m.reasonFor {
				reason = m.reason
			}
			if m.hasExpected && st.Desired != m.expected {
				reason = fmt.Sprintf("%s; replicas had been set to %d outside the autoscaler", reason, st.Desired)
			}
			step.Actions = append(step.Actions, Action{Kind: SetScale, From: st.Desired, To: to, Reason: reason})
		}
	}
	// The replicas as they will be once this step's actions are made: a
	// failed action is reported by Done never being called.
	m.expected, m.hasExpected = st.Desired, true

	// 3. The activator out of the path, once a pod can take the traffic.
	if want == RoutePods && (st.Route != RoutePods || st.Requested != RoutePods) {
		hold := time.Duration(0)
		if r.DownHold > 0 && !m.lastToActivator.IsZero() {
			hold = m.lastToActivator.Add(r.DownHold).Sub(now)
		}
		switch {
		case st.Requested == RoutePods:
			// Asked already; nothing waits on this switch.
		case st.Ready == 0:
			wait(r.RoutePoll)
		case hold > 0:
			wait(hold)
		default:
			step.Actions = append(step.Actions, Action{Kind: SetRoute, FromRoute: st.Route, ToRoute: RoutePods,
				Reason: routeReason(RoutePods, d)})
		}
	}
	return step
}

// Done records in m that action a was made at now.
func (m *Memory) Done(a Action, now time.Time) {
	switch a.Kind {
	case SetScale:
		if a.To > a.From {
			m.lastUp = now
		}
		m.expected, m.hasExpected = a.To, true
	case SetRoute:
		if a.ToRoute == RouteActivator {
			m.lastToActivator = now
		}
	}
}

// admit says how long a change from → to must wait (0: apply now), taking
// a token when it may go ahead.
func (r Rules) admit(m *Memory, now time.Time, from, to int) time.Duration {
	if from == 0 {
		return 0 // waking from zero: a request is waiting at the activator
	}
	if to < from && r.DownHold > 0 && !m.lastUp.IsZero() {
		if d := m.lastUp.Add(r.DownHold).Sub(now); d > 0 {
			return d
		}
	}
	if r.ChangeInterval > 0 {
		if m.limiter == nil {
			m.limiter = rate.NewLimiter(rate.Every(r.ChangeInterval), max(r.ChangeBurst, 1))
		}
		res := m.limiter.ReserveN(now, 1)
		if d := res.DelayFrom(now); d > 0 {
			res.CancelAt(now)
			return d
		}
	}
	return 0
}

// routeReason says why the route goes to `to` for decision d.
func routeReason(to Route, d decider.Decision) string {
	switch {
	case to == RoutePods:
		return fmt.Sprintf("excess burst capacity %.0f", d.ExcessBurstCapacity)
	case d.Scale == 0:
		return "before scale to zero"
	case d.ExcessBurstCapacity < 0:
		return fmt.Sprintf("excess burst capacity %.0f", d.ExcessBurstCapacity)
	}
	return d.Reason
}
