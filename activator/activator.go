// Package activator holds requests for services that have no pod, or too
// little spare capacity, until a pod can take them, and proxies them there.
//
// The request path is a chain of small handlers, assembled in chain.go:
// routing (Host → a service) → the caller's authorization (on Kubernetes:
// as the service's NetworkPolicies would judge its pod) → accounting (the autoscaler's figures and
// Prometheus') → cold start (poke the autoscaler) → retry on another pod →
// the service's throttler (a breaker whose capacity follows the probed,
// routable pods; FIFO, bounded queue and wait, bounded held requests and
// per-caller share) → capacity-aware load balancing over the routable pods
// → a reverse proxy to the pod's queue-proxy. docs/activator.md describes
// the behaviour.
package activator

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/swell-run/swell/pkg/breaker"
	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/service"
	"github.com/swell-run/swell/pkg/stats"
)

// Defaults for Config's zero values.
const (
	DefaultQueueDepth   = 10000
	DefaultQueueTimeout = network.DefaultRequestTimeout
	// DefaultGoneGrace: a Source's brief absences (a relist, an object
	// recreated) last well under it.
	DefaultGoneGrace         = 30 * time.Second
	DefaultProbeInterval     = 25 * time.Millisecond
	DefaultProbeFastWindow   = 30 * time.Second
	DefaultProbeSlowInterval = time.Second
	DefaultProbeTimeout      = time.Second
	DefaultDialTimeout       = 2 * time.Second
	// DefaultMaxProbes: a probe is one short exchange with a pod, about a
	// millisecond on a cluster network, so 256 at once get through tens of
	// thousands of pods a second — an activator starting beside 50,000
	// pods spends its core on probing rather than on sockets and retries
	// that time out — while a probe a waiting request needs never queues.
	DefaultMaxProbes = 256
)

// Config configures an Activator. Only Source is required.
type Config struct {
	// Source supplies services and pods.
	Source Source
	// Name is the name this activator reports to the autoscaler under (the
	// reporter's). It goes on every request it forwards
	// (network.ActivatorHeader), so that the pods count each activator's
	// requests apart and the autoscaler counts those of an activator that
	// does not report. Empty, requests carry no name.
	Name string
	// ClusterDomain is the suffix of cluster-local names
	// (<name>.<ns>.svc.<ClusterDomain>); DefaultClusterDomain if empty.
	ClusterDomain string
	// QueueDepth is how many requests may wait per service; one more gets
	// 503. DefaultQueueDepth if 0.
	QueueDepth int
	// CallerQueueDepth is how many of a service's waiting requests may
	// come from one caller (by the address it connects from); one more
	// gets 503, so that the others still find room. Half of QueueDepth,
	// rounded up, if 0.
	CallerQueueDepth int
	// MaxHeld is how many requests may wait across all services; one more
	// gets 503. It bounds the memory held requests take. DefaultMaxHeld if
	// 0.
	MaxHeld int
	// QueueTimeout bounds how long a request waits for a pod before a
	// 504; set it to the request timeout. DefaultQueueTimeout if 0.
	QueueTimeout time.Duration
	// ProbeInterval is the delay between probes of a pod not yet ready,
	// during ProbeFastWindow after it appeared; ProbeSlowInterval after.
	ProbeInterval, ProbeFastWindow, ProbeSlowInterval time.Duration
	// ProbeTimeout bounds one probe; DialTimeout one connection to a pod.
	ProbeTimeout, DialTimeout time.Duration
	// MaxProbes bounds the probes in flight at once for services that hold
	// no request; the others wait their turn. A probe for a service that
	// holds a request (a cold start) never waits. DefaultMaxProbes if 0.
	MaxProbes int
	// Poke, if set, is called with the service's key, in its text form
	// (service.Key.String(), made once per service), whenever a request
	// arrives for a service with no routable pod. It runs on the request
	// path and must not block (a non-blocking channel send); the caller
	// coalesces repeated pokes.
	Poke func(key string)
	// Callers, if set, tells who a caller is by its address, and whether
	// a service's NetworkPolicies admit it; the activator then serves a
	// request only for a caller its service admits: one its
	// NetworkPolicies would let reach its pods directly, or one its
	// Service.Callers admits (callers.go). Nil admits everyone: without
	// Kubernetes (SERVICES_FILE, swell local) there are no namespaces.
	Callers CallerDirectory
	// CallersHint ends the body of a refused caller's 403: how to admit
	// more callers.
	CallersHint string
	// CallerWait bounds how long a refused request from an address that
	// is no known pod's waits for the Callers directory to learn of one (a pod
	// that just started) before it is refused. DefaultCallerWait if 0.
	CallerWait time.Duration
	// GoneGrace is how long a service that left the Source while it held
	// requests keeps them, and keeps reporting them, in case it comes
	// back (an informer relisting, a pods-Service recreated): it then
	// serves them as if it had never left. Past it, they are answered
	// 503 service-gone at once. DefaultGoneGrace if 0.
	GoneGrace time.Duration
	// ServePort, if set, serves every service's own port (Service.Port):
	// the activator keeps a listener open on each and hands it to
	// ServePort (an http.Server's Serve with the activator as its
	// handler), and routes a request that arrived on a service's port to
	// that service, whatever its Host. ServePort returns once the listener
	// is closed. Nil opens no port of a service's: services are routed by
	// Host.
	ServePort func(net.Listener) error
	// ListenPort opens a service's port; ListenPort (every address, both
	// families) if nil.
	ListenPort func(port int) (net.Listener, error)
	// Registerer receives the Prometheus metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Clock is the time source; the real clock if nil.
	Clock clock.WithDelayedExecution
	// Logger; a no-op logger if nil.
	Logger *zap.Logger
}

// Activator is the activator's request handler. Call Run to follow the
// Source; until then it knows no service and answers 404.
type Activator struct {
	cfg         Config
	clk         clock.WithDelayedExecution
	log         *zap.Logger
	metrics     *metrics
	proxy       *httputil.ReverseProxy
	probeClient *http.Client
	// probeSlots holds a value for each probe in flight that waited its
	// turn (Config.MaxProbes).
	probeSlots chan struct{}
	handler    http.Handler // the chain (chain.go)
	limits     *waitLimits

	table atomic.Pointer[routeTable]
	// tableChanged is closed and replaced on each table publish.
	tableChanged atomic.Pointer[chan struct{}]

	// synced is closed once Run has applied the Source's services.
	synced chan struct{}

	mu sync.Mutex // serialises sync
	// refusedClaims are the claimed hosts sync last refused, "service
	// host" → the holder, so each refusal is logged once.
	refusedClaims map[string]string
	base          atomic.Pointer[context.Context]
	probers       sync.WaitGroup
	// proberMu makes starting a prober and Run's stop one or the other:
	// once stopping, no prober starts, so Run's wait sees every one.
	proberMu sync.Mutex
	stopping bool
	// peers is how many activators share each service's capacity
	// (PeerSource); 1 otherwise.
	peers atomic.Int64
	// ports serves the services' own ports; nil without
	// Config.ServePort.
	ports *servicePorts
}

// New returns an Activator, or an error naming a bad Config field.
func New(cfg Config) (*Activator, error) {
	if cfg.Source == nil {
		return nil, fmt.Errorf("activator: Config.Source is nil")
	}
	if cfg.QueueDepth == 0 {
		cfg.QueueDepth = DefaultQueueDepth
	}
	if cfg.QueueDepth < 0 || cfg.QueueDepth > breaker.MaxCapacity {
		return nil, fmt.Errorf("activator: queue depth %d out of range: want 1..%d", cfg.QueueDepth, breaker.MaxCapacity)
	}
	if cfg.CallerQueueDepth == 0 {
		cfg.CallerQueueDepth = (cfg.QueueDepth + 1) / 2
	}
	if cfg.CallerQueueDepth < 0 || cfg.CallerQueueDepth > cfg.QueueDepth {
		return nil, fmt.Errorf("activator: caller queue depth %d out of range: want 1..%d (the queue depth), or 0 for half of it", cfg.CallerQueueDepth, cfg.QueueDepth)
	}
	if cfg.MaxHeld == 0 {
		cfg.MaxHeld = DefaultMaxHeld
	}
	if cfg.MaxProbes == 0 {
		cfg.MaxProbes = DefaultMaxProbes
	}
	if cfg.MaxProbes < 0 {
		return nil, fmt.Errorf("activator: most probes at once %d is negative: want at least 1, or 0 for %d", cfg.MaxProbes, DefaultMaxProbes)
	}
	if cfg.MaxHeld < 0 {
		return nil, fmt.Errorf("activator: most held requests %d is negative: want at least 1, or 0 for %d", cfg.MaxHeld, DefaultMaxHeld)
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
		n   string
	}{
		{&cfg.QueueTimeout, DefaultQueueTimeout, "queue timeout"},
		{&cfg.ProbeInterval, DefaultProbeInterval, "probe interval"},
		{&cfg.ProbeFastWindow, DefaultProbeFastWindow, "probe fast window"},
		{&cfg.ProbeSlowInterval, DefaultProbeSlowInterval, "probe slow interval"},
		{&cfg.ProbeTimeout, DefaultProbeTimeout, "probe timeout"},
		{&cfg.DialTimeout, DefaultDialTimeout, "dial timeout"},
		{&cfg.CallerWait, DefaultCallerWait, "caller wait"},
		{&cfg.GoneGrace, DefaultGoneGrace, "gone grace"},
	} {
		if *d.v == 0 {
			*d.v = d.def
		}
		if *d.v < 0 {
			return nil, fmt.Errorf("activator: %s %v is negative: want a positive duration or 0 for the default", d.n, *d.v)
		}
	}
	if cfg.ClusterDomain == "" {
		cfg.ClusterDomain = DefaultClusterDomain
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	a := &Activator{
		cfg:         cfg,
		clk:         cfg.Clock,
		log:         cfg.Logger,
		metrics:     m,
		proxy:       newProxy(cfg.Logger, cfg.DialTimeout, cfg.Name),
		probeClient: newProbeClient(),
		probeSlots:  make(chan struct{}, cfg.MaxProbes),
		limits:      newWaitLimits(cfg.MaxHeld, cfg.CallerQueueDepth),
		synced:      make(chan struct{}),
	}
	if cfg.ServePort != nil {
		listen := cfg.ListenPort
		if listen == nil {
			listen = ListenPort
		}
		a.ports = &servicePorts{serve: cfg.ServePort, listen: listen, log: cfg.Logger,
			open: map[int]net.Listener{}, failed: map[int]string{}}
	}
	a.table.Store(newRouteTable())
	a.peers.Store(1)
	ch := make(chan struct{})
	a.tableChanged.Store(&ch)
	a.handler = a.buildHandler()
	return a, nil
}

// ServeHTTP routes r to its service and serves it, or answers 404.
func (a *Activator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.handler.ServeHTTP(w, r)
}

// Run follows the Source until ctx ends, then stops all probing and
// returns once the probers have.
func (a *Activator) Run(ctx context.Context) error {
	a.base.Store(&ctx)
	a.sync(a.cfg.Source.Services())
	close(a.synced)
	for {
		select {
		case <-ctx.Done():
			a.proberMu.Lock()
			a.stopping = true
			a.proberMu.Unlock()
			a.probers.Wait()
			return nil
		case <-a.cfg.Source.Changed():
			a.sync(a.cfg.Source.Services())
		}
	}
}

// Synced is closed once Run has applied the Source's services for the
// first time: from then on every service it listed is routed, rather than
// answered 404. An embedder that owns the Source waits for it before taking
// traffic.
func (a *Activator) Synced() <-chan struct{} { return a.synced }

// startProber runs probe on a goroutine of its own, which Run waits for,
// unless Run is stopping; it reports whether it started.
func (a *Activator) startProber(probe func()) bool {
	a.proberMu.Lock()
	defer a.proberMu.Unlock()
	if a.stopping {
		return false
	}
	a.probers.Go(probe)
	return true
}

// baseContext is the context probers run under.
func (a *Activator) baseContext() context.Context {
	if p := a.base.Load(); p != nil {
		return *p
	}
	return context.Background()
}

// claim is a service's claim on its ClaimedHosts.
type claim struct {
	t  *target
	sv Service
}

// applyClaims routes the claimed hosts, the earliest claim first (then by
// key), each only where no service's own name or an earlier claim has it.
// A refused claim is logged once, when it first is.
func (a *Activator) applyClaims(next *routeTable, claims []claim) {
	slices.SortFunc(claims, func(x, y claim) int {
		return cmp.Or(x.sv.ClaimedAt.Compare(y.sv.ClaimedAt), x.sv.Key.Compare(y.sv.Key))
	})
	refused := map[string]string{}
	for _, c := range claims {
		for _, h := range c.sv.ClaimedHosts {
			h = normalizeHost(h)
			switch other := next.byHost[h]; {
			case other == c.t:
			case other != nil:
				refused[c.t.name+" "+h] = other.name
			case clusterLocalForm(h):
				refused[c.t.name+" "+h] = "(cluster-local names are not claimed)"
			default:
				next.byHost[h] = c.t
			}
		}
	}
	for k, holder := range refused {
		if a.refusedClaims[k] != holder {
			svc, host, _ := strings.Cut(k, " ")
			a.log.Warn("host claimed by a service is another's; not routed to it",
				zap.String("host", host), zap.String("service", svc), zap.String("holder", holder))
		}
	}
	a.refusedClaims = refused
}

// sync applies the Source's current services: it updates the services it
// has, creates new ones, closes vanished ones and publishes a new routing
// table.
func (a *Activator) sync(services []Service) {
	a.mu.Lock()
	defer a.mu.Unlock()
	old := a.table.Load()
	peersChanged := false
	if ps, ok := a.cfg.Source.(PeerSource); ok {
		n := int64(max(ps.Peers(), 1))
		peersChanged = a.peers.Swap(n) != n
	}
	next := newRouteTable()
	var claims []claim
	ports := map[int]*target{}
	for _, sv := range services {
		// A key made by service.Parse or service.New is valid; one a Source
		// built by hand may not be, and would route and report nonsense.
		if _, err := service.New(sv.Key.Namespace, sv.Key.Name); err != nil {
			a.log.Error("ignoring service", zap.Error(err))
			continue
		}
		if next.byKey[sv.Key] != nil {
			a.log.Error("ignoring duplicate service", zap.Stringer("service", sv.Key))
			continue
		}
		t := old.byKey[sv.Key]
		if t == nil {
			t = old.gone[sv.Key] // back within its grace: its held requests go on
		}
		if t == nil {
			t = a.newTarget(sv.Key)
		}
		t.update(sv, peersChanged)
		next.byKey[sv.Key] = t
		names := append(clusterLocalNames(sv.Key, a.cfg.ClusterDomain), sv.Hosts...)
		for _, h := range names {
			h = normalizeHost(h)
			if other := next.byHost[h]; other != nil && other != t {
				a.log.Error("host claimed by two services; keeping the first",
					zap.String("host", h), zap.String("service", t.name), zap.String("first", other.name))
				continue
			}
			next.byHost[h] = t
		}
		if len(sv.ClaimedHosts) > 0 {
			claims = append(claims, claim{t, sv})
		}
		switch other := ports[sv.Port]; {
		case sv.Port == 0:
		case sv.Port < 0 || sv.Port > 65535:
			a.log.Error("a service's port is no port; the service is routed by Host only",
				zap.String("service", t.name), zap.Int("port", sv.Port))
		case other != nil:
			a.log.Error("a port given to two services; keeping the first",
				zap.Int("port", sv.Port), zap.String("service", t.name), zap.String("first", other.name))
		default:
			ports[sv.Port] = t
		}
	}
	a.applyClaims(next, claims)
	if a.ports != nil {
		want := make(map[int]bool, len(ports))
		for p := range ports {
			want[p] = true
		}
		for p := range a.ports.set(want) {
			next.byPort[p] = ports[p]
		}
	}
	now := a.clk.Now()
	for key, t := range old.byKey {
		if next.byKey[key] != nil {
			continue
		}
		if t.held() == 0 {
			t.close()
			continue
		}
		// It holds requests: they wait for it to come back, and are
		// reported meanwhile, until its grace ends (expireGone).
		t.goneSince = now
		next.gone[key] = t
		// On its own goroutine: a fake clock runs the function while it
		// holds its lock, and expireGone reads the time.
		a.clk.AfterFunc(a.cfg.GoneGrace, func() { go a.expireGone() })
	}
	for key, t := range old.gone {
		switch {
		case next.byKey[key] != nil:
			t.goneSince = time.Time{}
		case now.Sub(t.goneSince) >= a.cfg.GoneGrace || t.held() == 0:
			t.close()
		default:
			next.gone[key] = t
		}
	}
	a.table.Store(next)
	ch := make(chan struct{})
	close(*a.tableChanged.Swap(&ch))
}

// expireGone closes the services whose grace has ended.
func (a *Activator) expireGone() {
	a.mu.Lock()
	defer a.mu.Unlock()
	old := a.table.Load()
	now := a.clk.Now()
	var expired []*target
	for _, t := range old.gone {
		if now.Sub(t.goneSince) >= a.cfg.GoneGrace {
			expired = append(expired, t)
		}
	}
	if len(expired) == 0 {
		return
	}
	next := &routeTable{byHost: old.byHost, byKey: old.byKey, byPort: old.byPort, gone: maps.Clone(old.gone)}
	for _, t := range expired {
		delete(next.gone, t.key)
		t.close()
	}
	a.table.Store(next)
}

// Report gives the autoscaler's reporter (activator/reporter's Source) each
// service's figures for the period ending at now, and starts the next
// period. Requests are counted from their arrival (time queued counts) with
// proxied=false (accounting.go). Idle services are left out: the reporter
// itself sends one zero entry for a service whose load ended. The key is in
// its text form, the wire's, made once per service so that a report
// allocates nothing.
func (a *Activator) Report(now time.Time, emit func(key string, f stats.ActivatorFigures)) {
	a.ReportPart(now, nil, emit)
}

// ReportPart is Report for the services keep accepts (every one when keep
// is nil); the others' periods go on (activator/reporter's PartSource).
// Each autoscaler replica that leads a bucket of services gets its own.
func (a *Activator) ReportPart(now time.Time, keep func(key string) bool, emit func(key string, f stats.ActivatorFigures)) {
	tab := a.table.Load()
	for _, m := range []map[service.Key]*target{tab.byKey, tab.gone} {
		for _, t := range m {
			if keep != nil && !keep(t.name) {
				continue
			}
			rep := t.tracker.Report(now)
			in := t.tracker.InFlight()
			if rep.Requests == 0 && rep.Concurrency == 0 && in <= 0 {
				continue
			}
			emit(t.name, stats.ActivatorFigures{Concurrency: rep.Concurrency, Requests: rep.Requests, InFlight: uint64(max(in, 0))})
		}
	}
}

// Queued returns how many of the service's requests wait for a pod now, and
// whether the activator knows the service.
func (a *Activator) Queued(key service.Key) (int, bool) {
	t := a.table.Load().byKey[key]
	if t == nil {
		return 0, false
	}
	return t.br.Waiting(), true
}

// Held returns how many requests wait for a pod now, across all services
// (bounded by Config.MaxHeld).
func (a *Activator) Held() int { return int(a.limits.held.Load()) }

// Routable returns how many pods of the service may take traffic now, and
// whether the activator knows the service.
func (a *Activator) Routable(key service.Key) (int, bool) {
	t := a.table.Load().byKey[key]
	if t == nil {
		return 0, false
	}
	return t.routableCount(), true
}
