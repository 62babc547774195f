package activator

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/swell-run/swell/pkg/breaker"
	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/service"
)

// testTimeout bounds every wait in these tests; reaching it is a failure.
const testTimeout = 10 * time.Second

// helloKey is the service most tests route to.
var helloKey = service.Key{Namespace: "default", Name: "hello"}

// mustKey is the key a test writes as text.
func mustKey(s string) service.Key {
	k, err := service.Parse(s)
	if err != nil {
		panic(err)
	}
	return k
}

// fakePod imitates a queue-proxy on loopback: it answers probes (ready or
// not), and records the traffic it receives and its peak concurrency.
type fakePod struct {
	name string
	srv  *httptest.Server

	ready  atomic.Bool
	probes chan struct{} // one value per probe answered, if non-nil
	// probeHold, if non-nil, gets a value as each probe arrives, which
	// then waits for the probe to end on the prober's side.
	probeHold chan struct{}
	arrived   chan *http.Request
	gate      chan struct{} // traffic waits for it to close, if non-nil
	handler   http.HandlerFunc
	requests  atomic.Int64
	cur, max  atomic.Int64
}

func newFakePod(t testing.TB, name string, ready bool) *fakePod {
	t.Helper()
	p := &fakePod{name: name, arrived: make(chan *http.Request, 1000)}
	p.ready.Store(ready)
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *fakePod) addr() string { return strings.TrimPrefix(p.srv.URL, "http://") }
func (p *fakePod) pod() Pod     { return Pod{Name: p.name, Addr: p.addr()} }

func (p *fakePod) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(network.ProbeHeader) == network.ProbeQueue {
		if p.probeHold != nil {
			p.probeHold <- struct{}{}
			<-r.Context().Done()
			return
		}
		w.Header().Set(network.ProbeHeader, network.ProbeQueue)
		if !p.ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		if p.probes != nil {
			p.probes <- struct{}{}
		}
		return
	}
	p.requests.Add(1)
	n := p.cur.Add(1)
	defer p.cur.Add(-1)
	for m := p.max.Load(); n > m && !p.max.CompareAndSwap(m, n); m = p.max.Load() {
	}
	p.arrived <- r
	if p.gate != nil {
		select {
		case <-p.gate:
		case <-r.Context().Done():
			return
		}
	}
	if p.handler != nil {
		p.handler(w, r)
		return
	}
	io.WriteString(w, p.name)
}

// notifyClock is the fake clock, telling a test what the activator arms on
// it, by duration: each timer (NewTimer: a prober's wait before it probes
// a pod again) and each AfterFunc (a request's queue bound, armed as the
// request first waits — in the throttler, or for a pod after an admission
// that found none — and the retry's pickRetry). The channels hold many
// announcements; once one is full, further ones are dropped, so that a
// test that reads none is not held up.
type notifyClock struct {
	*clocktesting.FakeClock
	timers, afterFuncs chan time.Duration
}

func newNotifyClock() *notifyClock {
	return &notifyClock{
		FakeClock:  clocktesting.NewFakeClock(time.Unix(1e9, 0)),
		timers:     make(chan time.Duration, 1000),
		afterFuncs: make(chan time.Duration, 1000),
	}
}

func announce(ch chan<- time.Duration, d time.Duration) {
	select {
	case ch <- d:
	default:
	}
}

func (c *notifyClock) NewTimer(d time.Duration) clock.Timer {
	t := c.FakeClock.NewTimer(d)
	announce(c.timers, d)
	return t
}

func (c *notifyClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	t := c.FakeClock.AfterFunc(d, f)
	announce(c.afterFuncs, d)
	return t
}

// queued waits until a request starts to wait for a pod, which shows as
// the request arms its queue bound (of duration bound) the first time it
// waits; other AfterFuncs (pickRetry) are passed over. The bound is then
// armed: a step of the clock by bound reaches it.
func (c *notifyClock) queued(t *testing.T, bound time.Duration) {
	t.Helper()
	for recv(t, c.afterFuncs, "a queued request") != bound {
	}
}

type testEnv struct {
	a   *Activator
	src *MemorySource
	reg *prometheus.Registry
	clk *notifyClock
	srv *httptest.Server // the activator on loopback
	// finished gets a value each time the activator's handler has returned
	// a request of srv's, its accounting done (buffered; dropped when
	// full).
	finished chan struct{}
}

// newEnv starts an activator (fake clock, own registry) following src and
// serving on loopback. mod may adjust the Config; before may adjust the
// Activator before Run starts.
func newEnv(t testing.TB, src *MemorySource, mod func(*Config), before func(*Activator)) *testEnv {
	t.Helper()
	e := &testEnv{src: src, reg: prometheus.NewRegistry(), clk: newNotifyClock(), finished: make(chan struct{}, 1000)}
	cfg := Config{Source: src, Registerer: e.reg, Clock: e.clk}
	if mod != nil {
		mod(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if before != nil {
		before(a)
	}
	e.a = a
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	// The Source's services are routed before the test sends anything:
	// probing starts as a service is applied, before the table naming it
	// is published, so a probe seen does not mean the host is known.
	select {
	case <-a.Synced():
	case <-time.After(testTimeout):
		t.Fatalf("no first sync after %v", testTimeout)
	}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			select {
			case e.finished <- struct{}{}:
			default:
			}
		}()
		if c := r.Header.Get(testCallerHeader); c != "" {
			r.RemoteAddr = c
			r.Header.Del(testCallerHeader)
		}
		a.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		// Closing the connections cancels requests still queued, which
		// Close would otherwise wait for.
		e.srv.CloseClientConnections()
		e.srv.Close()
		cancel()
		<-done
	})
	return e
}

// testCallerHeader, on a request to a testEnv's server, is the address
// the request comes from (clientFrom): the server sets RemoteAddr to it
// before the activator sees the request, so that a test can be several
// callers on any system (not all route the whole of 127.0.0.0/8).
const testCallerHeader = "Test-Caller"

// clientFrom returns a client whose requests to a testEnv's server come
// from the address ip.
func clientFrom(ip string) *http.Client {
	return &http.Client{Transport: callerTransport{ip: net.JoinHostPort(ip, "40000"), rt: http.DefaultTransport}}
}

type callerTransport struct {
	ip string
	rt http.RoundTripper
}

func (c callerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(testCallerHeader, c.ip)
	return c.rt.RoundTrip(r)
}

// waitQueued waits until n requests wait in key's queue: a request joins
// it a moment after the clock sees its wait's bound armed.
func (e *testEnv) waitQueued(t testing.TB, key service.Key, n int, what string) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for got, _ := e.a.Queued(key); got != n; got, _ = e.a.Queued(key) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d requests queued, want %d (%s)", key, got, n, what)
		}
		runtime.Gosched()
	}
}

// waitWaiting is waitQueued for a breaker a test holds.
func waitWaiting(t testing.TB, br *breaker.Breaker, n int, what string) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for got := br.Waiting(); got != n; got = br.Waiting() {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests queued, want %d (%s)", got, n, what)
		}
		runtime.Gosched()
	}
}

// waitRoutable waits until the service has n routable pods.
func (e *testEnv) waitRoutable(t testing.TB, key service.Key, n int) {
	t.Helper()
	deadline := time.After(testTimeout)
	for {
		tch := *e.a.tableChanged.Load()
		var sch chan struct{}
		if s := e.a.table.Load().byKey[key]; s != nil {
			sch = *s.changed.Load()
			if s.routableCount() == n {
				return
			}
		}
		select {
		case <-tch:
		case <-sch:
		case <-deadline:
			got, _ := e.a.Routable(key)
			t.Fatalf("%s: %d routable pods after %v, want %d", key, got, testTimeout, n)
		}
	}
}

// get sends a request through the activator with the given Host.
func (e *testEnv) get(t *testing.T, host string, hdr http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.srv.URL+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for k, v := range hdr {
		req.Header[k] = v
	}
	return do(t, req)
}

func do(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.Host, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(b)
}

// metric returns the value of the series of name with the given labels
// (a counter, a gauge, or a histogram's sample count).
func metric(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.Metric {
			for _, lp := range m.Label {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			return value(m)
		}
	}
	return 0
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}

// recv receives from ch or fails the test after testTimeout.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(testTimeout):
		t.Fatalf("no %s after %v", what, testTimeout)
		panic("unreachable")
	}
}

// stageEnv is one service of an activator that is not running, for
// testing a stage alone: no pod is probed or reached, and the stage under
// test is served as the router would serve it, with the request's
// exchange.
type stageEnv struct {
	a   *Activator
	t   *target
	clk *notifyClock
	reg *prometheus.Registry
}

// newStageEnv returns helloKey's service with containerConcurrency cc and
// n routable pods, p0, p1, … in name order. mod may adjust the Config.
func newStageEnv(t testing.TB, cc, n int, mod func(*Config)) *stageEnv {
	t.Helper()
	s := &stageEnv{clk: newNotifyClock(), reg: prometheus.NewRegistry()}
	cfg := Config{Source: NewMemorySource(), Registerer: s.reg, Clock: s.clk}
	if mod != nil {
		mod(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// A pod dropped by a stage is probed again; no pod here is real, so
	// those probes end at once.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	a.base.Store(&ctx)
	t.Cleanup(a.probers.Wait)
	s.a, s.t = a, a.newTarget(helloKey)
	s.t.cc.Store(int64(cc))
	s.t.mu.Lock()
	for i := range n {
		p := &pod{name: fmt.Sprintf("p%d", i), addr: fmt.Sprintf("127.0.0.1:%d", 1+i), routable: true}
		s.t.pods[p.name] = p
	}
	s.t.publishLocked()
	s.t.mu.Unlock()
	return s
}

// exchange returns a recorder and the exchange of a GET for the service,
// with the request to pass to a stage.
func (s *stageEnv) exchange(t testing.TB, ctx context.Context) (*httptest.ResponseRecorder, *exchange, *http.Request) {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequestWithContext(ctx, http.MethodGet, "http://hello.default/", nil)
	e, out := newExchange(rec, req, s.t)
	t.Cleanup(e.finish)
	return rec, e, out
}

// serve sends a GET for the service through h and returns the answer and
// the request's exchange.
func (s *stageEnv) serve(t *testing.T, h http.Handler) (*httptest.ResponseRecorder, *exchange) {
	t.Helper()
	rec, e, r := s.exchange(t, context.Background())
	h.ServeHTTP(e, r)
	return rec, e
}

// routablePods returns the service's routable pods, in name order.
func (s *stageEnv) routablePods() []*pod { return *s.t.routable.Load() }
