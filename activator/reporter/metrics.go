package reporter

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	connected    prometheus.Gauge
	dials        *prometheus.CounterVec
	frames       *prometheus.CounterVec
	writeErrors  prometheus.Counter
	pokesDropped prometheus.Counter
	invalid      prometheus.Counter
}

// newMetrics makes the reporter's metrics and registers them on reg, if set.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "swell_activator_reporter_connected",
			Help: "The activator's websockets open to autoscaler replicas: 1 while connected with one bucket, up to one per replica leading a bucket with several.",
		}),
		dials: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swell_activator_reporter_dials_total",
			Help: "Connection attempts to the autoscaler by result: ok, unauthorized, status, error, no-token (the token file could not be read).",
		}, []string{"result"}),
		frames: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swell_activator_reporter_frames_total",
			Help: "Frames sent to the autoscaler by type: hello, report, poke.",
		}, []string{"type"}),
		writeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "swell_activator_reporter_write_errors_total",
			Help: "Frames that could not be written; each ends its connection.",
		}),
		pokesDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "swell_activator_reporter_pokes_dropped_total",
			Help: "Pokes dropped because MaxPendingPokes services were already waiting.",
		}),
		invalid: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "swell_activator_reporter_invalid_entries_total",
			Help: "Report entries and pokes skipped for an invalid service key or concurrency.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.connected, m.dials, m.frames, m.writeErrors, m.pokesDropped, m.invalid} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("activator reporter: register metrics: %w", err)
		}
	}
	return m, nil
}
