package reporter

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"k8s.io/utils/clock"
	testclock "k8s.io/utils/clock/testing"

	// Tests only: both ends of the protocol run together here. Non-test
	// code of activator/ never imports autoscaler/.
	"github.com/swell-run/swell/autoscaler/collector"
	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/stats"
)

const testToken = "0123456789abcdef-test-token"

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// waitFor bounds every wait on the other end, so a broken test fails
// instead of hanging.
const waitFor = 10 * time.Second

// notifyClock is the fake clock, reporting every timer (the backoff) and
// ticker (the period) the reporter arms, so a test steps the clock exactly
// when the reporter waits on it.
type notifyClock struct {
	*testclock.FakeClock
	timers  chan time.Duration
	tickers chan time.Duration
}

func (c *notifyClock) NewTimer(d time.Duration) clock.Timer {
	t := c.FakeClock.NewTimer(d)
	c.timers <- d
	return t
}

func (c *notifyClock) NewTicker(d time.Duration) clock.Ticker {
	t := c.FakeClock.NewTicker(d)
	c.tickers <- d
	return t
}

// fakeSource emits the figures set on it, for every call.
type fakeSource struct {
	mu      sync.Mutex
	figures map[string]stats.ActivatorFigures
}

func (s *fakeSource) set(m map[string]stats.ActivatorFigures) {
	s.mu.Lock()
	s.figures = m
	s.mu.Unlock()
}

func (s *fakeSource) Report(_ time.Time, emit func(string, stats.ActivatorFigures)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for svc, f := range s.figures {
		emit(svc, f)
	}
}

// notifySink applies frames to the real store, then describes each on a
// channel.
type notifySink struct {
	acts    *collector.Activators
	applied chan string
}

func (s notifySink) Apply(activator string, f *stats.ActivatorFrame) {
	s.acts.Apply(activator, f)
	s.applied <- fmt.Sprintf("%s %s entries=%d period=%v", activator, f.Type, len(f.Entries), f.Period)
}

type rig struct {
	clock    *notifyClock
	src      *fakeSource
	acts     *collector.Activators
	sink     notifySink
	pokes    chan string
	attempts chan int // status of each upgrade request, as the server answered it
	ep       *collector.ActivatorEndpoint
	url      string
	logs     *observer.ObservedLogs
	reg      *prometheus.Registry
	rep      *Reporter
	cancel   context.CancelFunc
	done     chan error
}

func newRig(t *testing.T, tweak func(*Config)) *rig {
	t.Helper()
	r := &rig{
		clock: &notifyClock{FakeClock: testclock.NewFakeClock(t0),
			timers: make(chan time.Duration, 16), tickers: make(chan time.Duration, 16)},
		src:      &fakeSource{},
		acts:     collector.NewActivators(testclock.NewFakeClock(t0), 0),
		pokes:    make(chan string, 64),
		attempts: make(chan int, 64),
		reg:      prometheus.NewRegistry(),
	}
	r.sink = notifySink{acts: r.acts, applied: make(chan string, 256)}
	ep, err := collector.NewActivatorEndpoint(collector.EndpointConfig{
		Tokens: []string{testToken},
		Sink:   r.sink,
		OnPoke: func(svc string) { r.pokes <- svc },
	})
	if err != nil {
		t.Fatal(err)
	}
	r.ep = ep
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != network.ActivatorReportPath {
			http.NotFound(w, req)
			return
		}
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusSwitchingProtocols}
		ep.ServeHTTP(rec, req)
		if rec.status != http.StatusSwitchingProtocols {
			r.attempts <- rec.status
		}
	}))
	r.url = "ws" + strings.TrimPrefix(srv.URL, "http") + network.ActivatorReportPath
	t.Cleanup(func() { ep.Close(); srv.Close() })

	core, logs := observer.New(zapcore.InfoLevel)
	r.logs = logs
	cfg := Config{
		URL: r.url, Token: testToken, Name: "act-1", Source: r.src,
		Clock: r.clock, Logger: zap.New(core), Registerer: r.reg,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	if r.rep, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	return r
}

// statusRecorder notes the status of a refused upgrade; a hijacked
// connection never calls WriteHeader.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(s.ResponseWriter).Hijack()
}

// start runs the reporter; the test's cleanup stops it and checks that Run
// returned.
func (r *rig) start(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan error, 1)
	go func() { r.done <- r.rep.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
}

func (r *rig) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil && err != context.Canceled {
			t.Errorf("Run = %v, want context.Canceled", err)
		}
		r.done <- err // a second stop sees it too
	case <-time.After(waitFor):
		t.Fatalf("Run did not return within %v of the cancel", waitFor)
	}
}

func recv[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(waitFor):
		t.Fatalf("no %s within %v", what, waitFor)
		panic("unreachable")
	}
}

func (r *rig) applied(t *testing.T, want string) {
	t.Helper()
	if got := recv(t, r.sink.applied, "frame applied"); got != want {
		t.Fatalf("applied %q, want %q", got, want)
	}
}

// connected waits for the ticker and the report sent at once on connecting.
func (r *rig) connected(t *testing.T, wantEntries int, period time.Duration) {
	t.Helper()
	if d := recv(t, r.clock.tickers, "ticker"); d != DefaultPeriod {
		t.Fatalf("ticker of %v, want %v", d, DefaultPeriod)
	}
	r.applied(t, fmt.Sprintf("act-1 report entries=%d period=%v", wantEntries, period))
}

func TestReportsEachPeriodAndEndOfLoad(t *testing.T) {
	r := newRig(t, nil)
	r.start(t)
	r.connected(t, 0, 0)
	if got := value(t, r.rep.metrics.connected); got != 1 {
		t.Errorf("connected gauge = %v, want 1", got)
	}

	r.src.set(map[string]stats.ActivatorFigures{
		"ns/a": {Concurrency: 2.5, Requests: 3, InFlight: 1},
		"ns/b": {Concurrency: 0.5, Requests: 1},
	})
	r.clock.Step(time.Second)
	r.applied(t, "act-1 report entries=2 period=1s")
	if got, want := r.acts.Load("ns/a"), (collector.ActivatorLoad{Concurrency: 2.5, RPS: 3, Activators: 1, Pending: 1}); got != want {
		t.Errorf("Load(ns/a) = %+v, want %+v", got, want)
	}

	// ns/a's load ends: one explicit zero entry, then it is left out.
	r.src.set(map[string]stats.ActivatorFigures{"ns/b": {Concurrency: 1, Requests: 2}})
	r.clock.Step(time.Second)
	r.applied(t, "act-1 report entries=2 period=1s")
	if got, want := r.acts.Load("ns/a"), (collector.ActivatorLoad{Activators: 1}); got != want {
		t.Errorf("Load(ns/a) after its load ended = %+v, want %+v", got, want)
	}
	if got := r.acts.Load("ns/b").RPS; got != 2 {
		t.Errorf("Load(ns/b).RPS = %v, want 2", got)
	}
	r.src.set(nil)
	r.clock.Step(time.Second)
	r.applied(t, "act-1 report entries=1 period=1s") // ns/b's zero
	r.clock.Step(time.Second)
	r.applied(t, "act-1 report entries=0 period=1s") // heartbeat
	// The counter moves once WriteMessage has returned, which may be after
	// the autoscaler applied the frame: read it once Run has returned.
	r.stop(t)
	if got := value(t, r.rep.metrics.frames.WithLabelValues("report")); got != 5 {
		t.Errorf("report frames = %v, want 5", got)
	}
}

func TestPokeArrivesWithoutATick(t *testing.T) {
	r := newRig(t, nil)
	r.start(t)
	r.connected(t, 0, 0)
	r.rep.Poke("ns/zero")
	if got := recv(t, r.pokes, "poke"); got != "ns/zero" {
		t.Fatalf("OnPoke(%q), want ns/zero", got)
	}
	if got := r.acts.Pending("ns/zero"); got != 1 {
		t.Errorf("Pending(ns/zero) = %d, want 1", got)
	}
	r.applied(t, "act-1 poke entries=1 period=0s")
}

func TestWrongTokenBacksOffAndRetries(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Token = "not-the-right-token-at-all" })
	r.start(t)
	for n := 1; n <= 8; n++ {
		if st := recv(t, r.attempts, "upgrade attempt"); st != http.StatusUnauthorized {
			t.Fatalf("attempt %d answered %d, want 401", n, st)
		}
		d := recv(t, r.clock.timers, "backoff timer")
		full := min(DefaultMinBackoff<<(n-1), DefaultMaxBackoff)
		if d < full/2 || d > full {
			t.Fatalf("backoff %d = %v, want within [%v, %v]", n, d, full/2, full)
		}
		r.clock.Step(d)
	}
	recv(t, r.attempts, "upgrade attempt")
	if n := r.logs.FilterMessageSnippet("refused the activator's bearer token").Len(); n < 8 {
		t.Errorf("%d logs of the refused token, want at least 8", n)
	}
	if got := value(t, r.rep.metrics.dials.WithLabelValues("unauthorized")); got < 8 {
		t.Errorf("unauthorized dials = %v, want at least 8", got)
	}
	if got := value(t, r.rep.metrics.connected); got != 0 {
		t.Errorf("connected gauge = %v, want 0", got)
	}
}

// TestTokenFileReadAtEachDial: a token replaced in its file (rotated, or
// renewed by the kubelet) is the one the next connection presents, so an
// activator refused with an old token recovers without a restart. A
// missing file is a failed dial, retried like any other.
func TestTokenFileReadAtEachDial(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("the-token-before-the-rotation\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := newRig(t, func(c *Config) { c.Token, c.TokenFile = "", file })
	r.start(t)
	if st := recv(t, r.attempts, "upgrade attempt"); st != http.StatusUnauthorized {
		t.Fatalf("old token answered %d, want 401", st)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	first := recv(t, r.clock.timers, "backoff timer")
	r.clock.Step(first)
	second := recv(t, r.clock.timers, "backoff timer")
	if err := os.WriteFile(file, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r.clock.Step(second)
	// The first report covers the time since the reporter started.
	r.connected(t, 0, first+second)
	if got := value(t, r.rep.metrics.dials.WithLabelValues("no-token")); got != 1 {
		t.Errorf("no-token dials = %v, want 1", got)
	}
}

func TestReconnectDeliversFiguresAndPokesKeptWhileDown(t *testing.T) {
	r := newRig(t, nil)
	r.start(t)
	r.connected(t, 0, 0)

	d := r.replace(t, 1)
	if n := r.logs.FilterMessage("the autoscaler closed the connection").FilterField(zap.Int("code", collector.CloseReplaced)).Len(); n != 1 {
		t.Errorf("%d logs of the close with 4000, want 1", n)
	}

	// While down: requests arrive and the trackers keep accumulating.
	r.rep.Poke("ns/p")
	r.rep.Poke("ns/p") // coalesces
	r.src.set(map[string]stats.ActivatorFigures{"ns/p": {Concurrency: 4, Requests: 9, InFlight: 4}})
	r.clock.Step(d + 2*time.Second)

	if got := recv(t, r.pokes, "poke kept while disconnected"); got != "ns/p" {
		t.Fatalf("OnPoke(%q), want ns/p", got)
	}
	r.applied(t, "act-1 poke entries=1 period=0s")
	// The report sent at once on reconnecting covers the whole time since
	// the last one.
	r.connected(t, 1, d+2*time.Second)
	if got := r.acts.Load("ns/p"); got.Concurrency != 4 || got.Pending != 4 {
		t.Errorf("Load(ns/p) = %+v, want concurrency 4, pending 4", got)
	}
	// And figures flow each period again.
	r.clock.Step(time.Second)
	r.applied(t, "act-1 report entries=1 period=1s")
	select {
	case p := <-r.pokes:
		t.Errorf("a second poke for %q: pokes made while down must coalesce", p)
	default:
	}
	// That connection lasted a period: the backoff starts over.
	r.replace(t, 1)
}

// replace takes the reporter's place at the endpoint with a connection
// under the same name, so the endpoint closes the reporter's with 4000,
// and checks the backoff that follows is the n-th in a row.
func (r *rig) replace(t *testing.T, n int) time.Duration {
	t.Helper()
	h := http.Header{"Authorization": {"Bearer " + testToken}}
	ws, _, err := websocket.DefaultDialer.Dial(r.url, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	if err := ws.WriteMessage(websocket.BinaryMessage, stats.AppendActivatorHello(nil, "act-1")); err != nil {
		t.Fatal(err)
	}
	d := recv(t, r.clock.timers, "backoff timer after the close")
	full := DefaultMinBackoff << (n - 1)
	if d < full/2 || d > full {
		t.Fatalf("backoff %d after the close = %v, want within [%v, %v]", n, d, full/2, full)
	}
	return d
}

// TestRedialCutsTheBackoffShort: when the autoscaler's address changes (a
// new leader), a reporter backing off reconnects at once, without the fake
// clock moving; a Redial made while connected does not shorten a later
// backoff.
func TestRedialCutsTheBackoffShort(t *testing.T) {
	r := newRig(t, nil)
	r.start(t)
	r.connected(t, 0, 0)
	r.rep.Redial() // while connected: old news by the next disconnect
	r.replace(t, 1)
	r.rep.Redial()
	r.connected(t, 0, 0)
	// The stale Redial was drained: this backoff runs its course.
	d := r.replace(t, 2)
	select {
	case got := <-r.sink.applied:
		t.Fatalf("reconnected before the backoff of %v ended: %s", d, got)
	default:
	}
	r.clock.Step(d)
	r.connected(t, 0, d)
}

// Connections that end before their first period do not reset the backoff.
func TestShortConnectionsKeepBackingOff(t *testing.T) {
	r := newRig(t, nil)
	r.start(t)
	var period time.Duration
	for n := 1; n <= 4; n++ {
		r.connected(t, 0, period)
		d := r.replace(t, n)
		r.clock.Step(d)
		period = d // the report on reconnecting covers the backoff
	}
}

func TestStopWhileConnectedAndWhileBackingOff(t *testing.T) {
	t.Run("connected", func(t *testing.T) {
		r := newRig(t, nil)
		r.start(t)
		r.connected(t, 0, 0)
		r.stop(t)
		if got := value(t, r.rep.metrics.connected); got != 0 {
			t.Errorf("connected gauge = %v after Run returned, want 0", got)
		}
	})
	t.Run("backing off", func(t *testing.T) {
		r := newRig(t, func(c *Config) { c.Token = "not-the-right-token-at-all" })
		r.start(t)
		recv(t, r.clock.timers, "backoff timer")
		r.stop(t)
	})
}

// A report larger than stats.ActivatorMaxFrameSize goes out as several
// frames with the same End and Period, each accepted by the endpoint.
func TestLargeReportIsSplit(t *testing.T) {
	r := newRig(t, nil)
	m := make(map[string]stats.ActivatorFigures)
	long := strings.Repeat("n", 63)
	for i := range 3000 {
		m[fmt.Sprintf("%s/%s-%05d", long, strings.Repeat("s", 50), i)] = stats.ActivatorFigures{Concurrency: 1, Requests: 1}
	}
	r.src.set(m)
	r.start(t)
	recv(t, r.clock.tickers, "ticker")
	total, frames := 0, 0
	for total < len(m) {
		got := recv(t, r.sink.applied, "report frame")
		var n int
		if _, err := fmt.Sscanf(got, "act-1 report entries=%d period=0s", &n); err != nil {
			t.Fatalf("applied %q: %v", got, err)
		}
		total += n
		frames++
	}
	if total != len(m) || frames < 2 {
		t.Fatalf("%d entries in %d frames, want %d in at least 2", total, frames, len(m))
	}
	if got := r.acts.Load(long + "/" + strings.Repeat("s", 50) + "-02999").Concurrency; got != 1 {
		t.Errorf("last service's concurrency = %v, want 1", got)
	}
}

func TestBackoffBounds(t *testing.T) {
	r := newRig(t, nil)
	for n := 1; n < 40; n++ {
		full := time.Duration(math.Min(float64(DefaultMinBackoff)*math.Pow(2, float64(n-1)), float64(DefaultMaxBackoff)))
		for range 50 {
			if d := r.rep.backoff(n); d < full/2 || d > full {
				t.Fatalf("backoff(%d) = %v, want within [%v, %v]", n, d, full/2, full)
			}
		}
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	good := Config{URL: "ws://x/activator", Token: testToken, Name: "act-1", Source: &fakeSource{}}
	for _, c := range []struct {
		tweak func(*Config)
		want  string
	}{
		{func(c *Config) { c.URL = "" }, "URL"},
		{func(c *Config) { c.Token = "" }, "Token"},
		{func(c *Config) { c.TokenFile = "/run/token" }, "exclusive"},
		{func(c *Config) { c.Source = nil }, "Source"},
		{func(c *Config) { c.Name = "Not_A_Pod" }, "name"},
		{func(c *Config) { c.MinBackoff, c.MaxBackoff = time.Second, time.Millisecond }, "MaxBackoff"},
	} {
		cfg := good
		c.tweak(&cfg)
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New = %v, want an error about %s", err, c.want)
		}
	}
}

// Pokes beyond MaxPendingPokes are dropped and counted; Poke never blocks,
// connected or not.
func TestPokeBoundedWhileDisconnected(t *testing.T) {
	r := newRig(t, func(c *Config) { c.MaxPendingPokes = 2 })
	for _, s := range []string{"ns/a", "ns/b", "ns/a", "ns/c"} {
		r.rep.Poke(s)
	}
	if got := value(t, r.rep.metrics.pokesDropped); got != 1 {
		t.Errorf("dropped pokes = %v, want 1", got)
	}
	r.start(t)
	got := map[string]bool{recv(t, r.pokes, "poke"): true, recv(t, r.pokes, "poke"): true}
	if !got["ns/a"] || !got["ns/b"] {
		t.Errorf("pokes delivered %v, want ns/a and ns/b", got)
	}
}

// value reads a gauge's or a counter's current value.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	if d.Gauge != nil {
		return d.Gauge.GetValue()
	}
	return d.Counter.GetValue()
}

// An invalid key or concurrency from the source, or an invalid poke, is
// skipped and counted; it never makes the autoscaler drop the connection.
func TestInvalidEntriesAreSkipped(t *testing.T) {
	r := newRig(t, nil)
	r.src.set(map[string]stats.ActivatorFigures{
		"ns/ok":    {Concurrency: 1, Requests: 1},
		"NS/upper": {Concurrency: 1},
		"no-slash": {Concurrency: 1},
		"ns/nan":   {Concurrency: math.NaN()},
		"ns/neg":   {Concurrency: -1},
		"ns/inf":   {Concurrency: math.Inf(1)},
	})
	r.rep.Poke("Bad Key")
	r.start(t)
	r.connected(t, 1, 0)
	r.clock.Step(time.Second)
	r.applied(t, "act-1 report entries=1 period=1s")
	if got := value(t, r.rep.metrics.invalid); got != 11 {
		t.Errorf("invalid entries = %v, want 11 (5 per report, 1 poke)", got)
	}
	if got := value(t, r.rep.metrics.dials.WithLabelValues("ok")); got != 1 {
		t.Errorf("%v dials, want 1: the connection must survive", got)
	}
}
