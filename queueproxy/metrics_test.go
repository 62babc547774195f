package queueproxy

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	testclock "k8s.io/utils/clock/testing"

	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/proxy"
)

var (
	_ http.Flusher                              = (*statusRecorder)(nil)
	_ http.Hijacker                             = (*statusRecorder)(nil)
	_ interface{ Unwrap() http.ResponseWriter } = (*statusRecorder)(nil)
)

// scrape returns the metric lines (no comments) of m, keyed by series.
func scrape(t *testing.T, m *metrics) map[string]string {
	t.Helper()
	w := httptest.NewRecorder()
	m.handler().ServeHTTP(w, httptest.NewRequest("GET", network.MetricsPath, nil))
	series := map[string]string{}
	sc := bufio.NewScanner(w.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.LastIndexByte(line, ' '); i > 0 {
			series[line[:i]] = line[i+1:]
		}
	}
	return series
}

func TestCounting(t *testing.T) {
	fc := testclock.NewFakeClock(time.Unix(0, 0))
	m := newMetrics(fc, func() float64 { return 7 }, func() float64 { return 3 })
	h := &counting{metrics: m, next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fc.Step(2 * time.Millisecond)
		switch r.URL.Path {
		case "/ok":
			w.Write([]byte("ok"))
		case "/created":
			w.WriteHeader(http.StatusCreated)
		case "/missing":
			http.NotFound(w, r)
		case "/full":
			proxy.Reject(w, http.StatusServiceUnavailable, network.ReasonQueueFull)
		case "/timeout":
			proxy.Reject(w, http.StatusGatewayTimeout, network.ReasonRequestTimeout)
		case "/app500":
			w.WriteHeader(http.StatusInternalServerError)
		case "/early-hints":
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusNoContent)
		case "/silent":
			// nothing written: the client went away
		case "/abort":
			panic(http.ErrAbortHandler)
		}
	})}
	for _, p := range []string{"/ok", "/ok", "/created", "/missing", "/full", "/timeout", "/app500", "/early-hints", "/silent", "/abort"} {
		func() {
			defer func() { recover() }()
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", p, nil))
		}()
	}
	got := scrape(t, m)
	for series, want := range map[string]string{
		`swell_queue_requests_total{status_class="2xx"}`:                "4",
		`swell_queue_requests_total{status_class="4xx"}`:                "1",
		`swell_queue_requests_total{status_class="5xx"}`:                "3",
		`swell_queue_requests_total{status_class="none"}`:               "2",
		`swell_queue_requests_total{status_class="1xx"}`:                "0",
		`swell_queue_rejected_requests_total{reason="queue-full"}`:      "1",
		`swell_queue_rejected_requests_total{reason="request-timeout"}`: "1",
		`swell_queue_rejected_requests_total{reason="app-unreachable"}`: "0",
		`swell_queue_request_duration_seconds_count`:                    "10",
		`swell_queue_request_duration_seconds_bucket{le="0.0025"}`:      "10",
		`swell_queue_request_duration_seconds_bucket{le="0.001"}`:       "0",
		`swell_queue_in_flight_requests`:                                "7",
		`swell_queue_queued_requests`:                                   "3",
	} {
		if got[series] != want {
			t.Errorf("%s = %q, want %s", series, got[series], want)
		}
	}
	if _, ok := got["go_goroutines"]; !ok {
		t.Error("no Go runtime metrics")
	}
	if _, ok := got["process_cpu_seconds_total"]; !ok {
		t.Error("no process metrics")
	}
}
