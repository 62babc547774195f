package demo

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testclock "k8s.io/utils/clock/testing"
)

func TestParseConfig(t *testing.T) {
	def := config{port: 8080, shutdownTimeout: 30 * time.Second}
	for _, tc := range []struct {
		name    string
		env     map[string]string
		args    []string
		want    config
		wantErr string
	}{
		{name: "defaults", want: def},
		{
			name: "env",
			env:  map[string]string{"PORT": "9000", "HOST": "127.0.0.1", "READY_DELAY": "3s", "REPLICA": "r7"},
			want: config{addr: "127.0.0.1", port: 9000, replica: "r7", readyDelay: 3 * time.Second, shutdownTimeout: 30 * time.Second},
		},
		{
			name: "flags win over env",
			env:  map[string]string{"PORT": "9000", "READY_DELAY": "3s"},
			args: []string{"-port", "9001", "-addr", "::1", "-ready-delay", "1s", "-shutdown-timeout", "5s", "-replica", "x"},
			want: config{addr: "::1", port: 9001, replica: "x", readyDelay: time.Second, shutdownTimeout: 5 * time.Second},
		},
		{name: "bad PORT", env: map[string]string{"PORT": "http"}, wantErr: `PORT "http"`},
		{name: "bad READY_DELAY", env: map[string]string{"READY_DELAY": "5"}, wantErr: `READY_DELAY "5"`},
		{name: "port out of range", args: []string{"-port", "70000"}, wantErr: "port 70000"},
		{name: "negative delay", args: []string{"-ready-delay", "-1s"}, wantErr: "ready delay -1s"},
		{name: "zero shutdown timeout", args: []string{"-shutdown-timeout", "0s"}, wantErr: "shutdown timeout 0s"},
		{name: "stray argument", args: []string{"serve"}, wantErr: `unexpected argument "serve"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseConfig(tc.args, func(k string) string { return tc.env[k] })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
	if _, err := parseConfig([]string{"-h"}, func(string) string { return "" }); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
}

func TestListenAddress(t *testing.T) {
	for _, tc := range []struct {
		addr string
		port int
		want string
	}{
		{"", 8080, ":8080"},
		{"127.0.0.1", 9000, "127.0.0.1:9000"},
		{"::1", 9000, "[::1]:9000"},
		{"127.0.0.1:7000", 9000, "127.0.0.1:7000"},
		{":7000", 9000, ":7000"},
	} {
		if got := (config{addr: tc.addr, port: tc.port}).listenAddress(); got != tc.want {
			t.Errorf("addr %q port %d: %q, want %q", tc.addr, tc.port, got, tc.want)
		}
	}
}

// signalClock is a fake clock that announces every After call, so a test
// knows the app is waiting before it moves time.
type signalClock struct {
	*testclock.FakeClock
	after chan time.Duration
}

func (c signalClock) After(d time.Duration) <-chan time.Time {
	ch := c.FakeClock.After(d)
	c.after <- d
	return ch
}

// freeAddr returns a loopback address nothing listens on: a port the kernel
// just handed out and that was closed again.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// startRun runs the app like main does, on a fixed loopback address, and
// returns channels for its bound address and its result.
func startRun(ctx context.Context, t *testing.T, cfg config, clk signalClock) (<-chan net.Addr, <-chan error) {
	t.Helper()
	listening := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, cfg, zaptest.NewLogger(t), clk, func(a net.Addr) { listening <- a })
	}()
	return listening, done
}

func newSignalClock() signalClock {
	return signalClock{FakeClock: testclock.NewFakeClock(time.Unix(0, 0)), after: make(chan time.Duration, 1)}
}

func TestRunListensOnlyAfterReadyDelay(t *testing.T) {
	addr := freeAddr(t)
	clk := newSignalClock()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := config{addr: addr, readyDelay: 5 * time.Second, shutdownTimeout: 5 * time.Second, replica: "slow"}
	listening, done := startRun(ctx, t, cfg, clk)

	if d := <-clk.after; d != cfg.readyDelay {
		t.Fatalf("waiting %s, want the ready delay %s", d, cfg.readyDelay)
	}
	// The app is waiting out its delay: nothing may accept on its port.
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatalf("dialled %s during the ready delay; want the port closed", addr)
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial during the ready delay: %v, want connection refused", err)
	}
	clk.Step(cfg.readyDelay - time.Nanosecond)
	select {
	case a := <-listening:
		t.Fatalf("listening on %s before the delay passed", a)
	default:
	}
	clk.Step(time.Nanosecond)
	if a := (<-listening).String(); a != addr {
		t.Fatalf("listening on %s, want %s", a, addr)
	}

	base := "http://" + addr
	if resp, body := do(t, newClient(t, false), http.MethodGet, base+"/", nil); body != "Hello from Swell! (replica slow)\n" {
		t.Errorf("GET /: %d %q", resp.StatusCode, body)
	}
	if st, err := check(t, healthClient(t, base)); err != nil || st != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health once listening: %v, %v; want SERVING", st, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
}

func TestRunEndsDuringReadyDelay(t *testing.T) {
	clk := newSignalClock()
	ctx, cancel := context.WithCancel(context.Background())
	listening, done := startRun(ctx, t, config{addr: freeAddr(t), readyDelay: time.Hour, shutdownTimeout: time.Second}, clk)
	<-clk.after
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	select {
	case a := <-listening:
		t.Fatalf("listened on %s although stopped during the delay", a)
	default:
	}
}

func TestRunFinishesInFlightOnShutdown(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	listening, done := startRun(ctx, t, config{addr: "127.0.0.1:0", shutdownTimeout: 30 * time.Second}, newSignalClock())
	base := "http://" + (<-listening).String()

	// A stream whose second chunk comes 300ms after the first: once the
	// first is read the request is surely in flight when shutdown starts.
	r := <-startGet(context.Background(), newClient(t, false), base+"/?stream=2&interval=300ms", nil)
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.resp.Body.Close()
	br := bufio.NewReader(r.resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "chunk 1/2\n" {
		t.Fatalf("first chunk %q, %v", line, err)
	}
	cancel()
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "chunk 2/2\n" {
		t.Fatalf("rest of the stream during shutdown: %q, %v; want it finished", rest, err)
	}
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
}

func TestRunShutdownTimeout(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	listening, done := startRun(ctx, t, config{addr: "127.0.0.1:0", shutdownTimeout: 50 * time.Millisecond}, newSignalClock())
	base := "http://" + (<-listening).String()
	c := newClient(t, false)
	held := startGet(context.Background(), c, base+"/?sleep=1h", nil)
	waitInFlight(t, c, base, 1)
	cancel()
	err := <-done
	if err == nil || !strings.Contains(err.Error(), "1 requests still in flight") {
		t.Fatalf("run: %v, want a shutdown timeout with 1 request in flight", err)
	}
	if r := <-held; r.err == nil {
		r.resp.Body.Close()
		t.Fatalf("the held request got %d; want its connection closed", r.resp.StatusCode)
	}
}
