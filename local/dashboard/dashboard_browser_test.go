package dashboard

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/swell-run/swell/internal/proctest"
)

// pageState is what the test reads of the page: its test hooks, the load
// path of each chart, and any Content-Security-Policy violation.
type pageState struct {
	Updates int    `json:"updates"`
	Status  string `json:"status"`
	Cards   []struct {
		Service     string `json:"service"`
		Points      string `json:"points"`
		LastLoad    string `json:"lastLoad"`
		LastReady   string `json:"lastReady"`
		LastDesired string `json:"lastDesired"`
		LastQueued  string `json:"lastQueued"`
		LoadD       string `json:"loadD"`
	} `json:"cards"`
	CSP []string `json:"csp"`
}

const readPage = `JSON.stringify({
  updates: Number((document.body || { dataset: {} }).dataset.updates || 0),
  status: (document.getElementById('status') || {}).textContent || '',
  cards: [...document.querySelectorAll('[data-service]')].map((c) => {
    const load = c.querySelector('svg path[data-series="load"]');
    return {
      service: c.dataset.service, points: c.dataset.points || '',
      lastLoad: c.dataset.lastLoad || '', lastReady: c.dataset.lastReady || '',
      lastDesired: c.dataset.lastDesired || '', lastQueued: c.dataset.lastQueued || '',
      loadD: load ? load.getAttribute('d') : '',
    };
  }),
  csp: window.__csp || [],
})`

// watchCSP runs before the page's own script and collects policy violations,
// which the browser reports as console messages rather than exceptions.
const watchCSP = `window.__csp = [];
document.addEventListener('securitypolicyviolation', (e) => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));`

func TestDashboardInChromium(t *testing.T) {
	r := New(time.Minute)
	var failing atomic.Bool
	h := r.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if failing.Load() && req.URL.Path == "/api/history" {
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, req)
	}))
	// Closed after Chromium is gone (cleanups run last-registered first), so
	// no browser connection keeps Close waiting.
	t.Cleanup(srv.Close)

	base := time.Now().Truncate(time.Second)
	sec := 0
	record := func(samples ...Sample) {
		for i := range samples {
			samples[i].Point.Time = base.Add(time.Duration(sec) * time.Second)
		}
		r.Record(samples)
		sec++
	}
	hello := func(load float64, ready, desired, queued int) Sample {
		return Sample{Service: "hello", Metric: "concurrency", Target: 10,
			Point: Point{Load: load, Stable: load, Panic: load, Ready: ready, Desired: desired, Queued: queued}}
	}
	for range 3 {
		record(hello(0, 1, 1, 0))
	}

	c := startChromium(t)
	for _, m := range []string{"Runtime.enable", "Page.enable"} {
		if err := c.call(m, map[string]any{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.call("Page.addScriptToEvaluateOnNewDocument", map[string]any{"source": watchCSP}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.call("Page.navigate", map[string]any{"url": srv.URL + "/"}, nil); err != nil {
		t.Fatal(err)
	}

	var st pageState
	read := func() bool {
		st = pageState{}
		if err := c.evalJSON(readPage, &st); err != nil {
			t.Logf("read page: %v", err) // the page may still be loading
			return false
		}
		return true
	}
	until := func(what string, cond func() bool) {
		t.Helper()
		proctest.Eventually(t, 10*time.Second, func() bool { return read() && cond() },
			"%s; page: %+v; exceptions: %v", what, &st, lazy(func() any { return c.thrown() }))
	}

	until("a card for hello with load 0", func() bool {
		return len(st.Cards) == 1 && st.Cards[0].Service == "hello" && st.Cards[0].Points != "" &&
			st.Cards[0].Points != "0" && st.Cards[0].LastLoad == "0" && st.Updates > 0 && st.Status == "live"
	})
	firstD := st.Cards[0].LoadD
	if !strings.HasPrefix(firstD, "M") {
		t.Fatalf("load path d = %q, want a path", firstD)
	}

	// Load arrives; a second service appears and sorts after hello.
	for range 3 {
		record(hello(42, 3, 4, 7), Sample{Service: "world", Metric: "rps", Target: 100, Point: Point{Load: 5, Ready: 1, Desired: 1}})
	}
	until("hello at load 42, ready 3, queued 7, and a world card", func() bool {
		return len(st.Cards) == 2 && st.Cards[0].Service == "hello" && st.Cards[1].Service == "world" &&
			st.Cards[0].LastLoad == "42" && st.Cards[0].LastReady == "3" && st.Cards[0].LastDesired == "4" &&
			st.Cards[0].LastQueued == "7" && st.Cards[0].Points == "6"
	})
	if st.Cards[0].LoadD == firstD {
		t.Errorf("load path d unchanged after load 42: %q", firstD)
	}

	// The API fails: the page says so and keeps polling, then recovers.
	failing.Store(true)
	until("the disconnected notice", func() bool { return st.Status == "disconnected — retrying" })
	updates := st.Updates
	failing.Store(false)
	record(hello(43, 3, 3, 0))
	until("the page live again with load 43", func() bool {
		return st.Status == "live" && st.Updates > updates && st.Cards[0].LastLoad == "43"
	})

	// world goes idle for longer than keep: the recorder forgets it and its
	// card disappears.
	sec += 61
	record(hello(1, 1, 1, 0))
	until("the world card removed", func() bool {
		return len(st.Cards) == 1 && st.Cards[0].Service == "hello" && st.Cards[0].LastLoad == "1"
	})

	if path := os.Getenv("SWELL_DASHBOARD_SCREENSHOT"); path != "" {
		screenshot(t, c, path)
	}
	if len(st.CSP) > 0 {
		t.Errorf("Content-Security-Policy violations: %v", st.CSP)
	}
	if ex := c.thrown(); len(ex) > 0 {
		t.Errorf("uncaught exceptions in the page: %v", ex)
	}
}

// screenshot saves the page as a PNG, for a person to look at the dashboard.
func screenshot(t *testing.T, c *cdp, path string) {
	t.Helper()
	var shot struct{ Data string }
	if err := c.call("Page.captureScreenshot", map[string]any{"format": "png"}, &shot); err != nil {
		t.Fatal(err)
	}
	b, err := base64.StdEncoding.DecodeString(shot.Data)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// lazy formats as the value f returns when printed, not when passed.
type lazy func() any

func (l lazy) String() string { return fmt.Sprint(l()) }
