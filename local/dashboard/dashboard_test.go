package dashboard

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func at(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }

func sample(service string, sec int, load float64) Sample {
	return Sample{Service: service, Metric: "concurrency", Target: 10, Point: Point{Time: at(sec), Load: load, Ready: 1, Desired: 1}}
}

// get serves one request and returns the response and its body.
func get(t *testing.T, h http.Handler, method, target string) (*http.Response, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
	resp := rec.Result()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func history(t *testing.T, r *Recorder, target string) historyJSON {
	t.Helper()
	resp, body := get(t, r.Handler(), http.MethodGet, target)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", target, resp.Status, body)
	}
	var h historyJSON
	if err := json.Unmarshal([]byte(body), &h); err != nil {
		t.Fatalf("GET %s: decode %q: %v", target, body, err)
	}
	return h
}

func loads(ps []Point) []float64 {
	out := []float64{}
	for _, p := range ps {
		out = append(out, p.Load)
	}
	return out
}

func TestRingKeepsOnlyKeep(t *testing.T) {
	r := New(5 * time.Second)
	for sec := range 20 {
		r.Record([]Sample{sample("hello", sec, float64(sec))})
	}
	h := history(t, r, "/api/history")
	if len(h.Services) != 1 {
		t.Fatalf("services = %+v, want hello only", h.Services)
	}
	// Seconds 14..19: the newest and the five before it, nothing older.
	got := fmt.Sprint(loads(h.Services[0].Points))
	if want := "[14 15 16 17 18 19]"; got != want {
		t.Errorf("loads = %s, want %s", got, want)
	}
	if h.Now != at(19).UnixMilli() {
		t.Errorf("now = %d, want the newest point's time %d", h.Now, at(19).UnixMilli())
	}
}

func TestRingBoundedWhenRecordingFasterThanOncePerSecond(t *testing.T) {
	r := New(3 * time.Second)
	for i := range 100 {
		r.Record([]Sample{{Service: "hello", Point: Point{Time: t0.Add(time.Duration(i) * 10 * time.Millisecond), Load: float64(i)}}})
	}
	ps := history(t, r, "/api/history").Services[0].Points
	got := fmt.Sprint(loads(ps))
	if want := "[96 97 98 99]"; got != want {
		t.Errorf("loads = %s, want the ring's 4 newest %s", got, want)
	}
}

func TestDefaultKeep(t *testing.T) {
	r := New(0)
	for sec := range 700 {
		r.Record([]Sample{sample("hello", sec, 1)})
	}
	ps := history(t, r, "/api/history").Services[0].Points
	if len(ps) != 601 || ps[0].T != at(99).UnixMilli() {
		t.Errorf("kept %d points from T=%d, want 601 from %d (10m)", len(ps), ps[0].T, at(99).UnixMilli())
	}
}

func TestOldPointsTrimmedAfterAPause(t *testing.T) {
	r := New(10 * time.Second)
	for sec := range 5 {
		r.Record([]Sample{sample("hello", sec, 1)})
	}
	// Silent for 8s (less than keep: not forgotten), then 4 more seconds:
	// the first points are now older than keep although the ring has room.
	for sec := 13; sec < 17; sec++ {
		r.Record([]Sample{sample("hello", sec, 2)})
	}
	got := fmt.Sprint(loads(history(t, r, "/api/history").Services[0].Points))
	if want := "[2 2 2 2]"; got != want {
		t.Errorf("loads = %s, want %s", got, want)
	}
}

func TestSinceFilters(t *testing.T) {
	r := New(time.Minute)
	for sec := range 5 {
		r.Record([]Sample{sample("hello", sec, float64(sec)), sample("world", sec, float64(10+sec))})
	}
	for _, tc := range []struct {
		query      string
		hello, wor string
	}{
		{"", "[0 1 2 3 4]", "[10 11 12 13 14]"},
		{fmt.Sprintf("?since=%d", at(2).UnixMilli()), "[3 4]", "[13 14]"},
		{fmt.Sprintf("?since=%d", at(2).UnixMilli()-1), "[2 3 4]", "[12 13 14]"},
		{fmt.Sprintf("?since=%d", at(4).UnixMilli()), "[]", "[]"},
		{"?since=0", "[0 1 2 3 4]", "[10 11 12 13 14]"},
		{"?since=-5", "[0 1 2 3 4]", "[10 11 12 13 14]"},
	} {
		h := history(t, r, "/api/history"+tc.query)
		if len(h.Services) != 2 || h.Services[0].Name != "hello" || h.Services[1].Name != "world" {
			t.Fatalf("%q: services %+v, want hello and world in order (listed even without new points)", tc.query, h.Services)
		}
		if got := fmt.Sprint(loads(h.Services[0].Points)); got != tc.hello {
			t.Errorf("%q: hello = %s, want %s", tc.query, got, tc.hello)
		}
		if got := fmt.Sprint(loads(h.Services[1].Points)); got != tc.wor {
			t.Errorf("%q: world = %s, want %s", tc.query, got, tc.wor)
		}
	}
}

func TestHistoryJSONShape(t *testing.T) {
	r := New(time.Minute)
	r.Record([]Sample{{Service: "hello", Metric: "rps", Target: 200, Point: Point{
		Time: at(1), Load: 42.5, Stable: 40, Panic: 44, Ready: 3, Desired: 4, Queued: 7, PanicMode: true,
	}}})
	_, body := get(t, r.Handler(), http.MethodGet, "/api/history")
	want := fmt.Sprintf(`{"now":%[1]d,"services":[{"name":"hello","metric":"rps","target":200,"points":[`+
		`{"t":%[1]d,"load":42.5,"stable":40,"panic":44,"ready":3,"desired":4,"queued":7,"panicMode":true}]}]}`, at(1).UnixMilli())
	if body != want {
		t.Errorf("body\n %s\nwant\n %s", body, want)
	}
}

func TestEmptyHistoryUsesClock(t *testing.T) {
	r := New(time.Minute)
	r.clock = clocktesting.NewFakePassiveClock(at(100))
	_, body := get(t, r.Handler(), http.MethodGet, "/api/history")
	if want := fmt.Sprintf(`{"now":%d,"services":[]}`, at(100).UnixMilli()); body != want {
		t.Errorf("body = %s, want %s", body, want)
	}
}

func TestRecordEdgeCases(t *testing.T) {
	r := New(time.Minute)
	r.clock = clocktesting.NewFakePassiveClock(at(50))
	r.Record([]Sample{
		{Service: "", Point: Point{Time: at(1), Load: 1}},                                                         // no name: dropped
		{Service: "hello", Point: Point{Load: 1}},                                                                 // zero Time: stamped at 50
		{Service: "hello", Point: Point{Time: at(50), Load: 2}},                                                   // same ms: dropped
		{Service: "hello", Point: Point{Time: at(49), Load: 3}},                                                   // older: dropped
		{Service: "hello", Target: math.NaN(), Point: Point{Time: at(51), Load: math.Inf(1), Stable: math.NaN()}}, // non-finite: 0
	})
	h := history(t, r, "/api/history")
	if len(h.Services) != 1 {
		t.Fatalf("services = %+v, want hello only", h.Services)
	}
	ps := h.Services[0].Points
	if len(ps) != 2 || ps[0].T != at(50).UnixMilli() || ps[0].Load != 1 || ps[1].T != at(51).UnixMilli() || ps[1].Load != 0 || ps[1].Stable != 0 {
		t.Errorf("points = %+v, want load 1 at 50s and 0 at 51s", ps)
	}
}

func TestIdleServicesForgotten(t *testing.T) {
	r := New(10 * time.Second)
	r.Record([]Sample{sample("hello", 0, 1), sample("world", 0, 1)})
	for sec := 1; sec <= 10; sec++ {
		r.Record([]Sample{sample("hello", sec, 1)})
	}
	if h := history(t, r, "/api/history"); len(h.Services) != 2 {
		t.Fatalf("after keep exactly: services %+v, want hello and world", h.Services)
	}
	r.Record([]Sample{sample("hello", 11, 1)})
	h := history(t, r, "/api/history")
	if len(h.Services) != 1 || h.Services[0].Name != "hello" {
		t.Fatalf("services %+v, want world forgotten after 11s idle with keep 10s", h.Services)
	}
	// A forgotten service that comes back starts afresh.
	r.Record([]Sample{sample("hello", 12, 1), sample("world", 12, 5)})
	h = history(t, r, "/api/history")
	if len(h.Services) != 2 || fmt.Sprint(loads(h.Services[1].Points)) != "[5]" {
		t.Errorf("services %+v, want world back with one point", h.Services)
	}
}

func TestBadSince(t *testing.T) {
	r := New(time.Minute)
	for _, q := range []string{"since=", "since=abc", "since=1.5", "since=99999999999999999999", "since=1&since=2", "since=%zz"} {
		resp, body := get(t, r.Handler(), http.MethodGet, "/api/history?"+q)
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400", q, resp.StatusCode)
		}
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
			t.Errorf("%s: Content-Type %q, want text/plain", q, ct)
		}
		if !strings.Contains(body, "since") && !strings.Contains(body, "query") {
			t.Errorf("%s: body %q does not say what is wrong", q, body)
		}
	}
	_, body := get(t, r.Handler(), http.MethodGet, "/api/history?since=abc")
	if !strings.Contains(body, `"abc"`) || !strings.Contains(body, "milliseconds") {
		t.Errorf("body %q: want the bad value and what is accepted", body)
	}
}

func TestRoutesAndMethods(t *testing.T) {
	h := New(time.Minute).Handler()
	for _, tc := range []struct {
		method, path string
		status       int
		ctype        string
		contains     string
	}{
		{"GET", "/", 200, "text/html", `<script src="dashboard.js"`},
		{"GET", "/dashboard.js", 200, "text/javascript", "api/history"},
		{"GET", "/dashboard.css", 200, "text/css", "prefers-color-scheme"},
		{"GET", "/api/history", 200, "application/json", `"services"`},
		{"HEAD", "/", 200, "text/html", ""},
		{"HEAD", "/api/history", 200, "application/json", ""},
		{"GET", "/index.html", 404, "text/plain", ""},
		{"GET", "/api/history/", 404, "text/plain", ""},
		{"GET", "/static/dashboard.js", 404, "text/plain", ""},
		{"GET", "/favicon.ico", 404, "text/plain", ""},
		{"POST", "/", 405, "text/plain", "GET or HEAD"},
		{"PUT", "/api/history", 405, "text/plain", "GET or HEAD"},
		{"DELETE", "/nowhere", 405, "text/plain", "GET or HEAD"},
	} {
		resp, body := get(t, h, tc.method, tc.path)
		if resp.StatusCode != tc.status {
			t.Errorf("%s %s: status %d, want %d", tc.method, tc.path, resp.StatusCode, tc.status)
		}
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, tc.ctype) {
			t.Errorf("%s %s: Content-Type %q, want %s", tc.method, tc.path, ct, tc.ctype)
		}
		if !strings.Contains(body, tc.contains) {
			t.Errorf("%s %s: body does not contain %q", tc.method, tc.path, tc.contains)
		}
		if tc.status == 405 && resp.Header.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s %s: Allow %q, want GET, HEAD", tc.method, tc.path, resp.Header.Get("Allow"))
		}
		if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("%s %s: X-Content-Type-Options %q, want nosniff", tc.method, tc.path, got)
		}
		if got := resp.Header.Get("Content-Security-Policy"); !strings.HasPrefix(got, "default-src 'self'") || strings.Contains(got, "unsafe") {
			t.Errorf("%s %s: Content-Security-Policy %q, want 'self' only", tc.method, tc.path, got)
		}
	}
}

func TestCacheControl(t *testing.T) {
	h := New(time.Minute).Handler()
	for path, want := range map[string]string{
		"/api/history":         "no-store",
		"/api/history?since=x": "no-store",
		"/":                    "no-cache",
		"/dashboard.js":        "no-cache",
	} {
		resp, _ := get(t, h, http.MethodGet, path)
		if got := resp.Header.Get("Cache-Control"); got != want {
			t.Errorf("%s: Cache-Control %q, want %q", path, got, want)
		}
	}
}

// TestConcurrentRecordAndServe is for the race detector: recorders and
// readers at once on a real server.
func TestConcurrentRecordAndServe(t *testing.T) {
	r := New(20 * time.Second)
	srv := httptest.NewServer(r.Handler())
	defer srv.Close()
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() {
			for sec := range 200 {
				r.Record([]Sample{sample(fmt.Sprintf("svc-%d", w), sec, float64(sec)), sample("shared", sec, 1)})
			}
		})
	}
	for range 3 {
		wg.Go(func() {
			for i := range 30 {
				resp, err := srv.Client().Get(fmt.Sprintf("%s/api/history?since=%d", srv.URL, at(i).UnixMilli()))
				if err != nil {
					t.Error(err)
					return
				}
				var h historyJSON
				if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
					t.Error(err)
				}
				resp.Body.Close()
				for _, s := range h.Services {
					for j := 1; j < len(s.Points); j++ {
						if s.Points[j].T <= s.Points[j-1].T {
							t.Errorf("%s: points out of order at %d", s.Name, j)
						}
					}
				}
			}
		})
	}
	wg.Wait()
	h := history(t, r, "/api/history")
	if len(h.Services) != 4 {
		t.Fatalf("services %d, want 4", len(h.Services))
	}
	for _, s := range h.Services {
		if len(s.Points) != 21 {
			t.Errorf("%s: %d points, want 21 (20s kept)", s.Name, len(s.Points))
		}
	}
}
