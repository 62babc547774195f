package main

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestServersBoundHeadersAndIdle: every server of the activator bounds
// the time a client may take to send its headers and how long a
// connection may idle, so that connections that send nothing, or nothing
// more, are not held forever.
func TestServersBoundHeadersAndIdle(t *testing.T) {
	s := newServers(http.NotFoundHandler(), http.NotFoundHandler(), http.NotFoundHandler())
	for name, srv := range map[string]*http.Server{"serving": s.serving, "admin": s.admin, "metrics": s.metrics} {
		if srv.ReadHeaderTimeout <= 0 || srv.ReadHeaderTimeout > 10*time.Second {
			t.Errorf("%s: ReadHeaderTimeout %v, want a bound of at most 10s", name, srv.ReadHeaderTimeout)
		}
		if srv.IdleTimeout <= 0 {
			t.Errorf("%s: IdleTimeout %v, want a bound", name, srv.IdleTimeout)
		}
	}
	if s.serving.IdleTimeout < 2*time.Minute {
		t.Errorf("serving: IdleTimeout %v, shorter than its clients' own (Go's 90s): the activator would close connections as they are reused", s.serving.IdleTimeout)
	}
}

// TestServersCloseIdleAndSilentConnections: on each server, a keep-alive
// connection left idle after a request, and one that sends half of its
// headers, are closed at the bounds. The bounds are shortened for the
// test; the socket's own close is awaited, under a generous guard.
func TestServersCloseIdleAndSilentConnections(t *testing.T) {
	const bound = 50 * time.Millisecond
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	s := newServers(ok, ok, ok)
	for _, srv := range s.all() {
		srv.IdleTimeout, srv.ReadHeaderTimeout = bound, bound
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ln) }()
		t.Cleanup(func() {
			srv.Close()
			if err := <-done; !errors.Is(err, http.ErrServerClosed) {
				t.Error(err)
			}
		})
		for _, tc := range []struct {
			name     string
			send     string
			answered bool
		}{
			{"idle after a request", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", true},
			{"half its headers", "GET / HTTP/1.1\r\nHost: x\r\n", false},
		} {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.WriteString(c, tc.send); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			c.SetReadDeadline(start.Add(waitFor))
			br := bufio.NewReader(c)
			if tc.answered {
				res, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("%s: %v", ln.Addr(), err)
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.Close {
					t.Fatalf("%s: the server closed a keep-alive connection at once", ln.Addr())
				}
			}
			_, err = io.ReadAll(br)
			c.Close()
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Errorf("%s, %s: still open after %v, want closed after %v", ln.Addr(), tc.name, time.Since(start), bound)
			}
		}
	}
}
