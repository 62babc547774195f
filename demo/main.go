// Package app is the small app that Swell's tests, benchmarks and demos run
// behind the data plane. A plain GET answers with a short greeting naming the
// replica, as cheaply as the server allows, so that it is the baseline of
// proxy benchmarks. Query parameters ("knobs") on any path shape the answer:
//
//	?sleep=100ms            wait before answering (or plain milliseconds: sleep=100)
//	?cpu=5ms                busy-loop for that long before answering
//	?size=N                 answer with a body of N bytes
//	?stream=N&interval=D    answer with N chunks, each flushed, D apart
//	?status=503             answer with that status
//
// An answer to a request with knobs carries Demo-Peer, the address the
// request came from: behind a queue-proxy it is the pod's loopback, so a
// client can tell an answer that bypassed the queue-proxy.
//
// Knobs combine, except size with stream. A streamed answer is sent as
// server-sent events when the request accepts text/event-stream; GET /sse
// always streams events (10 events 1s apart unless stream/interval say
// otherwise). Other paths are reserved:
//
//	/ws            websocket echo of text and binary messages
//	/stats         JSON {"inflight":N,"max_inflight":M,"requests":R}; DELETE resets
//	/stats/reset   POST resets max_inflight and requests
//	/healthz       200 "ok"
//
// gRPC requests over cleartext HTTP/2 reach the standard gRPC health service,
// which reports NOT_SERVING until the app listens and again once it drains.
//
// The app listens on $PORT (default 8080) on all interfaces ($HOST or -addr
// narrows it), only after $READY_DELAY has passed, to mimic a slow cold
// start. SIGTERM or SIGINT drain it: in-flight requests finish, bounded by
// -shutdown-timeout.
package demo

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/swell-run/swell/pkg/logging"
	"github.com/swell-run/swell/pkg/network"
)

// Main runs the app as a process's main and returns its exit code: 0 after
// a clean drain (or --help), 1 on a failure, 2 on a bad flag or variable.
// It is the whole of cmd/hello, and what `swell hello` (and so
// `swell local --demo`) runs. It handles SIGTERM and SIGINT: call it only as
// a process's main.
func Main(args []string, getenv func(string) string, stderr io.Writer) int {
	cfg, err := parseConfig(args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "hello:", err)
		return 2
	}
	if cfg.replica == "" {
		// Best effort: without a name the greeting just leaves it out.
		cfg.replica, _ = os.Hostname()
	}
	log, err := logging.New(logging.FormatAuto, "info")
	if err != nil {
		fmt.Fprintln(stderr, "hello:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		// Restore the default handlers once draining starts, so a second
		// signal ends a drain that takes too long.
		<-ctx.Done()
		stop()
	}()
	err = run(ctx, cfg, log, clock.RealClock{}, nil)
	if err != nil {
		log.Error("hello failed", zap.Error(err))
	}
	_ = log.Sync()
	if err != nil {
		return 1
	}
	return 0
}

// config is what the flags and the environment decide.
type config struct {
	// addr is the host or IP to bind, empty for all interfaces. When it
	// carries a port too ("127.0.0.1:9000"), that port wins over port.
	addr            string
	port            int
	replica         string
	readyDelay      time.Duration
	shutdownTimeout time.Duration
}

// listenAddress is the host:port to listen on.
func (c config) listenAddress() string {
	if _, _, err := net.SplitHostPort(c.addr); err == nil {
		return c.addr
	}
	return net.JoinHostPort(c.addr, strconv.Itoa(c.port))
}

// parseConfig reads the environment through getenv, then the flags in args,
// which win over it.
func parseConfig(args []string, getenv func(string) string) (config, error) {
	cfg := config{
		addr:            getenv("HOST"),
		port:            network.DefaultUserPort,
		replica:         getenv("REPLICA"),
		shutdownTimeout: 30 * time.Second,
	}
	if v := getenv("PORT"); v != "" {
		p, err := strconv.Atoi(v)
		if err != nil {
			return cfg, fmt.Errorf("PORT %q: accepted is a port number from 0 to 65535", v)
		}
		cfg.port = p
	}
	if v := getenv("READY_DELAY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return cfg, fmt.Errorf("READY_DELAY %q: accepted is a duration such as 5s or 1m30s", v)
		}
		cfg.readyDelay = d
	}

	fs := flag.NewFlagSet("hello", flag.ContinueOnError)
	fs.StringVar(&cfg.addr, "addr", cfg.addr, "host or IP to listen on, empty for all interfaces; a host:port here wins over -port (env HOST)")
	fs.IntVar(&cfg.port, "port", cfg.port, "port to listen on (env PORT)")
	fs.StringVar(&cfg.replica, "replica", cfg.replica, "replica name in the greeting; defaults to the hostname (env REPLICA)")
	fs.DurationVar(&cfg.readyDelay, "ready-delay", cfg.readyDelay, "wait this long before listening, like a slow cold start (env READY_DELAY)")
	fs.DurationVar(&cfg.shutdownTimeout, "shutdown-timeout", cfg.shutdownTimeout, "on SIGTERM, how long in-flight requests may take to finish")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	switch {
	case fs.NArg() > 0:
		return cfg, fmt.Errorf("unexpected argument %q: hello takes flags only", fs.Arg(0))
	case cfg.port < 0 || cfg.port > 65535:
		return cfg, fmt.Errorf("port %d: accepted is a port number from 0 to 65535", cfg.port)
	case cfg.readyDelay < 0:
		return cfg, fmt.Errorf("ready delay %s: accepted is a duration of 0 or more", cfg.readyDelay)
	case cfg.shutdownTimeout <= 0:
		return cfg, fmt.Errorf("shutdown timeout %s: accepted is a positive duration", cfg.shutdownTimeout)
	}
	return cfg, nil
}

// run waits out the ready delay on clk, listens, serves until ctx is done and
// then drains. listening, when not nil, learns the bound address as soon as
// the app accepts connections. A ctx done during the ready delay ends run
// without listening at all.
func run(ctx context.Context, cfg config, log *zap.Logger, clk clock.Clock, listening func(net.Addr)) error {
	if cfg.readyDelay > 0 {
		select {
		case <-clk.After(cfg.readyDelay):
		case <-ctx.Done():
			return nil
		}
	}
	ln, err := net.Listen("tcp", cfg.listenAddress())
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	app := newServer(options{Replica: cfg.replica, Clock: clk})
	var worker sync.WaitGroup
	workCtx, stopWork := context.WithCancel(ctx)
	worker.Go(func() { app.jobs.run(workCtx) })
	defer func() {
		stopWork()
		worker.Wait()
	}()
	srv := newHTTPServer(app)
	srv.RegisterOnShutdown(app.drain)
	app.setReady()

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("hello listening",
		zap.Stringer("addr", ln.Addr()),
		zap.String("replica", cfg.replica),
		zap.Duration("ready_delay", cfg.readyDelay))
	if listening != nil {
		listening(ln.Addr())
	}

	select {
	case err := <-served:
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	log.Info("hello shutting down",
		zap.Int64("inflight", app.counter.snapshot().InFlight),
		zap.Duration("timeout", cfg.shutdownTimeout))
	sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		left := app.counter.snapshot().InFlight
		_ = srv.Close()
		return fmt.Errorf("shutdown: %d requests still in flight after %s: %w", left, cfg.shutdownTimeout, err)
	}
	return nil
}

// newHTTPServer serves h over HTTP/1.1 and over cleartext HTTP/2 with prior
// knowledge on the same port; the latter is what gRPC clients speak.
func newHTTPServer(h http.Handler) *http.Server {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	return &http.Server{
		Handler:           h,
		Protocols:         &protocols,
		ReadHeaderTimeout: 30 * time.Second,
		// Concurrency tests may multiplex many slow requests over one
		// connection; the app must not be the limit they run into.
		HTTP2: &http.HTTP2Config{MaxConcurrentStreams: 10000},
	}
}
