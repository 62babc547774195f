package engine

import (
	"strings"

	"github.com/swell-run/swell/autoscaler/decider"
	"github.com/swell-run/swell/autoscaler/window"
	"github.com/swell-run/swell/pkg/autoscaling"
)

// The metrics beyond requests — the app's CPU and memory, an app gauge —
// recommend pods as the HPA's do: each is read as pods' worth (its value
// over what one pod should carry), and the largest recommendation wins.
// The engine folds them into the observation the decider reads, expressed
// in the request metric's units (pods' worth × the request target per
// pod), so that every policy, its panic mode, its rate limits and its
// scale-to-zero rules work with every metric unchanged.
//
// Requests keep their say over zero even when another metric decides: a
// service whose metric list leaves out concurrency and rps still wakes on
// a request and keeps one pod while requests come, but no more on their
// account. A service is idle when it has no requests and its other
// metrics are at rest: CPU below cpuIdle of a pod's target, the gauge at
// zero. Memory is never at rest — an app holds what it allocated — so it
// recommends pods only while something else shows work.

// cpuIdle is the CPU, in pods' worth, below which the app counts as at
// rest: a runtime's timers and collector use a few percent of a core, and
// an HPA-style ceiling would otherwise keep one pod forever. It is the
// HPA's tolerance, 10% of a pod's target.
const cpuIdle = 0.1

// extraMetrics holds a service's windows of the metrics beyond requests,
// in pods' worth; each is nil unless the spec lists its metric with a
// target to divide by.
type extraMetrics struct {
	cpu, memory, gauge *window.Window
	// scratch receives a window's averages without allocating.
	scratch decider.Observation
	// The last reason built, to reuse while neither part changes.
	base, text string
	by         autoscaling.Metric
}

// perPod is what one pod of spec should carry of m, in m's units.
func perPod(spec *autoscaling.Spec, m autoscaling.Metric) float64 {
	switch m {
	case autoscaling.MetricCPU:
		return spec.CPUPerPod()
	case autoscaling.MetricMemory:
		return spec.MemoryPerPod()
	case autoscaling.MetricGauge:
		return spec.Gauge.Target
	}
	return 0
}

// setSpec keeps each window that still means the same under spec: one
// whose target changed holds another unit's values and starts afresh, as
// does the gauge's when it names another series.
func (e *extraMetrics) setSpec(spec, old *autoscaling.Spec) {
	e.base = "" // a reason names the targets

	for _, m := range []struct {
		metric autoscaling.Metric
		w      **window.Window
	}{{autoscaling.MetricCPU, &e.cpu}, {autoscaling.MetricMemory, &e.memory}, {autoscaling.MetricGauge, &e.gauge}} {
		unit := perPod(spec, m.metric)
		switch {
		case !spec.VotesWith(m.metric) || unit <= 0:
			*m.w = nil
		case *m.w == nil || old == nil || perPod(old, m.metric) != unit ||
			(m.metric == autoscaling.MetricGauge && old.Gauge != spec.Gauge):
			*m.w = window.New(spec.StableWindow)
		case old.StableWindow != spec.StableWindow:
			(*m.w).Resize(spec.StableWindow)
		}
	}
}

// record adds what sm measured to the windows, in pods' worth.
func (e *extraMetrics) record(spec *autoscaling.Spec, sm *Sample) {
	if e.cpu != nil && sm.HasCPU {
		e.cpu.Record(sm.Time, sm.CPU/spec.CPUPerPod())
	}
	if e.memory != nil && sm.HasMemory {
		e.memory.Record(sm.Time, sm.Memory/spec.MemoryPerPod())
	}
	if e.gauge != nil && sm.HasGauge {
		e.gauge.Record(sm.Time, sm.Gauge/spec.Gauge.Target)
	}
}

// combine folds the metrics beyond requests into o's Stable and Panic (the
// request metric's, measured already) and returns the metric whose stable
// recommendation is the largest: the one that decides.
func (e *extraMetrics) combine(d *decider.Decider, spec *autoscaling.Spec, o *decider.Observation) autoscaling.Metric {
	unit := spec.TargetPerPod()
	stable, panic := o.Stable, o.Panic
	by := spec.Metric
	if !spec.VotesWith(spec.Metric) {
		// Requests keep one pod's worth, and no more.
		stable, panic = min(stable, unit), min(panic, unit)
		by = ""
	}
	active := stable > 0 || panic > 0 || o.ActivatorPending > 0 || o.Poked
	read := func(w *window.Window) (float64, float64) {
		e.scratch = decider.Observation{Now: o.Now}
		d.Measure(w, &e.scratch)
		return e.scratch.Stable, e.scratch.Panic
	}
	take := func(m autoscaling.Metric, s, p float64) {
		s, p = s*unit, p*unit
		if s > stable || by == "" && s > 0 {
			stable, by = s, m
		}
		panic = max(panic, p)
	}
	if e.cpu != nil {
		s, p := read(e.cpu)
		if s < cpuIdle {
			s = 0
		}
		if p < cpuIdle {
			p = 0
		}
		active = active || s > 0 || p > 0
		take(autoscaling.MetricCPU, s, p)
	}
	if e.gauge != nil {
		s, p := read(e.gauge)
		if spec.Gauge.Aggregation == autoscaling.GaugeSum {
			// The target is the pods' total: each pod more lowers it.
			n := float64(max(o.Ready, 1))
			s, p = s*n, p*n
		}
		active = active || s > 0 || p > 0
		take(autoscaling.MetricGauge, s, p)
	}
	if e.memory != nil && active {
		s, p := read(e.memory)
		take(autoscaling.MetricMemory, s, p)
	}
	o.Stable, o.Panic = stable, panic
	if by == "" {
		by = spec.Metric
	}
	return by
}

// reason names the deciding metric in front of the decider's reason when
// it is not the request metric, and its target in place of the request
// target the policy named ("cpu: stable at cpu-target 70%"). It allocates
// only when the text changes.
func (e *extraMetrics) reason(spec *autoscaling.Spec, by autoscaling.Metric, base string) string {
	if by == "" || by.IsRequestMetric() {
		return base
	}
	if by != e.by || base != e.base {
		text := base
		if i := strings.LastIndex(text, " at target "); i >= 0 {
			text = text[:i] + " at " + spec.TargetText(by)
		}
		e.by, e.base, e.text = by, base, string(by)+": "+text
	}
	return e.text
}
