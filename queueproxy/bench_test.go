package queueproxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// discardWriter is the cheapest ResponseWriter: the benchmark measures
// the chain, not a recorder.
type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }

func benchApp(b *testing.B) *httptest.Server {
	body := []byte("hello from the app\n")
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(body)
	}))
	b.Cleanup(app.Close)
	return app
}

func benchQueueProxy(b *testing.B, app *httptest.Server, cc int) *QueueProxy {
	_, port, _ := net.SplitHostPort(app.Listener.Addr().String())
	cfg := DefaultConfig()
	cfg.UserPort, _ = strconv.Atoi(port)
	cfg.ContainerConcurrency = cc
	qp, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return qp
}

// BenchmarkChain is one proxied request through the whole serving chain
// (probe check, drain and Prometheus accounting, stats, the default 300s
// request timeout, admission when CC > 0, ReverseProxy) to an app on
// loopback. Its allocations include the app server's and the upstream
// client's; BenchmarkDirect is the same app called without the chain.
func BenchmarkChain(b *testing.B) {
	app := benchApp(b)
	for _, tc := range []struct {
		name string
		cc   int
	}{{"cc=0", 0}, {"cc=10", 10}} {
		b.Run(tc.name, func(b *testing.B) {
			h := benchQueueProxy(b, app, tc.cc).Handler()
			req := httptest.NewRequest(http.MethodGet, "http://svc.example.com/", nil)
			req.RemoteAddr = "10.0.0.1:5000"
			w := &discardWriter{h: make(http.Header)}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				w.code = 0
				h.ServeHTTP(w, req)
				if w.code != http.StatusOK {
					b.Fatalf("status %d", w.code)
				}
			}
		})
	}
}

// BenchmarkDirect is the app of BenchmarkChain called by an
// http.Transport alone: the baseline the chain adds to.
func BenchmarkDirect(b *testing.B) {
	app := benchApp(b)
	tr := &http.Transport{MaxIdleConnsPerHost: 100}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodGet, app.URL+"/", nil)
	b.ReportAllocs()
	for b.Loop() {
		res, err := tr.RoundTrip(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
}

// BenchmarkServe is a client request to the queue-proxy's serving port,
// proxied to the app: what a caller of the pod sees, against
// BenchmarkDirect's client calling the app itself.
func BenchmarkServe(b *testing.B) {
	app := benchApp(b)
	for _, cc := range []int{0, 10} {
		b.Run(map[int]string{0: "cc=0", 10: "cc=10"}[cc], func(b *testing.B) {
			qp := benchQueueProxy(b, app, cc)
			var ls [3]net.Listener
			for i := range ls {
				var err error
				if ls[i], err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
					b.Fatal(err)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				qp.Serve(ctx, ls[0], ls[1], ls[2])
				close(done)
			}()
			defer func() {
				cancel()
				<-done
			}()
			tr := &http.Transport{MaxIdleConnsPerHost: 100}
			defer tr.CloseIdleConnections()
			req, _ := http.NewRequest(http.MethodGet, "http://"+ls[0].Addr().String()+"/", nil)
			b.ReportAllocs()
			for b.Loop() {
				res, err := tr.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusOK {
					b.Fatalf("status %d", res.StatusCode)
				}
			}
		})
	}
}
