package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/swell-run/swell/hack/cluster/build"
	"github.com/swell-run/swell/hack/cluster/controlplane"
	"github.com/swell-run/swell/hack/cluster/netns"
)

// upOptions say how to start a cluster.
type upOptions struct {
	clusterFlags
	ports       controlplane.Ports
	nodeName    string
	nodeTimeout time.Duration
	cache       string
}

func (o *upOptions) register(fs *flag.FlagSet) {
	o.clusterFlags.register(fs)
	d := controlplane.DefaultPorts()
	fs.IntVar(&o.ports.APIServer, "apiserver-port", d.APIServer, "kube-apiserver's secure port")
	fs.IntVar(&o.ports.EtcdClient, "etcd-port", d.EtcdClient, "etcd's client port")
	fs.IntVar(&o.ports.EtcdPeer, "etcd-peer-port", d.EtcdPeer, "etcd's peer port")
	fs.IntVar(&o.ports.ControllerManager, "controller-manager-port", d.ControllerManager, "kube-controller-manager's secure port")
	fs.StringVar(&o.nodeName, "node-name", controlplane.DefaultNodeName, "the Node the node agent runs")
	fs.DurationVar(&o.nodeTimeout, "node-timeout", time.Minute, "how long to wait for the Node to be Ready")
	fs.StringVar(&o.cache, "cache", "", "cache directory for the Kubernetes binaries (default: <user cache dir>/swell-cluster/bin)")
}

func cmdUp(ctx context.Context, args []string, log *slog.Logger) error {
	fs := newFlagSet("up", "up [--name N] [--state DIR] [--apiserver-port P] ...")
	var o upOptions
	o.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("up takes no arguments, got %q", fs.Args())
	}
	if err := controlplane.ValidateName(o.name); err != nil {
		return err
	}
	state, err := o.stateDir()
	if err != nil {
		return err
	}
	if s, err := controlplane.Load(state); err == nil && s.Running() {
		return fmt.Errorf("cluster %s is already up (state %s); stop it with: swell-cluster down%s", s.Name, state, o.hint())
	}
	start := time.Now()
	bins, err := build.Build(ctx, build.Options{CacheDir: o.cache, SwellBinDir: filepath.Join(state, "bin"), Log: log})
	if err != nil {
		return err
	}
	c, err := upCluster(ctx, o, state, bins, log)
	if err != nil {
		return err
	}
	fmt.Printf(`cluster %s is up (%v): control plane ready, node %s Ready
  kubeconfig: %s
  logs:       %s
The apiserver listens only inside the network namespace %s; use it with
  swell-cluster exec%s -- kubectl get pods -A
Stop it with
  swell-cluster down%s
`, o.name, since(start), o.nodeName, c.PKI.Admin.Kubeconfig, filepath.Join(state, "logs"), c.Netns, o.hint(), o.hint())
	return nil
}

// hint is the flags that name this cluster in a suggested command.
func (o *clusterFlags) hint() string {
	s := " --name " + o.name
	if o.state != "" {
		s += " --state " + o.state
	}
	return s
}

// upCluster starts the control plane and the node agent and waits for the
// Node to be Ready. On failure it stops everything it started.
func upCluster(ctx context.Context, o upOptions, state string, bins build.Binaries, log *slog.Logger) (_ *controlplane.Cluster, err error) {
	c, err := controlplane.Start(ctx, controlplane.Config{
		Name: o.name, StateDir: state, Binaries: bins, NodeName: o.nodeName, Ports: o.ports, Log: log,
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			if stopErr := c.Stop(context.WithoutCancel(ctx)); stopErr != nil {
				log.Error("cleanup after failed start", "err", stopErr)
			}
		}
	}()

	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this program to run the node agent: %w", err)
	}
	t0 := time.Now()
	node, err := c.Run(ctx, "node", nodeArgs(self, o.nodeName, c, state, bins.Images, bins.Unbuilt))
	if err != nil {
		return nil, err
	}
	cfg, err := c.RESTConfig(c.PKI.Admin.Kubeconfig)
	if err != nil {
		return nil, err
	}
	admin, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	waitCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-c.Exited(node):
			cancel(fmt.Errorf("node agent exited (log: %s)", node.Log))
		case <-waitCtx.Done():
		}
	}()
	if err := controlplane.WaitNodeReady(waitCtx, admin, o.nodeName, o.nodeTimeout); err != nil {
		if cause := context.Cause(waitCtx); cause != nil && !errors.Is(cause, context.Canceled) {
			return nil, cause
		}
		return nil, fmt.Errorf("%w (node agent log: %s)", err, node.Log)
	}
	rss, _ := node.RSS()
	log.Info("ready", "process", "node", "pid", node.PID, "took", since(t0), "rssMB", rss>>20)
	return c, nil
}

// nodeArgs is the command line of the node agent.
func nodeArgs(self, nodeName string, c *controlplane.Cluster, state string, images, unbuilt map[string]string) []string {
	args := []string{
		self, "node",
		"--kubeconfig", c.PKI.Node.Kubeconfig,
		"--scheduler-kubeconfig", c.PKI.Scheduler.Kubeconfig,
		"--node-name", nodeName,
		"--cluster-netns", c.Netns,
		"--bridge", netns.Bridge,
		"--pod-cidr", netns.PodCIDR,
		"--gateway", netns.Gateway,
		"--state", filepath.Join(state, "node"),
	}
	for _, t := range []struct {
		flag string
		m    map[string]string
	}{{"--image", images}, {"--unbuilt-image", unbuilt}} {
		for _, name := range slices.Sorted(maps.Keys(t.m)) {
			args = append(args, t.flag, name+"="+t.m[name])
		}
	}
	return args
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }
