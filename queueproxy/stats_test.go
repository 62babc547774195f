package queueproxy

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	testclock "k8s.io/utils/clock/testing"

	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/stats"
)

func TestAccounting(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	fc := testclock.NewFakeClock(t0)
	tracker := stats.NewTracker(t0)
	var inFlight int64
	h := &accounting{tracker: tracker, clock: fc, next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inFlight = tracker.InFlight()
		fc.Step(500 * time.Millisecond) // the request is held for half the period
	})}

	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	proxied := httptest.NewRequest("GET", "/", nil)
	proxied.Header.Set(network.ProxyHeader, network.ProxyActivator)
	h.ServeHTTP(httptest.NewRecorder(), proxied)

	if inFlight != 1 {
		t.Errorf("in flight during the request = %d, want 1", inFlight)
	}
	if n := tracker.InFlight(); n != 0 {
		t.Errorf("in flight after = %d, want 0", n)
	}
	rep := tracker.Report(t0.Add(time.Second))
	if rep.Requests != 2 || rep.ProxiedRequests != 1 || rep.Concurrency != 1 || rep.ProxiedConcurrency != 0.5 {
		t.Errorf("report = %+v, want 2 requests (1 proxied), concurrency 1 (0.5 proxied)", rep)
	}
}

// TestAccountingByActivator: a request an activator forwards under its
// name counts in that activator's share; one with no name, or a name no
// pod could have, counts as proxied in no share.
func TestAccountingByActivator(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	fc := testclock.NewFakeClock(t0)
	tracker := stats.NewTracker(t0)
	h := &accounting{tracker: tracker, clock: fc, next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fc.Step(250 * time.Millisecond)
	})}
	for _, name := range []string{"activator-a", "", strings.Repeat("a", 254), "activator-a"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set(network.ProxyHeader, network.ProxyActivator)
		if name != "" {
			r.Header.Set(network.ActivatorHeader, name)
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	rep := tracker.Report(t0.Add(time.Second))
	want := []stats.ActivatorShare{{Activator: stats.ActivatorKey("activator-a"), Concurrency: 0.5, Requests: 2}}
	if rep.ProxiedRequests != 4 || rep.ProxiedConcurrency != 1 || !slices.Equal(rep.ByActivator, want) {
		t.Errorf("report = %+v, want 4 proxied requests, activator-a's 2 in its share", rep)
	}
	if n := tracker.InFlight(); n != 0 {
		t.Errorf("in flight after = %d, want 0", n)
	}
}

func TestAccountingCountsPanickingRequests(t *testing.T) {
	tracker := stats.NewTracker(time.Unix(0, 0))
	h := &accounting{tracker: tracker, clock: testclock.NewFakeClock(time.Unix(0, 0)), next: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic(http.ErrAbortHandler)
	})}
	func() {
		defer func() { recover() }()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	}()
	if n := tracker.InFlight(); n != 0 {
		t.Errorf("an aborted request stays in flight: %d", n)
	}
}

func TestReporter(t *testing.T) {
	t0 := testTime
	clk := newNotifyClock()
	// The loop waits for its next tick once it has reported.
	waiting := make(chan struct{}, 1)
	clk.onTick = func(time.Duration) { waiting <- struct{}{} }
	tracker := stats.NewTracker(t0)
	rep := newReporter(tracker, clk, t0.Add(-time.Minute)) // the process started a minute ago

	get := func(accept string) *http.Response {
		req := httptest.NewRequest("GET", network.StatsPath, nil)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		w := httptest.NewRecorder()
		rep.ServeHTTP(w, req)
		return w.Result()
	}
	// Before the first period ends: an empty report of length zero.
	var got stats.Report
	if err := got.UnmarshalBinary([]byte(readAll(t, get("")))); err != nil {
		t.Fatal(err)
	}
	if !got.End.Equal(t0.Add(-time.Minute)) || got.Period != 0 || got.Requests != 0 {
		t.Errorf("initial report = %+v, want empty at the start", got)
	}

	go rep.run(t.Context(), clk.NewTicker(ReportingPeriod))
	recv(t, waiting, "the reporter to wait for its first tick")
	tracker.Start(t0, false)
	clk.Step(ReportingPeriod)
	recv(t, waiting, "the first report")

	res := get("")
	if ct := res.Header.Get("Content-Type"); ct != stats.ContentType {
		t.Errorf("Content-Type = %q, want %q", ct, stats.ContentType)
	}
	if err := got.UnmarshalBinary([]byte(readAll(t, res))); err != nil {
		t.Fatal(err)
	}
	want := stats.Report{End: t0.Add(time.Second).UTC(), Period: time.Second, Concurrency: 1, Requests: 1, Uptime: time.Minute + time.Second}
	if !got.End.Equal(want.End) || got.Period != want.Period || got.Concurrency != want.Concurrency ||
		got.Requests != want.Requests || got.Uptime != want.Uptime {
		t.Errorf("binary report = %+v, want %+v", got, want)
	}

	res = get("text/html, application/json;q=0.9")
	if ct := res.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var fromJSON stats.Report
	if err := json.Unmarshal([]byte(readAll(t, res)), &fromJSON); err != nil {
		t.Fatal(err)
	}
	if fromJSON.Requests != 1 || fromJSON.Uptime != want.Uptime {
		t.Errorf("JSON report = %+v", fromJSON)
	}

	// A request from an activator that names itself, held over the next
	// period: version 2, to a scraper that asks for it, carries its share;
	// version 1 its proxied figures alone.
	tracker.StartFrom(t0.Add(time.Second), stats.ActivatorKey("activator-a"))
	clk.Step(ReportingPeriod)
	recv(t, waiting, "the second report")
	res = get(stats.ContentTypeV2 + ", " + stats.ContentType + ";q=0.5")
	if ct := res.Header.Get("Content-Type"); ct != stats.ContentTypeV2 {
		t.Errorf("Content-Type = %q, want %q", ct, stats.ContentTypeV2)
	}
	if err := got.UnmarshalBinary([]byte(readAll(t, res))); err != nil {
		t.Fatal(err)
	}
	share := stats.ActivatorShare{Activator: stats.ActivatorKey("activator-a"), Concurrency: 1, Requests: 1}
	if !got.Attributed || len(got.ByActivator) != 1 || got.ByActivator[0] != share || got.ProxiedConcurrency != 1 {
		t.Errorf("version 2 report = %+v, want activator-a's share %+v", got, share)
	}
	if err := got.UnmarshalBinary([]byte(readAll(t, get(stats.ContentType)))); err != nil {
		t.Fatal(err)
	}
	if got.Attributed || len(got.ByActivator) != 0 || got.ProxiedConcurrency != 1 {
		t.Errorf("version 1 report = %+v, want the proxied figures without shares", got)
	}
	tracker.EndFrom(t0.Add(2*time.Second), stats.ActivatorKey("activator-a"))

	// The next period has no new arrival but the request is still held.
	clk.Step(ReportingPeriod)
	recv(t, waiting, "the third report")
	res = get("")
	if err := got.UnmarshalBinary([]byte(readAll(t, res))); err != nil {
		t.Fatal(err)
	}
	if got.Requests != 0 || got.Concurrency != 1 {
		t.Errorf("second period = %+v, want 0 requests, concurrency 1", got)
	}
}

func TestAcceptsJSON(t *testing.T) {
	for accept, want := range map[string]bool{
		"":                                  false,
		"*/*":                               false,
		stats.ContentType:                   false,
		"application/json":                  true,
		"text/plain, application/json; q=1": true,
		"application/jsonx":                 false,
	} {
		if got := accepts([]string{accept}, "application/json"); got != want {
			t.Errorf("accepts(%q, JSON) = %v, want %v", accept, got, want)
		}
	}
}
