// Package scalertest provides an in-memory scaler.Backend for tests of the
// executor, the autoscaler and the simulator.
package scalertest

import (
	"context"
	"fmt"
	"sync"

	"github.com/swell-run/swell/autoscaler/plan"
	"github.com/swell-run/swell/autoscaler/scaler"

	"github.com/swell-run/swell/pkg/service"
)

// Op names a Backend method in a recorded Call.
type Op uint8

// The Backend methods.
const (
	OpStatus Op = iota + 1
	OpSetScale
	OpSetRoute
	OpPreferRemoval
)

// String returns "status", "scale", "route" or "prefer-removal".
func (o Op) String() string {
	switch o {
	case OpStatus:
		return "status"
	case OpSetScale:
		return "scale"
	case OpSetRoute:
		return "route"
	case OpPreferRemoval:
		return "prefer-removal"
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Call is one call a Backend received.
type Call struct {
	Op      Op
	Service service.Key
	// Replicas is SetScale's argument; Route is SetRoute's; Pods is
	// PreferRemoval's.
	Replicas int
	Route    plan.Route
	Pods     []string
	// Err is what the call returned.
	Err error
}

// String returns e.g. "scale default/hello 3" or "route default/hello
// activator".
func (c Call) String() string {
	s := fmt.Sprintf("%s %s", c.Op, c.Service)
	switch c.Op {
	case OpSetScale:
		s += fmt.Sprintf(" %d", c.Replicas)
	case OpSetRoute:
		s += " " + c.Route.String()
	case OpPreferRemoval:
		s += fmt.Sprintf(" %v", c.Pods)
	}
	if c.Err != nil {
		s += ": " + c.Err.Error()
	}
	return s
}

// Backend is an in-memory Backend for tests of the executor, the engine
// and the simulator. It records every call, lets a test inject errors and
// latency through a hook, and simulates the delay between asking for a
// route switch and the switch taking effect.
//
// By default a route switch takes effect at once and ready pods do not
// follow the desired count; both are switchable.
type Backend struct {
	mu           sync.Mutex
	services     map[service.Key]*fakeService
	calls        []Call
	hook         func(context.Context, Call) error
	holdRoutes   bool
	readyFollows bool
	onChange     func(service.Key)
}

type fakeService struct {
	status plan.Status
}

// NewBackend returns an empty Backend. Services must be added with
// Set before the executor can see them; unknown ones give scaler.ErrNotFound.
func NewBackend() *Backend {
	return &Backend{services: make(map[service.Key]*fakeService)}
}

var (
	_ scaler.Backend = (*Backend)(nil)
	_ scaler.Trimmer = (*Backend)(nil)
)

// Status implements scaler.Backend.
func (f *Backend) Status(ctx context.Context, svc service.Key) (plan.Status, error) {
	var st plan.Status
	err := f.call(ctx, Call{Op: OpStatus, Service: svc}, func(s *fakeService) { st = s.status })
	return st, err
}

// SetScale implements scaler.Backend.
func (f *Backend) SetScale(ctx context.Context, svc service.Key, replicas int) error {
	return f.call(ctx, Call{Op: OpSetScale, Service: svc, Replicas: replicas}, func(s *fakeService) {
		s.status.Desired = replicas
		if f.readyFollows {
			s.status.Ready = replicas
		}
	})
}

// SetRoute implements scaler.Backend. The route takes effect at once unless
// SetHoldRoutes(true), in which case it waits for ConfirmRoute.
func (f *Backend) SetRoute(ctx context.Context, svc service.Key, route plan.Route) error {
	return f.call(ctx, Call{Op: OpSetRoute, Service: svc, Route: route}, func(s *fakeService) {
		s.status.Requested = route
		if !f.holdRoutes {
			s.status.Route = route
		}
	})
}

// PreferRemoval implements scaler.Trimmer: it records the pods, which
// change nothing of the status.
func (f *Backend) PreferRemoval(ctx context.Context, svc service.Key, pods []string) error {
	return f.call(ctx, Call{Op: OpPreferRemoval, Service: svc, Pods: pods}, func(*fakeService) {})
}

// call runs one backend call: the hook first, then do on the service under
// the lock, recording the call with its outcome either way.
func (f *Backend) call(ctx context.Context, c Call, do func(*fakeService)) error {
	if err := f.enter(ctx, c); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.services[c.Service]; ok {
		do(s)
	} else {
		c.Err = fmt.Errorf("%s: %w", c.Service, scaler.ErrNotFound)
	}
	f.calls = append(f.calls, c)
	return c.Err
}

// enter runs the hook; a failing call is recorded with its error.
func (f *Backend) enter(ctx context.Context, c Call) error {
	f.mu.Lock()
	hook := f.hook
	f.mu.Unlock()
	err := ctx.Err()
	if err == nil && hook != nil {
		err = hook(ctx, c)
	}
	if err != nil {
		c.Err = err
		f.mu.Lock()
		f.calls = append(f.calls, c)
		f.mu.Unlock()
	}
	return err
}

// SetHook installs h, called at the start of every call with the call's
// context. An error from h fails the call with that error; blocking in h
// (on a channel, minding ctx) makes the call slow. nil removes the hook.
func (f *Backend) SetHook(h func(ctx context.Context, c Call) error) {
	f.mu.Lock()
	f.hook = h
	f.mu.Unlock()
}

// SetHoldRoutes makes route switches wait for ConfirmRoute (true) or take
// effect at once (false, the default).
func (f *Backend) SetHoldRoutes(hold bool) {
	f.mu.Lock()
	f.holdRoutes = hold
	f.mu.Unlock()
}

// SetReadyFollowsDesired makes SetScale set Ready too, as if pods started
// instantly.
func (f *Backend) SetReadyFollowsDesired(on bool) {
	f.mu.Lock()
	f.readyFollows = on
	f.mu.Unlock()
}

// OnChange installs fn, called after every change the backend makes on its
// own — Set, SetReady, ConfirmRoute — the way an informer reports one.
// Wire it to Executor.Resync. It is not called for the executor's own
// SetScale and SetRoute.
func (f *Backend) OnChange(fn func(service.Key)) {
	f.mu.Lock()
	f.onChange = fn
	f.mu.Unlock()
}

// Set creates svc or overwrites its state, as a person running `kubectl
// scale` would. A zero s.Requested is taken to be s.Route.
func (f *Backend) Set(svc service.Key, s plan.Status) {
	if s.Requested == plan.RouteUnknown {
		s.Requested = s.Route
	}
	f.mu.Lock()
	f.services[svc] = &fakeService{status: s}
	fn := f.onChange
	f.mu.Unlock()
	if fn != nil {
		fn(svc)
	}
}

// SetReady sets svc's ready pods (pods started or died).
func (f *Backend) SetReady(svc service.Key, ready int) {
	f.mu.Lock()
	s, ok := f.services[svc]
	if ok {
		s.status.Ready = ready
	}
	fn := f.onChange
	f.mu.Unlock()
	if ok && fn != nil {
		fn(svc)
	}
}

// ConfirmRoute makes svc's requested route take effect, and reports
// whether it was not in effect yet.
func (f *Backend) ConfirmRoute(svc service.Key) bool {
	f.mu.Lock()
	s, ok := f.services[svc]
	ok = ok && s.status.Route != s.status.Requested
	if ok {
		s.status.Route = s.status.Requested
	}
	fn := f.onChange
	f.mu.Unlock()
	if ok && fn != nil {
		fn(svc)
	}
	return ok
}

// Get returns svc's state without recording a call.
func (f *Backend) Get(svc service.Key) (plan.Status, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.services[svc]
	if !ok {
		return plan.Status{}, false
	}
	return s.status, true
}

// Calls returns every call received so far, failed ones included, in order.
func (f *Backend) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Call(nil), f.calls...)
}

// Writes returns the successful SetScale, SetRoute and PreferRemoval
// calls, in order.
func (f *Backend) Writes() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	var w []Call
	for _, c := range f.calls {
		if c.Op != OpStatus && c.Err == nil {
			w = append(w, c)
		}
	}
	return w
}

// ResetCalls forgets the calls recorded so far.
func (f *Backend) ResetCalls() {
	f.mu.Lock()
	f.calls = f.calls[:0] // Calls hands out copies: the array is ours
	f.mu.Unlock()
}
