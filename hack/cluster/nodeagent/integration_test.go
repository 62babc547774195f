package nodeagent_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/swell-run/swell/hack/cluster/build"
	"github.com/swell-run/swell/hack/cluster/controlplane"
	"github.com/swell-run/swell/hack/cluster/netns"
)

// TestNodeAgentRunsADeployment starts a real control plane, runs the node
// agent inside its namespace, and checks that a Deployment of swell/hello
// gets Ready pods with pod IPs the cluster reaches, and that scaling to zero
// finishes the pods' deletion and removes their namespaces. The control
// plane's first build takes minutes, so it runs only with SWELL_CLUSTER_IT=1.
func TestNodeAgentRunsADeployment(t *testing.T) {
	if os.Getenv("SWELL_CLUSTER_IT") != "1" {
		t.Skip("set SWELL_CLUSTER_IT=1 to run the node agent against a real control plane")
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
	binDir := t.TempDir()
	goBuild(t, "../../..", filepath.Join(binDir, "hello"), "./examples/hello")
	goBuild(t, ".", filepath.Join(binDir, "agent"), "./testdata/agent")

	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	name := "na" + hex.EncodeToString(suffix)
	state := t.TempDir()
	t.Cleanup(func() {
		if err := controlplane.Stop(context.Background(), state, log); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	c, err := controlplane.Start(ctx, controlplane.Config{Name: name, StateDir: state, Binaries: bins, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	agent, err := c.Run(ctx, "node-agent", []string{filepath.Join(binDir, "agent"),
		"-kubeconfig", c.PKI.Node.Kubeconfig, "-scheduler-kubeconfig", c.PKI.Scheduler.Kubeconfig,
		"-node", controlplane.DefaultNodeName, "-netns", c.Netns, "-bridge", netns.Bridge,
		"-state", filepath.Join(state, "node"), "-image", "swell/hello=" + filepath.Join(binDir, "hello")})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() || os.Getenv("NODEAGENT_IT_LOG") != "" {
			b, _ := os.ReadFile(agent.Log)
			t.Logf("node agent log:\n%s", b)
		}
	}()
	cfg, err := c.RESTConfig(c.PKI.Admin.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(cfg)
	if err := controlplane.WaitNodeReady(ctx, admin, controlplane.DefaultNodeName, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the default ServiceAccount and an untainted Node", func() error {
		if _, err := admin.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
			return err
		}
		node, err := admin.CoreV1().Nodes().Get(ctx, controlplane.DefaultNodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(node.Spec.Taints) > 0 {
			return fmt.Errorf("taints %v", node.Spec.Taints)
		}
		return nil
	})

	replicas := int32(2)
	labels := map[string]string{"app": "hello"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name:  "hello",
					Image: "swell/hello:latest",
					Env: []corev1.EnvVar{{Name: "REPLICA", ValueFrom: &corev1.EnvVarSource{
						FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
					ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
						HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}}},
				}}},
			},
		},
	}
	if _, err := admin.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pods []corev1.Pod
	eventually(t, 60*time.Second, "2 Ready pods with IPs", func() error {
		list, err := admin.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=hello"})
		if err != nil {
			return err
		}
		pods = pods[:0]
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil && p.Status.PodIP != "" && ready(&p) {
				pods = append(pods, p)
			}
		}
		if len(pods) != 2 {
			return fmt.Errorf("%d of %d pods ready", len(pods), len(list.Items))
		}
		return nil
	})
	client := &http.Client{Transport: &http.Transport{DialContext: netns.Dialer(c.Netns), DisableKeepAlives: true}}
	for _, p := range pods {
		if !strings.HasPrefix(p.Status.PodIP, "198.18.") || p.Spec.NodeName != controlplane.DefaultNodeName {
			t.Errorf("pod %s: IP %s node %s", p.Name, p.Status.PodIP, p.Spec.NodeName)
		}
		resp, err := client.Get("http://" + p.Status.PodIP + ":8080/")
		if err != nil {
			t.Fatalf("GET pod %s: %v", p.Name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), p.Name) {
			t.Errorf("pod %s answered %q, want its name", p.Name, body)
		}
	}

	// Scaling to zero deletes the pods gracefully; the agent finishes it.
	scale := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "default"}}
	if _, err := admin.AppsV1().Deployments("default").UpdateScale(ctx, "hello", scale, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "no pods and no pod namespaces", func() error {
		list, err := admin.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=hello"})
		if err != nil {
			return err
		}
		if len(list.Items) > 0 {
			return fmt.Errorf("%d pods remain", len(list.Items))
		}
		names, err := netns.List(ctx)
		if err != nil {
			return err
		}
		for _, n := range names {
			if strings.HasPrefix(n, controlplane.PodNetnsPrefix(name)) {
				return fmt.Errorf("pod namespace %s remains", n)
			}
		}
		return nil
	})

	if err := syscall.Kill(agent.PID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Exited(agent):
	case <-time.After(10 * time.Second):
		t.Error("the node agent did not stop within 10s of SIGTERM")
	}
}

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// eventually polls f until it succeeds, bounded.
func eventually(t *testing.T, bound time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s, still no %s: %v", bound, what, err)
		}
		time.Sleep(100 * time.Millisecond) // polling the apiserver
	}
}

func goBuild(t *testing.T, dir, out, pkg string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v: %s", pkg, err, b)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}
