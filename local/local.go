// Package local runs Swell's whole data plane on one machine: the real
// activator and autoscaler in process, and for each replica of each service
// a real queue-proxy process in front of one process of the service's
// command. It is what `swell local` runs; docs/local.md describes it.
//
// The pieces, as on Kubernetes: traffic enters at the front door (a
// cluster's Service), which sends it through the activator or, once the
// autoscaler has taken the activator out of the path, straight to a ready
// replica. The autoscaler scrapes the replicas' queue-proxies, hears from
// the activator over its websocket on the admin port, and scales through
// the local backend, which starts and stops replicas (a Deployment's part).
package local

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/swell-run/swell/activator"
	"github.com/swell-run/swell/activator/reporter"
	"github.com/swell-run/swell/autoscaler"
	"github.com/swell-run/swell/autoscaler/collector"
	"github.com/swell-run/swell/autoscaler/scaler"
	"github.com/swell-run/swell/local/config"
	"github.com/swell-run/swell/local/dashboard"
	"github.com/swell-run/swell/local/replica"
	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/service"
	"github.com/swell-run/swell/pkg/stats"
	"github.com/swell-run/swell/queueproxy"
)

// Defaults of Config.
const (
	DefaultPort      = 8080
	DefaultAdminPort = 8081
	// DefaultShutdownTimeout bounds the wait for requests in flight when
	// swell local stops, before the replicas are stopped.
	DefaultShutdownTimeout = 30 * time.Second
)

// Config configures a Server.
type Config struct {
	// File is the services to run and the defaults of their autoscaling.
	File *config.File
	// Address is the host the front door and the admin port bind
	// ("127.0.0.1" when empty; "0.0.0.0" serves other machines too).
	Address string
	// Port is the front door's port (DefaultPort when 0; -1 for any free
	// port). AdminPort serves the dashboard, Status, the autoscaler's
	// activator endpoint and metrics (DefaultAdminPort when 0; -1 any).
	Port, AdminPort int
	// QueueProxy is the argv that runs a queue-proxy (`swell queue-proxy`).
	QueueProxy []string
	// Output receives the replicas' prefixed output and the scaling events.
	Output io.Writer
	// Log receives the components' own logs.
	Log *zap.Logger
	// QueueProxyLogLevel is the queue-proxies' LOG_LEVEL ("warn" when
	// empty): their lines join the replicas' output.
	QueueProxyLogLevel string
	// DrainQuiet, DrainTimeout and KillAfter tune how a replica stops (see
	// replica.Spec); zero keeps replica's defaults.
	DrainQuiet, DrainTimeout, KillAfter time.Duration
	// ShutdownTimeout: see DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// FrontTimeouts and AdminTimeouts bound the connections of the front
	// door and of the admin port (see ConnTimeouts); a zero field keeps
	// its default: 10s to send the headers and 10m of idle for the front
	// door, as on the activator's serving port, 5s and 2m for the admin
	// port.
	FrontTimeouts, AdminTimeouts ConnTimeouts
	// Listening, if set, is called once both ports listen, with their
	// addresses.
	Listening func(front, admin net.Addr)
	// Kill, when closed after ctx ended, cuts the graceful stop short:
	// requests in flight are dropped and replicas killed at once (a second
	// Ctrl-C).
	Kill <-chan struct{}
	// StateDir, if set, is where what the services' policies learn is
	// kept (a file per service), so that a restart of swell local
	// remembers it; "" keeps nothing.
	StateDir string
}

// Server is a running `swell local`.
type Server struct {
	opts   Config
	log    *zap.Logger
	b      *backend
	act    *activator.Activator
	rep    *reporter.Reporter
	as     *autoscaler.Autoscaler
	dash   *dashboard.Recorder
	events *events
	reg    *prometheus.Registry
	addr   string
	// pushURL is where the replicas' queue-proxies push their stats: the
	// admin port, on loopback.
	pushURL string
}

// Run runs the services until ctx ends, then stops: the front door stops
// taking connections and waits for the requests in flight (bounded by
// ShutdownTimeout), and every replica is stopped gracefully. However it
// returns, no replica process is left running.
func Run(ctx context.Context, opts Config) (err error) {
	if opts.File == nil || len(opts.File.Services) == 0 {
		return errors.New("swell local: no service to run")
	}
	if len(opts.QueueProxy) == 0 {
		return errors.New("swell local: Options.QueueProxy is required")
	}
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	if opts.Output == nil {
		opts.Output = io.Discard
	}
	if opts.Address == "" {
		opts.Address = "127.0.0.1"
	}
	opts.Port = portOr(opts.Port, DefaultPort)
	opts.AdminPort = portOr(opts.AdminPort, DefaultAdminPort)
	if opts.ShutdownTimeout == 0 {
		opts.ShutdownTimeout = DefaultShutdownTimeout
	}
	if err := errors.Join(opts.FrontTimeouts.check("FrontTimeouts", frontTimeouts), opts.AdminTimeouts.check("AdminTimeouts", adminTimeouts)); err != nil {
		return fmt.Errorf("swell local: %w", err)
	}
	opts.FrontTimeouts = opts.FrontTimeouts.orDefault(frontTimeouts)
	opts.AdminTimeouts = opts.AdminTimeouts.orDefault(adminTimeouts)

	front, err := net.Listen("tcp", net.JoinHostPort(opts.Address, strconv.Itoa(opts.Port)))
	if err != nil {
		return fmt.Errorf("swell local: traffic port: %w", err)
	}
	defer front.Close()
	admin, err := net.Listen("tcp", net.JoinHostPort(opts.Address, strconv.Itoa(opts.AdminPort)))
	if err != nil {
		return fmt.Errorf("swell local: admin port: %w", err)
	}
	defer admin.Close()

	// Replica stops made while running use this context; killing it makes
	// them kill at once.
	stopCtx, stopKill := context.WithCancel(context.Background())
	defer stopKill()
	s := &Server{
		opts:    opts,
		log:     opts.Log,
		events:  &events{out: opts.Output, by: make(map[string][]Event)},
		dash:    dashboard.New(0),
		reg:     prometheus.NewRegistry(),
		addr:    front.Addr().String(),
		pushURL: "ws://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(admin.Addr().(*net.TCPAddr).Port)) + network.PodPushPath,
	}
	s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.b = newBackend(stopCtx, opts.Log.Named("backend"), opts.File.Services)
	s.b.start = s.startReplica
	s.b.changed = s.changed
	s.reg.MustRegister(s.b.collectors()...)
	// Whatever happens from here on, no replica outlives Run: replicas
	// being stopped are killed with their context, the others at once.
	defer func() {
		stopKill()
		s.b.kill()
	}()

	token := randomToken()
	// activatorName is the one activator's, towards the autoscaler and the
	// replicas' queue-proxies alike.
	const activatorName = "local"
	if s.act, err = activator.New(activator.Config{
		Source:       s.b,
		Name:         activatorName,
		QueueTimeout: maxTimeout(opts.File.Services),
		// Probing a replica's queue-proxy on loopback costs next to
		// nothing, and the interval is the largest part of the data
		// plane's share of a cold start: the first request goes out at
		// the first probe after the app listens.
		ProbeInterval: 5 * time.Millisecond,
		Poke: func(svc string) {
			if s.rep != nil {
				s.rep.Poke(svc)
			}
		},
		Registerer: s.reg,
		Logger:     opts.Log.Named("activator"),
	}); err != nil {
		return fmt.Errorf("swell local: %w", err)
	}
	if s.rep, err = reporter.New(reporter.Config{
		URL:    "ws://" + admin.Addr().String() + network.ActivatorReportPath,
		Token:  token,
		Name:   activatorName,
		Source: s.act,
		Logger: opts.Log.Named("reporter"),
		// The reporter and the endpoint share a process: reconnect fast.
		MaxBackoff: time.Second,
		Registerer: s.reg,
	}); err != nil {
		return fmt.Errorf("swell local: %w", err)
	}
	var memory *memoryStore
	if opts.StateDir != "" {
		if memory, err = newMemoryStore(opts.StateDir, opts.Log.Named("memory")); err != nil {
			return fmt.Errorf("swell local: state directory: %w", err)
		}
	}
	if s.as, err = autoscaler.New(autoscaler.Config{
		Memory: memoryOrNil(memory),
		// A run on a laptop is short: keep often.
		KeepInterval: 30 * time.Second,
		TickInterval: opts.File.Defaults.TickInterval,
		Backend:      s.b,
		Scaler:       scaler.Config{OnEvent: s.scaleEvent},
		Endpoint:     collector.EndpointConfig{Tokens: []string{token}},
		// The replicas' queue-proxies push their stats, as on a cluster.
		Pods:       collector.PodEndpointConfig{Resolver: localPods{s.b}},
		Registerer: s.reg,
		OnNotable:  s.notable,
		OnGaugeProblem: func(p autoscaler.GaugeProblem) {
			if p.Problem == stats.GaugeOK {
				s.events.add(p.Service.Name, p.Time, "app gauge %s read again", p.Gauge)
				return
			}
			s.events.add(p.Service.Name, p.Time, "app gauge %s unreadable on %d replicas: %s; scaling on the other metrics", p.Gauge, p.Pods, p.Problem)
		},
		Clock:  clock.RealClock{},
		Logger: opts.Log.Named("autoscaler"),
	}); err != nil {
		return fmt.Errorf("swell local: %w", err)
	}

	frontSrv := newFrontServer(newFrontDoor(s.b, s.act, opts.Log.Named("front")), opts.FrontTimeouts)
	adminSrv := newServer(s.adminHandler(), opts.AdminTimeouts)

	runCtx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		frontSrv.Close()
		adminSrv.Close()
		cancel()
		wg.Wait()
	}()
	errc := make(chan error, 2)
	serve := func(srv *http.Server, ln net.Listener) {
		wg.Go(func() {
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		})
	}
	serve(adminSrv, admin)
	wg.Go(func() { s.act.Run(runCtx) })
	wg.Go(func() { s.rep.Run(runCtx) })
	wg.Go(func() {
		s.as.Run(runCtx)
		if memory != nil {
			// After the loop's last keeps.
			memory.flush()
		}
	})
	if memory != nil {
		wg.Go(func() { memory.run(runCtx) })
	}
	wg.Go(func() { s.recordLoop(runCtx) })

	// Each service starts at its initial scale, as a new Deployment does;
	// the autoscaler holds it there until that many replicas were ready.
	for _, ls := range s.b.order {
		ls.mu.Lock()
		ls.desired = ls.cfg.Spec.InitialScale
		ls.mu.Unlock()
		s.as.Upsert(ls.key, ls.cfg.Spec)
		if err := s.b.reconcile(ls); err != nil {
			return fmt.Errorf("swell local: %w", err)
		}
	}
	// Traffic is taken once the activator routes every service: before,
	// it would answer 404. Connections made meanwhile wait in the
	// listener's backlog.
	select {
	case <-s.act.Synced():
	case <-ctx.Done():
	}
	serve(frontSrv, front)
	if opts.Listening != nil {
		opts.Listening(front.Addr(), admin.Addr())
	}

	select {
	case <-ctx.Done():
	case err = <-errc:
		return fmt.Errorf("swell local: serve: %w", err)
	}
	killCtx, killNow := context.WithCancel(context.Background())
	defer killNow()
	if opts.Kill != nil {
		go func() {
			select {
			case <-opts.Kill:
				killNow()
			case <-killCtx.Done():
			}
		}()
	}
	// Requests in flight finish first, held ones included: the
	// autoscaler and the replicas keep running meanwhile.
	sctx, scancel := context.WithTimeout(killCtx, opts.ShutdownTimeout)
	if err := frontSrv.Shutdown(sctx); err != nil {
		s.log.Warn("requests still in flight at shutdown", zap.Error(err))
		frontSrv.Close()
	}
	scancel()
	// Stop the autoscaler before the replicas, so that it starts nothing
	// new.
	adminSrv.Close()
	cancel()
	wg.Wait()
	s.b.shutdown(killCtx)
	return nil
}

func portOr(p, def int) int {
	switch {
	case p == 0:
		return def
	case p < 0:
		return 0
	}
	return p
}

// maxTimeout is the longest request timeout of the services: how long
// the activator holds a request.
func maxTimeout(svcs []config.Service) time.Duration {
	d := time.Duration(0)
	for _, s := range svcs {
		d = max(d, timeoutOf(s))
	}
	return d
}

func timeoutOf(s config.Service) time.Duration {
	return cmp.Or(s.RequestTimeout, network.DefaultRequestTimeout)
}

func randomToken() string {
	var b [24]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// startReplica starts one replica of ls.
func (s *Server) startReplica(ls *localService, index int) (*replica.Replica, error) {
	c := ls.cfg
	qenv := []string{
		"CONTAINER_CONCURRENCY=" + strconv.Itoa(c.ContainerConcurrency),
		"REQUEST_TIMEOUT=" + timeoutOf(c).String(),
		"LOG_LEVEL=" + cmp.Or(s.opts.QueueProxyLogLevel, "warn"),
		// Replicas are reached over loopback only, whatever --address
		// says: the front door is the one way in.
		"QUEUE_LISTEN_ADDRESS=127.0.0.1",
		// Its stats are pushed to the autoscaler, which takes them as the
		// replica whose metrics port they name.
		"AUTOSCALER_PUSH_URL=" + s.pushURL,
		"SERVICE=" + ls.key.String(),
		"POD_IP=127.0.0.1",
	}
	if c.QueueDepth > 0 {
		qenv = append(qenv, "QUEUE_DEPTH="+strconv.Itoa(c.QueueDepth))
	}
	// The app runs as swell's user: its queue-proxy finds it as the
	// process tree listening on the replica's port.
	qenv = append(qenv, queueproxy.MeterEnv(&c.Spec, queueproxy.AppUsageListener)...)
	return replica.Start(replica.Spec{
		Service:      c.Name,
		Index:        index,
		Command:      c.Command,
		Dir:          c.Dir,
		Env:          c.Env,
		QueueProxy:   s.opts.QueueProxy,
		QueueEnv:     qenv,
		Output:       s.opts.Output,
		Log:          s.log.Named("replica"),
		DrainQuiet:   s.opts.DrainQuiet,
		DrainTimeout: s.opts.DrainTimeout,
		KillAfter:    s.opts.KillAfter,
		OnChange:     func() { s.changed(ls) },
	})
}

// localPods is the push endpoint's collector.PodResolver in swell local:
// every replica's queue-proxy connects from loopback, so a connection is
// the replica it claims to be if it comes from loopback and a ready
// replica of the service has that metrics address.
type localPods struct{ b *backend }

func (p localPods) PodAddr(svc service.Key, remote netip.AddrPort, claimed string) (string, bool) {
	if !remote.Addr().Unmap().IsLoopback() {
		return "", false
	}
	ls, err := p.b.lookup(svc)
	if err != nil {
		return "", false
	}
	for _, r := range ls.snapshot() {
		if r.Ready() && r.MetricsAddr() == claimed {
			return claimed, true
		}
	}
	return "", false
}

// changed tells everyone who follows the service's replicas: the front
// door, the activator, the autoscaler's scrapes and its executor.
func (s *Server) changed(ls *localService) {
	ls.refreshView()
	s.b.notifySource()
	var addrs []string
	for _, r := range ls.snapshot() {
		if r.Ready() {
			addrs = append(addrs, r.MetricsAddr())
		}
		s.reportCrash(ls, r)
	}
	if s.as != nil {
		s.as.SetPods(ls.key, addrs)
		s.as.Resync(ls.key)
	}
}

// reportCrash logs a replica's crash and its restart as events of its
// service, once each.
func (s *Server) reportCrash(ls *localService, r *replica.Replica) {
	state, n := r.State(), r.Restarts()
	ls.mu.Lock()
	seen := ls.crashes[r.Name()]
	crashed := state == "crashed" && seen.crashed <= n
	restarted := n > seen.restarts
	if crashed {
		seen.crashed = n + 1
	}
	seen.restarts = n
	ls.crashes[r.Name()] = seen
	ls.mu.Unlock()
	now := time.Now()
	if crashed {
		s.events.add(ls.name, now, "replica %s crashed; restarting it with backoff", r.Name())
	}
	if restarted {
		s.events.add(ls.name, now, "replica %s restarted (restarts: %d)", r.Name(), n)
	}
}

// recordLoop feeds the dashboard once a second.
func (s *Server) recordLoop(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.record(now)
		}
	}
}

// adminHandler serves the dashboard at /, Status at StatusPath, the
// autoscaler's status and activator endpoint, and Prometheus metrics.
func (s *Server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	as := s.as.Handler()
	mux.Handle(network.ActivatorReportPath, as)
	mux.Handle(network.AutoscalerStatusPath, as)
	mux.Handle(network.PodPushPath, as)
	mux.HandleFunc(StatusPath, s.serveStatus)
	mux.Handle(network.MetricsPath, promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	mux.Handle("/", s.dash.Handler())
	return mux
}
