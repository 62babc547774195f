package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/swell-run/swell/hack/cluster/build"
)

func cmdBuild(ctx context.Context, args []string, log *slog.Logger) error {
	fs := newFlagSet("build", "build [--cache DIR]")
	cache := fs.String("cache", "", "cache directory for the binaries (default: <user cache dir>/swell-cluster/bin)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("build takes no arguments, got %q", fs.Args())
	}
	b, err := build.Build(ctx, build.Options{CacheDir: *cache, Log: log})
	if err != nil {
		return err
	}
	for _, p := range []struct{ name, path string }{
		{"etcd", b.Etcd},
		{"kube-apiserver", b.KubeAPIServer},
		{"kube-controller-manager", b.KubeControllerManager},
		{"kube-scheduler", b.KubeScheduler},
		{"kubectl", b.Kubectl},
		{"kubelet", b.Kubelet},
		{"kube-proxy", b.KubeProxy},
		{"containerd", b.Runtime.Containerd},
		{"containerd-shim-runc-v2", b.Runtime.Shim},
		{"ctr", b.Runtime.Ctr},
		{"cni-plugins", b.Runtime.CNIDir},
		{"traefik", b.Traefik.Binary},
		{"gateway-api-crds", b.Traefik.GatewayCRDs},
	} {
		fmt.Println(p.name, p.path)
	}
	return nil
}
