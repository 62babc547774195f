package autoscaler

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/swell-run/swell/autoscaler/decider"
	"github.com/swell-run/swell/pkg/service"
)

// metrics are the loop's Prometheus metrics. The per-service gauges carry
// namespace and service labels (four series per service); each service
// resolves its series once, at Upsert, so a tick only sets values.
type metrics struct {
	desired, ready, panicMode, ebc *prometheus.GaugeVec
	services                       prometheus.Gauge
	roundsBusy                     prometheus.Counter
	tickDuration                   prometheus.Histogram
	// decisions[trigger][change]
	decisions [numTriggers][numChanges]prometheus.Counter
}

// The kinds of change a decision makes, for decisions_total.
const (
	changeUp = iota
	changeDown
	changeNone
	numChanges
)

var changeNames = [numChanges]string{"up", "down", "none"}

// serviceMetrics are one service's resolved series.
type serviceMetrics struct {
	desired, ready, panicMode, ebc prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	labels := []string{"namespace", "service"}
	m := &metrics{
		desired: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "swell_autoscaler_desired_pods",
			Help: "Pods the latest decision asks for (its scale, after bounds and scale-to-zero rules).",
		}, labels),
		ready: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "swell_autoscaler_ready_pods",
			Help: "Ready pods the latest decision saw.",
		}, labels),
		panicMode: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "swell_autoscaler_panic_mode",
			Help: "1 while the service is in panic mode, else 0.",
		}, labels),
		ebc: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "swell_autoscaler_excess_burst_capacity",
			Help: "Excess burst capacity of the latest decision; negative keeps the activator in the path.",
		}, labels),
		services: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "swell_autoscaler_services",
			Help: "Services the autoscaler decides for.",
		}),
		roundsBusy: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "swell_autoscaler_collection_rounds_dropped_total",
			Help: "Collection rounds not started because the previous one was still scraping.",
		}),
		tickDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "swell_autoscaler_tick_duration_seconds",
			Help:    "Time one tick (a decision for every service) took.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}),
	}
	decisions := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "swell_autoscaler_decisions_total",
		Help: "Decisions by trigger (tick, poke, push) and change of scale from the previous decision (up, down, none).",
	}, []string{"trigger", "change"})
	for t := range numTriggers {
		trigger := t.String()
		for c, change := range changeNames {
			m.decisions[t][c] = decisions.WithLabelValues(trigger, change)
		}
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.desired, m.ready, m.panicMode, m.ebc, m.services, m.roundsBusy, m.tickDuration, decisions} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("autoscaler: register metrics: %w", err)
			}
		}
	}
	return m, nil
}

func (m *metrics) forService(key service.Key) serviceMetrics {
	return serviceMetrics{
		desired:   m.desired.WithLabelValues(key.Namespace, key.Name),
		ready:     m.ready.WithLabelValues(key.Namespace, key.Name),
		panicMode: m.panicMode.WithLabelValues(key.Namespace, key.Name),
		ebc:       m.ebc.WithLabelValues(key.Namespace, key.Name),
	}
}

func (m *metrics) remove(key service.Key) {
	for _, v := range []*prometheus.GaugeVec{m.desired, m.ready, m.panicMode, m.ebc} {
		v.DeleteLabelValues(key.Namespace, key.Name)
	}
}

func (m *metrics) decided(t trigger, from, to int) {
	c := changeNone
	switch {
	case to > from:
		c = changeUp
	case to < from:
		c = changeDown
	}
	m.decisions[t][c].Inc()
}

// observe sets the service's gauges from a decision.
func (sm serviceMetrics) observe(d decider.Decision) {
	sm.ready.Set(float64(d.Ready))
	sm.desired.Set(float64(d.Scale))
	sm.ebc.Set(d.ExcessBurstCapacity)
	if d.InPanic {
		sm.panicMode.Set(1)
	} else {
		sm.panicMode.Set(0)
	}
}
