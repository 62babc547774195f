package main

import (
	"context"
	"fmt"
	"log/slog"
	"sort"

	"github.com/swell-run/swell/hack/cluster/build"
)

func cmdBuild(ctx context.Context, args []string, log *slog.Logger) error {
	fs := newFlagSet("build", "build [--cache DIR]")
	cache := fs.String("cache", "", "cache directory for the Kubernetes binaries (default: <user cache dir>/swell-cluster/bin)")
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
	fmt.Println("etcd", b.Etcd)
	fmt.Println("kube-apiserver", b.KubeAPIServer)
	fmt.Println("kube-controller-manager", b.KubeControllerManager)
	fmt.Println("kubectl", b.Kubectl)
	images := make([]string, 0, len(b.Images))
	for img := range b.Images {
		images = append(images, img)
	}
	sort.Strings(images)
	for _, img := range images {
		fmt.Println(img, b.Images[img])
	}
	return nil
}
