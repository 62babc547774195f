package queueproxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	testclock "k8s.io/utils/clock/testing"

	"github.com/swell-run/swell/pkg/breaker"
	"github.com/swell-run/swell/pkg/network"
)

func TestAdmission(t *testing.T) {
	b, err := breaker.New(breaker.Config{Capacity: 1, QueueDepth: 1})
	if err != nil {
		t.Fatal(err)
	}
	fc := testclock.NewFakeClock(time.Unix(0, 0))
	m := newMetrics(fc, func() float64 { return 0 }, func() float64 { return 0 })
	entered := make(chan string, 3)
	release := make(chan struct{})
	srv := httptest.NewServer(&admission{breaker: b, metrics: m, clock: fc, next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- r.URL.Path
		<-release
		w.Write([]byte("done " + r.URL.Path))
	})})
	defer srv.Close()

	get := func(ctx context.Context, path string) chan *http.Response {
		ch := make(chan *http.Response, 1)
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				res = nil
			}
			ch <- res
		}()
		return ch
	}

	first := get(context.Background(), "/first")
	if p := <-entered; p != "/first" {
		t.Fatalf("%s reached the app first", p)
	}
	// The second waits in the queue...
	ctx, cancel := context.WithCancel(context.Background())
	second := get(ctx, "/second")
	waitFor(t, "a queued request", func() bool { return b.Waiting() == 1 })

	// ...so the third finds the queue full and is turned away at once.
	res, err := http.Get(srv.URL + "/third")
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, res)
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get(network.ReasonHeader) != network.ReasonQueueFull ||
		body != network.ReasonQueueFull+"\n" || res.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Errorf("queue full: got %d %v %q", res.StatusCode, res.Header, body)
	}

	// A waiter whose client goes away leaves the queue at once, making
	// room for another.
	cancel()
	if res := <-second; res != nil {
		t.Errorf("cancelled request got a response: %d", res.StatusCode)
	}
	waitFor(t, "the cancelled request to leave the queue", func() bool { return b.Waiting() == 0 })
	fourth := get(context.Background(), "/fourth")
	waitFor(t, "the fourth request to queue", func() bool { return b.Waiting() == 1 })

	// The fourth waits 3s by the clock, then gets the first's slot.
	fc.Step(3 * time.Second)
	close(release)
	for _, ch := range []chan *http.Response{first, fourth} {
		res := <-ch
		if res == nil || res.StatusCode != 200 {
			t.Fatalf("got %v, want 200", res)
		}
		readAll(t, res)
	}
	if p := <-entered; p != "/fourth" {
		t.Errorf("%s reached the app, want /fourth (the cancelled one must not)", p)
	}
	if b.InFlight() != 0 || b.Waiting() != 0 {
		t.Errorf("breaker holds %d, queues %d after all requests ended", b.InFlight(), b.Waiting())
	}
	// Only the fourth waited and was admitted: the first went in at once,
	// the second left, the third was turned away.
	got := scrape(t, m)
	if got["swell_queue_wait_seconds_count"] != "1" || got["swell_queue_wait_seconds_sum"] != "3" {
		t.Errorf("wait histogram: count %s, sum %s; want 1 request that waited 3s",
			got["swell_queue_wait_seconds_count"], got["swell_queue_wait_seconds_sum"])
	}
}
