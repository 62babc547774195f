package queueproxy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	testclock "k8s.io/utils/clock/testing"

	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/stats"
	"github.com/swell-run/swell/pkg/usage"
)

// fakeUsage returns its next result at each Sample.
type fakeUsage struct {
	results []usageResult
}

type usageResult struct {
	u   usage.Usage
	err error
}

func (f *fakeUsage) Sample(time.Time) (usage.Usage, error) {
	r := f.results[0]
	if len(f.results) > 1 {
		f.results = f.results[1:]
	}
	return r.u, r.err
}

// fakeGauge returns its value or error.
type fakeGauge struct {
	v   float64
	err error
}

func (f *fakeGauge) Scrape(context.Context) (float64, error) { return f.v, f.err }

func newTestMeter(u usageSource, g gaugeSource) (*appMeter, *observer.ObservedLogs) {
	core, logs := observer.New(zap.InfoLevel)
	m := newMetrics(testclock.NewFakeClock(time.Unix(0, 0)), func() float64 { return 0 }, func() float64 { return 0 })
	m.registerApp(u != nil, g != nil)
	a := &appMeter{usage: u, gauge: g, gaugeKey: stats.GaugeKey("waiting"), selector: "waiting",
		clock: testclock.NewFakeClock(time.Unix(0, 0)), log: zap.New(core), metrics: m}
	return a, logs
}

// TestMeterReportsWhatItMeasured: each measurement becomes the latest app
// usage, with the figures that worked flagged and a gauge that failed
// reported by its problem.
func TestMeterReportsWhatItMeasured(t *testing.T) {
	u := &fakeUsage{results: []usageResult{
		{err: fmt.Errorf("nothing listens yet: %w", usage.ErrNoProcess)},
		{u: usage.Usage{CPU: 1.5, Memory: 200 << 20, Processes: 2}},
	}}
	g := &fakeGauge{err: errors.New("connection refused")}
	a, logs := newTestMeter(u, g)
	if got := a.current(); got != (stats.AppUsage{}) {
		t.Fatalf("before the first measurement: %+v, want nothing", got)
	}

	a.measure(context.Background())
	want := stats.AppUsage{GaugeProblem: stats.GaugeUnreachable}
	if got := a.current(); got != want {
		t.Errorf("app starting: %+v, want %+v (no CPU yet, the gauge unreachable)", got, want)
	}

	g.v, g.err = 7, nil
	a.measure(context.Background())
	want = stats.AppUsage{CPU: 1.5, HasCPU: true, Memory: 200 << 20, HasMemory: true, Gauge: 7, GaugeKey: stats.GaugeKey("waiting"), HasGauge: true}
	if got := a.current(); got != want {
		t.Errorf("app up: %+v, want %+v", got, want)
	}
	// An app that is starting is not a failure to log; the gauge's problem
	// and its end are.
	var msgs []string
	for _, e := range logs.All() {
		msgs = append(msgs, e.Level.String()+": "+e.Message)
	}
	if len(msgs) != 2 || !strings.HasPrefix(msgs[0], "warn: cannot read the app gauge") || !strings.HasPrefix(msgs[1], "info: reading the app gauge again") {
		t.Errorf("logged %q; want the gauge's failure, then its recovery", msgs)
	}
	scraped := scrape(t, a.metrics)
	if scraped["swell_queue_app_cpu_cores"] != "1.5" || scraped["swell_queue_app_gauge"] != "7" ||
		scraped[`swell_queue_app_gauge_failures_total{problem="unreachable"}`] != "1" {
		t.Errorf("metrics: %v", scraped)
	}
}

// TestMeterWaitsForTheApp: before the app has answered its probe, its
// gauge is not read, and its absence is no problem to tell.
func TestMeterWaitsForTheApp(t *testing.T) {
	g := &fakeGauge{err: errors.New("connection refused")}
	a, logs := newTestMeter(nil, g)
	ready := false
	a.appReady = func() bool { return ready }
	a.measure(context.Background())
	if got := a.current(); got != (stats.AppUsage{}) || logs.Len() != 0 {
		t.Errorf("app starting: %+v, %d log lines; want nothing measured or told", got, logs.Len())
	}
	ready = true
	a.measure(context.Background())
	if got := a.current(); got.GaugeProblem != stats.GaugeUnreachable || logs.Len() != 1 {
		t.Errorf("app ready: %+v, %d log lines; want the problem told", got, logs.Len())
	}
}

// TestMeterBadGauge: every way an app's gauge can be bad gives its own
// problem, logged once however long it lasts, and never a value.
func TestMeterBadGauge(t *testing.T) {
	for _, tt := range []struct {
		name string
		body string
		// status, when set, is the endpoint's answer; hang makes it
		// never answer.
		status int
		hang   bool
		want   stats.GaugeProblem
	}{
		{name: "missing", body: "other 1\n", want: stats.GaugeMissing},
		{name: "not a number", body: "waiting abc\n", want: stats.GaugeNotNumber},
		{name: "NaN", body: "waiting NaN\n", want: stats.GaugeNotFinite},
		{name: "negative", body: "waiting -3\n", want: stats.GaugeNegative},
		{name: "a histogram", body: "# TYPE waiting histogram\nwaiting_bucket{le=\"+Inf\"} 1\nwaiting_sum 1\nwaiting_count 1\n", want: stats.GaugeType},
		{name: "too large", body: "# " + strings.Repeat("x", 2<<20) + "\nwaiting 1\n", want: stats.GaugeTooLarge},
		{name: "an error page", status: http.StatusInternalServerError, want: stats.GaugeStatus},
		{name: "hangs", hang: true, want: stats.GaugeTimeout},
	} {
		t.Run(tt.name, func(t *testing.T) {
			stop := make(chan struct{})
			app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.hang {
					select {
					case <-stop:
					case <-r.Context().Done():
					}
					return
				}
				if tt.status != 0 {
					w.WriteHeader(tt.status)
				}
				w.Write([]byte(tt.body))
			}))
			defer app.Close()
			defer close(stop)
			cfg := DefaultConfig()
			cfg.UserPort = app.Listener.Addr().(*net.TCPAddr).Port
			cfg.GaugeSelector = "waiting"
			core, logs := observer.New(zap.InfoLevel)
			m := newMetrics(testclock.NewFakeClock(time.Unix(0, 0)), func() float64 { return 0 }, func() float64 { return 0 })
			a, err := newAppMeter(&cfg, testclock.NewFakeClock(time.Unix(0, 0)), zap.New(core), m)
			if err != nil {
				t.Fatal(err)
			}
			m.registerApp(false, true)
			for range 3 {
				a.measure(context.Background())
			}
			if got := a.current(); got.HasGauge || got.GaugeProblem != tt.want {
				t.Errorf("usage %+v, want no gauge and problem %q", got, tt.want)
			}
			if n := logs.FilterMessageSnippet("cannot read the app gauge").Len(); n != 1 {
				t.Errorf("logged the problem %d times over 3 reads, want once", n)
			}
		})
	}
}

// TestReportCarriesTheApp: a queue-proxy that reads a gauge serves it in
// its version-3 report, and the same report to an older scraper without.
func TestReportCarriesTheApp(t *testing.T) {
	a, _ := newTestMeter(nil, &fakeGauge{v: 5.5})
	a.measure(context.Background())
	t0 := time.Unix(1_700_000_000, 0)
	fc := testclock.NewFakeClock(t0)
	r := newReporter(stats.NewTracker(t0), fc, t0)
	r.meter = a
	r.report(t0.Add(time.Second))
	for _, tt := range []struct {
		accept string
		app    bool
	}{
		{stats.ContentTypeV3 + ", " + stats.ContentTypeV2, true},
		{stats.ContentTypeV2, false},
		{"", false},
	} {
		req := httptest.NewRequest("GET", network.StatsPath, nil)
		if tt.accept != "" {
			req.Header.Set("Accept", tt.accept)
		}
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		var got stats.Report
		if err := got.UnmarshalBinary(w.Body.Bytes()); err != nil {
			t.Fatalf("Accept %q: %v", tt.accept, err)
		}
		if got.App.HasGauge != tt.app || (tt.app && math.Abs(got.App.Gauge-5.5) > 0) {
			t.Errorf("Accept %q: app %+v, want the gauge: %v", tt.accept, got.App, tt.app)
		}
	}
}
