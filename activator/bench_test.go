package activator

import (
	"io"
	"net/http"
	"net/http/httputil"
	"testing"

	"k8s.io/utils/clock"
)

// discard is a ResponseWriter that keeps nothing, so the benchmark measures
// the activator's chain rather than a recorder.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

// BenchmarkActivatorChain sends requests through routing → throttler → load
// balancing → proxy to a queue-proxy imitation on loopback. The figures
// include the HTTP/1.1 round trip over loopback and the upstream's handler.
func BenchmarkActivatorChain(b *testing.B) {
	for _, cc := range []int{0, 1, 10} {
		b.Run(map[int]string{0: "cc=0", 1: "cc=1", 10: "cc=10"}[cc], func(b *testing.B) {
			pod := benchPod(b)
			src := NewMemorySource(Service{Key: helloKey, ContainerConcurrency: cc, Pods: []Pod{pod.pod()}})
			e := newEnv(b, src, func(c *Config) { c.Clock = clock.RealClock{} }, nil)
			e.waitRoutable(b, helloKey, 1)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				req, _ := http.NewRequest(http.MethodGet, "http://hello.default/", nil)
				w := &discard{h: http.Header{}}
				for pb.Next() {
					clear(w.h)
					e.a.ServeHTTP(w, req)
				}
			})
		})
	}
}

// BenchmarkBareReverseProxy is the baseline for BenchmarkActivatorChain: a
// plain httputil.ReverseProxy to the same upstream, so the difference is
// what routing, throttling and load balancing add.
func BenchmarkBareReverseProxy(b *testing.B) {
	pod := benchPod(b)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = pod.addr()
		},
		Transport: &http.Transport{MaxIdleConnsPerHost: maxIdleConnsPerHost},
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		req, _ := http.NewRequest(http.MethodGet, "http://hello.default/", nil)
		w := &discard{h: http.Header{}}
		for pb.Next() {
			clear(w.h)
			rp.ServeHTTP(w, req)
		}
	})
}

// benchPod is a routable upstream answering "ok", whose arrival
// notifications are drained until the benchmark ends.
func benchPod(b *testing.B) *fakePod {
	pod := newFakePod(b, "p1", true)
	pod.arrived = make(chan *http.Request, 1)
	pod.handler = func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }
	done := make(chan struct{})
	b.Cleanup(func() { close(done) })
	go func() {
		for {
			select {
			case <-pod.arrived:
			case <-done:
				return
			}
		}
	}()
	return pod
}
