// Package engine is the autoscaler's decision core for a set of services:
// it records each service's per-second load samples into that service's
// metric windows and makes decisions from them on demand. It is pure — the
// caller supplies every time and every input — so the autoscaler's loop
// drives it on real time and `swell sim` on a virtual clock, with the same
// code.
package engine

import (
	"sync"
	"time"

	"github.com/swell-run/swell/autoscaler/decider"
	"github.com/swell-run/swell/autoscaler/window"
	"github.com/swell-run/swell/pkg/autoscaling"
	"github.com/swell-run/swell/pkg/service"
)

// Sample is one source's contribution to a service's load in one second:
// service-wide concurrency (time-weighted average) and requests per second.
// Several samples for the same second add up.
type Sample struct {
	Time        time.Time
	Concurrency float64
	RPS         float64
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
}

// Engine holds the windows and deciders of many services. Safe for
// concurrent use: samples may be recorded while another goroutine decides.
//
// Locking: a read-write mutex guards only the set of services (Upsert and
// Remove write it; everything else reads it for a lookup), and each service
// has its own mutex for its window and decider. Recording a sample for one
// service therefore never waits for a decision about another, and a tick
// over ten thousand services holds no lock that a Record needs for longer
// than one service's decision.
type Engine struct {
	mu     sync.RWMutex
	byKey  map[service.Key]*state
	states []*state // the same states, for iteration without a map

	// tickMu serialises Ticks, which share scratch: the services of the
	// tick, copied so that the set's lock is not held across decisions.
	tickMu  sync.Mutex
	scratch []*state
}

// state is one service's window, decider and bookkeeping.
type state struct {
	key service.Key
	idx int // position in Engine.states; guarded by Engine.mu

	mu      sync.Mutex
	removed bool
	spec    autoscaling.Spec
	win     *window.Window
	dec     *decider.Decider
	// last is the newest second's load, both metrics, summed over the
	// samples of that second: for display (Status), not for decisions.
	last Sample
}

// New returns an empty Engine.
func New() *Engine {
	return &Engine{byKey: make(map[service.Key]*state)}
}

// Upsert adds a service, or updates its spec (keeping its history and
// decider state where they still apply). ready is the number of pods
// already running when the service is first added (an autoscaler restart):
// the decider then starts by holding them. With ready == 0 the service is
// taken as new and starts at its initial scale (decider.New).
//
// On an update, a change of metric starts the window afresh (the history
// is of the other metric), a change of stable window resizes it keeping
// the newest seconds, and the decider keeps its panic episode and delay
// window (decider.SetSpec).
func (e *Engine) Upsert(key service.Key, spec autoscaling.Spec, now time.Time, ready int) {
	e.upsert(key, spec, func() *decider.Decider { return decider.New(spec, now, ready) })
}

// Resume adds a service that was already autoscaled before this engine
// existed (an autoscaler restart, a new leader), with scale pods asked of
// the backend: the decider holds them, and a service at zero stays at zero
// until traffic arrives rather than waking to its initial scale
// (decider.Resume). For a known service it is Upsert.
func (e *Engine) Resume(key service.Key, spec autoscaling.Spec, now time.Time, scale int) {
	e.upsert(key, spec, func() *decider.Decider { return decider.Resume(spec, now, scale) })
}

func (e *Engine) upsert(key service.Key, spec autoscaling.Spec, newDecider func() *decider.Decider) {
	e.mu.RLock()
	st := e.byKey[key]
	e.mu.RUnlock()
	if st != nil {
		st.mu.Lock()
		if !st.removed {
			st.update(spec)
			st.mu.Unlock()
			return
		}
		st.mu.Unlock()
	}

	// Build outside the set's lock: a new window and decider allocate.
	nst := &state{
		key:  key,
		spec: spec,
		win:  window.New(spec.StableWindow),
		dec:  newDecider(),
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if st := e.byKey[key]; st != nil {
		// Added meanwhile by another Upsert: update that one instead.
		st.mu.Lock()
		st.update(spec)
		st.mu.Unlock()
		return
	}
	nst.idx = len(e.states)
	e.states = append(e.states, nst)
	e.byKey[key] = nst
}

// update applies a new spec to an existing service. st.mu is held.
func (st *state) update(spec autoscaling.Spec) {
	old := st.spec
	switch {
	case spec.Metric != old.Metric:
		st.win = window.New(spec.StableWindow)
	case spec.StableWindow != old.StableWindow:
		st.win.Resize(spec.StableWindow)
	}
	st.dec.SetSpec(spec)
	st.spec = spec
}

// Remove forgets a service.
func (e *Engine) Remove(key service.Key) {
	e.mu.Lock()
	st := e.byKey[key]
	if st == nil {
		e.mu.Unlock()
		return
	}
	delete(e.byKey, key)
	last := len(e.states) - 1
	moved := e.states[last]
	e.states[st.idx] = moved
	moved.idx = st.idx
	e.states[last] = nil
	e.states = e.states[:last]
	e.mu.Unlock()

	// A Tick may hold st from its copy of the set: the flag makes it skip.
	st.mu.Lock()
	st.removed = true
	st.mu.Unlock()
}

// Len returns the number of services.
func (e *Engine) Len() int {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return len(e.states)
}

// Services appends the key of every service to dst, in no particular
// order.
func (e *Engine) Services(dst []service.Key) []service.Key {
	e.mu.RLock()
	defer e.mu.RUnlock()
	for _, st := range e.states {
		dst = append(dst, st.key)
	}
	return dst
}

// Spec returns a service's spec; ok is false for an unknown service.
func (e *Engine) Spec(key service.Key) (spec autoscaling.Spec, ok bool) {
	st := e.get(key)
	if st == nil {
		return autoscaling.Spec{}, false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.spec, !st.removed
}

// LastSample returns the newest second recorded for a service, with both
// metrics summed over that second's samples (a display figure: decisions
// read the windows). ok is false for an unknown service or one without
// samples.
func (e *Engine) LastSample(key service.Key) (s Sample, ok bool) {
	st := e.get(key)
	if st == nil {
		return Sample{}, false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.last, !st.removed && !st.last.Time.IsZero()
}

func (e *Engine) get(key service.Key) *state {
	e.mu.RLock()
	st := e.byKey[key]
	e.mu.RUnlock()
	return st
}

// Record adds a load sample to a service's windows; unknown services are
// ignored (reported false).
func (e *Engine) Record(key service.Key, s Sample) bool {
	st := e.get(key)
	if st == nil {
		return false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.removed {
		return false
	}
	v := s.Concurrency
	if st.spec.Metric == autoscaling.MetricRPS {
		v = s.RPS
	}
	st.win.Record(s.Time, v)

	sec := s.Time.Truncate(time.Second)
	switch {
	case sec.After(st.last.Time):
		st.last = Sample{Time: sec, Concurrency: s.Concurrency, RPS: s.RPS}
	case sec.Equal(st.last.Time):
		st.last.Concurrency += s.Concurrency
		st.last.RPS += s.RPS
	}
	return true
}

// Decide makes one decision for a service from its windows and in. ok is
// false for an unknown service.
func (e *Engine) Decide(key service.Key, in Inputs) (d decider.Decision, ok bool) {
	st := e.get(key)
	if st == nil {
		return decider.Decision{}, false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.removed {
		return decider.Decision{}, false
	}
	return st.decide(in), true
}

// Tick decides for every service: inputs supplies each service's inputs,
// out receives each decision. Steady-state ticks do not allocate.
//
// For each service inputs is called first, then out with its decision;
// neither is called with any engine lock held, so both may call back into
// the Engine. A service removed during the tick may get an inputs call
// without an out call. Ticks are serialised.
func (e *Engine) Tick(inputs func(service.Key) Inputs, out func(service.Key, decider.Decision)) {
	e.tickMu.Lock()
	defer e.tickMu.Unlock()
	e.mu.RLock()
	e.scratch = append(e.scratch[:0], e.states...)
	e.mu.RUnlock()
	for _, st := range e.scratch {
		in := inputs(st.key)
		st.mu.Lock()
		if st.removed {
			st.mu.Unlock()
			continue
		}
		d := st.decide(in)
		st.mu.Unlock()
		out(st.key, d)
	}
	// Drop the references, so a service removed meanwhile can be collected.
	clear(e.scratch)
}

// decide measures the windows and asks the decider. st.mu is held.
//
// Without data in the stable window (a service just added, a collector
// outage of a whole window) the decider holds its previous recommendation
// rather than read the missing data as no load; a request waiting at the
// activator still wakes a service at zero, without waiting for a sample.
func (st *state) decide(in Inputs) decider.Decision {
	o := decider.Observation{
		Now:              in.Now,
		Ready:            in.Ready,
		ActivatorInPath:  in.ActivatorInPath,
		ActivatorPending: in.ActivatorPending,
		Poked:            in.Poked,
	}
	st.dec.Measure(st.win, &o)
	return st.dec.Decide(o)
}
