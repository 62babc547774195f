// Package controlplane runs a test cluster's control plane — etcd,
// kube-apiserver and kube-controller-manager — inside the cluster's own
// network namespace, waits until it is really ready, and stops it by PID.
//
// A cluster lives in a state directory: its certificates and kubeconfigs,
// etcd's data, each process's log under logs/, and cluster.json, which
// records the namespace, ports and PIDs so that another process (such as
// `swell-cluster down`) can stop it.
package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/swell-run/swell/hack/cluster/build"
	"github.com/swell-run/swell/hack/cluster/netns"
	"github.com/swell-run/swell/hack/cluster/pki"
)

// Fixed cluster parameters (see the module's README).
const (
	// DefaultNodeName is the Node the kubelet registers.
	DefaultNodeName = "swell-node"
	// StateFile is the state directory's record of a running cluster.
	StateFile = "cluster.json"
)

// Ports are the control plane's ports. Each cluster has its own loopback,
// so clusters side by side may use the same ones.
type Ports struct {
	APIServer         int `json:"apiServer"`
	EtcdClient        int `json:"etcdClient"`
	EtcdPeer          int `json:"etcdPeer"`
	ControllerManager int `json:"controllerManager"`
}

// DefaultPorts are Kubernetes' usual ports.
func DefaultPorts() Ports {
	return Ports{APIServer: 6443, EtcdClient: 2379, EtcdPeer: 2380, ControllerManager: 10257}
}

func (p Ports) validate() error {
	seen := map[int]string{}
	for _, f := range []struct {
		name string
		port int
	}{{"apiserver", p.APIServer}, {"etcd client", p.EtcdClient}, {"etcd peer", p.EtcdPeer}, {"controller-manager", p.ControllerManager}} {
		if f.port < 1 || f.port > 65535 {
			return fmt.Errorf("%s port %d: want 1-65535", f.name, f.port)
		}
		if other, dup := seen[f.port]; dup {
			return fmt.Errorf("%s and %s ports are both %d: want distinct ports", other, f.name, f.port)
		}
		seen[f.port] = f.name
	}
	return nil
}

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,19}$`)

// ValidateName checks a cluster name. Names have no '-', so what is named
// after one cluster ("swell-<name>") never starts another's name.
func ValidateName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("cluster name %q: want a lowercase letter followed by up to 19 lowercase letters or digits", name)
	}
	return nil
}

// Netns is the network namespace of the cluster named name.
func Netns(name string) string { return "swell-" + name }

// Config describes a control plane to start.
type Config struct {
	// Name names the cluster (see ValidateName); required.
	Name string
	// StateDir holds everything the cluster writes; required.
	StateDir string
	// Binaries are the programs to run; required.
	Binaries build.Binaries
	// NodeName is the node identity's Node. Default: DefaultNodeName.
	NodeName string
	// Ports default to DefaultPorts.
	Ports Ports
	// ReadyTimeout bounds the wait for readiness. Default: 2 minutes.
	ReadyTimeout time.Duration
	// Log reports progress, start-up times and memory. Default: discard.
	Log *slog.Logger
}

// State is a cluster as recorded in its state directory's cluster.json.
type State struct {
	Name      string    `json:"name"`
	Netns     string    `json:"netns"`
	StateDir  string    `json:"stateDir"`
	Server    string    `json:"server"`
	Ports     Ports     `json:"ports"`
	PKI       pki.Files `json:"pki"`
	BinDir    string    `json:"binDir"`
	Processes []Process `json:"processes"`
}

// Load reads the state of the cluster in stateDir.
func Load(stateDir string) (*State, error) {
	b, err := os.ReadFile(filepath.Join(stateDir, StateFile))
	if err != nil {
		return nil, fmt.Errorf("load cluster state: %w", err)
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("load cluster state %s: %w", filepath.Join(stateDir, StateFile), err)
	}
	return &s, nil
}

func (s *State) save() error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	p := filepath.Join(s.StateDir, StateFile)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("save cluster state: %w", err)
	}
	return os.Rename(tmp, p)
}

// RESTConfig returns a client configuration from kubeconfig whose
// connections are made inside the cluster's network namespace, so it works
// from outside it too.
func (s *State) RESTConfig(kubeconfig string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	cfg.Dial = netns.Dialer(s.Netns)
	return cfg, nil
}

// Cluster is a control plane started by this process.
type Cluster struct {
	State
	log *slog.Logger

	mu     sync.Mutex
	exited map[int]chan struct{} // closed when the child with this PID exits
}

// Start starts the control plane of cfg.Name: it creates the cluster's
// network namespace, generates its PKI, starts etcd, kube-apiserver and
// kube-controller-manager inside the namespace, and returns once the
// controllers really run. On failure everything started is stopped again
// and the error says which step failed (the logs stay in StateDir/logs).
func Start(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	if err := ValidateName(cfg.Name); err != nil {
		return nil, err
	}
	if cfg.StateDir == "" {
		return nil, errors.New("controlplane: StateDir is required")
	}
	if cfg.Binaries.Etcd == "" || cfg.Binaries.KubeAPIServer == "" || cfg.Binaries.KubeControllerManager == "" {
		return nil, errors.New("controlplane: Binaries are required (see build.Build)")
	}
	if cfg.NodeName == "" {
		cfg.NodeName = DefaultNodeName
	}
	if cfg.Ports == (Ports{}) {
		cfg.Ports = DefaultPorts()
	}
	if err := cfg.Ports.validate(); err != nil {
		return nil, fmt.Errorf("controlplane: %w", err)
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 2 * time.Minute
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	dir, err := filepath.Abs(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	if s, err := Load(dir); err == nil && s.Running() {
		return nil, fmt.Errorf("controlplane: a cluster already runs from %s (stop it first)", dir)
	}
	// A fresh cluster: etcd's old data would hold objects signed by the
	// previous CA and service-account key.
	for _, sub := range []string{"etcd", "logs"} {
		if err := os.RemoveAll(filepath.Join(dir, sub)); err != nil {
			return nil, fmt.Errorf("controlplane: %w", err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o700); err != nil {
		return nil, fmt.Errorf("controlplane: %w", err)
	}

	start := time.Now()
	c := &Cluster{
		State: State{
			Name:     cfg.Name,
			Netns:    Netns(cfg.Name),
			StateDir: dir,
			Server:   "https://127.0.0.1:" + strconv.Itoa(cfg.Ports.APIServer),
			Ports:    cfg.Ports,
			BinDir:   cfg.Binaries.Dir,
		},
		log:    cfg.Log,
		exited: map[int]chan struct{}{},
	}
	if names, err := netns.List(ctx); err == nil && slices.Contains(names, c.Netns) {
		return nil, fmt.Errorf("controlplane: network namespace %s exists: cluster %s is up, or was not stopped (swell-cluster down --name %s)", c.Netns, c.Name, c.Name)
	}
	if err := netns.Create(ctx, c.Netns); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			if stopErr := c.Stop(context.WithoutCancel(ctx)); stopErr != nil {
				cfg.Log.Error("cleanup after failed start", "err", stopErr)
			}
		}
	}()
	// Kubeconfigs at the top of the state directory, where users look.
	c.PKI, err = pki.Generate(pki.Options{Dir: filepath.Join(dir, "pki"), KubeconfigDir: dir, Server: c.Server, NodeName: cfg.NodeName, NodeIP: netns.Gateway})
	if err != nil {
		return nil, err
	}
	if err := c.save(); err != nil {
		return nil, err
	}
	cfg.Log.Info("network namespace and PKI ready", "netns", c.Netns, "took", since(start))

	ready := func(name string, p Process, t0 time.Time, check func(context.Context) error) error {
		if err := c.WaitFor(ctx, p, cfg.ReadyTimeout, check); err != nil {
			return fmt.Errorf("%s not ready: %w (log: %s)", name, err, p.Log)
		}
		rss, _ := p.RSS()
		cfg.Log.Info("ready", "process", name, "pid", p.PID, "took", since(t0), "rssMB", rss>>20)
		return nil
	}

	t0 := time.Now()
	etcd, err := c.Run(ctx, "etcd", c.etcdArgs(cfg))
	if err != nil {
		return nil, err
	}
	if err := ready("etcd", etcd, t0, c.etcdHealthy); err != nil {
		return nil, err
	}

	t0 = time.Now()
	apiserver, err := c.Run(ctx, "kube-apiserver", c.apiserverArgs(cfg))
	if err != nil {
		return nil, err
	}
	admin, err := c.clientset(c.PKI.Admin.Kubeconfig)
	if err != nil {
		return nil, err
	}
	if err := ready("kube-apiserver", apiserver, t0, func(ctx context.Context) error {
		_, err := admin.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	}); err != nil {
		return nil, err
	}

	t0 = time.Now()
	kcm, err := c.Run(ctx, "kube-controller-manager", c.controllerManagerArgs(cfg))
	if err != nil {
		return nil, err
	}
	// Its /healthz answers before the controllers run; the service-account
	// controller creating "default" shows they do.
	if err := ready("kube-controller-manager", kcm, t0, func(ctx context.Context) error {
		_, err := admin.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return err
	}); err != nil {
		return nil, err
	}
	cfg.Log.Info("control plane ready", "took", since(start), "server", c.Server, "kubeconfig", c.PKI.Admin.Kubeconfig)
	return c, nil
}

func (c *Cluster) etcdArgs(cfg Config) []string {
	client := "http://127.0.0.1:" + strconv.Itoa(cfg.Ports.EtcdClient)
	peer := "http://127.0.0.1:" + strconv.Itoa(cfg.Ports.EtcdPeer)
	return []string{
		cfg.Binaries.Etcd,
		"--name=default",
		"--data-dir=" + filepath.Join(c.StateDir, "etcd"),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=default=" + peer,
		// The data is thrown away with the cluster; fsync only slows tests.
		"--unsafe-no-fsync",
		"--log-level=warn",
	}
}

func (c *Cluster) apiserverArgs(cfg Config) []string {
	p := c.PKI
	return []string{
		cfg.Binaries.KubeAPIServer,
		"--etcd-servers=http://127.0.0.1:" + strconv.Itoa(cfg.Ports.EtcdClient),
		"--bind-address=0.0.0.0",
		"--secure-port=" + strconv.Itoa(cfg.Ports.APIServer),
		"--advertise-address=" + netns.AdvertiseAddress,
		// Dual-stack, IPv4 first: a Service that asks for no family is
		// IPv4 only.
		"--service-cluster-ip-range=" + netns.ServiceCIDR + "," + netns.ServiceCIDRV6,
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--client-ca-file=" + p.CACert,
		"--tls-cert-file=" + p.ServingCert,
		"--tls-private-key-file=" + p.ServingKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p.ServiceAccountPub,
		"--service-account-signing-key-file=" + p.ServiceAccountKey,
		"--cert-dir=" + filepath.Join(c.StateDir, "apiserver"),
		"--allow-privileged=true",
		// Logs, exec and port-forward: the kubelet serves at the node's
		// InternalIP, with a certificate of the cluster's CA.
		"--kubelet-preferred-address-types=InternalIP",
		"--kubelet-certificate-authority=" + p.CACert,
		"--kubelet-client-certificate=" + p.KubeletClientCert,
		"--kubelet-client-key=" + p.KubeletClientKey,
	}
}

func (c *Cluster) controllerManagerArgs(cfg Config) []string {
	p := c.PKI
	return []string{
		cfg.Binaries.KubeControllerManager,
		"--kubeconfig=" + p.ControllerManager.Kubeconfig,
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + p.ServiceAccountKey,
		"--root-ca-file=" + p.CACert,
		"--cluster-signing-cert-file=" + p.CACert,
		"--cluster-signing-key-file=" + p.CAKey,
		"--leader-elect=false",
		"--controllers=*",
		// The one Node's spec.podCIDRs: each family's whole pod range,
		// which the CNI's host-local ranges hand out.
		"--allocate-node-cidrs=true",
		"--cluster-cidr=" + netns.PodCIDR + "," + netns.PodCIDRV6,
		"--node-cidr-mask-size-ipv4=" + prefixLen(netns.PodCIDR),
		"--node-cidr-mask-size-ipv6=" + prefixLen(netns.PodCIDRV6),
		// The default 20/30 makes every scale step wait on client-side
		// rate limiting.
		"--kube-api-qps=200",
		"--kube-api-burst=400",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(cfg.Ports.ControllerManager),
		"--cert-dir=" + filepath.Join(c.StateDir, "controller-manager"),
	}
}

// prefixLen is the length of cidr's prefix, "16" of "198.18.0.0/16".
func prefixLen(cidr string) string {
	_, n, _ := strings.Cut(cidr, "/")
	return n
}

// Run starts argv inside the cluster's namespace as the process name, with
// its output in logs/<name>.log and every ETCD_* variable removed from its
// environment (etcd reads them as flags), plus env. It is recorded in
// cluster.json, so Stop stops it too.
func (c *Cluster) Run(ctx context.Context, name string, argv []string, env ...string) (Process, error) {
	logPath := filepath.Join(c.StateDir, "logs", name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return Process{}, fmt.Errorf("start %s: %w", name, err)
	}
	defer logFile.Close()
	cmd := netns.Exec(c.Netns, argv...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(cleanEnv(os.Environ()), env...)
	// A group of its own: a Ctrl-C meant for the command that started the
	// cluster does not reach it; Stop does.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return Process{}, fmt.Errorf("start %s: %w", name, err)
	}
	p := Process{Name: name, PID: cmd.Process.Pid, Log: logPath, Args: argv}
	if st, err := readStat(p.PID); err == nil {
		p.StartTime = st.startTime
	}
	done := make(chan struct{})
	c.mu.Lock()
	c.exited[p.PID] = done
	c.Processes = append(c.Processes, p)
	err = c.save()
	c.mu.Unlock()
	// Reap it, so that it does not linger as a zombie while this process
	// lives.
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	if err != nil {
		return p, err
	}
	c.log.Info("started", "process", name, "pid", p.PID, "log", logPath)
	return p, nil
}

// Exited returns a channel closed when p, started by c.Run, has exited.
func (c *Cluster) Exited(p Process) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exited[p.PID]
}

// WaitFor polls check until it succeeds, p (started by c.Run) exits, or
// bound passes.
func (c *Cluster) WaitFor(ctx context.Context, p Process, bound time.Duration, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	exited := c.Exited(p)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		attempt, cancelAttempt := context.WithTimeout(ctx, 5*time.Second)
		last = check(attempt)
		cancelAttempt()
		if last == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%s exited: %s", p.Name, tail(p.Log, 5))
		case <-ctx.Done():
			return fmt.Errorf("after %v: %w", bound, last)
		case <-tick.C:
		}
	}
}

func (c *Cluster) etcdHealthy(ctx context.Context) error {
	hc := &http.Client{Transport: &http.Transport{DialContext: netns.Dialer(c.Netns)}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(c.Ports.EtcdClient)+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var h struct{ Health string }
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		return fmt.Errorf("etcd /health: %w", err)
	}
	if resp.StatusCode != http.StatusOK || h.Health != "true" {
		return fmt.Errorf("etcd /health: %s, health %q", resp.Status, h.Health)
	}
	return nil
}

func (c *Cluster) clientset(kubeconfig string) (*kubernetes.Clientset, error) {
	cfg, err := c.RESTConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// Stop stops the cluster c (see Stop).
func (c *Cluster) Stop(ctx context.Context) error {
	c.mu.Lock()
	s := c.State
	s.Processes = append([]Process(nil), c.Processes...)
	c.mu.Unlock()
	return s.stop(ctx, c.log)
}

// Stop stops the cluster recorded in stateDir: every recorded process,
// newest first, with SIGTERM and after a bound SIGKILL; then the cluster's
// network namespace. The state directory stays, with the logs. A node's
// processes are recorded too, but its pods and host state are its own to
// undo first (package node).
func Stop(ctx context.Context, stateDir string, log *slog.Logger) error {
	s, err := Load(stateDir)
	if err != nil {
		return err
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return s.stop(ctx, log)
}

// stopGrace bounds each process's graceful exit before SIGKILL.
const stopGrace = 10 * time.Second

func (s *State) stop(ctx context.Context, log *slog.Logger) error {
	var errs []error
	for i := len(s.Processes) - 1; i >= 0; i-- {
		if err := s.Processes[i].Stop(ctx, log); err != nil {
			errs = append(errs, err)
		}
	}
	if err := DeleteNamespaces(ctx, s.Name, log); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// DeleteNamespaces deletes the network namespace of the cluster name,
// first killing any process still inside it (stopping the recorded
// processes normally leaves none).
func DeleteNamespaces(ctx context.Context, name string, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	names, err := netns.List(ctx)
	if err != nil {
		return err
	}
	if !slices.Contains(names, Netns(name)) {
		return nil
	}
	killStragglers(ctx, Netns(name), log)
	if err := netns.Delete(ctx, Netns(name)); err != nil {
		return err
	}
	log.Info("deleted network namespace", "netns", Netns(name))
	return nil
}

// Process returns the newest recorded process named name.
func (s *State) Process(name string) (Process, bool) {
	for i := len(s.Processes) - 1; i >= 0; i-- {
		if s.Processes[i].Name == name {
			return s.Processes[i], true
		}
	}
	return Process{}, false
}

// Running reports whether any recorded process still runs.
func (s *State) Running() bool {
	for _, p := range s.Processes {
		if p.Alive() {
			return true
		}
	}
	return false
}

// cleanEnv drops ETCD_* variables: etcd reads each as a flag.
func cleanEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "ETCD_") {
			out = append(out, kv)
		}
	}
	return out
}

// tail returns the last n lines of the file at path, for error messages.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log)"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }

// WaitNodeReady waits until the Node name reports Ready, bounded.
func WaitNodeReady(ctx context.Context, client kubernetes.Interface, name string, bound time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err
		} else {
			last = fmt.Errorf("node %s has no Ready condition", name)
			for _, cond := range node.Status.Conditions {
				if cond.Type == corev1.NodeReady {
					if cond.Status == corev1.ConditionTrue {
						return nil
					}
					last = fmt.Errorf("node %s Ready=%s: %s", name, cond.Status, cond.Message)
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s not Ready after %v: %w", name, bound, last)
		case <-tick.C:
		}
	}
}
