// Package engine is one service's decision core: it records the service's
// per-second load samples into its metric window and makes decisions from
// them on demand. It is pure — the caller supplies every time and every
// input — and owned by its caller: the autoscaler's loop holds one Service
// per service and calls it from its one goroutine, `swell sim` drives one
// on a virtual clock, with the same code.
package engine

import (
	"time"

	"github.com/swell-run/swell/autoscaler/decider"
	"github.com/swell-run/swell/autoscaler/window"
	"github.com/swell-run/swell/pkg/autoscaling"
)

// Sample is one source's contribution to a service's load in one second:
// service-wide concurrency (time-weighted average) and requests per second,
// and what the pods measured of the app: CPU in cores, memory in bytes and
// the app gauge, each summed over the pods that reported it (Has* say any
// did). Several samples for the same second add up.
type Sample struct {
	Time        time.Time
	Concurrency float64
	RPS         float64
	// PodConcurrency and PodRPS are the pods' part of Concurrency and RPS:
	// the requests they held and got, whether or not through an activator,
	// without those the activators queue. Their ratio is the time a
	// request spends in a pod (Little's law), which a policy that sizes
	// by work learns; a queue at the activators would make it the wait.
	PodConcurrency, PodRPS float64

	CPU, Memory, Gauge          float64
	HasCPU, HasMemory, HasGauge bool
}

// Inputs are what a decision needs besides the recorded samples.
type Inputs struct {
	// Now is the decision's time; the windows are read as of it.
	Now time.Time
	// Ready is the number of the service's ready pods.
	Ready int
	// ActivatorInPath says the service's traffic is confirmed to go through
	// the activator; scale to zero waits for it.
	ActivatorInPath bool
	// ActivatorPending is the number of requests held at the activators;
	// while it is above zero the service never goes to zero.
	ActivatorPending int
	// Poked says a request just arrived at the activator for the service:
	// the decision is made out of the tick, to wake it from zero.
	Poked bool
	// Recent, when HasRecent, is the service's load over the last fraction
	// of a second, read from the frames its pods pushed as it rose sharply
	// (concurrency and requests per second, as the samples count them).
	// The decision, made out of the tick, reads it as the panic window's
	// newest second will read once it is recorded: the panic window's
	// average (and its arrivals') is taken as at least it. So a step is
	// decided on within a fraction of a second, not once the one-second
	// samples have filled enough of the panic window; a fall is left to
	// the windows.
	RecentConcurrency, RecentRPS float64
	HasRecent                    bool
	// RecentInPods is the part of RecentConcurrency the pods hold, their
	// own and proxied (decider.Observation.InPods).
	RecentInPods float64
}

// Service is one service's window, decider and newest second of load. It
// is not safe for concurrent use: its owner serialises every call.
type Service struct {
	spec autoscaling.Spec
	win  *window.Window
	// arrivals is a window of requests per second beside a concurrency
	// window, for a policy that reads both (adaptive); nil otherwise.
	arrivals *window.Window
	dec      *decider.Decider
	// extra are the windows of the metrics beyond requests the spec
	// lists (resources.go).
	extra extraMetrics
	// last is the newest second's load, both metrics, summed over the
	// samples of that second: for display, not for decisions.
	last Sample
	// served and servedRequests sum the pods' concurrency and requests
	// over the seconds recorded since the last decision, for a policy that
	// reads arrivals (decider.Observation.Served).
	served, servedRequests float64
}

// New returns the core of a service first seen now. ready is the number of
// pods already running (an autoscaler restart): the decider then starts by
// holding them. With ready == 0 the service is taken as new and starts at
// its initial scale (decider.New).
func New(spec autoscaling.Spec, now time.Time, ready int) *Service {
	s := withArrivals(&Service{spec: spec, win: window.New(spec.StableWindow), dec: decider.New(spec, now, ready)})
	s.extra.setSpec(&s.spec, nil)
	return s
}

// withArrivals gives s its arrivals window when its spec reads one.
func withArrivals(s *Service) *Service {
	switch {
	case !decider.ReadsArrivals(&s.spec):
		s.arrivals = nil
	case s.arrivals == nil:
		s.arrivals = window.New(s.spec.StableWindow)
	default:
		s.arrivals.Resize(s.spec.StableWindow)
	}
	return s
}

// Resume returns the core of a service that was already autoscaled before
// (an autoscaler restart, a new leader), with scale pods asked of the
// backend: the decider holds them, and a service at zero stays at zero
// until traffic arrives rather than waking to its initial scale
// (decider.Resume).
func Resume(spec autoscaling.Spec, now time.Time, scale int) *Service {
	s := withArrivals(&Service{spec: spec, win: window.New(spec.StableWindow), dec: decider.Resume(spec, now, scale)})
	s.extra.setSpec(&s.spec, nil)
	return s
}

// Spec returns the service's spec.
func (s *Service) Spec() autoscaling.Spec { return s.spec }

// SetSpec applies a new spec, keeping the history and decider state where
// they still apply: a change of metric starts the window afresh (the
// history is of the other metric), a change of stable window resizes it
// keeping the newest seconds, and the decider keeps its panic episode and
// delay window (decider.SetSpec).
func (s *Service) SetSpec(spec autoscaling.Spec) {
	switch {
	case spec.Metric != s.spec.Metric:
		s.win = window.New(spec.StableWindow)
	case spec.StableWindow != s.spec.StableWindow:
		s.win.Resize(spec.StableWindow)
	}
	s.dec.SetSpec(spec)
	old := s.spec
	s.spec = spec
	withArrivals(s)
	s.extra.setSpec(&s.spec, &old)
}

// Record adds a load sample to the service's window.
func (s *Service) Record(sm Sample) {
	v := sm.Concurrency
	if s.spec.Metric == autoscaling.MetricRPS {
		v = sm.RPS
	}
	s.win.Record(sm.Time, v)
	if s.arrivals != nil {
		s.arrivals.Record(sm.Time, sm.RPS)
		s.served += max(sm.PodConcurrency, 0)
		s.servedRequests += max(sm.PodRPS, 0)
	}
	s.extra.record(&s.spec, &sm)
	sec := sm.Time.Truncate(time.Second)
	switch {
	case sec.After(s.last.Time):
		s.last = Sample{Time: sec, Concurrency: sm.Concurrency, RPS: sm.RPS}
	case sec.Equal(s.last.Time):
		s.last.Concurrency += sm.Concurrency
		s.last.RPS += sm.RPS
	}
}

// LastSample returns the newest second recorded, with both metrics summed
// over that second's samples (a display figure: decisions read the
// window). ok is false before the first sample.
func (s *Service) LastSample() (sm Sample, ok bool) { return s.last, !s.last.Time.IsZero() }

// Memory is what the service's policy learned (decider.Decider.Memory).
func (s *Service) Memory() []byte { return s.dec.Memory() }

// Remember gives the policy back a memory (decider.Decider.Remember).
func (s *Service) Remember(mem []byte) error { return s.dec.Remember(mem) }

// Decide makes one decision from the window and in.
//
// Without data in the stable window (a service just added, a collector
// outage of a whole window) the decider holds its previous recommendation
// rather than read the missing data as no load; a request waiting at the
// activator still wakes a service at zero, without waiting for a sample.
func (s *Service) Decide(in Inputs) decider.Decision {
	o := decider.Observation{
		Now:              in.Now,
		Ready:            in.Ready,
		ActivatorInPath:  in.ActivatorInPath,
		ActivatorPending: in.ActivatorPending,
		Poked:            in.Poked,
	}
	s.dec.Measure(s.win, &o)
	if s.arrivals != nil {
		s.dec.MeasureArrivals(s.arrivals, &o)
		o.Served, o.ServedRequests = s.served, s.servedRequests
		s.served, s.servedRequests = 0, 0
	}
	if in.HasRecent {
		v := in.RecentConcurrency
		if s.spec.Metric == autoscaling.MetricRPS {
			v = in.RecentRPS
		}
		o.Panic = max(o.Panic, v)
		o.InPods = in.RecentInPods
		if o.HasArrivals {
			o.ArrivalsPanic = max(o.ArrivalsPanic, in.RecentRPS)
		}
	}
	by := s.extra.combine(s.dec, &s.spec, &o)
	d := s.dec.Decide(o)
	d.Reason = s.extra.reason(&s.spec, by, d.Reason)
	return d
}
