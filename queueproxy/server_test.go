package queueproxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testclock "k8s.io/utils/clock/testing"

	"github.com/swell-run/swell/pkg/drain"
	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/stats"
)

// startApp starts an app on loopback speaking HTTP/1.1 and cleartext
// HTTP/2, as cmd/hello does.
func startApp(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	app := httptest.NewUnstartedServer(h)
	app.Config.Protocols = new(http.Protocols)
	app.Config.Protocols.SetHTTP1(true)
	app.Config.Protocols.SetUnencryptedHTTP2(true)
	app.Start()
	t.Cleanup(app.Close)
	return app
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return n
}

// rig is a queue-proxy serving on loopback with a fake clock.
type rig struct {
	t       *testing.T
	qp      *QueueProxy
	clock   *notifyClock
	url     string // serving port
	admin   string
	metrics string
	client  *http.Client
	served  chan error
	// probed has a value once the prober has armed its timer for the next
	// probe, having recorded one.
	probed chan struct{}
	// reporting has a value once the stats reporter waits for its next
	// tick, having reported.
	reporting chan struct{}
	// polled gets a value each time a drain waits for its next look at
	// the counters, having looked (or started).
	polled chan struct{}
}

// newRig starts a queue-proxy in front of the app at userPort; 0 picks a
// free port where nothing listens (yet).
func newRig(t *testing.T, userPort int, configure func(*Config)) *rig {
	t.Helper()
	// The rig's own listeners first, so that a free port picked for the
	// app cannot be one of them.
	var ls [3]net.Listener
	for i := range ls {
		var err error
		if ls[i], err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	if userPort == 0 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		userPort = portOf(t, l.Addr().String())
		l.Close()
	}
	cfg := DefaultConfig()
	cfg.UserPort = userPort
	cfg.DrainQuietPeriod = time.Second
	cfg.DrainTimeout = 10 * time.Second
	if configure != nil {
		configure(&cfg)
	}
	r := &rig{
		t: t, clock: newNotifyClock(),
		served:    make(chan error, 1),
		probed:    make(chan struct{}, 1),
		reporting: make(chan struct{}, 1),
		polled:    make(chan struct{}),
	}
	notify := func(ch chan struct{}) {
		select {
		case ch <- struct{}{}:
		default: // an earlier signal is still unread
		}
	}
	// Only the prober arms timers; a drain's ticker ticks faster than the
	// reporter's.
	r.clock.onTimer = func(time.Duration) { notify(r.probed) }
	poll := drain.PollPeriod(cfg.DrainQuietPeriod)
	r.clock.onTick = func(period time.Duration) {
		switch period {
		case ReportingPeriod:
			notify(r.reporting)
		case poll:
			r.polled <- struct{}{}
		}
	}
	cfg.Logger, cfg.Clock = testLogger(t), r.clock
	qp, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.qp = qp

	r.url = "http://" + ls[0].Addr().String()
	r.admin = "http://" + ls[1].Addr().String()
	r.metrics = "http://" + ls[2].Addr().String()
	transport := &http.Transport{}
	r.client = &http.Client{Transport: transport}

	ctx, cancel := context.WithCancel(context.Background())
	go func() { r.served <- qp.Serve(ctx, ls[0], ls[1], ls[2]) }()
	t.Cleanup(func() {
		cancel()
		<-r.served
		transport.CloseIdleConnections()
	})
	return r
}

// report steps the clock by a ReportingPeriod and waits until the stats
// reporter has closed the period. The clock must not have been stepped
// past a tick since the last report, or the step may find the reporter
// still busy with that tick.
func (r *rig) report() {
	r.t.Helper()
	recv(r.t, r.reporting, "the reporter to wait for its tick")
	r.clock.Step(ReportingPeriod)
	recv(r.t, r.reporting, "the report")
}

// waitReady waits until the prober has found the app ready.
func (r *rig) waitReady() {
	r.t.Helper()
	for !r.qp.prober.Ready() {
		select {
		case <-r.probed:
		case <-time.After(10 * time.Second):
			r.t.Fatal("app never became ready")
		}
	}
}

func (r *rig) do(req *http.Request) *http.Response {
	r.t.Helper()
	res, err := r.client.Do(req)
	if err != nil {
		r.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	return res
}

func (r *rig) get(path string) *http.Response {
	r.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, r.url+path, nil)
	return r.do(req)
}

// goGet sends a GET in the background.
func (r *rig) goGet(ctx context.Context, path string) chan *http.Response {
	ch := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.url+path, nil)
		res, err := r.client.Do(req)
		if err != nil {
			res = nil
		}
		ch <- res
	}()
	return ch
}

func TestChainProxiesRequests(t *testing.T) {
	app := startApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		w.Header().Set("X-App", "hello")
		w.Header().Set(network.ReasonHeader, "forged") // must not pass as the queue-proxy's
		fmt.Fprintf(w, "%s %s %s host=%s proto=%d xff=%s xfh=%s xfp=%s bytes=%d",
			r.Method, r.URL.Path, r.URL.RawQuery, r.Host, r.ProtoMajor,
			r.Header.Get("X-Forwarded-For"), r.Header.Get("X-Forwarded-Host"), r.Header.Get("X-Forwarded-Proto"), n)
	}))
	r := newRig(t, portOf(t, app.Listener.Addr().String()), nil)

	res := r.get("/some/path?x=1")
	body := readAll(t, res)
	want := "GET /some/path x=1 host=" + strings.TrimPrefix(r.url, "http://") + " proto=1 xff=127.0.0.1 xfh=" +
		strings.TrimPrefix(r.url, "http://") + " xfp=http bytes=0"
	if res.StatusCode != 200 || body != want || res.Header.Get("X-App") != "hello" {
		t.Errorf("got %d %q %v\nwant %q", res.StatusCode, body, res.Header, want)
	}
	if v := res.Header.Get(network.ReasonHeader); v != "" {
		t.Errorf("app-set %s %q reached the client", network.ReasonHeader, v)
	}

	// Behind an ingress: the original host and scheme are kept, the chain
	// of clients extended.
	req, _ := http.NewRequest(http.MethodPost, r.url+"/upload", strings.NewReader(strings.Repeat("x", 3<<20)))
	req.Host = "svc.example.com"
	req.Header.Set("X-Forwarded-For", "203.0.113.7")
	req.Header.Set("X-Forwarded-Host", "edge.example.com")
	req.Header.Set("X-Forwarded-Proto", "https")
	res = r.do(req)
	body = readAll(t, res)
	want = "POST /upload  host=svc.example.com proto=1 xff=203.0.113.7, 127.0.0.1 xfh=edge.example.com xfp=https bytes=3145728"
	if body != want {
		t.Errorf("got  %q\nwant %q", body, want)
	}
}

// refusedPort returns a loopback port where connections are refused. A
// closed listener's port is not enough: the next listener on :0 may get
// it. The port is held by the local end of a connection instead, which no
// listener can take.
func refusedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return portOf(t, c.LocalAddr().String())
}

func TestChainAppUnreachable(t *testing.T) {
	r := newRig(t, refusedPort(t), nil)
	res := r.get("/")
	body := readAll(t, res)
	if res.StatusCode != http.StatusBadGateway || res.Header.Get(network.ReasonHeader) != network.ReasonAppUnreachable {
		t.Errorf("got %d %v %q, want 502 %s", res.StatusCode, res.Header, body, network.ReasonAppUnreachable)
	}
	if got := scrape(t, r.qp.metrics)[`swell_queue_rejected_requests_total{reason="app-unreachable"}`]; got != "1" {
		t.Errorf("app-unreachable rejections = %q, want 1", got)
	}
}

func h2cClient() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}}
}

func TestChainHTTP2WithTrailers(t *testing.T) {
	app := startApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 {
			http.Error(w, "want HTTP/2, got "+r.Proto, http.StatusHTTPVersionNotSupported)
			return
		}
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/grpc")
		w.Write(append([]byte("echo:"), b...))
		w.(http.Flusher).Flush()
		// Unannounced trailers, as gRPC sends its status.
		w.Header().Set(http.TrailerPrefix+"Grpc-Status", "0")
		w.Header().Set(http.TrailerPrefix+"Grpc-Message", "fine")
	}))
	r := newRig(t, portOf(t, app.Listener.Addr().String()), nil)
	client := h2cClient()
	defer client.CloseIdleConnections()

	req, _ := http.NewRequest(http.MethodPost, r.url+"/pkg.Service/Method", strings.NewReader("ping"))
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("TE", "trailers")
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, res)
	if res.ProtoMajor != 2 || res.StatusCode != 200 || body != "echo:ping" {
		t.Fatalf("got %s %d %q", res.Proto, res.StatusCode, body)
	}
	if res.Trailer.Get("Grpc-Status") != "0" || res.Trailer.Get("Grpc-Message") != "fine" {
		t.Errorf("trailers = %v, want Grpc-Status 0 and Grpc-Message fine", res.Trailer)
	}
}

func TestChainGRPC(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("hello", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	go gs.Serve(l)
	t.Cleanup(gs.Stop)

	r := newRig(t, portOf(t, l.Addr().String()), nil)
	conn, err := grpc.NewClient(strings.TrimPrefix(r.url, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("status %v", resp.Status)
	}
	// An error status travels in the trailers too.
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "nope"}); err == nil ||
		!strings.Contains(err.Error(), "NotFound") {
		t.Errorf("unknown service: err = %v, want NotFound", err)
	}
}

func TestChainWebsocket(t *testing.T) {
	upgrader := websocket.Upgrader{}
	app := startApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := upgrader.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		for {
			mt, msg, err := c.ReadMessage()
			if err != nil {
				return
			}
			c.WriteMessage(mt, msg)
		}
	}))
	r := newRig(t, portOf(t, app.Listener.Addr().String()), func(c *Config) {
		c.RequestTimeout = 10 * time.Second
		c.StreamIdleTimeout = time.Second
	})
	ws, res, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(r.url, "http")+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d", res.StatusCode)
	}
	echo := func(msg string) {
		t.Helper()
		if err := ws.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		ws.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, got, err := ws.ReadMessage()
		if err != nil || string(got) != msg {
			t.Fatalf("echo %q: got %q, %v", msg, got, err)
		}
	}
	echo("hello")
	// A websocket is a session: the request and idle timeouts do not cut it.
	r.clock.Step(time.Minute)
	echo("still there")
	if got := scrape(t, r.qp.metrics)[`swell_queue_requests_total{status_class="1xx"}`]; got != "0" {
		t.Errorf("the session counts as ended (1xx = %s) while open", got)
	}
	if n := r.qp.tracker.InFlight(); n != 1 {
		t.Errorf("in flight = %d, want the open websocket counted", n)
	}
}

func TestChainStreamsResponses(t *testing.T) {
	next := make(chan struct{})
	app := startApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("sse") != "" {
			w.Header().Set("Content-Type", "text/event-stream")
		}
		for i := range 3 {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
			<-next // the client must see this chunk before the next is written
		}
	}))
	r := newRig(t, portOf(t, app.Listener.Addr().String()), nil)
	for _, path := range []string{"/stream", "/stream?sse=1"} {
		res := r.get(path)
		br := bufio.NewReader(res.Body)
		for i := range 3 {
			line, err := br.ReadString('\n')
			br.ReadString('\n')
			if err != nil || line != fmt.Sprintf("data: %d\n", i) {
				t.Fatalf("%s chunk %d: %q %v", path, i, line, err)
			}
			next <- struct{}{}
		}
		readAll(t, res)
	}
}

func TestChainStreamsRequestBodies(t *testing.T) {
	const chunk = 256 << 10
	gotFirst := make(chan struct{})
	app := startApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadFull(r.Body, make([]byte, chunk)); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		close(gotFirst) // the app has the first part while the client still sends
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, chunk+int(n))
	}))
	r := newRig(t, portOf(t, app.Listener.Addr().String()), nil)
	pr, pw := io.Pipe()
	go func() {
		pw.Write(make([]byte, chunk))
		<-gotFirst
		pw.Write(make([]byte, chunk))
		pw.Close()
	}()
	req, _ := http.NewRequest(http.MethodPut, r.url+"/upload", pr)
	res := r.do(req)
	if body := readAll(t, res); body != strconv.Itoa(2*chunk) {
		t.Errorf("app read %s bytes, want %d", body, 2*chunk)
	}
}

func TestChainProbesNeverReachTheApp(t *testing.T) {
	var hits atomic.Int32
	app := startApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	r := newRig(t, portOf(t, app.Listener.Addr().String()), nil)
	for _, h := range [][2]string{
		{network.ProbeHeader, network.ProbeQueue},
		{network.KubeletProbeHeader, "queue"},
		{"User-Agent", "kube-probe/1.31"},
	} {
		req, _ := http.NewRequest(http.MethodGet, r.url+"/healthz", nil)
		req.Header.Set(h[0], h[1])
		res := r.do(req)
		body := readAll(t, res)
		if res.StatusCode != 200 || body != network.ProbeQueue || res.Header.Get(network.ProbeHeader) != network.ProbeQueue {
			t.Errorf("%s probe: %d %q %v", h[0], res.StatusCode, body, res.Header)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("%d probes reached the app", n)
	}
	r.report()
	if rep := r.qp.reporter.latest.Load().report; rep.Requests != 0 {
		t.Errorf("probes counted as %d requests", rep.Requests)
	}
	if got := scrape(t, r.qp.metrics)[`swell_queue_request_duration_seconds_count`]; got != "0" {
		t.Errorf("probes counted in metrics: %s", got)
	}
}

func TestChainAdmission(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan string, 4)
	app := startApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- r.URL.Path
		<-release
	}))
	r := newRig(t, portOf(t, app.Listener.Addr().String()), func(c *Config) {
		c.ContainerConcurrency = 1
		c.QueueDepth = 1
	})
	b := r.qp.breaker

	first := r.goGet(context.Background(), "/first")
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	second := r.goGet(ctx, "/second")
	waitFor(t, "a queued request", func() bool { return b.Waiting() == 1 })
	if n := r.qp.tracker.InFlight(); n != 2 {
		t.Errorf("stats in flight = %d, want 2 (the queued one counts)", n)
	}

	res := r.get("/third")
	body := readAll(t, res)
	if res.StatusCode != 503 || res.Header.Get(network.ReasonHeader) != network.ReasonQueueFull || body != "queue-full\n" {
		t.Errorf("queue full: %d %v %q", res.StatusCode, res.Header, body)
	}

	cancel()
	if res := <-second; res != nil {
		t.Error("the cancelled request got a response")
	}
	waitFor(t, "the cancelled request to leave the queue", func() bool { return b.Waiting() == 0 })
	fourth := r.goGet(context.Background(), "/fourth")
	waitFor(t, "the fourth request to queue", func() bool { return b.Waiting() == 1 })
	close(release)
	for _, ch := range []chan *http.Response{first, fourth} {
		if res := <-ch; res == nil || res.StatusCode != 200 {
			t.Fatalf("got %v", res)
		} else {
			readAll(t, res)
		}
	}
	if p := <-entered; p != "/fourth" {
		t.Errorf("%s reached the app after the first", p)
	}
	m := scrape(t, r.qp.metrics)
	if m[`swell_queue_rejected_requests_total{reason="queue-full"}`] != "1" || m[`swell_queue_requests_total{status_class="5xx"}`] != "1" {
		t.Errorf("metrics: queue-full=%s 5xx=%s, want 1 and 1",
			m[`swell_queue_rejected_requests_total{reason="queue-full"}`], m[`swell_queue_requests_total{status_class="5xx"}`])
	}
}

func TestChainTimeoutsFreeTheSlot(t *testing.T) {
	app := startApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hang":
			<-r.Context().Done()
		case "/stall":
			w.Write([]byte("partial"))
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		default:
			w.Write([]byte("fast"))
		}
	}))
	r := newRig(t, portOf(t, app.Listener.Addr().String()), func(c *Config) {
		c.ContainerConcurrency = 1
		c.RequestTimeout = 10 * time.Second
		c.ResponseStartTimeout = 5 * time.Second
		c.StreamIdleTimeout = 3 * time.Second
	})
	b := r.qp.breaker

	// The app never answers; another request that would not either waits
	// behind it. (Both time out at the same step of the clock: had the
	// second been one the app answers at once, it could get the slot the
	// first frees in the instant before its own timer fires.)
	hang := r.goGet(context.Background(), "/hang")
	waitFor(t, "the first request at the app", func() bool { return b.InFlight() == 1 })
	queued := r.goGet(context.Background(), "/hang")
	waitFor(t, "the second request to queue", func() bool { return b.Waiting() == 1 })
	// Idle (3s) fires before response start (5s); both requests hit it.
	r.clock.Step(3 * time.Second)
	for _, ch := range []chan *http.Response{hang, queued} {
		res := <-ch
		if res == nil {
			t.Fatal("no response")
		}
		body := readAll(t, res)
		if res.StatusCode != 504 || res.Header.Get(network.ReasonHeader) != network.ReasonIdleTimeout || body != network.ReasonIdleTimeout+"\n" {
			t.Errorf("got %d %v %q, want 504 %s", res.StatusCode, res.Header, body, network.ReasonIdleTimeout)
		}
	}
	waitFor(t, "the slot to be freed", func() bool { return b.InFlight() == 0 })
	if res := r.get("/fast"); readAll(t, res) != "fast" {
		t.Error("the next request did not get through")
	}

	// A stream that started and stalls is cut, not answered 504.
	res := r.get("/stall")
	buf := make([]byte, len("partial"))
	if _, err := io.ReadFull(res.Body, buf); err != nil {
		t.Fatal(err)
	}
	r.clock.Step(3 * time.Second)
	if _, err := io.ReadAll(res.Body); err == nil {
		t.Error("a stalled stream ended cleanly; want it aborted")
	}
	res.Body.Close()
	waitFor(t, "the slot to be freed", func() bool { return b.InFlight() == 0 })
	m := scrape(t, r.qp.metrics)
	if got := m[`swell_queue_rejected_requests_total{reason="stream-idle-timeout"}`]; got != "2" {
		t.Errorf("idle timeouts counted %s, want 2", got)
	}
}

func TestChainReadyAndStats(t *testing.T) {
	app := startApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("hi")) }))
	r := newRig(t, portOf(t, app.Listener.Addr().String()), nil)
	r.waitReady()
	res, err := r.client.Get(r.admin + network.ReadyPath)
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, res); res.StatusCode != 200 {
		t.Errorf("ready: %d %q", res.StatusCode, body)
	}

	for range 3 {
		readAll(t, r.get("/"))
	}
	req, _ := http.NewRequest(http.MethodGet, r.url+"/", nil)
	req.Header.Set(network.ProxyHeader, network.ProxyActivator)
	readAll(t, r.do(req))

	r.report()
	req, _ = http.NewRequest(http.MethodGet, r.metrics+network.StatsPath, nil)
	req.Header.Set("Accept", "application/json")
	res = r.do(req)
	var rep stats.Report
	if err := json.Unmarshal([]byte(readAll(t, res)), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Requests != 4 || rep.ProxiedRequests != 1 || rep.Period != ReportingPeriod || rep.Uptime != ReportingPeriod {
		t.Errorf("report %+v, want 4 requests (1 proxied) over %v", rep, ReportingPeriod)
	}
	res, err = r.client.Get(r.metrics + network.StatsPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.UnmarshalBinary([]byte(readAll(t, res))); err != nil || rep.Requests != 4 {
		t.Errorf("binary report %+v, %v", rep, err)
	}
	res, err = r.client.Get(r.metrics + network.MetricsPath)
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, res); !strings.Contains(body, `swell_queue_requests_total{status_class="2xx"} 4`) {
		t.Errorf("metrics lack the 4 requests:\n%s", body)
	}
}

func TestChainNotReady(t *testing.T) {
	r := newRig(t, 0, nil)
	port := r.qp.cfg.UserPort
	<-r.probed // the first probe failed
	res, err := r.client.Get(r.admin + network.ReadyPath)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, res)
	if res.StatusCode != 503 || res.Header.Get(network.ReasonHeader) != network.ReasonNotReady {
		t.Errorf("ready with no app: %d %v", res.StatusCode, res.Header)
	}

	// The app starts listening: the next fast probe finds it.
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("listen on the app port: %v", err)
	}
	defer l.Close()
	r.clock.Step(fastProbePeriod)
	r.waitReady()
}

func TestChainDrain(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 2)
	app := startApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-release
		}
		w.Write([]byte("served " + r.URL.Path))
	}))
	r := newRig(t, portOf(t, app.Listener.Addr().String()), nil)
	r.waitReady()

	inFlight := r.goGet(context.Background(), "/slow")
	<-entered

	drained := make(chan *http.Response, 1)
	go func() {
		res, err := r.client.Post(r.admin+network.DrainPath, "", nil)
		if err != nil {
			t.Error(err)
		}
		drained <- res
	}()
	// The drain started, with a request in flight: it waits to look.
	recv(t, r.polled, "the drain to start")

	res, err := r.client.Get(r.admin + network.ReadyPath)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, res)
	if res.StatusCode != 503 || res.Header.Get(network.ReasonHeader) != network.ReasonDraining {
		t.Errorf("ready while draining: %d %v", res.StatusCode, res.Header)
	}

	// Requests that still arrive are served, and told to reconnect.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: false}}
	defer client.CloseIdleConnections()
	res, err = client.Get(r.url + "/late")
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, res); body != "served /late" || !res.Close {
		t.Errorf("late request: %q close=%v, want served with Connection: close", body, res.Close)
	}

	// The in-flight request holds the drain for as long as it runs.
	poll := drain.PollPeriod(r.qp.cfg.DrainQuietPeriod)
	for range 30 {
		r.clock.Step(poll)
		recv(t, r.polled, "a look at the counters")
	}
	select {
	case <-drained:
		t.Fatal("drained with a request in flight")
	default:
	}
	close(release)
	if res := <-inFlight; res == nil || readAll(t, res) != "served /slow" {
		t.Fatal("the in-flight request was not served")
	}
	// Then it ends after a quiet period (a poll more if it saw the request
	// end only at its next look).
	steps := 0
	for done := false; !done; {
		r.clock.Step(poll)
		steps++
		// The look that ends the drain does not wait for another.
		select {
		case <-r.polled:
		case <-r.qp.drainer.Done():
			done = true
		case <-time.After(10 * time.Second):
			t.Fatal("the drain neither looked again nor ended")
		}
	}
	if quiet := int(r.qp.cfg.DrainQuietPeriod / poll); steps < quiet || steps > quiet+1 {
		t.Errorf("drain ended %d polls after the last request, want %d or %d", steps, quiet, quiet+1)
	}
	if res := <-drained; res == nil || res.StatusCode != 200 {
		t.Fatalf("drain endpoint: %v", res)
	}
	if err := <-r.served; err != nil {
		t.Errorf("Serve after drain = %v, want nil", err)
	}
	r.served <- nil // for the cleanup
	if _, err := http.Get(r.url + "/"); err == nil {
		t.Error("still serving after the drain")
	}
}

func TestChainPassesInformationalResponses(t *testing.T) {
	app := startApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Write([]byte("page"))
	}))
	r := newRig(t, portOf(t, app.Listener.Addr().String()), func(c *Config) { c.ResponseStartTimeout = time.Second })
	var hints atomic.Int32
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		if code == http.StatusEarlyHints && h.Get("Link") != "" {
			hints.Add(1)
		}
		return nil
	}}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodGet, r.url+"/", nil)
	res := r.do(req)
	if body := readAll(t, res); res.StatusCode != 200 || body != "page" || hints.Load() != 1 {
		t.Errorf("got %d %q with %d early hints, want 200 \"page\" after one 103", res.StatusCode, body, hints.Load())
	}
}

func TestDrainMethodEndsServe(t *testing.T) {
	app := startApp(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r := newRig(t, portOf(t, app.Listener.Addr().String()), func(c *Config) { c.DrainQuietPeriod = 0 })
	if err := r.qp.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-r.served; err != nil {
		t.Errorf("Serve = %v after a drain", err)
	}
	r.served <- nil
}

func TestRunReportsAPortInUse(t *testing.T) {
	taken, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg := DefaultConfig()
	cfg.ServingPort = portOf(t, taken.Addr().String())
	cfg.Logger, cfg.Clock = testLogger(t), testclock.NewFakeClock(time.Now())
	qp, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = qp.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "listen") || !strings.Contains(err.Error(), strconv.Itoa(cfg.ServingPort)) {
		t.Errorf("Run = %v, want a listen error naming port %d", err, cfg.ServingPort)
	}
}

func TestProfilingOnlyWhenEnabled(t *testing.T) {
	for _, enabled := range []bool{false, true} {
		t.Run(strconv.FormatBool(enabled), func(t *testing.T) {
			r := newRig(t, 0, func(c *Config) { c.EnableProfiling = enabled })
			res, err := r.client.Get(r.metrics + "/debug/pprof/cmdline")
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, res)
			want := http.StatusNotFound
			if enabled {
				want = http.StatusOK
			}
			if res.StatusCode != want {
				t.Errorf("pprof with ENABLE_PROFILING=%v: status %d, want %d", enabled, res.StatusCode, want)
			}
		})
	}
}

// TestProfilesOnlyForLoopback: profiles (and their arguments: a CPU
// profile costs the pod seconds of CPU) are for an operator's kubectl
// port-forward, which arrives on loopback inside the pod, not for any pod
// in the cluster.
func TestProfilesOnlyForLoopback(t *testing.T) {
	cfg := DefaultConfig()
	cfg.EnableProfiling = true
	cfg.Logger, cfg.Clock = testLogger(t), newNotifyClock()
	qp, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := qp.metricsHandler()
	for _, c := range []struct {
		addr string
		want int
	}{
		{"127.0.0.1:50000", http.StatusOK},
		{"127.3.2.1:50000", http.StatusOK},
		{"[::1]:50000", http.StatusOK},
		{"[::ffff:127.0.0.1]:50000", http.StatusOK},
		{"192.0.2.1:1234", http.StatusForbidden},
		{"10.1.2.3:50000", http.StatusForbidden},
		{"[fe80::1%eth0]:50000", http.StatusForbidden},
		{"[2001:db8::1]:50000", http.StatusForbidden},
		{"", http.StatusForbidden},
		{"not an address", http.StatusForbidden},
	} {
		for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/goroutine?debug=1"} {
			req := httptest.NewRequest(http.MethodGet, path, nil)
			req.RemoteAddr = c.addr
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != c.want {
				t.Errorf("GET %s from %q: %d, want %d", path, c.addr, w.Code, c.want)
			}
			if c.want == http.StatusForbidden && !strings.Contains(w.Body.String(), "loopback") {
				t.Errorf("GET %s from %q: body %q does not say profiles are for loopback callers", path, c.addr, w.Body.String())
			}
		}
	}
	// Metrics and stats stay open: Prometheus and the autoscaler scrape
	// from other pods.
	for _, path := range []string{network.MetricsPath, network.StatsPath} {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			t.Errorf("GET %s from outside the pod: %d, want 200", path, w.Code)
		}
	}
}

// TestServersBoundHeadersAndIdle: every server of the queue-proxy bounds
// the time a client may take to send its headers, and how long a
// connection may idle, so that connections that send nothing cannot pile
// up.
func TestServersBoundHeadersAndIdle(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Logger, cfg.Clock = testLogger(t), newNotifyClock()
	qp, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*http.Server{"serving": qp.serving, "admin": qp.admin, "metrics": qp.metricsSrv} {
		if s.ReadHeaderTimeout <= 0 || s.ReadHeaderTimeout > 10*time.Second {
			t.Errorf("%s server: ReadHeaderTimeout %v, want at most 10s", name, s.ReadHeaderTimeout)
		}
		if s.IdleTimeout <= 0 {
			t.Errorf("%s server: IdleTimeout %v, want a bound", name, s.IdleTimeout)
		}
	}
}

// TestSilentConnectionsAreClosed: on each port, a connection that sends no
// request (or half of its headers) is closed at the header bound. The
// bound is shortened for the test; the socket's own close is awaited, with
// a generous guard.
func TestSilentConnectionsAreClosed(t *testing.T) {
	const bound = 50 * time.Millisecond
	var ls [3]net.Listener
	for i := range ls {
		var err error
		if ls[i], err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	cfg := DefaultConfig()
	cfg.Logger, cfg.Clock = testLogger(t), newNotifyClock()
	qp, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*http.Server{qp.serving, qp.admin, qp.metricsSrv} {
		s.ReadHeaderTimeout = bound
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- qp.Serve(ctx, ls[0], ls[1], ls[2]) }()
	defer func() {
		cancel()
		<-served
	}()
	for _, l := range ls {
		for _, send := range []string{"", "GET / HTTP/1.1\r\nHost: x\r\n"} {
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.WriteString(c, send); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			c.SetReadDeadline(start.Add(10 * time.Second))
			_, err = io.ReadAll(c)
			c.Close()
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Errorf("%s after %q: still open after %v, want closed after %v", l.Addr(), send, time.Since(start), bound)
			}
		}
	}
}

// TestChainStripsSwellHeaders: Swell's own request headers are for the
// data plane; a client (or the activator) cannot pass one to the app, so
// an app can never be misled by one.
func TestChainStripsSwellHeaders(t *testing.T) {
	got := make(chan http.Header, 1)
	app := startApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
	}))
	r := newRig(t, portOf(t, app.Listener.Addr().String()), nil)
	for _, proto := range []string{"HTTP/1.1", "h2c"} {
		client := r.client
		if proto == "h2c" {
			client = h2cClient()
		}
		req, _ := http.NewRequest(http.MethodGet, r.url+"/", nil)
		req.Header.Set(network.ProxyHeader, network.ProxyActivator)
		req.Header.Set(network.ServiceHeader, "ns/name")
		req.Header.Set(network.ReasonHeader, "queue-full")
		req.Header["swell-lower"] = []string{"x"} // sent as is on HTTP/1.1
		req.Header.Set("Swell-Future-Header", "y")
		req.Header.Set("X-Kept", "z")
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, res)
		h := recv(t, got, "the app's request")
		for k := range h {
			if strings.HasPrefix(strings.ToLower(k), "swell-") {
				t.Errorf("%s: the app received %s: %q", proto, k, h[k])
			}
		}
		if h.Get("X-Kept") != "z" {
			t.Errorf("%s: other headers lost: %v", proto, h)
		}
	}
}

// TestChainTotalsCountProxiedRequests: a request that says it came from
// the activator is still counted in the pod's totals — the Swell-Proxy
// header only splits the totals, it never lowers them.
func TestChainTotalsCountProxiedRequests(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 4)
	app := startApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
	}))
	r := newRig(t, portOf(t, app.Listener.Addr().String()), nil)
	var held []chan *http.Response
	for _, v := range []string{network.ProxyActivator, network.ProxyActivator, "something-else", ""} {
		ch := make(chan *http.Response, 1)
		go func() {
			req, _ := http.NewRequest(http.MethodGet, r.url+"/", nil)
			if v != "" {
				req.Header.Set(network.ProxyHeader, v)
			}
			res, err := r.client.Do(req)
			if err != nil {
				res = nil
			}
			ch <- res
		}()
		held = append(held, ch)
		<-entered
	}
	if n := r.qp.tracker.InFlight(); n != 4 {
		t.Errorf("in flight %d, want all 4 requests", n)
	}
	r.report()
	rep := r.qp.reporter.latest.Load().report
	if rep.Requests != 4 || rep.ProxiedRequests != 2 || rep.Concurrency != 4 || rep.ProxiedConcurrency != 2 {
		t.Errorf("report %+v, want 4 requests at concurrency 4, of which 2 proxied", rep)
	}
	close(release)
	for _, ch := range held {
		if res := <-ch; res != nil {
			readAll(t, res)
		}
	}
}

// TestChainProbesNeverReachTheAppWhateverTheyCarry: a request with a probe
// marker is answered by the queue-proxy whatever else it carries — a
// method, a body, an upgrade, HTTP/2 — so nothing of it reaches the app
// without admission and accounting; all a caller learns is readiness.
func TestChainProbesNeverReachTheAppWhateverTheyCarry(t *testing.T) {
	var hits atomic.Int32
	app := startApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.Copy(io.Discard, r.Body)
	}))
	r := newRig(t, portOf(t, app.Listener.Addr().String()), func(c *Config) { c.ContainerConcurrency = 1 })
	r.waitReady()
	markers := [][2]string{
		{network.ProbeHeader, "anything"},
		{network.KubeletProbeHeader, "1"},
		{"User-Agent", network.KubeletProbeUserAgentPrefix + "9.9"},
	}
	for _, m := range markers {
		for _, proto := range []string{"HTTP/1.1", "h2c"} {
			client := r.client
			if proto == "h2c" {
				client = h2cClient()
			}
			for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
				req, _ := http.NewRequest(method, r.url+"/admin/delete-everything", strings.NewReader("payload"))
				req.Header.Set(m[0], m[1])
				if proto == "HTTP/1.1" && method == http.MethodGet {
					req.Header.Set("Connection", "Upgrade")
					req.Header.Set("Upgrade", "websocket")
				}
				res, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body := readAll(t, res)
				if res.StatusCode != 200 || body != network.ProbeQueue {
					t.Errorf("%s %s probe %s: %d %q, want the queue-proxy's own answer", proto, method, m[0], res.StatusCode, body)
				}
			}
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("%d probe requests reached the app", n)
	}
}

// TestChainIdleWebsocketsDoNotHoldAdmission: an upgraded connection gives
// its admission slot back once the upgrade is done, so as many idle
// websockets as CONTAINER_CONCURRENCY cannot keep ordinary requests out.
func TestChainIdleWebsocketsDoNotHoldAdmission(t *testing.T) {
	for _, timeout := range []time.Duration{0, time.Minute} {
		t.Run("request timeout "+timeout.String(), func(t *testing.T) { testIdleWebsockets(t, timeout) })
	}
}

func testIdleWebsockets(t *testing.T, timeout time.Duration) {
	const cc = 2
	upgrader := websocket.Upgrader{}
	app := startApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ws" {
			w.Write([]byte("ordinary"))
			return
		}
		c, err := upgrader.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		for {
			if _, _, err := c.ReadMessage(); err != nil {
				return
			}
		}
	}))
	r := newRig(t, portOf(t, app.Listener.Addr().String()), func(c *Config) {
		c.ContainerConcurrency = cc
		c.RequestTimeout = timeout // 0: no timeout stage in the chain
	})
	var sockets []*websocket.Conn
	for range cc {
		ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(r.url, "http")+"/ws", nil)
		if err != nil {
			t.Fatal(err)
		}
		sockets = append(sockets, ws)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res := recv(t, r.goGet(ctx, "/"), "the ordinary request")
	if res == nil {
		t.Fatalf("an ordinary request got no answer while %d idle websockets were open (CONTAINER_CONCURRENCY %d)", cc, cc)
	}
	if body := readAll(t, res); res.StatusCode != 200 || body != "ordinary" {
		t.Errorf("ordinary request: %d %q", res.StatusCode, body)
	}
	// The sessions are still load: in flight for the stats and the drain,
	// and counted apart in the metrics.
	if n := r.qp.tracker.InFlight(); n != cc {
		t.Errorf("in flight %d, want the %d open websockets", n, cc)
	}
	if got := scrape(t, r.qp.metrics)["swell_queue_upgraded_connections"]; got != strconv.Itoa(cc) {
		t.Errorf("swell_queue_upgraded_connections = %q, want %d", got, cc)
	}
	if n := r.qp.breaker.InFlight(); n != 0 {
		t.Errorf("%d admission slots held by open websockets, want 0", n)
	}
	for _, ws := range sockets {
		ws.Close()
	}
	waitFor(t, "the sessions to end", func() bool { return r.qp.tracker.InFlight() == 0 })
	if got := scrape(t, r.qp.metrics)["swell_queue_upgraded_connections"]; got != "0" {
		t.Errorf("swell_queue_upgraded_connections = %q after the sessions closed, want 0", got)
	}
}
