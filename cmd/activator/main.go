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
	"github.com/swell-run/swell/pkg/envflag"
	"github.com/swell-run/swell/pkg/logging"
)

// poker is the reporter to the autoscaler: a Reporter or a Pool.
type poker interface {
	Poke(key string)
	Run(ctx context.Context) error
}

func main() {
	os.Exit(run(os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr))
}

func run(args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer) int {
	cfg, err := parseConfig(args, lookupEnv)
	if errors.Is(err, flag.ErrHelp) {
		printUsage(stdout)
		return 0
	}
	fail := func(err error) int { return envflag.Refuse(stderr, "activator", err) }
	if err != nil {
		return fail(err)
	}
	log, err := logging.New(cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return fail(err)
	}
	defer log.Sync()

	// The services come from SERVICES_FILE, or from the cluster.
	var (
		src     activator.Source
		fileSrc *fileSource
		kmode   *kubeMode
	)
	if cfg.kubernetesMode() {
		if kmode, err = newKubeMode(cfg, log); err != nil {
			return fail(err)
		}
		src = kmode.src
	} else {
		if fileSrc, err = newFileSource(cfg.ServicesFile); err != nil {
			return fail(err)
		}
		src = fileSrc
	}
	// The credential presented to the autoscaler: the configured token,
	// else, in Kubernetes mode, the pod's service-account token, which
	// names this activator's pod.
	var token, tokenFile string
	if cfg.AutoscalerURL != "" {
		if cfg.tokenSet() || kmode == nil {
			token, tokenFile, err = cfg.credentials()
		} else {
			token, tokenFile, err = kmode.credentials()
		}
		if err != nil {
			return fail(err)
		}
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	// The reporter needs the activator (its Source) and the activator
	// needs the reporter (its Poke); the closure breaks the cycle. On
	// Kubernetes the reporter is a pool, one per autoscaler replica that
	// leads a bucket of services (one, the leader, unless the autoscaler
	// is sharded); else a single reporter to AUTOSCALER_URL.
	var rep atomic.Pointer[poker]
	acfg := activator.Config{
		Source:           src,
		Name:             cfg.PodName,
		ClusterDomain:    cfg.ClusterDomain,
		QueueDepth:       cfg.QueueDepth,
		CallerQueueDepth: cfg.CallerQueueDepth,
		MaxHeld:          cfg.MaxHeld,
		QueueTimeout:     cfg.RequestTimeout,
		Poke: func(key string) {
			if r := rep.Load(); r != nil {
				(*r).Poke(key)
			}
		},
		Registerer: reg,
		Logger:     log,
	}
	// The services' own ports are served as the serving port is, by the
	// same server (made below, once the activator exists).
	var srvs servers
	if kmode != nil {
		kmode.configure(&acfg)
		acfg.ServePort = func(ln net.Listener) error { return srvs.serving.Serve(ln) }
	}
	act, err := activator.New(acfg)
	if err != nil {
		return fail(err)
	}
	var pool *reporter.Pool
	if cfg.AutoscalerURL != "" {
		rc := reporter.Config{
			URL: cfg.AutoscalerURL, Token: token, TokenFile: tokenFile, Name: cfg.PodName,
			Source: act, Logger: log.Named("reporter"), Registerer: reg,
		}
		var p poker
		if kmode != nil {
			pool, err = reporter.NewPool(reporter.PoolConfig{Config: rc, DialerFor: kmode.dialerFor})
			p = pool
		} else {
			p, err = reporter.New(rc)
		}
		if err != nil {
			return fail(fmt.Errorf("invalid POD_NAME or AUTOSCALER_URL: %w", err))
		}
		rep.Store(&p)
	}

	lns := make([]net.Listener, 3)
	for i, port := range []int{cfg.ServingPort, cfg.AdminPort, cfg.MetricsPort} {
		if lns[i], err = net.Listen("tcp", ":"+strconv.Itoa(port)); err != nil {
			log.Error("cannot listen", zap.Error(err))
			return 1
		}
	}

	d := drain.New(clock.RealClock{}, cfg.DrainQuietPeriod, cfg.DrainTimeout)
	srvs = newServers(d.Handler(act), adminHandler(d, act), promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 5)
	for i, srv := range srvs.all() {
		wg.Go(func() {
			if err := srv.Serve(lns[i]); !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		})
	}
	if kmode != nil {
		wg.Go(func() { kmode.src.Run(ctx) })
		// A new leader publishes itself: the pool connects to it at once
		// (and leaves a replica that leads nothing any more).
		if pool != nil {
			wg.Go(func() {
				for {
					select {
					case <-kmode.src.AutoscalerChanged():
						pool.SetLeaders(kmode.src.AutoscalerLeaders())
					case <-ctx.Done():
						return
					}
				}
			})
		}
		// The activator applies the services once the caches hold them
		// all: until then it is not ready (act.Synced).
		wg.Go(func() {
			if kmode.src.WaitForSync(ctx) {
				log.Info("Kubernetes caches synced", zap.Int("services", len(kmode.src.Services())))
				act.Run(ctx)
			}
		})
	} else {
		wg.Go(func() { act.Run(ctx) })
	}
	// The reporter starts once the activator has its services; in
	// Kubernetes mode the autoscaler's address comes from the same caches.
	if r := rep.Load(); r != nil {
		wg.Go(func() {
			select {
			case <-act.Synced():
				if pool != nil {
					pool.SetLeaders(kmode.src.AutoscalerLeaders())
				}
				(*r).Run(ctx)
			case <-ctx.Done():
			}
		})
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	if kmode != nil {
		log.Info("activator started", zap.Int("port", cfg.ServingPort), zap.String("services", "kubernetes"),
			zap.String("systemNamespace", cfg.SystemNamespace), zap.String("autoscaler", cfg.AutoscalerURL))
	} else {
		log.Info("activator started", zap.Int("port", cfg.ServingPort), zap.String("services", cfg.ServicesFile))
	}

	code := 0
	// A drain may have started before the first signal (from loopback,
	// an exec preStop hook): that signal joins it. Only a second signal
	// stops at once.
	signalled := false
wait:
	for {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				if fileSrc == nil {
					log.Info("SIGHUP ignored: the services come from Kubernetes")
					continue
				}
				if err := fileSrc.reload(); err != nil {
					log.Error("reload failed; keeping the previous services", zap.Error(err))
				} else {
					log.Info("services reloaded")
				}
				continue
			}
			if !signalled {
				signalled = true
				log.Info("signal received: draining", zap.Stringer("signal", sig), zap.Bool("alreadyDraining", d.Draining()))
				d.Start()
				continue
			}
			log.Warn("second signal received: stopping without draining", zap.Stringer("signal", sig))
			break wait
		case <-d.Done():
			log.Info("drained", zap.Bool("timedOut", d.TimedOut()))
			break wait
		case err := <-errc:
			log.Error("stopping after a failure", zap.Error(err))
			code = 1
			break wait
		}
	}
	sctx, scancel := context.WithTimeout(context.Background(), time.Second)
	defer scancel()
	for _, srv := range srvs.all() {
		srv.Shutdown(sctx)
	}
	cancel()
	wg.Wait()
	return code
}
