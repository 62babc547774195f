package main

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/swell-run/swell/autoscaler/collector"
	"github.com/swell-run/swell/autoscaler/plan"
	"github.com/swell-run/swell/autoscaler/scaler"
	"github.com/swell-run/swell/pkg/service"
)

// backend is the autoscaler's scaler.Backend in the scale harness, in
// place of the Kubernetes one (kube/controller): it keeps each service's
// scale and route, answers Status from them, makes pods ready as a
// Deployment and its EndpointSlices would (at once, up to the fleet's
// pods, and tells the loop with SetPods and Resync as the controller
// does), and records every write with its time.
type backend struct {
	clock    clock.PassiveClock
	services map[service.Key]*record // fixed once built
	// loop is told of ready pods; set before the loop runs.
	loop podsListener

	writes  [numOps]atomic.Uint64
	seconds perSecond
}

// podsListener is what follows the ready pods: the autoscaler's loop.
// ClosePushes closes the push connections of a service's pods, as their
// deletion does on Kubernetes.
type podsListener interface {
	SetPods(key service.Key, addrs []string)
	Resync(key service.Key)
	ClosePushes(moved func(service.Key) bool)
}

// op is a kind of write.
type op uint8

const (
	opScale op = iota
	opRoute
	opPreferRemoval
	numOps
)

var opNames = [numOps]string{"scale", "route", "prefer-removal"}

// recentWrites is how many of a service's latest scale writes are kept
// for the question "when was it first scaled after t".
const recentWrites = 16

// record is one service: its state as a Deployment and its Service hold
// it, the fleet's pods, and its latest scale writes.
type record struct {
	mu   sync.Mutex
	pods []string // the fleet's, in order; the first Ready are ready
	st   plan.Status
	// scaled is a ring of the latest scale writes' times; next is where
	// the next goes, n how many it holds.
	scaled [recentWrites]time.Time
	next   int
	n      int
}

var (
	_ scaler.Backend        = (*backend)(nil)
	_ scaler.Trimmer        = (*backend)(nil)
	_ collector.PodResolver = (*backend)(nil)
)

func newBackend(clk clock.PassiveClock) *backend {
	return &backend{clock: clk, services: make(map[service.Key]*record)}
}

// add makes a service with the fleet's pods and its state at start.
func (b *backend) add(key service.Key, pods []string, st plan.Status) {
	st.Ready = min(st.Desired, len(pods))
	b.services[key] = &record{pods: pods, st: st}
}

// ready returns the service's ready pods now.
func (b *backend) ready(key service.Key) []string {
	r := b.services[key]
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pods[:r.st.Ready]
}

func (b *backend) lookup(key service.Key) (*record, error) {
	r := b.services[key]
	if r == nil {
		return nil, fmt.Errorf("service %s: %w", key, scaler.ErrNotFound)
	}
	return r, nil
}

// Status implements scaler.Backend.
func (b *backend) Status(_ context.Context, key service.Key) (plan.Status, error) {
	r, err := b.lookup(key)
	if err != nil {
		return plan.Status{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.st, nil
}

// SetScale implements scaler.Backend: the service's pods become ready at
// once, up to the fleet's, and the loop hears of it as from the
// EndpointSlices' informer.
func (b *backend) SetScale(_ context.Context, key service.Key, n int) error {
	r, err := b.lookup(key)
	if err != nil {
		return err
	}
	now := b.clock.Now()
	r.mu.Lock()
	r.st.Desired = n
	ready := min(n, len(r.pods))
	changed := ready != r.st.Ready
	r.st.Ready = ready
	r.scaled[r.next] = now
	r.next = (r.next + 1) % recentWrites
	r.n = min(r.n+1, recentWrites)
	pods := r.pods[:ready]
	r.mu.Unlock()
	b.count(opScale, now)
	if changed && b.loop != nil {
		b.loop.SetPods(key, pods)
		b.loop.Resync(key)
		if ready == 0 {
			// Its pods are gone, and with them their pushes. (Pods a
			// scale down short of zero removes push on: their frames are
			// kept for no round, and the fleet's pods never stop.)
			b.loop.ClosePushes(func(k service.Key) bool { return k == key })
		}
	}
	return nil
}

// PodAddr implements collector.PodResolver as Kubernetes' does, by the
// pod's address: a push connection is the pod it claims to be if that is
// a ready pod of the service, and from loopback, where every pod of the
// fleet is. (The fleet's pods connect from their own addresses; as in
// swell local, the claimed address names the pod.)
func (b *backend) PodAddr(svc service.Key, remote netip.AddrPort, claimed string) (string, bool) {
	if !remote.Addr().IsLoopback() || !slices.Contains(b.ready(svc), claimed) {
		return "", false
	}
	return claimed, true
}

// SetRoute implements scaler.Backend: the switch takes effect at once.
func (b *backend) SetRoute(_ context.Context, key service.Key, route plan.Route) error {
	r, err := b.lookup(key)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.st.Route, r.st.Requested = route, route
	r.mu.Unlock()
	b.count(opRoute, b.clock.Now())
	return nil
}

// PreferRemoval implements scaler.Trimmer: on Kubernetes a write of the
// pods' deletion cost; here only counted.
func (b *backend) PreferRemoval(_ context.Context, key service.Key, _ []string) error {
	if _, err := b.lookup(key); err != nil {
		return err
	}
	b.count(opPreferRemoval, b.clock.Now())
	return nil
}

func (b *backend) count(o op, now time.Time) {
	b.writes[o].Add(1)
	b.seconds.add(now, o)
}

// firstScaleAfter is the time of the service's first scale write after
// t, among its latest recentWrites.
func (b *backend) firstScaleAfter(key service.Key, t time.Time) (time.Time, bool) {
	r, err := b.lookup(key)
	if err != nil {
		return time.Time{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.n {
		w := r.scaled[(r.next-r.n+i+recentWrites)%recentWrites]
		if w.After(t) {
			return w, true
		}
	}
	return time.Time{}, false
}

// totals are the backend's figures for whoever measures.
type totals struct {
	Services  int               `json:"services"`
	ReadyPods int               `json:"readyPods"`
	Writes    map[string]uint64 `json:"writes"`
	// PerSecond are the writes of each second since the question's
	// "since", oldest first, as far back as perSecondKept.
	PerSecond []second `json:"perSecond,omitempty"`
}

func (b *backend) totals(since time.Time) totals {
	t := totals{Services: len(b.services), Writes: make(map[string]uint64, numOps)}
	for _, r := range b.services {
		r.mu.Lock()
		t.ReadyPods += r.st.Ready
		r.mu.Unlock()
	}
	for o := range numOps {
		t.Writes[opNames[o]] = b.writes[o].Load()
	}
	if !since.IsZero() {
		t.PerSecond = b.seconds.since(since, b.clock.Now())
	}
	return t
}

// perSecondKept is how many seconds of write counts are kept.
const perSecondKept = 600

// perSecond counts writes by the second they were made in, for the last
// perSecondKept seconds.
type perSecond struct {
	mu   sync.Mutex
	ring [perSecondKept]second
}

// second is one second's writes by kind.
type second struct {
	Unix   int64             `json:"unix"`
	Writes [numOps]uint32    `json:"-"`
	ByOp   map[string]uint32 `json:"writes,omitempty"`
}

func (p *perSecond) add(now time.Time, o op) {
	sec := now.Unix()
	p.mu.Lock()
	s := &p.ring[sec%perSecondKept]
	if s.Unix != sec {
		*s = second{Unix: sec}
	}
	s.Writes[o]++
	p.mu.Unlock()
}

// since returns every second from since to now, those without a write
// included, oldest first.
func (p *perSecond) since(since, now time.Time) []second {
	from, to := since.Unix(), now.Unix()
	from = max(from, to-perSecondKept+1)
	out := make([]second, 0, max(to-from+1, 0))
	p.mu.Lock()
	defer p.mu.Unlock()
	for sec := from; sec <= to; sec++ {
		s := second{Unix: sec, ByOp: make(map[string]uint32, numOps)}
		if r := p.ring[sec%perSecondKept]; r.Unix == sec {
			s.Writes = r.Writes
		}
		for o := range numOps {
			s.ByOp[opNames[o]] = s.Writes[o]
		}
		out = append(out, s)
	}
	return out
}
