// Package autoscaler is the autoscaler's loop: it ties stats collection
// (autoscaler/collector), the decision core (autoscaler/engine) and the
// executor that applies decisions (autoscaler/scaler) together on a clock,
// ticking every service's decision and deciding at once for a service whose
// request is waiting at the activator. docs/autoscaler.md describes it.
package autoscaler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/utils/clock"

	"github.com/swell-run/swell/autoscaler/collector"
	"github.com/swell-run/swell/autoscaler/decider"
	"github.com/swell-run/swell/autoscaler/engine"
	"github.com/swell-run/swell/autoscaler/scaler"
	"github.com/swell-run/swell/pkg/autoscaling"
	"github.com/swell-run/swell/pkg/service"
)

// Defaults and bounds of Config.
const (
	// DefaultTickInterval is Knative's: every service is decided every 2 s.
	DefaultTickInterval = 2 * time.Second
	// MinTickInterval is the shortest tick accepted. Samples arrive once a
	// second, so shorter ticks mostly re-read the same windows.
	MinTickInterval = 100 * time.Millisecond
	// DefaultHistory is how many notable decisions Status keeps per service.
	DefaultHistory = 20
	// collectInterval is the collector's round: the windows' buckets are
	// one second long.
	collectInterval = time.Second
)

// Config configures an Autoscaler. Backend is required.
type Config struct {
	// TickInterval is how often every service is decided (default
	// DefaultTickInterval, at least MinTickInterval). A service's windows
	// and other settings come from its Spec.
	TickInterval time.Duration
	// History is how many notable decisions Status keeps per service
	// (default DefaultHistory).
	History int

	// Backend is what the decisions act on. Its Status gives every
	// decision the service's ready pods and route, so it must read from a
	// cache: it is called for every service on every tick.
	Backend scaler.Backend
	// Scaler configures the executor between the decisions and Backend.
	// Its Clock and Logger are the Autoscaler's.
	Scaler scaler.Options

	// Collector configures stats collection. Sink, Activators, Clock,
	// Logger and Registerer are the Autoscaler's; Pods, when nil, are the
	// pods given to SetPods.
	Collector collector.Config
	// Endpoint configures the websocket endpoint activators report to.
	// Without Tokens there is none, and the autoscaler sees nothing the
	// activators hold: no pokes, and no pending requests to keep a service
	// from scaling to zero. That suits tests and tools, never a cluster.
	// Sink, OnPoke, Logger and Registerer are the Autoscaler's.
	Endpoint collector.EndpointConfig
	// ActivatorStaleAfter is how long an activator's figures count after
	// they arrived (default collector.DefaultStaleAfter).
	ActivatorStaleAfter time.Duration

	// Registerer, if set, gets the autoscaler's metrics, the collector's
	// and the activator endpoint's.
	Registerer prometheus.Registerer

	// OnNotable, if set, is called with every decision that changes a
	// service's scale or panic mode, as it is made, on the loop goroutine:
	// it must return quickly. The executor's events (Scaler.OnEvent) say
	// when a scale change is applied.
	OnNotable func(Notable)
}

// Notable is a decision that changed a service's scale or panic mode.
type Notable struct {
	Service service.Key
	// Time is when the decision was made; Trigger is "tick" or "poke".
	Time    time.Time
	Trigger string
	// From is the scale before: the previous decision's, or for the first
	// decision the replicas the backend was running.
	From     int
	Decision decider.Decision
	// PanicChanged says the decision entered or left panic mode.
	PanicChanged bool
	// Metric and TargetPerPod are the service's, at the decision.
	Metric       autoscaling.Metric
	TargetPerPod float64
}

// Autoscaler runs the autoscaling loop for a changing set of services.
// Backends add services with Upsert (and their ready pods with SetPods) and
// drop them with Remove, at any time, from any goroutine; Run does the
// rest until its context ends.
type Autoscaler struct {
	tick      time.Duration
	history   int
	clock     clock.WithTickerAndDelayedExecution
	log       *zap.Logger
	backend   scaler.Backend
	engine    *engine.Engine
	exec      *scaler.Executor
	collector *collector.Collector
	acts      *collector.Activators
	endpoint  *collector.ActivatorEndpoint // nil without tokens
	metrics   *metrics

	// mu guards the set of services; each service has its own lock.
	mu       sync.RWMutex
	services map[service.Key]*svc
	byName   map[string]*svc

	// Pokes wait in pokes (deduplicated by poked) until the loop takes
	// them; pokeC wakes the loop and never blocks a sender.
	pokeMu sync.Mutex
	pokes  []service.Key
	poked  map[service.Key]struct{}
	pokeC  chan struct{}

	running   atomic.Bool
	onNotable func(Notable)

	// Owned by the loop goroutine (Run): the context of backend reads, the
	// time of the decision in progress, and the service whose inputs were
	// just built (Tick calls out for the service it just called inputs
	// for, which saves a lookup).
	ctx        context.Context
	now        time.Time
	poking     bool
	cur        *svc
	curIn      engine.Inputs
	curCurrent int
	inputsFn   func(service.Key) engine.Inputs
	outFn      func(service.Key, decider.Decision)

	// Test hooks, set before Run: called after each collection round,
	// tick and poke, and once the loop's tickers exist.
	afterRound func(time.Time)
	afterTick  func(time.Time)
	afterPoke  func(service.Key)
	onStart    func()
}

// svc is the loop's record of one service.
type svc struct {
	key  service.Key
	name string // key.String(), made once

	mu      sync.Mutex
	removed bool
	spec    autoscaling.Spec
	pods    []string
	// The latest decision and what it saw.
	last    entry
	decided bool
	// history is a ring of the notable decisions; next is where the next
	// one goes, n how many it holds.
	history []entry
	next, n int

	m serviceMetrics
}

// entry is one kept decision with its inputs.
type entry struct {
	d  decider.Decision
	in engine.Inputs
	// current is the replicas the backend was asked to run at the time.
	current int
}

// The triggers of a decision.
const (
	triggerTick = "tick"
	triggerPoke = "poke"
)

// New returns an Autoscaler, or an error saying which setting is wrong.
func New(cfg Config, clk clock.WithTickerAndDelayedExecution, log *zap.Logger) (*Autoscaler, error) {
	if cfg.Backend == nil {
		return nil, errors.New("autoscaler: Config.Backend is required")
	}
	if clk == nil {
		return nil, errors.New("autoscaler: a clock is required")
	}
	if log == nil {
		log = zap.NewNop()
	}
	switch {
	case cfg.TickInterval == 0:
		cfg.TickInterval = DefaultTickInterval
	case cfg.TickInterval < MinTickInterval:
		return nil, fmt.Errorf("autoscaler: tick interval %v is too short; accepted: at least %v", cfg.TickInterval, MinTickInterval)
	}
	if cfg.History <= 0 {
		cfg.History = DefaultHistory
	}
	a := &Autoscaler{
		tick:     cfg.TickInterval,
		history:  cfg.History,
		clock:    clk,
		log:      log,
		backend:  cfg.Backend,
		engine:   engine.New(),
		services: make(map[service.Key]*svc),
		byName:   make(map[string]*svc),
		poked:    make(map[service.Key]struct{}),
		pokeC:    make(chan struct{}, 1),
		ctx:      context.Background(),
	}
	a.inputsFn, a.outFn = a.inputs, a.out
	a.onNotable = cfg.OnNotable

	var err error
	if a.metrics, err = newMetrics(cfg.Registerer); err != nil {
		return nil, err
	}

	a.acts = collector.NewActivators(clk, cfg.ActivatorStaleAfter)
	cc := cfg.Collector
	cc.Sink = sink{a}
	cc.Activators = a.acts
	cc.Clock = clk
	cc.Logger = log
	cc.Registerer = cfg.Registerer
	if cc.Pods == nil {
		cc.Pods = podLister{a}
	}
	if a.collector, err = collector.New(cc); err != nil {
		return nil, fmt.Errorf("autoscaler: %w", err)
	}

	if len(cfg.Endpoint.Tokens) > 0 {
		ec := cfg.Endpoint
		ec.Sink = a.acts
		ec.OnPoke = a.pokeName
		ec.Logger = log
		ec.Registerer = cfg.Registerer
		if a.endpoint, err = collector.NewActivatorEndpoint(ec); err != nil {
			return nil, fmt.Errorf("autoscaler: %w", err)
		}
	}

	so := cfg.Scaler
	so.Clock = clk
	so.Logger = log
	a.exec = scaler.New(cfg.Backend, so)
	return a, nil
}

// Upsert adds a service or updates its spec; an update keeps the
// service's history where it still applies (engine.Engine.Upsert).
//
// A new service starts from what the backend reports, so that an
// autoscaler restart changes nothing by itself: with ready pods it holds
// the replicas asked for (never scaling a running service down on an empty
// history), at zero it stays at zero until traffic arrives, and with pods
// asked for but none ready yet (or unknown to the backend) it is taken as
// new and held at its initial scale until that many pods have been ready.
func (a *Autoscaler) Upsert(key service.Key, spec autoscaling.Spec) {
	a.mu.Lock()
	if a.updateLocked(key, spec) {
		a.mu.Unlock()
		return
	}
	a.mu.Unlock()

	// Status reads the backend's cache; Upsert is called outside Run.
	st, err := a.backend.Status(context.Background(), key)
	s := &svc{key: key, name: key.String(), spec: spec, history: make([]entry, a.history)}
	a.mu.Lock()
	if a.updateLocked(key, spec) {
		// Added meanwhile.
		a.mu.Unlock()
		return
	}
	// The engine and the set change together, under a.mu.
	now := a.clock.Now()
	how := "new"
	switch {
	case err != nil:
		a.engine.Upsert(key, spec, now, 0)
	case st.Desired == 0:
		// Pods still terminating after a scale to zero do not count.
		how = "resumed at zero"
		a.engine.Resume(key, spec, now, 0)
	case st.Ready > 0:
		how = "resumed"
		a.engine.Resume(key, spec, now, st.Desired)
	default:
		a.engine.Upsert(key, spec, now, 0)
	}
	s.m = a.metrics.forService(key)
	a.services[key] = s
	a.byName[s.name] = s
	a.metrics.services.Set(float64(len(a.services)))
	a.mu.Unlock()
	a.log.Info("service added", zap.Stringer("service", key), zap.String("as", how),
		zap.String("class", string(spec.Class)), zap.String("metric", string(spec.Metric)),
		zap.Int("ready", st.Ready), zap.Int("replicas", st.Desired), zap.Error(err))
}

// updateLocked updates a known service's spec and reports whether it
// knew it. a.mu is held: the engine and the set change together.
func (a *Autoscaler) updateLocked(key service.Key, spec autoscaling.Spec) bool {
	s := a.services[key]
	if s == nil {
		return false
	}
	s.mu.Lock()
	s.spec = spec
	s.mu.Unlock()
	a.engine.Upsert(key, spec, a.clock.Now(), 0)
	return true
}

// SetPods sets the addresses ("host:port" of the queue-proxy's metrics
// port) of a service's ready pods, which the collector scrapes. It reports
// false for a service not added with Upsert. It is unused when
// Config.Collector.Pods is set.
func (a *Autoscaler) SetPods(key service.Key, addrs []string) bool {
	s := a.lookup(key)
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pods = append(s.pods[:0], addrs...)
	return !s.removed
}

// Remove forgets a service: it is no longer collected, decided or scaled.
// What the backend runs for it is left as it is.
func (a *Autoscaler) Remove(key service.Key) {
	a.mu.Lock()
	s := a.services[key]
	if s == nil {
		a.mu.Unlock()
		return
	}
	delete(a.services, key)
	delete(a.byName, s.name)
	// Under a.mu, as in Upsert: the engine and the set change together.
	a.engine.Remove(key)
	a.metrics.services.Set(float64(len(a.services)))
	a.mu.Unlock()

	// After this no decision for the service reaches the executor (out
	// checks the flag under the same lock), so Forget is the last word.
	s.mu.Lock()
	s.removed = true
	s.mu.Unlock()
	a.exec.Forget(key)
	a.metrics.remove(key)
	a.log.Info("service removed", zap.Stringer("service", key))
}

// Resync asks the executor to look at a service again without a new
// decision. A backend that watches its services calls it when one changes
// (a pod became ready, a route switch took effect).
func (a *Autoscaler) Resync(key service.Key) { a.exec.Resync(key) }

// Poke decides for a service at once, out of the tick, and hands the
// decision to the executor: a request is waiting for it at the activator.
// It never blocks; the decision is made by Run's loop. The activator
// endpoint pokes on every Poke frame.
func (a *Autoscaler) Poke(key service.Key) {
	a.pokeMu.Lock()
	if _, dup := a.poked[key]; !dup {
		a.poked[key] = struct{}{}
		a.pokes = append(a.pokes, key)
	}
	a.pokeMu.Unlock()
	select {
	case a.pokeC <- struct{}{}:
	default: // the loop is already woken
	}
}

// pokeName is the activator endpoint's OnPoke.
func (a *Autoscaler) pokeName(name string) {
	key, err := service.Parse(name)
	if err != nil {
		a.log.Debug("poke for a malformed service key", zap.Error(err))
		return
	}
	a.Poke(key)
}

// Run runs the loop until ctx ends: a collection round every second (at
// the half second, so a round never straddles the second it collects),
// a decision for every service every tick, and a decision at once for
// every poke. It starts and stops the executor and closes the activator
// endpoint's connections when it returns. Run may be called once.
func (a *Autoscaler) Run(ctx context.Context) error {
	if !a.running.CompareAndSwap(false, true) {
		return errors.New("autoscaler: Run called more than once")
	}
	a.ctx = ctx
	a.exec.Start()
	defer a.exec.Stop()
	if a.endpoint != nil {
		defer a.endpoint.Close()
	}

	ticker := a.clock.NewTicker(a.tick)
	defer ticker.Stop()
	collectStarted := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { a.collect(ctx, collectStarted) })
	select {
	case <-collectStarted:
	case <-ctx.Done():
		return nil
	}
	if a.onStart != nil {
		a.onStart()
	}
	a.log.Info("autoscaler running", zap.Duration("tick", a.tick))

	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
			a.tickAll()
		case <-a.pokeC:
			a.handlePokes()
		}
	}
}

// collect runs collection rounds from the next half second on, once a
// second. It closes started once its first timer or ticker exists.
func (a *Autoscaler) collect(ctx context.Context, started chan<- struct{}) {
	now := a.clock.Now()
	wait := (collectInterval*3/2 - now.Sub(now.Truncate(collectInterval))) % collectInterval
	if wait > 0 {
		t := a.clock.NewTimer(wait)
		close(started)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case now = <-t.C():
		}
	}
	ticker := a.clock.NewTicker(collectInterval)
	defer ticker.Stop()
	if wait > 0 {
		a.round(ctx, now)
	} else {
		close(started)
	}
	a.collectLoop(ctx, ticker)
}

func (a *Autoscaler) collectLoop(ctx context.Context, ticker clock.Ticker) {
	for {
		select {
		case <-ctx.Done():
			return
		case t := <-ticker.C():
			a.round(ctx, t)
		}
	}
}

func (a *Autoscaler) round(ctx context.Context, t time.Time) {
	a.collector.Round(ctx, t)
	if a.afterRound != nil {
		a.afterRound(t)
	}
}

// tickAll decides for every service.
func (a *Autoscaler) tickAll() {
	start := a.clock.Now()
	a.now, a.poking = start, false
	a.engine.Tick(a.inputsFn, a.outFn)
	a.cur = nil
	a.metrics.tickDuration.Observe(a.clock.Since(start).Seconds())
	if a.afterTick != nil {
		a.afterTick(start)
	}
}

// handlePokes decides for every service poked since the last call.
func (a *Autoscaler) handlePokes() {
	a.pokeMu.Lock()
	keys := a.pokes
	a.pokes = nil
	clear(a.poked)
	a.pokeMu.Unlock()
	for _, key := range keys {
		a.now, a.poking = a.clock.Now(), true
		in := a.inputs(key)
		if a.cur == nil {
			a.log.Debug("poke for an unknown service", zap.Stringer("service", key))
		} else if d, ok := a.engine.Decide(key, in); ok {
			a.out(key, d)
		}
		a.cur = nil
		if a.afterPoke != nil {
			a.afterPoke(key)
		}
	}
}

func (a *Autoscaler) lookup(key service.Key) *svc {
	a.mu.RLock()
	s := a.services[key]
	a.mu.RUnlock()
	return s
}

// inputs builds a decision's inputs from the backend's status and the
// activators' pending requests. It runs on the loop goroutine.
func (a *Autoscaler) inputs(key service.Key) engine.Inputs {
	in := engine.Inputs{Now: a.now, Poked: a.poking}
	s := a.lookup(key)
	a.cur = s
	if s == nil {
		return in
	}
	st, err := a.backend.Status(a.ctx, key)
	if err != nil {
		// Unknown to the backend (not created yet, or deleted): decide on
		// no pods and no activator, which never scales to zero.
		if ce := a.log.Check(zapcore.DebugLevel, "status"); ce != nil {
			ce.Write(zap.Stringer("service", key), zap.Error(err))
		}
	}
	in.Ready = st.Ready
	// In effect and staying so, as the executor reads it.
	in.ActivatorInPath = st.ActivatorInPath()
	in.ActivatorPending = a.collector.ActivatorPending(s.name)
	a.curIn, a.curCurrent = in, st.Desired
	return in
}

// out records a decision, logs it if it changes the scale, and hands it to
// the executor. It runs on the loop goroutine.
func (a *Autoscaler) out(key service.Key, d decider.Decision) {
	s := a.cur
	if s == nil || s.key != key {
		return
	}
	e := entry{d: d, in: a.curIn, current: a.curCurrent}

	s.mu.Lock()
	if s.removed {
		s.mu.Unlock()
		return
	}
	prev, first := s.last.d, !s.decided
	from := prev.Scale
	if first {
		from = e.current
	}
	scaleChanged := d.Scale != from
	panicChanged := !first && d.InPanic != prev.InPanic
	if first || scaleChanged || panicChanged || e.in.Poked || d.NeedActivator != prev.NeedActivator {
		s.history[s.next] = e
		s.next = (s.next + 1) % len(s.history)
		s.n = min(s.n+1, len(s.history))
	}
	s.last, s.decided = e, true
	metric, perPod := s.spec.Metric, s.spec.TargetPerPod()
	// Under s.mu: Remove sets removed under it before the executor forgets
	// the service, so no decision outlives the service there.
	a.exec.Update(key, d)
	s.mu.Unlock()

	if a.onNotable != nil && (scaleChanged || panicChanged) {
		a.onNotable(Notable{Service: key, Time: e.in.Now, Trigger: e.trigger(), From: from, Decision: d,
			PanicChanged: panicChanged, Metric: metric, TargetPerPod: perPod})
	}

	s.m.observe(d)
	a.metrics.decided(e.in.Poked, from, d.Scale)
	switch {
	case scaleChanged || panicChanged:
		a.logDecision(zapcore.InfoLevel, s, from, e)
	case a.log.Core().Enabled(zapcore.DebugLevel):
		a.logDecision(zapcore.DebugLevel, s, from, e)
	}
}

// logDecision writes the line users grep for: every input of the decision
// and its outcome, enough to replay it with `swell sim --observations`.
func (a *Autoscaler) logDecision(lvl zapcore.Level, s *svc, from int, e entry) {
	ce := a.log.Check(lvl, "scale decision")
	if ce == nil {
		return
	}
	d := e.d
	ce.Write(
		zap.String("service", s.name),
		zap.Int("from", from),
		zap.Int("scale", d.Scale),
		zap.Int("desired", d.Desired),
		zap.String("reason", d.Reason),
		zap.String("trigger", e.trigger()),
		zap.Int("ready", d.Ready),
		zap.Float64("stable", d.Stable),
		zap.Float64("panic", d.Panic),
		zap.Bool("panicMode", d.InPanic),
		zap.Float64("ebc", d.ExcessBurstCapacity),
		zap.Bool("needActivator", d.NeedActivator),
		zap.Bool("activatorInPath", e.in.ActivatorInPath),
		zap.Int("activatorPending", e.in.ActivatorPending),
	)
}

func (e *entry) trigger() string {
	if e.in.Poked {
		return triggerPoke
	}
	return triggerTick
}

// sink is the collector's Sink: it records each round's samples.
type sink struct{ a *Autoscaler }

func (k sink) Record(samples []collector.Sample) {
	for i := range samples {
		s := &samples[i]
		// ParseKey slices the string; the key is not kept past the call.
		key, err := service.Parse(s.Service)
		if err != nil {
			continue
		}
		k.a.engine.Record(key, engine.Sample{Time: s.Time, Concurrency: s.Concurrency, RPS: s.RPS})
	}
}

// podLister is the collector's PodLister over the services given to Upsert
// and their pods given to SetPods.
type podLister struct{ a *Autoscaler }

func (p podLister) Services(dst []string) []string {
	p.a.mu.RLock()
	defer p.a.mu.RUnlock()
	for name := range p.a.byName {
		dst = append(dst, name)
	}
	return dst
}

func (p podLister) ReadyPods(name string, dst []string) ([]string, error) {
	p.a.mu.RLock()
	s := p.a.byName[name]
	p.a.mu.RUnlock()
	if s == nil {
		return dst, fmt.Errorf("ready pods of %s: service removed", name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return append(dst, s.pods...), nil
}
