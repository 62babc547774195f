package activator

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/swell-run/swell/pkg/service"
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

// BenchmarkServiceRemoval removes a service from an activator routing 100
// or 10,000 others, as sync does when one leaves the Source (target.close,
// under the activator's lock): it should cost the same at both sizes. The
// services removed are added a few at a time with the timer stopped, so
// that there are never many more than the size. The larger size reports
// its time per removal as a multiple of the smaller's in the same run
// (x-services=100).
func BenchmarkServiceRemoval(b *testing.B) {
	const batch = 10
	key := func(i int) service.Key { return service.Key{Namespace: "bench", Name: fmt.Sprintf("svc-%05d", i)} }
	var small float64
	for _, n := range []int{100, 10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			a, err := New(Config{Source: NewMemorySource(), Registerer: prometheus.NewRegistry()})
			if err != nil {
				b.Fatal(err)
			}
			svcs := make([]Service, n)
			for i := range svcs {
				svcs[i] = Service{Key: key(i)}
			}
			a.sync(svcs)
			var added []*target
			b.ReportAllocs()
			for b.Loop() {
				if len(added) == 0 {
					b.StopTimer()
					for i := range batch {
						added = append(added, a.newTarget(key(n+i)))
					}
					b.StartTimer()
				}
				added[len(added)-1].close()
				added = added[:len(added)-1]
			}
			perRemoval := float64(b.Elapsed()) / float64(b.N)
			if n == 100 {
				small = perRemoval
			} else if small > 0 {
				b.ReportMetric(perRemoval/small, "x-services=100")
			}
		})
	}
}
