package activator

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// statusClasses are the values of the status_class label. "499" counts
// requests whose client left before an answer began; it is kept apart from
// 4xx because the activator wrote nothing.
var statusClasses = [...]string{"1xx", "2xx", "3xx", "4xx", "5xx", "499"}

func statusClassIndex(code int) int {
	if code == StatusClientClosed {
		return 5
	}
	return min(max(code/100, 1), 5) - 1
}

// metrics holds the activator's Prometheus metrics.
type metrics struct {
	requests  *prometheus.CounterVec
	queued    *prometheus.GaugeVec
	inFlight  *prometheus.GaugeVec
	refused   *prometheus.CounterVec
	queueWait prometheus.Histogram
	coldStart prometheus.Histogram
}

// serviceMetrics holds one service's series, resolved once so the request
// path only increments.
type serviceMetrics struct {
	requests         [len(statusClasses)]prometheus.Counter
	queued, inFlight prometheus.Gauge
	refused          prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swell_activator_requests_total",
			Help: "Requests handled by the activator, by service and status class (499: client left first).",
		}, []string{"service", "status_class"}),
		queued: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "swell_activator_queued_requests",
			Help: "Requests waiting in the activator for a pod, by service.",
		}, []string{"service"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "swell_activator_in_flight_requests",
			Help: "Requests held by the activator (queued or proxied), by service.",
		}, []string{"service"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swell_activator_refused_callers_total",
			Help: "Requests refused 403 because their caller may not call the service, by service.",
		}, []string{"service"}),
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "swell_activator_queue_wait_seconds",
			Help:    "Time requests waited in the activator before being sent to a pod.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18), // 0.5ms .. ~65s
		}),
		coldStart: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "swell_activator_cold_start_seconds",
			Help:    "Time requests waited because their service had no ready pod when they arrived.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 15), // 10ms .. ~164s
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.requests, m.queued, m.inFlight, m.refused, m.queueWait, m.coldStart} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register activator metrics: %w", err)
			}
		}
	}
	return m, nil
}

func (m *metrics) forService(key string) serviceMetrics {
	var sm serviceMetrics
	for i, c := range statusClasses {
		sm.requests[i] = m.requests.WithLabelValues(key, c)
	}
	sm.queued = m.queued.WithLabelValues(key)
	sm.inFlight = m.inFlight.WithLabelValues(key)
	sm.refused = m.refused.WithLabelValues(key)
	return sm
}

// deleteService deletes the series forService made for key, by their
// label values: a lookup each, where matching on the service label alone
// (DeletePartialMatch) walks every service's series, under the
// activator's lock.
func (m *metrics) deleteService(key string) {
	for _, c := range statusClasses {
		m.requests.DeleteLabelValues(key, c)
	}
	m.queued.DeleteLabelValues(key)
	m.inFlight.DeleteLabelValues(key)
	m.refused.DeleteLabelValues(key)
}

func (sm *serviceMetrics) count(code int) { sm.requests[statusClassIndex(code)].Inc() }
