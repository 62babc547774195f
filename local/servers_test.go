package local

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/swell-run/swell/autoscaler/plan"
	"github.com/swell-run/swell/local/config"
	"github.com/swell-run/swell/pkg/network"
)

// closeBound is how long a test waits for the server to close a
// connection before it fails: many times the short timeouts the tests set
// (and the second an HTTP/2 server waits after its GOAWAY), so that a
// loaded machine does not fail them, and below every default (the admin
// port's 5s the least), so that a port that ignores its configured bounds
// does.
const closeBound = 4 * time.Second

// startRun runs swell local with one service at zero and the given bounds
// on its ports, and returns their addresses. No request of these tests
// reaches the service, so no replica ever starts: QueueProxy is never run.
func startRun(t *testing.T, front, admin ConnTimeouts) (frontAddr, adminAddr string) {
	t.Helper()
	file, err := config.Parse("swell.yaml", []byte(`
defaults:
  enable-scale-to-zero: true
  allow-zero-initial-scale: true
services:
  - name: hello
    command: [app]
    annotations:
      autoscaling.swell.run/initial-scale: 0
`))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	listening := make(chan [2]string, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{
			File:          file,
			Port:          -1,
			AdminPort:     -1,
			QueueProxy:    []string{"false"},
			FrontTimeouts: front,
			AdminTimeouts: admin,
			Listening:     func(f, a net.Addr) { listening <- [2]string{f.String(), a.String()} },
		})
	}()
	select {
	case a := <-listening:
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
		return a[0], a[1]
	case err := <-done:
		cancel()
		t.Fatalf("Run returned before listening: %v", err)
	}
	return "", ""
}

// awaitClose reads r, which reads c, until the server closes c, and fails
// the test if it is still open after closeBound.
func awaitClose(t *testing.T, c net.Conn, r io.Reader, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(closeBound))
	if _, err := io.Copy(io.Discard, r); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("%s: the connection is still open after %v", what, closeBound)
	}
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestPortsCloseIdleConnections: both ports close a connection that sends
// nothing, one that sends half a request's headers, and a kept-alive one
// that idles after a request; the front door also closes an h2c
// connection that opens no stream, with a GOAWAY first. None of them is
// held until the client goes away.
func TestPortsCloseIdleConnections(t *testing.T) {
	short := ConnTimeouts{ReadHeader: 100 * time.Millisecond, Idle: 150 * time.Millisecond}
	front, admin := startRun(t, short, short)
	ports := []struct {
		name, addr string
		// request gets an answer without waking the service: the front
		// door's 404 for a service it does not know.
		request string
	}{
		{"front door", front, "GET / HTTP/1.1\r\nHost: x\r\n" + network.ServiceHeader + ": nothing\r\n\r\n"},
		{"admin port", admin, "GET " + StatusPath + " HTTP/1.1\r\nHost: x\r\n\r\n"},
	}
	for _, p := range ports {
		t.Run(p.name+"/nothing sent", func(t *testing.T) {
			c := dial(t, p.addr)
			awaitClose(t, c, c, "after no byte")
		})
		t.Run(p.name+"/half a header", func(t *testing.T) {
			c := dial(t, p.addr)
			if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n"); err != nil {
				t.Fatal(err)
			}
			awaitClose(t, c, c, "after half a header")
		})
		t.Run(p.name+"/idle keep-alive", func(t *testing.T) {
			c := dial(t, p.addr)
			if _, err := io.WriteString(c, p.request); err != nil {
				t.Fatal(err)
			}
			r := bufio.NewReader(c)
			res, err := http.ReadResponse(r, nil)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.Close {
				t.Fatalf("the server closes after the request (%s): nothing left to idle", res.Status)
			}
			awaitClose(t, c, r, "kept alive after "+res.Status)
		})
	}
	t.Run("front door/idle h2c", func(t *testing.T) {
		c := dial(t, front)
		// The client preface, then an empty SETTINGS frame.
		if _, err := io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(closeBound))
		types, goaway, err := readFrames(c)
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			t.Errorf("the connection is still open after %v (frames %v)", closeBound, types)
		case len(types) == 0 || types[0] != frameSettings:
			t.Errorf("frames %v: not HTTP/2", types)
		case goaway == nil || *goaway != 0:
			t.Errorf("frames %v, GOAWAY code %v: want a GOAWAY without error (NO_ERROR) before the close", types, goaway)
		}
	})
}

// HTTP/2 frame types these tests read (RFC 9113, section 6).
const (
	frameSettings = 0x4
	frameGoAway   = 0x7
)

// readFrames reads HTTP/2 frames until the connection ends, and returns
// their types and the error code of the last GOAWAY, if one came.
func readFrames(r io.Reader) (types []byte, goaway *uint32, err error) {
	var hdr [9]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return types, goaway, err
		}
		payload := make([]byte, int(hdr[0])<<16|int(hdr[1])<<8|int(hdr[2]))
		if _, err := io.ReadFull(r, payload); err != nil {
			return types, goaway, err
		}
		types = append(types, hdr[3])
		if hdr[3] == frameGoAway && len(payload) >= 8 {
			code := binary.BigEndian.Uint32(payload[4:8])
			goaway = &code
		}
	}
}

// TestFrontDoorBoundsSpareLongRequests: the front door's bounds apply
// between requests only. A request whose body and answer each pause many
// times the bounds — a slow upload, a late first byte, a slow stream —
// completes over HTTP/1.1 and h2c alike.
func TestFrontDoorBoundsSpareLongRequests(t *testing.T) {
	const (
		bound  = 50 * time.Millisecond
		pause  = 4 * bound
		chunks = 3
	)
	// pace pauses between chunks: the slowness is the workload, not a
	// synchronisation.
	pace := func() { time.Sleep(pause) }
	f, b := newTestDoor(t, "hello")
	// The replica speaks h2c too, as a queue-proxy does: the front door
	// sends an HTTP/2 request on over HTTP/2.
	pod := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		pace()
		for i := range chunks {
			fmt.Fprintf(w, "%s%d;", body, i)
			w.(http.Flusher).Flush()
			pace()
		}
	}))
	pod.Config.Protocols = new(http.Protocols)
	pod.Config.Protocols.SetHTTP1(true)
	pod.Config.Protocols.SetUnencryptedHTTP2(true)
	pod.Start()
	t.Cleanup(pod.Close)
	b.order[0].view.Store(&routeView{route: plan.RoutePods, ready: []string{pod.Listener.Addr().String()}})

	door := httptest.NewUnstartedServer(nil)
	door.Config = newFrontServer(f, ConnTimeouts{ReadHeader: bound, Idle: bound})
	door.Start()
	t.Cleanup(door.Close)

	h2c := &http.Transport{Protocols: new(http.Protocols)}
	h2c.Protocols.SetUnencryptedHTTP2(true)
	for _, tc := range []struct {
		name  string
		tr    *http.Transport
		major int
	}{
		{"HTTP/1.1", &http.Transport{}, 1},
		{"h2c", h2c, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Cleanup(tc.tr.CloseIdleConnections)
			body, w := io.Pipe()
			go func() {
				for _, part := range []string{"a", "b", "c"} {
					io.WriteString(w, part)
					pace()
				}
				w.Close()
			}()
			req, _ := http.NewRequest(http.MethodPost, door.URL, body)
			req.Host = "hello.localhost"
			res, err := (&http.Client{Transport: tc.tr}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			got, err := io.ReadAll(res.Body)
			if err != nil {
				t.Fatalf("the streamed answer broke off after %q: %v", got, err)
			}
			var want strings.Builder
			for i := range chunks {
				fmt.Fprintf(&want, "abc%d;", i)
			}
			if res.StatusCode != http.StatusOK || res.ProtoMajor != tc.major || string(got) != want.String() {
				t.Errorf("%s %s %q, want 200 over HTTP/%d with %q", res.Proto, res.Status, got, tc.major, want.String())
			}
		})
	}
}

// TestRunRefusesNegativeTimeouts: a negative bound is refused before
// anything listens, each one named with what is accepted, all at once.
func TestRunRefusesNegativeTimeouts(t *testing.T) {
	file, err := config.Parse("swell.yaml", []byte("services:\n  - name: hello\n    command: [app]\n"))
	if err != nil {
		t.Fatal(err)
	}
	err = Run(context.Background(), Config{
		File:          file,
		Port:          -1,
		AdminPort:     -1,
		QueueProxy:    []string{"false"},
		FrontTimeouts: ConnTimeouts{Idle: -time.Second},
		AdminTimeouts: ConnTimeouts{ReadHeader: -time.Second},
	})
	for _, want := range []string{
		"FrontTimeouts.Idle -1s: accepted is a positive duration, or 0 for 10m0s",
		"AdminTimeouts.ReadHeader -1s: accepted is a positive duration, or 0 for 5s",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Run: %v, want an error with %q", err, want)
		}
	}
}
