package controlplane_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/swell-run/swell/hack/cluster/controlplane"
	"github.com/swell-run/swell/hack/cluster/internal/clustertest"
	"github.com/swell-run/swell/hack/cluster/netns"
)

// TestControlPlane builds (from the cache when warm) and starts a real
// control plane, checks it through the API, and stops it. The first build
// takes minutes, so it runs only with SWELL_CLUSTER_IT=1.
func TestControlPlane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	c, _ := clustertest.Start(ctx, t, "it", log)
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

	ns, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "it-" + c.Name}}, metav1.CreateOptions{})
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
	clustertest.Eventually(t, 30*time.Second, "default ServiceAccount in "+ns.Name, func() error {
		_, err := admin.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{})
		return err
	})

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

func clientset(t *testing.T, s *controlplane.State, kubeconfig string) kubernetes.Interface {
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
