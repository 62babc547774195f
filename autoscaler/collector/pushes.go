package collector

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/swell-run/swell/pkg/stats"
)

// DefaultPushFresh is how long a pod's pushed report stands in for a
// scrape: two reporting periods, so one late or lost push does not send
// the round to scrape it, and a pod that stopped pushing is scraped again
// within two seconds.
const DefaultPushFresh = 2 * time.Second

// A push is sharp, and worth a decision at once, when the pod's
// concurrency is at least sharpFactor times its previous push's and
// higher by at least sharpMin requests: a rise a one-second sample would
// show only later, and one too small to change any decision is not.
const (
	sharpFactor = 2
	sharpMin    = 1
)

// Pushes keeps what each pod pushed, by service and address (the address
// the service's Target lists it at), for the collection rounds to read
// instead of scraping the pod, and each pod's latest frame for decisions
// made between rounds. Whoever receives the pushes has established that
// the pod is who it says it is; Pushes only keeps what they carry,
// validated. A pod whose latest push is older than the freshness is
// scraped as before, so a pod that never pushes, or whose connection
// broke, keeps counting. Safe for concurrent use.
type Pushes struct {
	clock clock.PassiveClock
	fresh time.Duration

	// mu is taken once per push and once per service a round or a
	// decision reads.
	mu       sync.Mutex
	services map[string]map[string]*pushed
}

// pushed is one pod's pushes.
type pushed struct {
	// at is when the latest arrived.
	at time.Time
	// fig are the figures of the periods pushed since a round last read
	// them, merged (weighted by their lengths), or the last read's when
	// none came since; period is their length.
	fig    figures
	period time.Duration
	// read says a round read fig: the next push starts them anew.
	read bool
	// latest is the latest frame's own figures, for a decision between
	// rounds.
	latest PodRecent
}

// PodRecent is one pod's latest pushed frame: its own (not proxied)
// concurrency and requests per second over the frame's period, the
// requests per second the activators sent it, its total concurrency, its
// own and proxied, and when it arrived.
type PodRecent struct {
	Concurrency, RPS, ProxiedRPS, Total float64
	At                                  time.Time
}

// NewPushes returns an empty Pushes reading clk; fresh ≤ 0 means
// DefaultPushFresh.
func NewPushes(clk clock.PassiveClock, fresh time.Duration) *Pushes {
	if fresh <= 0 {
		fresh = DefaultPushFresh
	}
	return &Pushes{clock: clk, fresh: fresh, services: make(map[string]map[string]*pushed)}
}

// Push records r as the latest report of the pod at addr of the service
// named service, and reports whether it is sharp: the pod's concurrency
// at least doubled since its previous push, by at least one request. A
// report that does not validate is refused with an error and changes
// nothing: the pod's previous push, if fresh, stands.
func (p *Pushes) Push(service, addr string, r *stats.Report) (sharp bool, err error) {
	if service == "" || addr == "" {
		return false, fmt.Errorf("push: a service (%q) and an address (%q) are required", service, addr)
	}
	if err := r.Validate(); err != nil {
		return false, fmt.Errorf("push from %s of %s: %w", addr, service, err)
	}
	var f figures
	f.take(r)
	recent := PodRecent{Concurrency: f.concurrency, RPS: f.rps, ProxiedRPS: f.proxiedRPS, Total: f.concurrency + f.proxiedConcurrency}
	now := p.clock.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	pods := p.services[service]
	if pods == nil {
		pods = make(map[string]*pushed)
		p.services[service] = pods
	}
	ps := pods[addr]
	if ps == nil {
		ps = &pushed{}
		pods[addr] = ps
	} else if now.Sub(ps.at) <= p.fresh {
		prev := ps.latest.Total
		sharp = recent.Total >= sharpFactor*prev && recent.Total-prev >= sharpMin
	}
	if ps.read || ps.period <= 0 || now.Sub(ps.at) > p.fresh {
		ps.fig, ps.period = f, r.Period
	} else {
		ps.fig.merge(ps.period, &f, r.Period)
		ps.period += r.Period
	}
	recent.At = now
	ps.at, ps.read, ps.latest = now, false, recent
	return sharp, nil
}

// merge folds g, the figures of a period of length pg that followed f's
// of length pf, into f: every rate is their average weighted by the
// periods' lengths, a share one period lacks counting zero in it; what the
// pod measured of its app is g's, its CPU averaged too when both measured
// it. Shares beyond stats.MaxActivatorShares are left out, as the pod
// itself leaves them out past its limit: their load stays in the proxied
// totals.
func (f *figures) merge(pf time.Duration, g *figures, pg time.Duration) {
	if pg <= 0 {
		f.app = g.app
		return
	}
	w := float64(pg) / float64(pf+pg)
	avg := func(a, b float64) float64 { return a + (b-a)*w }
	f.concurrency = avg(f.concurrency, g.concurrency)
	f.rps = avg(f.rps, g.rps)
	f.proxiedConcurrency = avg(f.proxiedConcurrency, g.proxiedConcurrency)
	f.proxiedRPS = avg(f.proxiedRPS, g.proxiedRPS)
	f.attributed = f.attributed && g.attributed
	n := f.nshares
	for i := range n {
		f.shares[i].concurrency *= 1 - w
		f.shares[i].rps *= 1 - w
	}
	for _, sh := range g.shares[:g.nshares] {
		i := slices.IndexFunc(f.shares[:n], func(a activatorFigures) bool { return a.key == sh.key })
		switch {
		case i >= 0:
			f.shares[i].concurrency += sh.concurrency * w
			f.shares[i].rps += sh.rps * w
		case f.nshares < len(f.shares):
			f.shares[f.nshares] = activatorFigures{key: sh.key, concurrency: sh.concurrency * w, rps: sh.rps * w}
			f.nshares++
		}
	}
	app := g.app
	if f.app.HasCPU && g.app.HasCPU {
		app.CPU = avg(f.app.CPU, g.app.CPU)
	}
	f.app = app
}

// Forget drops the pushes of the pods of service that are not in keep
// (nil: every pod of the service): pods that left must not hold memory.
func (p *Pushes) Forget(service string, keep []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pods := p.services[service]
	for addr := range pods {
		if !slices.Contains(keep, addr) {
			delete(pods, addr)
		}
	}
	if len(pods) == 0 {
		delete(p.services, service)
	}
}

// Sweep drops every push that is stale at now, and the services left with
// none: a pod that stopped pushing, and was then deleted, holds no memory
// past the freshness. The autoscaler sweeps once a round.
func (p *Pushes) Sweep() {
	now := p.clock.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for svc, pods := range p.services {
		for addr, ps := range pods {
			if now.Sub(ps.at) > p.fresh {
				delete(pods, addr)
			}
		}
		if len(pods) == 0 {
			delete(p.services, svc)
		}
	}
}

// Len is the number of pods with a push kept, fresh or not.
func (p *Pushes) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, pods := range p.services {
		n += len(pods)
	}
	return n
}

// Recent calls f with the latest frame of each of pods (the service's
// addresses) whose push is fresh now, and returns how many there were.
func (p *Pushes) Recent(service string, pods []string, f func(addr string, r PodRecent)) int {
	now := p.clock.Now()
	n := 0
	p.mu.Lock()
	defer p.mu.Unlock()
	pushed := p.services[service]
	if len(pushed) == 0 {
		return 0
	}
	for _, addr := range pods {
		if ps, ok := pushed[addr]; ok && now.Sub(ps.at) <= p.fresh {
			f(addr, ps.latest)
			n++
		}
	}
	return n
}

// front moves the pods of pods (the service's addresses) whose latest
// push is fresh at now to the front, in place, and returns how many.
func (p *Pushes) front(service string, pods []string, now time.Time) int {
	n := 0
	p.mu.Lock()
	defer p.mu.Unlock()
	pushed := p.services[service]
	if len(pushed) == 0 {
		return 0
	}
	for i, addr := range pods {
		if ps, ok := pushed[addr]; ok && now.Sub(ps.at) <= p.fresh {
			pods[n], pods[i] = pods[i], pods[n]
			n++
		}
	}
	return n
}

// fill sets j's figures from its pod's pushes since a round last read
// them (or, when none came since, the last ones read), reporting whether
// the latest was still fresh at now (a push can go stale between front
// and fill only on a clock that jumps; the pod is then scraped).
func (p *Pushes) fill(j *job, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	ps, ok := p.services[j.pod.service][j.pod.addr]
	if !ok || now.Sub(ps.at) > p.fresh {
		return false
	}
	ps.read = true
	j.figures, j.ok, j.pushed = ps.fig, true, true
	return true
}
