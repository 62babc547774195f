package activator

import (
	"context"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/swell-run/swell/pkg/breaker"
	"github.com/swell-run/swell/pkg/service"
	"github.com/swell-run/swell/pkg/stats"
)

// target is the activator's state for one service: its throttler (a
// breaker whose capacity follows the routable pods), its pods, its tracker
// and its metrics. The stages of the chain (chain.go) serve the requests
// routed to it.
type target struct {
	a   *Activator
	key service.Key
	// name is key.String(), made once: the metrics' label, the pokes and
	// the reports carry it.
	name    string
	br      *breaker.Breaker
	tracker *stats.Tracker
	m       serviceMetrics

	cc atomic.Int64
	// callers is who may call the service besides those its
	// NetworkPolicies admit (callers.go); replaced, never modified.
	callers atomic.Pointer[Callers]
	// verdicts are its NetworkPolicies' verdicts on its callers, cached.
	verdicts verdicts
	// waits counts the requests waiting in br by caller (hold.go).
	waits callerWaits
	// routable is the pods that passed a probe, sorted by name; replaced,
	// never modified. Read on every request without a lock.
	routable atomic.Pointer[[]*pod]
	rr       atomic.Uint64
	// changed is closed and replaced whenever routable changes, so requests
	// that found no pod can wait for one.
	changed atomic.Pointer[chan struct{}]

	// wanted is closed when a request starts to wait for the service's
	// pods, so that its probes waiting their turn go at once; replaced by
	// wantedSignal once the service holds nothing again.
	wantedMu sync.Mutex
	wanted   chan struct{}

	mu     sync.Mutex
	pods   map[string]*pod // every pod the source lists, by name
	closed bool
	// gone ends the waits of the requests it holds once it is closed.
	gone       context.Context
	cancelGone context.CancelFunc
	// goneSince is when the service left the Source, under Activator.mu;
	// zero while it is listed.
	goneSince time.Time
}

// held is how many of the service's requests the activator holds now:
// waiting for a pod, or on their way to one.
func (t *target) held() int64 { return max(t.tracker.InFlight(), 0) }

func (a *Activator) newTarget(key service.Key) *target {
	// Capacity 0 admits nobody until a pod is routable; the queue depth was
	// validated by New, so the error cannot happen.
	br, _ := breaker.New(breaker.Config{Capacity: 0, QueueDepth: a.cfg.QueueDepth})
	name := key.String()
	t := &target{
		a:       a,
		key:     key,
		name:    name,
		br:      br,
		tracker: stats.NewTracker(a.clk.Now()),
		m:       a.metrics.forService(name),
		pods:    map[string]*pod{},
		waits:   callerWaits{n: map[netip.Addr]int{}},
		wanted:  make(chan struct{}),
	}
	t.gone, t.cancelGone = context.WithCancel(context.Background())
	t.callers.Store(&Callers{})
	t.routable.Store(new([]*pod))
	ch := make(chan struct{})
	t.changed.Store(&ch)
	return t
}

// want tells t's probers waiting their turn that a request waits.
func (t *target) want() {
	t.wantedMu.Lock()
	defer t.wantedMu.Unlock()
	select {
	case <-t.wanted:
	default:
		close(t.wanted)
	}
}

// wantedSignal returns the channel want closes. One already closed is
// replaced first: the caller checks held after it, so a request counted
// before the replacement is seen there and one counted after closes the
// new channel.
func (t *target) wantedSignal() <-chan struct{} {
	t.wantedMu.Lock()
	defer t.wantedMu.Unlock()
	select {
	case <-t.wanted:
		t.wanted = make(chan struct{})
	default:
	}
	return t.wanted
}

// routableCount returns how many pods may take traffic now.
func (t *target) routableCount() int { return len(*t.routable.Load()) }

// update applies the source's view of the service: its concurrency and its
// pods. New pods start being probed; vanished ones stop and leave routable.
func (t *target) update(sv Service, peersChanged bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	// A source lists every service on any change; one whose concurrency
	// and routable pods stay as they were is not published again, so its
	// waiting requests are not woken for nothing. New pods are not
	// routable until their probe passes (markRoutable publishes then).
	if c := t.callers.Load(); c.Any != sv.Callers.Any || !slices.Equal(c.Namespaces, sv.Callers.Namespaces) {
		t.callers.Store(&Callers{Any: sv.Callers.Any, Namespaces: slices.Clone(sv.Callers.Namespaces)})
	}
	cc := int64(max(sv.ContainerConcurrency, 0))
	changed := t.cc.Swap(cc) != cc || peersChanged
	seen := make(map[string]bool, len(sv.Pods))
	for _, sp := range sv.Pods {
		seen[sp.Name] = true
		if p := t.pods[sp.Name]; p != nil {
			if p.addr == sp.Addr {
				continue
			}
			changed = changed || p.routable
			t.forgetLocked(p)
		}
		p := &pod{name: sp.Name, addr: sp.Addr}
		t.pods[sp.Name] = p
		t.probeLocked(p)
	}
	for name, p := range t.pods {
		if !seen[name] {
			changed = changed || p.routable
			t.forgetLocked(p)
		}
	}
	if changed {
		t.publishLocked()
	}
}

// close stops all probing and routes nothing more to the service's pods.
// Requests still waiting for a pod are answered 503 service-gone at once.
func (t *target) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.pods {
		t.forgetLocked(p)
	}
	t.closed = true
	t.publishLocked()
	t.cancelGone()
	t.a.metrics.deleteService(t.name)
}

func (t *target) forgetLocked(p *pod) {
	t.stopProbingLocked(p)
	p.routable = false
	delete(t.pods, p.name)
}

// stopProbingLocked ends p's prober, if one runs, and releases its
// context, which is registered in Run's until it is cancelled.
func (t *target) stopProbingLocked(p *pod) {
	if p.stop != nil {
		p.stop()
		p.stop = nil
	}
}

// probeLocked starts probing p until it answers as ready.
func (t *target) probeLocked(p *pod) {
	if p.stop != nil {
		return
	}
	ctx, cancel := context.WithCancel(t.a.baseContext())
	if !t.a.startProber(func() { t.a.probeUntilReady(ctx, t, p) }) {
		cancel() // the activator is stopping: nothing more is probed
		return
	}
	p.stop = cancel
}

// markRoutable makes p take traffic after its probe passed.
func (t *target) markRoutable(p *pod) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pods[p.name] != p || p.routable {
		return // removed meanwhile
	}
	// The probe passed and its prober returns: its context is done with.
	// Released before the pod is published, so that whoever sees the pod
	// routable sees it released.
	t.stopProbingLocked(p)
	p.routable = true
	t.publishLocked()
}

// drop takes p out of routable at once after it refused a connection, and
// probes it again: it may be restarting, or gone and about to leave the
// source.
func (t *target) drop(p *pod) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pods[p.name] != p || !p.routable {
		return
	}
	p.routable = false
	t.publishLocked()
	t.probeLocked(p)
}

// publishLocked recomputes routable and the breaker's capacity from pods.
// When capacity grows the new pods are published first, when it shrinks
// last, so an admitted request always finds a pod with a free slot.
func (t *target) publishLocked() {
	pods := make([]*pod, 0, len(t.pods))
	for _, p := range t.pods {
		if p.routable {
			pods = append(pods, p)
		}
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].name < pods[j].name })
	c := capacity(len(pods), int(t.cc.Load()), int(t.a.peers.Load()))
	if c >= t.br.Capacity() {
		t.routable.Store(&pods)
		t.br.SetCapacity(c)
	} else {
		t.br.SetCapacity(c)
		t.routable.Store(&pods)
	}
	ch := make(chan struct{})
	close(*t.changed.Swap(&ch))
}

// capacity is one activator's breaker capacity for n routable pods taking
// cc each (0: unbounded per pod) when peers activators serve them: its
// share of n × cc, rounded up so that every activator can always send one
// request (the pods' queue-proxies queue the few extra that rounding
// lets through).
func capacity(n, cc, peers int) int {
	switch {
	case n == 0:
		return 0
	case cc == 0 || n > breaker.MaxCapacity/cc:
		return breaker.MaxCapacity
	default:
		peers = max(peers, 1)
		return (n*cc + peers - 1) / peers
	}
}
