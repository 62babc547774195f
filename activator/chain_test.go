package activator

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/swell-run/swell/pkg/network"
)

// TestColdStart: a request for a service with no pod pokes at once, waits,
// and is served once a pod is added and its probe passes.
func TestColdStart(t *testing.T) {
	src := NewMemorySource(Service{Key: helloKey, ContainerConcurrency: 1})
	pokes := make(chan string, 10)
	e := newEnv(t, src, func(c *Config) {
		c.Poke = func(s string) {
			select {
			case pokes <- s:
			default:
			}
		}
	}, nil)
	e.waitRoutable(t, helloKey, 0)

	type result struct {
		code int
		body string
	}
	done := make(chan result, 1)
	go func() {
		res, body := e.get(t, "hello.default", nil)
		done <- result{res.StatusCode, body}
	}()
	if got := recv(t, pokes, "poke"); got != "default/hello" {
		t.Fatalf("poke for %q, want default/hello", got)
	}
	select {
	case r := <-done:
		t.Fatalf("request answered %d %q with no pod", r.code, r.body)
	default:
	}

	pod := newFakePod(t, "p1", true)
	src.Set(Service{Key: helloKey, ContainerConcurrency: 1, Pods: []Pod{pod.pod()}})
	r := recv(t, done, "response")
	if r.code != http.StatusOK || r.body != "p1" {
		t.Fatalf("got %d %q, want 200 p1", r.code, r.body)
	}
	if n := metric(t, e.reg, "swell_activator_cold_start_seconds", nil); n != 1 {
		t.Errorf("cold start observations %v, want 1", n)
	}
	if n := metric(t, e.reg, "swell_activator_requests_total", map[string]string{"service": "default/hello", "status_class": "2xx"}); n != 1 {
		t.Errorf("2xx count %v, want 1", n)
	}
	// A warm service is not poked.
	e.get(t, "hello.default", nil)
	select {
	case s := <-pokes:
		t.Errorf("poke for %s with a routable pod", s)
	default:
	}
}

// TestThrottlerBoundsConcurrency: no pod ever holds more than
// containerConcurrency requests, however many arrive.
func TestThrottlerBoundsConcurrency(t *testing.T) {
	const cc, requests = 2, 30
	gate := make(chan struct{})
	p1, p2 := newFakePod(t, "p1", true), newFakePod(t, "p2", true)
	p1.gate, p2.gate = gate, gate
	src := NewMemorySource(Service{Key: helloKey, ContainerConcurrency: cc, Pods: []Pod{p1.pod(), p2.pod()}})
	e := newEnv(t, src, nil, nil)
	e.waitRoutable(t, helloKey, 2)

	var wg sync.WaitGroup
	codes := make(chan int, requests)
	for i := 0; i < requests; i++ {
		wg.Go(func() {
			res, _ := e.get(t, "hello.default", nil)
			codes <- res.StatusCode
		})
	}
	// 2×cc are admitted, the rest queue.
	for i := 0; i < 2*cc; i++ {
		select {
		case <-p1.arrived:
		case <-p2.arrived:
		case <-time.After(testTimeout):
			t.Fatal("admitted requests did not arrive")
		}
	}
	for i := 0; i < requests-2*cc; i++ {
		e.clk.queued(t, DefaultQueueTimeout)
	}
	close(gate)
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != http.StatusOK {
			t.Errorf("status %d, want 200", c)
		}
	}
	if m1, m2 := p1.max.Load(), p2.max.Load(); m1 > cc || m2 > cc {
		t.Errorf("peak concurrency %d and %d, want at most %d", m1, m2, cc)
	}
	if n := p1.requests.Load() + p2.requests.Load(); n != requests {
		t.Errorf("pods served %d requests, want %d", n, requests)
	}
}

// TestQueueFull: one past the queue depth gets 503 queue-full at once.
func TestQueueFull(t *testing.T) {
	pod := newFakePod(t, "p1", true)
	pod.gate = make(chan struct{})
	src := NewMemorySource(Service{Key: helloKey, ContainerConcurrency: 1, Pods: []Pod{pod.pod()}})
	e := newEnv(t, src, func(c *Config) { c.QueueDepth = 1 }, nil)
	e.waitRoutable(t, helloKey, 1)

	type result struct {
		code   int
		reason string
	}
	results := make(chan result, 3)
	send := func() {
		res, _ := e.get(t, "hello.default", nil)
		results <- result{res.StatusCode, res.Header.Get(network.ReasonHeader)}
	}
	go send()
	recv(t, pod.arrived, "first request")
	go send()
	go send()
	// One of the last two is queued, the other rejected.
	if r := recv(t, results, "rejection"); r.code != http.StatusServiceUnavailable || r.reason != network.ReasonQueueFull {
		t.Fatalf("got %+v, want 503 %s", r, network.ReasonQueueFull)
	}
	close(pod.gate)
	for i := 0; i < 2; i++ {
		if r := recv(t, results, "response"); r.code != http.StatusOK {
			t.Errorf("got %+v, want 200", r)
		}
	}
	if n := metric(t, e.reg, "swell_activator_requests_total", map[string]string{"status_class": "5xx"}); n != 1 {
		t.Errorf("5xx count %v, want 1", n)
	}
}

// TestQueueTimeout: a request queued past QueueTimeout gets 504.
func TestQueueTimeout(t *testing.T) {
	src := NewMemorySource(Service{Key: helloKey})
	e := newEnv(t, src, func(c *Config) { c.QueueTimeout = time.Minute }, nil)
	e.waitRoutable(t, helloKey, 0)
	done := make(chan *http.Response, 1)
	go func() {
		res, _ := e.get(t, "hello.default", nil)
		done <- res
	}()
	e.clk.queued(t, time.Minute)
	e.clk.Step(time.Minute)
	res := recv(t, done, "response")
	if res.StatusCode != http.StatusGatewayTimeout || res.Header.Get(network.ReasonHeader) != network.ReasonRequestTimeout {
		t.Fatalf("got %d %q, want 504 %s", res.StatusCode, res.Header.Get(network.ReasonHeader), network.ReasonRequestTimeout)
	}
}

// TestClientCancelLeavesQueue: a client that goes away leaves the queue,
// counts as 499, and does not hold up those behind it.
func TestClientCancelLeavesQueue(t *testing.T) {
	pod := newFakePod(t, "p1", true)
	pod.gate = make(chan struct{})
	src := NewMemorySource(Service{Key: helloKey, ContainerConcurrency: 1, Pods: []Pod{pod.pod()}})
	e := newEnv(t, src, nil, nil)
	e.waitRoutable(t, helloKey, 1)

	first := make(chan int, 1)
	go func() {
		res, _ := e.get(t, "hello.default", nil)
		first <- res.StatusCode
	}()
	recv(t, pod.arrived, "first request")

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.URL, nil)
	req.Host = "hello.default"
	clientErr := make(chan error, 1)
	go func() {
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			res.Body.Close()
		}
		clientErr <- err
	}()
	e.clk.queued(t, DefaultQueueTimeout)
	cancel()
	if err := recv(t, clientErr, "client error"); !errors.Is(err, context.Canceled) {
		t.Fatalf("client: %v, want context.Canceled", err)
	}
	recv(t, e.finished, "the cancelled request's end")
	if n := metric(t, e.reg, "swell_activator_requests_total", map[string]string{"status_class": "499"}); n != 1 {
		t.Fatalf("cancelled request: 499 count %v, want 1", n)
	}
	if s := e.a.table.Load().byKey[helloKey]; s.br.Waiting() != 0 {
		t.Fatalf("%d still queued after the client left", s.br.Waiting())
	}
	close(pod.gate)
	if code := recv(t, first, "first response"); code != http.StatusOK {
		t.Fatalf("first request: %d", code)
	}
	if n := pod.requests.Load(); n != 1 {
		t.Errorf("pod got %d requests, want 1", n)
	}
}

// TestDialRefusedRetried: a pod that refuses connections is dropped at once
// and the request — with or without an unread body — retried on another.
func TestDialRefusedRetried(t *testing.T) {
	dead := newFakePod(t, "a-dead", true) // first in order: picked first
	live := newFakePod(t, "b-live", true)
	live.handler = func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		io.WriteString(w, "b-live:"+string(b))
	}
	src := NewMemorySource(Service{Key: helloKey, ContainerConcurrency: 1, Pods: []Pod{dead.pod(), live.pod()}})
	e := newEnv(t, src, nil, nil)
	e.waitRoutable(t, helloKey, 2)
	dead.srv.Close()

	req, _ := http.NewRequest(http.MethodPost, e.srv.URL, strings.NewReader("payload"))
	req.Host = "hello.default"
	res, body := do(t, req)
	if res.StatusCode != http.StatusOK || body != "b-live:payload" {
		t.Fatalf("got %d %q, want 200 b-live:payload", res.StatusCode, body)
	}
	if n, _ := e.a.Routable(helloKey); n != 1 {
		t.Errorf("%d routable pods after a refusal, want 1", n)
	}
	res, body = e.get(t, "hello.default", nil)
	if res.StatusCode != http.StatusOK || body != "b-live:" {
		t.Fatalf("got %d %q, want 200 b-live:", res.StatusCode, body)
	}
}

// TestLostConnectionRetriedOnce: a pod that takes a request and closes the
// connection without an answer (a pod killed mid-request) loses it; a GET
// is sent once more to another pod, a POST is not (it may have had an
// effect), and no request is sent a third time.
func TestLostConnectionRetriedOnce(t *testing.T) {
	for _, tc := range []struct {
		name      string
		method    string
		body      string
		liveDies  bool
		want      int
		wantSends [2]int32 // requests that reached the first and second pod
	}{
		{"GET retried elsewhere", http.MethodGet, "", false, http.StatusOK, [2]int32{1, 1}},
		{"POST not retried", http.MethodPost, "payload", false, http.StatusBadGateway, [2]int32{1, 0}},
		{"GET not retried twice", http.MethodGet, "", true, http.StatusBadGateway, [2]int32{1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sends [2]atomic.Int32
			// A pod killed mid-request answers no probe either: the pod
			// dropped is probed again at once, and one that passed would
			// be routable again before the request is retried.
			handler := func(i int, p *fakePod, hangUp bool) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) {
					sends[i].Add(1)
					if !hangUp {
						io.WriteString(w, "b-live")
						return
					}
					p.ready.Store(false)
					if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
						conn.Close()
					}
				}
			}
			dead := newFakePod(t, "a-dead", true) // first in order: picked first
			dead.handler = handler(0, dead, true)
			live := newFakePod(t, "b-live", true)
			live.handler = handler(1, live, tc.liveDies)
			src := NewMemorySource(Service{Key: helloKey, ContainerConcurrency: 1, Pods: []Pod{dead.pod(), live.pod()}})
			e := newEnv(t, src, nil, nil)
			e.waitRoutable(t, helloKey, 2)

			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
			}
			req, _ := http.NewRequest(tc.method, e.srv.URL, body)
			req.Host = "hello.default"
			res, got := do(t, req)
			if res.StatusCode != tc.want {
				t.Fatalf("got %d %q, want %d", res.StatusCode, got, tc.want)
			}
			if got := [2]int32{sends[0].Load(), sends[1].Load()}; got != tc.wantSends {
				t.Errorf("requests reaching the pods %v, want %v", got, tc.wantSends)
			}
		})
	}
}

// TestAbortedResponseReleasesSlots: a response the pod cuts short makes
// ReverseProxy abort the handler (panic(http.ErrAbortHandler)); the slot in
// the throttler, the pod's slot and the counts are given back all the same,
// or the service would stop taking requests once its slots leaked.
func TestAbortedResponseReleasesSlots(t *testing.T) {
	pod := newFakePod(t, "p1", true)
	pod.handler = func(w http.ResponseWriter, r *http.Request) {
		conn, bw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		bw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort")
		bw.Flush()
		conn.Close()
	}
	src := NewMemorySource(Service{Key: helloKey, ContainerConcurrency: 1, Pods: []Pod{pod.pod()}})
	e := newEnv(t, src, nil, nil)
	e.waitRoutable(t, helloKey, 1)

	req, _ := http.NewRequest(http.MethodGet, e.srv.URL, nil)
	req.Host = "hello.default"
	if res, err := http.DefaultClient.Do(req); err == nil {
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	recv(t, e.finished, "the aborted request's end")
	if n := metric(t, e.reg, "swell_activator_requests_total", map[string]string{"status_class": "2xx"}); n != 1 {
		t.Errorf("aborted response: 2xx count %v, want 1 (the 200 it began with)", n)
	}
	s := e.a.table.Load().byKey[helloKey]
	if n := s.br.InFlight(); n != 0 {
		t.Errorf("%d throttler slots held after the request ended, want 0", n)
	}
	if n := (*s.routable.Load())[0].inflight.Load(); n != 0 {
		t.Errorf("%d requests in flight at the pod after the request ended, want 0", n)
	}
	if n := s.tracker.InFlight(); n != 0 {
		t.Errorf("%d requests in flight for the autoscaler after the request ended, want 0", n)
	}
}
