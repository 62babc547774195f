package queueproxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	testclock "k8s.io/utils/clock/testing"

	"github.com/swell-run/swell/pkg/network"
)

// The guard must keep what ReverseProxy needs from the writer.
var (
	_ http.Flusher                              = (*timeoutWriter)(nil)
	_ http.Hijacker                             = (*timeoutWriter)(nil)
	_ interface{ Unwrap() http.ResponseWriter } = (*timeoutWriter)(nil)
	_ interface{ FlushError() error }           = (*timeoutWriter)(nil)
)

func TestTimeoutsDue(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		name      string
		t         timeouts
		elapsed   time.Duration
		started   bool
		lastWrite time.Duration
		reason    string
		wait      time.Duration
	}{
		{name: "request not yet", t: timeouts{Request: 10 * s}, elapsed: 4 * s, wait: 6 * s},
		{name: "request due", t: timeouts{Request: 10 * s}, elapsed: 10 * s, reason: network.ReasonRequestTimeout},
		{name: "start first", t: timeouts{Request: 10 * s, ResponseStart: 2 * s}, elapsed: s, wait: s},
		{name: "start due", t: timeouts{Request: 10 * s, ResponseStart: 2 * s}, elapsed: 2 * s, reason: network.ReasonResponseTimeout},
		{name: "start ignored once started", t: timeouts{Request: 10 * s, ResponseStart: 2 * s}, elapsed: 3 * s, started: true, wait: 7 * s},
		{name: "request beats start", t: timeouts{Request: 2 * s, ResponseStart: 2 * s}, elapsed: 2 * s, reason: network.ReasonRequestTimeout},
		{name: "idle from start", t: timeouts{StreamIdle: 3 * s}, elapsed: 3 * s, reason: network.ReasonIdleTimeout},
		{name: "idle moved by a write", t: timeouts{StreamIdle: 3 * s}, elapsed: 3 * s, started: true, lastWrite: 2 * s, wait: 2 * s},
		{name: "idle after last write", t: timeouts{StreamIdle: 3 * s}, elapsed: 5 * s, started: true, lastWrite: 2 * s, reason: network.ReasonIdleTimeout},
		{name: "idle vs request", t: timeouts{Request: 6 * s, StreamIdle: 3 * s}, elapsed: 4 * s, started: true, lastWrite: 2 * s, wait: s},
	} {
		reason, wait := tc.t.due(tc.elapsed, tc.started, tc.lastWrite)
		if reason != tc.reason || (reason == "" && wait != tc.wait) {
			t.Errorf("%s: due = (%q, %v), want (%q, %v)", tc.name, reason, wait, tc.reason, tc.wait)
		}
	}
}

func newTimeoutServer(t *testing.T, to timeouts, next http.HandlerFunc) (*httptest.Server, *testclock.FakeClock) {
	t.Helper()
	fc := testclock.NewFakeClock(time.Unix(1_700_000_000, 0))
	srv := httptest.NewServer(newTimeoutHandler(next, to, fc))
	t.Cleanup(srv.Close)
	return srv, fc
}

func TestTimeoutBeforeResponse(t *testing.T) {
	for _, tc := range []struct {
		to     timeouts
		step   time.Duration
		reason string
	}{
		{timeouts{Request: 10 * time.Second}, 10 * time.Second, network.ReasonRequestTimeout},
		{timeouts{Request: 10 * time.Second, ResponseStart: time.Second}, time.Second, network.ReasonResponseTimeout},
		{timeouts{StreamIdle: 2 * time.Second}, 2 * time.Second, network.ReasonIdleTimeout},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			entered := make(chan struct{})
			late := make(chan error, 1)
			srv, fc := newTimeoutServer(t, tc.to, func(w http.ResponseWriter, r *http.Request) {
				close(entered)
				<-r.Context().Done()
				if !errors.Is(context.Cause(r.Context()), errTimeout) {
					t.Errorf("cause = %v, want the timeout", context.Cause(r.Context()))
				}
				// Like ReverseProxy, an app response may still arrive: it
				// must be dropped, not raced with the 504.
				w.Header().Set("X-App", "yes")
				w.WriteHeader(http.StatusOK)
				_, err := w.Write([]byte("late"))
				late <- err
			})
			resc := make(chan *http.Response, 1)
			go func() {
				res, err := http.Get(srv.URL)
				if err != nil {
					t.Error(err)
				}
				resc <- res
			}()
			<-entered
			fc.Step(tc.step - time.Millisecond)
			fc.Step(time.Millisecond)
			res := <-resc
			if res == nil {
				return
			}
			body := readAll(t, res)
			if res.StatusCode != http.StatusGatewayTimeout || res.Header.Get(network.ReasonHeader) != tc.reason || body != tc.reason+"\n" {
				t.Errorf("got %d %s=%q body %q, want 504 with %s", res.StatusCode, network.ReasonHeader, res.Header.Get(network.ReasonHeader), body, tc.reason)
			}
			if res.Header.Get("X-App") != "" {
				t.Error("the 504 carries a header the app set after the timeout")
			}
			if err := <-late; !errors.Is(err, http.ErrHandlerTimeout) {
				t.Errorf("late write error = %v, want http.ErrHandlerTimeout", err)
			}
		})
	}
}

func TestTimeoutNotReachedLeavesNoTimer(t *testing.T) {
	srv, fc := newTimeoutServer(t, timeouts{Request: time.Minute}, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok"))
	})
	res, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, res); res.StatusCode != 200 || body != "ok" {
		t.Fatalf("got %d %q", res.StatusCode, body)
	}
	srv.Close() // waits for the handler to return
	if n := fc.Waiters(); n != 0 {
		t.Errorf("%d timers left armed after the request ended", n)
	}
}

func TestStreamIdleTimeoutAbortsStartedStream(t *testing.T) {
	const idle = 2 * time.Second
	write := make(chan string)
	wrote := make(chan struct{})
	clk := newNotifyClock()
	armed := make(chan time.Duration, 16)
	clk.onAfterFunc = func(d time.Duration) { armed <- d }
	h := newTimeoutHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for {
			select {
			case s := <-write:
				w.Write([]byte(s))
				w.(http.Flusher).Flush()
				wrote <- struct{}{}
			case <-r.Context().Done():
				// What ReverseProxy does when its copy fails mid-stream.
				panic(http.ErrAbortHandler)
			}
		}
	}), timeouts{Request: time.Hour, StreamIdle: idle}, clk)
	srv := httptest.NewServer(h)
	defer srv.Close()

	res, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if d := recv(t, armed, "the request's timer"); d != idle {
		t.Fatalf("first timer armed for %v, want the idle timeout %v", d, idle)
	}
	br := bufio.NewReader(res.Body)
	send := func(chunk string) {
		t.Helper()
		write <- chunk
		<-wrote
		buf := make([]byte, len(chunk))
		if _, err := io.ReadFull(br, buf); err != nil || string(buf) != chunk {
			t.Fatalf("read %q, %v; want %q", buf, err, chunk)
		}
	}
	// step moves the clock by d. If the request's timer expires on the way
	// and finds the deadline moved, the handler arms it again for rearm:
	// the step waits for that, so the next step reaches the new timer.
	step := func(d, rearm time.Duration) {
		t.Helper()
		clk.Step(d)
		if rearm == 0 {
			return
		}
		if got := recv(t, armed, "the timer armed again"); got != rearm {
			t.Fatalf("timer armed again for %v, want %v", got, rearm)
		}
	}

	// Writes less than idle apart keep the stream alive well past idle:
	// the timer, armed for 2s, finds the deadline moved each time.
	send("a")                                         // t=0
	step(1500*time.Millisecond, 0)                    // t=1.5
	send("b")                                         // idle until 3.5
	step(500*time.Millisecond, 1500*time.Millisecond) // t=2: re-armed for 3.5
	send("c")                                         // idle until 4
	step(1500*time.Millisecond, 500*time.Millisecond) // t=3.5: re-armed for 4
	send("d")                                         // idle until 5.5
	step(500*time.Millisecond, 1500*time.Millisecond) // t=4: re-armed for 5.5
	step(1499*time.Millisecond, 0)                    // t=5.499: still alive
	send("e")                                         // idle until 7.499
	step(time.Millisecond, 1999*time.Millisecond)     // t=5.5: re-armed for 7.499
	// Then a silence of idle: the stream is cut, not ended cleanly, and
	// no timer is armed again.
	step(idle-time.Millisecond, 0)
	if rest, err := io.ReadAll(br); err == nil {
		t.Fatalf("stream ended cleanly after %q; want it aborted", rest)
	}
	if res.StatusCode != http.StatusOK {
		t.Errorf("status %d, want the app's 200", res.StatusCode)
	}
	srv.Close() // waits for the handler to return
	select {
	case d := <-armed:
		t.Errorf("timer armed again for %v after the stream was cut", d)
	default:
	}
}

func TestHijackedConnectionHasNoTimeout(t *testing.T) {
	hijacked := make(chan struct{})
	stepped := make(chan struct{})
	srv, fc := newTimeoutServer(t, timeouts{Request: time.Second, StreamIdle: time.Second}, func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		close(hijacked)
		<-stepped
		if err := r.Context().Err(); err != nil {
			t.Errorf("context of a hijacked request ended: %v", err)
		}
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: test\r\nConnection: Upgrade\r\n\r\nstill here")
		brw.Flush()
	})
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n"))
	<-hijacked
	fc.Step(time.Hour)
	close(stepped)
	b, _ := io.ReadAll(conn)
	if !strings.HasSuffix(string(b), "still here") {
		t.Errorf("got %q, want the hijacked session to go on", b)
	}
}
