// Package autoscaler is the autoscaler's loop: it owns the one record of
// every service and, on one goroutine, ties stats collection
// (autoscaler/collector), each service's decision core (autoscaler/engine)
// and the executor that applies decisions (autoscaler/scaler, by the rules
// of autoscaler/plan) together on a clock, ticking every service's
// decision and deciding at once for a service whose request is waiting at
// the activator. docs/autoscaler.md describes it.
package autoscaler

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
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
	"github.com/swell-run/swell/pkg/stats"
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

// Config configures an Autoscaler. Backend and Clock are required.
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
	// Its Backend, Clock and Logger are the Autoscaler's.
	Scaler scaler.Config

	// Collector configures stats collection. Activators, Clock, Logger and
	// Registerer are the Autoscaler's; the pods it scrapes are those given
	// to SetPods.
	Collector collector.Config
	// Endpoint configures the websocket endpoint activators report to.
	// Without Tokens or an Authenticator there is none, and the autoscaler sees nothing the
	// activators hold: no pokes, and no pending requests to keep a service
	// from scaling to zero. That suits tests and tools, never a cluster.
	// Sink, OnPoke, Logger and Registerer are the Autoscaler's.
	Endpoint collector.EndpointConfig
	// Pods configures the websocket endpoint pods push their stats to
	// (PodHandler serves it). Without a Resolver there is none, and every
	// pod is scraped. Pushes, OnSharp, Clock, Logger and Registerer are the
	// Autoscaler's: a pod's fresh push stands in for its scrape, and a
	// frame that shows a service's load rising sharply has it decided at
	// once (engine.Inputs.HasRecent).
	Pods collector.PodEndpointConfig
	// ActivatorStaleAfter is how long an activator's figures count after
	// they arrived (default collector.DefaultStaleAfter).
	ActivatorStaleAfter time.Duration

	// Registerer, if set, gets the autoscaler's metrics, the collector's
	// and the activator endpoint's.
	Registerer prometheus.Registerer

	// Clock drives the loop, the windows and the executor's timers.
	Clock clock.WithTickerAndDelayedExecution
	// Logger receives the loop's, the collector's and the executor's logs
	// (default: none).
	Logger *zap.Logger

	// OnNotable, if set, is called with every decision that changes a
	// service's scale or panic mode, as it is made, on the loop goroutine:
	// it must return quickly. The executor's events (Scaler.OnEvent) say
	// when a scale change is applied.
	OnNotable func(Notable)

	// OnGaugeProblem, if set, is called on the loop goroutine when the
	// pods of a service that scales on an app gauge start failing to read
	// it, fail otherwise, or read it again, once the change has held for
	// gaugeProblemRounds rounds; it must return quickly.
	OnGaugeProblem func(GaugeProblem)

	// Memory, if set, keeps what services' policies learn
	// (engine.Service.Memory) across autoscaler restarts and leader
	// changes: the loop recalls a service's memory when it adds the
	// service, and hands it a changed one at most every KeepInterval
	// (default DefaultKeepInterval).
	Memory       MemoryStore
	KeepInterval time.Duration
}

// DefaultKeepInterval is how often at most a service's changed memory is
// handed to the MemoryStore.
const DefaultKeepInterval = 5 * time.Minute

// A MemoryStore keeps what services' policies learn. On Kubernetes it is
// the Deployment's status annotation; in swell local a file per service.
type MemoryStore interface {
	// Recall returns what was kept for svc, or nil. It reads a cache: the
	// loop calls it when it adds a service.
	Recall(svc service.Key) []byte
	// Keep is handed svc's changed memory, on the loop goroutine: it must
	// not block, and writes in its own time (the newest memory wins).
	Keep(svc service.Key, mem []byte)
}

// Notable is a decision that changed a service's scale or panic mode.
type Notable struct {
	Service service.Key
	// Time is when the decision was made; Trigger is "tick", "poke" or "push".
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

// GaugeProblem is a change in how a service's pods read its app gauge.
type GaugeProblem struct {
	Service service.Key
	Time    time.Time
	// Gauge is the selector the service scales on.
	Gauge string
	// Problem is the most common reason the pods could not read it, and
	// Pods how many could not; stats.GaugeOK and 0 once they read it again.
	Problem stats.GaugeProblem
	Pods    int
}

// gaugeProblemRounds is how many rounds in a row a gauge problem, or its
// end, must hold before it is told: a pod that misses one read out of many
// is not news.
const gaugeProblemRounds = 3

// Autoscaler runs the autoscaling loop for a changing set of services.
// Backends add services with Upsert (and their ready pods with SetPods) and
// drop them with Remove, at any time, from any goroutine; Run does the
// rest until its context ends.
//
// One goroutine, Run's, owns the set of services and everything each
// service's decisions depend on: it applies the changes the other methods
// queue, hands each collection round its targets and records what comes
// back, and decides. Nothing of a service's decision core is shared, so it
// needs no lock; readers of Status take the registry's read lock and each
// service's display lock.
type Autoscaler struct {
	// tick is the tick interval, a time.Duration: the loop reads and
	// changes it, Status reads it from other goroutines.
	tick           atomic.Int64
	history        int
	clock          clock.WithTickerAndDelayedExecution
	log            *zap.Logger
	backend        scaler.Backend
	exec           *scaler.Executor
	collector      *collector.Collector
	acts           *collector.Activators
	endpoint       *collector.ActivatorEndpoint // nil without tokens or an authenticator
	pushes         *collector.Pushes            // with podEndpoint; nil without a resolver
	podEndpoint    *collector.PodEndpoint
	metrics        *metrics
	onNotable      func(Notable)
	onGaugeProblem func(GaugeProblem)
	memory         MemoryStore
	keepEvery      time.Duration

	// mu guards the registry for readers on other goroutines; only the
	// loop changes it, under mu, and reads it without.
	mu       sync.RWMutex
	services map[service.Key]*svc
	list     []*svc // the same services, for iteration in a stable order

	// inbox holds the changes and pokes other goroutines asked for, in
	// order, until the loop applies them; wake tells the loop, and never
	// blocks a sender.
	inMu  sync.Mutex
	inbox []change
	pokes []service.Key
	poked map[service.Key]struct{}
	// sharps are the services whose pods pushed a sharp rise since the
	// loop last decided on them, once each.
	sharps []service.Key
	sharp  map[service.Key]struct{}
	wake   chan struct{}
	taken  []change // the loop's copy of the inbox, reused
	pokesC []service.Key
	// sharpsC is handlePokes' copy of sharps.
	sharpsC []service.Key

	running atomic.Bool

	// Owned by the loop: the context of backend reads, the decision
	// ticker while Run runs, and scratch reused every round and tick.
	ctx     context.Context
	ticker  clock.Ticker
	targets []collector.Target
	decided []decision
}

// changeKind says what a change does.
type changeKind uint8

const (
	changeUpsert changeKind = iota + 1
	changePods
	changeRemove
	changeTick
)

// change is one queued Upsert, SetPods, Remove or SetTickInterval.
type change struct {
	kind changeKind
	key  service.Key
	spec autoscaling.Spec
	pods []string
	tick time.Duration
}

// svc is the loop's record of one service: the one place its state lives.
type svc struct {
	key  service.Key
	name string // key.String(), made once

	// Owned by the loop.
	core *engine.Service
	// kept is the memory last handed to the MemoryStore, keptAt when.
	kept   []byte
	keptAt time.Time
	target *scaler.Target
	pods   []string // replaced, never changed in place: a round reads it
	// round is what the latest round read of the service, for a decision
	// made on pushed frames between rounds; podsAt is when its ready pods
	// last changed.
	round  roundFigures
	podsAt time.Time
	m      serviceMetrics
	// gaugeKey is stats.GaugeKey of the gauge the spec scales on, 0 for
	// none. gauge is the problem last told, and pending a change seen for
	// pendingRounds rounds.
	gaugeKey      uint64
	gauge         stats.GaugeProblem
	pending       stats.GaugeProblem
	pendingRounds int

	// loadMu guards what the executor's workers read before a scale-down
	// (leastBusy): the ready pods (the loop's pods) and each one's latest
	// scraped concurrency, which the loop writes.
	loadMu   sync.Mutex
	loadPods []string
	loads    map[string]float64

	// mu guards what Status shows; the loop writes it, readers copy it.
	mu      sync.Mutex
	spec    autoscaling.Spec
	npods   int
	sample  engine.Sample
	sampled bool
	// sampleRead and samplePushed are the pods the latest round read, and
	// how many of those from a push.
	sampleRead, samplePushed int
	// The latest decision and what it saw.
	last    entry
	decided bool
	// history is a ring of the notable decisions; next is where the next
	// one goes, n how many it holds.
	history []entry
	next, n int
}

// roundFigures are a round's figures of a service: its ready pods, how
// many were read and how many of those from a push, their own load (not
// what the activators sent them), and the activators'.
type roundFigures struct {
	ready, read, pushed int
	podConc, podRPS     float64
	podProxied          float64
	podProxiedRPS       float64
	actConc, actRPS     float64
}

// entry is one kept decision with its inputs.
type entry struct {
	d  decider.Decision
	in engine.Inputs
	// current is the replicas the backend was asked to run at the time.
	current int
}

// decision is one decision of a tick or a poke, before it is recorded and
// handed to the executor.
type decision struct {
	s *svc
	entry
}

// trigger is what a decision was made for: the tick, a poke from an
// activator, or a sharp rise a pod pushed. Its String names it in logs,
// Notables and the decisions metric.
type trigger uint8

const (
	byTick trigger = iota
	byPoke
	bySharp
	numTriggers
)

func (t trigger) String() string {
	switch t {
	case byPoke:
		return "poke"
	case bySharp:
		return "push"
	}
	return "tick"
}

// New returns an Autoscaler, or an error saying which setting is wrong.
func New(cfg Config) (*Autoscaler, error) {
	if cfg.Backend == nil {
		return nil, errors.New("autoscaler: Config.Backend is required")
	}
	clk, log := cfg.Clock, cfg.Logger
	if clk == nil {
		return nil, errors.New("autoscaler: Config.Clock is required")
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
		history:        cfg.History,
		clock:          clk,
		log:            log,
		backend:        cfg.Backend,
		onNotable:      cfg.OnNotable,
		onGaugeProblem: cfg.OnGaugeProblem,
		memory:         cfg.Memory,
		keepEvery:      cmp.Or(cfg.KeepInterval, DefaultKeepInterval),
		services:       make(map[service.Key]*svc),
		poked:          make(map[service.Key]struct{}),
		sharp:          make(map[service.Key]struct{}),
		wake:           make(chan struct{}, 1),
		ctx:            context.Background(),
	}

	a.tick.Store(int64(cfg.TickInterval))

	var err error
	if a.metrics, err = newMetrics(cfg.Registerer); err != nil {
		return nil, err
	}

	a.acts = collector.NewActivators(clk, cfg.ActivatorStaleAfter)
	cc := cfg.Collector
	if cfg.Pods.Resolver != nil {
		a.pushes = collector.NewPushes(clk, 0)
		cc.Pushes = a.pushes
		pc := cfg.Pods
		pc.Pushes = a.pushes
		pc.OnSharp = a.onSharp
		pc.Clock = clk
		pc.Logger = log
		pc.Registerer = cfg.Registerer
		if a.podEndpoint, err = collector.NewPodEndpoint(pc); err != nil {
			return nil, fmt.Errorf("autoscaler: %w", err)
		}
	}
	cc.Activators = a.acts
	cc.Clock = clk
	cc.Logger = log
	cc.Registerer = cfg.Registerer
	if a.collector, err = collector.New(cc); err != nil {
		return nil, fmt.Errorf("autoscaler: %w", err)
	}

	if len(cfg.Endpoint.Tokens) > 0 || cfg.Endpoint.Authenticator != nil {
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
	so.Backend = cfg.Backend
	so.LeastBusy = a.leastBusy
	so.Clock = clk
	so.Logger = log
	if a.exec, err = scaler.New(so); err != nil {
		return nil, fmt.Errorf("autoscaler: %w", err)
	}
	return a, nil
}

// Upsert adds a service or updates its spec; an update keeps the
// service's history where it still applies (engine.Service.SetSpec). It
// never blocks: the loop applies it before its next round, tick or poke.
//
// A new service starts from what the backend reports, so that an
// autoscaler restart changes nothing by itself: with ready pods it holds
// the replicas asked for (never scaling a running service down on an empty
// history), at zero it stays at zero until traffic arrives, and with pods
// asked for but none ready yet (or unknown to the backend) it is taken as
// new and held at its initial scale until that many pods have been ready.
func (a *Autoscaler) Upsert(key service.Key, spec autoscaling.Spec) {
	a.send(change{kind: changeUpsert, key: key, spec: spec})
}

// SetPods sets the addresses ("host:port" of the queue-proxy's metrics
// port) of a service's ready pods, which the collector scrapes. addrs is
// copied. A service not added with Upsert is ignored.
func (a *Autoscaler) SetPods(key service.Key, addrs []string) {
	a.send(change{kind: changePods, key: key, pods: slices.Clone(addrs)})
}

// Remove forgets a service: it is no longer collected, decided or scaled.
// What the backend runs for it is left as it is.
func (a *Autoscaler) Remove(key service.Key) {
	a.send(change{kind: changeRemove, key: key})
}

// SetTickInterval changes how often every service is decided, from the
// next tick on: the cluster's defaults were edited. It never blocks, and
// refuses an interval under MinTickInterval.
func (a *Autoscaler) SetTickInterval(d time.Duration) error {
	if d < MinTickInterval {
		return fmt.Errorf("autoscaler: tick interval %v is too short; accepted: at least %v", d, MinTickInterval)
	}
	a.send(change{kind: changeTick, tick: d})
	return nil
}

func (a *Autoscaler) send(c change) {
	a.inMu.Lock()
	a.inbox = append(a.inbox, c)
	a.inMu.Unlock()
	a.signal()
}

func (a *Autoscaler) signal() {
	select {
	case a.wake <- struct{}{}:
	default: // the loop is already woken
	}
}

// Resync asks the executor to look at a service again without a new
// decision. A backend that watches its services calls it when one changes
// (a pod became ready, a route switch took effect).
func (a *Autoscaler) Resync(key service.Key) {
	if s := a.lookup(key); s != nil {
		a.exec.Resync(s.target)
	}
}

// Poke decides for a service at once, out of the tick, and hands the
// decision to the executor: a request is waiting for it at the activator.
// It never blocks; the decision is made by Run's loop. The activator
// endpoint pokes on every Poke frame.
func (a *Autoscaler) Poke(key service.Key) {
	a.inMu.Lock()
	if _, dup := a.poked[key]; !dup {
		a.poked[key] = struct{}{}
		a.pokes = append(a.pokes, key)
	}
	a.inMu.Unlock()
	a.signal()
}

// onSharp is the pod endpoint's OnSharp: a pod of the service pushed a
// frame that shows its load rising sharply. The loop decides for the
// service at once, reading its pods' latest frames (Inputs.HasRecent);
// pushes between two decisions are one.
func (a *Autoscaler) onSharp(key service.Key) {
	a.inMu.Lock()
	if _, dup := a.sharp[key]; !dup {
		a.sharp[key] = struct{}{}
		a.sharps = append(a.sharps, key)
	}
	a.inMu.Unlock()
	a.signal()
}

// PodHandler serves the pods' push endpoint (network.PodPushPath), or is
// nil when Config.Pods has no Resolver.
func (a *Autoscaler) PodHandler() http.Handler {
	if a.podEndpoint == nil {
		return nil
	}
	return a.podEndpoint
}

// ClosePushes closes the push connections of the pods of every service
// for which moved reports true (this replica no longer leads it): they
// dial again and are sent where it is led. It does nothing without a
// pod endpoint.
func (a *Autoscaler) ClosePushes(moved func(service.Key) bool) {
	if a.podEndpoint != nil {
		a.podEndpoint.CloseWhere(moved)
	}
}

// pokeName is the activator endpoint's OnPoke: where a service's name
// enters from the wire, and is parsed.
func (a *Autoscaler) pokeName(name string) {
	key, err := service.Parse(name)
	if err != nil {
		a.log.Debug("poke for a malformed service key", zap.Error(err))
		return
	}
	a.Poke(key)
}

func (a *Autoscaler) lookup(key service.Key) *svc {
	a.mu.RLock()
	s := a.services[key]
	a.mu.RUnlock()
	return s
}

// Run runs the loop until ctx ends: a collection round every second (at
// the half second, so a round never straddles the second it collects),
// a decision for every service every tick, and a decision at once for
// every poke. Rounds scrape on a goroutine of their own and hand their
// samples back to the loop. Run starts and stops the executor and closes
// the activator endpoint's connections when it returns. Run may be called
// once.
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
	if a.podEndpoint != nil {
		defer a.podEndpoint.Close()
	}

	// The collection rounds' goroutine: it does the I/O, the loop the rest.
	type roundReq struct {
		t       time.Time
		targets []collector.Target
	}
	reqs := make(chan roundReq)
	results := make(chan []collector.Sample, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(reqs)
	wg.Go(func() {
		for r := range reqs {
			if a.pushes != nil {
				a.pushes.Sweep()
			}
			results <- a.collector.Round(ctx, r.t, r.targets)
		}
	})
	busy := false

	a.apply()
	a.ticker = a.clock.NewTicker(time.Duration(a.tick.Load()))
	defer func() { a.ticker.Stop() }()
	now := a.clock.Now()
	first := a.clock.NewTimer((collectInterval*3/2 - now.Sub(now.Truncate(collectInterval))) % collectInterval)
	defer first.Stop()
	var collectC <-chan time.Time = first.C()
	var collectTicker clock.Ticker
	defer func() {
		if collectTicker != nil {
			collectTicker.Stop()
		}
	}()
	a.log.Info("autoscaler running", zap.Duration("tick", time.Duration(a.tick.Load())))

	for {
		select {
		case <-ctx.Done():
			// What was learned since the last keep, for the next run.
			if a.memory != nil {
				now := a.clock.Now()
				for _, s := range a.list {
					a.keep(s, now)
				}
			}
			return nil
		case t := <-collectC:
			if collectTicker == nil {
				collectTicker = a.clock.NewTicker(collectInterval)
				collectC = collectTicker.C()
			}
			if busy {
				// The previous round still scrapes: this second is lost
				// rather than queued behind it.
				a.metrics.roundsBusy.Inc()
				continue
			}
			a.apply()
			busy = true
			reqs <- roundReq{t, a.roundTargets()}
		case samples := <-results:
			busy = false
			a.record(samples)
		case t := <-a.ticker.C():
			a.out(a.tickAll(t))
		case <-a.wake:
			a.apply()
			a.handlePokes()
		}
	}
}

// apply makes the changes queued since the last call. It runs on the
// loop.
func (a *Autoscaler) apply() {
	a.inMu.Lock()
	a.taken, a.inbox = a.inbox, a.taken[:0]
	a.inMu.Unlock()
	for i := range a.taken {
		c := &a.taken[i]
		switch c.kind {
		case changeUpsert:
			a.upsert(c.key, c.spec)
		case changePods:
			if s := a.services[c.key]; s != nil {
				if !slices.Equal(s.pods, c.pods) {
					s.podsAt = a.clock.Now()
				}
				s.pods = c.pods
				s.mu.Lock()
				s.npods = len(c.pods)
				s.mu.Unlock()
				s.setLoadPods(c.pods)
				if a.pushes != nil {
					a.pushes.Forget(s.name, c.pods)
				}
			}
		case changeRemove:
			a.remove(c.key)
		case changeTick:
			if old := time.Duration(a.tick.Swap(int64(c.tick))); old != c.tick {
				a.log.Info("tick interval changed", zap.Duration("from", old), zap.Duration("to", c.tick))
				if a.ticker != nil {
					// From now: the next tick is one new interval away.
					a.ticker.Stop()
					a.ticker = a.clock.NewTicker(c.tick)
				}
			}
		}
		*c = change{} // drop the references
	}
}

func (a *Autoscaler) upsert(key service.Key, spec autoscaling.Spec) {
	if s := a.services[key]; s != nil {
		s.core.SetSpec(spec)
		s.gaugeKey = gaugeKeyOf(&spec)
		s.mu.Lock()
		s.spec = spec
		s.mu.Unlock()
		return
	}
	// Status reads the backend's cache.
	st, err := a.backend.Status(a.ctx, key)
	now := a.clock.Now()
	how := "new"
	var core *engine.Service
	switch {
	case err != nil:
		core = engine.New(spec, now, 0)
	case st.Desired == 0:
		// Pods still terminating after a scale to zero do not count.
		how = "resumed at zero"
		core = engine.Resume(spec, now, 0)
	case st.Ready > 0:
		how = "resumed"
		core = engine.Resume(spec, now, st.Desired)
	default:
		core = engine.New(spec, now, 0)
	}
	var kept []byte
	if a.memory != nil {
		if mem := a.memory.Recall(key); mem != nil {
			if err := core.Remember(mem); err != nil {
				a.log.Warn("a kept memory does not read: learning afresh", zap.Stringer("service", key), zap.Error(err))
			} else {
				how += ", remembering what it learned"
				kept = mem
			}
		}
	}
	s := &svc{
		key:      key,
		name:     key.String(),
		core:     core,
		kept:     kept,
		keptAt:   now,
		target:   scaler.NewTarget(key),
		m:        a.metrics.forService(key),
		spec:     spec,
		history:  make([]entry, a.history),
		gaugeKey: gaugeKeyOf(&spec),
	}
	a.mu.Lock()
	a.services[key] = s
	a.list = append(a.list, s)
	a.mu.Unlock()
	a.metrics.services.Set(float64(len(a.list)))
	a.log.Info("service added", zap.Stringer("service", key), zap.String("as", how),
		zap.String("class", string(spec.Class)), zap.String("metric", string(spec.Metric)),
		zap.Int("ready", st.Ready), zap.Int("replicas", st.Desired), zap.Error(err))
}

func (a *Autoscaler) remove(key service.Key) {
	s := a.services[key]
	if s == nil {
		return
	}
	a.mu.Lock()
	delete(a.services, key)
	i := slices.Index(a.list, s)
	last := len(a.list) - 1
	a.list[i] = a.list[last]
	a.list[last] = nil
	a.list = a.list[:last]
	a.mu.Unlock()
	// The executor drops it; no decision for it is made after this, so
	// Forget is the last word.
	a.exec.Forget(s.target)
	if a.pushes != nil {
		a.pushes.Forget(s.name, nil)
	}
	a.metrics.remove(key)
	a.metrics.services.Set(float64(len(a.list)))
	a.log.Info("service removed", zap.Stringer("service", key))
}

// roundTargets returns every service's collection target. The slice is
// the loop's, reused from round to round; the round reads it until its
// samples come back.
func (a *Autoscaler) roundTargets() []collector.Target {
	a.targets = a.targets[:0]
	for _, s := range a.list {
		a.targets = append(a.targets, collector.Target{Key: s.key, Name: s.name, Pods: s.pods, GaugeKey: s.gaugeKey})
	}
	return a.targets
}

// round runs one collection round in the calling goroutine, the loop's:
// tests and benchmarks step the loop with it.
func (a *Autoscaler) round(ctx context.Context, t time.Time) {
	a.apply()
	a.record(a.collector.Round(ctx, t, a.roundTargets()))
}

// record records a round's samples into their services' cores.
func (a *Autoscaler) record(samples []collector.Sample) {
	for i := range samples {
		sm := &samples[i]
		s := a.services[sm.Service]
		if s == nil {
			continue // removed while the round scraped
		}
		// What Status shows of it is copied at the next decision, under the
		// lock the decision takes anyway.
		s.core.Record(engine.Sample{Time: sm.Time, Concurrency: sm.Concurrency, RPS: sm.RPS,
			PodConcurrency: sm.PodConcurrency + sm.PodProxiedConcurrency, PodRPS: sm.PodRPS + sm.PodProxiedRPS,
			CPU: sm.CPU, Memory: sm.Memory, Gauge: sm.Gauge, HasCPU: sm.HasCPU, HasMemory: sm.HasMemory, HasGauge: sm.HasGauge})
		if len(sm.Pods) > 0 {
			s.recordLoads(sm.Pods)
		}
		s.round = roundFigures{ready: sm.ReadyPods, read: sm.Scraped, pushed: sm.Pushed,
			podConc: sm.PodConcurrency, podRPS: sm.PodRPS, podProxied: sm.PodProxiedConcurrency, podProxiedRPS: sm.PodProxiedRPS,
			actConc: sm.ActivatorConcurrency, actRPS: sm.ActivatorRPS}
		if s.gaugeKey != 0 && sm.Scraped > 0 {
			a.gaugeRound(s, sm)
		}
	}
}

// gaugeKeyOf is the key of the gauge spec scales on, 0 for none.
func gaugeKeyOf(spec *autoscaling.Spec) uint64 {
	if !spec.VotesWith(autoscaling.MetricGauge) || spec.Gauge.Selector == "" {
		return 0
	}
	return stats.GaugeKey(spec.Gauge.Selector)
}

// gaugeRound follows how the service's pods read its gauge, and tells a
// change once it has held for gaugeProblemRounds rounds.
func (a *Autoscaler) gaugeRound(s *svc, sm *collector.Sample) {
	p := sm.GaugeProblem
	if !sm.HasGauge && p == stats.GaugeOK {
		// No pod answered for the gauge either way (older pods during an
		// upgrade): nothing to tell.
		return
	}
	switch {
	case p == s.gauge:
		s.pendingRounds = 0
		return
	case p == s.pending:
		s.pendingRounds++
	default:
		s.pending, s.pendingRounds = p, 1
	}
	if s.pendingRounds < gaugeProblemRounds {
		return
	}
	s.gauge, s.pendingRounds = p, 0
	selector := s.core.Spec().Gauge.Selector
	if p == stats.GaugeOK {
		a.log.Info("the pods read the app gauge again", zap.Stringer("service", s.key), zap.String("gauge", selector))
	} else {
		a.log.Warn("pods cannot read the app gauge; the service scales on its other metrics",
			zap.Stringer("service", s.key), zap.String("gauge", selector), zap.Stringer("problem", p), zap.Int("pods", sm.GaugeProblemPods))
	}
	if a.onGaugeProblem != nil {
		a.onGaugeProblem(GaugeProblem{Service: s.key, Time: sm.Time, Gauge: selector, Problem: p, Pods: sm.GaugeProblemPods})
	}
}

// setLoadPods makes pods the service's ready pods for leastBusy, keeping
// what is known of those that stay.
func (s *svc) setLoadPods(pods []string) {
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	s.loadPods = pods
	if len(s.loads) == 0 {
		return
	}
	kept := make(map[string]float64, len(pods))
	for _, p := range pods {
		if l, ok := s.loads[p]; ok {
			kept[p] = l
		}
	}
	s.loads = kept
}

// recordLoads keeps the latest load of every pod that answered a round. A
// pod that did not answer, or was not in the round's sample, keeps what
// was known of it.
func (s *svc) recordLoads(pods []collector.PodLoad) {
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	if s.loads == nil {
		s.loads = make(map[string]float64, len(s.loadPods))
	}
	for _, p := range pods {
		s.loads[p.Addr] = p.Concurrency
	}
}

// leastBusy is the executor's Config.LeastBusy: up to n of the service's
// ready pods, the least busy first, by the latest load scraped from each
// (see scaler.LeastBusy).
func (a *Autoscaler) leastBusy(key service.Key, n int) []string {
	s := a.lookup(key)
	if s == nil || n <= 0 {
		return nil
	}
	s.loadMu.Lock()
	pods := make([]scaler.PodLoad, len(s.loadPods))
	for i, p := range s.loadPods {
		l, known := s.loads[p]
		pods[i] = scaler.PodLoad{Addr: p, Concurrency: l, Known: known}
	}
	s.loadMu.Unlock()
	return scaler.LeastBusy(pods, n)
}

// tickAll decides for every service and returns the decisions, to be
// handed to out. The slice is the loop's, reused.
func (a *Autoscaler) tickAll(now time.Time) []decision {
	start := a.clock.Now()
	a.apply()
	a.decided = a.decided[:0]
	for _, s := range a.list {
		a.decided = append(a.decided, a.decide(s, now, byTick))
		if a.memory != nil && now.Sub(s.keptAt) >= a.keepEvery {
			a.keep(s, now)
		}
	}
	a.metrics.tickDuration.Observe(a.clock.Since(start).Seconds())
	return a.decided
}

// keep hands s's memory to the store if it changed since it last did.
func (a *Autoscaler) keep(s *svc, now time.Time) {
	s.keptAt = now
	if mem := s.core.Memory(); mem != nil && !bytes.Equal(mem, s.kept) {
		s.kept = mem
		a.memory.Keep(s.key, mem)
	}
}

// handlePokes decides for every service poked, or whose pods pushed a
// sharp rise, since the last call.
func (a *Autoscaler) handlePokes() {
	a.inMu.Lock()
	a.pokesC, a.pokes = a.pokes, a.pokesC[:0]
	clear(a.poked)
	a.sharpsC, a.sharps = a.sharps, a.sharpsC[:0]
	clear(a.sharp)
	a.inMu.Unlock()
	for _, key := range a.pokesC {
		s := a.services[key]
		if s == nil {
			a.log.Debug("poke for an unknown service", zap.Stringer("service", key))
			continue
		}
		a.decided = append(a.decided[:0], a.decide(s, a.clock.Now(), byPoke))
		a.out(a.decided)
	}
	for _, key := range a.sharpsC {
		s := a.services[key]
		if s == nil || slices.Contains(a.pokesC, key) {
			continue // unknown here, or decided on just now
		}
		d := a.decide(s, a.clock.Now(), bySharp)
		if !d.entry.in.HasRecent {
			continue // no fresh frame, or no rise from the round: the tick decides
		}
		a.decided = append(a.decided[:0], d)
		a.out(a.decided)
	}
}

// recent is the service's load over the last fraction of a second, when
// it rose sharply from the latest round's: ok is false when no pod has a
// fresh push, or when what the pods pushed since is less than twice the
// round's load (or less than a request more). Frames of several pods are
// not one moment: as new pods take their share, the others' latest frames
// still show the load they held alone, and their sum a rise that is not
// there; the round's figures, one second, are the reference.
//
// The load is the latest frame of each pod with a fresh push and the
// round's per-pod average for the others: their own load, and of what
// the activators sent them or hold, the larger of the activators' round
// figure and what the pods say they were sent (so a rise through the
// activators shows before their next report). inPods is what the pods
// hold, their own and proxied.
func (a *Autoscaler) recent(s *svc) (conc, rps, inPods float64, ok bool) {
	if a.pushes == nil {
		return 0, 0, 0, false
	}
	// A frame from before the ready pods last changed no longer stands
	// for its pod's share (new pods took some, or a pod that left gave
	// some): it counts as the mean of the frames since, when there are.
	var own, ownRPS, proxied, proxiedRPS float64
	var old collector.PodRecent
	nold := 0
	n := a.pushes.Recent(s.name, s.pods, func(_ string, r collector.PodRecent) {
		if r.At.Before(s.podsAt) {
			old.Concurrency += r.Concurrency
			old.RPS += r.RPS
			old.ProxiedRPS += r.ProxiedRPS
			old.Total += r.Total
			nold++
			return
		}
		own += r.Concurrency
		ownRPS += r.RPS
		proxied += r.Total - r.Concurrency
		proxiedRPS += r.ProxiedRPS
	})
	if n == 0 {
		return 0, 0, 0, false
	}
	if nold > 0 {
		if fresh := n - nold; fresh > 0 {
			f := float64(nold) / float64(fresh)
			own, ownRPS, proxied, proxiedRPS = own*(1+f), ownRPS*(1+f), proxied*(1+f), proxiedRPS*(1+f)
		} else {
			own, ownRPS, proxied, proxiedRPS = old.Concurrency, old.RPS, old.Total-old.Concurrency, old.ProxiedRPS
		}
	}
	rd := s.round
	if others := len(s.pods) - n; others > 0 && rd.ready > 0 {
		f := float64(others) / float64(rd.ready)
		own += f * rd.podConc
		ownRPS += f * rd.podRPS
		proxied += f * rd.podProxied
		proxiedRPS += f * rd.podProxiedRPS
	}
	conc = own + max(rd.actConc, proxied)
	rps = ownRPS + max(rd.actRPS, proxiedRPS)
	before := rd.podConc + max(rd.actConc, rd.podProxied)
	if conc < sharpRise*before || conc-before < 1 {
		return 0, 0, 0, false
	}
	return conc, rps, own + proxied, true
}

// sharpRise is how much the pods' pushed load must exceed the latest
// round's for a decision between ticks: the panic threshold's factor.
const sharpRise = 2

// decide makes one decision for s from its core and the inputs of now: the
// backend's status and the activators' pending requests.
func (a *Autoscaler) decide(s *svc, now time.Time, why trigger) decision {
	in := engine.Inputs{Now: now, Poked: why == byPoke}
	if why == bySharp {
		in.RecentConcurrency, in.RecentRPS, in.RecentInPods, in.HasRecent = a.recent(s)
	}
	st, err := a.backend.Status(a.ctx, s.key)
	if err != nil {
		// Unknown to the backend (not created yet, or deleted): decide on
		// no pods and no activator, which never scales to zero.
		if ce := a.log.Check(zapcore.DebugLevel, "status"); ce != nil {
			ce.Write(zap.Stringer("service", s.key), zap.Error(err))
		}
	}
	in.Ready = st.Ready
	// In effect and staying so, as the executor reads it.
	in.ActivatorInPath = st.ActivatorInPath()
	in.ActivatorPending = a.collector.ActivatorPending(s.name)
	return decision{s: s, entry: entry{d: s.core.Decide(in), in: in, current: st.Desired}}
}

// out records decisions, logs those that change a scale and hands them to
// the executor. It runs on the loop.
func (a *Autoscaler) out(ds []decision) {
	for i := range ds {
		a.outOne(ds[i].s, ds[i].entry)
		ds[i].s = nil
	}
}

func (a *Autoscaler) outOne(s *svc, e entry) {
	d := e.d
	s.mu.Lock()
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
	s.sample, s.sampled = s.core.LastSample()
	s.sampleRead, s.samplePushed = s.round.read, s.round.pushed
	metric, perPod := s.spec.Metric, s.spec.TargetPerPod()
	s.mu.Unlock()

	// The decision is told (metrics, log, OnNotable) before the executor
	// acts on it, so that what it changes is never reported first.
	s.m.observe(d)
	a.metrics.decided(e.trigger(), from, d.Scale)
	switch {
	case scaleChanged || panicChanged:
		a.logDecision(zapcore.InfoLevel, s, from, e)
	case a.log.Core().Enabled(zapcore.DebugLevel):
		a.logDecision(zapcore.DebugLevel, s, from, e)
	}
	if a.onNotable != nil && (scaleChanged || panicChanged) {
		a.onNotable(Notable{Service: s.key, Time: e.in.Now, Trigger: e.trigger().String(), From: from, Decision: d,
			PanicChanged: panicChanged, Metric: metric, TargetPerPod: perPod})
	}
	a.exec.Update(s.target, d)
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
		zap.String("trigger", e.trigger().String()),
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

func (e *entry) trigger() trigger {
	switch {
	case e.in.Poked:
		return byPoke
	case e.in.HasRecent:
		return bySharp
	}
	return byTick
}
