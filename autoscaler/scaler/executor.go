package scaler

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/time/rate"
	"k8s.io/utils/clock"

	"github.com/swell-run/swell/autoscaler/decider"
	"github.com/swell-run/swell/pkg/service"
)

// Defaults of Options.
const (
	DefaultWorkers        = 8
	DefaultChangeInterval = time.Second
	DefaultChangeBurst    = 5
	DefaultDownHold       = 10 * time.Second
	DefaultRoutePoll      = time.Second
	DefaultRetryBase      = 100 * time.Millisecond
	DefaultRetryMax       = 30 * time.Second
	DefaultTimeout        = 10 * time.Second
)

// Options configures an Executor. A zero field takes its default; for
// ChangeInterval, DownHold and Timeout a negative value turns the mechanism
// off.
type Options struct {
	// Clock drives rate limits, holds, polls and retries. Default: the
	// real clock.
	Clock clock.WithDelayedExecution
	// Workers bounds how many services are reconciled at once.
	Workers int
	// ChangeInterval and ChangeBurst rate-limit replica changes per
	// service: a token bucket refilled one change per ChangeInterval,
	// holding up to ChangeBurst. Waking a service from zero never waits
	// for a token.
	ChangeInterval time.Duration
	ChangeBurst    int
	// DownHold keeps a service from scaling down, or from taking the
	// activator out of its path, within DownHold of the executor scaling
	// it up or putting the activator in. Scale-ups and putting the
	// activator in are never held.
	DownHold time.Duration
	// RoutePoll is how often a service is looked at again while it waits
	// for a route switch to be confirmed or for a ready pod.
	RoutePoll time.Duration
	// RetryBase and RetryMax bound the exponential backoff after a backend
	// error: RetryBase, doubling per consecutive failure, at most RetryMax.
	RetryBase, RetryMax time.Duration
	// Timeout bounds the writes (SetScale, SetRoute) of one reconcile.
	// Status is expected to read a cache and is not bounded.
	Timeout time.Duration
	// Logger receives every event (info; errors at warn) and, at debug,
	// why a change waits. Default: no logging.
	Logger *zap.Logger
	// OnEvent, if set, is called with every event, from the worker
	// goroutines (possibly several at once). It must return quickly.
	OnEvent func(Event)
}

func (o *Options) setDefaults() {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.ChangeInterval == 0 {
		o.ChangeInterval = DefaultChangeInterval
	}
	if o.ChangeBurst <= 0 {
		o.ChangeBurst = DefaultChangeBurst
	}
	if o.DownHold == 0 {
		o.DownHold = DefaultDownHold
	}
	if o.RoutePoll <= 0 {
		o.RoutePoll = DefaultRoutePoll
	}
	if o.RetryBase <= 0 {
		o.RetryBase = DefaultRetryBase
	}
	if o.RetryMax <= 0 {
		o.RetryMax = DefaultRetryMax
	}
	if o.RetryMax < o.RetryBase {
		o.RetryMax = o.RetryBase
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
}

// Executor applies each service's latest decision to a Backend. It is
// level-triggered: every reconcile reads the backend's current state and
// moves it one step toward the decision, so a change made by hand is
// overwritten by the next decision and a lost write is repeated.
//
// Decisions coalesce: only a service's newest decision is ever applied,
// and one service is reconciled by at most one worker at a time.
type Executor struct {
	backend Backend
	opts    Options
	clock   clock.WithDelayedExecution
	log     *zap.Logger
	queue   *queue

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	startOnce, stopOnce sync.Once

	mu       sync.Mutex
	services map[service.Key]*state
	stopped  bool

	// reconciled, if set (by tests), is called after each reconcile.
	reconciled func(svc service.Key, after time.Duration, err error)
}

// state is the executor's memory of one service.
type state struct {
	// Guarded by Executor.mu.
	decision     decider.Decision
	hasDecision  bool
	observed     int // Status.Desired last seen; -1 before the first
	backoffUntil time.Time
	timer        clock.Timer
	wakeAt       time.Time

	// Owned by the worker holding the service's key.
	limiter         *rate.Limiter
	lastUp          time.Time // when the executor last scaled up
	lastToActivator time.Time // when it last asked for the activator
	expected        int       // replicas it expects to read back; -1 none
	failures        int
	// reason is the reason of the first decision seen asking for scale
	// reasonFor: a change held for a while is reported with why it was
	// asked for, not with the reason of the latest decision ("at zero").
	reason    string
	reasonFor int
}

// New returns an Executor driving backend. Call Start to run it.
func New(backend Backend, opts Options) *Executor {
	opts.setDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	return &Executor{
		backend:  backend,
		opts:     opts,
		clock:    opts.Clock,
		log:      opts.Logger,
		queue:    newQueue(),
		ctx:      ctx,
		cancel:   cancel,
		services: make(map[service.Key]*state),
	}
}

// Start starts the workers. Decisions given before Start wait for it.
// Start after Stop does nothing.
func (e *Executor) Start() {
	e.startOnce.Do(func() {
		e.mu.Lock()
		stopped := e.stopped
		e.mu.Unlock()
		if stopped {
			return
		}
		for range e.opts.Workers {
			e.wg.Add(1)
			go e.work()
		}
	})
}

// Stop cancels the backend calls in flight, waits for every worker to
// return and drops what is still pending. Updates after Stop are ignored.
func (e *Executor) Stop() {
	e.stopOnce.Do(func() {
		e.mu.Lock()
		e.stopped = true
		e.mu.Unlock()
		e.cancel()
		e.queue.close()
		e.wg.Wait()
		e.mu.Lock()
		timers := make([]clock.Timer, 0, len(e.services))
		for _, st := range e.services {
			if st.timer != nil {
				timers = append(timers, st.timer)
				st.timer = nil
			}
		}
		e.mu.Unlock()
		for _, t := range timers {
			t.Stop()
		}
	})
}

// Update records svc's newest decision and schedules its reconcile. It
// does not block on the backend and is cheap enough to call for every
// service on every tick.
//
// A service that is backing off after backend errors is not retried early
// by a new decision, unless that decision wakes it from zero.
func (e *Executor) Update(svc service.Key, d decider.Decision) {
	now := e.clock.Now()
	e.mu.Lock()
	st := e.services[svc]
	if st == nil {
		st = &state{observed: -1, expected: -1}
		e.services[svc] = st
	}
	st.decision, st.hasDecision = d, true
	wake := d.Scale > 0 && st.observed == 0
	backingOff := st.backoffUntil.After(now)
	e.mu.Unlock()
	if backingOff && !wake {
		return // the retry timer picks the decision up
	}
	e.queue.add(svc, wake)
}

// Resync schedules svc's reconcile without a new decision. A backend that
// watches its services calls it when one changes (a pod became ready, a
// route switch took effect), so the executor need not wait for its poll.
func (e *Executor) Resync(svc service.Key) { e.queue.add(svc, false) }

// Forget drops everything the executor holds for svc (a deleted service).
// A reconcile already running finishes.
func (e *Executor) Forget(svc service.Key) {
	e.mu.Lock()
	st := e.services[svc]
	delete(e.services, svc)
	var t clock.Timer
	if st != nil {
		t, st.timer = st.timer, nil
	}
	e.mu.Unlock()
	if t != nil {
		t.Stop()
	}
	e.queue.forget(svc)
}

func (e *Executor) work() {
	defer e.wg.Done()
	for {
		svc, ok := e.queue.get()
		if !ok {
			return
		}
		e.process(svc)
		e.queue.done(svc)
	}
}

func (e *Executor) process(svc service.Key) {
	e.mu.Lock()
	st := e.services[svc]
	var d decider.Decision
	ok := st != nil && st.hasDecision
	if ok {
		d = st.decision
	}
	e.mu.Unlock()
	if !ok {
		if e.reconciled != nil {
			e.reconciled(svc, 0, nil)
		}
		return
	}

	after, err := e.reconcile(svc, st, d)
	if e.ctx.Err() != nil {
		return // stopping: the error, if any, is ours
	}

	if err != nil {
		st.failures++
		after = e.backoff(st.failures)
		e.mu.Lock()
		st.backoffUntil = e.clock.Now().Add(after)
		e.mu.Unlock()
		e.emit(Event{Time: e.clock.Now(), Service: svc, Kind: EventError, Err: err, RetryIn: after})
	} else if st.failures > 0 {
		st.failures = 0
		e.mu.Lock()
		st.backoffUntil = time.Time{}
		e.mu.Unlock()
	}
	if after > 0 {
		e.addAfter(svc, st, after)
	}
	if e.reconciled != nil {
		e.reconciled(svc, after, err)
	}
}

// reconcile moves svc one step toward d and returns when it should be
// looked at again (0: not until something changes).
//
// The order is what keeps a service reachable: the activator goes into the
// path before anything else; replicas go to zero only once the backend
// confirms the activator is in the path; the activator leaves the path only
// once a pod is ready.
func (e *Executor) reconcile(svc service.Key, st *state, d decider.Decision) (time.Duration, error) {
	// Status reads a cache and gets only Stop's cancellation; the writes
	// share one deadline, made only when there is something to write (a
	// timer context would cost more than the rest of a reconcile that
	// finds everything in place).
	s, err := e.backend.Status(e.ctx, svc)
	if err != nil {
		return 0, fmt.Errorf("status: %w", err)
	}
	e.mu.Lock()
	st.observed = s.Desired
	e.mu.Unlock()
	now := e.clock.Now()

	wc := writeCtx{parent: e.ctx, timeout: e.opts.Timeout}
	defer wc.done()

	var after time.Duration
	wait := func(d time.Duration) {
		if d > 0 && (after == 0 || d < after) {
			after = d
		}
	}

	want := RoutePods
	if d.NeedActivator || d.Scale == 0 {
		want = RouteActivator
	}

	// Judged on the state as read, before any request of ours: after
	// asking for the activator, zero waits for a fresh read to confirm it.
	inPath := s.ActivatorInPath()

	// 1. The activator into the path: always safe, never held.
	if want == RouteActivator {
		if s.Requested != RouteActivator {
			if err := e.setRoute(wc.get(), svc, st, s.Route, RouteActivator, d, now); err != nil {
				return 0, err
			}
			s.Requested = RouteActivator
		}
		if !inPath {
			wait(e.opts.RoutePoll) // until the backend confirms
		}
	}

	// 2. Replicas.
	to := d.Scale
	if d.Scale != st.reasonFor || st.reason == "" {
		st.reason, st.reasonFor = d.Reason, d.Scale
	}
	if to == 0 && !inPath {
		// Zero only behind a confirmed activator: otherwise a request
		// arriving now would find no endpoint at all.
		to = s.Desired
		e.log.Debug("scale to zero waits for the activator", zap.Stringer("service", svc))
	}
	if to != s.Desired {
		switch delay := e.admit(st, now, s.Desired, to); {
		case delay > 0:
			wait(delay)
			e.log.Debug("scale change waits", zap.Stringer("service", svc),
				zap.Int("from", s.Desired), zap.Int("to", to), zap.Duration("for", delay))
		case to == 0 && e.queue.pending(svc):
			// A newer decision arrived while we looked (perhaps a request
			// at the activator): let it decide rather than go to zero.
		default:
			if err := e.backend.SetScale(wc.get(), svc, to); err != nil {
				return 0, fmt.Errorf("set scale to %d: %w", to, err)
			}
			reason := d.Reason
			if to == st.reasonFor {
				reason = st.reason
			}
			if st.expected >= 0 && s.Desired != st.expected {
				reason = fmt.Sprintf("%s; replicas had been set to %d outside the autoscaler", reason, s.Desired)
			}
			if to > s.Desired {
				st.lastUp = now
			}
			e.emit(Event{Time: now, Service: svc, Kind: EventScale, From: s.Desired, To: to, Reason: reason})
			s.Desired = to
		}
	}
	st.expected = s.Desired
	e.mu.Lock()
	st.observed = s.Desired // after our own write: Update's wake test reads it
	e.mu.Unlock()

	// 3. The activator out of the path, once a pod can take the traffic.
	if want == RoutePods && (s.Route != RoutePods || s.Requested != RoutePods) {
		hold := time.Duration(0)
		if e.opts.DownHold > 0 && !st.lastToActivator.IsZero() {
			hold = st.lastToActivator.Add(e.opts.DownHold).Sub(now)
		}
		switch {
		case s.Requested == RoutePods:
			// Asked already; nothing waits on this switch.
		case s.Ready == 0:
			wait(e.opts.RoutePoll)
		case hold > 0:
			wait(hold)
		default:
			if err := e.setRoute(wc.get(), svc, st, s.Route, RoutePods, d, now); err != nil {
				return 0, err
			}
		}
	}
	return after, nil
}

// writeCtx hands out one deadline for a reconcile's writes, made on first
// use.
type writeCtx struct {
	parent  context.Context
	timeout time.Duration
	ctx     context.Context
	cancel  context.CancelFunc
}

func (w *writeCtx) get() context.Context {
	if w.ctx == nil {
		w.ctx = w.parent
		if w.timeout > 0 {
			w.ctx, w.cancel = context.WithTimeout(w.parent, w.timeout)
		}
	}
	return w.ctx
}

func (w *writeCtx) done() {
	if w.cancel != nil {
		w.cancel()
	}
}

// admit says how long a change from → to must wait (0: apply now), taking
// a rate-limit token when it may go ahead.
func (e *Executor) admit(st *state, now time.Time, from, to int) time.Duration {
	if from == 0 {
		return 0 // waking from zero: a request is waiting at the activator
	}
	if to < from && e.opts.DownHold > 0 && !st.lastUp.IsZero() {
		if d := st.lastUp.Add(e.opts.DownHold).Sub(now); d > 0 {
			return d
		}
	}
	if e.opts.ChangeInterval > 0 {
		if st.limiter == nil {
			st.limiter = rate.NewLimiter(rate.Every(e.opts.ChangeInterval), e.opts.ChangeBurst)
		}
		r := st.limiter.ReserveN(now, 1)
		if d := r.DelayFrom(now); d > 0 {
			r.CancelAt(now)
			return d
		}
	}
	return 0
}

func (e *Executor) setRoute(ctx context.Context, svc service.Key, st *state, from, to Route, d decider.Decision, now time.Time) error {
	if err := e.backend.SetRoute(ctx, svc, to); err != nil {
		return fmt.Errorf("route via %s: %w", to, err)
	}
	var reason string
	switch {
	case to == RoutePods:
		reason = fmt.Sprintf("excess burst capacity %.0f", d.ExcessBurstCapacity)
	case d.Scale == 0:
		reason = "before scale to zero"
	case d.ExcessBurstCapacity < 0:
		reason = fmt.Sprintf("excess burst capacity %.0f", d.ExcessBurstCapacity)
	default:
		reason = d.Reason
	}
	if to == RouteActivator {
		st.lastToActivator = now
	}
	e.emit(Event{Time: now, Service: svc, Kind: EventRoute, FromRoute: from, ToRoute: to, Reason: reason})
	return nil
}

// addAfter schedules svc's next reconcile in d, unless an earlier one is
// already scheduled.
func (e *Executor) addAfter(svc service.Key, st *state, d time.Duration) {
	now := e.clock.Now()
	at := now.Add(d)
	e.mu.Lock()
	if e.stopped || e.services[svc] != st {
		e.mu.Unlock()
		return
	}
	if st.timer != nil && st.wakeAt.After(now) && !st.wakeAt.After(at) {
		e.mu.Unlock()
		return
	}
	old := st.timer
	st.timer, st.wakeAt = nil, at
	e.mu.Unlock()
	// The clock is called without e.mu held: a fake clock runs AfterFunc
	// callbacks under its own lock, and the callback must not wait for ours.
	if old != nil {
		old.Stop()
	}
	t := e.clock.AfterFunc(d, func() { e.queue.add(svc, false) })
	e.mu.Lock()
	if e.stopped || e.services[svc] != st {
		e.mu.Unlock()
		t.Stop()
		return
	}
	st.timer = t
	e.mu.Unlock()
}

func (e *Executor) backoff(failures int) time.Duration {
	d := e.opts.RetryBase
	for i := 1; i < failures && d < e.opts.RetryMax; i++ {
		d *= 2
	}
	return min(d, e.opts.RetryMax)
}

func (e *Executor) emit(ev Event) {
	switch ev.Kind {
	case EventError:
		e.log.Warn(ev.String(), zap.Stringer("service", ev.Service), zap.Error(ev.Err),
			zap.Duration("retryIn", ev.RetryIn))
	case EventScale:
		e.log.Info(ev.String(), zap.Stringer("service", ev.Service), zap.Int("from", ev.From),
			zap.Int("to", ev.To), zap.String("reason", ev.Reason))
	default:
		e.log.Info(ev.String(), zap.Stringer("service", ev.Service), zap.Stringer("fromRoute", ev.FromRoute),
			zap.Stringer("toRoute", ev.ToRoute), zap.String("reason", ev.Reason))
	}
	if e.opts.OnEvent != nil {
		e.opts.OnEvent(ev)
	}
}
