// Package clustertest starts a real control plane for the integration
// tests of the harness's own packages, and polls what it converges to.
package clustertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/swell-run/swell/hack/cluster/build"
	"github.com/swell-run/swell/hack/cluster/controlplane"
)

// Start builds the control plane's binaries (from the cache when warm) and
// starts a control plane named prefix and a random suffix, with its state
// in a directory of the test's own; whatever happens, it is stopped and its
// namespaces deleted when the test ends. The first build takes minutes, so
// the test is skipped unless SWELL_CLUSTER_IT=1, and without root.
func Start(ctx context.Context, t *testing.T, prefix string, log *slog.Logger) (*controlplane.Cluster, build.Binaries) {
	t.Helper()
	if os.Getenv("SWELL_CLUSTER_IT") != "1" {
		t.Skip("set SWELL_CLUSTER_IT=1 to build and run a real control plane")
	}
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	bins, err := build.Build(ctx, build.Options{SkipSwell: true, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	suffix := make([]byte, 4)
	rand.Read(suffix)
	state := t.TempDir()
	t.Cleanup(func() {
		if err := controlplane.Stop(context.Background(), state, log); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	c, err := controlplane.Start(ctx, controlplane.Config{Name: prefix + hex.EncodeToString(suffix), StateDir: state, Binaries: bins, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	return c, bins
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
