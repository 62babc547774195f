// Package collector is how the autoscaler learns each service's load: it
// scrapes a statistically sound sample of the ready pods' queue-proxy stats
// once a second, receives the activators' reports and pokes over a
// websocket, and combines both into one sample per service per second in
// which no request is counted twice (docs/collector.md).
package collector

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/swell-run/swell/pkg/service"
	"github.com/swell-run/swell/pkg/stats"
)

// Sources says which sources a Sample's figures came from.
type Sources uint8

// The sources.
const (
	// SourcePods: at least one ready pod's stats were scraped.
	SourcePods Sources = 1 << iota
	// SourceActivators: at least one activator had current figures.
	SourceActivators
)

// Sample is one service's load over one second, every source combined:
//
//	own       = N/k · Σ sampled pods (Concurrency − ProxiedConcurrency)
//	proxied   = N/k · Σ sampled pods ProxiedConcurrency
//	Concurrency = own + max(proxied, Σ activators Concurrency)
//
// and the same for RPS (requests over the report's period), for N ready
// pods of which k answered. A request that came through an activator is
// held by the activator and by a pod at once: the activators report all
// they hold (queued and forwarded), the pods report what they got through
// an activator apart, so taking the larger of the two counts each request
// once. Since the pods' total (own + proxied) is never more than the load,
// and is never lowered by how a request is marked, no header a client can
// send lowers the load: a client that marks its direct requests as the
// activator's only moves them from own to proxied, which still count. While
// no activator reports the service, the pods' total is the load.
type Sample struct {
	// Service is the service's key.
	Service service.Key
	// Time is the whole second the sample stands for. A Collector emits at
	// most one Sample per service and second, and Time strictly increases
	// from round to round.
	Time time.Time
	// Concurrency and RPS are the service-wide totals.
	Concurrency, RPS float64
	// PodConcurrency and PodRPS are the pods' own share: what did not come
	// through an activator. PodProxiedConcurrency and PodProxiedRPS are
	// what the pods got through one; ActivatorConcurrency and ActivatorRPS
	// what the activators hold.
	PodConcurrency, PodRPS               float64
	PodProxiedConcurrency, PodProxiedRPS float64
	ActivatorConcurrency, ActivatorRPS   float64
	// Sources says which sources contributed.
	Sources Sources
	// ReadyPods is N; Sampled how many pods were scraped; Scraped how many
	// of those answered with a report; Pushed how many of those were read
	// from the pod's fresh push rather than scraped.
	ReadyPods, Sampled, Scraped, Pushed int
	// Activators is how many activators had current figures.
	Activators int
	// ActivatorPending is the number of the service's requests in flight or
	// queued at the activators (see Activators.Pending).
	ActivatorPending int
	// CPU, Memory and Gauge are what the pods measured of the app, summed
	// over the ready pods as the load is: N/k times the sum over the k
	// pods scraped, a scraped pod that measured nothing counting 0 (Has*
	// say some pod measured it). A gauge counts only from pods reading the
	// Target's GaugeKey.
	CPU, Memory, Gauge          float64
	HasCPU, HasMemory, HasGauge bool
	// GaugeProblem is the most common reason the pods that read the
	// Target's gauge could not, and GaugeProblemPods how many could not;
	// GaugeOK and 0 when every pod read it.
	GaugeProblem     stats.GaugeProblem
	GaugeProblemPods int
	// Pods are the figures of each pod that answered this round, the
	// collector's until the next Round like the Sample itself.
	Pods []PodLoad
}

// PodLoad is one pod's load over the second, as its queue-proxy reported
// it.
type PodLoad struct {
	// Addr is the pod's address as the Target listed it.
	Addr string
	// Concurrency is the requests it had in flight on average, its own
	// and those an activator sent it.
	Concurrency float64
}

// Target is one service to collect for in a round.
type Target struct {
	Key service.Key
	// Name is Key.String(), as the activators' reports name the service:
	// made once by the caller, not per round.
	Name string
	// Pods are the addresses ("host:port", the queue-proxy's metrics port)
	// of the service's ready pods; none for a service at zero. The
	// collector reads them and never changes them. It tells a pod by its
	// service and its address: the connection kept to it serves no other
	// service's pod, and is closed once a round's targets no longer list
	// it.
	Pods []string
	// GaugeKey is stats.GaugeKey of the gauge the service scales on; 0
	// for none.
	GaugeKey uint64
}

// Config configures a Collector.
type Config struct {
	// Activators, if set, adds the activators' figures to every sample.
	Activators *Activators
	// Pushes, if set, holds the reports pods push: a pod with a fresh
	// push is read from it, not scraped, and is in its service's sample
	// every round, the sample's other pods drawn from those that did not
	// push.
	Pushes *Pushes
	// Client, if set, scrapes through net/http, as NewHTTPClient's does;
	// nil means the collector's own HTTP/1.1 client, which costs a
	// fraction of net/http's CPU a scrape (docs/collector.md).
	Client *http.Client
	// Timeout bounds each scrape (default DefaultScrapeTimeout).
	Timeout time.Duration
	// RoundTimeout bounds a round: a scrape not started by then fails, and
	// one still running is cancelled (default 800 ms, or Timeout if longer,
	// so a round ends before the next second's tick).
	RoundTimeout time.Duration
	// Workers is how many scrapes run at once (default 128).
	Workers int
	// Sampling sizes each service's sample; nil means DefaultSampling.
	Sampling *Sampling
	// Seed seeds the random sample choice (0: a random seed).
	Seed uint64
	// Clock times rounds (default the real clock). Scrape timeouts are on
	// real sockets, so they use real time.
	Clock clock.PassiveClock
	// Logger logs scrape failures at debug level (default none).
	Logger *zap.Logger
	// Registerer, if set, gets the collector's metrics.
	Registerer prometheus.Registerer
}

// Collector runs collection rounds: each round scrapes every service's
// sampled pods concurrently, adds the activators' figures and returns one
// Sample per service. It keeps no record of services between rounds: the
// caller (the autoscaler's loop, which owns the set of services) hands each
// round its targets.
type Collector struct {
	activators *Activators
	pushes     *Pushes
	client     *http.Client // nil: the collector's own, over pool
	pool       *connPool
	timeout    time.Duration
	roundTO    time.Duration
	workers    int
	sampling   Sampling
	clock      clock.PassiveClock
	log        *zap.Logger
	metrics    *collectorMetrics

	// roundMu serialises rounds; everything below is the round's scratch,
	// reused so that a steady state allocates only inside net/http.
	roundMu sync.Mutex
	last    time.Time // the latest round's second
	// start is where the next round begins in its jobs: past the last
	// job the previous round started, so that when rounds run out of time
	// the scrapes they miss go round the services instead of falling on
	// the same ones every second.
	start   int
	rng     *rand.Rand
	targets []Target
	pods    []string // every target's pods, copied: the sample is drawn in place
	// listed is every pod the round's targets list, by which the pool
	// closes the connections of those that left.
	listed  map[podID]struct{}
	ranges  []podRange
	names   []string
	jobs    []job
	loads   []ActivatorLoad
	each    []activatorFigures // every service's activators, one by one
	perKey  []keyFigures       // one service's proxied figures by activator
	podLoad []PodLoad
	samples []Sample
	// scrapers are the workers', kept from round to round with their
	// buffers.
	scrapers []scraper
}

// podRange is one target's pods in Collector.pods, of which the first n
// (its sample) are scraped this round, as Collector.jobs[first:first+n].
type podRange struct {
	start, ready int
	first, n     int
}

// job is one pod's scrape in a round; workers write only their own job.
type job struct {
	pod podID
	figures
	ok bool
	// pushed says the figures are the pod's latest push (Config.Pushes):
	// the pod is not scraped.
	pushed bool
}

// figures are what one pod's report says, as the round reads it.
type figures struct {
	// concurrency and rps are the pod's non-proxied figures;
	// proxiedConcurrency and proxiedRPS the share the activators sent it.
	concurrency, rps               float64
	proxiedConcurrency, proxiedRPS float64
	// attributed says the pod split its proxied figures by activator
	// (stats.Report.Attributed), the first nshares of shares.
	attributed bool
	nshares    int
	shares     [stats.MaxActivatorShares]activatorFigures
	// app is what the pod measured of its app.
	app stats.AppUsage
}

// take sets f from r, a validated report. A report of length zero (a pod
// younger than one reporting period, whose queue-proxy has measured
// nothing yet) counts as a pod with no load: it has had next to no time
// to receive any.
func (f *figures) take(r *stats.Report) {
	f.app = r.App
	f.attributed = r.Attributed
	if r.Period <= 0 {
		return
	}
	f.concurrency = r.Concurrency - r.ProxiedConcurrency
	f.rps = float64(r.Requests-r.ProxiedRequests) / r.Period.Seconds()
	f.proxiedConcurrency = r.ProxiedConcurrency
	f.proxiedRPS = float64(r.ProxiedRequests) / r.Period.Seconds()
	for _, sh := range r.ByActivator {
		f.shares[f.nshares] = activatorFigures{key: sh.Activator, concurrency: sh.Concurrency, rps: float64(sh.Requests) / r.Period.Seconds()}
		f.nshares++
	}
}

// New returns a Collector, or an error naming what is invalid.
func New(cfg Config) (*Collector, error) {
	c := &Collector{
		activators: cfg.Activators,
		pushes:     cfg.Pushes,
		client:     cfg.Client,
		timeout:    cfg.Timeout,
		roundTO:    cfg.RoundTimeout,
		workers:    cfg.Workers,
		sampling:   DefaultSampling,
		clock:      cfg.Clock,
		log:        cfg.Logger,
	}
	if cfg.Sampling != nil {
		if cfg.Sampling.Z < 0 || cfg.Sampling.Margin < 0 {
			return nil, errors.New("collector: Sampling.Z and Sampling.Margin must be >= 0 (both 0: scrape every pod)")
		}
		c.sampling = *cfg.Sampling
	}
	if c.timeout <= 0 {
		c.timeout = DefaultScrapeTimeout
	}
	if c.roundTO <= 0 {
		c.roundTO = max(800*time.Millisecond, c.timeout)
	}
	if c.workers <= 0 {
		c.workers = 128
	}
	if c.client == nil {
		c.pool = newConnPool(maxIdleConns(c.workers), podIdleTimeout, clock.RealClock{})
		c.listed = make(map[podID]struct{})
	}
	if c.clock == nil {
		c.clock = clock.RealClock{}
	}
	if c.log == nil {
		c.log = zap.NewNop()
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	c.rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var err error
	if c.metrics, err = newCollectorMetrics(cfg.Registerer); err != nil {
		return nil, err
	}
	return c, nil
}

// ActivatorPending returns the number of the requests held at the
// activators for the service named name (0 without Config.Activators).
func (c *Collector) ActivatorPending(name string) int {
	if c.activators == nil {
		return 0
	}
	return c.activators.Pending(name)
}

// Round collects the second of tick for targets: it scrapes a random
// sample of each target's pods with Workers concurrent scrapes, adds the
// activators' figures and returns one Sample per target that had data. A
// target whose ready pods all failed to answer has no Sample that second
// (no data, which is not zero load). targets are every service collected
// for: a pod they no longer list has left, and its kept connection is
// closed.
//
// Every scrape ends by RoundTimeout, so a round takes little more than
// that however many pods hang. Rounds are serialised; a tick in a second
// already collected is skipped (nil). The returned slice and targets are
// the collector's and the caller's until the next Round.
func (c *Collector) Round(ctx context.Context, tick time.Time, targets []Target) []Sample {
	c.roundMu.Lock()
	defer c.roundMu.Unlock()
	sec := tick.Truncate(time.Second)
	if !c.last.IsZero() && !sec.After(c.last) {
		c.metrics.roundsSkipped.Inc()
		return nil
	}
	c.last = sec
	start := c.clock.Now()

	c.plan(targets, start)
	c.dropLeft()
	c.scrapeAll(ctx)
	c.combine(sec)
	c.targets = nil
	c.metrics.roundDuration.Observe(c.clock.Since(start).Seconds())
	return c.samples
}

// plan draws each target's sample and lays out the round's jobs: the pods
// with a fresh push at now first, every one of them, then as many others
// as the sample still needs, drawn at random.
func (c *Collector) plan(targets []Target, now time.Time) {
	c.targets = targets
	c.pods = c.pods[:0]
	c.ranges = c.ranges[:0]
	c.names = c.names[:0]
	c.jobs = c.jobs[:0]
	for _, t := range targets {
		r := podRange{start: len(c.pods), ready: len(t.Pods), first: len(c.jobs)}
		c.pods = append(c.pods, t.Pods...)
		pods := c.pods[r.start : r.start+r.ready]
		pushed := 0
		if c.pushes != nil {
			pushed = c.pushes.front(t.Name, pods, now)
		}
		// Drawn anew every round, so that no pod's load is persistently
		// left out.
		rest := min(len(pods)-pushed, max(0, c.sampling.Size(r.ready)-pushed))
		drawSample(c.rng, pods[pushed:], rest)
		r.n = pushed + rest
		for i, addr := range pods[:r.n] {
			c.jobs = append(c.jobs, job{pod: podID{service: t.Name, addr: addr}})
			if i < pushed && c.pushes.fill(&c.jobs[len(c.jobs)-1], now) {
				c.metrics.pushedReads.Inc()
			}
		}
		c.ranges = append(c.ranges, r)
		c.names = append(c.names, t.Name)
	}
}

// dropLeft closes the kept connections of the pods that left: those the
// round's targets no longer list, because they stopped (or are no longer
// ready, or their service is no longer collected). A pod that exits may
// leave bytes queued on its connection, and its address to another pod:
// closed, its connection can serve neither.
func (c *Collector) dropLeft() {
	if c.pool == nil || c.pool.len() == 0 {
		return
	}
	clear(c.listed)
	for _, t := range c.targets {
		for _, addr := range t.Pods {
			c.listed[podID{service: t.Name, addr: addr}] = struct{}{}
		}
	}
	c.pool.closeUnlisted(c.listed)
}

// scrapeAll runs the round's jobs on up to Workers goroutines. A job not
// started by the round's deadline fails without a request.
func (c *Collector) scrapeAll(ctx context.Context) {
	if len(c.jobs) > 0 {
		c.runJobs(ctx)
	}
}

// runJobs is scrapeAll's body, apart so that a round without jobs does not
// pay for the goroutines' captured variables.
func (c *Collector) runJobs(parent context.Context) {
	ctx, cancel := context.WithTimeout(parent, c.roundTO)
	defer cancel()
	// The round is over at its deadline, even before ctx's timer has told
	// ctx: a scrape ends on its socket's deadline, which may come first.
	roundEnd, _ := ctx.Deadline()
	var next atomic.Int64
	n, first := len(c.jobs), c.start%len(c.jobs)
	// over is the first job, in this round's order, that found the round
	// over; the next round starts there.
	var over atomic.Int64
	over.Store(int64(n))
	workers := c.scrapersFor(min(c.workers, n))
	// A round cancelled before its deadline ends the scrapes in progress.
	aborted := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(aborted)
		for _, s := range workers {
			s.abort(ctx.Err())
		}
	})
	var wg sync.WaitGroup
	for _, s := range workers {
		wg.Go(func() {
			// One report per worker: decoding into it again reuses its
			// shares' array.
			var r stats.Report
			for {
				k := next.Add(1) - 1
				if k >= int64(n) {
					return
				}
				now := time.Now()
				roundOver := ctx.Err() != nil || !now.Before(roundEnd)
				if roundOver {
					for o := over.Load(); k < o && !over.CompareAndSwap(o, k); o = over.Load() {
					}
				}
				deadline := now.Add(c.timeout)
				if roundEnd.Before(deadline) {
					deadline = roundEnd
				}
				c.scrapeJob(ctx, &c.jobs[(first+int(k))%n], s, &r, roundOver, deadline)
			}
		})
	}
	wg.Wait()
	if !stop() {
		// The next round's scrapers are these: none is aborted after it
		// began.
		<-aborted
	}
	c.start = (first + int(over.Load())) % n
}

// scrapersFor returns the scrapers of a round with n workers, ready.
func (c *Collector) scrapersFor(n int) []scraper {
	for len(c.scrapers) < n {
		if c.client != nil {
			c.scrapers = append(c.scrapers, &httpScraper{client: c.client})
		} else {
			c.scrapers = append(c.scrapers, newConnScraper(c.pool, c.timeout))
		}
	}
	for _, s := range c.scrapers[:n] {
		s.reset()
	}
	return c.scrapers[:n]
}

// scrapeJob scrapes j's pod by deadline, unless the round is over.
func (c *Collector) scrapeJob(ctx context.Context, j *job, s scraper, r *stats.Report, roundOver bool, deadline time.Time) {
	if j.pushed {
		return
	}
	if roundOver {
		c.metrics.scrapes[resultTimeout].Inc()
		c.log.Debug("scrape", zap.String("pod", j.pod.addr), zap.Error(errRoundOver))
		return
	}
	start := c.clock.Now()
	res, err := s.scrape(ctx, deadline, j.pod, r)
	c.metrics.scrapeDuration.Observe(c.clock.Since(start).Seconds())
	c.metrics.scrapes[res].Inc()
	if err != nil {
		c.log.Debug("scrape", zap.String("pod", j.pod.addr), zap.Error(err))
		return
	}
	j.ok = true
	j.take(r)
}

// keyFigures are one activator's part of a service's proxied load, as the
// sampled pods saw it and as the activator reported it.
type keyFigures struct {
	key                   uint64
	podConc, podRPS       float64
	reportConc, reportRPS float64
}

// proxied is a service's load that came through the activators, each
// request counted once. Where every scraped pod split its proxied figures
// by activator, each activator the pods saw counts for the larger of what
// they saw from it (scaled like the rest of the sample) and what it
// reported (which also holds what waits at it): an activator that does not
// report is counted by the pods, one that does is not counted twice. What
// the pods saw from no named activator, and what the activators the pods
// did not see reported, count for the larger of the two, as all proxied
// load did before the split: an activator that names nobody (an older
// one) is counted once. Where a scraped pod did not split (a pod injected
// before it), the larger of the pods' total and the activators' total
// counts. Either way no header a client sends lowers the load below what
// the pods hold.
func (c *Collector) proxied(st podRange, scale float64, act ActivatorLoad, podConc, podRPS float64) (conc, rps float64) {
	jobs := c.jobs[st.first : st.first+st.n]
	attributed, scraped := true, false
	for i := range jobs {
		if jobs[i].ok {
			scraped = true
			attributed = attributed && jobs[i].attributed
		}
	}
	if !scraped || !attributed {
		return max(podConc, act.Concurrency), max(podRPS, act.RPS)
	}
	c.perKey = c.perKey[:0]
	var namedConc, namedRPS float64
	for i := range jobs {
		j := &jobs[i]
		if !j.ok {
			continue
		}
		for _, sh := range j.shares[:j.nshares] {
			k := c.keyFigures(sh.key)
			if k == nil {
				c.perKey = append(c.perKey, keyFigures{key: sh.key})
				k = &c.perKey[len(c.perKey)-1]
			}
			k.podConc += sh.concurrency * scale
			k.podRPS += sh.rps * scale
			namedConc += sh.concurrency * scale
			namedRPS += sh.rps * scale
		}
	}
	var unseenConc, unseenRPS float64
	for _, f := range c.each[act.from:act.to] {
		if k := c.keyFigures(f.key); k != nil {
			k.reportConc += f.concurrency
			k.reportRPS += f.rps
		} else {
			unseenConc += f.concurrency
			unseenRPS += f.rps
		}
	}
	conc = max(podConc-namedConc, unseenConc, 0)
	rps = max(podRPS-namedRPS, unseenRPS, 0)
	for _, k := range c.perKey {
		conc += max(k.podConc, k.reportConc)
		rps += max(k.podRPS, k.reportRPS)
	}
	return conc, rps
}

// appFigures sums what the scraped pods measured of their app into s,
// scaled up to the ready pods from those scraped, and finds the most
// common problem of the pods that could not read the gauge.
//
// A scraped pod that measured nothing counts 0, as the HPA counts a pod
// without metrics when it scales up: a new pod is ready a moment before
// its queue-proxy has measured its app, and scaling the others' figures
// up to it would read one busy pod's CPU as every new pod's, asking for
// more pods at each one that starts. A fleet in the middle of an upgrade
// (pods from before stats version 3) is under-read the same way until it
// is through.
func (c *Collector) appFigures(s *Sample, jobs []job, gaugeKey uint64) {
	var cpu, mem, g float64
	var nCPU, nMem, nGauge int
	var problems [stats.NumGaugeProblems]int
	for i := range jobs {
		j := &jobs[i]
		if !j.ok {
			continue
		}
		a := &j.app
		if a.HasCPU {
			cpu += a.CPU
			nCPU++
		}
		if a.HasMemory {
			mem += float64(a.Memory)
			nMem++
		}
		switch {
		case gaugeKey == 0:
		case a.HasGauge && a.GaugeKey == gaugeKey:
			g += a.Gauge
			nGauge++
		case !a.HasGauge && a.GaugeProblem != stats.GaugeOK:
			problems[a.GaugeProblem]++
		}
	}
	up := func(sum float64) float64 { return sum * float64(s.ReadyPods) / float64(s.Scraped) }
	if nCPU > 0 {
		s.CPU, s.HasCPU = up(cpu), true
	}
	if nMem > 0 {
		s.Memory, s.HasMemory = up(mem), true
	}
	if nGauge > 0 {
		s.Gauge, s.HasGauge = up(g), true
	}
	for p, n := range problems {
		s.GaugeProblemPods += n
		if n > problems[s.GaugeProblem] {
			s.GaugeProblem = stats.GaugeProblem(p)
		}
	}
}

// keyFigures returns the figures of the activator key in the service's
// perKey, or nil.
func (c *Collector) keyFigures(key uint64) *keyFigures {
	for i := range c.perKey {
		if c.perKey[i].key == key {
			return &c.perKey[i]
		}
	}
	return nil
}

// combine turns the jobs' results and the activators' figures into the
// round's samples.
func (c *Collector) combine(sec time.Time) {
	c.samples = c.samples[:0]
	c.loads = c.loads[:0]
	// Every answer's figures, laid out up front so that the samples'
	// slices of it never move.
	c.podLoad = slices.Grow(c.podLoad[:0], len(c.jobs))
	for range c.names {
		c.loads = append(c.loads, ActivatorLoad{})
	}
	if c.activators != nil {
		c.each = c.activators.loads(c.names, c.loads, c.each)
	}
	for i, st := range c.ranges {
		s := Sample{
			Service:              c.targets[i].Key,
			Time:                 sec,
			ActivatorConcurrency: c.loads[i].Concurrency,
			ActivatorRPS:         c.loads[i].RPS,
			Activators:           c.loads[i].Activators,
			ActivatorPending:     c.loads[i].Pending,
		}
		if s.Activators > 0 {
			s.Sources |= SourceActivators
		}
		s.ReadyPods, s.Sampled = st.ready, st.n
		var conc, rps, pconc, prps float64
		pods := len(c.podLoad)
		for _, j := range c.jobs[st.first : st.first+st.n] {
			if j.ok {
				c.podLoad = append(c.podLoad, PodLoad{Addr: j.pod.addr, Concurrency: j.concurrency + j.proxiedConcurrency})
				s.Scraped++
				if j.pushed {
					s.Pushed++
				}
				conc += j.concurrency
				rps += j.rps
				pconc += j.proxiedConcurrency
				prps += j.proxiedRPS
			}
		}
		s.Pods = c.podLoad[pods:len(c.podLoad):len(c.podLoad)]
		c.appFigures(&s, c.jobs[st.first:st.first+st.n], c.targets[i].GaugeKey)
		if s.ReadyPods > 0 {
			if s.Scraped == 0 {
				// Every sampled pod failed: the pods' load is unknown, and
				// reporting the activators' share alone would read as a
				// drop in load. No sample; the window sees a gap.
				c.metrics.missing.Inc()
				continue
			}
			scale := float64(s.ReadyPods) / float64(s.Scraped)
			s.PodConcurrency, s.PodRPS = conc*scale, rps*scale
			s.PodProxiedConcurrency, s.PodProxiedRPS = pconc*scale, prps*scale
			s.Sources |= SourcePods
		}
		// What came through an activator is counted once, from whichever
		// side saw more of it: the activators (which also hold what waits)
		// or the pods (which also see what was marked as the activator's by
		// a client, or forwarded by an activator that is not reporting).
		scale := 0.0
		if s.Scraped > 0 {
			scale = float64(s.ReadyPods) / float64(s.Scraped)
		}
		pconcAll, prpsAll := c.proxied(st, scale, c.loads[i], s.PodProxiedConcurrency, s.PodProxiedRPS)
		s.Concurrency = s.PodConcurrency + pconcAll
		s.RPS = s.PodRPS + prpsAll
		c.samples = append(c.samples, s)
	}
}
