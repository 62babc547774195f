package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/swell-run/swell/hack/cluster/build"
	"github.com/swell-run/swell/hack/cluster/controlplane"
	"github.com/swell-run/swell/hack/cluster/node"
	"github.com/swell-run/swell/hack/cluster/nodeimages"
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
	fs.StringVar(&o.nodeName, "node-name", controlplane.DefaultNodeName, "the Node the kubelet registers")
	fs.DurationVar(&o.nodeTimeout, "node-timeout", 2*time.Minute, "how long to wait for each of the node's components to be ready")
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
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	module, err := build.FindModule(wd)
	if err != nil {
		return err
	}
	bins, images, err := buildAll(ctx, o, module, state, log)
	if err != nil {
		return err
	}
	c, err := upCluster(ctx, o, state, bins, images, log)
	if err != nil {
		return err
	}
	fmt.Printf(`cluster %s is up (%v): control plane ready, node %s Ready
  kubeconfig: %s
  logs:       %s
The apiserver listens only inside the network namespace %s; use it with
  swell-cluster exec%s -- kubectl get pods -A
Install Swell, with the images built from this tree, with
  swell-cluster exec%s -- kubectl apply --server-side -k %s
Stop it with
  swell-cluster down%s
`, o.name, since(start), o.nodeName, c.PKI.Admin.Kubeconfig, filepath.Join(state, "logs"), c.Netns, o.hint(), o.hint(), deployOverlay(state), o.hint())
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

// buildAll builds the cluster's programs (from the cache when warm) and
// the images its node runs, from the current sources, and writes the
// overlay that installs Swell with those images (deployOverlay).
func buildAll(ctx context.Context, o upOptions, module, state string, log *slog.Logger) (build.Binaries, []nodeimages.Layout, error) {
	bins, err := build.Build(ctx, build.Options{ModuleDir: module, CacheDir: o.cache, Log: log})
	if err != nil {
		return build.Binaries{}, nil, err
	}
	main := filepath.Join(module, "..", "..")
	images, err := nodeimages.Build(ctx, nodeimages.Options{
		ModuleDir: module, MainDir: main, Dir: filepath.Join(state, "images"), Traefik: bins.Traefik.Binary, Log: log,
	})
	if err != nil {
		return build.Binaries{}, nil, err
	}
	if err := nodeimages.WriteOverlay(deployOverlay(state), filepath.Join(main, "deploy"), images); err != nil {
		return build.Binaries{}, nil, err
	}
	return bins, images, nil
}

// deployOverlay is the directory of the kustomization that installs
// Swell's deploy/ with the images the cluster's node was given.
func deployOverlay(state string) string { return filepath.Join(state, "deploy") }

// upCluster starts the control plane and the node, and returns once the
// Node is Ready. On failure it stops everything it started.
func upCluster(ctx context.Context, o upOptions, state string, bins build.Binaries, images []nodeimages.Layout, log *slog.Logger) (_ *controlplane.Cluster, err error) {
	c, err := controlplane.Start(ctx, controlplane.Config{
		Name: o.name, StateDir: state, Binaries: bins, NodeName: o.nodeName, Ports: o.ports, Log: log,
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			if stopErr := stopCluster(context.WithoutCancel(ctx), state, o.name, log); stopErr != nil {
				log.Error("cleanup after failed start", "err", stopErr)
			}
		}
	}()
	if err := node.Start(ctx, node.Config{
		Cluster: c, Binaries: bins, Images: images, NodeName: o.nodeName, ReadyTimeout: o.nodeTimeout, Log: log,
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// stopCluster stops the cluster name recorded in state: its node first,
// whose pods and host changes are undone while containerd still runs, then
// the control plane.
func stopCluster(ctx context.Context, state, name string, log *slog.Logger) error {
	return errors.Join(node.Stop(ctx, state, name, log), controlplane.Stop(ctx, state, log))
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }
