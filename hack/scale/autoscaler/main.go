// Command autoscaler is Swell's autoscaler wired as cmd/autoscaler wires
// it, minus Kubernetes, for measuring it at scale against the fake fleet
// (hack/scale/fleet): the real loop, collector, activator endpoint and
// executor (package autoscaler), over a recording backend in place of the
// Deployments and Services. It reads the fleet's address file (package
// hack/scale/pods), adds every service and its ready pods as the
// controller would from the informers, and serves:
//
//   - on -listen, the autoscaler's own handler (the activators' websocket
//     at /activator, its status at /status, and with -push the pods'
//     websocket at /pods), in plain HTTP where the cluster's activators'
//     is TLS;
//   - on -admin, Prometheus metrics at /metrics, pprof at /debug/pprof/,
//     the backend's totals at /backend (?since=RFC 3339 adds writes per
//     second), the first scale write of a service after a time at
//     /writes?service=ns/name&after=RFC3339, and /ready.
//
// With -buckets n (package shard), it is one replica of a sharded
// autoscaler: it adds, scrapes and decides only the services of the
// buckets -lead names, as a replica leading those buckets does. The lead
// is fixed for the process's life: which replica leads which bucket is
// Kubernetes' part (kube/buckets, a Lease per bucket), tested on a
// cluster (hack/cluster/e2e).
//
// With -push, the pods may push their stats too (collector.PodEndpoint,
// on -listen at network.PodPushPath, as cmd/autoscaler serves it on its
// push port): a connection is taken as the pod it claims if that is a
// ready pod of the service (the backend's; Kubernetes checks the source
// address against the pods informer), and a replica redirects the pods of
// the services it does not lead to the leader of their bucket, which
// -leaders names.
//
// What it leaves out is the Kubernetes side: informers, leader election,
// webhooks, Events, TLS and TokenReview (a shared token stands for it,
// as in swell local).
//
//	autoscaler -pods pods.jsonl -listen 127.0.0.1:8080 -admin 127.0.0.1:9091 -token-file token
//	autoscaler -pods pods.jsonl -buckets 10 -lead 0,3,6,9 ...
//	autoscaler -pods pods.jsonl -push -buckets 10 -lead 0,3,6,9 -leaders 127.0.0.1:8080,127.0.0.1:8081,...
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
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

	"github.com/swell-run/swell/autoscaler"
	"github.com/swell-run/swell/autoscaler/collector"
	"github.com/swell-run/swell/autoscaler/plan"
	"github.com/swell-run/swell/hack/scale/fdlimit"
	"github.com/swell-run/swell/hack/scale/pods"
	"github.com/swell-run/swell/pkg/autoscaling"
	"github.com/swell-run/swell/pkg/logging"
	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/service"
	"github.com/swell-run/swell/pkg/shard"
)

// fdReserve is the files asked for beside the pods' connections: the
// activators', the admin port's, the logs', dials. Where the limit is too
// low for a push connection from every pod, fdKept are kept from them.
const (
	fdReserve = 4096
	fdKept    = 1024
)

// Paths of the admin port beside /metrics and /debug/pprof/.
const (
	readyPath   = "/ready"
	backendPath = "/backend"
	writesPath  = "/writes"
)

type options struct {
	pods             string
	listen, admin    string
	token, tokenFile string
	tick             time.Duration
	logLevel         string
	logFormat        string
	// lead are the buckets this process leads, of lead.Buckets().
	lead *shard.Owned
	// push takes the pods' pushed stats; leaders are the -listen
	// addresses of each bucket's leader, where pods of the services of
	// other buckets are sent.
	push    bool
	leaders []string
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	o, err := parseFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "autoscaler: %v\n", err)
		return 2
	}
	log, err := logging.New(o.logFormat, o.logLevel)
	if err != nil {
		fmt.Fprintf(os.Stderr, "autoscaler: %v\n", err)
		return 2
	}
	defer log.Sync()
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	if err := serve(ctx, o, log); err != nil {
		log.Error("autoscaler stopped", zap.Error(err))
		return 1
	}
	return 0
}

func parseFlags(args []string) (options, error) {
	fs := flag.NewFlagSet("autoscaler", flag.ContinueOnError)
	var o options
	fs.StringVar(&o.pods, "pods", "", "the fleet's address `file` (JSON lines), required")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:"+strconv.Itoa(network.DefaultAutoscalerPort), "`address` of the activator endpoint and the status")
	fs.StringVar(&o.admin, "admin", "127.0.0.1:9091", "`address` of metrics, pprof and the backend's figures")
	fs.StringVar(&o.token, "token", "", "bearer token the activators present")
	fs.StringVar(&o.tokenFile, "token-file", "", "`file` holding the token, instead of -token")
	fs.DurationVar(&o.tick, "tick-interval", autoscaling.DefaultDefaults().TickInterval, "how often every service is decided")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error (the cluster's default: info)")
	fs.StringVar(&o.logFormat, "log-format", logging.FormatJSON, "json or console")
	buckets := fs.Int("buckets", 1, fmt.Sprintf("`n` buckets the services are divided into (1 to %d), as the autoscaler's BUCKETS", shard.MaxBuckets))
	lead := fs.String("lead", "", "comma-separated `buckets` this process leads, each 0 to n-1 (default all)")
	fs.BoolVar(&o.push, "push", false, "take the pods' pushed stats on -listen at "+network.PodPushPath)
	leaders := fs.String("leaders", "", "comma-separated `addresses` (host:port, as -listen) of each bucket's leader, in bucket order, where -push redirects the pods of the services of buckets not led here")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if o.pods == "" {
		errs = append(errs, errors.New("-pods is required: the file the fleet wrote"))
	}
	if (o.token == "") == (o.tokenFile == "") {
		errs = append(errs, errors.New("one of -token and -token-file is required"))
	}
	var err error
	if o.lead, err = parseLead(*buckets, *lead); err != nil {
		errs = append(errs, err)
	}
	if *leaders != "" {
		if o.leaders, err = parseLeaders(*leaders, *buckets); err != nil {
			errs = append(errs, err)
		}
		if !o.push {
			errs = append(errs, errors.New("-leaders is where -push sends pods: it needs -push"))
		}
	}
	return o, errors.Join(errs...)
}

// parseLeaders reads -leaders: a host:port for each of the n buckets.
// Every bad element is reported.
func parseLeaders(s string, n int) ([]string, error) {
	var leaders []string
	var errs []error
	for a := range strings.SplitSeq(s, ",") {
		a = strings.TrimSpace(a)
		if host, port, err := net.SplitHostPort(a); err != nil || host == "" || port == "" {
			errs = append(errs, fmt.Errorf("-leaders: bucket %d's leader %q: accepted is host:port", len(leaders), a))
		}
		leaders = append(leaders, a)
	}
	if len(leaders) != n {
		errs = append(errs, fmt.Errorf("-leaders: %d addresses for %d buckets (-buckets): accepted is one for each bucket", len(leaders), n))
	}
	return leaders, errors.Join(errs...)
}

// pushRoute is PodEndpointConfig.Route: a pod pushes here if its service
// is in a bucket led here, else to its bucket's leader (none known
// without -leaders: the pod retries).
func pushRoute(lead *shard.Owned, leaders []string) func(service.Key) (bool, string) {
	return func(svc service.Key) (bool, string) {
		b := shard.OfKey(svc, lead.Buckets())
		switch {
		case lead.Has(b):
			return true, ""
		case b < len(leaders):
			return false, leaders[b]
		}
		return false, ""
	}
}

// parseLead reads -buckets and -lead: the buckets led, out of n; every
// bucket when lead is empty. Every bad element is reported.
func parseLead(n int, lead string) (*shard.Owned, error) {
	owned, err := shard.NewOwned(n)
	if err != nil {
		return nil, fmt.Errorf("-buckets: %w", err)
	}
	if strings.TrimSpace(lead) == "" {
		for b := range n {
			owned.Add(b)
		}
		return owned, nil
	}
	var errs []error
	for f := range strings.SplitSeq(lead, ",") {
		b, err := strconv.Atoi(strings.TrimSpace(f))
		switch {
		case err != nil || b < 0 || b >= n:
			errs = append(errs, fmt.Errorf("-lead: bucket %q: accepted is a number from 0 to %d (-buckets %d)", f, n-1, n))
		case !owned.Add(b):
			errs = append(errs, fmt.Errorf("-lead: bucket %d is named twice", b))
		}
	}
	return owned, errors.Join(errs...)
}

// ledServices are the services of svcs in the buckets lead leads.
func ledServices(svcs []pods.Service, lead *shard.Owned) []pods.Service {
	if lead.Len() == lead.Buckets() {
		return svcs
	}
	var out []pods.Service
	for _, s := range svcs {
		if lead.Has(shard.Of(s.Service, lead.Buckets())) {
			out = append(out, s)
		}
	}
	return out
}

func serve(ctx context.Context, o options, log *zap.Logger) error {
	all, err := pods.ReadFile(o.pods)
	if err != nil {
		return err
	}
	svcs := ledServices(all, o.lead)
	npods := 0
	for _, s := range svcs {
		npods += len(s.Pods)
	}
	// A connection to every pod the collector scrapes, and some room;
	// pushing, as many again: a pod's scrape connection stays open until
	// it idles out, after its pushes took over. In a cluster a
	// container's hard limit (the runtime's, typically 524288 or more, to
	// which Go lifts the soft one) is ample; where the limit is lower and
	// cannot be raised, the autoscaler runs into it as it would, and the
	// measurement shows how.
	need := uint64(npods + fdReserve)
	if o.push {
		need += uint64(npods)
	}
	before, after, err := fdlimit.Raise(need)
	if err != nil {
		log.Warn("the open-file limit is too low for a connection to every pod", zap.Error(err))
	}
	log.Info("open-file limit", zap.Uint64("soft", before.Cur), zap.Uint64("hard", before.Max),
		zap.Uint64("raisedSoft", after.Cur), zap.Uint64("raisedHard", after.Max))
	token := o.token
	if o.tokenFile != "" {
		b, err := os.ReadFile(o.tokenFile)
		if err != nil {
			return fmt.Errorf("-token-file: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if o.lead.Buckets() > 1 {
		// As cmd/autoscaler's, though the lead here never changes.
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "swell_autoscaler_buckets_led",
			Help: "Buckets of services this replica leads, of BUCKETS.",
		}, func() float64 { return float64(o.lead.Len()) }))
	}
	b := newBackend(clock.RealClock{})
	specs, err := addServices(b, svcs)
	if err != nil {
		return err
	}
	// As cmd/autoscaler builds it, but for the backend and the
	// authentication, and without the Events its callbacks record
	// (Scaler.OnEvent, OnNotable, OnGaugeProblem) or the memory a
	// Deployment's annotation keeps (the kpa class learns nothing).
	var pushes collector.PodEndpointConfig
	if o.push {
		pushes = collector.PodEndpointConfig{Resolver: b, Route: pushRoute(o.lead, o.leaders)}
		if limit := after.Cur; limit < uint64(npods+fdKept) {
			// Push connections up to the limit would leave no file for
			// the activators, the metrics or the scrapes of the pods
			// beyond: those pods are answered 503, retry, and are
			// scraped meanwhile.
			pushes.MaxConnections = int(max(limit, 2*fdKept) - fdKept)
			log.Warn("the open-file limit is too low for a push connection from every pod: taking fewer", zap.Int("maxConnections", pushes.MaxConnections), zap.Int("pods", npods))
		}
	}
	as, err := autoscaler.New(autoscaler.Config{
		TickInterval: o.tick,
		Backend:      b,
		Endpoint:     collector.EndpointConfig{Tokens: []string{token}},
		Pods:         pushes,
		Registerer:   reg,
		Clock:        clock.RealClock{},
		Logger:       log,
	})
	if err != nil {
		return err
	}
	b.loop = as
	// What the controller does as its informers list the Deployments and
	// their EndpointSlices.
	for i, s := range svcs {
		key, _ := service.Parse(s.Service)
		as.Upsert(key, specs[i])
		if ready := b.ready(key); len(ready) > 0 {
			as.SetPods(key, ready)
		}
	}

	var ready atomic.Bool
	servers := []struct {
		addr string
		srv  *http.Server
	}{
		// The cluster's bounds (cmd/autoscaler).
		{o.listen, &http.Server{Handler: as.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}},
		{o.admin, &http.Server{Handler: admin(reg, b, &ready), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 2 * time.Minute}},
	}
	var wg sync.WaitGroup
	errc := make(chan error, len(servers)+1)
	for _, s := range servers {
		ln, err := net.Listen("tcp", s.addr)
		if err != nil {
			return err
		}
		wg.Go(func() {
			if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		})
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		for _, s := range servers {
			s.srv.Shutdown(sctx)
		}
		wg.Wait()
	}()

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	wg.Go(func() {
		if err := as.Run(runCtx); err != nil {
			errc <- err
		}
	})
	ready.Store(true)
	log.Info("autoscaler harness running", zap.Int("services", len(svcs)), zap.Int("pods", npods),
		zap.Int("buckets", o.lead.Buckets()), zap.Ints("lead", o.lead.List()), zap.Int("fleetServices", len(all)),
		zap.String("listen", o.listen), zap.String("admin", o.admin), zap.Bool("push", o.push), zap.Strings("leaders", o.leaders))
	select {
	case <-ctx.Done():
		log.Info("signal received: stopping")
		return nil
	case err := <-errc:
		return err
	}
}

// addServices adds each service to the backend in the state its kind
// starts in, and returns each one's spec: the cluster's defaults, and for
// an idle service a min-scale of all its pods (kept warm, as a min-scale
// schedule keeps a service in its hours).
func addServices(b *backend, svcs []pods.Service) ([]autoscaling.Spec, error) {
	specs := make([]autoscaling.Spec, len(svcs))
	warm := map[int]autoscaling.Spec{} // by min-scale
	for i, s := range svcs {
		key, err := service.Parse(s.Service)
		if err != nil {
			return nil, err
		}
		specs[i] = autoscaling.DefaultSpec()
		st := plan.Status{Desired: len(s.Pods), Route: plan.RoutePods, Requested: plan.RoutePods}
		switch s.Kind {
		case pods.KindBursting, pods.KindZero:
			st = plan.Status{Route: plan.RouteActivator, Requested: plan.RouteActivator}
		case pods.KindIdle:
			spec, ok := warm[len(s.Pods)]
			if !ok {
				keys := map[string]string{autoscaling.Prefix + autoscaling.KeyMinScale: strconv.Itoa(len(s.Pods))}
				if spec, err = autoscaling.Parse(keys, 0, autoscaling.DefaultDefaults()); err != nil {
					return nil, fmt.Errorf("service %s: %w", key, err)
				}
				warm[len(s.Pods)] = spec
			}
			specs[i] = spec
		}
		b.add(key, s.Pods, st)
	}
	return specs, nil
}

// admin serves metrics, pprof and the backend's figures.
func admin(reg *prometheus.Registry, b *backend, ready *atomic.Bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(network.MetricsPath, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("GET "+readyPath, func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET "+backendPath, func(w http.ResponseWriter, r *http.Request) {
		var since time.Time
		if s := r.URL.Query().Get("since"); s != "" {
			var err error
			if since, err = time.Parse(time.RFC3339Nano, s); err != nil {
				http.Error(w, fmt.Sprintf("since %q: accepted is an RFC 3339 time", s), http.StatusBadRequest)
				return
			}
		}
		writeJSON(w, http.StatusOK, b.totals(since))
	})
	mux.HandleFunc("GET "+writesPath, func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		key, kerr := service.Parse(q.Get("service"))
		after, aerr := time.Parse(time.RFC3339Nano, q.Get("after"))
		if err := errors.Join(kerr, aerr); err != nil {
			http.Error(w, fmt.Sprintf("writes: service=namespace/name and after=RFC 3339 time are required: %v", err), http.StatusBadRequest)
			return
		}
		t, ok := b.firstScaleAfter(key, after)
		if !ok {
			http.Error(w, fmt.Sprintf("no scale write of %s after %s (yet)", key, after.Format(time.RFC3339Nano)), http.StatusNotFound)
			return
		}
		writeJSON(w, http.StatusOK, struct {
			Service string    `json:"service"`
			Time    time.Time `json:"time"`
		}{key.String(), t})
	})
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}
