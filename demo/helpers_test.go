package demo

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// startApp serves a ready app on a loopback port through the same HTTP
// server setup as main (HTTP/1.1 and h2c) and returns it with its base URL.
func startApp(t *testing.T, o options) (*server, string) {
	t.Helper()
	app := newServer(o)
	app.setReady()
	return app, serve(t, app)
}

// serve serves h on a loopback port until the test ends and returns its base
// URL.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := newHTTPServer(h)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// newClient returns a client of its own speaking HTTP/1.1, or cleartext
// HTTP/2 with prior knowledge when h2c is set.
func newClient(t *testing.T, h2c bool) *http.Client {
	t.Helper()
	var p http.Protocols
	if h2c {
		p.SetUnencryptedHTTP2(true)
	} else {
		p.SetHTTP1(true)
	}
	tr := &http.Transport{Protocols: &p, MaxIdleConnsPerHost: 100}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// do sends a request and returns the response with its whole body.
func do(t *testing.T, c *http.Client, method, url string, hdr http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, url, err)
	}
	return resp, string(body)
}

// getStats reads /stats.
func getStats(t *testing.T, c *http.Client, base string) statsSnapshot {
	t.Helper()
	return decodeStats(t, c, http.MethodGet, base+statsPath)
}

func decodeStats(t *testing.T, c *http.Client, method, url string) statsSnapshot {
	t.Helper()
	resp, body := do(t, c, method, url, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: status %d, body %q", method, url, resp.StatusCode, body)
	}
	var s statsSnapshot
	if err := json.NewDecoder(strings.NewReader(body)).Decode(&s); err != nil {
		t.Fatalf("%s %s: %v in %q", method, url, err, body)
	}
	return s
}

// waitInFlight polls /stats until inflight is n. Requests held by the app
// run in other goroutines and over real sockets, so polling with a bounded
// deadline is the one way to see them arrive or leave.
func waitInFlight(t *testing.T, c *http.Client, base string, n int64) statsSnapshot {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		s := getStats(t, c, base)
		if s.InFlight == n {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("inflight is %d, want %d (stats %+v)", s.InFlight, n, s)
		}
		<-tick.C
	}
}

// startGet sends a GET in the background under ctx; the returned channel
// yields the response (body unread) or the error.
func startGet(ctx context.Context, c *http.Client, url string, hdr http.Header) <-chan result {
	ch := make(chan result, 1)
	go func() {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			ch <- result{err: err}
			return
		}
		for k, v := range hdr {
			req.Header[k] = v
		}
		resp, err := c.Do(req)
		ch <- result{resp: resp, err: err}
	}()
	return ch
}

type result struct {
	resp *http.Response
	err  error
}
