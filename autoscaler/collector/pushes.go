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

// Pushes keeps the latest report each pod pushed, by service and address
// (the address the service's Target lists it at), for the collection
// rounds to read instead of scraping the pod. Whoever receives the pushes
// has established that the pod is who it says it is; Pushes only keeps
// what they carry, validated. A pod whose latest push is older than the
// freshness is scraped as before, so a pod that never pushes, or whose
// connection broke, keeps counting. Safe for concurrent use.
type Pushes struct {
	clock clock.PassiveClock
	fresh time.Duration

	// mu is taken once per push and once per pod a round reads.
	mu   sync.Mutex
	pods map[podID]pushed
}

// pushed is one pod's latest push: its figures as a scrape would have
// read them, and when it arrived.
type pushed struct {
	at  time.Time
	fig figures
}

// NewPushes returns an empty Pushes reading clk; fresh ≤ 0 means
// DefaultPushFresh.
func NewPushes(clk clock.PassiveClock, fresh time.Duration) *Pushes {
	if fresh <= 0 {
		fresh = DefaultPushFresh
	}
	return &Pushes{clock: clk, fresh: fresh, pods: make(map[podID]pushed)}
}

// Push records r as the latest report of the pod at addr of the service
// named service. A report that does not validate is refused with an
// error and changes nothing: the pod's previous push, if fresh, stands.
func (p *Pushes) Push(service, addr string, r *stats.Report) error {
	if service == "" || addr == "" {
		return fmt.Errorf("push: a service (%q) and an address (%q) are required", service, addr)
	}
	if err := r.Validate(); err != nil {
		return fmt.Errorf("push from %s of %s: %w", addr, service, err)
	}
	var f figures
	f.take(r)
	now := p.clock.Now()
	p.mu.Lock()
	p.pods[podID{service: service, addr: addr}] = pushed{at: now, fig: f}
	p.mu.Unlock()
	return nil
}

// Forget drops the pushes of the pods of service that are not in keep
// (nil: every pod of the service), and of every pod whose push is stale:
// pods that left must not hold memory.
func (p *Pushes) Forget(service string, keep []string) {
	now := p.clock.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, ps := range p.pods {
		if now.Sub(ps.at) > p.fresh || id.service == service && !slices.Contains(keep, id.addr) {
			delete(p.pods, id)
		}
	}
}

// Len is the number of pods with a push kept, fresh or not.
func (p *Pushes) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pods)
}

// front moves the pods of pods (the service's addresses) whose latest
// push is fresh at now to the front, in place, and returns how many.
func (p *Pushes) front(service string, pods []string, now time.Time) int {
	n := 0
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, addr := range pods {
		if ps, ok := p.pods[podID{service: service, addr: addr}]; ok && now.Sub(ps.at) <= p.fresh {
			pods[n], pods[i] = pods[i], pods[n]
			n++
		}
	}
	return n
}

// fill sets j's figures from its pod's push, reporting whether it was
// still fresh at now (a push can go stale between front and fill only
// on a clock that jumps; the pod is then scraped).
func (p *Pushes) fill(j *job, now time.Time) bool {
	p.mu.Lock()
	ps, ok := p.pods[j.pod]
	p.mu.Unlock()
	if !ok || now.Sub(ps.at) > p.fresh {
		return false
	}
	j.figures, j.ok, j.pushed = ps.fig, true, true
	return true
}
