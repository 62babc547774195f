package controlplane

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/swell-run/swell/hack/cluster/build"
	"github.com/swell-run/swell/hack/cluster/netns"
)

// TestControlPlane builds (from the cache when warm) and starts a real
// control plane, checks it through the API, and stops it. The first build
// takes minutes, so it runs only with SWELL_CLUSTER_IT=1.
func TestControlPlane(t *testing.T) {
	if os.Getenv("SWELL_CLUSTER_IT") != "1" {
		t.Skip("set SWELL_CLUSTER_IT=1 to build and run a real control plane")
	}
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))

	bins, err := build.Build(ctx, build.Options{SkipSwell: true, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	suffix := make([]byte, 4)
	rand.Read(suffix)
	name := "it" + hex.EncodeToString(suffix)
	state := t.TempDir()
	t.Cleanup(func() {
		// Whatever happened, leave nothing behind.
		if err := Stop(context.Background(), state, log); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})

	c, err := Start(ctx, Config{Name: name, StateDir: state, Binaries: bins, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Processes) != 3 {
		t.Fatalf("processes = %+v, want etcd, kube-apiserver, kube-controller-manager", c.Processes)
	}

	admin := clientset(t, &c.State, c.PKI.Admin.Kubeconfig)
	v, err := admin.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != "v1.37.2" || v.Major != "1" || v.Minor != "37" || v.GitTreeState != "clean" {
		t.Errorf("/version = %+v, want v1.37.2 (1.37), clean", v)
	}

	ns, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "it-" + name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace as admin: %v", err)
	}

	node := clientset(t, &c.State, c.PKI.Node.Kubeconfig)
	_, err = node.CoreV1().Secrets(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("node identity listing secrets: err = %v, want Forbidden", err)
	}

	// The controllers run with their own credentials under RBAC: the
	// service-account controller gives the new namespace its default.
	saCtx, saCancel := context.WithTimeout(ctx, 30*time.Second)
	defer saCancel()
	for {
		_, err := admin.CoreV1().ServiceAccounts(ns.Name).Get(saCtx, "default", metav1.GetOptions{})
		if err == nil {
			break
		}
		if saCtx.Err() != nil {
			t.Fatalf("no default ServiceAccount in %s: %v", ns.Name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	for _, p := range c.Processes {
		rss, err := p.RSS()
		if err != nil {
			t.Errorf("%s: %v", p.Name, err)
		}
		t.Logf("%s pid %d RSS %d MB", p.Name, p.PID, rss>>20)
	}

	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range c.Processes {
		if p.Alive() {
			t.Errorf("%s (pid %d) still running after Stop", p.Name, p.PID)
		}
	}
	names, err := netns.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(names, c.Netns) {
		t.Errorf("network namespace %s remains after Stop", c.Netns)
	}
}

func clientset(t *testing.T, s *State, kubeconfig string) kubernetes.Interface {
	t.Helper()
	cfg, err := s.RESTConfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// testWriter sends log lines to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(string(b))
	return len(b), nil
}
