// Package node runs a test cluster's one Node as Kubernetes runs one:
// containerd with Debian's runc and the CNI bridge, the kubelet,
// kube-proxy (iptables) and kube-scheduler, inside the cluster's network
// namespace; and takes it all down again, leaving the host as it was.
//
// The node keeps its files under <state dir>/node (see Layout) and its
// pods' cgroups below /swell-<cluster>, so nodes of several clusters run
// side by side. What a kubelet changes outside those (kernel settings, a
// few fixed directories) is recorded before the first node on the machine
// starts and put back when the last one stops.
package node

import (
	"archive/tar"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/swell-run/swell/hack/cluster/build"
	"github.com/swell-run/swell/hack/cluster/controlplane"
	"github.com/swell-run/swell/hack/cluster/netns"
	"github.com/swell-run/swell/hack/cluster/nodeimages"
)

// Runc is Debian's runc, which containerd's shim runs.
var Runc = "/usr/sbin/runc"

// The processes a node adds to the cluster's record, in the order they
// start.
const (
	procContainerd = "containerd"
	procKubelet    = "kubelet"
	procScheduler  = "kube-scheduler"
	procProxy      = "kube-proxy"
)

// Config describes the node to start.
type Config struct {
	// Cluster is the control plane the node joins; required.
	Cluster *controlplane.Cluster
	// Binaries are the programs to run; required.
	Binaries build.Binaries
	// Images are imported into containerd before the kubelet starts; they
	// must include nodeimages.Pause.
	Images []nodeimages.Layout
	// NodeName is the Node the kubelet registers. Default:
	// controlplane.DefaultNodeName, whose identity the cluster's PKI holds.
	NodeName string
	// ReadyTimeout bounds each wait. Default: 2 minutes.
	ReadyTimeout time.Duration
	// Log reports progress, start-up times and memory. Default: discard.
	Log *slog.Logger
}

// Start starts the node of cfg.Cluster: containerd (and imports the
// images), the kubelet, kube-scheduler and kube-proxy, each entered into
// the cluster's network namespace only, so that they share the host's
// mounts. It returns once the Node is Ready and schedulable and kube-proxy
// has programmed the Services. On failure it stops what it started (and
// only that: the control plane is the caller's).
func Start(ctx context.Context, cfg Config) (err error) {
	c := cfg.Cluster
	if c == nil || cfg.Binaries.Kubelet == "" || cfg.Binaries.Runtime.Containerd == "" {
		return errors.New("node: Cluster and Binaries are required")
	}
	if cfg.NodeName == "" {
		cfg.NodeName = controlplane.DefaultNodeName
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 2 * time.Minute
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	log := cfg.Log
	l := NewLayout(c.StateDir, c.Name)
	if err := l.check(); err != nil {
		return err
	}
	if _, err := os.Stat(Runc); err != nil {
		return fmt.Errorf("node: runc: %w (install Debian's runc package)", err)
	}
	start := time.Now()
	// A node of an earlier run of this cluster that was not stopped.
	if err := teardown(ctx, &c.State, l, log); err != nil {
		return fmt.Errorf("node: clean up an earlier node: %w", err)
	}
	defer func() {
		if err != nil {
			if stopErr := teardown(context.WithoutCancel(ctx), &c.State, l, log); stopErr != nil {
				log.Error("cleanup after failed start", "err", stopErr)
			}
		}
	}()
	if err := os.RemoveAll(l.Dir); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if err := recordHost(); err != nil {
		return err
	}
	if err := createCgroupRoot(l.CgroupRoot); err != nil {
		return err
	}
	p := Params{
		NodeName:          cfg.NodeName,
		KubeletKubeconfig: c.PKI.Node.Kubeconfig,
		ProxyKubeconfig:   c.PKI.Proxy.Kubeconfig,
		CACert:            c.PKI.CACert,
		KubeletCert:       c.PKI.KubeletCert,
		KubeletKey:        c.PKI.KubeletKey,
		CNIBinDir:         cfg.Binaries.Runtime.CNIDir,
		Runc:              Runc,
		SandboxImage:      nodeimages.Pause,
	}
	kubeletConfig, err := KubeletConfig(l, p)
	if err != nil {
		return err
	}
	proxyConfig, err := ProxyConfig(p)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		filepath.Join(l.Containerd, "config.toml"):    ContainerdConfig(l, p),
		filepath.Join(l.CNIConf, "10-swell.conflist"): CNIConfig(l),
		filepath.Join(l.Dir, "kubelet.yaml"):          kubeletConfig,
		filepath.Join(l.Dir, "kube-proxy.yaml"):       proxyConfig,
	}
	for path, b := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return fmt.Errorf("node: %w", err)
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return fmt.Errorf("node: %w", err)
		}
	}

	ready := func(p controlplane.Process, t0 time.Time) {
		rss, _ := p.RSS()
		log.Info("ready", "process", p.Name, "pid", p.PID, "took", since(t0), "rssMB", rss>>20)
	}
	// containerd finds its shim on PATH; kube-proxy its iptables.
	path := "PATH=" + cfg.Binaries.Runtime.Dir + ":" + os.Getenv("PATH") + ":/usr/sbin:/sbin"
	t0 := time.Now()
	ctrd, err := c.Run(ctx, procContainerd, []string{cfg.Binaries.Runtime.Containerd, "--config", filepath.Join(l.Containerd, "config.toml")}, path)
	if err != nil {
		return err
	}
	rt, err := dialCRI(l.Socket)
	if err != nil {
		return err
	}
	defer rt.Close()
	if err := c.WaitFor(ctx, ctrd, cfg.ReadyTimeout, rt.ready); err != nil {
		return fmt.Errorf("containerd not ready: %w (log: %s)", err, ctrd.Log)
	}
	ready(ctrd, t0)
	t0 = time.Now()
	if err := importImages(ctx, cfg.Binaries.Runtime.Ctr, l.Socket, cfg.Images); err != nil {
		return err
	}
	log.Info("images imported", "count", len(cfg.Images), "took", since(t0))

	t0 = time.Now()
	kubelet, err := c.Run(ctx, procKubelet, kubeletArgs(cfg.Binaries.Kubelet, filepath.Join(l.Dir, "kubelet.yaml"), l, p), path)
	if err != nil {
		return err
	}
	scheduler, err := c.Run(ctx, procScheduler, schedulerArgs(cfg.Binaries.KubeScheduler, c.PKI.Scheduler.Kubeconfig, filepath.Join(l.Dir, "scheduler")), path)
	if err != nil {
		return err
	}
	proxy, err := c.Run(ctx, procProxy, []string{cfg.Binaries.KubeProxy, "--config=" + filepath.Join(l.Dir, "kube-proxy.yaml")}, path)
	if err != nil {
		return err
	}
	rc, err := c.RESTConfig(c.PKI.Admin.Kubeconfig)
	if err != nil {
		return err
	}
	admin, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	if err := c.WaitFor(ctx, kubelet, cfg.ReadyTimeout, func(ctx context.Context) error {
		return schedulable(ctx, admin, cfg.NodeName)
	}); err != nil {
		return fmt.Errorf("node %s not Ready and schedulable: %w (kubelet log: %s)", cfg.NodeName, err, kubelet.Log)
	}
	ready(kubelet, t0)
	hc := &http.Client{Transport: &http.Transport{DialContext: netns.Dialer(c.Netns)}, Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	if err := c.WaitFor(ctx, proxy, cfg.ReadyTimeout, func(ctx context.Context) error {
		return healthy(ctx, hc, fmt.Sprintf("http://127.0.0.1:%d/healthz", ProxyHealthzPort))
	}); err != nil {
		return fmt.Errorf("kube-proxy not healthy: %w (log: %s)", err, proxy.Log)
	}
	ready(proxy, t0)
	if err := c.WaitFor(ctx, scheduler, cfg.ReadyTimeout, func(ctx context.Context) error {
		return healthyTLS(ctx, c.Netns, fmt.Sprintf("https://127.0.0.1:%d/healthz", SchedulerPort))
	}); err != nil {
		return fmt.Errorf("kube-scheduler not healthy: %w (log: %s)", err, scheduler.Log)
	}
	ready(scheduler, t0)
	log.Info("node ready", "node", cfg.NodeName, "took", since(start))
	return nil
}

// schedulable says why the Node is not Ready or not free of the taints
// that keep pods off a node that is not (yet) ready, or nil.
func schedulable(ctx context.Context, client kubernetes.Interface, name string) error {
	n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	ready := false
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			if cond.Status != corev1.ConditionTrue {
				return fmt.Errorf("node %s Ready=%s: %s", name, cond.Status, cond.Message)
			}
			ready = true
		}
	}
	if !ready {
		return fmt.Errorf("node %s has no Ready condition", name)
	}
	for _, t := range n.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
			return fmt.Errorf("node %s has taint %s:%s", name, t.Key, t.Effect)
		}
	}
	return nil
}

func healthy(ctx context.Context, hc *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s %s", url, resp.Status, body)
	}
	return nil
}

// healthyTLS is healthy for a component that serves its own self-signed
// certificate; only the answer matters.
func healthyTLS(ctx context.Context, ns, url string) error {
	tr := &http.Transport{DialContext: netns.Dialer(ns)}
	tr.TLSClientConfig = insecureTLS()
	defer tr.CloseIdleConnections()
	return healthy(ctx, &http.Client{Transport: tr, Timeout: 5 * time.Second}, url)
}

// importImages imports each OCI layout into containerd's k8s.io namespace,
// where the CRI finds images, for the host's platform, under its name and
// under its name by digest: the CRI finds an image by digest only under
// such a name, which a pull would have made.
func importImages(ctx context.Context, ctr, socket string, layouts []nodeimages.Layout) error {
	run := func(stdin io.Reader, args ...string) error {
		cmd := exec.CommandContext(ctx, ctr, append([]string{"--address", socket, "--namespace", "k8s.io"}, args...)...)
		cmd.Stdin = stdin
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("ctr %s: %w\n%s", strings.Join(args, " "), err, indent(string(out)))
		}
		return nil
	}
	for _, l := range layouts {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(tarDir(pw, l.Dir)) }()
		err := run(pr, "images", "import", "--platform", runtime.GOOS+"/"+runtime.GOARCH, "-")
		pr.Close()
		if err != nil {
			return fmt.Errorf("import image %s from %s: %w", l.Ref, l.Dir, err)
		}
		repo, _, _ := strings.Cut(l.Ref, ":")
		if err := run(nil, "images", "tag", "--force", l.Ref, repo+"@"+l.Digest); err != nil {
			return fmt.Errorf("name image %s by digest: %w", l.Ref, err)
		}
	}
	return nil
}

// tarDir writes the files under dir to w as a tar stream, paths relative
// to dir.
func tarDir(w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		if h.Name, err = filepath.Rel(dir, p); err != nil {
			return err
		}
		if d.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// Stop takes down the node of the cluster name whose state directory is
// stateDir (see teardown); the control plane's processes are left for
// controlplane.Stop. A cluster without a node is no error, and neither is
// one with no record of its processes: what they left is still undone.
func Stop(ctx context.Context, stateDir, name string, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s, err := controlplane.Load(stateDir)
	if errors.Is(err, fs.ErrNotExist) {
		s, err = &controlplane.State{Name: name, StateDir: stateDir}, nil
	}
	if err != nil {
		return err
	}
	return teardown(ctx, s, NewLayout(stateDir, name), log)
}

// teardown stops the node's processes and undoes what they did, each step
// whatever the others did: kube-proxy, kube-scheduler and the kubelet
// first; then every pod sandbox through the CRI, so that the CNI plugins
// free the pods' addresses and links; then containerd and any shim left;
// then the node's mounts, its cgroups (killing what is left in them), the
// kubelet's log links; and last, if no other node is on the machine, the
// kernel settings and directories the kubelet changed.
func teardown(ctx context.Context, s *controlplane.State, l Layout, log *slog.Logger) error {
	var errs []error
	for _, name := range []string{procProxy, procScheduler, procKubelet} {
		if p, ok := s.Process(name); ok {
			errs = append(errs, p.Stop(ctx, log))
		}
	}
	ctrd, hasContainerd := s.Process(procContainerd)
	if hasContainerd && ctrd.Alive() {
		t0 := time.Now()
		if rt, err := dialCRI(l.Socket); err != nil {
			errs = append(errs, err)
		} else {
			rctx, cancel := context.WithTimeout(ctx, time.Minute)
			n, err := rt.removeSandboxes(rctx)
			cancel()
			rt.Close()
			errs = append(errs, err)
			if n > 0 {
				log.Info("removed pod sandboxes", "count", n, "took", since(t0))
			}
		}
		errs = append(errs, ctrd.Stop(ctx, log))
	}
	if n := killShims(l.Socket); n > 0 {
		log.Warn("killed shims left running", "count", n)
	}
	if n, err := removeCgroupRoot(ctx, l.CgroupRoot); err != nil {
		errs = append(errs, err)
	} else if n > 0 {
		log.Warn("killed processes left in the node's cgroups", "count", n, "cgroupRoot", l.CgroupRoot)
	}
	if n, err := unmountUnder(l.Dir); err != nil {
		errs = append(errs, err)
	} else if n > 0 {
		log.Info("unmounted what the node left mounted", "count", n, "under", l.Dir)
	}
	errs = append(errs, removeLogLinks(l.Pods))
	errs = append(errs, restoreHost(log))
	return errors.Join(errs...)
}

// killShims kills every containerd shim serving the containerd at socket
// (its command line names the socket), and returns how many.
func killShims(socket string) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 0 && strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") && containsPair(args, "-address", socket) {
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				n++
			}
		}
	}
	return n
}

func containsPair(args []string, flag, value string) bool {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == flag && args[i+1] == value {
			return true
		}
	}
	return false
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }

// insecureTLS trusts any certificate: for the health checks of components
// that serve a self-signed one, where only the answer matters.
func insecureTLS() *tls.Config { return &tls.Config{InsecureSkipVerify: true} }
