package collector

import (
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/swell-run/swell/pkg/stats"
)

// DefaultStaleAfter is how long an activator's figures for a service count
// after they arrived: two reporting periods, so one late or lost report
// neither drops the activator's load nor keeps a departed one's for long.
const DefaultStaleAfter = 2 * time.Second

// ActivatorSink receives validated Report and Poke frames from the activator
// endpoint. The frame and its byte slices are valid only during the call.
// Calls for one activator are serialised; calls for different activators
// may be concurrent.
type ActivatorSink interface {
	Apply(activator string, f *stats.ActivatorFrame)
}

// Activators keeps every activator's latest figures per service, so the
// collector can add them to the pods' and the decider can see what the
// activators hold. Each activator's figures are kept apart and summed on
// read: several activators never overwrite one another, and a report
// replaces only the figures of the activator that sent it.
//
// Figures are levels (an average concurrency, a request rate), not counts:
// reading them in two rounds counts nothing twice. They expire StaleAfter
// after they arrived, so an activator that went away stops counting.
// Safe for concurrent use.
type Activators struct {
	clock      clock.PassiveClock
	staleAfter time.Duration

	// mu is taken once per frame and once per collection round, never per
	// request.
	mu       sync.Mutex
	services map[string][]activatorSlot
}

// activatorSlot is one activator's latest figures for one service.
type activatorSlot struct {
	activator string
	key       uint64 // stats.ActivatorKey(activator), as the pods know it
	// reportAt is when the latest report arrived (zero: none yet); pokeAt
	// when the latest poke did.
	reportAt, pokeAt time.Time
	period           time.Duration
	figures          stats.ActivatorFigures
}

// NewActivators returns an empty Activators reading clk; staleAfter ≤ 0
// means DefaultStaleAfter.
func NewActivators(clk clock.PassiveClock, staleAfter time.Duration) *Activators {
	if staleAfter <= 0 {
		staleAfter = DefaultStaleAfter
	}
	return &Activators{clock: clk, staleAfter: staleAfter, services: make(map[string][]activatorSlot)}
}

// Apply implements ActivatorSink: a Report replaces activator's figures for
// each service it names; a Poke marks a request pending at activator for
// each service it names.
func (a *Activators) Apply(activator string, f *stats.ActivatorFrame) {
	now := a.clock.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := range f.Entries {
		e := &f.Entries[i]
		s := a.slotLocked(activator, e.Service)
		switch f.Type {
		case stats.ActivatorReport:
			s.reportAt, s.period, s.figures = now, f.Period, e.ActivatorFigures
		case stats.ActivatorPoke:
			s.pokeAt = now
		}
	}
}

// slotLocked finds or adds activator's slot for service. Looking the service
// up with string(service) does not allocate; only a new service or a new
// activator does.
func (a *Activators) slotLocked(activator string, service []byte) *activatorSlot {
	slots := a.services[string(service)]
	for i := range slots {
		if slots[i].activator == activator {
			return &slots[i]
		}
	}
	slots = append(slots, activatorSlot{activator: activator, key: stats.ActivatorKey(activator)})
	a.services[string(service)] = slots
	return &slots[len(slots)-1]
}

// ActivatorLoad is the activators' share of one service's load.
type ActivatorLoad struct {
	// Concurrency is the sum of the activators' average concurrency.
	Concurrency float64
	// RPS is the sum of the activators' request rates.
	RPS float64
	// Activators is how many activators have current figures.
	Activators int
	// Pending is the number of requests the activators hold for the service
	// (in flight or queued): the sum of their latest in-flight counts, where
	// a poke newer than StaleAfter counts as at least 1 for its activator.
	Pending int

	// from and to delimit the service's activators, one by one, in the
	// scratch loads filled.
	from, to int
}

// activatorFigures is one activator's current figures for a service.
type activatorFigures struct {
	key              uint64
	concurrency, rps float64
}

// Load returns the activators' current share of service's load.
func (a *Activators) Load(service string) ActivatorLoad {
	now := a.clock.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.loadLocked(service, now)
}

// Pending returns the number of requests the activators hold for service;
// the decider never scales a service to zero while it is above zero.
func (a *Activators) Pending(service string) int { return a.Load(service).Pending }

func (a *Activators) loadLocked(service string, now time.Time) ActivatorLoad {
	l, _ := a.loadEachLocked(service, now, nil)
	return l
}

// loadEachLocked is loadLocked that also appends each fresh activator's
// figures to each.
func (a *Activators) loadEachLocked(service string, now time.Time, each []activatorFigures) (ActivatorLoad, []activatorFigures) {
	var l ActivatorLoad
	slots := a.services[service]
	for i := range slots {
		s := &slots[i]
		pending := 0
		if a.fresh(s.reportAt, now) {
			f := activatorFigures{key: s.key, concurrency: s.figures.Concurrency}
			if s.period > 0 {
				f.rps = float64(s.figures.Requests) / s.period.Seconds()
			}
			l.Concurrency += f.concurrency
			l.RPS += f.rps
			if each != nil {
				each = append(each, f)
			}
			l.Activators++
			pending = int(min(s.figures.InFlight, uint64(maxPending)))
		}
		// A report may have been closed just before the request that caused
		// the poke arrived; the poke holds the count at 1 until it expires,
		// whatever the reports say meanwhile.
		if a.fresh(s.pokeAt, now) {
			pending = max(pending, 1)
		}
		l.Pending = min(l.Pending+pending, maxPending)
	}
	return l, each
}

// maxPending caps counts from the wire, which are uint64, well inside int.
const maxPending = 1 << 40

func (a *Activators) fresh(at, now time.Time) bool {
	return !at.IsZero() && now.Sub(at) <= a.staleAfter
}

// loads fills out[i] with services[i]'s load, appends each activator's
// figures for it to each (out[i] says where they are), and drops figures
// that expired, under one acquisition of the lock. It returns each.
func (a *Activators) loads(services []string, out []ActivatorLoad, each []activatorFigures) []activatorFigures {
	now := a.clock.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	each = each[:0]
	for i, svc := range services {
		from := len(each)
		// A non-nil slice, so that loadEachLocked appends.
		if each == nil {
			each = make([]activatorFigures, 0, 8)
		}
		out[i], each = a.loadEachLocked(svc, now, each)
		out[i].from, out[i].to = from, len(each)
	}
	a.sweepLocked(now)
	return each
}

// sweepLocked forgets slots whose report and poke have both expired, and
// services left without slots, so departed activators and deleted services
// do not accumulate.
func (a *Activators) sweepLocked(now time.Time) {
	for svc, slots := range a.services {
		kept := slots[:0]
		for _, s := range slots {
			if a.fresh(s.reportAt, now) || a.fresh(s.pokeAt, now) {
				kept = append(kept, s)
			}
		}
		switch {
		case len(kept) == 0:
			delete(a.services, svc)
		case len(kept) != len(slots):
			clear(slots[len(kept):])
			a.services[svc] = kept
		}
	}
}
