package main

// End-to-end tests: the real activator binary in front of real
// queue-proxies and cmd/hello apps, on loopback.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"k8s.io/utils/clock"

	"github.com/swell-run/swell/autoscaler/collector"
	"github.com/swell-run/swell/internal/proctest"
	"github.com/swell-run/swell/pkg/network"
)

const (
	actPkg   = "github.com/swell-run/swell/cmd/activator"
	qpPkg    = "github.com/swell-run/swell/cmd/queue-proxy"
	helloPkg = "github.com/swell-run/swell/cmd/hello"
	// startTimeout bounds a process's start-up; only reached when broken.
	startTimeout = 30 * time.Second
	svcKey       = "default/hello"
	svcHost      = "hello.example.com"
)

// pod is a queue-proxy in front of a hello app.
type pod struct {
	servePort int
	appURL    string
	qp, app   *proctest.Process
}

// newPod picks the pod's ports without starting anything, so a services
// file can name it before it exists.
func newPod(t *testing.T) *pod {
	return &pod{servePort: proctest.FreePort(t)}
}

func (p *pod) start(t *testing.T, cc int) {
	t.Helper()
	appPort := proctest.FreePort(t)
	p.app = proctest.Start(t, "hello", proctest.Build(t, helloPkg), proctest.Env("PORT", strconv.Itoa(appPort), "HOST", "127.0.0.1"))
	p.startProxy(t, cc, appPort)
}

// startHeld starts the pod's queue-proxy in front of a HeldApp instead of
// hello, and returns the app.
func (p *pod) startHeld(t *testing.T, cc int) *proctest.HeldApp {
	t.Helper()
	app := proctest.StartHeldApp(t)
	p.startProxy(t, cc, app.Port)
	return app
}

// startProxy starts the pod's queue-proxy in front of the app on appPort.
func (p *pod) startProxy(t *testing.T, cc, appPort int) {
	t.Helper()
	metricsPort, adminPort := proctest.FreePort(t), proctest.FreePort(t)
	p.appURL = "http://" + proctest.Addr(appPort)
	p.qp = proctest.Start(t, "queue-proxy", proctest.Build(t, qpPkg), proctest.Env(
		"QUEUE_SERVING_PORT", strconv.Itoa(p.servePort),
		"QUEUE_METRICS_PORT", strconv.Itoa(metricsPort),
		"QUEUE_ADMIN_PORT", strconv.Itoa(adminPort),
		"USER_PORT", strconv.Itoa(appPort),
		"CONTAINER_CONCURRENCY", strconv.Itoa(cc),
		"LOG_FORMAT", "json",
	))
	p.qp.WaitHTTP(t, "http://"+proctest.Addr(adminPort)+network.ReadyPath, http.StatusOK, startTimeout)
}

func (p *pod) maxInFlight(t *testing.T) (inflight, maxInflight int64) {
	t.Helper()
	resp, err := http.Get(p.appURL + "/stats")
	if err != nil {
		t.Fatalf("app stats: %v", err)
	}
	defer resp.Body.Close()
	var s struct {
		InFlight    int64 `json:"inflight"`
		MaxInFlight int64 `json:"max_inflight"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatalf("app stats: %v", err)
	}
	return s.InFlight, s.MaxInFlight
}

type act struct {
	proc                  *proctest.Process
	serve, admin, metrics string
	servicesFile          string
}

// servicesJSON lists one service with the given pods.
func servicesJSON(cc int, pods ...*pod) string {
	var ps []string
	for i, p := range pods {
		ps = append(ps, fmt.Sprintf(`{"name":"p%d","addr":"%s"}`, i, proctest.Addr(p.servePort)))
	}
	return fmt.Sprintf(`{"services":[{"key":%q,"hosts":[%q],"containerConcurrency":%d,"pods":[%s]}]}`,
		svcKey, svcHost, cc, strings.Join(ps, ","))
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "services.json")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startActivator runs the activator over a services file and waits until
// it is ready; env holds extra settings as alternating names and values.
func startActivator(t *testing.T, services string, env ...string) *act {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	sp, ap, mp := proctest.FreePort(t), proctest.FreePort(t), proctest.FreePort(t)
	a := &act{
		serve:        "http://" + proctest.Addr(sp),
		admin:        "http://" + proctest.Addr(ap),
		metrics:      "http://" + proctest.Addr(mp),
		servicesFile: writeFile(t, services),
	}
	base := proctest.Env(
		"ACTIVATOR_PORT", strconv.Itoa(sp), "ACTIVATOR_ADMIN_PORT", strconv.Itoa(ap), "ACTIVATOR_METRICS_PORT", strconv.Itoa(mp),
		"SERVICES_FILE", a.servicesFile, "LOG_FORMAT", "json", "POD_NAME", "activator-0",
	)
	a.proc = proctest.Start(t, "activator", proctest.Build(t, actPkg), append(base, proctest.Env(env...)...))
	a.proc.WaitHTTP(t, a.admin+network.ReadyPath, http.StatusOK, startTimeout)
	return a
}

type result struct {
	status int
	body   string
	err    error
}

func (a *act) get(ctx context.Context, query string) result {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.serve+"/"+query, nil)
	req.Host = svcHost
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return result{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return result{status: resp.StatusCode, body: string(b), err: err}
}

// queued reads the activator's queued-requests gauge for the service.
func (a *act) queued(t *testing.T) float64 {
	t.Helper()
	resp, err := http.Get(a.metrics + network.MetricsPath)
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	prefix := fmt.Sprintf(`swell_activator_queued_requests{service=%q} `, svcKey)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

func TestRequestReachesAppThroughQueueProxy(t *testing.T) {
	p := newPod(t)
	a := startActivator(t, servicesJSON(0, p))
	p.start(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	r := a.get(ctx, "")
	if r.err != nil || r.status != http.StatusOK || r.body == "" {
		t.Fatalf("got %d %q %v, want 200 with the greeting", r.status, r.body, r.err)
	}
	if _, max := p.maxInFlight(t); max < 1 {
		t.Errorf("the app saw no request")
	}
	// An unknown host is a 404, not a held request.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.serve+"/", nil)
	req.Host = "nobody.example.com"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown host: got %d, want 404", resp.StatusCode)
	}
}

func TestHeldRequestsSucceedWhenPodComesUp(t *testing.T) {
	const cc, n = 2, 50
	p := newPod(t)
	a := startActivator(t, servicesJSON(cc, p))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	results := make(chan result, n)
	for range n {
		go func() { results <- a.get(ctx, "?sleep=20ms") }()
	}
	proctest.Await(t, startTimeout, func() float64 { return a.queued(t) }, func(q float64) bool { return q == n },
		"the activator never held all %d requests", n)
	p.start(t, cc)
	for range n {
		if r := <-results; r.err != nil || r.status != http.StatusOK {
			t.Errorf("got %d %q %v, want 200", r.status, r.body, r.err)
		}
	}
	if _, max := p.maxInFlight(t); max > cc {
		t.Errorf("app max in flight %d, want ≤ %d", max, cc)
	}
}

func TestReportsToAutoscaler(t *testing.T) {
	loads := collector.NewActivators(clock.RealClock{}, 0)
	pokes := make(chan string, 16)
	ep, err := collector.NewActivatorEndpoint(collector.EndpointConfig{
		Tokens: []string{"0123456789abcdef-token"}, Sink: loads,
		OnPoke: func(s string) {
			select {
			case pokes <- s:
			default:
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(ep)
	defer srv.Close()
	p := newPod(t) // never started: the service stays at zero
	a := startActivator(t, servicesJSON(1, p),
		"AUTOSCALER_URL", "ws"+strings.TrimPrefix(srv.URL, "http")+network.ActivatorReportPath,
		"AUTOSCALER_TOKEN", "0123456789abcdef-token")

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan result, 1)
	go func() { done <- a.get(ctx, "") }()
	select {
	case s := <-pokes:
		if s != svcKey {
			t.Errorf("poke for %q, want %q", s, svcKey)
		}
	case <-time.After(startTimeout):
		t.Fatal("no poke")
	}
	proctest.Await(t, startTimeout, func() collector.ActivatorLoad { return loads.Load(svcKey) },
		func(l collector.ActivatorLoad) bool { return l.Activators == 1 && l.Pending == 1 && l.Concurrency > 0 },
		"no per-second figures")
	cancel()
	<-done
}

func TestBadConfigExits2(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	bin := proctest.Build(t, actPkg)
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{proctest.Env("ACTIVATOR_PORT", "abc", "SERVICES_FILE", "x"), `invalid ACTIVATOR_PORT "abc"`},
		// No services file: Kubernetes mode, here with an unreadable kubeconfig.
		{proctest.Env("KUBECONFIG", writeFile(t, "not: [yaml")), "SERVICES_FILE is not set, so the services come from Kubernetes: find the Kubernetes API server"},
		{proctest.Env("SYSTEM_NAMESPACE", "Not_A_Namespace"), `invalid SYSTEM_NAMESPACE "Not_A_Namespace"`},
		{proctest.Env("SERVICES_FILE", writeFile(t, `{"services":[{"key":"nokey"}]}`)), "invalid SERVICES_FILE"},
		{proctest.Env("SERVICES_FILE", writeFile(t, `{}`), "AUTOSCALER_URL", "http://x"), `invalid AUTOSCALER_URL "http://x": must be a ws://`},
	} {
		p := proctest.Start(t, "activator", bin, tc.env)
		if exited, _ := p.Wait(startTimeout); !exited || p.ExitCode() != 2 {
			t.Errorf("%v: exited %v code %d, want 2", tc.env, exited, p.ExitCode())
		}
		if !strings.Contains(p.Output(), tc.want) {
			t.Errorf("%v: output %q, want it to contain %q", tc.env, p.Output(), tc.want)
		}
	}
}

func TestSIGTERMDrainsInFlight(t *testing.T) {
	p := newPod(t)
	a := startActivator(t, servicesJSON(0, p), "DRAIN_QUIET_PERIOD", "200ms", "DRAIN_TIMEOUT", "20s")
	// The app holds the request until the drain has been seen: a timed
	// one could end, and the drain with it, before a busy machine got
	// that far.
	app := p.startHeld(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	var wg sync.WaitGroup
	var r result
	wg.Go(func() { r = a.get(ctx, "hold") })
	app.WaitArrived(t, startTimeout)
	if err := a.proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, startTimeout, func() bool {
		resp, err := http.Get(a.admin + network.ReadyPath)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	}, "readiness still true while draining")
	app.Release()
	wg.Wait()
	if r.err != nil || r.status != http.StatusOK {
		t.Errorf("in-flight request: %d %v, want 200", r.status, r.err)
	}
	if exited, err := a.proc.Wait(startTimeout); !exited || err != nil {
		t.Errorf("exited %v, err %v; want exit 0", exited, err)
	}
}

// TestBurstFromZeroWithPodsJoining holds 500 requests for a service at zero,
// then brings up three pods one by one, the second and third added to the
// services file by a SIGHUP reload mid-burst: every request succeeds and no
// app ever holds more than containerConcurrency.
func TestBurstFromZeroWithPodsJoining(t *testing.T) {
	const cc, n = 2, 500
	pods := []*pod{newPod(t), newPod(t), newPod(t)}
	a := startActivator(t, servicesJSON(cc, pods[0]))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	results := make(chan result, n)
	for range n {
		go func() { results <- a.get(ctx, "?sleep=20ms") }()
	}
	proctest.Await(t, startTimeout, func() float64 { return a.queued(t) }, func(q float64) bool { return q == n },
		"the activator never held all %d requests", n)
	pods[0].start(t, cc)
	for i := 1; i < len(pods); i++ {
		if err := os.WriteFile(a.servicesFile, []byte(servicesJSON(cc, pods[:i+1]...)), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := a.proc.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		pods[i].start(t, cc)
	}
	for range n {
		if r := <-results; r.err != nil || r.status != http.StatusOK {
			t.Errorf("got %d %q %v, want 200", r.status, r.body, r.err)
		}
	}
	for i, p := range pods {
		if _, max := p.maxInFlight(t); max > cc {
			t.Errorf("pod %d: app max in flight %d, want ≤ %d", i, max, cc)
		}
	}
}

func TestGRPCThroughActivator(t *testing.T) {
	p := newPod(t)
	a := startActivator(t, servicesJSON(0, p))
	p.start(t, 0)
	// The :authority routes the call, as Host does for HTTP/1.1.
	conn, err := grpc.NewClient(strings.TrimPrefix(a.serve, "http://"),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority(svcHost))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	// A gRPC status travels in HTTP/2 trailers: SERVING proves they crossed
	// both the activator and the queue-proxy.
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatalf("health check through the activator: %v", err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("status %v, want SERVING", resp.GetStatus())
	}
}

// TestKilledPodLosesNoUnstartedRequest kills one of two pods mid-burst,
// without telling the activator: only the request the dead pod was serving
// (containerConcurrency 1) may fail; the activator drops the pod on its
// refused dial and every request that had not started there succeeds on
// the survivor.
func TestKilledPodLosesNoUnstartedRequest(t *testing.T) {
	const cc, n = 1, 40
	live, doomed := newPod(t), newPod(t)
	// A request stuck in the activator answers 504 well before ctx ends,
	// rather than after the default five minutes; 40 requests of 200ms
	// on one pod need about 8s.
	a := startActivator(t, servicesJSON(cc, live, doomed), "REQUEST_TIMEOUT", "30s")
	live.start(t, cc)
	doomed.start(t, cc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	results := make(chan result, n)
	for range n {
		go func() { results <- a.get(ctx, "?sleep=200ms") }()
	}
	proctest.Eventually(t, startTimeout, func() bool {
		in1, _ := live.maxInFlight(t)
		in2, _ := doomed.maxInFlight(t)
		return in1 == cc && in2 == cc
	}, "both pods never served at once")
	// The queue-proxy first, so the activator's next dial is refused
	// rather than answered by a proxy whose app is gone.
	for _, p := range []*proctest.Process{doomed.qp, doomed.app} {
		if err := p.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if exited, _ := p.Wait(startTimeout); !exited {
			t.Fatalf("%s survived SIGKILL", p.Name)
		}
	}
	failed := 0
	for range n {
		if r := <-results; r.err != nil || r.status != http.StatusOK {
			failed++
			t.Logf("failed: %d %q %v", r.status, r.body, r.err)
		}
	}
	if failed > cc {
		t.Errorf("%d of %d requests failed, want ≤ %d (only those in flight at the killed pod)", failed, n, cc)
	}
	if _, max := live.maxInFlight(t); max > cc {
		t.Errorf("surviving app max in flight %d, want ≤ %d", max, cc)
	}
}

// TestQueueDrainsInArrivalOrder holds requests for a service at zero, each
// sent only once the previous one is counted as queued so their arrival
// order is certain, then brings up a pod with containerConcurrency 1: with
// one request admitted at a time and each taking a while at the app, the
// order responses come back is the order the queue released them, which
// must be arrival order.
func TestQueueDrainsInArrivalOrder(t *testing.T) {
	const cc, n = 1, 20
	p := newPod(t)
	a := startActivator(t, servicesJSON(cc, p))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type done struct {
		i int
		r result
	}
	order := make(chan done, n)
	for i := range n {
		// The index in the path makes each request tell-apart in logs;
		// hello serves any path.
		go func() { order <- done{i, a.get(ctx, fmt.Sprintf("order/%d?sleep=20ms", i))} }()
		proctest.Await(t, startTimeout, func() float64 { return a.queued(t) }, func(q float64) bool { return q == float64(i+1) },
			"request %d never queued", i)
	}
	p.start(t, cc)
	got := make([]int, 0, n)
	for range n {
		d := <-order
		if d.r.err != nil || d.r.status != http.StatusOK {
			t.Errorf("request %d: got %d %q %v, want 200", d.i, d.r.status, d.r.body, d.r.err)
		}
		got = append(got, d.i)
	}
	for i, idx := range got {
		if idx != i {
			t.Fatalf("completion order %v, want arrival order 0..%d", got, n-1)
		}
	}
	if _, max := p.maxInFlight(t); max > cc {
		t.Errorf("app max in flight %d, want ≤ %d", max, cc)
	}
}

// TestSIGTERMAfterLoopbackDrainKeepsDraining: a drain started from inside
// the pod (a POST from loopback, as an exec preStop hook would) and the
// SIGTERM the kubelet sends after it are one drain: the in-flight request
// is served and the activator exits 0, rather than taking the SIGTERM for
// a second signal and stopping at once.
func TestSIGTERMAfterLoopbackDrainKeepsDraining(t *testing.T) {
	p := newPod(t)
	a := startActivator(t, servicesJSON(0, p), "DRAIN_QUIET_PERIOD", "200ms", "DRAIN_TIMEOUT", "20s")
	// The app holds the request until the signal has been taken: a timed
	// one could end before it came, and the test would show nothing.
	app := p.startHeld(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	var wg sync.WaitGroup
	var r result
	wg.Go(func() { r = a.get(ctx, "hold") })
	app.WaitArrived(t, startTimeout)
	resp, err := http.Post(a.admin+network.DrainPath, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST %s from loopback: %d, want 202", network.DrainPath, resp.StatusCode)
	}
	if err := a.proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, startTimeout, func() bool {
		return strings.Contains(a.proc.Output(), "signal received: draining")
	}, "the activator never took the SIGTERM")
	app.Release()
	wg.Wait()
	if r.err != nil || r.status != http.StatusOK {
		t.Errorf("in-flight request: %d %v, want 200", r.status, r.err)
	}
	if exited, err := a.proc.Wait(startTimeout); !exited || err != nil {
		t.Errorf("exited %v, err %v; want exit 0", exited, err)
	}
}

// TestDrainClosesKeepAlives: once a drain starts, the activator answers
// each request on a kept connection with Connection: close and closes it,
// so clients reconnect (kube-proxy sends them to another activator)
// instead of keeping its quiet period from ever coming; it does not close
// an idle connection under a client about to send on it.
func TestDrainClosesKeepAlives(t *testing.T) {
	p := newPod(t)
	a := startActivator(t, servicesJSON(0, p), "DRAIN_QUIET_PERIOD", "5s", "DRAIN_TIMEOUT", "20s")
	p.start(t, 0)
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	send := func() (reused, closed bool) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		defer cancel()
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }})
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.serve+"/", nil)
		req.Host = svcHost
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d, want 200", resp.StatusCode)
		}
		return reused, resp.Close
	}
	send()
	if reused, closed := send(); !reused || closed {
		t.Fatalf("before the drain: reused %v, closed %v; want the connection kept and reused", reused, closed)
	}
	resp, err := http.Post(a.admin+network.DrainPath, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if reused, closed := send(); !reused || !closed {
		t.Errorf("the first request of the drain: reused %v, closed %v; want the kept connection, closed after the answer", reused, closed)
	}
	if reused, _ := send(); reused {
		t.Errorf("the next request of the drain reused a connection; want a new one")
	}
}
