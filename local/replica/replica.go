// Package replica supervises one replica of a service run by `swell local`:
// a queue-proxy process in front of one process of the user's app, each
// restarted with backoff when it crashes, and drained gracefully on Stop.
package replica

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/swell-run/swell/pkg/network"
)

// Defaults of Spec's durations.
const (
	DefaultDrainQuiet   = 500 * time.Millisecond
	DefaultDrainTimeout = 30 * time.Second
	DefaultKillAfter    = 10 * time.Second
)

// Readiness polling of the queue-proxy's admin port: fast until ready, then
// relaxed.
const (
	probeFast    = 25 * time.Millisecond
	probeSlow    = time.Second
	probeTimeout = time.Second
)

// Spec describes one replica.
type Spec struct {
	// Service is the service's display name, e.g. "hello".
	Service string
	// Index numbers the replica within its service: "hello-3".
	Index int
	// Command is the app's argv; Command[0] is looked up in $PATH unless it
	// holds a slash (then it is relative to Dir).
	Command []string
	// Dir is the app's working directory; "" is the current one.
	Dir string
	// Env is extra environment for the app ("K=V"), on top of os.Environ().
	// The app also gets HOST=127.0.0.1 and REPLICA=<Index>, which Env may
	// override, and PORT, which it may not.
	Env []string

	// QueueProxy is the queue-proxy's argv, e.g. {os.Executable(),
	// "queue-proxy"}.
	QueueProxy []string
	// QueueEnv is extra environment for the queue-proxy (CONTAINER_CONCURRENCY,
	// QUEUE_DEPTH, REQUEST_TIMEOUT...). It overrides the defaults
	// LOG_FORMAT=console, DRAIN_QUIET_PERIOD and DRAIN_TIMEOUT, but not the
	// ports (QUEUE_SERVING_PORT, QUEUE_ADMIN_PORT, QUEUE_METRICS_PORT,
	// USER_PORT), which the replica allocates.
	QueueEnv []string

	// Output receives every line both processes write to stdout or stderr,
	// prefixed with "hello-3 | " (app) or "hello-3 queue-proxy | ". Nil
	// discards them.
	Output io.Writer
	// Log receives lifecycle events; nil logs nothing.
	Log *zap.Logger
	// Clock times restart backoffs, readiness polls and the bounds of Stop;
	// nil is the real clock.
	Clock clock.WithTicker

	// DrainQuiet is the queue-proxy's DRAIN_QUIET_PERIOD (0: DefaultDrainQuiet).
	// The caller stops routing to the replica before Stop, so it is short.
	DrainQuiet time.Duration
	// DrainTimeout is the queue-proxy's DRAIN_TIMEOUT (0: DefaultDrainTimeout).
	DrainTimeout time.Duration
	// KillAfter is how long Stop waits after SIGTERM before SIGKILL
	// (0: DefaultKillAfter).
	KillAfter time.Duration

	// OnChange, if set, is called when Ready or Restarts changes, from any
	// goroutine. It must not block.
	OnChange func()
}

// Replica is one running replica. Its methods are safe for concurrent use.
type Replica struct {
	spec     Spec
	name     string
	app      []string // Command with Command[0] resolved
	queue    []string // QueueProxy likewise
	out      io.Writer
	log      *zap.Logger
	clk      clock.WithTicker
	onChange func()

	stopOnce, killOnce sync.Once
	stopCh, killCh     chan struct{}
	done               chan struct{}
	// kick wakes the poller from its slow period when a process started or
	// exited, so readiness is polled fast again at once.
	kick   chan struct{}
	ctx    context.Context // cancelled once the processes are gone
	cancel context.CancelFunc
	wg     sync.WaitGroup // process reapers, output copiers, the poller

	mu                                           sync.Mutex
	appPort, servingPort, adminPort, metricsPort int
	appProc, queueProc                           *process // nil while down
	// epoch changes whenever a process starts or exits, so a readiness
	// answer about an older pair of processes is not believed.
	epoch    uint64
	ready    bool
	appSeen  bool // the running app accepted a TCP connection
	crashed  bool // a process crashed and the replica was not ready since
	restarts int
	stopping bool
	stopped  bool
}

// Start allocates ports, starts both processes and returns at once;
// readiness comes later.
func Start(spec Spec) (*Replica, error) {
	if err := normalize(&spec); err != nil {
		return nil, err
	}
	r := &Replica{
		spec:     spec,
		name:     fmt.Sprintf("%s-%d", spec.Service, spec.Index),
		out:      spec.Output,
		clk:      spec.Clock,
		onChange: spec.OnChange,
		stopCh:   make(chan struct{}),
		killCh:   make(chan struct{}),
		done:     make(chan struct{}),
		kick:     make(chan struct{}, 1),
	}
	r.log = spec.Log.With(zap.String("replica", r.name))
	var err error
	if r.app, err = resolve(spec.Command, spec.Dir); err != nil {
		return nil, fmt.Errorf("replica %s: command: %w", r.name, err)
	}
	if r.queue, err = resolve(spec.QueueProxy, ""); err != nil {
		return nil, fmt.Errorf("replica %s: queue-proxy: %w", r.name, err)
	}
	ports, err := allocatePorts(4)
	if err != nil {
		return nil, fmt.Errorf("replica %s: %w", r.name, err)
	}
	r.appPort, r.servingPort, r.adminPort, r.metricsPort = ports[0], ports[1], ports[2], ports[3]

	if err := r.startApp(); err != nil {
		releasePorts(ports...)
		return nil, fmt.Errorf("replica %s: %w", r.name, err)
	}
	if err := r.startQueue(); err != nil {
		r.appProc.signal(syscall.SIGKILL)
		<-r.appProc.exited
		r.wg.Wait()
		releasePorts(ports...)
		return nil, fmt.Errorf("replica %s: %w", r.name, err)
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.wg.Add(1)
	go r.poll()
	go r.run()
	return r, nil
}

// normalize checks spec and fills in its defaults.
func normalize(s *Spec) error {
	var errs []error
	if s.Service == "" {
		errs = append(errs, errors.New("replica: empty Service: a service name is required"))
	}
	if s.Index < 0 {
		errs = append(errs, fmt.Errorf("replica %s: invalid Index %d: must be ≥ 0", s.Service, s.Index))
	}
	if len(s.Command) == 0 || s.Command[0] == "" {
		errs = append(errs, fmt.Errorf("replica %s-%d: empty Command: the app's argv is required", s.Service, s.Index))
	}
	if len(s.QueueProxy) == 0 || s.QueueProxy[0] == "" {
		errs = append(errs, fmt.Errorf("replica %s-%d: empty QueueProxy: the queue-proxy's argv is required", s.Service, s.Index))
	}
	for _, d := range []struct {
		name string
		d    *time.Duration
		def  time.Duration
	}{
		{"DrainQuiet", &s.DrainQuiet, DefaultDrainQuiet},
		{"DrainTimeout", &s.DrainTimeout, DefaultDrainTimeout},
		{"KillAfter", &s.KillAfter, DefaultKillAfter},
	} {
		switch {
		case *d.d < 0:
			errs = append(errs, fmt.Errorf("replica %s-%d: invalid %s %s: must be a duration ≥ 0 (0 for the default %s)", s.Service, s.Index, d.name, *d.d, d.def))
		case *d.d == 0:
			*d.d = d.def
		}
	}
	if s.DrainQuiet > s.DrainTimeout {
		errs = append(errs, fmt.Errorf("replica %s-%d: DrainQuiet %s exceeds DrainTimeout %s: lower the quiet period or raise the timeout", s.Service, s.Index, s.DrainQuiet, s.DrainTimeout))
	}
	for _, kv := range append(append([]string(nil), s.Env...), s.QueueEnv...) {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			errs = append(errs, fmt.Errorf("replica %s-%d: invalid environment entry %q: must be KEY=VALUE", s.Service, s.Index, kv))
		}
	}
	if s.Output == nil {
		s.Output = io.Discard
	}
	if s.Log == nil {
		s.Log = zap.NewNop()
	}
	if s.Clock == nil {
		s.Clock = clock.RealClock{}
	}
	return errors.Join(errs...)
}

// resolve returns argv with argv[0] looked up in $PATH, or, if it holds a
// slash, checked relative to dir.
func resolve(argv []string, dir string) ([]string, error) {
	out := append([]string(nil), argv...)
	name := argv[0]
	if !strings.Contains(name, "/") {
		p, err := exec.LookPath(name)
		if err != nil {
			return nil, err
		}
		out[0] = p
		return out, nil
	}
	at := name
	if !filepath.IsAbs(at) && dir != "" {
		at = filepath.Join(dir, at)
	}
	if st, err := os.Stat(at); err != nil {
		return nil, err
	} else if st.IsDir() || st.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("%s: not an executable file", at)
	}
	return out, nil
}

// Name is the replica's name, e.g. "hello-3".
func (r *Replica) Name() string { return r.name }

// ServingAddr is the loopback host:port of the queue-proxy's serving port.
// It changes only if a crashed queue-proxy's port was taken meanwhile, and
// then while the replica is not ready.
func (r *Replica) ServingAddr() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return loopback(r.servingPort)
}

// MetricsAddr is the loopback host:port of the queue-proxy's metrics port
// (network.StatsPath, network.MetricsPath).
func (r *Replica) MetricsAddr() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return loopback(r.metricsPort)
}

// Ready reports whether the queue-proxy answers ready and the replica is not
// stopping.
func (r *Replica) Ready() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ready && !r.stopping
}

// Restarts counts the restarts of crashed processes.
func (r *Replica) Restarts() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.restarts
}

// State is one of "starting" (waiting for readiness), "ready", "crashed" (a
// process is down, waiting to be restarted), "restarting" (restarted,
// waiting for readiness), "stopping" and "stopped".
func (r *Replica) State() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.stopped:
		return "stopped"
	case r.stopping:
		return "stopping"
	case r.appProc == nil || r.queueProc == nil:
		return "crashed"
	case r.ready:
		return "ready"
	case r.crashed:
		return "restarting"
	default:
		return "starting"
	}
}

// Done is closed once the replica is stopped for good.
func (r *Replica) Done() <-chan struct{} { return r.done }

// Stop stops the replica gracefully: it is marked not ready at once; the
// queue-proxy gets SIGTERM and drains (bounded by its drain timeout plus
// KillAfter, then SIGKILL); then the app's process group gets SIGTERM, and
// SIGKILL after KillAfter. Stop returns once both are gone, or, when ctx
// ends first, kills both at once, waits for them and returns ctx's error.
// It may be called any number of times, concurrently.
func (r *Replica) Stop(ctx context.Context) error {
	r.stopOnce.Do(func() {
		r.markStopping()
		close(r.stopCh)
	})
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		r.Kill()
		return fmt.Errorf("stop %s: %w", r.name, ctx.Err())
	}
}

// Kill sends SIGKILL to both process groups at once and waits for them.
func (r *Replica) Kill() {
	r.killOnce.Do(func() {
		r.markStopping()
		close(r.killCh)
	})
	<-r.done
}

func (r *Replica) markStopping() {
	r.mu.Lock()
	was := r.ready && !r.stopping
	r.stopping = true
	r.mu.Unlock()
	if was {
		r.changed()
	}
}

func (r *Replica) changed() {
	if r.onChange != nil {
		r.onChange()
	}
}

// pids returns the pids of the running app and queue-proxy, 0 when down.
func (r *Replica) pids() (app, queue int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.appProc != nil {
		app = r.appProc.pid
	}
	if r.queueProc != nil {
		queue = r.queueProc.pid
	}
	return app, queue
}

func (r *Replica) startApp() error {
	r.mu.Lock()
	port := r.appPort
	r.mu.Unlock()
	env := append(os.Environ(), "HOST=127.0.0.1", "REPLICA="+strconv.Itoa(r.spec.Index))
	env = append(env, r.spec.Env...)
	env = append(env, "PORT="+strconv.Itoa(port))
	p, err := r.spawn("app", r.app, env, r.spec.Dir, r.name+" | ")
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.appProc, r.appSeen = p, false
	r.epoch++
	r.mu.Unlock()
	r.kickPoll()
	r.log.Info("started", zap.String("process", "app"), zap.Int("pid", p.pid), zap.Int("port", port))
	return nil
}

func (r *Replica) startQueue() error {
	r.mu.Lock()
	ports := []int{r.servingPort, r.adminPort, r.metricsPort, r.appPort}
	r.mu.Unlock()
	env := append(os.Environ(),
		"LOG_FORMAT=console",
		"DRAIN_QUIET_PERIOD="+r.spec.DrainQuiet.String(),
		"DRAIN_TIMEOUT="+r.spec.DrainTimeout.String())
	env = append(env, r.spec.QueueEnv...)
	env = append(env,
		"QUEUE_SERVING_PORT="+strconv.Itoa(ports[0]),
		"QUEUE_ADMIN_PORT="+strconv.Itoa(ports[1]),
		"QUEUE_METRICS_PORT="+strconv.Itoa(ports[2]),
		"USER_PORT="+strconv.Itoa(ports[3]))
	p, err := r.spawn("queue-proxy", r.queue, env, "", r.name+" queue-proxy | ")
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.queueProc = p
	r.epoch++
	r.mu.Unlock()
	r.kickPoll()
	r.log.Info("started", zap.String("process", "queue-proxy"), zap.Int("pid", p.pid), zap.Int("port", ports[0]))
	return nil
}

// drainBound is how long Stop waits for the queue-proxy: its drain timeout
// (from QueueEnv if set there), then KillAfter for what is still in flight.
func (r *Replica) drainBound() time.Duration {
	d := r.spec.DrainTimeout
	for _, kv := range r.spec.QueueEnv {
		if v, ok := strings.CutPrefix(kv, "DRAIN_TIMEOUT="); ok {
			if t, err := time.ParseDuration(v); err == nil && t >= 0 {
				d = t
			}
		}
	}
	return d + r.spec.KillAfter
}

// run supervises the two processes until Stop or Kill, then stops them.
func (r *Replica) run() {
	defer r.finish()
	var (
		appBackoff, queueBackoff backoff
		appTimer, queueTimer     clock.Timer
		// replaceQueue: the queue-proxy was killed to learn the app's new
		// port; it is started again at once, which is no crash.
		replaceQueue bool
	)
	stopTimers := func() {
		for _, t := range []clock.Timer{appTimer, queueTimer} {
			if t != nil {
				t.Stop()
			}
		}
	}
	for {
		app, queue := r.procs()
		select {
		case <-r.killCh:
			stopTimers()
			r.killAll()
			return

		case <-r.stopCh:
			stopTimers()
			r.drain()
			return

		case <-exitedC(app):
			r.exited(app)
			d := appBackoff.delay(r.clk.Since(app.started))
			appTimer = r.clk.NewTimer(d)
			r.logCrash(app, d)

		case <-exitedC(queue):
			r.exited(queue)
			if replaceQueue {
				replaceQueue = false
				if err := r.startQueue(); err == nil {
					continue
				}
			}
			d := queueBackoff.delay(r.clk.Since(queue.started))
			queueTimer = r.clk.NewTimer(d)
			r.logCrash(queue, d)

		case <-timerC(appTimer):
			appTimer = nil
			if r.repickPorts(&r.appPort) && queue != nil {
				// The queue-proxy must learn the new USER_PORT. It serves
				// nothing while the app is down.
				replaceQueue = true
				queue.signal(syscall.SIGKILL)
			}
			if err := r.startApp(); err != nil {
				d := appBackoff.delay(0)
				appTimer = r.clk.NewTimer(d)
				r.log.Error("cannot restart", zap.String("process", "app"), zap.Error(err), zap.Duration("backoff", d))
				continue
			}
			r.restarted()

		case <-timerC(queueTimer):
			queueTimer = nil
			r.repickPorts(&r.servingPort, &r.adminPort, &r.metricsPort)
			if err := r.startQueue(); err != nil {
				d := queueBackoff.delay(0)
				queueTimer = r.clk.NewTimer(d)
				r.log.Error("cannot restart", zap.String("process", "queue-proxy"), zap.Error(err), zap.Duration("backoff", d))
				continue
			}
			r.restarted()
		}
	}
}

func exitedC(p *process) <-chan struct{} {
	if p == nil {
		return nil
	}
	return p.exited
}

func timerC(t clock.Timer) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C()
}

func (r *Replica) procs() (app, queue *process) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.appProc, r.queueProc
}

// exited records that p is down: the replica is not ready from now on.
func (r *Replica) exited(p *process) {
	r.mu.Lock()
	if r.appProc == p {
		r.appProc, r.appSeen = nil, false
	} else if r.queueProc == p {
		r.queueProc = nil
	}
	r.epoch++
	was := r.ready
	r.ready, r.crashed = false, true
	r.mu.Unlock()
	r.kickPoll()
	if was {
		r.changed()
	}
}

func (r *Replica) logCrash(p *process, backoff time.Duration) {
	r.log.Warn("crashed",
		zap.String("process", p.role),
		zap.Int("pid", p.pid),
		zap.Int("exit_code", p.exitCode()),
		zap.Stringer("status", p.state),
		zap.Duration("uptime", r.clk.Since(p.started)))
	r.log.Info("restarting in "+backoff.String(), zap.String("process", p.role), zap.Duration("backoff", backoff))
}

func (r *Replica) restarted() {
	r.mu.Lock()
	r.restarts++
	r.mu.Unlock()
	r.changed()
}

// repickPorts replaces every one of ports that cannot be bound now (another
// program took it while its process was down) with a new free port, and
// reports whether it replaced any. Only run writes the ports.
func (r *Replica) repickPorts(ports ...*int) bool {
	var taken []*int
	for _, p := range ports {
		if !portFree(*p) {
			taken = append(taken, p)
		}
	}
	if len(taken) == 0 {
		return false
	}
	fresh, err := allocatePorts(len(taken))
	if err != nil {
		r.log.Warn("ports taken and no new ones found", zap.Error(err))
		return false
	}
	r.mu.Lock()
	for i, p := range taken {
		r.log.Info("port taken, moving", zap.Int("port", *p), zap.Int("new_port", fresh[i]))
		releasePorts(*p)
		*p = fresh[i]
	}
	r.mu.Unlock()
	return true
}

// drain stops the queue-proxy gracefully, then the app.
func (r *Replica) drain() {
	r.log.Info("stopping")
	app, queue := r.procs()
	if !r.terminate(queue, r.drainBound()) {
		return
	}
	r.terminate(app, r.spec.KillAfter)
}

// terminate sends SIGTERM to p's process group and waits until it exits, or
// sends SIGKILL after d. On Kill it kills everything and returns false.
func (r *Replica) terminate(p *process, d time.Duration) bool {
	if p == nil {
		return true
	}
	select {
	case <-r.killCh:
		r.killAll()
		return false
	default:
	}
	p.signal(syscall.SIGTERM)
	t := r.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C():
		r.log.Warn("still running after SIGTERM; killing", zap.String("process", p.role), zap.Duration("after", d))
		p.signal(syscall.SIGKILL)
		<-p.exited
	case <-r.killCh:
		r.killAll()
		return false
	}
	return true
}

// killAll sends SIGKILL to both process groups and waits for them.
func (r *Replica) killAll() {
	app, queue := r.procs()
	for _, p := range []*process{app, queue} {
		if p != nil {
			p.signal(syscall.SIGKILL)
		}
	}
	for _, p := range []*process{app, queue} {
		if p != nil {
			<-p.exited
		}
	}
}

// finish runs once both processes are gone for good.
func (r *Replica) finish() {
	r.cancel()
	r.wg.Wait()
	r.mu.Lock()
	r.stopped, r.ready = true, false
	r.appProc, r.queueProc = nil, nil
	ports := []int{r.appPort, r.servingPort, r.adminPort, r.metricsPort}
	r.mu.Unlock()
	releasePorts(ports...)
	r.log.Info("stopped")
	close(r.done)
}

// poll follows the queue-proxy's readiness.
func (r *Replica) poll() {
	defer r.wg.Done()
	client := &http.Client{
		Timeout: probeTimeout,
		// A new connection each time: the queue-proxy behind the port may
		// have been restarted since the last poll.
		Transport: &http.Transport{DisableKeepAlives: true},
	}
	for {
		interval := probeFast
		if r.Ready() {
			interval = probeSlow
		}
		t := r.clk.NewTimer(interval)
		select {
		case <-r.ctx.Done():
			t.Stop()
			return
		case <-r.kick:
			t.Stop()
			continue
		case <-t.C():
		}
		r.probe(client)
	}
}

func (r *Replica) kickPoll() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// probe asks the queue-proxy whether it is ready. A queue-proxy that has
// not noticed yet that the app was restarted still answers ready, so a new
// app must also accept a TCP connection once before the replica is ready.
func (r *Replica) probe(client *http.Client) {
	r.mu.Lock()
	if r.stopping || r.appProc == nil || r.queueProc == nil {
		r.mu.Unlock()
		return
	}
	epoch, admin, appPort, seen := r.epoch, loopback(r.adminPort), r.appPort, r.appSeen
	r.mu.Unlock()

	if !seen {
		var d net.Dialer
		ctx, cancel := context.WithTimeout(r.ctx, probeTimeout)
		if c, err := d.DialContext(ctx, "tcp", loopback(appPort)); err == nil {
			c.Close()
			seen = true
		}
		cancel()
	}
	ready := seen && r.queueReady(client, admin)

	r.mu.Lock()
	if epoch != r.epoch || r.stopping {
		r.mu.Unlock()
		return
	}
	r.appSeen = seen
	was := r.ready
	r.ready = ready
	if ready {
		r.crashed = false
	}
	r.mu.Unlock()
	if was != ready {
		if ready {
			r.log.Info("ready")
		} else {
			r.log.Info("not ready")
		}
		r.changed()
	}
}

func (r *Replica) queueReady(client *http.Client, admin string) bool {
	req, err := http.NewRequestWithContext(r.ctx, http.MethodGet, "http://"+admin+network.ReadyPath, nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
