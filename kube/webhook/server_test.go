package webhook

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/swell-run/swell/pkg/network"
)

// guard bounds every wait; the tests wait on channels, never on time.
const guard = 10 * time.Second

// timerClock is a fake clock that says when the code under test makes a
// timer, so a test steps the clock only once the timer exists.
type timerClock struct {
	*testingclock.FakeClock
	made chan struct{}
}

func (c *timerClock) NewTimer(d time.Duration) clock.Timer {
	t := c.FakeClock.NewTimer(d)
	c.made <- struct{}{}
	return t
}

// TestLimitHoldsThenRefuses: with every slot taken, a review waits for one
// and is served when one frees; one that waits the whole bound gets 503
// busy. Health checks are never held.
func TestLimitHoldsThenRefuses(t *testing.T) {
	fc := testingclock.NewFakeClock(time.Unix(1e9, 0))
	clk := &timerClock{FakeClock: fc, made: make(chan struct{}, 10)}
	release := make(chan struct{})
	entered := make(chan struct{}, 10)
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			entered <- struct{}{}
			<-release
		}
		io.WriteString(w, "ok")
	})
	h := limit(inner, 2, 5*time.Second, clk)
	srv := httptest.NewServer(h)
	defer srv.Close()

	type result struct {
		code   int
		reason string
	}
	post := func() <-chan result {
		c := make(chan result, 1)
		go func() {
			res, err := http.Post(srv.URL+"/validate", "application/json", strings.NewReader("{}"))
			if err != nil {
				c <- result{code: -1, reason: err.Error()}
				return
			}
			res.Body.Close()
			c <- result{res.StatusCode, res.Header.Get(network.ReasonHeader)}
		}()
		return c
	}
	wait := func(c <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-c:
		case <-time.After(guard):
			t.Fatalf("no %s", what)
		}
	}
	first, second := post(), post()
	wait(entered, "first review in")
	wait(entered, "second review in")

	// A third waits for a slot; a health check is not held.
	third := post()
	wait(clk.made, "third review waiting")
	res, err := http.Get(srv.URL + "/healthz")
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("health check while full: %v %v", res, err)
	}
	res.Body.Close()

	// A slot frees: the third gets it.
	release <- struct{}{}
	wait(entered, "third review in once a slot freed")

	// A fourth waits out the whole bound: 503 busy.
	fourth := post()
	wait(clk.made, "fourth review waiting")
	fc.Step(5 * time.Second)
	select {
	case r := <-fourth:
		if r.code != http.StatusServiceUnavailable || r.reason != network.ReasonBusy {
			t.Fatalf("fourth review: %+v, want 503 %s", r, network.ReasonBusy)
		}
	case <-time.After(guard):
		t.Fatal("the fourth review was never answered")
	}
	close(release)
	for _, c := range []<-chan result{first, second, third} {
		if r := <-c; r.code != http.StatusOK {
			t.Fatalf("a held review: %+v, want 200", r)
		}
	}
}

// TestServerIsBounded: the webhooks' server carries every bound; a
// server without them lets one caller hold a goroutine and 3 MiB each for
// as long as it likes.
func TestServerIsBounded(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srv, limited := Server(http.NotFoundHandler(), ln, nil)
	if limited == ln {
		t.Error("the listener is not limited")
	}
	for name, ok := range map[string]bool{
		"ReadHeaderTimeout": srv.ReadHeaderTimeout > 0 && srv.ReadHeaderTimeout <= ReadHeaderTimeout,
		"ReadTimeout":       srv.ReadTimeout > 0,
		"WriteTimeout":      srv.WriteTimeout > 0,
		"IdleTimeout":       srv.IdleTimeout > 0,
		"MaxHeaderBytes":    srv.MaxHeaderBytes > 0 && srv.MaxHeaderBytes < 1<<20,
		"HTTP2 streams":     srv.HTTP2 != nil && srv.HTTP2.MaxConcurrentStreams > 0 && srv.HTTP2.MaxConcurrentStreams <= MaxStreams,
		"TLS 1.2+":          srv.TLSConfig != nil && srv.TLSConfig.MinVersion >= tls.VersionTLS12,
	} {
		if !ok {
			t.Errorf("%s is not bounded", name)
		}
	}
}

// BenchmarkFlood measures what a flood of slow, maximum-size reviews does
// to the replica's memory: clients connections each sending a 3 MiB review
// in slices, against the bounded server and against one without the
// in-flight limit. peak-heap-MiB is the largest heap seen during a flood.
//
//	go test -run '^$' -bench Flood -benchtime 1x ./kube/webhook
func BenchmarkFlood(b *testing.B) {
	const clients = 64
	body := bytes.Repeat([]byte(" "), DefaultMaxBody-64)
	for _, bounded := range []bool{true, false} {
		b.Run(fmt.Sprintf("bounded=%t", bounded), func(b *testing.B) {
			h, err := New(Config{Inject: testInject})
			if err != nil {
				b.Fatal(err)
			}
			var served http.Handler = h
			if bounded {
				served = limit(h, MaxInFlight, QueueWait, clock.RealClock{})
			}
			srv := httptest.NewServer(served)
			defer srv.Close()
			peak := atomic.Uint64{}
			for b.Loop() {
				runtime.GC()
				stop := make(chan struct{})
				var sampler sync.WaitGroup
				sampler.Go(func() {
					var ms runtime.MemStats
					for {
						runtime.ReadMemStats(&ms)
						if ms.HeapInuse > peak.Load() {
							peak.Store(ms.HeapInuse)
						}
						select {
						case <-stop:
							return
						case <-time.After(20 * time.Millisecond):
						}
					}
				})
				var wg sync.WaitGroup
				for range clients {
					wg.Go(func() {
						pr, pw := io.Pipe()
						go func() {
							// The review arrives in 256 KiB slices, 20 ms
							// apart: a slow sender.
							for off := 0; off < len(body); off += 256 << 10 {
								end := min(off+256<<10, len(body))
								if _, err := pw.Write(body[off:end]); err != nil {
									return
								}
								time.Sleep(20 * time.Millisecond)
							}
							pw.Close()
						}()
						req, _ := http.NewRequest(http.MethodPost, srv.URL+"/validate", pr)
						req.Header.Set("Content-Type", "application/json")
						req.ContentLength = int64(len(body))
						if res, err := http.DefaultClient.Do(req); err == nil {
							io.Copy(io.Discard, res.Body)
							res.Body.Close()
						}
					})
				}
				wg.Wait()
				close(stop)
				sampler.Wait()
			}
			b.ReportMetric(float64(peak.Load())/(1<<20), "peak-heap-MiB")
		})
	}
}
