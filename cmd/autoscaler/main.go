// Command autoscaler is Swell's control plane on Kubernetes. Every replica
// serves the admission webhooks (package webhook) with a certificate it
// keeps itself (package kube/certs). One replica, elected through a
// Lease, runs the autoscaling loop (package autoscaler) over the opted-in
// Deployments (package kube/controller), routes their Services
// (package kube/routing) and receives the activators' reports.
// It is configured by environment variables or the equivalent flags (run
// with --help); docs/kubernetes.md describes the whole.
//
// Exit codes: 0 after SIGTERM, 1 on a runtime failure or a lost lead (the
// replica restarts as a follower), 2 on bad configuration.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
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
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/swell-run/swell/autoscaler"
	"github.com/swell-run/swell/autoscaler/collector"
	"github.com/swell-run/swell/autoscaler/scaler"
	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/kube/activatorauth"
	"github.com/swell-run/swell/kube/apiserver"
	"github.com/swell-run/swell/kube/buckets"
	"github.com/swell-run/swell/kube/certs"
	"github.com/swell-run/swell/kube/controller"
	"github.com/swell-run/swell/kube/defaults"
	"github.com/swell-run/swell/kube/inject"
	"github.com/swell-run/swell/kube/routing"
	"github.com/swell-run/swell/kube/webhook"
	"github.com/swell-run/swell/pkg/autoscaling"
	"github.com/swell-run/swell/pkg/envflag"
	"github.com/swell-run/swell/pkg/logging"
	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/service"
	"github.com/swell-run/swell/pkg/shard"
)

// component names the autoscaler to the API server and in Events, where
// `swell status` looks for them.
const component = kube.AutoscalerComponent

func main() {
	os.Exit(run(os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr))
}

func run(args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer) int {
	cfg, err := parseConfig(args, lookupEnv)
	if errors.Is(err, flag.ErrHelp) {
		printUsage(stdout)
		return 0
	}
	fail := func(err error) int { return envflag.Refuse(stderr, "autoscaler", err) }
	if err != nil {
		return fail(err)
	}
	log, err := logging.New(cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return fail(err)
	}
	defer log.Sync()

	rest, err := apiserver.RESTConfig(cfg.Kubeconfig, component)
	if err != nil {
		return fail(err)
	}
	rest.QPS, rest.Burst = float32(cfg.APIQPS), cfg.APIBurst
	client, err := kubernetes.NewForConfig(rest)
	if err != nil {
		return fail(fmt.Errorf("Kubernetes client: %w", err))
	}

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	a := &app{cfg: cfg, log: log, client: client}
	if err := a.run(ctx); err != nil {
		log.Error("autoscaler stopped", zap.Error(err))
		return 1
	}
	return 0
}

// app is one autoscaler replica.
type app struct {
	cfg    config
	log    *zap.Logger
	client kubernetes.Interface

	// synced turns true once the informers have their first lists; leading
	// once this replica holds the lead (sharded: leads a bucket).
	synced, leading atomic.Bool
	// owned are the buckets led, when the services are divided (BUCKETS);
	// buckets leads them, once leadBuckets has made it.
	owned   *shard.Owned
	buckets atomic.Pointer[buckets.Manager]
}

func (a *app) run(ctx context.Context) error {
	cfg, log := a.cfg, a.log
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartStructuredLogging(4)
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: a.client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component, Host: cfg.PodName})

	// The cluster's autoscaling defaults, which the webhooks, the
	// controller and the tick share; every replica keeps them, leading or
	// not, for its webhooks.
	store, err := defaults.New(defaults.Config{Client: a.client, Namespace: cfg.Namespace, Recorder: recorder, Logger: log.Named("defaults")})
	if err != nil {
		return err
	}
	storeErr := make(chan error, 1)
	go func() { storeErr <- store.Run(ctx) }()
	select {
	case <-store.Loaded():
	case err := <-storeErr:
		return fmt.Errorf("autoscaling defaults: %w", err)
	case <-ctx.Done():
		return nil
	}

	// Sharded, this replica autoscales and routes only the services of
	// the buckets it leads.
	var owns func(service.Key) bool
	if cfg.Buckets > 1 {
		if a.owned, err = shard.NewOwned(cfg.Buckets); err != nil {
			return err
		}
		owns = a.owned.Owns
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "swell_autoscaler_buckets_led",
			Help: "Buckets of services this replica leads, of BUCKETS.",
		}, func() float64 { return float64(a.owned.Len()) }))
	}

	factory := informers.NewSharedInformerFactory(a.client, 10*time.Minute)
	sysFactory := informers.NewSharedInformerFactoryWithOptions(a.client, 10*time.Minute, informers.WithNamespace(cfg.Namespace))
	router, err := routing.New(routing.Config{
		Client: a.client, Informers: factory, SystemNamespace: cfg.Namespace,
		Logger: log.Named("routing"), Recorder: recorder, Owns: owns,
		ServicePorts: cfg.ServicePorts, SystemInformers: sysFactory,
	})
	if err != nil {
		return err
	}
	backend, err := controller.NewBackend(controller.BackendConfig{
		Client: a.client, Informers: factory, Router: router, Recorder: recorder,
	})
	if err != nil {
		return err
	}

	// Each activator proves itself with its pod's service-account token,
	// checked with the TokenReview API; its reports must name that pod.
	// Only from an activator pod's address, and only from the pod a token
	// is bound to: Swell's own namespace's pods, watched.
	autoscalerServices := sysFactory.Core().V1().Services().Lister()
	activatorPods, err := activatorauth.NewPods(sysFactory.Core().V1().Pods(), kube.ActivatorServiceAccount)
	if err != nil {
		return err
	}
	reviewer, err := activatorauth.New(activatorauth.Config{
		Client: a.client, Namespace: cfg.Namespace, ServiceAccount: kube.ActivatorServiceAccount,
		Audiences: cfg.ActivatorAudiences, Activators: activatorPods,
	})
	if err != nil {
		return err
	}

	// The tick interval: the flag's if set, else the defaults', reloaded
	// with them.
	tick := cfg.TickInterval
	if tick == 0 {
		tick = store.Current().TickInterval
	}
	log.Info("deciding every service", zap.Duration("tickInterval", tick), zap.Bool("fromDefaults", cfg.TickInterval == 0))

	// A pod's pushed stats are taken as the ready pod its address is
	// (Controller.PodAddr), by the replica that leads its service.
	var ctl *controller.Controller
	pods := collector.PodEndpointConfig{
		Resolver: podResolver(func(svc service.Key, remote netip.AddrPort, claimed string) (string, bool) {
			return ctl.PodAddr(svc, remote, claimed)
		}),
		Route: a.pushRoute,
	}
	as, err := autoscaler.New(autoscaler.Config{
		TickInterval:   tick,
		Backend:        backend,
		Scaler:         scaler.Config{OnEvent: backend.OnEvent},
		Endpoint:       collector.EndpointConfig{Authenticator: reviewer},
		Pods:           pods,
		Registerer:     reg,
		OnNotable:      backend.OnNotable,
		OnGaugeProblem: backend.OnGaugeProblem,
		Memory:         backend,
		KeepInterval:   cfg.KeepInterval,
		Clock:          clock.RealClock{},
		Logger:         log,
	})
	if err != nil {
		return err
	}
	if cfg.TickInterval == 0 {
		follow := func(d autoscaling.Defaults) {
			if err := as.SetTickInterval(d.TickInterval); err != nil {
				log.Warn("tick-interval of the defaults refused; keeping the current one", zap.Error(err))
			}
		}
		store.OnChange(follow)
		follow(store.Current()) // a change made before OnChange
	}

	ctl, err = controller.New(controller.Config{
		Client: a.client, Informers: factory, Router: router, Backend: backend, Scaling: as,
		Defaults: store, Recorder: recorder, Clock: clock.RealClock{}, Logger: log.Named("controller"), Owns: owns,
	})
	if err != nil {
		return err
	}

	// One certificate for both TLS servers: the webhooks' Service and the
	// autoscaler's, which the activators dial.
	certMgr, err := certs.New(certs.Config{
		Client: a.client, Namespace: cfg.Namespace, OtherServices: []string{kube.AutoscalerService}, Logger: log.Named("certs"),
	})
	if err != nil {
		return err
	}
	hooks, err := webhook.New(webhook.Config{
		Inject: inject.Config{Image: cfg.QueueProxyImage, Resources: inject.DefaultResources(), Defaults: autoscaling.DefaultDefaults()},
		// The queue-proxies push their stats to the autoscaler's Service.
		PushURL:  func() string { return pushURL(autoscalerServices, cfg.Namespace) },
		Defaults: store.Current,
		Logger:   log.Named("webhook"),
	})
	if err != nil {
		return err
	}

	servers := a.servers(as, certMgr, reg)
	var wg sync.WaitGroup
	// Room for one error a listener (the status has two) and the
	// certificates'.
	errc := make(chan error, len(servers)+2)
	for i, s := range servers {
		lns, err := a.listen(s)
		if err != nil {
			return err
		}
		if s.srv == nil {
			var ln net.Listener
			s.srv, ln = webhook.Server(hooks, lns[0], certMgr.GetCertificate)
			servers[i].srv, lns = s.srv, []net.Listener{ln}
		}
		for _, ln := range lns {
			wg.Go(func() {
				var err error
				if s.tls {
					err = s.srv.ServeTLS(ln, "", "")
				} else {
					err = s.srv.Serve(ln)
				}
				if !errors.Is(err, http.ErrServerClosed) {
					errc <- err
				}
			})
		}
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		for _, s := range servers {
			s.srv.Shutdown(sctx)
		}
		wg.Wait()
	}()

	wg.Go(func() {
		if err := certMgr.Run(ctx); err != nil && ctx.Err() == nil {
			errc <- fmt.Errorf("webhook certificates: %w", err)
		}
	})
	for _, f := range []informers.SharedInformerFactory{factory, sysFactory} {
		f.Start(ctx.Done())
		defer f.Shutdown()
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return fmt.Errorf("informer for %v did not sync", typ)
			}
		}
	}
	a.synced.Store(true)
	log.Info("autoscaler started; waiting for the lead", zap.String("identity", cfg.PodName))

	if cfg.Buckets > 1 {
		return a.leadBuckets(ctx, recorder, router, ctl, as, errc)
	}

	lost := make(chan struct{})
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: cfg.Namespace, Name: kube.LeaseName},
			Client:     a.client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: cfg.PodName, EventRecorder: recorder},
		},
		LeaseDuration: cfg.LeaseDuration,
		RenewDeadline: cfg.RenewDeadline,
		RetryPeriod:   cfg.RetryPeriod,
		// On SIGTERM the lease is released at once, so a follower takes
		// over within its retry period rather than a lease duration.
		ReleaseOnCancel: true,
		Name:            kube.LeaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				if err := a.lead(ctx, router, ctl, as); err != nil && ctx.Err() == nil {
					errc <- err
				}
			},
			OnStoppedLeading: func() { close(lost) },
			OnNewLeader: func(identity string) {
				log.Info("leader", zap.String("identity", identity), zap.Bool("self", identity == cfg.PodName))
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	wg.Go(func() { elector.Run(ctx) })

	select {
	case <-ctx.Done():
		log.Info("signal received: stopping")
		return nil
	case <-lost:
		if ctx.Err() != nil {
			return nil
		}
		// Its informers and loop hold a leader's state; a restart as a
		// follower is the simple way to drop it.
		return errors.New("lost the lead")
	case err := <-errc:
		return err
	}
}

// pushURL is where injected queue-proxies push their stats: the
// autoscaler's Service at its ClusterIP and push port, as services lists
// it now, or, while it does not, the Service's DNS name. The address
// needs no cluster DNS in the pod, and it stays for the Service's life.
func pushURL(services corelisters.ServiceLister, namespace string) string {
	svc, err := services.Services(namespace).Get(kube.AutoscalerService)
	if err != nil {
		return inject.PushURL(namespace)
	}
	ip, err := netip.ParseAddr(svc.Spec.ClusterIP)
	if err != nil {
		return inject.PushURL(namespace) // none, or "None"
	}
	for _, p := range svc.Spec.Ports {
		if p.Name == kube.PortNamePush && p.Port > 0 {
			return "ws://" + net.JoinHostPort(ip.String(), strconv.Itoa(int(p.Port))) + network.PodPushPath
		}
	}
	return inject.PushURL(namespace)
}

// leaderPorts are the ports this replica publishes while it leads.
func (a *app) leaderPorts() controller.LeaderPorts {
	return controller.LeaderPorts{Reports: a.cfg.Port, Push: a.cfg.PushPort}
}

// podResolver is a collector.PodResolver made of a function.
type podResolver func(svc service.Key, remote netip.AddrPort, claimed string) (string, bool)

func (f podResolver) PodAddr(svc service.Key, remote netip.AddrPort, claimed string) (string, bool) {
	return f(svc, remote, claimed)
}

// pushRoute says where a pod of svc pushes its stats: here, when this
// replica leads svc (the one leader, or the leader of svc's bucket);
// else the leader of svc's bucket, found from its Lease and its Pod, at
// its push port; else nowhere yet (the pod retries).
func (a *app) pushRoute(svc service.Key) (here bool, elsewhere string) {
	if a.owned == nil {
		return a.leading.Load(), ""
	}
	if a.owned.Owns(svc) {
		return true, ""
	}
	mgr := a.buckets.Load()
	if mgr == nil {
		return false, ""
	}
	ip, ok := mgr.Leader(shard.OfKey(svc, a.cfg.Buckets))
	if !ok || ip == a.cfg.PodIP {
		// Led here by the Lease, not yet by the loop: a moment's wait.
		return false, ""
	}
	return false, net.JoinHostPort(ip, strconv.Itoa(a.cfg.PushPort))
}

// lead runs what only the leader does, until ctx ends.
func (a *app) lead(ctx context.Context, router *routing.Router, ctl *controller.Controller, as *autoscaler.Autoscaler) error {
	cfg, log := a.cfg, a.log
	log.Info("leading")
	err := wait.ExponentialBackoffWithContext(ctx, wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Cap: 5 * time.Second, Steps: 1 << 30},
		func(ctx context.Context) (bool, error) {
			if err := controller.PublishLeader(ctx, a.client, cfg.Namespace, cfg.PodName, cfg.PodIP, a.leaderPorts()); err != nil {
				log.Warn("cannot publish this replica as the autoscaler endpoint; retrying", zap.Error(err))
				return false, nil
			}
			return true, nil
		})
	if err != nil {
		return err
	}
	a.leading.Store(true)
	return runLoops(ctx, cfg.Workers, router, ctl, as)
}

// runLoops runs the router, the controller and the autoscaling loop until
// ctx ends or one fails: the first to fail stops the others, and runLoops
// returns only once all have.
func runLoops(ctx context.Context, workers int, router *routing.Router, ctl *controller.Controller, as *autoscaler.Autoscaler) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 3)
	wg.Go(func() { errc <- router.Run(ctx, workers) })
	wg.Go(func() { errc <- ctl.Run(ctx, workers) })
	wg.Go(func() { errc <- as.Run(ctx) })
	var first error
	select {
	case <-ctx.Done():
	case first = <-errc:
	}
	cancel()
	wg.Wait()
	return first
}

// leadBuckets is the sharded replica's part, until ctx ends or errc
// reports a failure: the router, the controller and the loop run from the
// start, limited to the buckets led (a.owned); kube/buckets takes and
// gives back buckets, each published for the activators when taken. A
// bucket taken is resynced, so its Deployments join the loop at their
// running scale; a bucket lost or given back leaves it, its Deployments
// left as they are for the replica that takes it.
func (a *app) leadBuckets(ctx context.Context, recorder record.EventRecorder, router *routing.Router, ctl *controller.Controller,
	as *autoscaler.Autoscaler, errc chan error) error {
	cfg, log := a.cfg, a.log
	peers, err := labels.Parse(cfg.Peers)
	if err != nil {
		return fmt.Errorf("PEER_SELECTOR: %w", err)
	}
	n := cfg.Buckets
	inBucket := func(b int) func(service.Key) bool {
		return func(k service.Key) bool { return shard.OfKey(k, n) == b }
	}
	mgr, err := buckets.New(buckets.Config{
		Client: a.client, Namespace: cfg.Namespace, Identity: cfg.PodName, Buckets: n, Peers: peers,
		LeaseDuration: cfg.LeaseDuration, RenewDeadline: cfg.RenewDeadline, RetryPeriod: cfg.RetryPeriod,
		Recorder: recorder, Logger: log.Named("buckets"),
		OnStarted: func(ctx context.Context, b int) {
			a.owned.Add(b)
			a.leading.Store(true)
			router.Resync(inBucket(b))
			ctl.Resync(inBucket(b))
			wait.ExponentialBackoffWithContext(ctx, wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Cap: 5 * time.Second, Steps: 1 << 30},
				func(ctx context.Context) (bool, error) {
					err := controller.PublishBucketLeader(ctx, a.client, cfg.Namespace, cfg.PodName, cfg.PodIP, a.leaderPorts(), b, n)
					if err != nil {
						log.Warn("cannot publish this replica as the leader of a bucket; retrying", zap.Int("bucket", b), zap.Error(err))
						return false, nil
					}
					return true, nil
				})
		},
		OnStopped: func(b int) {
			a.owned.Remove(b)
			a.leading.Store(a.owned.Len() > 0)
			// Its pods push to the bucket's next leader.
			as.ClosePushes(inBucket(b))
			router.Resync(inBucket(b))
			ctl.Resync(inBucket(b))
		},
	})
	if err != nil {
		return err
	}
	a.buckets.Store(mgr)
	log.Info("autoscaler started; dividing the services", zap.String("identity", cfg.PodName), zap.Int("buckets", n))
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel() // the Leases are released as the elections end
		wg.Wait()
	}()
	wg.Go(func() {
		if err := runLoops(ctx, cfg.Workers, router, ctl, as); err != nil && ctx.Err() == nil {
			errc <- err
		}
	})
	wg.Go(func() {
		if err := mgr.Run(ctx); err != nil && ctx.Err() == nil {
			errc <- err
		}
	})
	select {
	case <-ctx.Done():
		log.Info("signal received: stopping")
		return nil
	case err := <-errc:
		return err
	}
}

// server is one of a replica's servers.
type server struct {
	port int
	// srv is nil for the webhooks': package webhook builds it on its
	// listener.
	srv *http.Server
	tls bool
	// loopback listens on 127.0.0.1 and ::1 only: only a process in the
	// pod's network namespace reaches it, whatever the CNI enforces, and
	// from outside the pod only through kubectl port-forward, which RBAC
	// governs (pods/portforward in Swell's namespace).
	loopback bool
}

// servers are a replica's servers. Every one bounds how long a connection
// may take to send its headers and how long it may sit idle, so no caller
// holds the replica's goroutines for long; the webhooks' server has the
// bounds of package webhook besides. The activators' websockets, once
// upgraded, live as long as the activator keeps them; they travel over
// TLS, as their bearer tokens would be worth stealing. The status names
// every tenant's services, their pods and their load: it is not served on
// the activators' port, which every pod may reach, but on loopback.
func (a *app) servers(as *autoscaler.Autoscaler, certMgr *certs.Manager, reg prometheus.Gatherer) []server {
	cfg := a.cfg
	status := http.NewServeMux()
	status.Handle(network.AutoscalerStatusPath, as.StatusHandler(a.leading.Load))
	return []server{
		{port: cfg.Port, tls: true, srv: &http.Server{
			Handler: a.leaderOnly(as.ReportHandler()), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
			TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: certMgr.GetCertificate},
			// HTTP/1.1 only: the websocket upgrade needs nothing more.
			TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
		}},
		{port: cfg.PushPort, srv: &http.Server{Handler: a.pushes(as.PodHandler()), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}},
		{port: cfg.WebhookPort, tls: true},
		{port: cfg.AdminPort, srv: &http.Server{Handler: a.admin(certMgr), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}},
		{port: cfg.StatusPort, loopback: true, srv: &http.Server{Handler: status, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}},
		{port: cfg.MetricsPort, srv: &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 2 * time.Minute}},
	}
}

// listen opens s's listeners: one on every address, or on loopback
// 127.0.0.1 and, where the pod has IPv6, ::1 on the same port. Without
// ::1 it serves IPv4 alone; kubectl port-forward dials 127.0.0.1 first.
func (a *app) listen(s server) ([]net.Listener, error) {
	if !s.loopback {
		ln, err := net.Listen("tcp", ":"+strconv.Itoa(s.port))
		if err != nil {
			return nil, err
		}
		return []net.Listener{ln}, nil
	}
	v4, err := net.Listen("tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)))
	if err != nil {
		return nil, err
	}
	port := v4.Addr().(*net.TCPAddr).Port
	v6, err := net.Listen("tcp6", net.JoinHostPort("::1", strconv.Itoa(port)))
	if err != nil {
		a.log.Info("serving on 127.0.0.1 only, not ::1", zap.Int("port", port), zap.Error(err))
		return []net.Listener{v4}, nil
	}
	return []net.Listener{v4, v6}, nil
}

// pushes serves the pods' push endpoint, h, at network.PodPushPath, and
// 404 elsewhere. Which replica takes a pod's pushes is h's own routing
// (pushRoute): a follower redirects them, or has them retry.
func (a *app) pushes(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET "+network.PodPushPath, h)
	return mux
}

// leaderOnly serves h on the leader. Activators reach only the leader (it
// publishes its address); one that dialled a follower, at an address gone
// stale, gets a 503 that says so.
func (a *app) leaderOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !a.leading.Load() {
			w.Header().Set(network.ReasonHeader, "not-leader")
			http.Error(w, "this autoscaler replica does not hold the lead; the Service "+kube.AutoscalerService+" points at the one that does", http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// admin serves liveness and readiness. A replica is ready once its
// informers synced and it holds a webhook certificate: it can then admit
// requests, whether or not it leads.
func (a *app) admin(certMgr *certs.Manager) http.Handler {
	mux := http.NewServeMux()
	if a.cfg.Profile {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	}
	mux.HandleFunc("GET "+healthzPath, func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET "+network.ReadyPath, func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case !a.synced.Load():
			http.Error(w, "informers not synced", http.StatusServiceUnavailable)
		case !certMgr.Ready():
			http.Error(w, "no webhook certificate yet", http.StatusServiceUnavailable)
		default:
			fmt.Fprintf(w, "ready (leading: %t)\n", a.leading.Load())
		}
	})
	return mux
}
