package queueproxy

import (
	"context"
	"encoding/json"
	"mime"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/stats"
)

// ReportingPeriod is how often the queue-proxy closes a stats period; the
// autoscaler scrapes at this pace.
const ReportingPeriod = time.Second

// accounting counts every request it passes to next in the tracker for as
// long as next holds it — waiting in the queue included, since a queued
// request is load the autoscaler must see.
type accounting struct {
	next    http.Handler
	tracker *stats.Tracker
	clock   clock.PassiveClock
}

func (a *accounting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	proxied := network.IsFromActivator(r)
	a.tracker.Start(a.clock.Now(), proxied)
	defer func() { a.tracker.End(a.clock.Now(), proxied) }()
	a.next.ServeHTTP(w, r)
}

// reporter closes a stats period every ReportingPeriod and serves the
// latest report at network.StatsPath.
type reporter struct {
	tracker *stats.Tracker
	clock   clock.WithTicker
	start   time.Time

	latest atomic.Pointer[snapshot]
}

// snapshot is a report with its binary form, encoded once per period
// rather than once per scrape.
type snapshot struct {
	report stats.Report
	binary []byte
}

// newReporter returns a reporter whose latest report, until the first
// period ends, is an empty one of length zero at start: scrapers of a new
// pod get a valid answer that says nothing was measured yet.
func newReporter(t *stats.Tracker, clk clock.WithTicker, start time.Time) *reporter {
	s := &reporter{tracker: t, clock: clk, start: start}
	empty := stats.Report{End: start}
	s.latest.Store(&snapshot{report: empty, binary: empty.AppendBinary(nil)})
	return s
}

// report closes the current period at now.
func (s *reporter) report(now time.Time) {
	rep := s.tracker.Report(now)
	rep.Uptime = now.Sub(s.start)
	s.latest.Store(&snapshot{report: rep, binary: rep.AppendBinary(nil)})
}

// run reports on every tick of ticker until ctx ends. The ticker is made
// by the caller so that it exists before run is scheduled (a fake clock's
// Step only reaches tickers that exist), and its channel taken at each
// wait, so that a test's clock sees run wait again once it has reported.
func (s *reporter) run(ctx context.Context, ticker clock.Ticker) {
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
			s.report(s.clock.Now())
		}
	}
}

// ServeHTTP serves the latest report: binary (stats.ContentType) unless
// the client accepts application/json.
func (s *reporter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	snap := s.latest.Load()
	h := w.Header()
	h.Set("Vary", "Accept")
	h.Set("Cache-Control", "no-store")
	if acceptsJSON(r.Header.Values("Accept")) {
		b, err := json.Marshal(snap.report)
		if err != nil {
			http.Error(w, "encode stats: "+err.Error(), http.StatusInternalServerError)
			return
		}
		h.Set("Content-Type", "application/json")
		w.Write(append(b, '\n'))
		return
	}
	h.Set("Content-Type", stats.ContentType)
	w.Write(snap.binary)
}

// acceptsJSON reports whether an Accept header names application/json.
func acceptsJSON(accept []string) bool {
	for _, v := range accept {
		for part := range strings.SplitSeq(v, ",") {
			if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == "application/json" {
				return true
			}
		}
	}
	return false
}
