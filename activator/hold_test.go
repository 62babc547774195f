package activator

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/stats"
)

type answer struct {
	code   int
	reason string
	body   string
}

// send sends GET / for host through the activator from client, in the
// background; the answer arrives on the channel.
func (e *testEnv) send(ctx context.Context, client *http.Client, host string) <-chan answer {
	ch := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.URL+"/", nil)
		req.Host = host
		res, err := client.Do(req)
		if err != nil {
			ch <- answer{code: -1, body: err.Error()}
			return
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		ch <- answer{res.StatusCode, res.Header.Get(network.ReasonHeader), string(b)}
	}()
	return ch
}

// TestCallerShareOfQueue: one caller may hold at most half of a service's
// queue. Past that its requests are refused at once, 503 queue-full,
// saying why, while another caller's requests still queue: a caller that
// floods a service at zero cannot lock everyone else out of it.
func TestCallerShareOfQueue(t *testing.T) {
	src := NewMemorySource(Service{Key: helloKey, ContainerConcurrency: 1})
	e := newEnv(t, src, func(c *Config) { c.QueueDepth = 4 }, nil)
	e.waitRoutable(t, helloKey, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	flood, other := clientFrom("127.0.0.1"), clientFrom("127.0.0.2")

	var held []<-chan answer
	for range 2 {
		held = append(held, e.send(ctx, flood, "hello.default"))
		e.clk.queued(t, DefaultQueueTimeout)
	}
	a := recv(t, e.send(ctx, flood, "hello.default"), "the flooding caller's third request")
	if a.code != http.StatusServiceUnavailable || a.reason != network.ReasonQueueFull || !strings.Contains(a.body, "caller") {
		t.Errorf("a caller past half the queue: %d %s=%q %q, want 503 %s saying the caller has its share", a.code, network.ReasonHeader, a.reason, a.body, network.ReasonQueueFull)
	}
	held = append(held, e.send(ctx, other, "hello.default"))
	e.clk.queued(t, DefaultQueueTimeout)
	// The wait's bound is armed just before the request joins the queue.
	e.waitQueued(t, helloKey, 3, "the flooding caller's 2 and the other's 1")

	pod := newFakePod(t, "p1", true)
	src.Set(Service{Key: helloKey, ContainerConcurrency: 1, Pods: []Pod{pod.pod()}})
	for _, ch := range held {
		if a := recv(t, ch, "a held request"); a.code != http.StatusOK {
			t.Errorf("held request: %d %q, want 200", a.code, a.body)
		}
	}
}

// TestHeldAcrossServicesIsBounded: past MaxHeld requests waiting across
// all services, one more is refused at once, 503 queue-full, with a body
// naming the limit, whatever its service's own queue holds; once one
// leaves, the next may wait again.
func TestHeldAcrossServicesIsBounded(t *testing.T) {
	a, b := mustKey("default/a"), mustKey("default/b")
	src := NewMemorySource(Service{Key: a, ContainerConcurrency: 1}, Service{Key: b, ContainerConcurrency: 1})
	e := newEnv(t, src, func(c *Config) { c.MaxHeld = 3 }, nil)
	e.waitRoutable(t, a, 0)
	e.waitRoutable(t, b, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Callers of their own, so that no caller's share is what refuses.
	first, cancelFirst := context.WithCancel(ctx)
	e.send(first, clientFrom("127.0.0.1"), "a.default")
	e.clk.queued(t, DefaultQueueTimeout)
	e.send(ctx, clientFrom("127.0.0.2"), "a.default")
	e.clk.queued(t, DefaultQueueTimeout)
	e.send(ctx, clientFrom("127.0.0.3"), "b.default")
	e.clk.queued(t, DefaultQueueTimeout)

	got := recv(t, e.send(ctx, clientFrom("127.0.0.4"), "b.default"), "the request past the limit")
	if got.code != http.StatusServiceUnavailable || got.reason != network.ReasonQueueFull || !strings.Contains(got.body, "3 requests") {
		t.Errorf("past MaxHeld: %d %s=%q %q, want 503 %s naming the limit of 3 requests", got.code, network.ReasonHeader, got.reason, got.body, network.ReasonQueueFull)
	}
	if n := e.a.Held(); n != 3 {
		t.Errorf("Held() = %d, want 3", n)
	}
	cancelFirst()
	for e.a.Held() != 2 {
		recv(t, e.finished, "the first request leaving")
	}
	e.send(ctx, clientFrom("127.0.0.4"), "b.default")
	e.clk.queued(t, DefaultQueueTimeout)
	e.waitQueued(t, b, 2, "service b's 2 once there was room")
}

// heldThenGone holds a request for a service with no pod, then removes
// the service from the source and waits until its grace is armed.
func heldThenGone(t *testing.T) (*testEnv, *MemorySource, <-chan answer) {
	t.Helper()
	src := NewMemorySource(Service{Key: helloKey, ContainerConcurrency: 1})
	e := newEnv(t, src, nil, nil)
	e.waitRoutable(t, helloKey, 0)
	held := e.send(context.Background(), http.DefaultClient, "hello.default")
	e.clk.queued(t, DefaultQueueTimeout)
	src.Remove(helloKey)
	for recv(t, e.clk.afterFuncs, "the grace timer") != DefaultGoneGrace {
	}
	return e, src, held
}

// TestServiceBackWithinGrace: a service that leaves the source while it
// holds a request (an informer relisting, a pods-Service recreated) keeps
// the request, and keeps reporting it, and serves it once it is back; it
// is not stranded until its 5-minute bound.
func TestServiceBackWithinGrace(t *testing.T) {
	e, src, held := heldThenGone(t)
	var inFlight uint64
	e.a.Report(e.clk.Now(), func(key string, f stats.ActivatorFigures) {
		if key == helloKey.String() {
			inFlight = f.InFlight
		}
	})
	if inFlight != 1 {
		t.Errorf("reported in flight %d while the service is away, want its held request", inFlight)
	}

	pod := newFakePod(t, "p1", true)
	src.Set(Service{Key: helloKey, ContainerConcurrency: 1, Pods: []Pod{pod.pod()}})
	if a := recv(t, held, "the held request"); a.code != http.StatusOK {
		t.Errorf("held request: %d %s=%q, want 200 once the service is back", a.code, network.ReasonHeader, a.reason)
	}
	// The held request is served from the service's own entry, which
	// the sync updates before it publishes the routing table: a new
	// request needs the host routed again first.
	e.waitRoutable(t, helloKey, 1)
	// The grace that ran out meanwhile closes nothing.
	e.clk.Step(DefaultGoneGrace)
	if res, body := e.get(t, "hello.default", nil); res.StatusCode != http.StatusOK || body != "p1" {
		t.Errorf("after the old grace: %d %q, want the pod", res.StatusCode, body)
	}
}

// TestServiceGoneAnswersAtOnce: a service that does not come back within
// the grace answers what it holds 503 service-gone at once, rather than
// 504 at the end of the queue bound.
func TestServiceGoneAnswersAtOnce(t *testing.T) {
	e, _, held := heldThenGone(t)
	e.clk.Step(DefaultGoneGrace)
	a := recv(t, held, "the held request")
	if a.code != http.StatusServiceUnavailable || a.reason != network.ReasonServiceGone {
		t.Errorf("held request of a gone service: %d %s=%q, want 503 %s", a.code, network.ReasonHeader, a.reason, network.ReasonServiceGone)
	}
	if res, _ := e.get(t, "hello.default", nil); res.StatusCode != http.StatusNotFound {
		t.Errorf("a new request for the gone service: %d, want 404", res.StatusCode)
	}
}
