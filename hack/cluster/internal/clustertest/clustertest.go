// Package clustertest starts a real control plane, and a node, for the
// integration tests of the harness's own packages, and polls what they
// converge to.
package clustertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/swell-run/swell/hack/cluster/build"
	"github.com/swell-run/swell/hack/cluster/controlplane"
	"github.com/swell-run/swell/hack/cluster/node"
	"github.com/swell-run/swell/hack/cluster/nodeimages"
)

// Start builds the cluster's binaries (from the cache when warm) and
// starts a control plane named prefix and a random suffix, with its state
// in a directory of the test's own; whatever happens, it is stopped, with
// any node, and its namespace deleted when the test ends. The first build
// takes many minutes, so the test is skipped unless SWELL_CLUSTER_IT=1,
// and without root.
func Start(ctx context.Context, t *testing.T, prefix string, log *slog.Logger) (*controlplane.Cluster, build.Binaries) {
	t.Helper()
	if os.Getenv("SWELL_CLUSTER_IT") != "1" {
		t.Skip("set SWELL_CLUSTER_IT=1 to build and run a real cluster")
	}
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	bins, err := build.Build(ctx, build.Options{Log: log})
	if err != nil {
		t.Fatal(err)
	}
	suffix := make([]byte, 4)
	rand.Read(suffix)
	name := prefix + hex.EncodeToString(suffix)
	// Short: containerd's socket lives under it.
	state, err := os.MkdirTemp("", "swell-it-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		err := errors.Join(node.Stop(context.Background(), state, name, log), controlplane.Stop(context.Background(), state, log))
		if err != nil {
			t.Errorf("cleanup: %v", err)
		}
		if !t.Failed() {
			os.RemoveAll(state)
		}
	})
	c, err := controlplane.Start(ctx, controlplane.Config{Name: name, StateDir: state, Binaries: bins, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	return c, bins
}

// StartNode builds the node's images from the current sources and starts
// the node of c, which Start's cleanup stops.
func StartNode(ctx context.Context, t *testing.T, c *controlplane.Cluster, bins build.Binaries, log *slog.Logger) {
	t.Helper()
	module, err := build.FindModule(".")
	if err != nil {
		t.Fatal(err)
	}
	images, err := nodeimages.Build(ctx, nodeimages.Options{
		ModuleDir: module, MainDir: filepath.Join(module, "..", ".."), Dir: filepath.Join(c.StateDir, "images"), Log: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := node.Start(ctx, node.Config{Cluster: c, Binaries: bins, Images: images, Log: log}); err != nil {
		t.Fatal(err)
	}
}

// Eventually polls cond until it returns nil, for at most bound, and
// otherwise fails the test with cond's last error. It is for state another
// process owns (the apiserver's, a container's files), which the test
// cannot be told of.
func Eventually(t *testing.T, bound time.Duration, what string, cond func() error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, bound, true, func(context.Context) (bool, error) {
		last = cond()
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("after %s, still no %s: %v", bound, what, last)
	}
}
