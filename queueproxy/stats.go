package queueproxy

import (
	"context"
	"encoding/json"
	"mime"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/stats"
)

// ReportingPeriod is how often the queue-proxy closes a stats period; the
// autoscaler scrapes, or the queue-proxy pushes, at this pace.
const ReportingPeriod = time.Second

// accounting counts every request it passes to next in the tracker for as
// long as next holds it — waiting in the queue included, since a queued
// request is load the autoscaler must see.
type accounting struct {
	next    http.Handler
	tracker *stats.Tracker
	clock   clock.PassiveClock
	// watch, when set (the queue-proxy pushes), counts the requests too,
	// to push at once when the load changes sharply.
	watch *loadWatch
}

func (a *accounting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !network.IsFromActivator(r) {
		a.tracker.Start(a.clock.Now(), false)
		defer func() { a.tracker.End(a.clock.Now(), false) }()
	} else if key := activatorKey(r); a.tracker.StartFrom(a.clock.Now(), key) {
		defer func() { a.tracker.EndFrom(a.clock.Now(), key) }()
	} else {
		defer func() { a.tracker.End(a.clock.Now(), true) }()
	}
	// After the tracker, so that the report a sharp change pushes counts
	// the request that made it.
	if a.watch != nil {
		a.watch.start()
		defer a.watch.end()
	}
	a.next.ServeHTTP(w, r)
}

// maxActivatorName bounds the names hashed: a pod's name is at most 253
// bytes; a longer one is nobody's, and counts in no activator's share.
const maxActivatorName = 253

// activatorKey is stats.ActivatorKey of the name r's activator gave
// (network.ActivatorHeader), or 0 for none.
func activatorKey(r *http.Request) uint64 {
	name := r.Header.Get(network.ActivatorHeader)
	if name == "" || len(name) > maxActivatorName {
		return 0
	}
	return stats.ActivatorKey(name)
}

// reporter closes a stats period every ReportingPeriod and serves the
// latest report at network.StatsPath.
type reporter struct {
	tracker *stats.Tracker
	clock   clock.WithTicker
	start   time.Time
	// meter, when set, measures the app; each report carries its latest.
	meter *appMeter
	// outbox, when set (the queue-proxy pushes), gets every report closed.
	outbox *mailbox

	// mu serialises report: the pusher closes periods too, on a sharp
	// change, and latest must never go back to an older report.
	mu     sync.Mutex
	latest atomic.Pointer[snapshot]
}

// snapshot is a report with its binary forms, encoded once per period
// rather than once per scrape.
type snapshot struct {
	report   stats.Report
	binary   []byte // version 1, for scrapers that ask for nothing newer
	binaryV2 []byte
	binaryV3 []byte
}

func newSnapshot(rep stats.Report) *snapshot {
	rep.Attributed = true
	return &snapshot{report: rep, binary: rep.AppendBinary(nil), binaryV2: rep.AppendBinaryV2(nil), binaryV3: rep.AppendBinaryV3(nil)}
}

// newReporter returns a reporter whose latest report, until the first
// period ends, is an empty one of length zero at start: scrapers of a new
// pod get a valid answer that says nothing was measured yet.
func newReporter(t *stats.Tracker, clk clock.WithTicker, start time.Time) *reporter {
	s := &reporter{tracker: t, clock: clk, start: start}
	empty := stats.Report{End: start}
	s.latest.Store(newSnapshot(empty))
	return s
}

// report closes the current period at now. It never waits for the
// network: the outbox keeps only the newest report.
func (s *reporter) report(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reportLocked(now)
}

// reportNow closes the current period at the clock's now, read under the
// lock, so that the ticker's periods and the pusher's follow each other
// without one of length zero.
func (s *reporter) reportNow() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reportLocked(s.clock.Now())
}

func (s *reporter) reportLocked(now time.Time) {
	rep := s.tracker.Report(now)
	rep.Uptime = now.Sub(s.start)
	rep.App = s.meter.current()
	snap := newSnapshot(rep)
	s.latest.Store(snap)
	if s.outbox != nil {
		s.outbox.put(snap)
	}
}

// run reports on every tick of ticker until ctx ends.
func (s *reporter) run(ctx context.Context, ticker clock.Ticker) {
	onTicks(ctx, ticker, s.reportNow)
}

// onTicks calls f on every tick of ticker until ctx ends, then stops the
// ticker. The ticker is made by the caller so that it exists before the
// loop is scheduled (a fake clock's Step only reaches tickers that
// exist), and its channel taken at each wait, so that a test's clock sees
// the loop wait again once f has returned.
func onTicks(ctx context.Context, ticker clock.Ticker, f func()) {
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
			f()
		}
	}
}

// ServeHTTP serves the latest report: in binary version 3
// (stats.ContentTypeV3) or 2 (stats.ContentTypeV2), the newest a client
// accepts, else in JSON to one
// that accepts application/json, else in binary version 1
// (stats.ContentType), which every autoscaler reads.
func (s *reporter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	snap := s.latest.Load()
	h := w.Header()
	h.Set("Vary", "Accept")
	h.Set("Cache-Control", "no-store")
	accept := r.Header.Values("Accept")
	if accepts(accept, stats.ContentTypeV3) {
		h.Set("Content-Type", stats.ContentTypeV3)
		w.Write(snap.binaryV3)
		return
	}
	if accepts(accept, stats.ContentTypeV2) {
		h.Set("Content-Type", stats.ContentTypeV2)
		w.Write(snap.binaryV2)
		return
	}
	if accepts(accept, "application/json") {
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

// accepts reports whether an Accept header names the media type mt.
func accepts(accept []string, mt string) bool {
	for _, v := range accept {
		for part := range strings.SplitSeq(v, ",") {
			if t, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && t == mt {
				return true
			}
		}
	}
	return false
}
