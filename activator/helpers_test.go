package activator

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/swell-run/swell/pkg/network"
)

// testTimeout bounds every wait in these tests; reaching it is a failure.
const testTimeout = 10 * time.Second

// fakePod imitates a queue-proxy on loopback: it answers probes (ready or
// not), and records the traffic it receives and its peak concurrency.
type fakePod struct {
	name string
	srv  *httptest.Server

	ready    atomic.Bool
	probes   chan struct{} // one value per probe answered, if non-nil
	arrived  chan *http.Request
	gate     chan struct{} // traffic waits for it to close, if non-nil
	handler  http.HandlerFunc
	requests atomic.Int64
	cur, max atomic.Int64
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

type testEnv struct {
	a   *Activator
	src *MemorySource
	reg *prometheus.Registry
	clk *clocktesting.FakeClock
	srv *httptest.Server // the activator on loopback
}

// newEnv starts an activator (fake clock, own registry) following src and
// serving on loopback. mod may adjust the Config and the hooks.
func newEnv(t testing.TB, src *MemorySource, mod func(*Config), hooks func(*Activator)) *testEnv {
	t.Helper()
	e := &testEnv{src: src, reg: prometheus.NewRegistry(), clk: clocktesting.NewFakeClock(time.Unix(1e9, 0))}
	cfg := Config{Source: src, Registerer: e.reg, Clock: e.clk}
	if mod != nil {
		mod(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if hooks != nil {
		hooks(a)
	}
	e.a = a
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	e.srv = httptest.NewServer(a)
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

// waitRoutable waits until service has n routable pods.
func (e *testEnv) waitRoutable(t testing.TB, service string, n int) {
	t.Helper()
	deadline := time.After(testTimeout)
	for {
		tch := *e.a.tableChanged.Load()
		var sch chan struct{}
		if s := e.a.table.Load().byKey[service]; s != nil {
			sch = *s.changed.Load()
			if s.routableCount() == n {
				return
			}
		}
		select {
		case <-tch:
		case <-sch:
		case <-deadline:
			got, _ := e.a.Routable(service)
			t.Fatalf("%s: %d routable pods after %v, want %d", service, got, testTimeout, n)
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
