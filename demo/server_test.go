package demo

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestHello(t *testing.T) {
	_, base := startApp(t, options{Replica: "r1"})
	for _, h2c := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2c=%v", h2c), func(t *testing.T) {
			resp, body := do(t, newClient(t, h2c), http.MethodGet, base+"/", nil)
			if want := 1 + btoi(h2c); resp.ProtoMajor != want {
				t.Errorf("protocol %s, want HTTP/%d", resp.Proto, want)
			}
			if resp.StatusCode != http.StatusOK || body != "Hello from Swell! (replica r1)\n" {
				t.Errorf("got %d %q", resp.StatusCode, body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
				t.Errorf("Content-Type %q", ct)
			}
			if resp.ContentLength != int64(len(body)) {
				t.Errorf("Content-Length %d, body %d bytes", resp.ContentLength, len(body))
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestHelloWithoutReplica(t *testing.T) {
	rec := httptest.NewRecorder()
	newServer(options{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/any/path", nil))
	if got := rec.Body.String(); rec.Code != http.StatusOK || got != "Hello from Swell!\n" {
		t.Errorf("got %d %q", rec.Code, got)
	}
}

func TestKnobs(t *testing.T) {
	_, base := startApp(t, options{Replica: "k"})
	const hello = "Hello from Swell! (replica k)\n"
	for _, tc := range []struct {
		query      string
		status     int
		body       string
		minElapsed time.Duration
	}{
		{query: "/?status=503", status: 503, body: hello},
		{query: "/deep/path?status=202", status: 202, body: hello},
		{query: "/?size=0", status: 200, body: ""},
		{query: "/?size=30", status: 200, body: "abcdefghijklmnopqrstuvwxyzabcd"},
		{query: "/?size=10&status=404", status: 404, body: "abcdefghij"},
		{query: "/?size=10&status=204", status: 204, body: ""},
		{query: "/?sleep=30ms", status: 200, body: hello, minElapsed: 30 * time.Millisecond},
		{query: "/?sleep=30", status: 200, body: hello, minElapsed: 30 * time.Millisecond},
		{query: "/?sleep=0", status: 200, body: hello},
		{query: "/?cpu=30ms", status: 200, body: hello, minElapsed: 30 * time.Millisecond},
		{query: "/?cpu=30", status: 200, body: hello, minElapsed: 30 * time.Millisecond},
		{query: "/?sleep=10ms&cpu=10ms&status=201&size=5", status: 201, body: "abcde", minElapsed: 20 * time.Millisecond},
	} {
		t.Run(tc.query, func(t *testing.T) {
			start := time.Now()
			resp, body := do(t, newClient(t, false), http.MethodGet, base+tc.query, nil)
			elapsed := time.Since(start)
			if resp.StatusCode != tc.status || body != tc.body {
				t.Errorf("got %d %q, want %d %q", resp.StatusCode, body, tc.status, tc.body)
			}
			if elapsed < tc.minElapsed {
				t.Errorf("answered after %s, want at least %s", elapsed, tc.minElapsed)
			}
		})
	}
}

// TestPeerHeader: an answer to a request with knobs names the address the
// request came from; the plain greeting, the benchmark baseline, does not.
func TestPeerHeader(t *testing.T) {
	_, base := startApp(t, options{})
	resp, _ := do(t, newClient(t, false), http.MethodGet, base+"/?size=1", nil)
	if got := resp.Header.Get(PeerHeader); got != "127.0.0.1" {
		t.Errorf("%s = %q, want the loopback address the test called from", PeerHeader, got)
	}
	resp, _ = do(t, newClient(t, false), http.MethodGet, base+"/", nil)
	if got := resp.Header.Get(PeerHeader); got != "" {
		t.Errorf("the greeting carries %s %q", PeerHeader, got)
	}
}

func TestSizeBody(t *testing.T) {
	_, base := startApp(t, options{})
	// Spans several writes from the shared buffer, and ends mid-buffer.
	const n = 3*26*1260 + 7
	for _, h2c := range []bool{false, true} {
		resp, body := do(t, newClient(t, h2c), http.MethodGet, base+"/?size="+strconv.Itoa(n), nil)
		if resp.StatusCode != http.StatusOK || len(body) != n || resp.ContentLength != n {
			t.Fatalf("h2c=%v: status %d, %d bytes, Content-Length %d; want 200, %d bytes",
				h2c, resp.StatusCode, len(body), resp.ContentLength, n)
		}
		for i := range n {
			if body[i] != 'a'+byte(i%26) {
				t.Fatalf("h2c=%v: byte %d is %q, want %q", h2c, i, body[i], 'a'+byte(i%26))
			}
		}
	}
}

func TestBadKnobs(t *testing.T) {
	_, base := startApp(t, options{})
	c := newClient(t, false)
	for _, tc := range []struct {
		query string
		want  []string // in the body, besides "accepted"
	}{
		{"sleep=abc", []string{"sleep", "abc"}},
		{"sleep=-5", []string{"sleep", "-5"}},
		{"sleep=-5ms", []string{"sleep", "-5ms"}},
		{"cpu=1x", []string{"cpu", "1x"}},
		{"size=-1", []string{"size", "-1"}},
		{"size=1k", []string{"size", "1k"}},
		{"stream=0", []string{"stream", "0"}},
		{"stream=", []string{"stream", `""`}},
		{"stream=2&interval=soon", []string{"interval", "soon"}},
		{"status=99", []string{"status", "99"}},
		{"status=600", []string{"status", "600"}},
		{"status=ok", []string{"status", "ok"}},
		{"interval=1s", []string{"interval", "1s", "stream"}},
		{"size=1&stream=2", []string{"size", "stream"}},
		{"sleep=1s&slep=2s", []string{"slep", "sleep, cpu, size, stream, interval, status"}},
		{"sleep=%zz", []string{"%zz"}},
	} {
		t.Run(tc.query, func(t *testing.T) {
			resp, body := do(t, c, http.MethodGet, base+"/?"+tc.query, nil)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d, want 400; body %q", resp.StatusCode, body)
			}
			for _, w := range append(tc.want, "accepted") {
				if !strings.Contains(body, w) {
					t.Errorf("body %q does not mention %q", body, w)
				}
			}
		})
	}
}

func TestWaitsEndWhenClientGoesAway(t *testing.T) {
	app, base := startApp(t, options{})
	c := newClient(t, false)
	for _, q := range []string{"sleep=1h", "cpu=1h", "stream=2&interval=1h"} {
		t.Run(q, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			done := startGet(ctx, c, base+"/?"+q, nil)
			waitInFlight(t, c, base, 1)
			cancel()
			if r := <-done; r.err == nil {
				// Streams answer before they wait; the body must break.
				_, err := io.Copy(io.Discard, r.resp.Body)
				r.resp.Body.Close()
				if err == nil {
					t.Fatal("the response completed; want it cut short")
				}
			}
			waitInFlight(t, c, base, 0)
			if s := app.counter.snapshot(); s.InFlight != 0 {
				t.Fatalf("stats %+v after the client left", s)
			}
		})
	}
}

func TestStreamChunksArriveSeparately(t *testing.T) {
	for _, h2c := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2c=%v", h2c), func(t *testing.T) {
			_, base := startApp(t, options{})
			c := newClient(t, h2c)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			// The second chunk waits an hour: reading the first proves it was
			// flushed on its own while the response is still open.
			r := <-startGet(ctx, c, base+"/?stream=2&interval=1h", nil)
			if r.err != nil {
				t.Fatal(r.err)
			}
			defer r.resp.Body.Close()
			line, err := bufio.NewReader(r.resp.Body).ReadString('\n')
			if err != nil || line != "chunk 1/2\n" {
				t.Fatalf("first chunk %q, %v", line, err)
			}
			if s := getStats(t, c, base); s.InFlight != 1 {
				t.Errorf("stats %+v while streaming, want 1 in flight", s)
			}
			if ct := r.resp.Header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
				t.Errorf("Content-Type %q", ct)
			}
		})
	}
}

func TestStreamWhole(t *testing.T) {
	_, base := startApp(t, options{})
	resp, body := do(t, newClient(t, false), http.MethodGet, base+"/?stream=3&status=207", nil)
	if resp.StatusCode != 207 || body != "chunk 1/3\nchunk 2/3\nchunk 3/3\n" {
		t.Errorf("got %d %q", resp.StatusCode, body)
	}
	if len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" {
		t.Errorf("Transfer-Encoding %q, want chunked", resp.TransferEncoding)
	}
}

func TestServerSentEvents(t *testing.T) {
	_, base := startApp(t, options{})
	c := newClient(t, false)
	const want = "id: 1\ndata: chunk 1/2\n\nid: 2\ndata: chunk 2/2\n\n"
	for name, tc := range map[string]struct {
		url string
		hdr http.Header
	}{
		"sse path":      {url: base + "/sse?stream=2&interval=0"},
		"accept header": {url: base + "/?stream=2", hdr: http.Header{"Accept": {"text/html, text/event-stream"}}},
	} {
		t.Run(name, func(t *testing.T) {
			resp, body := do(t, c, http.MethodGet, tc.url, tc.hdr)
			if resp.StatusCode != http.StatusOK || body != want {
				t.Errorf("got %d %q, want 200 %q", resp.StatusCode, body, want)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
				t.Errorf("Content-Type %q", ct)
			}
		})
	}
}

func TestSSEDefaults(t *testing.T) {
	k, err := parseKnobs("", false, true)
	if err != nil || !k.sse || k.stream != defaultSSEEvents || k.interval != defaultSSEInterval {
		t.Errorf("/sse knobs %+v, %v", k, err)
	}
	k, err = parseKnobs("interval=5ms", false, true)
	if err != nil || k.stream != defaultSSEEvents || k.interval != 5*time.Millisecond {
		t.Errorf("/sse?interval=5ms knobs %+v, %v", k, err)
	}
}

func TestHealthz(t *testing.T) {
	_, base := startApp(t, options{})
	c := newClient(t, false)
	resp, body := do(t, c, http.MethodGet, base+healthzPath, nil)
	if resp.StatusCode != http.StatusOK || body != "ok\n" {
		t.Errorf("got %d %q", resp.StatusCode, body)
	}
	if s := getStats(t, c, base); s != (statsSnapshot{}) {
		t.Errorf("stats %+v after /healthz and /stats, want them uncounted", s)
	}
}

func TestInFlightMax(t *testing.T) {
	_, base := startApp(t, options{})
	c := newClient(t, false)
	const n = 8
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range n {
		done := startGet(ctx, c, base+"/?sleep=1h", nil)
		wg.Go(func() {
			if r := <-done; r.err == nil {
				r.resp.Body.Close()
			}
		})
	}
	got := waitInFlight(t, c, base, n)
	if want := (statsSnapshot{InFlight: n, MaxInFlight: n, Requests: n}); got != want {
		t.Errorf("stats %+v, want %+v", got, want)
	}
	cancel()
	wg.Wait()
	got = waitInFlight(t, c, base, 0)
	if want := (statsSnapshot{MaxInFlight: n, Requests: n}); got != want {
		t.Errorf("stats %+v after the requests left, want %+v", got, want)
	}

	if got := decodeStats(t, c, http.MethodPost, base+statsResetPath); got != (statsSnapshot{MaxInFlight: n, Requests: n}) {
		t.Errorf("POST %s answered %+v, want the stats before the reset", statsResetPath, got)
	}
	if got := getStats(t, c, base); got != (statsSnapshot{}) {
		t.Errorf("stats %+v after reset, want zero", got)
	}
	do(t, c, http.MethodGet, base+"/", nil)
	// The client may see the answer before the handler has returned.
	waitInFlight(t, c, base, 0)
	if got := decodeStats(t, c, http.MethodDelete, base+statsPath); got != (statsSnapshot{MaxInFlight: 1, Requests: 1}) {
		t.Errorf("DELETE %s answered %+v", statsPath, got)
	}
	if got := getStats(t, c, base); got != (statsSnapshot{}) {
		t.Errorf("stats %+v after DELETE, want zero", got)
	}
}

func TestStatsMethods(t *testing.T) {
	_, base := startApp(t, options{})
	c := newClient(t, false)
	for _, tc := range []struct{ method, path, allow string }{
		{http.MethodPut, statsPath, "GET, HEAD, DELETE"},
		{http.MethodPost, statsPath, "GET, HEAD, DELETE"},
		{http.MethodGet, statsResetPath, "POST"},
	} {
		resp, body := do(t, c, tc.method, base+tc.path, nil)
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != tc.allow {
			t.Errorf("%s %s: %d Allow %q, %q", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Allow"), body)
		}
	}
}

func TestInflightCounterIsExact(t *testing.T) {
	var c inflight
	const n = 64
	var begun, ended sync.WaitGroup
	release := make(chan struct{})
	begun.Add(n)
	for range n {
		ended.Go(func() {
			c.begin()
			begun.Done()
			<-release
			c.end()
		})
	}
	begun.Wait()
	if got, want := c.snapshot(), (statsSnapshot{InFlight: n, MaxInFlight: n, Requests: n}); got != want {
		t.Errorf("all begun: %+v, want %+v", got, want)
	}
	close(release)
	ended.Wait()
	if got, want := c.snapshot(), (statsSnapshot{MaxInFlight: n, Requests: n}); got != want {
		t.Errorf("all ended: %+v, want %+v", got, want)
	}

	// Churn from a few goroutines: the count of requests stays exact and the
	// maximum never exceeds the goroutines that could overlap.
	c.reset()
	const workers, each = 4, 5000
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				c.begin()
				c.end()
			}
		})
	}
	wg.Wait()
	if s := c.snapshot(); s.InFlight != 0 || s.Requests != workers*each || s.MaxInFlight < 1 || s.MaxInFlight > workers {
		t.Errorf("after churn: %+v", s)
	}
}

func TestInflightResetKeepsRequestsInFlight(t *testing.T) {
	var c inflight
	c.begin()
	c.begin()
	c.begin()
	c.end()
	if got, want := c.reset(), (statsSnapshot{InFlight: 2, MaxInFlight: 3, Requests: 3}); got != want {
		t.Errorf("reset returned %+v, want %+v", got, want)
	}
	if got, want := c.snapshot(), (statsSnapshot{InFlight: 2, MaxInFlight: 2}); got != want {
		t.Errorf("after reset %+v, want %+v", got, want)
	}
}
