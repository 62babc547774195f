package queueproxy

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"k8s.io/utils/clock"

	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/stats"
)

// pushServer stands in for the autoscaler's push endpoint (the queue-proxy's
// tests may not import autoscaler/): it answers each dial as the test
// scripted it, accepts the dials past the script, and reads the frames of
// the connections it accepted.
type pushServer struct {
	url string // ws://…/pods
	// dials gets the query of every dial, answered or accepted.
	dials chan url.Values
	// conns gets every connection accepted.
	conns chan *pushConn

	mu      sync.Mutex
	answers []http.HandlerFunc
	open    []*pushConn
	readers sync.WaitGroup
}

// pushConn is one connection the pushServer accepted.
type pushConn struct {
	ws     *websocket.Conn
	frames chan pushedFrame
	// ended gets what ended the reads: a *websocket.CloseError when the
	// pusher closed the connection.
	ended chan error
}

type pushedFrame struct {
	raw    []byte
	report stats.Report
}

// newPushServer starts a pushServer whose first dials get answers, in
// order; it stops when the test ends.
func newPushServer(t *testing.T, answers ...http.HandlerFunc) *pushServer {
	t.Helper()
	s := &pushServer{dials: make(chan url.Values, 64), conns: make(chan *pushConn, 16), answers: answers}
	srv := httptest.NewServer(s)
	s.url = "ws" + strings.TrimPrefix(srv.URL, "http") + network.PodPushPath
	t.Cleanup(func() {
		s.mu.Lock()
		for _, c := range s.open {
			c.ws.Close()
		}
		s.mu.Unlock()
		s.readers.Wait()
		srv.Close()
	})
	return s
}

func (s *pushServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.dials <- r.URL.Query()
	s.mu.Lock()
	var answer http.HandlerFunc
	if len(s.answers) > 0 {
		answer, s.answers = s.answers[0], s.answers[1:]
	}
	s.mu.Unlock()
	if answer != nil {
		answer(w, r)
		return
	}
	ws, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
	if err != nil {
		return // the test sees no connection
	}
	c := &pushConn{ws: ws, frames: make(chan pushedFrame, 64), ended: make(chan error, 1)}
	s.mu.Lock()
	s.open = append(s.open, c)
	s.mu.Unlock()
	s.readers.Go(c.read)
	s.conns <- c
}

func (c *pushConn) read() {
	for {
		mt, b, err := c.ws.ReadMessage()
		if err == nil && mt != websocket.BinaryMessage {
			err = errors.New("a text frame")
		}
		var rep stats.Report
		if err == nil {
			err = rep.UnmarshalBinary(b)
		}
		if err != nil {
			c.ended <- err
			return
		}
		c.frames <- pushedFrame{raw: b, report: rep}
	}
}

func (c *pushConn) frame(t *testing.T) pushedFrame {
	t.Helper()
	return recv(t, c.frames, "a pushed report")
}

// close closes the connection as the autoscaler does: a close frame with
// code, then the socket.
func (c *pushConn) close(code int, reason string) {
	c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(time.Second))
	c.ws.Close()
}

// refuse answers a dial with status and, for a 503, Retry-After.
func refuse(status int, retryAfter string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		http.Error(w, "refused by the test", status)
	}
}

// redirect answers a dial as a replica that does not lead the service:
// 307 to to, with the dial's query.
func redirect(to string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, to+"?"+r.URL.RawQuery, http.StatusTemporaryRedirect)
	}
}

// pushRig is a pusher of a reporter's reports, with the accounting stage
// that feeds its watch, on a fake clock whose timers it reports.
type pushRig struct {
	t       *testing.T
	clock   *notifyClock
	timers  chan time.Duration
	tracker *stats.Tracker
	rep     *reporter
	watch   *loadWatch
	metrics *metrics
	pusher  *pusher
	// h is the accounting stage in front of requests that stay in flight
	// until released.
	h        http.Handler
	entered  chan chan struct{}
	requests sync.WaitGroup
	stopOnce sync.Once
	cancel   context.CancelFunc
	done     chan struct{}
}

// newPushRig returns a rig pushing to pushURL as the pod 10.1.2.3 of
// ns/web, its admission capacity capacity; start runs it.
func newPushRig(t *testing.T, pushURL string, capacity int) *pushRig {
	t.Helper()
	r := &pushRig{t: t, clock: newNotifyClock(), timers: make(chan time.Duration, 64), entered: make(chan chan struct{})}
	r.clock.onTimer = func(d time.Duration) { r.timers <- d }
	r.tracker = stats.NewTracker(testTime)
	r.rep = newReporter(r.tracker, r.clock, testTime)
	r.metrics = newMetrics(r.clock, func() float64 { return 0 }, func() float64 { return 0 })
	r.metrics.registerPush()
	r.watch = newLoadWatch(capacity)
	cfg := Config{PushURL: pushURL, Service: "ns/web", PodIP: "10.1.2.3", MetricsPort: network.DefaultQueueMetricsPort}
	r.pusher = newPusher(cfg.pushTarget(), cfg.Service, r.rep, r.watch, r.clock, testLogger(t), r.metrics)
	released := make(chan struct{})
	r.h = &accounting{tracker: r.tracker, clock: r.clock, watch: r.watch, next: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		release := make(chan struct{})
		r.entered <- release
		select {
		case <-release:
		case <-released:
		}
	})}
	t.Cleanup(func() {
		r.stop()
		close(released)
		r.requests.Wait()
	})
	return r
}

func (r *pushRig) start() {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan struct{})
	go func() {
		defer close(r.done)
		r.pusher.run(ctx)
	}()
}

// stop stops the pusher and waits until it has.
func (r *pushRig) stop() {
	r.stopOnce.Do(func() {
		if r.cancel == nil {
			return
		}
		r.cancel()
		recv(r.t, r.done, "the pusher to stop")
	})
}

// hold sends a request through the accounting stage and returns once it
// is in flight; end lets it end and waits until it has.
func (r *pushRig) hold() (end func()) {
	r.t.Helper()
	ended := make(chan struct{})
	r.requests.Go(func() {
		defer close(ended)
		r.h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	})
	release := recv(r.t, r.entered, "a request in flight")
	return func() {
		close(release)
		recv(r.t, ended, "the request to end")
	}
}

// timer waits until the pusher arms a timer, and returns its duration.
func (r *pushRig) timer() time.Duration {
	r.t.Helper()
	return recv(r.t, r.timers, "the pusher to arm a timer")
}

// checkLatest fails unless f is the reporter's latest report, byte for
// byte.
func (r *pushRig) checkLatest(f pushedFrame, what string) {
	r.t.Helper()
	if want := r.rep.latest.Load(); !bytes.Equal(f.raw, want.binaryV3) {
		r.t.Errorf("%s: pushed %+v, want the latest report %+v", what, f.report, want.report)
	}
}

func TestPushSendsTheReports(t *testing.T) {
	srv := newPushServer(t)
	r := newPushRig(t, srv.url, 0)
	r.start()

	q := recv(t, srv.dials, "a dial")
	if q.Get(network.PodPushService) != "ns/web" || q.Get(network.PodPushAddr) != "10.1.2.3:9090" {
		t.Errorf("dialled with query %v, want service ns/web and addr 10.1.2.3:9090", q)
	}
	c := recv(t, srv.conns, "a connection")
	// Before the first period ends, the latest report is the empty one of
	// length zero, and it goes at once.
	f := c.frame(t)
	r.checkLatest(f, "at once")
	if !f.report.End.Equal(testTime) || f.report.Period != 0 {
		t.Errorf("first push %+v, want the empty report at the start", f.report)
	}
	if got := scrape(t, r.metrics)["swell_queue_push_connected"]; got != "1" {
		t.Errorf("connected gauge %s while connected, want 1", got)
	}

	// A request held for half a second: each report closed is pushed.
	r.tracker.Start(r.clock.Now(), false)
	r.clock.Step(500 * time.Millisecond)
	r.tracker.End(r.clock.Now(), false)
	r.clock.Step(500 * time.Millisecond)
	r.rep.reportNow()
	f = c.frame(t)
	r.checkLatest(f, "after a period")
	if f.report.Requests != 1 || f.report.Concurrency != 0.5 || f.report.Period != time.Second || f.report.Uptime != time.Second {
		t.Errorf("pushed %+v, want 1 request, concurrency 0.5 over 1s, uptime 1s", f.report)
	}
	r.clock.Step(time.Second)
	r.rep.reportNow()
	r.checkLatest(c.frame(t), "after another period")

	// Stopping closes normally.
	r.stop()
	var ce *websocket.CloseError
	if err := recv(t, c.ended, "the connection to end"); !errors.As(err, &ce) || ce.Code != websocket.CloseNormalClosure {
		t.Errorf("connection ended with %v, want a close with %d", err, websocket.CloseNormalClosure)
	}
	m := scrape(t, r.metrics)
	for series, want := range map[string]string{
		"swell_queue_push_connected":                       "0",
		"swell_queue_push_frames_total":                    "3",
		`swell_queue_push_dials_total{result="connected"}`: "1",
		`swell_queue_push_dials_total{result="refused"}`:   "0",
	} {
		if m[series] != want {
			t.Errorf("%s = %s, want %s", series, m[series], want)
		}
	}
}

// TestPushFollowsTheLeader: a replica that does not lead the service
// redirects the pod to the one that does; when that one closes (the
// bucket moved), the pod dials the configured URL again, not the leader's.
func TestPushFollowsTheLeader(t *testing.T) {
	leader := newPushServer(t)
	front := newPushServer(t, redirect(leader.url), redirect(leader.url))
	r := newPushRig(t, front.url, 0)
	r.start()

	recv(t, front.dials, "the dial at the configured URL")
	if q := recv(t, leader.dials, "the dial at the leader"); q.Get(network.PodPushService) != "ns/web" || q.Get(network.PodPushAddr) != "10.1.2.3:9090" {
		t.Errorf("the redirected dial's query is %v, want the pod's", q)
	}
	c := recv(t, leader.conns, "a connection to the leader")
	r.checkLatest(c.frame(t), "at once")

	c.close(websocket.CloseGoingAway, "the bucket moved")
	r.clock.Step(r.timer())
	recv(t, front.dials, "a dial at the configured URL again")
	c = recv(t, leader.conns, "a connection to the leader again")
	r.checkLatest(c.frame(t), "after reconnecting")

	m := scrape(t, r.metrics)
	if m[`swell_queue_push_dials_total{result="redirected"}`] != "2" || m[`swell_queue_push_dials_total{result="connected"}`] != "2" {
		t.Errorf("dials %v, want 2 redirected and 2 connected", m)
	}
}

// TestPushFollowsRedirectsOnlySoFar: a redirect to anything but a ws://
// URL, or a chain of more than pushMaxRedirects, fails the dial, and the
// pusher waits to dial again.
func TestPushFollowsRedirectsOnlySoFar(t *testing.T) {
	t.Run("not a websocket", func(t *testing.T) {
		srv := newPushServer(t, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://example.invalid/pods", http.StatusTemporaryRedirect)
		})
		r := newPushRig(t, srv.url, 0)
		r.start()
		r.timer() // the backoff: the dial failed
		if n := len(srv.dials); n != 1 {
			t.Errorf("%d dials, want 1", n)
		}
	})
	t.Run("too many", func(t *testing.T) {
		var loop []http.HandlerFunc
		srv := newPushServer(t)
		for range 2 * pushMaxRedirects {
			loop = append(loop, redirect(srv.url))
		}
		srv.mu.Lock()
		srv.answers = loop
		srv.mu.Unlock()
		r := newPushRig(t, srv.url, 0)
		r.start()
		r.timer()
		if n := len(srv.dials); n != 1+pushMaxRedirects {
			t.Errorf("%d dials, want the first and %d redirects", n, pushMaxRedirects)
		}
		if n := len(srv.conns); n != 0 {
			t.Errorf("%d connections, want none", n)
		}
	})
}

func TestRedirectTarget(t *testing.T) {
	const from = "ws://autoscaler:8081/pods?addr=10.1.2.3%3A9090&service=ns%2Fweb"
	for _, tc := range []struct {
		location, want string
	}{
		{"ws://10.0.0.9:8081/pods?addr=a&service=b", "ws://10.0.0.9:8081/pods?addr=a&service=b"},
		// Without a query, the pod's.
		{"ws://10.0.0.9:8081/pods", "ws://10.0.0.9:8081/pods?addr=10.1.2.3%3A9090&service=ns%2Fweb"},
		{"/elsewhere", "ws://autoscaler:8081/elsewhere?addr=10.1.2.3%3A9090&service=ns%2Fweb"},
		{"http://10.0.0.9:8081/pods", ""},
		{"wss://10.0.0.9:8081/pods", ""},
		{"ws:///pods", ""},
	} {
		got, err := redirectTarget(from, tc.location)
		if tc.want == "" {
			if err == nil {
				t.Errorf("redirect to %q followed to %s, want refused", tc.location, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("redirect to %q: %q, %v; want %q", tc.location, got, err, tc.want)
		}
	}
}

// TestPushHonoursRetryAfter: a 503 is retried after its Retry-After,
// taken within 1s and 30s, or after the backoff when it has none.
func TestPushHonoursRetryAfter(t *testing.T) {
	srv := newPushServer(t,
		refuse(http.StatusServiceUnavailable, "1"),
		refuse(http.StatusServiceUnavailable, "600"),
		refuse(http.StatusServiceUnavailable, "0"),
		refuse(http.StatusServiceUnavailable, ""),
	)
	r := newPushRig(t, srv.url, 0)
	r.start()
	for i, want := range []time.Duration{time.Second, 30 * time.Second, time.Second, 0} {
		d := r.timer()
		if want == 0 {
			// The backoff after 4 failures: 800ms, with jitter.
			if d < 400*time.Millisecond || d > 800*time.Millisecond {
				t.Errorf("wait after 503 %d without Retry-After: %v, want 400ms to 800ms", i+1, d)
			}
		} else if d != want {
			t.Errorf("wait after 503 %d: %v, want %v", i+1, d, want)
		}
		r.clock.Step(d)
	}
	c := recv(t, srv.conns, "a connection once routed")
	r.checkLatest(c.frame(t), "at once")
	if got := scrape(t, r.metrics)[`swell_queue_push_dials_total{result="refused"}`]; got != "4" {
		t.Errorf("refused dials %s, want 4", got)
	}
}

// TestPushKeepsRetryingWhileRefused: a pod that is not ready yet is
// refused (403) and dials again, backing off up to pushMaxBackoff; the
// reports closed meanwhile are not sent, only the latest once connected.
func TestPushKeepsRetryingWhileRefused(t *testing.T) {
	const refusals = 8
	var answers []http.HandlerFunc
	for range refusals {
		answers = append(answers, refuse(http.StatusForbidden, ""))
	}
	srv := newPushServer(t, answers...)
	r := newPushRig(t, srv.url, 0)
	r.start()
	for n := 1; n <= refusals; n++ {
		d := r.timer()
		ceiling := min(pushMinBackoff<<(n-1), pushMaxBackoff)
		if d < ceiling/2 || d > ceiling {
			t.Errorf("wait after refusal %d: %v, want %v to %v", n, d, ceiling/2, ceiling)
		}
		r.clock.Step(d / 2)
		r.rep.reportNow()
		r.clock.Step(d - d/2)
	}
	c := recv(t, srv.conns, "a connection once the pod is ready")
	r.checkLatest(c.frame(t), "at once")
	// Nothing older follows: the next frame is the next report.
	r.clock.Step(time.Second)
	r.rep.reportNow()
	r.checkLatest(c.frame(t), "the next report")
}

// TestPushReconnectsAfterAClose: whatever the autoscaler closes with, the
// pusher dials again after a backoff, and the first report on the new
// connection is the latest, the ones closed meanwhile skipped.
func TestPushReconnectsAfterAClose(t *testing.T) {
	for _, code := range []int{closeReplaced, closeIdle, websocket.CloseGoingAway, websocket.ClosePolicyViolation} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			srv := newPushServer(t)
			r := newPushRig(t, srv.url, 0)
			r.start()
			c := recv(t, srv.conns, "a connection")
			r.checkLatest(c.frame(t), "at once")

			c.close(code, "closed by the test")
			d := r.timer()
			if d > pushMinBackoff {
				t.Errorf("first wait %v, want at most %v", d, pushMinBackoff)
			}
			// Two periods close while the pusher waits, both shorter than
			// its wait.
			for range 2 {
				r.clock.Step(d / 4)
				r.rep.reportNow()
			}
			r.clock.Step(d - 2*(d/4))
			c = recv(t, srv.conns, "a connection again")
			r.checkLatest(c.frame(t), "at once on the new connection")
			r.clock.Step(time.Second)
			r.rep.reportNow()
			r.checkLatest(c.frame(t), "the next report")
		})
	}
}

// The pod endpoint's own close codes (autoscaler/collector.CloseReplaced
// and CloseIdle), which the queue-proxy has no reason to name.
const (
	closeReplaced = 4000
	closeIdle     = 4001
)

// TestPushBackoffStartsOverAfterAStableConnection: the backoff grows
// across connections that end at once, and starts over after one that
// carried frames for pushStableAfter.
func TestPushBackoffStartsOverAfterAStableConnection(t *testing.T) {
	srv := newPushServer(t, refuse(http.StatusForbidden, ""), refuse(http.StatusForbidden, ""))
	r := newPushRig(t, srv.url, 0)
	r.start()
	for range 2 {
		r.clock.Step(r.timer())
	}
	c := recv(t, srv.conns, "a connection")
	c.frame(t)
	// Closed at once: the third failure in a row.
	c.close(closeReplaced, "replaced")
	d := r.timer()
	if d < 200*time.Millisecond || d > 400*time.Millisecond {
		t.Errorf("wait after a connection closed at once: %v, want the third backoff, 200ms to 400ms", d)
	}
	r.clock.Step(d)
	c = recv(t, srv.conns, "a connection again")
	c.frame(t)
	for range 3 {
		r.clock.Step(ReportingPeriod)
		r.rep.reportNow()
		c.frame(t)
	}
	c.close(closeReplaced, "replaced")
	if d := r.timer(); d > pushMinBackoff {
		t.Errorf("wait after a stable connection: %v, want the first backoff, at most %v", d, pushMinBackoff)
	}
}

func TestSharpThreshold(t *testing.T) {
	for _, tc := range []struct {
		concurrency float64
		capacity    int
		want        int64
	}{
		// After an idle period, the first request.
		{0, 0, 1},
		{0, 4, 1},
		// Twice the last period's concurrency, and at least 2.
		{0.01, 0, 2},
		{0.5, 0, 2},
		{1, 0, 2},
		{1.2, 0, 3},
		{2, 0, 4},
		{10, 0, 20},
		// Or the first request to queue, when the period was not saturated.
		{2.5, 3, 4},
		{2, 10, 4},
		{1, 1, 2},
		// A saturated pod's queue is no news: only doubling counts.
		{3, 3, 6},
		{8, 3, 16},
		{1e300, 0, noThreshold},
	} {
		if got := sharpThreshold(tc.concurrency, tc.capacity); got != tc.want {
			t.Errorf("sharpThreshold(%v, capacity %d) = %d, want %d", tc.concurrency, tc.capacity, got, tc.want)
		}
	}
}

// TestSharpChangesPushAtOnce: a sharp change on the request path closes
// the period at once and pushes it, then pushes the 100ms after it.
func TestSharpChangesPushAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		// capacity is ContainerConcurrency.
		capacity int
		// full requests are held through the period before the pusher
		// connects, and half for half of it.
		full, half int
		// threshold is the requests in flight that push.
		threshold int64
	}{
		{name: "first request after idle", threshold: 1},
		{name: "doubling", full: 2, threshold: 4},
		{name: "queue", capacity: 3, full: 2, half: 1, threshold: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newPushServer(t)
			r := newPushRig(t, srv.url, tc.capacity)
			for range tc.full {
				r.hold()
			}
			var halves []func()
			for range tc.half {
				halves = append(halves, r.hold())
			}
			r.clock.Step(ReportingPeriod / 2)
			for _, end := range halves {
				end()
			}
			r.clock.Step(ReportingPeriod / 2)
			r.rep.reportNow()
			r.start()
			c := recv(t, srv.conns, "a connection")
			r.checkLatest(c.frame(t), "at once")
			if got := r.watch.threshold.Load(); got != tc.threshold {
				t.Fatalf("armed at %d requests in flight, want %d", got, tc.threshold)
			}

			for int64(tc.full) < tc.threshold-1 {
				r.hold()
				tc.full++
			}
			if got := r.watch.threshold.Load(); got != tc.threshold {
				t.Fatalf("fired at %d requests in flight, want at %d", tc.full, tc.threshold)
			}
			r.clock.Step(300 * time.Millisecond)
			r.hold()
			f := c.frame(t)
			if !f.report.End.Equal(r.clock.Now()) || f.report.Period != 300*time.Millisecond || f.report.Concurrency != float64(tc.threshold-1) {
				t.Errorf("pushed at once %+v, want the 300ms to now at concurrency %d", f.report, tc.threshold-1)
			}
			if d := r.timer(); d != sharpFollowUp {
				t.Fatalf("timer %v, want the follow-up's %v", d, sharpFollowUp)
			}
			if d := r.timer(); d != sharpEvery {
				t.Fatalf("timer %v, want the cooldown's %v", d, sharpEvery)
			}
			r.clock.Step(sharpFollowUp)
			f = c.frame(t)
			if f.report.Period != sharpFollowUp || f.report.Concurrency != float64(tc.threshold) {
				t.Errorf("pushed %+v after the change, want %v at concurrency %d", f.report, sharpFollowUp, tc.threshold)
			}
			r.checkLatest(f, "the follow-up")
		})
	}
}

// TestSharpPushesAtMostOnceASecond: a second sharp change within a second
// of one is pushed with the period's report; one after a second is pushed
// at once again.
func TestSharpPushesAtMostOnceASecond(t *testing.T) {
	srv := newPushServer(t)
	r := newPushRig(t, srv.url, 0)
	r.start()
	c := recv(t, srv.conns, "a connection")
	c.frame(t)

	r.hold() // the first request after idle
	c.frame(t)
	r.timer()
	r.timer()
	r.clock.Step(sharpFollowUp)
	c.frame(t)

	// Three in flight, a doubling, while cooling: no push of its own.
	r.clock.Step(400 * time.Millisecond)
	r.hold()
	r.hold()
	if got := r.watch.threshold.Load(); got != noThreshold {
		t.Errorf("armed at %d while cooling, want disarmed", got)
	}
	r.rep.reportNow()
	if f := c.frame(t); f.report.Period != 400*time.Millisecond {
		t.Errorf("pushed %+v while cooling, want only the period's report, of 400ms", f.report)
	}

	// A second after the first change: armed again from the last period,
	// at twice its 3.
	r.clock.Step(sharpEvery - sharpFollowUp - 400*time.Millisecond)
	r.rep.reportNow()
	c.frame(t)
	if got := r.watch.threshold.Load(); got != 6 {
		t.Fatalf("armed at %d after cooling, want 6", got)
	}
	for range 2 {
		r.hold()
	}
	r.clock.Step(10 * time.Millisecond)
	r.hold()
	if f := c.frame(t); f.report.Period != 10*time.Millisecond || f.report.Concurrency != 5 {
		t.Errorf("pushed %+v, want the 10ms to the sixth request at concurrency 5", f.report)
	}
	if d := r.timer(); d != sharpFollowUp {
		t.Errorf("timer %v, want the follow-up's %v", d, sharpFollowUp)
	}
	r.timer()
}

// TestRequestPathNeverWaitsForThePusher: requests and reports go on while
// the pusher takes nothing from them (its autoscaler is slow, or it is not
// running at all): the watch fires once and the mailbox keeps the newest.
func TestRequestPathNeverWaitsForThePusher(t *testing.T) {
	fc := newNotifyClock()
	tracker := stats.NewTracker(testTime)
	rep := newReporter(tracker, fc, testTime)
	m := newMetrics(fc, func() float64 { return 0 }, func() float64 { return 0 })
	m.registerPush()
	watch := newLoadWatch(0)
	p := newPusher("ws://autoscaler/pods", "ns/web", rep, watch, fc, testLogger(t), m)
	watch.arm(0) // as if connected after an idle period: every request is sharp
	h := &accounting{tracker: tracker, clock: fc, watch: watch, next: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})}
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	for range 1000 {
		h.ServeHTTP(httptest.NewRecorder(), req)
		fc.Step(time.Millisecond)
		rep.reportNow()
	}
	if got := watch.threshold.Load(); got != noThreshold || len(watch.fired) != 1 {
		t.Errorf("threshold %d, %d fires waiting; want disarmed and one", got, len(watch.fired))
	}
	if got := p.outbox.take(); got != rep.latest.Load() {
		t.Errorf("the mailbox holds %+v, want the latest report", got)
	}
	if n := watch.inFlight.Load(); n != 0 {
		t.Errorf("%d in flight after the requests, want 0", n)
	}
}

// TestWatchedAccountingAllocatesNothing: the watch adds no allocation to
// the request path.
func TestWatchedAccountingAllocatesNothing(t *testing.T) {
	watch := newLoadWatch(0)
	watch.arm(1000)
	h := &accounting{tracker: stats.NewTracker(testTime), clock: clock.RealClock{}, watch: watch,
		next: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})}
	w := &discardWriter{h: http.Header{}}
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	if n := testing.AllocsPerRun(1000, func() { h.ServeHTTP(w, req) }); n != 0 {
		t.Errorf("%v allocations per request, want 0", n)
	}
}

// BenchmarkAccounting measures the accounting stage, alone and with the
// watch the pusher arms, from every processor at once.
func BenchmarkAccounting(b *testing.B) {
	for _, watched := range []bool{false, true} {
		name := "unwatched"
		if watched {
			name = "watched"
		}
		b.Run(name, func(b *testing.B) {
			h := &accounting{tracker: stats.NewTracker(time.Now()), clock: clock.RealClock{},
				next: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})}
			if watched {
				h.watch = newLoadWatch(0)
				h.watch.arm(1 << 40)
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				w := &discardWriter{h: http.Header{}}
				req := httptest.NewRequest(http.MethodGet, "/", nil)
				for pb.Next() {
					h.ServeHTTP(w, req)
				}
			})
		})
	}
}

// TestQueueProxyPushes: a queue-proxy with a push URL pushes as the pod of
// its service, each period and at once on the first request after idle.
func TestQueueProxyPushes(t *testing.T) {
	srv := newPushServer(t)
	app := startApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	r := newRig(t, portOf(t, app.Listener.Addr().String()), func(c *Config) {
		c.PushURL, c.Service, c.PodIP = srv.url, "ns/web", "10.1.2.3"
	})
	q := recv(t, srv.dials, "a dial")
	if q.Get(network.PodPushService) != "ns/web" || q.Get(network.PodPushAddr) != "10.1.2.3:"+strconv.Itoa(network.DefaultQueueMetricsPort) {
		t.Errorf("dialled with query %v", q)
	}
	c := recv(t, srv.conns, "a connection")
	if f := c.frame(t); f.report.Period != 0 {
		t.Errorf("first push %+v, want the empty report", f.report)
	}
	r.report()
	if f := c.frame(t); f.report.Period != ReportingPeriod {
		t.Errorf("pushed %+v, want the period's report", f.report)
	}
	readAll(t, r.get("/"))
	if f := c.frame(t); f.report.Requests != 1 {
		t.Errorf("pushed %+v on the first request after idle, want its period with the request", f.report)
	}
}
