// Command activator holds requests for services with no pod, or too little
// spare capacity, until a pod can take them (package activator), and reports
// its load to the autoscaler (package activator/reporter). It is configured
// by environment variables or the equivalent flags (run with --help).
//
// Exit codes: 0 after a graceful drain, 1 on a runtime failure, 2 on bad
// configuration.
package main

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
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/swell-run/swell/activator"
	"github.com/swell-run/swell/activator/reporter"
	"github.com/swell-run/swell/pkg/drain"
	"github.com/swell-run/swell/pkg/logging"
	"github.com/swell-run/swell/pkg/network"
)

func main() {
	os.Exit(run(os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr))
}

func run(args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer) int {
	cfg, err := parseConfig(args, lookupEnv)
	if errors.Is(err, flag.ErrHelp) {
		printUsage(stdout)
		return 0
	}
	fail := func(err error) int {
		for line := range strings.SplitSeq(err.Error(), "\n") {
			fmt.Fprintf(stderr, "activator: %s\n", line)
		}
		return 2
	}
	if err != nil {
		return fail(err)
	}
	src, err := newFileSource(cfg.ServicesFile)
	if err != nil {
		return fail(err)
	}
	token, err := cfg.token()
	if err != nil {
		return fail(err)
	}
	log, err := logging.New(cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return fail(err)
	}
	defer log.Sync()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	// The reporter needs the activator (its Source) and the activator
	// needs the reporter (its Poke); the closure breaks the cycle.
	var rep *reporter.Reporter
	act, err := activator.New(activator.Config{
		Source:       src,
		QueueDepth:   cfg.QueueDepth,
		QueueTimeout: cfg.RequestTimeout,
		Poke: func(service string) {
			if rep != nil {
				rep.Poke(service)
			}
		},
		Registerer: reg,
		Logger:     log,
	})
	if err != nil {
		return fail(err)
	}
	if cfg.AutoscalerURL != "" {
		rep, err = reporter.New(reporter.Config{
			URL: cfg.AutoscalerURL, Token: token, Name: cfg.PodName,
			Source: act, Logger: log.Named("reporter"), Registerer: reg,
		})
		if err != nil {
			return fail(fmt.Errorf("invalid POD_NAME or AUTOSCALER_URL: %w", err))
		}
	}

	lns := make([]net.Listener, 3)
	for i, port := range []int{cfg.ServingPort, cfg.AdminPort, cfg.MetricsPort} {
		if lns[i], err = net.Listen("tcp", ":"+strconv.Itoa(port)); err != nil {
			log.Error("cannot listen", zap.Error(err))
			return 1
		}
	}

	d := drain.New(clock.RealClock{}, cfg.DrainQuietPeriod, cfg.DrainTimeout)
	serving := &http.Server{Handler: d.Handler(act), ReadHeaderTimeout: 30 * time.Second}
	// HTTP/2 without TLS (prior knowledge) too, so gRPC clients reach
	// their service through the activator as they do through a pod.
	serving.Protocols = new(http.Protocols)
	serving.Protocols.SetHTTP1(true)
	serving.Protocols.SetUnencryptedHTTP2(true)
	admin := &http.Server{Handler: adminHandler(d, act, src), ReadHeaderTimeout: 5 * time.Second}
	metrics := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 5)
	for i, srv := range []*http.Server{serving, admin, metrics} {
		wg.Go(func() {
			if err := srv.Serve(lns[i]); !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		})
	}
	wg.Go(func() { act.Run(ctx) })
	if rep != nil {
		wg.Go(func() { rep.Run(ctx) })
	}

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	log.Info("activator started", zap.Int("port", cfg.ServingPort), zap.String("services", cfg.ServicesFile))

	code := 0
wait:
	for {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				if err := src.reload(); err != nil {
					log.Error("reload failed; keeping the previous services", zap.Error(err))
				} else {
					log.Info("services reloaded")
				}
				continue
			}
			if !d.Draining() {
				log.Info("signal received: draining", zap.Stringer("signal", sig))
				d.Start()
				continue
			}
			log.Warn("second signal received: stopping without draining", zap.Stringer("signal", sig))
			break wait
		case <-d.Done():
			log.Info("drained", zap.Bool("timedOut", d.TimedOut()))
			break wait
		case err := <-errc:
			log.Error("server failed", zap.Error(err))
			code = 1
			break wait
		}
	}
	sctx, scancel := context.WithTimeout(context.Background(), time.Second)
	defer scancel()
	for _, srv := range []*http.Server{serving, admin, metrics} {
		srv.Shutdown(sctx)
	}
	cancel()
	wg.Wait()
	return code
}

// adminHandler serves liveness, readiness and drain. Readiness waits for
// the first sync of the source (every listed service known to the
// activator), so a new activator is not sent traffic it would 404.
func adminHandler(d *drain.Drainer, act *activator.Activator, src *fileSource) http.Handler {
	var synced atomic.Bool
	ready := func() bool {
		if d.Draining() {
			return false
		}
		if synced.Load() {
			return true
		}
		for _, s := range src.Services() {
			if _, ok := act.Routable(s.Key); !ok {
				return false
			}
		}
		synced.Store(true)
		return true
	}
	mux := http.NewServeMux()
	mux.HandleFunc(healthzPath, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc(network.ReadyPath, func(w http.ResponseWriter, r *http.Request) {
		if !ready() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ready\n")
	})
	mux.HandleFunc(network.DrainPath, func(w http.ResponseWriter, r *http.Request) {
		d.Start()
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, "draining\n")
	})
	return mux
}
