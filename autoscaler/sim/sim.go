// Package sim replays traffic through the autoscaler's real decision core —
// the engine's metric windows, the deciders and their guard rails — and the
// executor's real rules (package plan) on a virtual clock, with a model of
// pods and of the activator, so that an hour of traffic shows in seconds
// what a policy would cost and how long requests would wait. It also
// replays recorded decider inputs (ReplayObservations). It does no I/O
// beyond the writers it is given.
//
// The model, in brief (docs/sim.md has the whole of it):
//
//   - Requests arrive from a Source. While the service's traffic goes
//     through the activator (the last decision said NeedActivator, or no
//     pod is ready), a request waits there, first come first served, for a
//     ready pod with a free slot (fewer than containerConcurrency requests
//     in service, any pod when that is 0). Otherwise it goes straight to
//     the ready pod holding the fewest requests and, if that pod is full,
//     waits in the pod's queue-proxy.
//   - A pod serves up to Capacity requests at full speed; beyond that the
//     requests in service share it (processor sharing): with n > Capacity,
//     each progresses at Capacity/n of full speed.
//   - Every tick the engine decides; a request arriving while no pod is
//     ready and none is wanted pokes it for an immediate decision. Each
//     decision is applied as the executor applies it, by plan.Rules: the
//     activator into the path first, zero only once it is there, scale-downs
//     held after a scale-up, changes rate-limited, the activator out of the
//     path only once a pod is ready. A change the rules hold is looked at
//     again when they say, and whenever a pod becomes ready or a route
//     switch takes effect. Scaling starts pods (ready after the startup
//     delay) or stops them: a stopping pod takes no new request and
//     finishes what it holds.
//   - A request in service at full speed keeps one of its pod's Capacity
//     slots busy, and a slot is a Capacity-th of the pod's Cores: a pod's
//     CPU is Cores × min(requests in service, Capacity) / Capacity,
//     averaged over the second. Starting pods use none; a stopping pod is
//     no longer ready, so nobody measures it.
//   - Each second the engine gets one sample, as the real collector would
//     record it: the time-weighted average number of requests in the
//     system (queued at the activator or a queue-proxy, or in service),
//     the number that arrived, and the ready pods' CPU, stamped with the
//     second's end like the collector's round that reports it. With a
//     MetricsResolution above a second the CPU is instead the average of
//     the last whole window of that length, published as it closes, as
//     metrics-server serves the HPA.
package sim

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/swell-run/swell/autoscaler/decider"
	"github.com/swell-run/swell/autoscaler/engine"
	"github.com/swell-run/swell/autoscaler/plan"
	"github.com/swell-run/swell/pkg/autoscaling"
)

// Epoch is the virtual clock's origin: time 0 of every simulation. Any
// instant would do; a fixed one keeps runs reproducible.
var Epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// PodModel describes how the simulated pods behave.
type PodModel struct {
	// StartupDelay is how long a pod takes from being asked for to being
	// ready.
	StartupDelay time.Duration
	// StartupJitter adds a uniformly drawn extra delay, from 0 to this, to
	// each pod's startup.
	StartupJitter time.Duration
	// Capacity is how many requests a pod serves at full speed at once:
	// beyond it, the requests in service share the pod and each takes
	// longer. 0 means the spec's containerConcurrency, or no limit when
	// that is 0 as well.
	Capacity int
	// Cores is each pod's CPU, in cores, and its CPU request, which a
	// percentage cpu-target is taken of: a pod serving Capacity requests
	// at full speed uses all of them. 0 means 1.
	Cores float64
}

// Config is one simulation's settings.
type Config struct {
	// Spec is the service's autoscaling configuration; its Class picks
	// the policy and its ContainerConcurrency is the pods' hard limit.
	Spec autoscaling.Spec
	// Tick is how often the engine decides (the autoscaler's
	// tick-interval).
	Tick time.Duration
	// MetricsResolution is how often the CPU the engine sees is
	// published: every second (0 or 1s), as the queue-proxy reports it,
	// or, in whole seconds above that, each window of this length's
	// average, given for each of its seconds when the window closes, as
	// metrics-server serves the HPA (15s by default there).
	MetricsResolution time.Duration
	// Rules are the executor's rules the decisions are applied by; zero
	// fields take the autoscaler's defaults (plan.Rules.WithDefaults).
	Rules plan.Rules
	Pods  PodModel
	// QueueLimit bounds the activator's queue and each queue-proxy's: a
	// request arriving at a full queue is rejected. 0 means unbounded.
	QueueLimit int
	// RouteDelay is how long a change of route (through the activator, or
	// straight to the pods) takes to take effect after a decision asks
	// for it. A service with no ready pod is reached through the
	// activator at once, whatever the route.
	RouteDelay time.Duration
	// InitialReady pods are running and ready at time 0, as for a service
	// that was already serving when the autoscaler started.
	InitialReady int
	// Duration is how long requests arrive: later ones are dropped. 0
	// means until the Source ends. Either way the simulation goes on
	// until the requests still in the system have finished, to the next
	// whole second.
	Duration time.Duration
	// Seed seeds the pods' startup jitter (the traffic has its own).
	Seed uint64
}

// DrainLimit bounds how long a simulation goes on after its last arrival
// for requests that never find a pod (a configuration that never scales
// up): they are reported as unfinished.
const DrainLimit = time.Hour

// Second is one row of the timeline: the second [T, T+1) s.
type Second struct {
	T int
	// Arrivals counts the requests that arrived, Rejected those of them
	// turned away by a full queue.
	Arrivals, Rejected int
	// Concurrency is the sample given to the engine for this second: the
	// time-weighted average number of requests in the system.
	Concurrency float64
	// CPU is what the pods ready at the second's end used in it, in cores
	// (HasCPU: some pod was ready and the pods have a finite capacity).
	CPU    float64
	HasCPU bool
	// CPUSeen is the CPU given to the engine at the second's end: the
	// second's own, or with a MetricsResolution above a second, on the
	// second that closes a window, the window's average, given for each
	// of its seconds. HasCPUSeen is false when none was given.
	CPUSeen    float64
	HasCPUSeen bool
	// Stable and PanicLoad are the observed values (of the spec's metric)
	// the last decision saw.
	Stable, PanicLoad float64
	// Desired, Scale, EBC and Panic are from the last decision made by
	// the end of the second.
	Desired, Scale int
	EBC            float64
	Panic          bool
	// Ready and Pods count the pods at the end of the second: ready ones,
	// and all that exist (starting, ready and stopping). Serving counts
	// those with a request in service then (ready, or draining).
	Ready, Pods, Serving int
	// ActivatorInPath says traffic reached the service through the
	// activator at the end of the second: the route in effect, or no pod
	// ready.
	ActivatorInPath bool
	// ActivatorQueue and PodQueue are the requests waiting at the end of
	// the second: at the activator, and at the pods' queue-proxies.
	ActivatorQueue, PodQueue int
	// InService is the number of requests being served.
	InService int
}

// Summary is what a simulation cost and how requests fared.
type Summary struct {
	Class autoscaling.Class `json:"class"`
	// Duration is the simulated time, whole seconds.
	Duration time.Duration `json:"duration_ns"`

	Requests   int `json:"requests"`
	Completed  int `json:"completed"`
	Rejected   int `json:"rejected"`
	Unfinished int `json:"unfinished"`

	// PodSeconds is the integral of the number of existing pods — from
	// being asked for until stopped and drained — over time: what the
	// service would be billed. ReadyPodSeconds counts ready pods only.
	PodSeconds      float64 `json:"pod_seconds"`
	ReadyPodSeconds float64 `json:"ready_pod_seconds"`
	// Where the pod-seconds went: StartingPodSeconds while pods started
	// (asked for, not ready yet), ServingPodSeconds while they had at
	// least one request in service (ready, or draining before they
	// stop), IdlePodSeconds while ready with none. The three sum to
	// PodSeconds: a policy's waste is the starting and idle shares.
	StartingPodSeconds float64 `json:"starting_pod_seconds"`
	ServingPodSeconds  float64 `json:"serving_pod_seconds"`
	IdlePodSeconds     float64 `json:"idle_pod_seconds"`
	MaxPods            int     `json:"max_pods"`
	MaxReady           int     `json:"max_ready"`
	PodStarts          int     `json:"pod_starts"`
	// OraclePodSeconds is the clairvoyant bound's pod-seconds on the same
	// traffic (RunOracle), when the caller computed it: PodSeconds over it
	// is how many times the least possible this run spent. 0: unknown.
	OraclePodSeconds float64 `json:"oracle_pod_seconds,omitempty"`
	// OracleMaxPods is the most pods the bound had at once, beside
	// OraclePodSeconds. 0: unknown.
	OracleMaxPods int `json:"oracle_max_pods,omitempty"`

	// ColdStarts counts requests that arrived when no pod was ready.
	ColdStarts int `json:"cold_starts"`
	// Waited counts requests that waited for a pod slot (at the activator
	// or a queue-proxy); the Wait percentiles are over those requests.
	Waited  int           `json:"waited"`
	WaitP50 time.Duration `json:"wait_p50_ns"`
	WaitP99 time.Duration `json:"wait_p99_ns"`
	WaitMax time.Duration `json:"wait_max_ns"`

	// Latency is from arrival to completion over completed requests:
	// wait plus (possibly shared, so stretched) service.
	LatencyMean time.Duration `json:"latency_mean_ns"`
	LatencyP50  time.Duration `json:"latency_p50_ns"`
	LatencyP99  time.Duration `json:"latency_p99_ns"`
	LatencyMax  time.Duration `json:"latency_max_ns"`

	Ticks int `json:"ticks"`
	Pokes int `json:"pokes"`
	// PanicSeconds counts the timeline's seconds that ended in panic mode.
	PanicSeconds int `json:"panic_seconds"`

	// Reaction is how the run answered a rise of load, when the caller
	// measured it (Result.React).
	Reaction *Reaction `json:"reaction,omitempty"`
}

// Result is a simulation's outcome.
type Result struct {
	Summary  Summary
	Timeline []Second
}

// Run simulates cfg with the requests of src and returns the outcome. It
// stops early, with ctx's error, when ctx is done.
func Run(ctx context.Context, cfg Config, src Source) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := newSim(cfg, src)
	if err := s.run(ctx); err != nil {
		return nil, err
	}
	return s.result(), nil
}

// The names of Config's settings in errors: those of `swell sim`'s flags.
const (
	KeyTick              = "tick-interval"
	KeyPodStartup        = "pod-startup"
	KeyPodStartupJitter  = "pod-startup-jitter"
	KeyPodCapacity       = "pod-capacity"
	KeyPodCores          = "pod-cores"
	KeyMetricsResolution = "metrics-resolution"
	KeyQueueLimit        = "queue-limit"
	KeyRouteDelay        = "route-delay"
	KeyInitialReady      = "initial-ready"
	KeyDuration          = "duration"
)

// Validate reports every setting out of bounds at once, each as an
// *autoscaling.Error whose Key is one of the Key constants, joined with
// the spec's own problems.
func (c Config) Validate() error {
	var errs []error
	if err := c.Spec.Validate(); err != nil {
		errs = append(errs, err)
	}
	bad := func(key, value, problem, accepted string) {
		errs = append(errs, &autoscaling.Error{Key: key, Name: key, Value: value, Problem: problem, Accepted: accepted})
	}
	durations := []struct {
		key      string
		d        time.Duration
		accepted string
	}{
		{KeyPodStartup, c.Pods.StartupDelay, "a duration of 0 or more, such as 2s"},
		{KeyPodStartupJitter, c.Pods.StartupJitter, "a duration of 0 or more, such as 1s"},
		{KeyRouteDelay, c.RouteDelay, "a duration of 0 or more, such as 500ms"},
		{KeyDuration, c.Duration, "0 (until the traffic ends) or a positive duration, such as 30m"},
	}
	if c.Tick <= 0 {
		bad(KeyTick, c.Tick.String(), "is not positive", "a positive duration, such as 2s")
	}
	for _, d := range durations {
		if d.d < 0 {
			bad(d.key, d.d.String(), "is negative", d.accepted)
		}
	}
	counts := []struct {
		key      string
		n        int
		accepted string
	}{
		{KeyPodCapacity, c.Pods.Capacity, "0 (the container concurrency, or unlimited) or a number of requests"},
		{KeyQueueLimit, c.QueueLimit, "0 (unbounded) or a number of requests"},
		{KeyInitialReady, c.InitialReady, "a number of pods of 0 or more"},
	}
	for _, n := range counts {
		if n.n < 0 {
			bad(n.key, strconv.Itoa(n.n), "is negative", n.accepted)
		}
	}
	if c := c.Pods.Cores; c < 0 || math.IsNaN(c) || math.IsInf(c, 0) {
		bad(KeyPodCores, strconv.FormatFloat(c, 'g', -1, 64), "is not a number of cores", "0 (one core) or a number of cores above 0, such as 0.5 or 2")
	}
	if r := c.MetricsResolution; r < 0 || r%time.Second != 0 || r > maxResolution {
		bad(KeyMetricsResolution, r.String(), "is out of range", "a whole number of seconds from 1s (the queue-proxy's, the default) to 10m, such as 15s (metrics-server's)")
	}
	// Only what the pods model can be scaled on.
	for _, m := range c.Spec.Votes() {
		if m == autoscaling.MetricMemory || m == autoscaling.MetricGauge {
			bad(autoscaling.KeyMetric, string(m), "is not simulated: the simulated pods have CPU, but no memory and no app gauge",
				"concurrency or rps, and cpu, such as concurrency,cpu")
		}
	}
	// A pod's CPU is the busy share of its full-speed slots: without a
	// number of slots there is no share. (The pods' CPU request is their
	// cores, so a percentage cpu-target always has one to be taken of.)
	if c.Spec.VotesWith(autoscaling.MetricCPU) && c.capacity() == 0 {
		bad(KeyPodCapacity, "0", "(with no container concurrency either) leaves a pod no full speed to take its CPU as a share of, and the metric lists cpu",
			"the number of requests a pod serves at full speed on its cores, each using that share of them, or a container concurrency")
	}
	return errors.Join(errs...)
}

// maxResolution bounds MetricsResolution: a window longer than ten minutes
// is a typo, not a metrics pipeline.
const maxResolution = 10 * time.Minute

// capacity is how many requests a pod serves at full speed; 0 for no
// limit.
func (c *Config) capacity() int {
	if c.Pods.Capacity > 0 {
		return c.Pods.Capacity
	}
	return c.Spec.ContainerConcurrency
}

// cores is each pod's CPU, in cores.
func (c *Config) cores() float64 {
	if c.Pods.Cores > 0 {
		return c.Pods.Cores
	}
	return 1
}

// resolution is MetricsResolution in whole seconds, at least one.
func (c *Config) resolution() int { return max(1, int(c.MetricsResolution/time.Second)) }

// podState is where a pod is in its life.
type podState uint8

const (
	podStarting podState = iota
	podReady
	podStopping
	podGone
)

// pod is a simulated pod. Its requests in service share it by processor
// sharing, tracked as the service each has received ("served", in
// nanoseconds of full-speed work): a request finishes when served reaches
// its tag, the served value at its start plus its work. served grows at
// the pod's current rate per request, so one number advances every
// request at once and the next to finish is the smallest tag.
type pod struct {
	id      int
	state   podState
	active  requestHeap
	queue   fifo
	served  float64
	at      time.Duration
	version uint64
	// busy is the slots kept busy since the second began, integrated to
	// busyAt (slot-nanoseconds): the pod's CPU is busy × cores/capacity.
	busy   float64
	busyAt time.Duration
}

// request is a request in the simulation.
type request struct {
	arrival time.Duration
	work    time.Duration
	tag     float64
	// viaActivator says the request went through the activator and counts
	// as pending there until it finishes.
	viaActivator bool
}

type sim struct {
	cfg      Config
	cc       int // the pods' hard limit, 0 for none
	capacity int // requests a pod serves at full speed, 0 for no limit
	eng      *engine.Service
	rules    plan.Rules
	mem      plan.Memory
	actions  [2]plan.Action
	src      Source
	next     Request
	srcDone  bool
	horizon  time.Duration
	jitter   *rand.Rand

	now    time.Duration
	events eventHeap

	pods                []*pod // in order of creation, without gone ones
	podSeq              int
	alive, live, ready  int // existing; starting or ready; ready
	scale               int // the last scale applied
	activator           fifo
	activatorHeld       int // queued at the activator or in service through it
	inSystem, inService int
	podQueued           int

	routeActivator bool // the route in effect
	routeWant      bool // the route last asked for
	routeVersion   uint64

	// last is the latest decision; the executor applies it until the next.
	last    decider.Decision
	decided bool
	// recheckAt is when the executor looks at the service again, if
	// recheckVersion is the version of the event scheduled for it.
	recheckAt      time.Duration
	recheckVersion uint64
	// zeroWithRequests counts scales to zero applied with requests in the
	// system, which no decision may do; tests check it stays 0.
	zeroWithRequests int

	// The current second's accumulators.
	secArea     float64 // requests in the system × nanoseconds
	secArrivals int
	secRejected int
	secPodArea  float64 // requests at the pods × nanoseconds
	secPodIn    int     // requests that reached a pod

	// The current metrics window, above a second's resolution: the sum of
	// its one-second CPU samples, and whether a pod was ready in any.
	cpuWin    float64
	cpuWinHas bool

	free      []*request
	timeline  []Second
	sum       Summary
	podArea   float64
	readyArea float64
	// serving are the pods with a request in service, stopping the pods
	// draining theirs before they go (each serving); servingArea their
	// integral, as podArea's.
	serving, stopping int
	servingArea       float64
	stoppingArea      float64
	waits             []time.Duration
	latencies         []time.Duration
	latSum            float64
}

func newSim(cfg Config, src Source) *sim {
	s := &sim{
		cfg:     cfg,
		cc:      cfg.Spec.ContainerConcurrency,
		rules:   cfg.Rules.WithDefaults(),
		src:     src,
		horizon: cfg.Duration,
		jitter:  rand.New(rand.NewPCG(cfg.Seed, 0x9057_ab1e)),
	}
	s.capacity = cfg.capacity()
	// The pods' CPU request is their cores: Validate checked that the
	// spec takes it.
	if spec, err := cfg.Spec.WithRequests(cfg.cores(), 0); err == nil {
		s.cfg.Spec = spec
	}
	s.sum.Class = cfg.Spec.Class
	return s
}

// at is the virtual clock's current time.
func (s *sim) at() time.Time { return Epoch.Add(s.now) }

func (s *sim) pull() {
	r, ok := s.src.Next()
	if ok && s.cfg.Duration > 0 && r.Arrival >= s.cfg.Duration {
		ok = false
	}
	if !ok {
		s.srcDone = true
		return
	}
	if r.Arrival < s.next.Arrival {
		// Sources promise order; clamp rather than run time backwards.
		r.Arrival = s.next.Arrival
	}
	s.next = r
	s.horizon = max(s.horizon, r.Arrival)
}

func (s *sim) run(ctx context.Context) error {
	s.eng = engine.New(s.cfg.Spec, Epoch, s.cfg.InitialReady)
	for range s.cfg.InitialReady {
		p := s.newPod()
		p.state = podReady
		s.ready++
	}
	s.scale = s.cfg.InitialReady
	s.routeActivator = s.cfg.InitialReady == 0
	s.routeWant = s.routeActivator
	s.events.push(event{at: 0, kind: evTick})
	s.events.push(event{at: time.Second, kind: evSecond})
	s.pull()
	for {
		ev, ok := s.events.peek()
		if !s.srcDone && (!ok || s.next.Arrival < ev.at) {
			s.advance(s.next.Arrival)
			s.arrive(s.next)
			s.pull()
			continue
		}
		if !ok {
			// The second event is always scheduled until the end.
			return errors.New("sim: no more events")
		}
		e := s.events.pop()
		s.advance(e.at)
		switch e.kind {
		case evSecond:
			if s.closeSecond() {
				return nil
			}
			if len(s.timeline)%64 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
		case evTick:
			s.sum.Ticks++
			s.apply(s.eng.Decide(s.inputs(false)))
			s.events.push(event{at: s.now + s.cfg.Tick, kind: evTick})
		case evCompletion:
			s.complete(e.pod, e.version)
		case evReady:
			if s.podReady(e.pod) {
				s.recheck() // the backend's change resyncs the executor
			}
		case evRoute:
			if e.version == s.routeVersion && s.routeActivator != s.routeWant {
				s.routeActivator = s.routeWant
				s.recheck()
			}
		case evRecheck:
			if e.version == s.recheckVersion {
				s.recheck()
			}
		}
	}
}

// advance moves the clock to t, integrating what is measured over time.
func (s *sim) advance(t time.Duration) {
	if dt := float64(t - s.now); dt > 0 {
		s.secArea += float64(s.inSystem) * dt
		s.secPodArea += float64(s.inService+s.podQueued) * dt
		s.podArea += float64(s.alive) * dt
		s.readyArea += float64(s.ready) * dt
		s.servingArea += float64(s.serving) * dt
		s.stoppingArea += float64(s.stopping) * dt
	}
	s.now = t
}

// closeSecond ends the second that ends now: it records the second's
// sample and timeline row, and reports whether the simulation is over.
func (s *sim) closeSecond() (done bool) {
	conc := s.secArea / float64(time.Second)
	cpu, hasCPU := s.cpuSecond()
	// The collector records every service it knows each second, at the
	// second of its round — the end of the second measured — so a tick
	// right after reads it; zeros included, which keep the window's
	// history going.
	sample := engine.Sample{Time: s.at(), Concurrency: conc, RPS: float64(s.secArrivals),
		PodConcurrency: s.secPodArea / float64(time.Second), PodRPS: float64(s.secPodIn)}
	seen, hasSeen := cpu, hasCPU
	if s.cfg.resolution() == 1 {
		sample.CPU, sample.HasCPU = cpu, hasCPU
	}
	s.eng.Record(sample)
	if s.cfg.resolution() > 1 {
		seen, hasSeen = s.publishCPU(cpu, hasCPU)
	}
	d := &s.last
	row := Second{
		T:               len(s.timeline),
		Arrivals:        s.secArrivals,
		Rejected:        s.secRejected,
		Concurrency:     conc,
		CPU:             cpu,
		HasCPU:          hasCPU,
		CPUSeen:         seen,
		HasCPUSeen:      hasSeen,
		Stable:          d.Stable,
		PanicLoad:       d.Panic,
		Desired:         d.Desired,
		Scale:           d.Scale,
		EBC:             d.ExcessBurstCapacity,
		Panic:           d.InPanic,
		Ready:           s.ready,
		Pods:            s.alive,
		Serving:         s.serving,
		ActivatorInPath: s.throughActivator(),
		ActivatorQueue:  s.activator.len(),
		PodQueue:        s.podQueued,
		InService:       s.inService,
	}
	s.timeline = append(s.timeline, row)
	if row.Panic {
		s.sum.PanicSeconds++
	}
	s.secArea, s.secArrivals, s.secRejected, s.secPodArea, s.secPodIn = 0, 0, 0, 0, 0
	if s.srcDone && s.now >= s.horizon && (s.inSystem == 0 || s.now >= s.horizon+DrainLimit) {
		return true
	}
	s.events.push(event{at: s.now + time.Second, kind: evSecond})
	return false
}

// cpuSecond is the CPU the pods ready now used in the second ending now,
// in cores, as their queue-proxies report it and the collector sums it;
// ok is false when no pod is ready or the pods' capacity is unlimited. It
// starts every pod's next second.
func (s *sim) cpuSecond() (cpu float64, ok bool) {
	var busy float64
	for _, p := range s.pods {
		s.account(p)
		if p.state == podReady {
			busy += p.busy
		}
		p.busy = 0
	}
	if s.ready == 0 || s.capacity == 0 {
		return 0, false
	}
	return busy / float64(time.Second) * s.cfg.cores() / float64(s.capacity), true
}

// publishCPU takes the second's CPU into the metrics window, the
// resolution being above a second, and returns what it gave the engine
// now. When the window closes — windows end at
// multiples of the resolution from 0 — the engine gets its average over
// all its seconds (one with no pod ready counts as none used) for each of
// them, as metrics-server publishes a pod's CPU over its last scrape
// interval: until then the engine knows nothing of those seconds' CPU,
// and its windows end at the last second it knows. A window read at its
// close over the resolution's length is thus the value published, which
// is all the Kubernetes HPA reads.
func (s *sim) publishCPU(cpu float64, ok bool) (float64, bool) {
	n := s.cfg.resolution()
	s.cpuWin += cpu
	s.cpuWinHas = s.cpuWinHas || ok
	if (len(s.timeline)+1)%n != 0 {
		return 0, false
	}
	avg, has := s.cpuWin/float64(n), s.cpuWinHas
	s.cpuWin, s.cpuWinHas = 0, false
	if !has {
		return 0, false
	}
	for k := n - 1; k >= 0; k-- {
		s.eng.Record(engine.Sample{Time: s.at().Add(-time.Duration(k) * time.Second), CPU: avg, HasCPU: true})
	}
	return avg, true
}

func (s *sim) throughActivator() bool { return s.routeActivator || s.ready == 0 }

// status is the service's state as a backend would report it to the
// autoscaler: the replicas asked for, the ready pods, the route in effect
// (the activator whenever no pod is ready, as a routed Service's endpoints
// are never left empty) and the route asked for.
func (s *sim) status() plan.Status {
	st := plan.Status{Desired: s.scale, Ready: s.ready, Route: plan.RoutePods, Requested: plan.RoutePods}
	if s.throughActivator() {
		st.Route = plan.RouteActivator
	}
	if s.routeWant {
		st.Requested = plan.RouteActivator
	}
	return st
}

func (s *sim) inputs(poked bool) engine.Inputs {
	return engine.Inputs{
		Now:              s.at(),
		Ready:            s.ready,
		ActivatorInPath:  s.status().ActivatorInPath(),
		ActivatorPending: s.activatorHeld,
		Poked:            poked,
	}
}

// apply hands a decision to the executor, which applies it at once.
func (s *sim) apply(d decider.Decision) {
	s.last, s.decided = d, true
	s.recheck()
}

// recheck is one reconcile of the executor: the latest decision applied to
// the state as it is now, by the rules, with the actions they return made
// at once and the next look scheduled when they ask for one.
func (s *sim) recheck() {
	if !s.decided {
		return
	}
	now := s.at()
	step := s.rules.Next(&s.mem, s.status(), s.last, now, false, s.actions[:0])
	for _, a := range step.Actions {
		switch a.Kind {
		case plan.SetRoute:
			s.setRoute(a.ToRoute == plan.RouteActivator)
		case plan.SetScale:
			s.scaleTo(a.To)
		}
		s.mem.Done(a, now)
	}
	if step.After > 0 {
		at := s.now + step.After
		// As the executor's timer: an earlier look already scheduled stands.
		if s.recheckAt > s.now && s.recheckAt <= at {
			return
		}
		s.recheckVersion++
		s.recheckAt = at
		s.events.push(event{at: at, kind: evRecheck, version: s.recheckVersion})
	}
}

func (s *sim) setRoute(viaActivator bool) {
	if s.cfg.RouteDelay == 0 {
		s.routeActivator, s.routeWant = viaActivator, viaActivator
		return
	}
	if viaActivator == s.routeWant {
		return
	}
	s.routeWant = viaActivator
	s.routeVersion++
	s.events.push(event{at: s.now + s.cfg.RouteDelay, kind: evRoute, version: s.routeVersion})
}

// arrive takes a request arriving now.
func (s *sim) arrive(in Request) {
	s.sum.Requests++
	s.secArrivals++
	r := s.newRequest(in)
	cold := s.ready == 0
	if cold {
		s.sum.ColdStarts++
	}
	if s.throughActivator() {
		s.toActivator(r)
	} else {
		s.toPods(r)
	}
	// The activator pokes the autoscaler for a service it holds a request
	// for with no pod ready and none on the way: the decision is
	// immediate rather than up to a tick away. Once pods are on the way,
	// further requests just wait for them.
	if cold && s.scale == 0 {
		s.sum.Pokes++
		s.apply(s.eng.Decide(s.inputs(true)))
	}
}

func (s *sim) newRequest(in Request) *request {
	var r *request
	if n := len(s.free); n > 0 {
		r = s.free[n-1]
		s.free = s.free[:n-1]
	} else {
		r = new(request)
	}
	*r = request{arrival: in.Arrival, work: in.Work}
	return r
}

func (s *sim) reject(r *request) {
	s.sum.Rejected++
	s.secRejected++
	s.free = append(s.free, r)
}

// toActivator takes a request through the activator: straight on to a pod
// with a free slot if none is waiting before it, else into its queue.
func (s *sim) toActivator(r *request) {
	r.viaActivator = true
	if s.activator.len() == 0 {
		if p := s.freePod(); p != nil {
			s.inSystem++
			s.activatorHeld++
			s.secPodIn++
			s.start(p, r)
			s.schedule(p)
			return
		}
	}
	if s.cfg.QueueLimit > 0 && s.activator.len() >= s.cfg.QueueLimit {
		s.reject(r)
		return
	}
	s.inSystem++
	s.activatorHeld++
	s.activator.push(r)
}

// toPods sends a request straight to the ready pod holding the fewest
// requests, as a least-request load balancer would; it waits in that
// pod's queue-proxy if the pod is full.
func (s *sim) toPods(r *request) {
	var best *pod
	for _, p := range s.pods {
		if p.state == podReady && (best == nil || len(p.active)+p.queue.len() < len(best.active)+best.queue.len()) {
			best = p
		}
	}
	s.secPodIn++
	if s.hasSlot(best) {
		s.inSystem++
		s.start(best, r)
		s.schedule(best)
		return
	}
	if s.cfg.QueueLimit > 0 && best.queue.len() >= s.cfg.QueueLimit {
		s.reject(r)
		return
	}
	s.inSystem++
	s.podQueued++
	best.queue.push(r)
}

func (s *sim) hasSlot(p *pod) bool { return s.cc == 0 || len(p.active) < s.cc }

// freePod returns the ready pod with a free slot serving the fewest
// requests (the oldest among equals), or nil.
func (s *sim) freePod() *pod {
	var best *pod
	for _, p := range s.pods {
		if p.state == podReady && s.hasSlot(p) && (best == nil || len(p.active) < len(best.active)) {
			best = p
		}
	}
	return best
}

// rate is the speed at which each of n requests in service at one pod
// progresses, as a fraction of full speed.
func (s *sim) rate(n int) float64 {
	if s.capacity == 0 || n <= s.capacity {
		return 1
	}
	return float64(s.capacity) / float64(n)
}

// catchUp brings a pod's served counter and its CPU to now.
func (s *sim) catchUp(p *pod) {
	if n := len(p.active); n > 0 && s.now > p.at {
		p.served += float64(s.now-p.at) * s.rate(n)
	}
	p.at = s.now
	s.account(p)
}

// account brings a pod's busy slots to now. It has a clock of its own so
// that closing a second does not move served, which completions are
// planned from.
func (s *sim) account(p *pod) {
	if n := len(p.active); n > 0 && s.now > p.busyAt {
		slots := n
		if s.capacity > 0 {
			slots = min(n, s.capacity)
		}
		p.busy += float64(s.now-p.busyAt) * float64(slots)
	}
	p.busyAt = s.now
}

// start puts a request in service at p. The caller reschedules p.
func (s *sim) start(p *pod, r *request) {
	s.catchUp(p)
	if wait := s.now - r.arrival; wait > 0 {
		s.waits = append(s.waits, wait)
	}
	r.tag = p.served + float64(r.work)
	if len(p.active) == 0 {
		s.serving++
	}
	p.active.push(r)
	s.inService++
}

// schedule plans p's next completion, superseding the one planned before.
func (s *sim) schedule(p *pod) {
	p.version++
	if len(p.active) == 0 {
		return
	}
	left := p.active[0].tag - p.served
	dt := time.Duration(math.Ceil(max(0, left) / s.rate(len(p.active))))
	s.events.push(event{at: s.now + dt, kind: evCompletion, pod: p, version: p.version})
}

// complete finishes p's requests that are done, refills its slots and
// plans its next completion.
func (s *sim) complete(p *pod, version uint64) {
	if version != p.version || p.state == podGone {
		return
	}
	s.catchUp(p)
	// Rounding the completion time up makes served reach the tag, up to
	// floating-point error far below a nanosecond of work.
	for len(p.active) > 0 && p.active[0].tag <= p.served+0.5 {
		r := p.active.pop()
		s.inSystem--
		s.inService--
		if r.viaActivator {
			s.activatorHeld--
		}
		lat := s.now - r.arrival
		s.latencies = append(s.latencies, lat)
		s.latSum += float64(lat)
		s.sum.Completed++
		s.free = append(s.free, r)
		if len(p.active) == 0 {
			s.serving--
		}
	}
	s.fill(p)
	s.schedule(p)
	if p.state == podStopping && len(p.active) == 0 {
		s.remove(p)
	}
}

// fill gives p's free slots to the requests waiting in its queue-proxy,
// then, if it still takes new work, to those waiting at the activator.
func (s *sim) fill(p *pod) {
	for s.hasSlot(p) {
		switch {
		case p.queue.len() > 0:
			s.podQueued--
			s.start(p, p.queue.pop())
		case p.state == podReady && s.activator.len() > 0:
			s.secPodIn++
			s.start(p, s.activator.pop())
		default:
			return
		}
	}
}

func (s *sim) newPod() *pod {
	s.podSeq++
	p := &pod{id: s.podSeq, at: s.now, busyAt: s.now}
	s.pods = append(s.pods, p)
	s.alive++
	s.live++
	s.sum.PodStarts++
	s.sum.MaxPods = max(s.sum.MaxPods, s.alive)
	return p
}

// podReady makes p ready and reports whether it was still wanted.
func (s *sim) podReady(p *pod) bool {
	if p.state != podStarting {
		return false // stopped before it was ready
	}
	p.state = podReady
	s.ready++
	s.sum.MaxReady = max(s.sum.MaxReady, s.ready)
	s.fill(p)
	s.schedule(p)
	return true
}

// scaleTo starts or stops pods so that n are starting or ready.
func (s *sim) scaleTo(n int) {
	s.scale = n
	if n == 0 && s.inSystem > 0 {
		s.zeroWithRequests++
	}
	for s.live < n {
		p := s.newPod()
		delay := s.cfg.Pods.StartupDelay
		if j := s.cfg.Pods.StartupJitter; j > 0 {
			delay += time.Duration(s.jitter.Int64N(int64(j) + 1))
		}
		s.events.push(event{at: s.now + delay, kind: evReady, pod: p})
	}
	for s.live > n {
		s.stopOne()
	}
}

// stopOne stops a pod the way a ReplicaSet picks one to delete: a pod not
// yet ready before a ready one, the newest first.
func (s *sim) stopOne() {
	var victim *pod
	for _, state := range []podState{podStarting, podReady} {
		for i := len(s.pods) - 1; i >= 0 && victim == nil; i-- {
			if s.pods[i].state == state {
				victim = s.pods[i]
			}
		}
	}
	s.live--
	if victim.state == podReady {
		s.ready--
		if len(victim.active) == 0 {
			s.remove(victim)
			return
		}
		victim.state = podStopping
		s.stopping++
		return
	}
	s.remove(victim)
}

// remove ends a pod's existence.
func (s *sim) remove(p *pod) {
	if p.state == podStopping {
		s.stopping--
	}
	p.state = podGone
	p.version++
	s.alive--
	s.pods = slices.DeleteFunc(s.pods, func(q *pod) bool { return q == p })
}

func (s *sim) result() *Result {
	sum := s.sum
	sum.Duration = s.now
	sum.Unfinished = s.inSystem
	sum.PodSeconds = s.podArea / float64(time.Second)
	sum.ReadyPodSeconds = s.readyArea / float64(time.Second)
	// Draining pods are not ready but serve: they count as serving.
	sum.ServingPodSeconds = s.servingArea / float64(time.Second)
	sum.StartingPodSeconds = (s.podArea - s.readyArea - s.stoppingArea) / float64(time.Second)
	sum.IdlePodSeconds = (s.readyArea + s.stoppingArea - s.servingArea) / float64(time.Second)
	sum.Waited = len(s.waits)
	slices.Sort(s.waits)
	sum.WaitP50, sum.WaitP99 = percentile(s.waits, 0.50), percentile(s.waits, 0.99)
	if n := len(s.waits); n > 0 {
		sum.WaitMax = s.waits[n-1]
	}
	slices.Sort(s.latencies)
	sum.LatencyP50, sum.LatencyP99 = percentile(s.latencies, 0.50), percentile(s.latencies, 0.99)
	if n := len(s.latencies); n > 0 {
		sum.LatencyMax = s.latencies[n-1]
		sum.LatencyMean = time.Duration(math.Round(s.latSum / float64(n)))
	}
	return &Result{Summary: sum, Timeline: s.timeline}
}

// percentile is the nearest-rank percentile of sorted: the smallest value
// at least a fraction p of the values are at or below.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}
