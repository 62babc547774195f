package queueproxy

import (
	"bufio"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/utils/clock"

	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/stats"
)

// statusClasses are the values of the status_class label, indexed by
// status/100; "none" counts requests that ended without a response (the
// client left first).
var statusClasses = [...]string{"none", "1xx", "2xx", "3xx", "4xx", "5xx"}

// rejectReasons are the values of the reason label: the responses the
// queue-proxy generates instead of the app.
var rejectReasons = [...]string{
	network.ReasonQueueFull,
	network.ReasonRequestTimeout,
	network.ReasonResponseTimeout,
	network.ReasonIdleTimeout,
	network.ReasonAppUnreachable,
}

// pushDialResults are the values of the push dials' result label, indexed
// by the dial* constants.
var pushDialResults = [...]string{"connected", "redirected", "refused", "failed"}

// The results of one handshake with the autoscaler's push endpoint.
const (
	// dialConnected: the websocket is open.
	dialConnected = iota
	// dialRedirected: another replica leads the service (307).
	dialRedirected
	// dialRefused: any other answer, such as 503 while no replica leads
	// the service or 403 while the pod is not ready.
	dialRefused
	// dialFailed: no answer (no connection, a timeout).
	dialFailed
)

// metrics holds the queue-proxy's Prometheus metrics, in a registry of its
// own so that nothing else in the process can add to or collide with them.
// Every per-request series is resolved once here; the request path only
// increments.
type metrics struct {
	registry *prometheus.Registry
	clock    clock.PassiveClock

	requests [len(statusClasses)]prometheus.Counter
	rejected map[string]prometheus.Counter // read-only after construction
	duration prometheus.Histogram
	// wait is how long the requests that found every admission slot taken
	// waited for one.
	wait prometheus.Histogram
	// The app's own figures (appMeter), registered only when it is
	// measured: its CPU in cores, its memory in bytes, its gauge, and the
	// gauge reads that failed, by problem.
	appCPU, appMemory, appGauge prometheus.Gauge
	gaugeFailures               [stats.NumGaugeProblems]prometheus.Counter
	// The push to the autoscaler (pusher), registered only when it
	// pushes: whether a connection is open, the reports sent, and the
	// handshakes by result.
	pushConnected prometheus.Gauge
	pushFrames    prometheus.Counter
	pushDials     [len(pushDialResults)]prometheus.Counter
	// upgraded counts the upgraded connections (websockets) open now:
	// in flight for the stats and the drain, but holding no admission slot.
	upgraded atomic.Int64
}

// newMetrics registers the metrics. inFlight and queued are read at scrape
// time, which costs nothing per request.
func newMetrics(clk clock.PassiveClock, inFlight, queued func() float64) *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		clock:    clk,
		rejected: make(map[string]prometheus.Counter, len(rejectReasons)),
	}
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "swell_queue_requests_total",
		Help: "Requests handled, probes excluded, by class of the final status (none: the client left before a response).",
	}, []string{"status_class"})
	for i, c := range statusClasses {
		m.requests[i] = requests.WithLabelValues(c)
	}
	rejected := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "swell_queue_rejected_requests_total",
		Help: "Responses the queue-proxy generated instead of the app, by reason.",
	}, []string{"reason"})
	for _, r := range rejectReasons {
		m.rejected[r] = rejected.WithLabelValues(r)
	}
	m.duration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "swell_queue_request_duration_seconds",
		Help:    "Time from a request's arrival at the queue-proxy to the end of its response, queueing included.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
	})
	m.wait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "swell_queue_wait_seconds",
		Help: "Time the requests that found every CONTAINER_CONCURRENCY slot taken waited for one; requests admitted at once are not observed.",
		// 1ms .. ~65s, as the activator's queue wait.
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 17),
	})
	m.registry.MustRegister(
		requests, rejected, m.duration, m.wait,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "swell_queue_in_flight_requests",
			Help: "Requests held by the queue-proxy now, queued or at the app.",
		}, inFlight),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "swell_queue_queued_requests",
			Help: "Requests waiting for the app now (always 0 without CONTAINER_CONCURRENCY).",
		}, queued),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "swell_queue_upgraded_connections",
			Help: "Upgraded connections (websockets) open now: counted in flight, but holding no admission slot.",
		}, func() float64 { return float64(m.upgraded.Load()) }),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// registerApp adds the app's figures to the registry: usage for its CPU
// and memory, gauge for its gauge.
func (m *metrics) registerApp(usage, gauge bool) {
	if usage {
		m.appCPU = prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "swell_queue_app_cpu_cores",
			Help: "CPU the app's processes used over the last second, in cores.",
		})
		m.appMemory = prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "swell_queue_app_memory_bytes",
			Help: "Memory the app's processes hold resident, summed, in bytes.",
		})
		m.registry.MustRegister(m.appCPU, m.appMemory)
	}
	if gauge {
		m.appGauge = prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "swell_queue_app_gauge",
			Help: "The app gauge's value at its last successful read (GAUGE).",
		})
		failures := prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swell_queue_app_gauge_failures_total",
			Help: "Reads of the app gauge that failed, by problem.",
		}, []string{"problem"})
		for p := stats.GaugeOK + 1; p < stats.NumGaugeProblems; p++ {
			m.gaugeFailures[p] = failures.WithLabelValues(p.String())
		}
		m.registry.MustRegister(m.appGauge, failures)
	}
}

// registerPush adds the push's figures to the registry.
func (m *metrics) registerPush() {
	m.pushConnected = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "swell_queue_push_connected",
		Help: "1 while the connection that pushes the stats to the autoscaler is open, else 0.",
	})
	m.pushFrames = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "swell_queue_push_frames_total",
		Help: "Stats reports pushed to the autoscaler.",
	})
	dials := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "swell_queue_push_dials_total",
		Help: "Handshakes with the autoscaler's push endpoint, by result: connected, redirected (to the replica that leads the service), refused (any other answer), failed (no answer).",
	}, []string{"result"})
	for i, r := range pushDialResults {
		m.pushDials[i] = dials.WithLabelValues(r)
	}
	m.registry.MustRegister(m.pushConnected, m.pushFrames, dials)
}

// handler serves the registry in the Prometheus exposition format.
func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// counting records in metrics every request it passes to next.
type counting struct {
	next    http.Handler
	metrics *metrics
}

func (c *counting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m := c.metrics
	start := m.clock.Now()
	rec := &statusRecorder{ResponseWriter: w, metrics: m}
	defer func() { m.observe(rec, m.clock.Since(start)) }()
	c.next.ServeHTTP(rec, r)
}

func (m *metrics) observe(rec *statusRecorder, d time.Duration) {
	class := rec.status / 100
	if class >= len(m.requests) {
		class = len(m.requests) - 1 // nonstandard 6xx and up: lump with 5xx
	}
	m.requests[class].Inc()
	m.duration.Observe(d.Seconds())
	if rec.hijacked {
		m.upgraded.Add(-1)
	}
	if rec.status >= 500 {
		if v := rec.Header()[network.ReasonHeader]; len(v) == 1 {
			if c, ok := m.rejected[v[0]]; ok {
				c.Inc()
			}
		}
	}
}

// statusRecorder remembers the final status written through it. It keeps
// http.Flusher and http.Hijacker (a hijacked connection counts as 101) and
// Unwrap for http.ResponseController.
type statusRecorder struct {
	http.ResponseWriter
	metrics  *metrics
	status   int
	hijacked bool
}

func (r *statusRecorder) WriteHeader(code int) {
	if code >= 200 && r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Flush implements http.Flusher.
func (r *statusRecorder) Flush() { _ = r.FlushError() }

// FlushError is what http.ResponseController.Flush calls.
func (r *statusRecorder) FlushError() error {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return http.NewResponseController(r.ResponseWriter).Flush()
}

// Hijack implements http.Hijacker.
func (r *statusRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(r.ResponseWriter).Hijack()
	if err == nil {
		if r.status == 0 {
			r.status = http.StatusSwitchingProtocols
		}
		if !r.hijacked {
			r.hijacked = true
			r.metrics.upgraded.Add(1)
		}
	}
	return c, brw, err
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
