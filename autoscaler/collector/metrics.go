package collector

import (
	"fmt"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/swell-run/swell/pkg/stats"
)

// collectorMetrics are the collector's operator metrics. No series has a
// service or pod label: with ten thousand services those would cost more
// than the collection itself. Per-service figures are in the samples.
type collectorMetrics struct {
	scrapes        [numResults]prometheus.Counter
	scrapeDuration prometheus.Histogram
	roundDuration  prometheus.Histogram
	roundsSkipped  prometheus.Counter
	missing        prometheus.Counter
	pushedReads    prometheus.Counter
}

func newCollectorMetrics(reg prometheus.Registerer) (*collectorMetrics, error) {
	m := &collectorMetrics{}
	scrapes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "swell_autoscaler_scrapes_total",
		Help: "Scrapes of queue-proxy stats by result: ok, timeout, status (not 200), malformed (wrong type or bad report), error.",
	}, []string{"result"})
	for r, name := range resultNames {
		m.scrapes[r] = scrapes.WithLabelValues(name)
	}
	m.scrapeDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "swell_autoscaler_scrape_duration_seconds",
		Help:    "Time one scrape of one pod's stats took, failures included.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
	})
	m.roundDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "swell_autoscaler_collection_round_duration_seconds",
		Help:    "Time one collection round (every service's sample of pods) took.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, .75, 1, 2.5},
	})
	m.roundsSkipped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "swell_autoscaler_collection_rounds_skipped_total",
		Help: "Ticks skipped because they fell in a second already collected.",
	})
	m.missing = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "swell_autoscaler_samples_missing_total",
		Help: "Service-seconds without a sample: pods unknown, or every sampled pod failed.",
	})
	m.pushedReads = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "swell_autoscaler_pushed_reads_total",
		Help: "Pod reports a round read from the pod's latest push instead of scraping it.",
	})
	if reg != nil {
		for _, c := range []prometheus.Collector{scrapes, m.scrapeDuration, m.roundDuration, m.roundsSkipped, m.missing, m.pushedReads} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("collector: register metrics: %w", err)
			}
		}
	}
	return m, nil
}

// closeReasons label the endpoint's closed connections by close code;
// closeExtraReasons are labels some closes carry instead of their code's.
var closeReasons = map[int]string{
	websocket.CloseNormalClosure:           "peer-closed",
	websocket.CloseGoingAway:               "shutdown",
	websocket.CloseUnsupportedData:         "text-frame",
	websocket.CloseAbnormalClosure:         "broken",
	websocket.CloseInvalidFramePayloadData: "malformed",
	websocket.ClosePolicyViolation:         "protocol",
	websocket.CloseMessageTooBig:           "too-big",
	CloseReplaced:                          "replaced",
	CloseIdle:                              "idle",
}

var closeExtraReasons = []string{
	"no-hello", // 1008: no hello by the hello deadline
	"revoked",  // 1008: the token was refused, or named another activator, when checked again
}

var rejectReasonsEndpoint = []string{"unauthorized", "unknown-caller", "auth-unavailable", "shutting-down", "too-many", "too-many-per-activator", "handshake"}

var recheckResults = []string{"ok", "refused", "unavailable"}

// endpointMetrics are the activator endpoint's operator metrics, every
// series resolved up front.
type endpointMetrics struct {
	rejectedBy  map[string]prometheus.Counter
	framesBy    map[stats.ActivatorFrameType]prometheus.Counter
	closedBy    map[string]prometheus.Counter
	recheckedBy map[string]prometheus.Counter
}

func newEndpointMetrics(reg prometheus.Registerer, connected func() float64) (*endpointMetrics, error) {
	m := &endpointMetrics{
		rejectedBy:  make(map[string]prometheus.Counter),
		framesBy:    make(map[stats.ActivatorFrameType]prometheus.Counter),
		closedBy:    make(map[string]prometheus.Counter),
		recheckedBy: make(map[string]prometheus.Counter),
	}
	rejected := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "swell_autoscaler_activator_rejected_total",
		Help: "Activator connection attempts refused before the upgrade, by reason.",
	}, []string{"reason"})
	for _, r := range rejectReasonsEndpoint {
		m.rejectedBy[r] = rejected.WithLabelValues(r)
	}
	frames := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "swell_autoscaler_activator_frames_total",
		Help: "Valid frames received from activators, by type.",
	}, []string{"type"})
	for _, t := range []stats.ActivatorFrameType{stats.ActivatorHello, stats.ActivatorReport, stats.ActivatorPoke} {
		m.framesBy[t] = frames.WithLabelValues(t.String())
	}
	closed := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "swell_autoscaler_activator_disconnects_total",
		Help: "Activator connections closed, by reason.",
	}, []string{"reason"})
	for _, r := range closeReasons {
		m.closedBy[r] = closed.WithLabelValues(r)
	}
	for _, r := range closeExtraReasons {
		m.closedBy[r] = closed.WithLabelValues(r)
	}
	rechecks := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "swell_autoscaler_activator_token_rechecks_total",
		Help: "Open activator connections whose token was checked again, by result: ok, refused (the connection is closed), unavailable (it could not be checked now; the connection stays).",
	}, []string{"result"})
	for _, r := range recheckResults {
		m.recheckedBy[r] = rechecks.WithLabelValues(r)
	}
	conns := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "swell_autoscaler_activators_connected",
		Help: "Activators connected now.",
	}, connected)
	if reg != nil {
		for _, c := range []prometheus.Collector{rejected, frames, closed, rechecks, conns} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("activator endpoint: register metrics: %w", err)
			}
		}
	}
	return m, nil
}

func (m *endpointMetrics) rejected(reason string)            { m.rejectedBy[reason].Inc() }
func (m *endpointMetrics) frames(t stats.ActivatorFrameType) { m.framesBy[t].Inc() }

func (m *endpointMetrics) rechecked(result string) { m.recheckedBy[result].Inc() }

func (m *endpointMetrics) closed(reason string) {
	if c, ok := m.closedBy[reason]; ok {
		c.Inc()
	}
}
