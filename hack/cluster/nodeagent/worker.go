package nodeagent

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
)

// runtime runs pods as local processes in network namespaces of their own.
// The agent hands it pod specs and reads back statuses; of the apiserver it
// knows only what a pod's containers need before they start (access).
type runtime struct {
	net      *podNet
	ipam     *ipam
	prober   *prober
	images   images
	access   apiAccess
	stateDir string
	hostIP   string
	clock    clock.Clock
	log      *slog.Logger
}

// container is one container of a pod and what the kubelet reports of it.
// Its fields other than spec are guarded by the worker's mutex.
type container struct {
	spec *corev1.Container
	init bool

	state    corev1.ContainerState
	last     corev1.ContainerState
	restarts int32
	ready    bool
	started  bool
	id       string
	binary   string
	done     bool // exited and will not be restarted
	exitCode int32
	backoff  crashBackoff
	// env is the environment of the running process, which its exec
	// probes and hooks get too.
	env []envVar
}

// podWorker runs one pod: its network, init containers, containers,
// probes, restarts and termination.
type podWorker struct {
	rt     *runtime
	pod    *corev1.Pod
	notify func()
	netns  string
	dir    string
	log    *slog.Logger
	// ctx ends when the pod stops: it bounds the pod's requests to the
	// apiserver.
	ctx    context.Context
	cancel context.CancelFunc
	// creds are the pod's service account files, nil without them. Only
	// the pod's run goroutine uses them.
	creds *credentials

	mu          sync.Mutex
	ip          netip.Addr
	podEnv      []envVar // what every container gets unless it sets it
	netReady    bool
	netErr      string
	startTime   metav1.Time
	initialized bool
	initFailed  bool
	inits       []*container
	containers  []*container
	conds       map[corev1.PodConditionType]corev1.PodCondition
	terminating bool
	grace       time.Duration
	deadline    time.Time

	stop     chan struct{} // closed when termination starts
	stopOnce sync.Once
	done     chan struct{} // closed when no process of the pod runs any more and its network is gone
}

// start begins running pod and returns its worker. notify is called after
// every change of the pod's status.
func (rt *runtime) start(pod *corev1.Pod, notify func()) *podWorker {
	w := &podWorker{
		rt:     rt,
		pod:    pod.DeepCopy(),
		notify: notify,
		netns:  rt.net.netnsName(string(pod.UID)),
		dir:    filepath.Join(rt.stateDir, "pods", pod.Namespace+"_"+pod.Name+"_"+string(pod.UID)),
		log:    rt.log.With("pod", pod.Namespace+"/"+pod.Name),
		conds:  map[corev1.PodConditionType]corev1.PodCondition{},
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.startTime = metav1.NewTime(rt.clock.Now())
	if pod.Status.StartTime != nil {
		w.startTime = *pod.Status.StartTime
	}
	previous := map[string]int32{}
	for _, s := range append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...) {
		if s.State.Running != nil || s.State.Terminated != nil || s.LastTerminationState.Terminated != nil {
			// A container that ran before the agent restarted runs again:
			// that is a restart, and its log file number moves on.
			previous[s.Name] = s.RestartCount + 1
		}
	}
	for i := range w.pod.Spec.InitContainers {
		c := &w.pod.Spec.InitContainers[i]
		w.inits = append(w.inits, &container{spec: c, init: true, restarts: previous[c.Name], state: waiting("PodInitializing", "")})
	}
	for i := range w.pod.Spec.Containers {
		c := &w.pod.Spec.Containers[i]
		w.containers = append(w.containers, &container{spec: c, restarts: previous[c.Name], state: waiting("ContainerCreating", "")})
	}
	go w.run()
	return w
}

func waiting(reason, msg string) corev1.ContainerState {
	return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}
}

// terminate starts stopping the pod with the grace period (preStop hooks
// included); Done is closed when it stopped. Calling it again only shortens
// the deadline.
func (w *podWorker) terminate(grace time.Duration) {
	w.mu.Lock()
	deadline := w.rt.clock.Now().Add(grace)
	if !w.terminating || deadline.Before(w.deadline) {
		w.grace, w.deadline = grace, deadline
	}
	w.terminating = true
	w.mu.Unlock()
	w.stopOnce.Do(func() {
		close(w.stop)
		w.cancel()
	})
}

// Done is closed when the pod no longer runs.
func (w *podWorker) Done() <-chan struct{} { return w.done }

func (w *podWorker) changed() {
	if w.notify != nil {
		w.notify()
	}
}

func (w *podWorker) stopping() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

// sleep waits d on the runtime's clock; false if the pod is stopping.
func (w *podWorker) sleep(d time.Duration) bool {
	select {
	case <-w.stop:
		return false
	case <-w.rt.clock.After(d):
		return true
	}
}

func (w *podWorker) run() {
	defer close(w.done)
	defer w.changed()
	ctx := context.Background()
	uid := string(w.pod.UID)
	defer func() {
		w.rt.net.tearDown(ctx, uid)
		w.rt.ipam.release(uid)
	}()
	var bg sync.WaitGroup
	defer func() {
		w.cancel()
		bg.Wait()
		if w.creds != nil {
			w.creds.remove()
		}
	}()
	if !w.setUpNetwork(ctx) {
		return
	}
	if !w.setUpServiceAccount(&bg) {
		return
	}
	for _, c := range w.inits {
		if code, ok := w.runContainer(c); !ok || code != 0 {
			if ok {
				w.mu.Lock()
				w.initFailed = true
				for _, c := range w.containers {
					c.state = waiting("PodInitializing", "")
				}
				w.mu.Unlock()
			}
			return
		}
	}
	w.mu.Lock()
	w.initialized = true
	w.mu.Unlock()
	w.changed()
	var wg sync.WaitGroup
	for _, c := range w.containers {
		wg.Go(func() { w.runContainer(c) })
	}
	wg.Wait()
}

func (w *podWorker) setUpNetwork(ctx context.Context) bool {
	var want netip.Addr
	if a, err := netip.ParseAddr(w.pod.Status.PodIP); err == nil {
		want = a
	}
	var b crashBackoff
	for {
		ip, err := w.rt.ipam.allocate(string(w.pod.UID), want)
		if err == nil {
			err = w.rt.net.setUp(ctx, string(w.pod.UID), ip)
		}
		w.mu.Lock()
		if err == nil {
			w.ip, w.netReady, w.netErr = ip, true, ""
		} else {
			w.netErr = err.Error()
		}
		w.mu.Unlock()
		w.changed()
		if err == nil {
			return true
		}
		w.log.Error("pod network", "err", err)
		now := w.rt.clock.Now()
		if !w.sleep(b.delay(now, now)) {
			return false
		}
	}
}

// process is one run of a container.
type process struct {
	cmd     *exec.Cmd
	pid     int
	started time.Time
	exited  chan struct{}
	state   *os.ProcessState
}

// runContainer runs the container until it exits for good or the pod
// stops, restarting it per the pod's restart policy. It returns the last
// exit code, and false if the pod stopped first.
func (w *podWorker) runContainer(c *container) (int32, bool) {
	for {
		if w.stopping() {
			return 0, false
		}
		p, reason, err := w.startProcess(c)
		if err != nil {
			w.log.Warn("start container", "container", c.spec.Name, "err", err)
			w.mu.Lock()
			c.state = waiting(reason, err.Error())
			w.mu.Unlock()
			w.changed()
			now := w.rt.clock.Now()
			if !w.sleep(c.backoff.delay(now, now)) {
				return 0, false
			}
			continue
		}
		stopped := w.supervise(c, p)
		code, restart := w.exited(c, p)
		if stopped || w.stopping() {
			return code, false
		}
		if !restart {
			return code, true
		}
		delay := c.backoff.delay(p.started, w.rt.clock.Now())
		w.mu.Lock()
		c.last = c.state
		c.state = waiting("CrashLoopBackOff", fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)",
			delay, c.spec.Name, w.pod.Name, w.pod.Namespace, w.pod.UID))
		w.mu.Unlock()
		w.changed()
		if !w.sleep(delay) {
			return code, false
		}
		w.mu.Lock()
		c.restarts++
		w.mu.Unlock()
	}
}

func (w *podWorker) startProcess(c *container) (*process, string, error) {
	w.mu.Lock()
	ip := w.ip.String()
	podEnv := w.podEnv
	restarts := c.restarts
	w.mu.Unlock()
	bin, err := w.rt.images.binary(c.spec.Image)
	if err != nil {
		return nil, "ErrImagePull", err
	}
	env, err := containerEnv(w.ctx, w.pod, c.spec, envInputs{podIP: ip, hostIP: w.rt.hostIP, pod: podEnv, refs: w.rt.access.api})
	if err != nil {
		return nil, "CreateContainerConfigError", err
	}
	argv, err := containerArgv(w.rt.images, c.spec, env)
	if err != nil {
		return nil, "CreateContainerConfigError", err
	}
	cdir := filepath.Join(w.dir, c.spec.Name)
	if err := os.MkdirAll(cdir, 0o755); err != nil {
		return nil, "CreateContainerError", err
	}
	logFile, err := os.Create(filepath.Join(cdir, strconv.Itoa(int(restarts))+".log"))
	if err != nil {
		return nil, "CreateContainerError", err
	}
	defer logFile.Close()
	cmd := exec.Command(w.rt.net.ip, append([]string{"netns", "exec", w.netns}, argv...)...)
	cmd.Env = environ(env)
	cmd.Dir = cdir
	if c.spec.WorkingDir != "" {
		cmd.Dir = c.spec.WorkingDir
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group, so that a signal reaches everything it
	// started; killed with the agent, so that no pod outlives it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, "RunContainerError", err
	}
	p := &process{cmd: cmd, pid: cmd.Process.Pid, started: w.rt.clock.Now(), exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		p.state = cmd.ProcessState
		close(p.exited)
	}()
	w.mu.Lock()
	c.id = "swell://" + strconv.Itoa(p.pid)
	c.binary = bin
	c.env = env
	c.state = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(p.started)}}
	c.started = c.spec.StartupProbe == nil
	c.ready = c.spec.ReadinessProbe == nil && c.started && !c.init
	w.mu.Unlock()
	w.log.Info("container started", "container", c.spec.Name, "pid", p.pid, "argv", argv, "restarts", restarts)
	w.changed()
	return p, "", nil
}

// supervise runs the container's probes until the process exits, a
// liveness or startup probe fails (the container is then killed
// gracefully) or the pod stops (killed with the pod's grace period). It
// returns whether the pod stopped.
func (w *podWorker) supervise(c *container, p *process) bool {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	unhealthy := make(chan string, 1)
	if !c.init {
		go w.probe(ctx, c, p, unhealthy)
	}
	select {
	case <-p.exited:
		return false
	case why := <-unhealthy:
		w.log.Info("restarting unhealthy container", "container", c.spec.Name, "reason", why)
		grace := seconds(int32(ptrOr(w.pod.Spec.TerminationGracePeriodSeconds, 30)), 30)
		if pr := c.spec.LivenessProbe; pr != nil && pr.TerminationGracePeriodSeconds != nil {
			grace = time.Duration(*pr.TerminationGracePeriodSeconds) * time.Second
		}
		cancel()
		w.kill(c, p, w.rt.clock.Now().Add(grace))
		return false
	case <-w.stop:
		cancel()
		w.mu.Lock()
		deadline := w.deadline
		w.mu.Unlock()
		w.kill(c, p, deadline)
		return true
	}
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// kill stops a running container the way the kubelet does: the preStop
// hook, then SIGTERM to its process group, then SIGKILL at deadline (the
// hook's time counts against it, but SIGTERM gets at least two seconds
// after a hook).
func (w *podWorker) kill(c *container, p *process, deadline time.Time) {
	if hook := c.spec.Lifecycle; hook != nil && hook.PreStop != nil {
		if d := deadline.Sub(w.rt.clock.Now()); d > 0 {
			err := w.runHandler(hookHandler(hook.PreStop), c, d)
			if err != nil {
				w.log.Warn("preStop hook", "container", c.spec.Name, "err", err)
			}
			deadline = later(deadline, w.rt.clock.Now().Add(2*time.Second))
		}
	}
	_ = syscall.Kill(-p.pid, syscall.SIGTERM)
	select {
	case <-p.exited:
		_ = syscall.Kill(-p.pid, syscall.SIGKILL) // whatever it left behind in its group
	case <-w.rt.clock.After(deadline.Sub(w.rt.clock.Now())):
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		<-p.exited
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// runHandler runs a probe or hook handler against the pod.
func (w *podWorker) runHandler(h handler, c *container, timeout time.Duration) error {
	w.mu.Lock()
	ip := w.ip.String()
	env := c.env
	w.mu.Unlock()
	return w.rt.prober.run(context.Background(), h, w.netns, ip, c.spec, env, timeout)
}

// exited records the end of a container's process and decides whether it
// restarts.
func (w *podWorker) exited(c *container, p *process) (code int32, restart bool) {
	<-p.exited
	code, reason := exitStatus(p.state)
	now := w.rt.clock.Now()
	w.mu.Lock()
	c.state = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode:    code,
		Signal:      signalOf(p.state),
		Reason:      reason,
		StartedAt:   metav1.NewTime(p.started),
		FinishedAt:  metav1.NewTime(now),
		ContainerID: c.id,
	}}
	c.ready = false
	c.exitCode = code
	switch w.pod.Spec.RestartPolicy {
	case corev1.RestartPolicyNever:
		restart = false
	case corev1.RestartPolicyOnFailure:
		restart = code != 0
	default:
		// Init containers of an Always pod restart only on failure.
		restart = !c.init || code != 0
	}
	if c.init && code == 0 {
		restart = false
	}
	c.done = !restart
	w.mu.Unlock()
	w.log.Info("container exited", "container", c.spec.Name, "code", code, "restart", restart)
	w.changed()
	return code, restart
}

func exitStatus(s *os.ProcessState) (int32, string) {
	if s == nil {
		return 128, "Error"
	}
	code := s.ExitCode()
	if ws, ok := s.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	if code == 0 {
		return 0, "Completed"
	}
	return int32(code), "Error"
}

func signalOf(s *os.ProcessState) int32 {
	if s == nil {
		return 0
	}
	if ws, ok := s.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return int32(ws.Signal())
	}
	return 0
}

// probe runs the container's startup, readiness and liveness probes until
// ctx ends, updating started and ready, and reports a failed liveness or
// startup probe on unhealthy.
func (w *podWorker) probe(ctx context.Context, c *container, p *process, unhealthy chan<- string) {
	type probeRun struct {
		kind string
		spec *corev1.Probe
		t    *probeTracker
	}
	var startup *probeRun
	var runs []*probeRun
	if s := c.spec.StartupProbe; s != nil {
		startup = &probeRun{"startup", s, newProbeTracker(s, p.started, false)}
	}
	if s := c.spec.ReadinessProbe; s != nil {
		runs = append(runs, &probeRun{"readiness", s, newProbeTracker(s, p.started, false)})
	}
	if s := c.spec.LivenessProbe; s != nil {
		runs = append(runs, &probeRun{"liveness", s, newProbeTracker(s, p.started, true)})
	}
	active := runs
	if startup != nil {
		active = []*probeRun{startup}
	}
	for len(active) > 0 {
		next := active[0]
		for _, r := range active[1:] {
			if r.t.due().Before(next.t.due()) {
				next = r
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-w.rt.clock.After(next.t.due().Sub(w.rt.clock.Now())):
		}
		err := w.runHandler(probeHandler(next.spec), c, next.t.timeout)
		if ctx.Err() != nil {
			return
		}
		now := w.rt.clock.Now()
		ok, changed := next.t.observe(now, err == nil)
		if err != nil {
			w.log.Debug("probe failed", "container", c.spec.Name, "probe", next.kind, "err", err)
		}
		switch next.kind {
		case "startup":
			if ok {
				w.mu.Lock()
				c.started = true
				c.ready = c.spec.ReadinessProbe == nil
				w.mu.Unlock()
				w.changed()
				for _, r := range runs {
					r.t.next = now.Add(time.Duration(r.spec.InitialDelaySeconds) * time.Second)
				}
				active = runs
			} else if next.t.failedOut() {
				unhealthy <- fmt.Sprintf("startup probe failed: %v", err)
				return
			}
		case "readiness":
			if changed {
				w.mu.Lock()
				c.ready = ok
				w.mu.Unlock()
				w.changed()
			}
		case "liveness":
			if changed && !ok {
				unhealthy <- fmt.Sprintf("liveness probe failed: %v", err)
				return
			}
		}
	}
	<-ctx.Done()
}
