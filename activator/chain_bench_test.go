package activator

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/utils/clock"

	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/proxy"
)

// The benchmarks in this file measure the activator's own handler chain —
// routing → throttler → load balancing → ReverseProxy plumbing, metrics and
// stats — with no network hop: the proxy's transport is an in-memory
// RoundTripper that answers a canned 200. BenchmarkMemBareReverseProxy runs
// a bare httputil.ReverseProxy over the same transport, so chain − bare is
// what the activator adds per request. The pod is still probed over
// loopback (fakePod) so it becomes routable the way it does in production;
// only the data path is in memory.

// memBody is the canned response body.
const memBody = "ok"

var (
	memContentType   = []string{"text/plain; charset=utf-8"}
	memContentLength = []string{fmt.Sprint(len(memBody))}
)

// memTransport answers every request with a canned 200 and no I/O. It
// checks that each request was sent where the chain should send it, so a
// broken chain fails the benchmark instead of measuring an error path.
type memTransport struct {
	wantHost  string // "" accepts any
	wantProxy bool   // require the activator's Swell-Proxy header
	bad       atomic.Int64
	badReason atomic.Pointer[string]
}

func (t *memTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if err := t.check(r); err != nil {
		t.bad.Add(1)
		msg := err.Error()
		t.badReason.CompareAndSwap(nil, &msg)
		return nil, err
	}
	// A fresh Header per response: ReverseProxy deletes hop-by-hop headers
	// from it, and requests run in parallel.
	return &http.Response{
		Status:        "200 OK",
		StatusCode:    http.StatusOK,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": memContentType, "Content-Length": memContentLength},
		Body:          io.NopCloser(strings.NewReader(memBody)),
		ContentLength: int64(len(memBody)),
		Request:       r,
	}, nil
}

func (t *memTransport) check(r *http.Request) error {
	if t.wantHost != "" && r.URL.Host != t.wantHost {
		return fmt.Errorf("request sent to %q, want the pod %q", r.URL.Host, t.wantHost)
	}
	if t.wantProxy && r.Header.Get(network.ProxyHeader) != network.ProxyActivator {
		return fmt.Errorf("request has %s %q, want %q", network.ProxyHeader, r.Header.Get(network.ProxyHeader), network.ProxyActivator)
	}
	return nil
}

// verify fails b if any request reached the transport malformed.
func (t *memTransport) verify(b *testing.B) {
	b.Helper()
	if n := t.bad.Load(); n > 0 {
		b.Fatalf("%d requests malformed; first: %s", n, *t.badReason.Load())
	}
}

// memWriter is a ResponseWriter that keeps only what the benchmark checks:
// the status and the body length. One per goroutine.
type memWriter struct {
	h      http.Header
	status int
	n      int
}

func (w *memWriter) Header() http.Header { return w.h }

func (w *memWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.n += len(p)
	return len(p), nil
}

func (w *memWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *memWriter) reset() {
	clear(w.h)
	w.status, w.n = 0, 0
}

// runMem sends b.N requests through h, from one goroutine (serial: ns/op is
// the latency of one request) or from GOMAXPROCS goroutines (parallel:
// ns/op is wall time per request with all cores busy, and requests contend
// for the throttler), and fails b if any answer is not the canned 200.
func runMem(b *testing.B, h http.Handler, host string, parallel bool) {
	b.Helper()
	var bad atomic.Int64
	var first atomic.Pointer[string]
	loop := func(next func() bool) {
		req, err := http.NewRequest(http.MethodGet, "http://"+host+"/", nil)
		if err != nil {
			panic(err) // a constant URL: cannot happen
		}
		req.RemoteAddr = "10.0.0.1:40000"
		w := &memWriter{h: http.Header{}}
		for next() {
			w.reset()
			h.ServeHTTP(w, req)
			if w.status != http.StatusOK || w.n != len(memBody) {
				if bad.Add(1) == 1 {
					msg := fmt.Sprintf("status %d, %d body bytes", w.status, w.n)
					first.Store(&msg)
				}
			}
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	if parallel {
		b.RunParallel(func(pb *testing.PB) { loop(pb.Next) })
	} else {
		loop(b.Loop)
	}
	b.StopTimer()
	if n := bad.Load(); n > 0 {
		b.Fatalf("%d of %d requests failed; first: %s", n, b.N, *first.Load())
	}
}

// BenchmarkMemChain is the activator's handler chain with an in-memory
// transport, for containerConcurrency 0 (unbounded), 1 (one pod taking one
// request at a time: with parallel clients most requests queue in the
// throttler) and 10, each serial and parallel.
func BenchmarkMemChain(b *testing.B) {
	for _, cc := range []int{0, 1, 10} {
		for _, mode := range []string{"serial", "parallel"} {
			b.Run(fmt.Sprintf("cc=%d/%s", cc, mode), func(b *testing.B) {
				benchMemChain(b, cc, mode == "parallel")
			})
		}
	}
}

func benchMemChain(b *testing.B, cc int, parallel bool) {
	pod := newFakePod(b, "p1", true)
	rt := &memTransport{wantHost: pod.addr(), wantProxy: true}
	src := NewMemorySource(Service{Key: helloKey, ContainerConcurrency: cc, Pods: []Pod{pod.pod()}})
	e := newEnv(b, src,
		func(c *Config) { c.Clock = clock.RealClock{} },
		// Before Run starts: swap only the data path's transport; probes
		// still go to the fake pod over loopback.
		func(a *Activator) { a.proxy.Transport = rt })
	e.waitRoutable(b, helloKey, 1)
	runMem(b, e.a, "hello.default", parallel)
	rt.verify(b)
	if got := pod.requests.Load(); got != 0 {
		b.Fatalf("%d requests reached the pod over the network, want 0", got)
	}
}

// BenchmarkMemBareReverseProxy is BenchmarkMemChain's baseline: a bare
// httputil.ReverseProxy over the same in-memory transport, with the same
// Rewrite work (target, X-Forwarded-*) and the same copy-buffer pool. The
// difference is the activator's own cost per request.
func BenchmarkMemBareReverseProxy(b *testing.B) {
	for _, mode := range []string{"serial", "parallel"} {
		b.Run(mode, func(b *testing.B) { benchMemBare(b, mode == "parallel") })
	}
}

func benchMemBare(b *testing.B, parallel bool) {
	const target = "10.0.0.2:8012"
	rt := &memTransport{wantHost: target}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = target
			pr.SetXForwarded()
		},
		Transport:  rt,
		BufferPool: &proxy.BufferPool{},
	}
	runMem(b, rp, "hello.default", parallel)
	rt.verify(b)
}

// BenchmarkMemChainCallers is BenchmarkMemChain for containerConcurrency 0
// on Kubernetes, where every request's caller is judged: an admitted
// caller, whose verdict the service has already cached.
func BenchmarkMemChainCallers(b *testing.B) {
	for _, mode := range []string{"serial", "parallel"} {
		b.Run(mode, func(b *testing.B) {
			pod := newFakePod(b, "p1", true)
			rt := &memTransport{wantHost: pod.addr(), wantProxy: true}
			src := NewMemorySource(Service{Key: helloKey, Pods: []Pod{pod.pod()}})
			dir := newFakeDirectory("10.0.0.1", helloKey.Namespace)
			e := newEnv(b, src,
				func(c *Config) { c.Clock, c.Callers = clock.RealClock{}, dir },
				func(a *Activator) { a.proxy.Transport = rt })
			e.waitRoutable(b, helloKey, 1)
			runMem(b, e.a, "hello.default", mode == "parallel")
			rt.verify(b)
		})
	}
}

// BenchmarkAuthorize is the callers stage alone, for a caller it admits, as
// on every request in Kubernetes mode: after the first, from its cached
// verdict.
func BenchmarkAuthorize(b *testing.B) {
	s := newStageEnv(b, 1, 1, nil)
	dir := newFakeDirectory("192.0.2.1", helloKey.Namespace)
	passed := 0
	h := &authorize{callerLookup: callerLookup{dir: dir, clk: s.clk, wait: DefaultCallerWait},
		next: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { passed++ })}
	_, e, r := s.exchange(b, context.Background())
	r.RemoteAddr = "192.0.2.1:1234"
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(e, r)
	}
	if passed != b.N {
		b.Fatalf("%d of %d requests went on", passed, b.N)
	}
}
