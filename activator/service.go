package activator

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/swell-run/swell/pkg/breaker"
	"github.com/swell-run/swell/pkg/stats"
)

// service is the activator's state for one service: its throttler (a
// breaker whose capacity follows the routable pods), its pods, its tracker
// and its metrics. It serves the requests routed to it (handler.go).
type service struct {
	a       *Activator
	key     string
	br      *breaker.Breaker
	tracker *stats.Tracker
	m       serviceMetrics

	cc atomic.Int64
	// routable is the pods that passed a probe, sorted by name; replaced,
	// never modified. Read on every request without a lock.
	routable atomic.Pointer[[]*pod]
	rr       atomic.Uint64
	// changed is closed and replaced whenever routable changes, so requests
	// that found no pod can wait for one.
	changed atomic.Pointer[chan struct{}]

	mu     sync.Mutex
	pods   map[string]*pod // every pod the source lists, by name
	closed bool
}

func (a *Activator) newService(key string) *service {
	// Capacity 0 admits nobody until a pod is routable; the queue depth was
	// validated by New, so the error cannot happen.
	br, _ := breaker.New(breaker.Params{Capacity: 0, QueueDepth: a.cfg.QueueDepth})
	s := &service{
		a:       a,
		key:     key,
		br:      br,
		tracker: stats.NewTracker(a.clk.Now()),
		m:       a.metrics.forService(key),
		pods:    map[string]*pod{},
	}
	s.routable.Store(new([]*pod))
	ch := make(chan struct{})
	s.changed.Store(&ch)
	return s
}

// routableCount returns how many pods may take traffic now.
func (s *service) routableCount() int { return len(*s.routable.Load()) }

// pick chooses a routable pod with a free slot and reserves it.
func (s *service) pick() *pod {
	pods := *s.routable.Load()
	switch cc := s.cc.Load(); {
	case cc == 0:
		return pickTwoChoices(pods)
	case cc <= 3:
		return pickFirst(pods, cc)
	default:
		return pickRoundRobin(pods, cc, &s.rr)
	}
}

// update applies the source's view of the service: its concurrency and its
// pods. New pods start being probed; vanished ones stop and leave routable.
func (s *service) update(sv Service) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	// A source lists every service on any change; one whose concurrency
	// and routable pods stay as they were is not published again, so its
	// waiting requests are not woken for nothing. New pods are not
	// routable until their probe passes (markRoutable publishes then).
	cc := int64(max(sv.ContainerConcurrency, 0))
	changed := s.cc.Swap(cc) != cc
	seen := make(map[string]bool, len(sv.Pods))
	for _, sp := range sv.Pods {
		seen[sp.Name] = true
		if p := s.pods[sp.Name]; p != nil {
			if p.addr == sp.Addr {
				continue
			}
			changed = changed || p.routable
			s.forgetLocked(p)
		}
		p := &pod{name: sp.Name, addr: sp.Addr}
		s.pods[sp.Name] = p
		s.probeLocked(p)
	}
	for name, p := range s.pods {
		if !seen[name] {
			changed = changed || p.routable
			s.forgetLocked(p)
		}
	}
	if changed {
		s.publishLocked()
	}
}

// close stops all probing and routes nothing more to the service's pods.
// Requests already queued wait out their bound.
func (s *service) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.pods {
		s.forgetLocked(p)
	}
	s.closed = true
	s.publishLocked()
	s.a.metrics.deleteService(s.key)
}

func (s *service) forgetLocked(p *pod) {
	if p.stop != nil {
		p.stop()
		p.stop = nil
	}
	p.routable = false
	delete(s.pods, p.name)
}

// probeLocked starts probing p until it answers as ready.
func (s *service) probeLocked(p *pod) {
	if p.stop != nil {
		return
	}
	ctx, cancel := context.WithCancel(s.a.baseContext())
	p.stop = cancel
	s.a.probers.Go(func() { s.a.probeUntilReady(ctx, s, p) })
}

// markRoutable makes p take traffic after its probe passed.
func (s *service) markRoutable(p *pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pods[p.name] != p || p.routable {
		return // removed meanwhile
	}
	p.routable, p.stop = true, nil
	s.publishLocked()
}

// drop takes p out of routable at once after it refused a connection, and
// probes it again: it may be restarting, or gone and about to leave the
// source.
func (s *service) drop(p *pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pods[p.name] != p || !p.routable {
		return
	}
	p.routable = false
	s.publishLocked()
	s.probeLocked(p)
}

// publishLocked recomputes routable and the breaker's capacity from pods.
// When capacity grows the new pods are published first, when it shrinks
// last, so an admitted request always finds a pod with a free slot.
func (s *service) publishLocked() {
	pods := make([]*pod, 0, len(s.pods))
	for _, p := range s.pods {
		if p.routable {
			pods = append(pods, p)
		}
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].name < pods[j].name })
	c := capacity(len(pods), int(s.cc.Load()))
	if c >= s.br.Capacity() {
		s.routable.Store(&pods)
		s.br.SetCapacity(c)
	} else {
		s.br.SetCapacity(c)
		s.routable.Store(&pods)
	}
	ch := make(chan struct{})
	close(*s.changed.Swap(&ch))
}

// capacity is the breaker capacity for n routable pods taking cc each
// (0: unbounded per pod).
func capacity(n, cc int) int {
	switch {
	case n == 0:
		return 0
	case cc == 0 || n > breaker.MaxCapacity/cc:
		return breaker.MaxCapacity
	default:
		return n * cc
	}
}
