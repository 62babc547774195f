package local

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/swell-run/swell/activator"
	"github.com/swell-run/swell/autoscaler/plan"
	"github.com/swell-run/swell/autoscaler/scaler"
	"github.com/swell-run/swell/local/config"
	"github.com/swell-run/swell/local/replica"
	"github.com/swell-run/swell/pkg/service"
)

// Namespace is the namespace of every local service's key: "local/hello".
const Namespace = "local"

// backend is the "Deployment" of every local service: it runs as many
// replicas as the autoscaler asks for, tells the activator and the
// autoscaler about them, and routes each service's traffic. It implements
// scaler.Backend and activator.Source.
type backend struct {
	log *zap.Logger
	// start starts one replica of a service; it is the only place that
	// knows how (replica.Start in production).
	start func(s *localService, index int) (*replica.Replica, error)
	// changed is called after any replica of the service changed: started,
	// stopped, became ready or not.
	changed func(s *localService)

	services map[service.Key]*localService
	order    []*localService // by name

	srcChanged chan struct{}
	// stopping counts replicas being stopped, so shutdown can wait for them.
	stopping sync.WaitGroup
	// ctx bounds stops made while running; cancelled, they kill at once.
	ctx context.Context
	// clock times the replicas' lifetimes.
	clock clock.PassiveClock
}

// localService is one service: its configuration, its replicas and its
// route.
type localService struct {
	key  service.Key
	name string
	cfg  config.Service

	mu      sync.Mutex
	desired int
	// replicas are the live replicas, oldest first; stopped ones have
	// left the slice before their Stop begins, so no new request is sent
	// to them.
	replicas []*replica.Replica
	route    plan.Route
	next     int // index of the next replica started
	closed   bool
	// first are the metrics addresses of the replicas to stop first at
	// the next scale-down (PreferRemoval), the least busy first.
	first []string

	// crashes are the crashes and restarts of each replica already
	// reported as events.
	crashes map[string]crashSeen

	// view is what the front door reads on every request, without a lock.
	view atomic.Pointer[routeView]

	// born is when each replica started that has not exited yet, stopping
	// ones included; ended sums the lifetimes of those that have: the
	// service's replica-seconds, as a Deployment's pod-seconds.
	born  map[*replica.Replica]time.Time
	ended time.Duration
}

type crashSeen struct{ crashed, restarts int }

// routeView is a service's route and ready replicas at one moment.
type routeView struct {
	route plan.Route
	ready []string // serving addresses
}

// refreshView publishes the service's route and ready replicas.
func (s *localService) refreshView() {
	s.mu.Lock()
	v := &routeView{route: s.route}
	for _, r := range s.replicas {
		if r.Ready() {
			v.ready = append(v.ready, r.ServingAddr())
		}
	}
	s.mu.Unlock()
	s.view.Store(v)
}

func newBackend(ctx context.Context, log *zap.Logger, svcs []config.Service) *backend {
	b := &backend{
		log:        log,
		services:   make(map[service.Key]*localService, len(svcs)),
		srcChanged: make(chan struct{}, 1),
		ctx:        ctx,
		clock:      clock.RealClock{},
	}
	for _, c := range svcs {
		s := &localService{
			key:  service.Key{Namespace: Namespace, Name: c.Name},
			name: c.Name,
			cfg:  c,
			// Every service starts behind the activator: it holds the
			// first requests while the first replica starts.
			route:   plan.RouteActivator,
			next:    1,
			crashes: make(map[string]crashSeen),
			born:    make(map[*replica.Replica]time.Time),
		}
		s.refreshView()
		b.services[s.key] = s
		b.order = append(b.order, s)
	}
	slices.SortFunc(b.order, func(x, y *localService) int {
		if x.name < y.name {
			return -1
		}
		if x.name > y.name {
			return 1
		}
		return 0
	})
	return b
}

func (b *backend) lookup(key service.Key) (*localService, error) {
	s := b.services[key]
	if s == nil {
		return nil, fmt.Errorf("local service %s: %w", key, scaler.ErrNotFound)
	}
	return s, nil
}

// Status implements scaler.Backend. The route switches at once: the front
// door reads it on every request.
func (b *backend) Status(_ context.Context, key service.Key) (plan.Status, error) {
	s, err := b.lookup(key)
	if err != nil {
		return plan.Status{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return plan.Status{Desired: s.desired, Ready: s.readyLocked(), Route: s.route, Requested: s.route}, nil
}

// SetScale implements scaler.Backend: it starts or stops replicas until
// the service runs n.
func (b *backend) SetScale(_ context.Context, key service.Key, n int) error {
	s, err := b.lookup(key)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.desired = n
	s.mu.Unlock()
	return b.reconcile(s)
}

// SetRoute implements scaler.Backend.
func (b *backend) SetRoute(_ context.Context, key service.Key, r plan.Route) error {
	s, err := b.lookup(key)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.route = r
	s.mu.Unlock()
	s.refreshView()
	return nil
}

var _ scaler.Trimmer = (*backend)(nil)

// PreferRemoval implements scaler.Trimmer: the replicas at those metrics
// addresses are the first ready ones stopped at the next scale-down, as a
// ReplicaSet removes the pods of lowest deletion cost first.
func (b *backend) PreferRemoval(_ context.Context, key service.Key, addrs []string) error {
	s, err := b.lookup(key)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.first = slices.Clone(addrs)
	s.mu.Unlock()
	return nil
}

// reconcile starts or stops replicas so that the service runs as many as
// desired. Stopping prefers replicas not ready yet, then those
// PreferRemoval named (the least busy), then the newest: the oldest ready
// ones have warm connections and caches.
func (b *backend) reconcile(s *localService) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	var victims []*replica.Replica
	for len(s.replicas) > s.desired {
		i := victim(s.replicas, s.first)
		victims = append(victims, s.replicas[i])
		s.replicas = slices.Delete(s.replicas, i, i+1)
	}
	if len(victims) > 0 {
		s.first = nil // a choice holds for one scale-down
	}
	var startErr error
	for len(s.replicas) < s.desired {
		idx := s.next
		s.next++
		r, err := b.start(s, idx)
		if err != nil {
			startErr = fmt.Errorf("start replica %d of %s: %w", idx, s.name, err)
			break
		}
		s.replicas = append(s.replicas, r)
		s.born[r] = b.clock.Now()
	}
	s.mu.Unlock()

	// The activator and the front door forget the victims before their
	// queue-proxies start draining.
	b.changed(s)
	b.stop(b.ctx, s, victims)
	return startErr
}

// stoppable is what victim reads of a replica.
type stoppable interface {
	Ready() bool
	MetricsAddr() string
}

// victim is the index in replicas (oldest first) of the one to stop
// next: the newest not ready yet, else the first of first still running,
// else the newest.
func victim[R stoppable](replicas []R, first []string) int {
	for j := len(replicas) - 1; j >= 0; j-- {
		if !replicas[j].Ready() {
			return j
		}
	}
	for _, addr := range first {
		if j := slices.IndexFunc(replicas, func(r R) bool { return r.MetricsAddr() == addr }); j >= 0 {
			return j
		}
	}
	return len(replicas) - 1
}

// stop stops replicas of s in the background, gracefully unless ctx ends.
func (b *backend) stop(ctx context.Context, s *localService, victims []*replica.Replica) {
	for _, r := range victims {
		b.stopping.Add(1)
		go func() {
			defer b.stopping.Done()
			b.log.Debug("stopping replica", zap.String("replica", r.Name()))
			r.Stop(ctx)
			s.exited(r, b.clock.Now())
		}()
	}
}

// exited adds the lifetime of r, which has stopped, to the service's.
func (s *localService) exited(r *replica.Replica, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.born[r]; ok {
		s.ended += now.Sub(t)
		delete(s.born, r)
	}
}

// replicaSeconds is the summed lifetime, until now, of every replica the
// service has run: from its start to its exit, starting and draining
// included, as a pod's cost runs from its creation to its deletion.
func (s *localService) replicaSeconds(now time.Time) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	total := s.ended
	for _, t := range s.born {
		total += now.Sub(t)
	}
	return total.Seconds()
}

// collectors are the backend's metrics: each service's replica-seconds.
func (b *backend) collectors() []prometheus.Collector {
	cs := make([]prometheus.Collector, 0, len(b.order))
	for _, s := range b.order {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "swell_local_replica_seconds_total",
			Help:        "Summed lifetime of the service's replicas, from start to exit (starting and draining included): the pod-seconds it has cost.",
			ConstLabels: prometheus.Labels{"service": s.name},
		}, func() float64 { return s.replicaSeconds(b.clock.Now()) }))
	}
	return cs
}

// close ends the service: no replica starts after it. It returns the live
// replicas, which the caller stops.
func (s *localService) close() []*replica.Replica {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed, s.desired = true, 0
	victims := s.replicas
	s.replicas = nil
	return victims
}

// shutdown stops every replica of every service gracefully (or at once,
// when ctx ends) and returns when all are gone. No replica starts after it.
func (b *backend) shutdown(ctx context.Context) {
	for _, s := range b.order {
		victims := s.close()
		b.changed(s)
		b.stop(ctx, s, victims)
	}
	b.stopping.Wait()
}

// kill kills every live replica at once and waits for those being
// stopped, which die at once when their stop's context has ended.
func (b *backend) kill() {
	for _, s := range b.order {
		for _, r := range s.close() {
			r.Kill()
		}
	}
	b.stopping.Wait()
}

func (s *localService) readyLocked() int {
	n := 0
	for _, r := range s.replicas {
		if r.Ready() {
			n++
		}
	}
	return n
}

// snapshot returns the live replicas.
func (s *localService) snapshot() []*replica.Replica {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.replicas)
}

// Services implements activator.Source: every service with its live
// replicas (the activator probes each before sending it traffic).
func (b *backend) Services() []activator.Service {
	out := make([]activator.Service, 0, len(b.order))
	for _, s := range b.order {
		as := activator.Service{Key: s.key, ContainerConcurrency: s.cfg.ContainerConcurrency}
		for _, r := range s.snapshot() {
			as.Pods = append(as.Pods, activator.Pod{Name: r.Name(), Addr: r.ServingAddr()})
		}
		out = append(out, as)
	}
	return out
}

// Changed implements activator.Source.
func (b *backend) Changed() <-chan struct{} { return b.srcChanged }

func (b *backend) notifySource() {
	select {
	case b.srcChanged <- struct{}{}:
	default:
	}
}
