package queueproxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
)

var errDown = errors.New("app down")

// scriptedProber returns a prober whose checks return the results sent on
// the returned channel, in order.
func scriptedProber(t *testing.T, threshold int) (*prober, chan error, *notifyClock) {
	fc := newNotifyClock()
	results := make(chan error)
	p := &prober{
		check: func(ctx context.Context) error {
			select {
			case err := <-results:
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		},
		clock: fc, period: time.Second, timeout: time.Minute, threshold: threshold, log: zap.NewNop(),
	}
	return p, results, fc
}

func TestProberTransitions(t *testing.T) {
	p, _, _ := scriptedProber(t, 3)
	for i, step := range []struct {
		err   error
		ready bool
		wait  time.Duration
	}{
		{errDown, false, fastProbePeriod}, // not ready yet: probe fast
		{errDown, false, fastProbePeriod},
		{nil, true, time.Second}, // ready: relax
		{nil, true, time.Second},
		{errDown, true, fastProbePeriod}, // one failure: still ready, but look again soon
		{errDown, true, fastProbePeriod},
		{nil, true, time.Second}, // recovered before the threshold
		{errDown, true, fastProbePeriod},
		{errDown, true, fastProbePeriod},
		{errDown, false, fastProbePeriod}, // third in a row: not ready
		{errDown, false, fastProbePeriod},
		{nil, true, time.Second}, // one success is enough to be ready again
	} {
		p.observe(step.err)
		if p.Ready() != step.ready || p.nextWait() != step.wait {
			t.Errorf("step %d (%v): ready=%v wait=%v, want %v %v", i, step.err, p.Ready(), p.nextWait(), step.ready, step.wait)
		}
	}
}

func TestProberLoop(t *testing.T) {
	p, results, clk := scriptedProber(t, 1)
	// The loop arms a timer for the next probe once it has recorded one.
	armed := make(chan time.Duration, 16)
	clk.onTimer = func(d time.Duration) { armed <- d }
	go p.run(t.Context())
	probed := func(err error, wait time.Duration) {
		t.Helper()
		results <- err
		if d := recv(t, armed, "the timer for the next probe"); d != wait {
			t.Fatalf("after a probe (%v): next in %v, want %v", err, d, wait)
		}
	}

	probed(errDown, fastProbePeriod) // the app is not listening yet
	clk.Step(fastProbePeriod - time.Millisecond)
	select {
	case results <- nil:
		t.Fatal("probed before the fast period passed")
	default:
	}
	clk.Step(time.Millisecond)
	probed(nil, time.Second) // now it is
	if !p.Ready() {
		t.Fatal("not ready after a successful probe")
	}
	// Relaxed: nothing until the period passes.
	clk.Step(time.Second - fastProbePeriod)
	select {
	case results <- nil:
		t.Fatal("probed at the fast pace once ready")
	default:
	}
	clk.Step(fastProbePeriod)
	probed(errDown, fastProbePeriod) // threshold 1: one failure is enough
	if p.Ready() {
		t.Fatal("still ready after a failure at threshold 1")
	}
	clk.Step(fastProbePeriod) // and back to the fast pace
	probed(nil, time.Second)
	if !p.Ready() {
		t.Fatal("not ready again")
	}
}

func TestProbeNowJoinsARunningProbe(t *testing.T) {
	p, _, _ := scriptedProber(t, 1)
	var calls atomic.Int32
	release := make(chan struct{})
	started := make(chan struct{})
	p.check = func(context.Context) error {
		if calls.Add(1) == 1 {
			close(started)
		}
		<-release
		return nil
	}
	done := make(chan bool, 2)
	go func() { done <- p.ProbeNow(context.Background()) }()
	<-started
	go func() { done <- p.ProbeNow(context.Background()) }()
	// The second caller gives up on its own context, never on a new probe.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if p.ProbeNow(ctx) {
		t.Error("a caller whose context ended got ready before any probe succeeded")
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d probes running, want the callers to share one", n)
	}
	close(release)
	if first, second := <-done, <-done; !first || !second {
		t.Error("ProbeNow = false after a successful probe")
	}
	if n := calls.Load(); n > 2 {
		t.Errorf("%d probes for concurrent callers", n)
	}
}

func TestTCPCheck(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := tcpCheck(addr)(t.Context()); err != nil {
		t.Errorf("listening port: %v", err)
	}
	l.Close()
	if err := tcpCheck(addr)(t.Context()); err == nil {
		t.Error("closed port probed as up")
	}
}

func TestHTTPCheck(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("User-Agent") != probeUserAgent {
			t.Errorf("User-Agent = %q", r.Header.Get("User-Agent"))
		}
		code, _ := strconv.Atoi(r.URL.Query().Get("code"))
		if code == http.StatusFound {
			http.Redirect(w, r, "/elsewhere?code=500", code)
			return
		}
		w.WriteHeader(code)
	}))
	defer srv.Close()
	for code, ok := range map[int]bool{200: true, 204: true, 302: true, 404: false, 500: false, 503: false} {
		err := httpCheck(srv.URL + "/healthz?code=" + strconv.Itoa(code))(t.Context())
		if (err == nil) != ok {
			t.Errorf("status %d: err = %v, want ok=%v", code, err, ok)
		}
	}
}
