package main

// End-to-end tests: the real queue-proxy binary in front of the real
// cmd/hello binary, on loopback.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/swell-run/swell/internal/proctest"
	"github.com/swell-run/swell/pkg/network"
)

const (
	qpPkg    = "github.com/swell-run/swell/cmd/queue-proxy"
	helloPkg = "github.com/swell-run/swell/cmd/hello"
	// startTimeout bounds how long a freshly started process may take to
	// answer; generous because the race detector and a busy machine slow
	// start-up, and it is only ever reached when something is broken.
	startTimeout = 30 * time.Second
)

// pod is one queue-proxy in front of one hello app.
type pod struct {
	qp, app               *proctest.Process
	serve, metrics, admin string // queue-proxy base URLs
	appURL                string
	appPort               int
}

// startPod starts hello and a queue-proxy in front of it; qpEnv holds
// extra queue-proxy settings as alternating names and values.
func startPod(t *testing.T, qpEnv ...string) *pod {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	helloBin := proctest.Build(t, helloPkg)
	appPort := proctest.FreePort(t)
	app := proctest.Start(t, "hello", helloBin, proctest.Env("PORT", strconv.Itoa(appPort), "HOST", "127.0.0.1"))
	p := startQueueProxy(t, appPort, qpEnv...)
	p.app = app
	return p
}

// startQueueProxy starts a queue-proxy in front of the app on appPort.
func startQueueProxy(t *testing.T, appPort int, qpEnv ...string) *pod {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	qpBin := proctest.Build(t, qpPkg)
	servePort, metricsPort, adminPort := proctest.FreePort(t), proctest.FreePort(t), proctest.FreePort(t)
	p := &pod{
		appPort: appPort,
		appURL:  "http://" + proctest.Addr(appPort),
		serve:   "http://" + proctest.Addr(servePort),
		metrics: "http://" + proctest.Addr(metricsPort),
		admin:   "http://" + proctest.Addr(adminPort),
	}
	env := proctest.Env(
		"QUEUE_SERVING_PORT", strconv.Itoa(servePort),
		"QUEUE_METRICS_PORT", strconv.Itoa(metricsPort),
		"QUEUE_ADMIN_PORT", strconv.Itoa(adminPort),
		"USER_PORT", strconv.Itoa(appPort),
		"LOG_FORMAT", "json",
	)
	p.qp = proctest.Start(t, "queue-proxy", qpBin, append(env, proctest.Env(qpEnv...)...))
	p.qp.WaitHTTP(t, p.admin+network.ReadyPath, http.StatusOK, startTimeout)
	return p
}

type appStats struct {
	InFlight    int64 `json:"inflight"`
	MaxInFlight int64 `json:"max_inflight"`
	Requests    int64 `json:"requests"`
}

func (p *pod) appStats(t *testing.T) appStats {
	t.Helper()
	resp, err := http.Get(p.appURL + "/stats")
	if err != nil {
		t.Fatalf("app stats: %v", err)
	}
	defer resp.Body.Close()
	var s appStats
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatalf("app stats: %v", err)
	}
	return s
}

// metric returns the value of an unlabelled Prometheus sample.
func (p *pod) metric(t *testing.T, name string) float64 {
	t.Helper()
	resp, err := http.Get(p.metrics + network.MetricsPath)
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, name+" ") {
			v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(line, name)), 64)
			if err != nil {
				t.Fatalf("metric %s: %v", line, err)
			}
			return v
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}

type result struct {
	status int
	reason string
	err    error
}

func get(ctx context.Context, url string) result {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return result{err: err}
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return result{status: resp.StatusCode, reason: resp.Header.Get(network.ReasonHeader), err: err}
}

func TestConcurrencyLimitHoldsAtTheApp(t *testing.T) {
	const cc, n = 2, 12
	p := startPod(t, "CONTAINER_CONCURRENCY", strconv.Itoa(cc), "QUEUE_DEPTH", "100")
	var wg sync.WaitGroup
	results := make([]result, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = get(context.Background(), p.serve+"/?sleep=100ms")
		}()
	}
	wg.Wait()
	for i, r := range results {
		if r.err != nil || r.status != http.StatusOK {
			t.Errorf("request %d: status %d, err %v", i, r.status, r.err)
		}
	}
	s := p.appStats(t)
	if s.MaxInFlight != cc {
		t.Errorf("app saw at most %d requests at once, want exactly containerConcurrency %d", s.MaxInFlight, cc)
	}
	if s.Requests != n {
		t.Errorf("app served %d requests, want %d", s.Requests, n)
	}
}

func TestOverflowGets503AndAdmittedComplete(t *testing.T) {
	app := proctest.StartHeldApp(t)
	p := startQueueProxy(t, app.Port, "CONTAINER_CONCURRENCY", "1", "QUEUE_DEPTH", "2")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// One request at the app, two queued behind it: the proxy is full. The
	// app holds the first until the overflow has been answered, however
	// long a busy machine takes to get there.
	admitted := make(chan result, 3)
	go func() { admitted <- get(ctx, p.serve+"/hold") }()
	app.WaitArrived(t, startTimeout)
	for i := 1; i <= 2; i++ {
		go func() { admitted <- get(ctx, p.serve+"/") }()
		proctest.Await(t, startTimeout, func() float64 { return p.metric(t, "swell_queue_queued_requests") }, func(q float64) bool { return q == float64(i) },
			"request %d never queued", i)
	}

	for range 3 {
		r := get(ctx, p.serve+"/")
		if r.err != nil || r.status != http.StatusServiceUnavailable || r.reason != network.ReasonQueueFull {
			t.Fatalf("overflow request: status %d reason %q err %v; want 503 %q", r.status, r.reason, r.err, network.ReasonQueueFull)
		}
	}
	app.Release()
	for range 3 {
		if r := <-admitted; r.err != nil || r.status != http.StatusOK {
			t.Errorf("admitted request: status %d err %v", r.status, r.err)
		}
	}
	if got := p.metric(t, "swell_queue_queued_requests"); got != 0 {
		t.Errorf("queued after drain = %v", got)
	}
}

func TestClientThatGoesAwayFreesItsSlot(t *testing.T) {
	p := startPod(t, "CONTAINER_CONCURRENCY", "1", "QUEUE_DEPTH", "4")

	// A holds the only slot for an hour; B waits behind it.
	ctxA, cancelA := context.WithCancel(context.Background())
	doneA := make(chan result, 1)
	go func() { doneA <- get(ctxA, p.serve+"/?sleep=1h") }()
	proctest.Eventually(t, startTimeout, func() bool { return p.appStats(t).InFlight == 1 }, "A never reached the app")

	ctxB, cancelB := context.WithCancel(context.Background())
	doneB := make(chan result, 1)
	go func() { doneB <- get(ctxB, p.serve+"/") }()
	proctest.Eventually(t, startTimeout, func() bool { return p.metric(t, "swell_queue_queued_requests") == 1 }, "B never queued")

	// B gives up while queued: it leaves the queue at once and never
	// reaches the app.
	cancelB()
	if r := <-doneB; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("B: %+v, want canceled", r)
	}
	proctest.Eventually(t, startTimeout, func() bool { return p.metric(t, "swell_queue_queued_requests") == 0 }, "B stayed queued after leaving")

	// A gives up while at the app: its slot must be freed, or C would wait
	// behind an hour-long request and the test would time out.
	cancelA()
	<-doneA
	ctxC, cancelC := context.WithTimeout(context.Background(), startTimeout)
	defer cancelC()
	if r := get(ctxC, p.serve+"/"); r.err != nil || r.status != http.StatusOK {
		t.Fatalf("C after A left: status %d err %v", r.status, r.err)
	}
	if s := p.appStats(t); s.Requests != 2 {
		t.Errorf("app served %d requests, want 2 (A and C; B left while queued)", s.Requests)
	}
}

func TestGRPCOverH2C(t *testing.T) {
	p := startPod(t)
	conn, err := grpc.NewClient(strings.TrimPrefix(p.serve, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	// The status of a gRPC call travels in HTTP/2 trailers: a SERVING answer
	// proves trailers crossed the proxy.
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatalf("health check through queue-proxy: %v", err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("status %v, want SERVING", resp.GetStatus())
	}
}

func TestWebsocketEcho(t *testing.T) {
	p := startPod(t, "CONTAINER_CONCURRENCY", "1")
	c, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(p.serve, "http")+"/ws", nil)
	if err != nil {
		t.Fatalf("dial websocket through queue-proxy: %v", err)
	}
	defer c.Close()
	for _, msg := range []string{"hello", "swell", strings.Repeat("x", 100_000)} {
		if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		_, got, err := c.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != msg {
			t.Fatalf("echo of %d bytes came back as %d bytes", len(msg), len(got))
		}
	}
}

func TestStreamArrivesInPieces(t *testing.T) {
	p := startPod(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The second chunk comes an hour after the first: reading the first
	// proves it was flushed through the proxy before the response ended.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.serve+"/?stream=2&interval=1h", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil {
		t.Fatalf("first chunk: %v", err)
	}
	if !strings.Contains(line, "1/2") {
		t.Errorf("first chunk is %q, want chunk 1/2", line)
	}
}

func TestSIGTERMDrainsInFlight(t *testing.T) {
	// The app holds the first request until the drain has been seen and a
	// request served during it: a timed one could end, and the drain with
	// it, before a busy machine got that far.
	app := proctest.StartHeldApp(t)
	p := startQueueProxy(t, app.Port, "DRAIN_QUIET_PERIOD", "200ms", "DRAIN_TIMEOUT", "20s")
	done := make(chan result, 1)
	go func() { done <- get(context.Background(), p.serve+"/hold") }()
	app.WaitArrived(t, startTimeout)

	if err := p.qp.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, startTimeout, func() bool {
		return get(context.Background(), p.admin+network.ReadyPath).status == http.StatusServiceUnavailable
	}, "readiness did not turn false after SIGTERM")
	// A request that arrives while draining is still served.
	if r := get(context.Background(), p.serve+"/"); r.err != nil || r.status != http.StatusOK {
		t.Errorf("request during drain: status %d err %v", r.status, r.err)
	}
	app.Release()
	if r := <-done; r.err != nil || r.status != http.StatusOK {
		t.Errorf("in-flight request: status %d err %v; want 200", r.status, r.err)
	}
	exited, err := p.qp.Wait(startTimeout)
	if !exited {
		t.Fatal("queue-proxy did not exit after draining")
	}
	if err != nil {
		t.Errorf("queue-proxy exit: %v", err)
	}
}

// statsJSON mirrors the JSON form of the stats report (docs/stats.md).
type statsJSON struct {
	End         time.Time `json:"end"`
	Concurrency float64   `json:"concurrency"`
	Requests    uint64    `json:"requests"`
}

func (p *pod) stats(t *testing.T) statsJSON {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, p.metrics+network.StatsPath, nil)
	req.Header.Set("Accept", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	defer resp.Body.Close()
	var s statsJSON
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatalf("stats: %v", err)
	}
	return s
}

func TestStatsReportAverageConcurrency(t *testing.T) {
	p := startPod(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); get(ctx, p.serve+"/?sleep=1h") }()
	}
	proctest.Eventually(t, startTimeout, func() bool { return p.appStats(t).InFlight == 4 }, "4 requests never reached the app")
	held := time.Now()

	// The first report whose period started after all four were held
	// covers a full period of exactly four.
	var s statsJSON
	proctest.Eventually(t, startTimeout, func() bool {
		s = p.stats(t)
		return s.End.After(held.Add(1100 * time.Millisecond))
	}, "no report covering a full period")
	if s.Concurrency < 3.99 || s.Concurrency > 4.01 {
		t.Errorf("average concurrency %v over a period with 4 requests held, want 4", s.Concurrency)
	}
	cancel()
	wg.Wait()
}

func TestBadConfigurationStopsStartUp(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	bin := proctest.Build(t, qpPkg)
	for _, tc := range []struct{ name, value string }{
		{"CONTAINER_CONCURRENCY", "abc"},
		{"CONTAINER_CONCURRENCY", "-1"},
		{"QUEUE_SERVING_PORT", "70000"},
		{"REQUEST_TIMEOUT", "soon"},
		{"DRAIN_TIMEOUT", "-5s"},
		{"USER_PORT", "0"},
	} {
		t.Run(fmt.Sprintf("%s=%q", tc.name, tc.value), func(t *testing.T) {
			qp := proctest.Start(t, "queue-proxy", bin, proctest.Env(tc.name, tc.value))
			exited, _ := qp.Wait(startTimeout)
			if !exited {
				t.Fatal("queue-proxy kept running with bad configuration")
			}
			if code := qp.ExitCode(); code == 0 {
				t.Errorf("exit code 0 with bad configuration")
			}
			out := qp.Output()
			if !strings.Contains(out, tc.name) || !strings.Contains(out, strconv.Quote(tc.value)) {
				t.Errorf("message does not name %s and %q:\n%s", tc.name, tc.value, out)
			}
		})
	}
}
