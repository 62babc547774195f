package reporter

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/swell-run/swell/pkg/stats"
)

// sliceSource emits a fixed list of services without allocating, as the
// activator's source over its trackers must.
type sliceSource struct {
	svcs []string
	f    stats.ActivatorFigures
}

func (s *sliceSource) Report(_ time.Time, emit func(string, stats.ActivatorFigures)) {
	for _, svc := range s.svcs {
		emit(svc, s.f)
	}
}

// discardConn is a websocket to a loopback server that reads and drops
// every message.
func discardConn(tb testing.TB) *websocket.Conn {
	tb.Helper()
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		for {
			if _, _, err := ws.NextReader(); err != nil {
				return
			}
		}
	}))
	tb.Cleanup(srv.Close)
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ws.Close() })
	return ws
}

func newBenchReporter(tb testing.TB, services int) *Reporter {
	tb.Helper()
	src := &sliceSource{f: stats.ActivatorFigures{Concurrency: 1.5, Requests: 12, InFlight: 2}}
	for i := range services {
		src.svcs = append(src.svcs, fmt.Sprintf("namespace-%d/service-%d", i%10, i))
	}
	r, err := New(Config{URL: "ws://unused/activator", Token: testToken, Name: "act-1", Source: src})
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// Once warmed up, encoding a period's report allocates nothing, whatever
// the number of services (the websocket write is measured by BenchmarkReport).
func TestBuildReportAllocatesNothing(t *testing.T) {
	r := newBenchReporter(t, 10000)
	now := t0
	step := func() {
		now = now.Add(time.Second)
		r.buildReport(now)
	}
	step()
	step()
	if a := testing.AllocsPerRun(20, step); a != 0 {
		t.Errorf("%v allocations per 10000-service report, want 0", a)
	}
	if len(r.cuts) < 2 {
		t.Errorf("a 10000-service report in %d frames, want it split", len(r.cuts))
	}
}

// BenchmarkReport measures a whole period: encoding and writing the frames
// to a loopback websocket (its in-process reader's allocations included).
func BenchmarkReport(b *testing.B) {
	for _, n := range []int{10, 1000, 10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			r := newBenchReporter(b, n)
			ws := discardConn(b)
			now := t0
			b.ReportAllocs()
			for b.Loop() {
				now = now.Add(time.Second)
				if err := r.sendReport(ws, now); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkBuildReport measures encoding alone: the source's emits, the
// end-of-load bookkeeping and the frame splitting.
func BenchmarkBuildReport(b *testing.B) {
	r := newBenchReporter(b, 10000)
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Second)
		r.buildReport(now)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/10000, "ns/service")
}
