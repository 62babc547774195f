// Package queueproxy is the sidecar in front of the user container of every
// pod: it proxies traffic to the app, admits at most CONTAINER_CONCURRENCY
// requests to it at once, measures load for the autoscaler, probes the app
// and drains gracefully. docs/queue-proxy.md describes its behaviour and
// configuration.
package queueproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/swell-run/swell/pkg/breaker"
	"github.com/swell-run/swell/pkg/drain"
	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/proxy"
	"github.com/swell-run/swell/pkg/stats"
)

// Clock is the time source the queue-proxy needs: clock.RealClock{} in a
// binary, a fake clock in tests.
type Clock = clock.WithTickerAndDelayedExecution

// Server settings for the three ports.
const (
	// readHeaderTimeout bounds how long a client may take to send a
	// request's headers — from a new connection's start, or from the first
	// byte of a request on a kept-alive one — so that connections that
	// send nothing or dribble their headers (slowloris) cannot pile up
	// holding a goroutine and a socket each. The clients in front (the
	// activator, ingress proxies, the kubelet, Prometheus) write a
	// request's headers at once, in one packet or a few; 10s leaves room
	// for a congested network or a paused client process, and is what
	// common servers use.
	readHeaderTimeout = 10 * time.Second
	// clientIdleTimeout closes idle client connections. It is longer than
	// the idle timeouts of the proxies in front (Go's 90s, the activator's)
	// so that they, not we, close an idle connection: a connection closed
	// by the server as the client reuses it fails the request on it.
	clientIdleTimeout = 10 * time.Minute
)

// QueueProxy is one queue-proxy: the serving chain and the servers of its
// three ports.
type QueueProxy struct {
	cfg   Config
	log   *zap.Logger
	clock Clock

	tracker  *stats.Tracker
	breaker  *breaker.Breaker // nil when ContainerConcurrency is 0
	prober   *prober
	drainer  *drain.Drainer
	reporter *reporter
	meter    *appMeter // nil: the app itself is not measured
	metrics  *metrics
	// pusher and watch push the reports to the autoscaler; nil when
	// nothing is pushed (no PushURL).
	pusher *pusher
	watch  *loadWatch

	handler                    http.Handler
	upstream                   http.RoundTripper // to the app
	serving, admin, metricsSrv *http.Server
	drainOnce                  sync.Once
	waiters                    drainWaiters
}

// New builds a queue-proxy from a valid configuration. It starts nothing:
// see Run and Serve.
func New(cfg Config) (*QueueProxy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log, clk := cfg.Logger, cfg.Clock
	if log == nil {
		log = zap.NewNop()
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	now := clk.Now()
	q := &QueueProxy{
		cfg:     cfg,
		log:     log,
		clock:   clk,
		tracker: stats.NewTracker(now),
		prober:  newProber(cfg.UserPort, cfg.ProbePath, cfg.ProbePeriod, cfg.ProbeTimeout, cfg.ProbeFailureThreshold, clk, log),
		drainer: drain.New(clk, cfg.DrainQuietPeriod, cfg.DrainTimeout),
	}
	q.reporter = newReporter(q.tracker, clk, now)
	if cfg.ContainerConcurrency > 0 {
		b, err := breaker.New(breaker.Config{Capacity: cfg.ContainerConcurrency, QueueDepth: cfg.queueDepth()})
		if err != nil {
			return nil, fmt.Errorf("admission: %w", err)
		}
		q.breaker = b
	}
	queued := func() float64 { return 0 }
	if q.breaker != nil {
		queued = func() float64 { return float64(q.breaker.Waiting()) }
	}
	q.metrics = newMetrics(clk, func() float64 { return float64(q.tracker.InFlight()) }, queued)
	meter, err := newAppMeter(&q.cfg, clk, log.Named("app"), q.metrics)
	if err != nil {
		return nil, err
	}
	if meter != nil {
		meter.appReady = q.prober.Ready
		q.meter = meter
		q.metrics.registerApp(meter.usage != nil, meter.gauge != nil)
		q.reporter.meter = meter
	}
	if cfg.PushURL != "" {
		q.metrics.registerPush()
		q.watch = newLoadWatch(cfg.ContainerConcurrency)
		q.pusher = newPusher(cfg.pushTarget(), cfg.Service, q.reporter, q.watch, clk, log.Named("push"), q.metrics)
	}

	q.handler = q.buildHandler()
	q.serving = q.newServer(q.handler)
	// The serving port speaks HTTP/2 without TLS too, with prior knowledge,
	// so gRPC clients and the activator can use it.
	q.serving.Protocols = new(http.Protocols)
	q.serving.Protocols.SetHTTP1(true)
	q.serving.Protocols.SetUnencryptedHTTP2(true)
	q.admin = q.newServer(q.adminHandler())
	q.metricsSrv = q.newServer(q.metricsHandler())
	return q, nil
}

func (q *QueueProxy) newServer(h http.Handler) *http.Server {
	errLog, _ := zap.NewStdLogAt(q.log, zap.WarnLevel)
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       clientIdleTimeout,
		ErrorLog:          errLog,
	}
}

// Handler returns the serving chain, as served on the serving port.
func (q *QueueProxy) Handler() http.Handler { return q.handler }

func (q *QueueProxy) buildHandler() http.Handler {
	var bounded, admit func(http.Handler) http.Handler
	t := timeouts{Request: q.cfg.RequestTimeout, ResponseStart: q.cfg.ResponseStartTimeout, StreamIdle: q.cfg.StreamIdleTimeout}
	if t.enabled() {
		bounded = func(next http.Handler) http.Handler { return newTimeoutHandler(next, t, q.clock) }
	}
	if q.breaker != nil {
		admit = func(next http.Handler) http.Handler {
			return &admission{next: next, breaker: q.breaker, metrics: q.metrics, clock: q.clock}
		}
	}
	// Outermost first: each stage sees only what the ones above let through.
	up := newProxy(q.cfg.UserPort, q.log)
	q.upstream = up.Transport
	return proxy.Chain(up,
		// Probes are answered here and are not traffic.
		func(next http.Handler) http.Handler {
			return &probeHandler{next: next, prober: q.prober, draining: q.drainer.Draining}
		},
		// A drain waits until nothing has passed here for a while.
		q.drainer.Handler,
		// Prometheus sees every final status, the 503s and 504s below included.
		func(next http.Handler) http.Handler { return &counting{next: next, metrics: q.metrics} },
		// The autoscaler's load: time in the queue counts. A sharp change
		// is pushed at once.
		func(next http.Handler) http.Handler {
			return &accounting{next: next, tracker: q.tracker, clock: q.clock, watch: q.watch}
		},
		// Timeouts cover the wait in the queue too (absent when all are 0).
		bounded,
		// At most CONTAINER_CONCURRENCY at the app (absent when unlimited).
		admit,
	)
}

// adminHandler serves readiness and drain.
func (q *QueueProxy) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+network.ReadyPath, q.serveReady)
	mux.HandleFunc("GET "+network.DrainPath, q.serveDrain)
	mux.HandleFunc("POST "+network.DrainPath, q.serveDrain)
	return mux
}

// serveReady answers 200 while the app is ready and no drain has started.
func (q *QueueProxy) serveReady(w http.ResponseWriter, r *http.Request) {
	switch {
	case q.drainer.Draining():
		proxy.Reject(w, http.StatusServiceUnavailable, network.ReasonDraining)
	case !q.prober.Ready():
		proxy.Reject(w, http.StatusServiceUnavailable, network.ReasonNotReady)
	default:
		w.Header()["Content-Type"] = proxy.PlainText
		w.Write([]byte("ready\n"))
	}
}

// metricsHandler serves Prometheus metrics and the stats report, which
// other pods scrape, and the profiles, which only loopback callers get.
func (q *QueueProxy) metricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET "+network.MetricsPath, q.metrics.handler())
	mux.Handle("GET "+network.StatsPath, q.reporter)
	if q.cfg.EnableProfiling {
		mux.Handle("GET /debug/pprof/", loopbackOnly(http.HandlerFunc(pprof.Index)))
		mux.Handle("GET /debug/pprof/cmdline", loopbackOnly(http.HandlerFunc(pprof.Cmdline)))
		mux.Handle("GET /debug/pprof/profile", loopbackOnly(http.HandlerFunc(pprof.Profile)))
		mux.Handle("GET /debug/pprof/symbol", loopbackOnly(http.HandlerFunc(pprof.Symbol)))
		mux.Handle("GET /debug/pprof/trace", loopbackOnly(http.HandlerFunc(pprof.Trace)))
	}
	return mux
}

// loopbackOnly serves h to callers on loopback and 403 to any other.
// Profiles show the process's memory and command line and cost it CPU for
// as long as the caller asks; an operator reaches them with kubectl
// port-forward, which arrives on loopback inside the pod.
func loopbackOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !network.IsFromLoopback(r) {
			http.Error(w, "profiles are served only to callers on loopback: use kubectl port-forward to this port", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// StartDrain starts a graceful drain (see pkg/drain): readiness turns false
// at once and the servers stop once the drain ends. It returns at once;
// calling it again does nothing.
func (q *QueueProxy) StartDrain() {
	q.drainOnce.Do(func() {
		q.log.Info("draining", zap.Duration("quietPeriod", q.cfg.DrainQuietPeriod), zap.Duration("timeout", q.cfg.DrainTimeout))
		// Clients reconnect, likely elsewhere, rather than keep sending on
		// connections to a pod that is going away: the drainer's handler
		// closes each connection after its next answer.
		q.drainer.Start()
	})
}

// Drain starts a drain if none has started and waits until it ends or ctx
// does.
func (q *QueueProxy) Drain(ctx context.Context) error {
	q.StartDrain()
	return q.drainer.Wait(ctx)
}

// Run listens on the configured ports and serves; see Serve.
func (q *QueueProxy) Run(ctx context.Context) error {
	var lc net.ListenConfig
	var ls []net.Listener
	for _, port := range []int{q.cfg.ServingPort, q.cfg.AdminPort, q.cfg.MetricsPort} {
		l, err := lc.Listen(ctx, "tcp", net.JoinHostPort(q.cfg.ListenAddress, strconv.Itoa(port)))
		if err != nil {
			for _, l := range ls {
				l.Close()
			}
			return fmt.Errorf("listen: %w", err)
		}
		ls = append(ls, l)
	}
	return q.Serve(ctx, ls[0], ls[1], ls[2])
}

// Serve serves the serving, admin and metrics ports on the given listeners
// and runs the prober, the stats reporter and, with a PushURL, the pusher.
// It returns nil once a drain has ended and the servers have shut down:
// in-flight requests may finish, for at most RequestTimeout (without one,
// for as long as they take). It returns an error at once if a server
// fails, and ctx.Err() after closing everything at once if ctx ends first.
func (q *QueueProxy) Serve(ctx context.Context, serving, admin, metrics net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
		// Nothing is proxied any more: the idle connections to the app go
		// too.
		(&http.Client{Transport: q.upstream}).CloseIdleConnections()
	}()
	wg.Go(func() { q.prober.run(ctx) })
	ticker := q.clock.NewTicker(ReportingPeriod)
	wg.Go(func() { q.reporter.run(ctx, ticker) })
	if q.meter != nil {
		meterTicker := q.clock.NewTicker(ReportingPeriod)
		wg.Go(func() { q.meter.run(ctx, meterTicker) })
	}
	if q.pusher != nil {
		// It closes its connection normally when Serve returns.
		wg.Go(func() { q.pusher.run(ctx) })
	}

	servers := []*http.Server{q.serving, q.admin, q.metricsSrv}
	errc := make(chan error, len(servers))
	for i, l := range []net.Listener{serving, admin, metrics} {
		srv := servers[i]
		go func() {
			if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("serve %s: %w", l.Addr(), err)
			}
		}()
	}
	q.log.Info("queue-proxy started",
		zap.Stringer("serving", serving.Addr()), zap.Stringer("admin", admin.Addr()),
		zap.Stringer("metrics", metrics.Addr()), zap.Int("userPort", q.cfg.UserPort),
		zap.Int("containerConcurrency", q.cfg.ContainerConcurrency), zap.Int("queueDepth", q.cfg.queueDepth()),
		zap.String("pushURL", q.cfg.PushURL), zap.String("service", q.cfg.Service))

	closeAll := func() {
		for _, s := range servers {
			s.Close()
		}
	}
	select {
	case <-ctx.Done():
		closeAll()
		return ctx.Err()
	case err := <-errc:
		closeAll()
		return err
	case <-q.drainer.Done():
	}
	q.log.Info("drained; shutting down", zap.Bool("drainTimedOut", q.drainer.TimedOut()),
		zap.Int64("inFlight", q.tracker.InFlight()))

	// Shutdown closes the listeners and idle connections and waits for
	// active requests; the request timeout bounds them anyway.
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	if q.cfg.RequestTimeout > 0 {
		t := q.clock.AfterFunc(q.cfg.RequestTimeout, scancel)
		defer t.Stop()
	}
	var sg sync.WaitGroup
	for _, s := range servers {
		sg.Go(func() {
			if err := s.Shutdown(sctx); err != nil {
				q.log.Warn("requests cut at shutdown: the request timeout passed", zap.Error(err))
				s.Close()
			}
		})
	}
	sg.Wait()
	return nil
}
