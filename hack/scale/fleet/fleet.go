package main

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/swell-run/swell/activator/reporter"
	"github.com/swell-run/swell/hack/scale/pods"
	"github.com/swell-run/swell/pkg/service"
	"github.com/swell-run/swell/pkg/stats"
)

// fleet is every service's pattern and step and every pod's address:
// what the loops answer scrapes from and the activators report from.
// Nothing in it changes after start but its table: the steps and the
// pods' last scrapes, both atomics.
type fleet struct {
	epoch    time.Time
	patterns []Pattern
	keys     []string // "namespace/name", made once
	perSvc   int
	addrs    []netip.AddrPort // by pod; pod i belongs to service i/perSvc
	byAddr   map[netip.AddrPort]int32
	seed     uint64
	// actNames are the fake activators' names, actKeys their
	// stats.ActivatorKey: the pods split proxied load among them.
	actNames []string
	actKeys  []uint64

	// table holds the steps and each pod's latest scrape or push: a pod
	// scraped or pushing lately is ready, which is how the activators
	// know a service has pods.
	table *table
	// push says the pods push their reports (-push): a step closes their
	// periods as a pushing queue-proxy's (closedAt).
	push bool

	pokes atomic.Uint64
}

// namespace of every service the fleet serves.
const namespace = "scale"

// newFleet returns the fleet of patterns, perSvc pods each, with its
// table in memory when t is nil.
func newFleet(patterns []Pattern, perSvc int, first netip.Addr, port uint16, activators int, seed uint64, epoch time.Time, t *table) (*fleet, error) {
	if t == nil {
		t = newTable(len(patterns), len(patterns)*perSvc)
	}
	f := &fleet{
		epoch:    epoch,
		patterns: patterns,
		perSvc:   perSvc,
		seed:     seed,
		keys:     make([]string, len(patterns)),
		table:    t,
	}
	for i := range patterns {
		k, err := service.New(namespace, fmt.Sprintf("svc-%05d", i))
		if err != nil {
			return nil, err
		}
		f.keys[i] = k.String()
	}
	var err error
	if f.addrs, err = podAddrs(first, port, len(patterns)*perSvc); err != nil {
		return nil, err
	}
	f.byAddr = make(map[netip.AddrPort]int32, len(f.addrs))
	for i, a := range f.addrs {
		f.byAddr[a] = int32(i)
	}
	for i := range activators {
		name := fmt.Sprintf("scale-activator-%d", i)
		f.actNames = append(f.actNames, name)
		f.actKeys = append(f.actKeys, stats.ActivatorKey(name))
	}
	return f, nil
}

// podAddrs returns n addresses from first on, skipping those whose last
// byte is 0 or 255, which some tools take for a network or a broadcast.
func podAddrs(first netip.Addr, port uint16, n int) ([]netip.AddrPort, error) {
	if !first.Is4() || !first.IsLoopback() {
		return nil, fmt.Errorf("first pod address %s: accepted is an IPv4 loopback address (127.0.0.0/8)", first)
	}
	addrs := make([]netip.AddrPort, 0, n)
	for a := first; len(addrs) < n; a = a.Next() {
		if !a.IsLoopback() {
			return nil, fmt.Errorf("%d pods from %s run past 127.255.255.255", n, first)
		}
		if b := a.As4(); b[3] == 0 || b[3] == 255 {
			continue
		}
		addrs = append(addrs, netip.AddrPortFrom(a, port))
	}
	return addrs, nil
}

// services is the address file's content.
func (f *fleet) services() []pods.Service {
	svcs := make([]pods.Service, len(f.patterns))
	for i := range svcs {
		addrs := make([]string, f.perSvc)
		for j := range addrs {
			addrs[j] = f.addrs[i*f.perSvc+j].String()
		}
		svcs[i] = pods.Service{Service: f.keys[i], Kind: f.patterns[i].Kind.String(), Pods: addrs}
	}
	return svcs
}

// pod is the pod at addr.
func (f *fleet) pod(addr netip.AddrPort) (int, bool) {
	i, ok := f.byAddr[addr]
	return int(i), ok
}

func (f *fleet) step(svc int) Step {
	s, _ := f.table.step(svc)
	return s
}

// phase is where pod's reporting periods close within a second: a fleet's
// queue-proxies start at different moments.
func (f *fleet) phase(pod int) time.Duration {
	return time.Duration(splitmix(f.seed^uint64(pod)) % uint64(time.Second))
}

// splitmix is SplitMix64's output function: a cheap, well-mixed hash.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// report is pod's stats report at now, the latest period it closed; it
// marks the pod scraped.
func (f *fleet) report(pod int, now time.Time, shares *[stats.MaxActivatorShares]stats.ActivatorShare) stats.Report {
	elapsed := now.Sub(f.epoch)
	f.table.scraped[pod].Store(int32(elapsed / time.Second))
	return f.reportAt(pod, elapsed, shares)
}

// reportAt is pod's stats report elapsed after the epoch: what it serves,
// and pushes.
func (f *fleet) reportAt(pod int, elapsed time.Duration, shares *[stats.MaxActivatorShares]stats.ActivatorShare) stats.Report {
	svc := pod / f.perSvc
	return podReport(&f.patterns[svc], f.step(svc), f.epoch, elapsed, f.phase(pod), f.push, f.actKeys, shares)
}

// firstServed is when the first report carrying a step made at elapsed
// is served: the soonest close of a period of one of svc's pods; pushing,
// the step itself, at which its pods close a period and push it.
func (f *fleet) firstServed(svc int, at time.Duration) time.Time {
	if f.push {
		return f.epoch.Add(at)
	}
	first := time.Duration(math.MaxInt64)
	for pod := svc * f.perSvc; pod < (svc+1)*f.perSvc; pod++ {
		ph := f.phase(pod)
		k := max((at-ph)/time.Second+1, 1)
		first = min(first, ph+k*time.Second)
	}
	return f.epoch.Add(first)
}

// cold says none of svc's pods was scraped in the two seconds before
// elapsed: the service has no ready pod, so an activator pokes for it.
func (f *fleet) cold(svc int, elapsed time.Duration) bool {
	now := int32(elapsed / time.Second)
	for pod := svc * f.perSvc; pod < (svc+1)*f.perSvc; pod++ {
		if last := f.table.scraped[pod].Load(); last != 0 && now-last <= 2 {
			return false
		}
	}
	return true
}

// activatorSource is a fake activator's reporter.Source: each period,
// its share (an equal one) of the load of every service whose load comes
// through the activators. It reports every zero service, woken or not, and every
// bursting one while it bursts; the reporter itself adds the zero entry
// that ends a burst.
type activatorSource struct {
	f *fleet
	// period is the reporter's: each report covers the one before now.
	period time.Duration
}

var _ reporter.PartSource = activatorSource{}

// Report implements reporter.Source.
func (a activatorSource) Report(now time.Time, emit func(string, stats.ActivatorFigures)) {
	a.ReportPart(now, nil, emit)
}

// ReportPart implements reporter.PartSource: the services keep accepts,
// every one when keep is nil. A report covers the period before now
// whichever services the last one had, so the others' periods need no
// keeping.
func (a activatorSource) ReportPart(now time.Time, keep func(string) bool, emit func(string, stats.ActivatorFigures)) {
	f := a.f
	n := float64(len(f.actKeys))
	to := now.Sub(f.epoch)
	from := to - a.period
	for svc := range f.patterns {
		p := &f.patterns[svc]
		if !p.Proxied() || keep != nil && !keep(f.keys[svc]) {
			continue
		}
		s := f.step(svc)
		// The activators hold the whole service's load, each a share.
		c := p.Mean(from, to, s) * float64(f.perSvc) / n
		if c == 0 && p.Kind == Bursting {
			continue
		}
		held := math.Ceil(p.LevelAt(to, s) * float64(f.perSvc) / n)
		reqs := math.Round(c * requestsPerHeld * a.period.Seconds())
		emit(f.keys[svc], stats.ActivatorFigures{Concurrency: c, Requests: uint64(reqs), InFlight: uint64(held)})
	}
}

// poker is what pokes: the activators' reporters.
type poker interface{ Poke(key string) }

// pokeBursts pokes, once a second, for every bursting service whose burst
// began in the last second while it had no ready pod, as an activator
// pokes when a request arrives for a service without pods. by[i] pokes
// for the services i modulo len(by).
func (f *fleet) pokeBursts(ctx context.Context, by []poker) {
	if len(by) == 0 {
		return
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			elapsed := now.Sub(f.epoch)
			for svc := range f.patterns {
				p := &f.patterns[svc]
				if p.Kind != Bursting {
					continue
				}
				s := f.step(svc)
				if p.On(elapsed, s) && !p.On(elapsed-time.Second, s) && f.cold(svc, elapsed) {
					by[svc%len(by)].Poke(f.keys[svc])
					f.pokes.Add(1)
				}
			}
		}
	}
}
