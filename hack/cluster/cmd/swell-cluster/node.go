package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/swell-run/swell/hack/cluster/nodeagent"
)

// imageFlag collects repeated IMAGE=VALUE flags: --image (the binary that
// plays an image) and --unbuilt-image (the package it would be built from).
type imageFlag struct {
	m map[string]string
	// value names what an image maps to, and example shows a flag, for
	// error messages.
	value, example string
}

func newImageFlag(value, example string) imageFlag {
	return imageFlag{m: map[string]string{}, value: value, example: example}
}

func (f imageFlag) String() string { return fmt.Sprint(f.m) }

func (f imageFlag) Set(v string) error {
	name, val, ok := strings.Cut(v, "=")
	if !ok || name == "" || val == "" {
		return fmt.Errorf("%q: want IMAGE=%s, such as %s", v, f.value, f.example)
	}
	if strings.Contains(name, ":") || strings.Contains(name, "@") {
		return fmt.Errorf("%q: the image name takes no tag or digest (tags are ignored when pods run)", v)
	}
	if _, dup := f.m[name]; dup {
		return fmt.Errorf("image %s given twice", name)
	}
	f.m[name] = val
	return nil
}

func cmdNode(ctx context.Context, args []string, log *slog.Logger) error {
	fs := newFlagSet("node", "node --kubeconfig F --scheduler-kubeconfig F --node-name N --cluster-netns NS --state DIR [--image IMAGE=BINARY ...] [--unbuilt-image IMAGE=PACKAGE ...]")
	images := newImageFlag("BINARY", "swell/hello=/path/to/hello")
	unbuilt := newImageFlag("PACKAGE", "swell/autoscaler=./cmd/autoscaler")
	cfg := nodeagent.Config{Images: images.m, Unbuilt: unbuilt.m, Log: log}
	fs.StringVar(&cfg.Kubeconfig, "kubeconfig", "", "the node identity's kubeconfig (required)")
	fs.StringVar(&cfg.SchedulerKubeconfig, "scheduler-kubeconfig", "", "the scheduler identity's kubeconfig, to bind pods (required)")
	fs.StringVar(&cfg.NodeName, "node-name", "", "the Node to register (required)")
	fs.StringVar(&cfg.ClusterNetns, "cluster-netns", "", "the cluster's network namespace, which this process runs in (required)")
	fs.StringVar(&cfg.Bridge, "bridge", "swbr0", "the pod network's bridge")
	fs.StringVar(&cfg.PodCIDR, "pod-cidr", "198.18.0.0/16", "the pod network")
	fs.StringVar(&cfg.Gateway, "gateway", "198.18.0.1", "the pods' default route, on the bridge")
	fs.StringVar(&cfg.StateDir, "state", "", "directory for the pods' logs (required)")
	fs.Var(images, "image", "IMAGE=BINARY: the binary that plays an image (repeatable)")
	fs.Var(unbuilt, "unbuilt-image", "IMAGE=PACKAGE: an image whose package was absent at build time; pods using it wait in ErrImagePull (repeatable)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("node takes no arguments, got %q", fs.Args())
	}
	for flag, v := range map[string]string{
		"--kubeconfig": cfg.Kubeconfig, "--scheduler-kubeconfig": cfg.SchedulerKubeconfig,
		"--node-name": cfg.NodeName, "--cluster-netns": cfg.ClusterNetns, "--state": cfg.StateDir,
	} {
		if v == "" {
			return fmt.Errorf("node: %s is required", flag)
		}
	}
	return nodeagent.Run(ctx, cfg)
}
