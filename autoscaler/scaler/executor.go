package scaler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/utils/clock"

	"github.com/swell-run/swell/autoscaler/decider"
	"github.com/swell-run/swell/autoscaler/plan"
	"github.com/swell-run/swell/pkg/service"
)

// Defaults of Config.
const (
	DefaultWorkers   = 8
	DefaultRetryBase = 100 * time.Millisecond
	DefaultRetryMax  = 30 * time.Second
	DefaultTimeout   = 10 * time.Second
)

// Config configures an Executor. Backend is required; a zero field takes
// its default, and a negative Timeout turns the bound off.
type Config struct {
	// Backend is what the executor drives.
	Backend Backend
	// Clock drives holds, polls and retries. Default: the real clock.
	Clock clock.WithDelayedExecution
	// Workers bounds how many services are reconciled at once.
	Workers int
	// Rules are the rules every reconcile applies (package plan); zero
	// fields take plan's defaults.
	Rules plan.Rules
	// RetryBase and RetryMax bound the exponential backoff after a backend
	// error: RetryBase, doubling per consecutive failure, at most RetryMax.
	RetryBase, RetryMax time.Duration
	// Timeout bounds the writes (SetScale, SetRoute) of one reconcile.
	// Status is expected to read a cache and is not bounded.
	Timeout time.Duration
	// Logger receives every event (info; errors at warn) and, at debug,
	// why a change waits. Default: no logging.
	Logger *zap.Logger
	// LeastBusy, if set, names up to n of svc's pods that are the least
	// busy, the idlest first. Before a scale-down from n+k pods to k > 0
	// the executor gives them to a Backend that is a Trimmer. It is called
	// from the worker goroutines.
	LeastBusy func(svc service.Key, n int) []string
	// OnEvent, if set, is called with every event, from the worker
	// goroutines (possibly several at once). It must return quickly.
	OnEvent func(Event)
	// OnReconcile, if set, is called after every reconcile with when the
	// service will be looked at again (0: when something changes) and the
	// reconcile's error, from the worker goroutines. It must return
	// quickly.
	OnReconcile func(svc service.Key, after time.Duration, err error)
}

func (o *Config) setDefaults() {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	o.Rules = o.Rules.WithDefaults()
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

// Executor applies each service's latest decision to a Backend, by the
// rules of package plan. It is level-triggered: every reconcile reads the
// backend's current state and moves it one step toward the decision, so a
// change made by hand is overwritten by the next decision and a lost write
// is repeated.
//
// Decisions coalesce: only a service's newest decision is ever applied,
// and one service is reconciled by at most one worker at a time. The
// executor keeps no registry of services: the caller owns each service's
// Target and hands it in.
type Executor struct {
	backend Backend
	opts    Config
	clock   clock.WithDelayedExecution
	log     *zap.Logger
	queue   *queue

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	startOnce, stopOnce sync.Once

	// mu guards the Targets' fields marked so, the set of armed timers
	// and stopped.
	mu      sync.Mutex
	timers  map[*Target]struct{}
	stopped bool
}

// Target is what the executor holds of one service: its newest decision
// and the rules' memory of it. Its owner (the autoscaler's record of the
// service) makes it with NewTarget and hands it to Update, Resync and
// Forget.
type Target struct {
	key service.Key

	// Guarded by Executor.mu.
	decision     decider.Decision
	hasDecision  bool
	forgotten    bool
	observed     int // Status.Desired last seen; -1 before the first
	backoffUntil time.Time
	timer        clock.Timer
	wakeAt       time.Time

	// Owned by the worker holding the target.
	mem      plan.Memory
	failures int
}

// NewTarget returns the Target of the service key.
func NewTarget(key service.Key) *Target { return &Target{key: key, observed: -1} }

// Key returns the service's key.
func (t *Target) Key() service.Key { return t.key }

// New returns an Executor driving cfg.Backend. Call Start to run it.
func New(cfg Config) (*Executor, error) {
	if cfg.Backend == nil {
		return nil, errors.New("executor: Config.Backend is required")
	}
	opts := cfg
	opts.setDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	return &Executor{
		backend: opts.Backend,
		opts:    opts,
		clock:   opts.Clock,
		log:     opts.Logger,
		queue:   newQueue(),
		ctx:     ctx,
		cancel:  cancel,
		timers:  make(map[*Target]struct{}),
	}, nil
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
		timers := make([]clock.Timer, 0, len(e.timers))
		for t := range e.timers {
			timers = append(timers, t.timer)
			t.timer = nil
		}
		clear(e.timers)
		e.mu.Unlock()
		for _, t := range timers {
			t.Stop()
		}
	})
}

// Update records t's newest decision and schedules its reconcile. It does
// not block on the backend and is cheap enough to call for every service
// on every tick.
//
// A service that is backing off after backend errors is not retried early
// by a new decision, unless that decision wakes it from zero.
func (e *Executor) Update(t *Target, d decider.Decision) {
	now := e.clock.Now()
	e.mu.Lock()
	if t.forgotten {
		e.mu.Unlock()
		return
	}
	t.decision, t.hasDecision = d, true
	wake := d.Scale > 0 && t.observed == 0
	backingOff := t.backoffUntil.After(now)
	e.mu.Unlock()
	if backingOff && !wake {
		return // the retry timer picks the decision up
	}
	e.queue.add(t, wake)
}

// Resync schedules t's reconcile without a new decision. A backend that
// watches its services calls it (through its owner) when one changes (a
// pod became ready, a route switch took effect), so the executor need not
// wait for its poll.
func (e *Executor) Resync(t *Target) { e.queue.add(t, false) }

// Forget drops what the executor holds for t (a deleted service): no
// reconcile starts for it after Forget. One already running finishes.
func (e *Executor) Forget(t *Target) {
	e.mu.Lock()
	t.forgotten = true
	timer := t.timer
	t.timer = nil
	delete(e.timers, t)
	e.mu.Unlock()
	if timer != nil {
		timer.Stop()
	}
	e.queue.forget(t)
}

func (e *Executor) work() {
	defer e.wg.Done()
	// The actions of one reconcile, reused: a steady state allocates
	// nothing here.
	var actions [2]plan.Action
	for {
		t, ok := e.queue.get()
		if !ok {
			return
		}
		e.process(t, actions[:0])
		e.queue.done(t)
	}
}

func (e *Executor) process(t *Target, actions []plan.Action) {
	e.mu.Lock()
	d, ok := t.decision, t.hasDecision && !t.forgotten
	e.mu.Unlock()
	if !ok {
		e.observe(t, 0, nil)
		return
	}

	after, err := e.reconcile(t, d, actions)
	if e.ctx.Err() != nil {
		return // stopping: the error, if any, is ours
	}

	if err != nil {
		t.failures++
		after = e.backoff(t.failures)
		e.mu.Lock()
		t.backoffUntil = e.clock.Now().Add(after)
		e.mu.Unlock()
		e.emit(Event{Time: e.clock.Now(), Service: t.key, Kind: EventError, Err: err, RetryIn: after})
	} else if t.failures > 0 {
		t.failures = 0
		e.mu.Lock()
		t.backoffUntil = time.Time{}
		e.mu.Unlock()
	}
	if after > 0 {
		e.addAfter(t, after)
	}
	e.observe(t, after, err)
}

func (e *Executor) observe(t *Target, after time.Duration, err error) {
	if e.opts.OnReconcile != nil {
		e.opts.OnReconcile(t.key, after, err)
	}
}

// reconcile moves t one step toward d: it reads the backend's state, asks
// the rules what to do (plan.Rules.Next) and does it, in order. It returns
// when t should be looked at again (0: not until something changes).
func (e *Executor) reconcile(t *Target, d decider.Decision, actions []plan.Action) (time.Duration, error) {
	// Status reads a cache and gets only Stop's cancellation; the writes
	// share one deadline, made only when there is something to write (a
	// timer context would cost more than the rest of a reconcile that
	// finds everything in place).
	s, err := e.backend.Status(e.ctx, t.key)
	if err != nil {
		return 0, fmt.Errorf("status: %w", err)
	}
	e.setObserved(t, s.Desired)
	now := e.clock.Now()
	// A scale to zero leaves the service to a newer decision, which may
	// have come from a request at the activator.
	newer := d.Scale == 0 && e.queue.pending(t)
	step := e.opts.Rules.Next(&t.mem, s, d, now, newer, actions)
	if step.Held != plan.NotHeld {
		e.logHeld(t.key, s.Desired, step)
	}

	wc := writeCtx{parent: e.ctx, timeout: e.opts.Timeout}
	defer wc.done()
	for _, a := range step.Actions {
		ev := Event{Time: now, Service: t.key, Reason: a.Reason}
		switch a.Kind {
		case plan.SetRoute:
			if err := e.backend.SetRoute(wc.get(), t.key, a.ToRoute); err != nil {
				return 0, fmt.Errorf("route via %s: %w", a.ToRoute, err)
			}
			ev.Kind, ev.FromRoute, ev.ToRoute = EventRoute, a.FromRoute, a.ToRoute
		case plan.SetScale:
			if a.To > 0 && a.To < a.From {
				e.preferRemoval(wc.get(), t.key, a.From-a.To)
			}
			if err := e.backend.SetScale(wc.get(), t.key, a.To); err != nil {
				return 0, fmt.Errorf("set scale to %d: %w", a.To, err)
			}
			// Update's wake test reads it: the replicas are ours now.
			e.setObserved(t, a.To)
			ev.Kind, ev.From, ev.To = EventScale, a.From, a.To
		}
		t.mem.Done(a, now)
		e.emit(ev)
	}
	return step.After, nil
}

// preferRemoval tells a Trimmer backend which n pods of key should go
// first. A failure costs only the choice: the backend then picks alone.
func (e *Executor) preferRemoval(ctx context.Context, key service.Key, n int) {
	tr, ok := e.backend.(Trimmer)
	if !ok || e.opts.LeastBusy == nil {
		return
	}
	pods := e.opts.LeastBusy(key, n)
	if len(pods) == 0 {
		return
	}
	if err := tr.PreferRemoval(ctx, key, pods); err != nil {
		e.log.Warn("could not mark the least busy pods to go first; the scale-down goes ahead without",
			zap.Stringer("service", key), zap.Strings("pods", pods), zap.Error(err))
	}
}

func (e *Executor) setObserved(t *Target, n int) {
	e.mu.Lock()
	t.observed = n
	e.mu.Unlock()
}

func (e *Executor) logHeld(key service.Key, from int, step plan.Step) {
	ce := e.log.Check(zapcore.DebugLevel, "scale change waits")
	if ce == nil {
		return
	}
	why := "the rules' hold or rate limit"
	switch step.Held {
	case plan.HeldForActivator:
		why = "the activator to be confirmed in the path"
	case plan.HeldForNewer:
		why = "a newer decision"
	}
	ce.Write(zap.Stringer("service", key), zap.Int("from", from), zap.Int("to", step.Wanted),
		zap.String("for", why), zap.Duration("lookAgainIn", step.After))
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

// addAfter schedules t's next reconcile in d, unless an earlier one is
// already scheduled.
func (e *Executor) addAfter(t *Target, d time.Duration) {
	now := e.clock.Now()
	at := now.Add(d)
	e.mu.Lock()
	if e.stopped || t.forgotten {
		e.mu.Unlock()
		return
	}
	if t.timer != nil && t.wakeAt.After(now) && !t.wakeAt.After(at) {
		e.mu.Unlock()
		return
	}
	old := t.timer
	t.timer, t.wakeAt = nil, at
	delete(e.timers, t)
	e.mu.Unlock()
	// The clock is called without e.mu held: a fake clock runs AfterFunc
	// callbacks under its own lock, and the callback must not wait for ours.
	if old != nil {
		old.Stop()
	}
	timer := e.clock.AfterFunc(d, func() { e.queue.add(t, false) })
	e.mu.Lock()
	if e.stopped || t.forgotten {
		e.mu.Unlock()
		timer.Stop()
		return
	}
	t.timer = timer
	e.timers[t] = struct{}{}
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
