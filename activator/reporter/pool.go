package reporter

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gorilla/websocket"
	"go.uber.org/zap"

	"github.com/swell-run/swell/pkg/service"
	"github.com/swell-run/swell/pkg/shard"
)

// Leaders says which autoscaler replica leads each bucket of services
// (package shard): element b is the address, host:port, of bucket b's
// leader, "" while it has none. Its length is the number of buckets; one
// element, the default, sends every service to one autoscaler.
type Leaders []string

// PoolConfig configures a Pool: Config as for one Reporter (its URL is
// dialled at each leader's address, its Dialer is not used), and how to
// reach an address.
type PoolConfig struct {
	Config
	// DialerFor returns the dialer that reaches the autoscaler replica at
	// addr when the Config's URL is dialled; required.
	DialerFor func(addr string) *websocket.Dialer
}

// Pool is the activator's reporting when the autoscaler is sharded: one
// Reporter per replica that leads a bucket, each reporting the services of
// the buckets its replica leads and taking their pokes. SetLeaders follows
// the Leases: a bucket that moves to a replica already connected is
// reported there from the next period; a replica that leads nothing more
// is disconnected. Pokes for a bucket with no leader wait (up to
// MaxPendingPokes services) for one.
type Pool struct {
	cfg     PoolConfig
	metrics *metrics
	log     *zap.Logger

	leaders atomic.Pointer[Leaders]
	wake    chan struct{}

	mu      sync.Mutex
	links   map[string]*link // by leader address; owned by Run, read by Poke
	waiting map[string]struct{}
	running bool
}

// link is one replica's reporter and how to stop it.
type link struct {
	r      *Reporter
	cancel context.CancelFunc
	done   chan struct{}
}

// NewPool checks cfg as New would and returns a Pool with no leaders yet.
func NewPool(cfg PoolConfig) (*Pool, error) {
	if cfg.DialerFor == nil {
		return nil, errors.New("activator reporter pool: PoolConfig.DialerFor is required")
	}
	if _, ok := cfg.Source.(PartSource); !ok {
		return nil, errors.New("activator reporter pool: PoolConfig.Source must be a PartSource")
	}
	// The settings are checked once, here, rather than at the first leader.
	probe := cfg.Config
	probe.Registerer = nil
	if _, err := New(probe); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	p := &Pool{
		cfg: cfg, metrics: m, log: cfg.Logger,
		wake: make(chan struct{}, 1), links: make(map[string]*link), waiting: make(map[string]struct{}),
	}
	if p.log == nil {
		p.log = zap.NewNop()
	}
	p.leaders.Store(&Leaders{""})
	return p, nil
}

// SetLeaders records each bucket's leader; Run connects and disconnects to
// match. It never blocks. An empty Leaders is one bucket with no leader.
func (p *Pool) SetLeaders(l Leaders) {
	if len(l) == 0 {
		l = Leaders{""}
	}
	l = slices.Clone(l)
	if old := p.leaders.Load(); slices.Equal(*old, l) {
		return
	}
	p.leaders.Store(&l)
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// leaderOf is the address of the leader of key's bucket, "" when none.
func (p *Pool) leaderOf(key string) string {
	l := *p.leaders.Load()
	return l[shard.Of(key, len(l))]
}

// Poke sends a poke for the service key to the replica leading its bucket
// (Reporter.Poke); with no leader it waits for one.
func (p *Pool) Poke(key string) {
	if err := service.Check(key); err != nil {
		p.metrics.invalid.Inc()
		p.log.Error("activator reporter: not poking an invalid service key", zap.Error(err))
		return
	}
	addr := p.leaderOf(key)
	p.mu.Lock()
	l := p.links[addr]
	if addr == "" || l == nil {
		if _, dup := p.waiting[key]; !dup && len(p.waiting) >= cmpOr(p.cfg.MaxPendingPokes, DefaultMaxPendingPokes) {
			p.mu.Unlock()
			p.metrics.pokesDropped.Inc()
			return
		}
		p.waiting[key] = struct{}{}
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	l.r.Poke(key)
}

// Run keeps one reporter per leader until ctx ends, then stops them all and
// returns ctx's error. Call it once.
func (p *Pool) Run(ctx context.Context) error {
	p.mu.Lock()
	if p.running {
		p.mu.Unlock()
		return errors.New("activator reporter pool: Run called twice")
	}
	p.running = true
	p.mu.Unlock()
	defer p.stopAll()
	for {
		p.reconcile(ctx)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-p.wake:
		}
	}
}

// reconcile starts a reporter for each leader without one, stops those of
// addresses that lead nothing, and hands waiting pokes to their leaders.
func (p *Pool) reconcile(ctx context.Context) {
	want := map[string]bool{}
	for _, a := range *p.leaders.Load() {
		if a != "" {
			want[a] = true
		}
	}
	var stop []*link
	p.mu.Lock()
	for addr, l := range p.links {
		if !want[addr] {
			stop = append(stop, l)
			delete(p.links, addr)
			p.log.Info("autoscaler replica leads no bucket any more: disconnecting", zap.String("addr", addr))
		}
	}
	for addr := range want {
		if p.links[addr] != nil {
			continue
		}
		l, err := p.start(ctx, addr)
		if err != nil { // New accepted the same settings in NewPool
			p.log.Error("cannot report to an autoscaler replica", zap.String("addr", addr), zap.Error(err))
			continue
		}
		p.links[addr] = l
	}
	var pokes []string
	for key := range p.waiting {
		if p.links[p.leaderOf(key)] != nil {
			pokes = append(pokes, key)
			delete(p.waiting, key)
		}
	}
	p.mu.Unlock()
	for _, l := range stop {
		l.cancel()
		<-l.done
	}
	for _, key := range pokes {
		p.Poke(key)
	}
}

func (p *Pool) start(ctx context.Context, addr string) (*link, error) {
	cfg := p.cfg.Config
	cfg.Dialer = p.cfg.DialerFor(addr)
	cfg.Keep = func(key string) bool { return p.leaderOf(key) == addr }
	if cfg.Logger != nil {
		cfg.Logger = cfg.Logger.With(zap.String("autoscaler", addr))
	}
	r, err := newShared(cfg, p.metrics)
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithCancel(ctx)
	l := &link{r: r, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		r.Run(lctx)
	}()
	return l, nil
}

func (p *Pool) stopAll() {
	p.mu.Lock()
	links := p.links
	p.links = map[string]*link{}
	p.mu.Unlock()
	for _, l := range links {
		l.cancel()
	}
	for _, l := range links {
		<-l.done
	}
}
