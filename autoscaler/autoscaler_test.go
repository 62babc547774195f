package autoscaler

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/swell-run/swell/autoscaler/collector"
	"github.com/swell-run/swell/autoscaler/plan"
	"github.com/swell-run/swell/autoscaler/scaler"
	"github.com/swell-run/swell/autoscaler/scaler/scalertest"
	"github.com/swell-run/swell/pkg/autoscaling"
	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/service"
	"github.com/swell-run/swell/pkg/stats"
)

// t0 is a half second: the collector's rounds then fall on the clock's
// steps, and the decision ticks on every second step.
var t0 = time.Date(2031, 3, 4, 5, 6, 7, 500_000_000, time.UTC)

const testToken = "autoscaler-test-token-0123456789"

// wait bounds every wait for a goroutine of the system under test. It is a
// failure guard, never a way to synchronise: tests wait on channels.
const wait = 10 * time.Second

func key(name string) service.Key { return service.Key{Namespace: "default", Name: name} }

// notifyingBackend is the scaler's test backend that reports each applied
// write on a channel, so a test can wait for the executor without polling.
type notifyingBackend struct {
	*scalertest.Backend
	writes chan scalertest.Call
}

func (b *notifyingBackend) SetScale(ctx context.Context, svc service.Key, n int) error {
	err := b.Backend.SetScale(ctx, svc, n)
	b.writes <- scalertest.Call{Op: scalertest.OpSetScale, Service: svc, Replicas: n, Err: err}
	return err
}

func (b *notifyingBackend) SetRoute(ctx context.Context, svc service.Key, r plan.Route) error {
	err := b.Backend.SetRoute(ctx, svc, r)
	b.writes <- scalertest.Call{Op: scalertest.OpSetRoute, Service: svc, Route: r, Err: err}
	return err
}

// harness steps an Autoscaler's loop on a fake clock, from the test's
// goroutine, against the fake backend, with its handler on a loopback
// server. Its executor runs (its workers are the one concurrency a step
// leaves); Run runs only for tests that start it.
type harness struct {
	t     *testing.T
	clk   *testingclock.FakeClock
	be    *notifyingBackend
	a     *Autoscaler
	url   string
	reg   *prometheus.Registry
	logs  *observer.ObservedLogs
	steps int
	// notables receives Config.OnNotable's calls.
	notables chan Notable
}

func newHarness(t *testing.T, opts ...func(*Config)) *harness {
	t.Helper()
	h := &harness{
		t:        t,
		clk:      testingclock.NewFakeClock(t0),
		be:       &notifyingBackend{Backend: scalertest.NewBackend(), writes: make(chan scalertest.Call, 1000)},
		reg:      prometheus.NewRegistry(),
		notables: make(chan Notable, 1000),
	}
	h.be.SetReadyFollowsDesired(true)
	core, logs := observer.New(zapcore.InfoLevel)
	h.logs = logs
	cfg := Config{
		Backend: h.be,
		// No route polls: the fake backend confirms routes at once, and a
		// poll would make backend calls the tests do not wait for.
		Scaler: scaler.Config{Workers: 2, Rules: plan.Rules{RoutePoll: time.Hour}},
		Collector: collector.Config{
			// Real sockets under the race detector on a busy machine:
			// generous real-time bounds, and every pod scraped.
			Timeout:      wait,
			RoundTimeout: wait,
			Sampling:     &collector.Sampling{},
		},
		Endpoint:   collector.EndpointConfig{Tokens: []string{testToken}},
		Registerer: h.reg,
		OnNotable:  func(n Notable) { h.notables <- n },
		Clock:      h.clk,
		Logger:     zap.New(core),
	}
	for _, o := range opts {
		o(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.a = a
	a.exec.Start()
	t.Cleanup(a.exec.Stop)
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	h.url = srv.URL
	return h
}

// start runs the loop until the test ends; the test then steps nothing
// itself.
func (h *harness) start() {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.a.Run(ctx) }()
	h.t.Cleanup(func() {
		cancel()
		// Keep draining the backend's writes: a worker blocked on a full
		// channel would keep Run from returning.
		deadline := time.After(wait)
		for {
			select {
			case err := <-done:
				if err != nil {
					h.t.Errorf("Run: %v", err)
				}
				return
			case <-h.be.writes:
			case <-deadline:
				h.t.Errorf("Run did not return within %v of its context's end", wait)
				return
			}
		}
	})
}

func recv[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(wait):
		t.Fatalf("no %s within %v", what, wait)
		panic("unreachable")
	}
}

// step advances the clock one second and runs that second's collection
// round and, every other second, the decision tick, as Run would.
func (h *harness) step() {
	h.t.Helper()
	h.clk.Step(time.Second)
	h.steps++
	h.a.round(context.Background(), h.clk.Now())
	if h.steps%2 == 0 {
		h.a.out(h.a.tickAll(h.clk.Now()))
	}
}

// settle waits until the executor has applied k's latest decision.
func (h *harness) settle(k service.Key) {
	h.t.Helper()
	ss, ok := h.a.ServiceStatus(k)
	if !ok || !ss.Decided {
		return
	}
	for {
		if st, _ := h.be.Get(k); st.Desired == ss.Scale {
			return
		}
		recv(h.t, h.be.writes, "backend write for "+k.String())
	}
}

// pods are queue-proxies' metrics ports on loopback, serving stats reports
// of a service-wide load shared equally by the ready ones.
type pods struct {
	addrs  []string
	perPod atomic.Uint64 // float64 bits
	// app, when set, is what each pod measured of its app: they then
	// serve version 3.
	app atomic.Pointer[stats.AppUsage]
}

func newPods(t *testing.T, n int) *pods {
	p := &pods{}
	for range n {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != network.StatsPath {
				http.NotFound(w, r)
				return
			}
			c := math.Float64frombits(p.perPod.Load())
			rep := stats.Report{End: time.Now(), Period: time.Second, Uptime: time.Minute, Concurrency: c, Requests: uint64(10 * c)}
			if a := p.app.Load(); a != nil {
				rep.App = *a
				w.Header().Set("Content-Type", stats.ContentTypeV3)
				w.Write(rep.AppendBinaryV3(nil))
				return
			}
			w.Header().Set("Content-Type", stats.ContentType)
			w.Write(rep.AppendBinary(nil))
		}))
		t.Cleanup(srv.Close)
		p.addrs = append(p.addrs, strings.TrimPrefix(srv.URL, "http://"))
	}
	return p
}

// follow gives the autoscaler the pods the backend has ready, each with
// its share of total.
func (p *pods) follow(h *harness, k service.Key, total float64) {
	st, _ := h.be.Get(k)
	n := min(st.Ready, len(p.addrs))
	h.a.SetPods(k, p.addrs[:n])
	if n > 0 {
		p.perPod.Store(math.Float64bits(total / float64(n)))
	}
}

// gauge returns the value of a per-service gauge, and whether it exists.
func (h *harness) gauge(name string, k service.Key) (float64, bool) {
	h.t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["namespace"] == k.Namespace && labels["service"] == k.Name {
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

func TestNewValidates(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	be := scalertest.NewBackend()
	for _, c := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no backend", Config{}, "Backend is required"},
		{"tick too short", Config{Backend: be, TickInterval: 50 * time.Millisecond}, "at least 100ms"},
		{"short token", Config{Backend: be, Endpoint: collector.EndpointConfig{Tokens: []string{"short"}}}, "token 0"},
	} {
		c.cfg.Clock = clk
		if _, err := New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
	a, err := New(Config{Backend: be, Clock: clk})
	if err != nil || time.Duration(a.tick.Load()) != DefaultTickInterval || a.history != DefaultHistory {
		t.Fatalf("defaults: %v, tick %v history %d", err, time.Duration(a.tick.Load()), a.history)
	}
	if _, err := New(Config{Backend: be, TickInterval: MinTickInterval, Clock: clk}); err != nil {
		t.Fatalf("the minimum tick refused: %v", err)
	}
}

func TestConstantLoadScalesThroughTheExecutor(t *testing.T) {
	h := newHarness(t)
	k := key("hello")
	h.be.Set(k, plan.Status{Desired: 1, Ready: 1, Route: plan.RoutePods})
	spec := autoscaling.DefaultSpec() // 70 in flight per pod
	spec.Class = autoscaling.ClassKPA // and Knative's burst capacity
	h.a.Upsert(k, spec)
	p := newPods(t, 6)
	p.follow(h, k, 210)

	for range 90 {
		h.step()
		if h.steps%2 == 0 {
			h.settle(k)
		}
		p.follow(h, k, 210)
	}

	if st, _ := h.be.Get(k); st.Desired != 3 || st.Ready != 3 || st.Route != plan.RouteActivator {
		t.Fatalf("backend: %+v, want 3 replicas, 3 ready, behind the activator (EBC < 0)", st)
	}
	ss, _ := h.a.ServiceStatus(k)
	if ss.Scale != 3 || ss.Ready != 3 || math.Abs(ss.Stable-210) > 1e-6 || ss.PanicMode {
		t.Fatalf("status: %+v, want scale 3 on 3 ready at a stable 210, panic over", ss)
	}
	if want := math.Floor(3*100 - 211 - 210); ss.ExcessBurstCapacity != want || !ss.NeedActivator {
		t.Fatalf("EBC %v need activator %v, want %v and true", ss.ExcessBurstCapacity, ss.NeedActivator, want)
	}
	if ss.LastSample == nil || math.Abs(ss.LastSample.Concurrency-210) > 1e-6 || math.Abs(ss.LastSample.RPS-2100) > 1e-6 {
		t.Fatalf("last sample %+v, want 210 in flight and 2100 rps", ss.LastSample)
	}

	// The change was logged once, with its inputs; unchanged ticks were not.
	var ups int
	lines := h.logs.FilterMessage("scale decision").All()
	for _, e := range lines {
		f := e.ContextMap()
		if f["from"] != int64(1) || f["scale"] != int64(3) {
			continue
		}
		ups++
		for _, name := range []string{"reason", "stable", "panic", "ready", "desired", "ebc", "panicMode", "activatorPending", "trigger"} {
			if _, ok := f[name]; !ok {
				t.Errorf("the decision's log line lacks %q: %v", name, f)
			}
		}
		if f["service"] != "default/hello" || f["trigger"] != "tick" {
			t.Errorf("log line %v", f)
		}
	}
	// Besides the change, at most the end of the restart's panic is logged.
	if ups != 1 || len(lines) > 2 {
		t.Fatalf("%d info lines for %d ticks, %d of them 1→3; want the change once and no unchanged tick", len(lines), h.steps/2, ups)
	}

	// Status keeps the notable decisions only: the first, the change, the
	// end of panic.
	if len(ss.Decisions) == 0 || len(ss.Decisions) > 4 {
		t.Fatalf("kept decisions: %+v", ss.Decisions)
	}
	if d := ss.Decisions[len(ss.Decisions)-1]; d.Scale != 3 || d.Trigger != "tick" || d.Reason == "" {
		t.Fatalf("last kept decision %+v", d)
	}

	for name, want := range map[string]float64{
		"swell_autoscaler_desired_pods":          3,
		"swell_autoscaler_ready_pods":            3,
		"swell_autoscaler_panic_mode":            0,
		"swell_autoscaler_excess_burst_capacity": ss.ExcessBurstCapacity,
	} {
		if got, ok := h.gauge(name, k); !ok || got != want {
			t.Errorf("%s = %v (%v), want %v", name, got, ok, want)
		}
	}
}

// TestGaugeScalesWhileConcurrencyStaysFlat: a service scaling on an app
// gauge grows with it while its requests do not change, the reason naming
// the gauge; when the pods cannot read it, that is told once it lasts, and
// again when they read it once more.
func TestGaugeScalesWhileConcurrencyStaysFlat(t *testing.T) {
	h := newHarness(t)
	var told []GaugeProblem
	h.a.onGaugeProblem = func(p GaugeProblem) { told = append(told, p) }
	k := key("llm")
	h.be.Set(k, plan.Status{Desired: 1, Ready: 1, Route: plan.RoutePods})
	spec, err := autoscaling.Parse(map[string]string{
		autoscaling.Prefix + "metric":       "concurrency,gauge",
		autoscaling.Prefix + "gauge":        "waiting",
		autoscaling.Prefix + "gauge-target": "5",
	}, 0, autoscaling.DefaultDefaults())
	if err != nil {
		t.Fatal(err)
	}
	h.a.Upsert(k, spec)
	p := newPods(t, 4)
	// 20 waiting over the service: 4 pods at 5 each, whatever is ready.
	waiting := func(total float64) {
		st, _ := h.be.Get(k)
		n := max(min(st.Ready, len(p.addrs)), 1)
		p.app.Store(&stats.AppUsage{Gauge: total / float64(n), GaugeKey: stats.GaugeKey("waiting"), HasGauge: true})
	}
	run := func(steps int, total float64) {
		for range steps {
			waiting(total)
			p.follow(h, k, 1) // one request in flight throughout
			h.step()
			if h.steps%2 == 0 {
				h.settle(k)
			}
		}
	}
	run(20, 20)
	if st, _ := h.be.Get(k); st.Desired != 4 {
		t.Fatalf("backend: %+v, want the 4 replicas 20 waiting at 5 a pod ask for", st)
	}
	if ss, _ := h.a.ServiceStatus(k); !strings.HasPrefix(ss.Reason, "gauge: ") {
		t.Errorf("reason %q does not name the gauge", ss.Reason)
	}

	p.app.Store(&stats.AppUsage{GaugeProblem: stats.GaugeMissing})
	for range gaugeProblemRounds - 1 {
		p.follow(h, k, 1)
		h.step()
	}
	if len(told) != 0 {
		t.Fatalf("told %+v before the problem lasted %d rounds", told, gaugeProblemRounds)
	}
	p.follow(h, k, 1)
	h.step()
	if len(told) != 1 || told[0].Problem != stats.GaugeMissing || told[0].Pods != 4 || told[0].Gauge != "waiting" {
		t.Fatalf("told %+v, want the gauge missing on 4 pods", told)
	}
	if h.logs.FilterMessageSnippet("pods cannot read the app gauge").Len() != 1 {
		t.Errorf("the problem was not logged once")
	}
	for range gaugeProblemRounds {
		waiting(20)
		p.follow(h, k, 1)
		h.step()
	}
	if len(told) != 2 || told[1].Problem != stats.GaugeOK {
		t.Fatalf("told %+v, want the recovery after the problem", told)
	}
}

func TestPokeScalesFromZeroWithoutATick(t *testing.T) {
	h := newHarness(t)
	k := key("sleepy")
	h.be.Set(k, plan.Status{Desired: 0, Ready: 0, Route: plan.RouteActivator})
	h.a.Upsert(k, autoscaling.DefaultSpec())
	h.start()

	hdr := http.Header{"Authorization": {"Bearer " + testToken}}
	wsURL := "ws" + strings.TrimPrefix(h.url, "http") + network.ActivatorReportPath
	ws, _, err := websocket.DefaultDialer.Dial(wsURL, hdr)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	for _, f := range [][]byte{
		stats.AppendActivatorHello(nil, "activator-0"),
		stats.AppendActivatorPoke(nil, "default/unknown"),
		stats.AppendActivatorPoke(nil, "default/sleepy"),
	} {
		if err := ws.WriteMessage(websocket.BinaryMessage, f); err != nil {
			t.Fatal(err)
		}
	}
	c := recv(t, h.be.writes, "scale from zero")
	if c.Op != scalertest.OpSetScale || c.Service != k || c.Replicas != 1 || c.Err != nil {
		t.Fatalf("first write %v, want scale %s 1", c, k)
	}
	if !h.clk.Now().Equal(t0) {
		t.Fatalf("the clock moved (%v): the wake-up must wait for no tick or round", h.clk.Now())
	}
	n := recv(t, h.notables, "notable decision")
	if n.Service != k || n.From != 0 || n.Decision.Scale != 1 || n.Trigger != "poke" || n.PanicChanged ||
		n.Metric != autoscaling.MetricConcurrency || n.TargetPerPod != 70 {
		t.Fatalf("notable decision %+v, want %s 0→1 on a poke, concurrency at 70 per pod", n, k)
	}
	ss, _ := h.a.ServiceStatus(k)
	if ss.Trigger != "poke" || ss.Scale != 1 || ss.ActivatorPending < 1 || !ss.ActivatorInPath {
		t.Fatalf("status after the poke: %+v", ss)
	}
	lines := h.logs.FilterMessage("scale decision").FilterField(zap.String("trigger", "poke")).All()
	if len(lines) != 1 || lines[0].ContextMap()["from"] != int64(0) || lines[0].ContextMap()["scale"] != int64(1) {
		t.Fatalf("poke log lines: %v", lines)
	}
	if _, ok := h.a.ServiceStatus(key("unknown")); ok {
		t.Fatal("a poke for an unknown service added it")
	}
}

func TestRestartWithRunningPodsHolds(t *testing.T) {
	h := newHarness(t)
	k := key("busy")
	h.be.Set(k, plan.Status{Desired: 4, Ready: 4, Route: plan.RouteActivator})
	h.a.Upsert(k, autoscaling.DefaultSpec())
	p := newPods(t, 4)
	p.follow(h, k, 20) // the new history starts in a lull
	for range 20 {
		h.step()
		if h.steps%2 == 0 {
			if ss, _ := h.a.ServiceStatus(k); ss.Scale != 4 {
				t.Fatalf("%ds after a restart with 4 pods at a low load: %+v, want 4 held", h.steps, ss)
			}
		}
	}
}

func TestRemovedServiceIsNoLongerDecided(t *testing.T) {
	h := newHarness(t)
	gone, kept := key("gone"), key("kept")
	for _, k := range []service.Key{gone, kept} {
		h.be.Set(k, plan.Status{Desired: 1, Ready: 1, Route: plan.RoutePods})
		h.a.Upsert(k, autoscaling.DefaultSpec())
	}
	h.step()
	h.step()
	// The first decisions put the activator in both paths (EBC < 0): the
	// executor's work for them is done once both writes are in.
	for range 2 {
		if c := recv(t, h.be.writes, "route write"); c.Op != scalertest.OpSetRoute {
			t.Fatalf("write %v, want a route", c)
		}
	}
	if _, ok := h.gauge("swell_autoscaler_desired_pods", gone); !ok {
		t.Fatal("no desired_pods series before the removal")
	}

	h.a.Remove(gone)
	h.be.ResetCalls()
	h.step()
	h.step()
	for _, c := range h.be.Calls() {
		if c.Service == gone {
			t.Fatalf("backend call %v after the removal", c)
		}
	}
	if _, ok := h.a.ServiceStatus(gone); ok {
		t.Fatal("removed service still in Status")
	}
	if st := h.a.Status(); len(st.Services) != 1 || st.Services[0].Name != "kept" {
		t.Fatalf("Status().Services = %+v", st.Services)
	}
	if _, ok := h.gauge("swell_autoscaler_desired_pods", gone); ok {
		t.Fatal("desired_pods series of the removed service remains")
	}
	if len(h.a.list) != 1 || len(h.a.services) != 1 {
		t.Fatalf("the registry holds %d services (%d by key)", len(h.a.list), len(h.a.services))
	}
	// And it can come back.
	h.a.Upsert(gone, autoscaling.DefaultSpec())
	h.step()
	h.step()
	if ss, ok := h.a.ServiceStatus(gone); !ok || !ss.Decided {
		t.Fatalf("re-added service: %+v %v", ss, ok)
	}
}

func TestStatusOverHTTP(t *testing.T) {
	h := newHarness(t)
	k := key("web")
	h.be.Set(k, plan.Status{Desired: 1, Ready: 1, Route: plan.RoutePods})
	h.a.Upsert(k, autoscaling.DefaultSpec())
	p := newPods(t, 1)
	p.follow(h, k, 35)
	h.step()
	h.step()

	get := func(query string) (*http.Response, []byte) {
		t.Helper()
		resp, err := http.Get(h.url + network.AutoscalerStatusPath + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var buf strings.Builder
		if _, err := io.Copy(&buf, resp.Body); err != nil {
			t.Fatal(err)
		}
		return resp, []byte(buf.String())
	}

	resp, body := get("")
	var st Status
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET status: %s %s", resp.Status, body)
	}
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	if st.TickInterval != "2s" || len(st.Services) != 1 {
		t.Fatalf("status %+v", st)
	}
	s := st.Services[0]
	if s.Namespace != "default" || s.Name != "web" || !s.Decided || s.Scale != 1 || s.Class != string(autoscaling.DefaultSpec().Class) || s.Metric != "concurrency" ||
		s.TargetPerPod != 70 || s.Pods != 1 || math.Abs(s.Stable-35) > 1e-6 || len(s.Decisions) == 0 {
		t.Fatalf("service status %s", body)
	}
	// The JSON names are the documented ones.
	for _, field := range []string{`"ready":`, `"desired":`, `"scale":`, `"stable":`, `"panic":`, `"panicMode":`,
		`"excessBurstCapacity":`, `"activatorPending":`, `"decisions":`, `"reason":`, `"trigger":`} {
		if !strings.Contains(string(body), field) {
			t.Errorf("status JSON lacks %s", field)
		}
	}

	if resp, body := get("?service=default/web"); resp.StatusCode != 200 || !strings.Contains(string(body), `"name": "web"`) {
		t.Fatalf("one service: %s %s", resp.Status, body)
	}
	if resp, _ := get("?service=default/nope"); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown service: %s", resp.Status)
	}
	if resp, _ := get("?service=nope"); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("malformed service: %s", resp.Status)
	}
	resp, err := http.Post(h.url+network.AutoscalerStatusPath, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST status: %s", resp.Status)
	}
}

func TestFiniteKeepsJSONEncodable(t *testing.T) {
	for _, f := range []float64{math.Inf(1), math.Inf(-1), math.NaN(), -1, 0, 3.5} {
		if _, err := json.Marshal(Finite(f)); err != nil {
			t.Errorf("Finite(%v): %v", f, err)
		}
	}
}

func TestServiceStatusLoadIsTheMetrics(t *testing.T) {
	sample := &SampleStatus{Concurrency: 3, RPS: 40}
	for _, tc := range []struct {
		metric string
		sample *SampleStatus
		want   float64
	}{
		{"concurrency", sample, 3},
		{"rps", sample, 40},
		{"cpu", sample, 3},
		{"rps", nil, 0},
	} {
		if got := (ServiceStatus{Metric: tc.metric, LastSample: tc.sample}).Load(); got != tc.want {
			t.Errorf("%s, sample %v: Load %v, want %v", tc.metric, tc.sample, got, tc.want)
		}
	}
}

// TestSetTickIntervalTakesEffectAtOnce: the defaults' tick-interval is
// reloaded while the loop runs; the next tick is one new interval away.
func TestSetTickIntervalTakesEffectAtOnce(t *testing.T) {
	h := newHarness(t)
	k, marker := key("hello"), key("marker")
	h.be.Set(k, plan.Status{Desired: 0, Route: plan.RouteActivator})
	h.be.Set(marker, plan.Status{Desired: 0, Route: plan.RouteActivator})
	statuses := make(chan service.Key, 100)
	h.be.SetHook(func(_ context.Context, c scalertest.Call) error {
		if c.Op == scalertest.OpStatus {
			statuses <- c.Service
		}
		return nil
	})
	h.a.Upsert(k, autoscaling.DefaultSpec())
	h.start()
	if recv(t, statuses, "the service's first status read") != k {
		t.Fatal("unexpected status read")
	}
	if err := h.a.SetTickInterval(50 * time.Millisecond); err == nil {
		t.Fatal("a tick under the minimum was accepted")
	}
	if err := h.a.SetTickInterval(time.Second); err != nil {
		t.Fatal(err)
	}
	// Applied in order: once the marker is added, the new ticker runs.
	h.a.Upsert(marker, autoscaling.DefaultSpec())
	if recv(t, statuses, "the marker's first status read") != marker {
		t.Fatal("unexpected status read")
	}
	if got := h.a.Status().TickInterval; got != "1s" {
		t.Fatalf("Status().TickInterval = %s, want 1s", got)
	}
	// One second later a tick decides for both: at the default 2s, nothing
	// would.
	h.clk.Step(time.Second)
	seen := map[service.Key]bool{}
	for len(seen) < 2 {
		seen[recv(t, statuses, "a tick's status reads")] = true
	}
}

// TestLeastBusyByEachPodsScrapedLoad: the executor's choice of the pods to
// go first at a scale-down is the loop's latest scraped load of each ready
// pod, the idlest first; a pod not scraped yet counts as idle, a pod gone
// is never named.
func TestLeastBusyByEachPodsScrapedLoad(t *testing.T) {
	h := newHarness(t)
	k := key("hello")
	h.be.Set(k, plan.Status{Desired: 3, Ready: 3, Route: plan.RoutePods})
	h.a.Upsert(k, autoscaling.DefaultSpec())
	var addrs []string
	for _, c := range []float64{5, 0, 2} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rep := stats.Report{End: time.Now(), Period: time.Second, Uptime: time.Minute, Concurrency: c, ProxiedConcurrency: c / 2}
			w.Header().Set("Content-Type", stats.ContentType)
			w.Write(rep.AppendBinary(nil))
		}))
		t.Cleanup(srv.Close)
		addrs = append(addrs, strings.TrimPrefix(srv.URL, "http://"))
	}
	h.a.SetPods(k, addrs)
	h.step()

	if got, want := h.a.leastBusy(k, 2), []string{addrs[1], addrs[2]}; !slices.Equal(got, want) {
		t.Fatalf("least busy 2 of loads 5, 0, 2: %q, want %q", got, want)
	}
	if got := h.a.leastBusy(k, 9); !slices.Equal(got, []string{addrs[1], addrs[2], addrs[0]}) {
		t.Fatalf("least busy of all: %q", got)
	}
	// The idle pod goes, a new one comes: it is not scraped yet, and
	// counts as idle; the gone one is never named.
	h.a.SetPods(k, []string{addrs[0], addrs[2], "192.0.2.1:9090"})
	h.a.apply()
	if got, want := h.a.leastBusy(k, 2), []string{"192.0.2.1:9090", addrs[2]}; !slices.Equal(got, want) {
		t.Fatalf("least busy 2 after the pods changed: %q, want %q", got, want)
	}
	if got := h.a.leastBusy(key("unknown"), 1); got != nil {
		t.Fatalf("least busy of an unknown service: %q", got)
	}
}

// loopbackPods is a collector.PodResolver for tests: any connection is
// the pod it claims to be.
type loopbackPods struct{}

func (loopbackPods) PodAddr(_ service.Key, _ netip.AddrPort, claimed string) (string, bool) {
	return claimed, claimed != ""
}

// A step in load that the pods push is decided on at once, out of the
// tick, from their latest frames: kpa enters panic and asks for the pods
// the new load needs, where the windows' one-second samples would take
// seconds to. A rise short of twice the latest round's load, and a
// service with no fresh push, are left to the tick.
func TestSharpPushDecidesAtOnce(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Pods = collector.PodEndpointConfig{Resolver: loopbackPods{}} })
	k := key("web")
	spec := autoscaling.DefaultSpec()
	spec.Class = autoscaling.ClassKPA
	spec.Target, spec.TargetUtilization = 10, 1
	h.be.Set(k, plan.Status{Desired: 2, Ready: 2, Route: plan.RoutePods})
	h.a.Upsert(k, spec)
	pods := []string{"10.0.0.1:9090", "10.0.0.2:9090"}
	h.a.SetPods(k, pods)
	push := func(conc float64, period time.Duration) {
		t.Helper()
		r := stats.Report{End: h.clk.Now(), Period: period, Uptime: time.Minute, Concurrency: conc,
			Requests: uint64(conc * 10 * period.Seconds())}
		for _, p := range pods {
			if _, err := h.a.pushes.Push(k.String(), p, &r); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A minute at 10 a pod: the target, two pods.
	for range 70 {
		push(10, time.Second)
		h.step()
	}
	h.settle(k)
	if ss, _ := h.a.ServiceStatus(k); ss.Scale != 2 || ss.PanicMode || ss.LastSample == nil ||
		ss.LastSample.Read != 2 || ss.LastSample.Pushed != 2 {
		t.Fatalf("steady: %+v (sample %+v), want 2 pods out of panic, both read from their pushes", ss, ss.LastSample)
	}

	for len(h.notables) > 0 {
		<-h.notables
	}

	// The load triples; 100 ms later each pod pushes what it holds.
	h.clk.Step(300 * time.Millisecond)
	push(30, 100*time.Millisecond)
	h.a.onSharp(k)
	h.a.handlePokes()
	n := recv(t, h.notables, "notable decision")
	if n.Trigger != "push" || n.Decision.Scale != 6 || !n.Decision.InPanic {
		t.Fatalf("decision on the sharp push: %s → %d (panic %t), want push → 6 in panic", n.Trigger, n.Decision.Scale, n.Decision.InPanic)
	}
	if ss, _ := h.a.ServiceStatus(k); ss.Trigger != "push" {
		t.Fatalf("status trigger %q, want push", ss.Trigger)
	}

	// A rise short of twice the latest round's load is left to the tick.
	h.step()
	push(30, time.Second)
	h.step()
	h.settle(k)
	before, _ := h.a.ServiceStatus(k)
	h.clk.Step(300 * time.Millisecond)
	push(50, 100*time.Millisecond)
	h.a.onSharp(k)
	h.a.handlePokes()
	if after, _ := h.a.ServiceStatus(k); !after.Time.Equal(before.Time) {
		t.Fatalf("a decision at %v on a rise from 60 to 100", after.Time)
	}

	// Stale pushes: a sharp call with nothing fresh to read decides nothing.
	h.clk.Step(3 * time.Second)
	before, _ = h.a.ServiceStatus(k)
	h.a.onSharp(k)
	h.a.handlePokes()
	if after, _ := h.a.ServiceStatus(k); !after.Time.Equal(before.Time) {
		t.Fatalf("a decision at %v on stale pushes", after.Time)
	}
}

// Frames pushed before the ready pods changed count as the mean of those
// pushed since: a pod that held the load alone, and has shared it since
// with new pods, does not add its old figure to theirs.
func TestRecentAfterThePodsChanged(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Pods = collector.PodEndpointConfig{Resolver: loopbackPods{}} })
	k := key("web")
	h.be.Set(k, plan.Status{Desired: 1, Ready: 1, Route: plan.RoutePods})
	h.a.Upsert(k, autoscaling.DefaultSpec())
	push := func(addr string, conc float64) {
		t.Helper()
		r := stats.Report{End: h.clk.Now(), Period: 100 * time.Millisecond, Uptime: time.Minute, Concurrency: conc}
		if _, err := h.a.pushes.Push(k.String(), addr, &r); err != nil {
			t.Fatal(err)
		}
	}
	h.a.SetPods(k, []string{"a"})
	h.step()
	h.clk.Step(100 * time.Millisecond)
	push("a", 8) // alone
	s := h.a.services[k]
	if c, _, _, ok := h.a.recent(s); !ok || c != 8 {
		t.Fatalf("one pod: recent %v (%t), want 8", c, ok)
	}
	h.clk.Step(100 * time.Millisecond)
	h.a.SetPods(k, []string{"a", "b", "c", "d"})
	h.a.apply()
	h.clk.Step(100 * time.Millisecond)
	for _, p := range []string{"b", "c", "d"} {
		push(p, 2)
	}
	if c, _, in, ok := h.a.recent(s); !ok || c != 8 || in != 8 {
		t.Fatalf("after three pods joined: recent %v, in pods %v (%t); want 8 and 8, a's old 8 counted as the others' 2", c, in, ok)
	}
}
