package node_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/swell-run/swell/hack/cluster/controlplane"
	"github.com/swell-run/swell/hack/cluster/internal/clustertest"
	"github.com/swell-run/swell/hack/cluster/netns"
	"github.com/swell-run/swell/hack/cluster/node"
	"github.com/swell-run/swell/hack/cluster/nodeimages"
)

// TestNode starts a control plane and a real node — containerd, the
// kubelet, kube-scheduler, kube-proxy — and shows pods from the imported
// images: ready only once their probe passes, answering at their
// Service's ClusterIP from the cluster's namespace and from another pod,
// their logs and exec served by the kubelet; then the node goes and leaves
// nothing behind. The first build takes many minutes, so it runs only with
// SWELL_CLUSTER_IT=1.
func TestNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	c, bins := clustertest.Start(ctx, t, "nd", log)
	t0 := time.Now()
	clustertest.StartNode(ctx, t, c, bins, log)
	t.Logf("node up in %v", time.Since(t0).Round(time.Millisecond))
	defer func() {
		if t.Failed() {
			for _, p := range c.Processes {
				b, _ := os.ReadFile(p.Log)
				t.Logf("--- %s (last 4000 bytes)\n%s", p.Log, b[max(0, len(b)-4000):])
			}
		}
	}()

	cfg, err := c.RESTConfig(c.PKI.Admin.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(cfg)
	n, err := admin.CoreV1().Nodes().Get(ctx, controlplane.DefaultNodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	runtimeVersion := "containerd://" + strings.TrimPrefix(bins.Versions.Containerd, "v")
	if v := n.Status.NodeInfo; v.KubeletVersion != "v1.37.2" || v.ContainerRuntimeVersion != runtimeVersion {
		t.Errorf("node reports kubelet %s and runtime %s, want v1.37.2 and %s", v.KubeletVersion, v.ContainerRuntimeVersion, runtimeVersion)
	}

	const ns = "default"
	labels := map[string]string{"app": "hello"}
	replicas := int32(2)
	_, err = admin.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "hello"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name:            "hello",
					Image:           nodeimages.Hello,
					ImagePullPolicy: corev1.PullNever,
					// It listens only after a second: Ready must wait for
					// the probe.
					Env: []corev1.EnvVar{{Name: "READY_DELAY", Value: "1s"}},
					ReadinessProbe: &corev1.Probe{
						ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}},
						PeriodSeconds: 1,
					},
				}}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "hello"},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var pods []corev1.Pod
	clustertest.Eventually(t, time.Minute, "2 ready hello pods", func() error {
		list, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=hello"})
		if err != nil {
			return err
		}
		pods = list.Items
		if len(pods) != 2 {
			return fmt.Errorf("%d pods", len(pods))
		}
		for _, p := range pods {
			if !ready(&p) {
				return fmt.Errorf("pod %s: %s", p.Name, describe(&p))
			}
		}
		return nil
	})
	for _, p := range pods {
		cs := p.Status.ContainerStatuses[0]
		readyAt := condition(&p, corev1.PodReady).LastTransitionTime.Time
		// Whole seconds in the API: at least the delay, less a second of
		// rounding.
		if cs.State.Running == nil || readyAt.Before(cs.State.Running.StartedAt.Time) {
			t.Errorf("pod %s Ready at %s, container started %v: Ready before the probe could pass", p.Name, readyAt, cs.State.Running)
		}
		if !strings.HasPrefix(cs.ContainerID, "containerd://") || !strings.HasPrefix(p.Status.PodIP, "198.18.") {
			t.Errorf("pod %s: container %s, IP %s; want a containerd container on the pod network", p.Name, cs.ContainerID, p.Status.PodIP)
		}
	}

	clusterIP := "http://" + net.JoinHostPort(svc.Spec.ClusterIP, "80") + "/"
	fromCluster := &http.Client{Transport: &http.Transport{DialContext: netns.Dialer(c.Netns), DisableKeepAlives: true}, Timeout: 5 * time.Second}
	seen := map[string]bool{}
	clustertest.Eventually(t, 30*time.Second, "answers from both pods at the ClusterIP "+svc.Spec.ClusterIP+" from the cluster's namespace", func() error {
		body, err := get(fromCluster, clusterIP)
		if err != nil {
			return err
		}
		for _, p := range pods {
			if strings.Contains(body, p.Name) {
				seen[p.Name] = true
			}
		}
		if len(seen) < 2 {
			return fmt.Errorf("answered by %v so far; last %q", seen, body)
		}
		return nil
	})

	// Another pod: a connection from its network namespace.
	_, err = admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "client"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "box", Image: nodeimages.Box, ImagePullPolicy: corev1.PullNever}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var client *corev1.Pod
	clustertest.Eventually(t, time.Minute, "pod client running", func() error {
		client, err = admin.CoreV1().Pods(ns).Get(ctx, "client", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if client.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("%s", describe(client))
		}
		return nil
	})
	pid, err := podProcess(client.UID)
	if err != nil {
		t.Fatal(err)
	}
	fromPod := &http.Client{Transport: &http.Transport{DialContext: netns.DialerAt(fmt.Sprintf("/proc/%d/ns/net", pid), "pod client")}, Timeout: 5 * time.Second}
	if body, err := get(fromPod, clusterIP); err != nil || !strings.HasPrefix(body, "Hello from Swell!") {
		t.Errorf("GET %s from pod client: %q %v", clusterIP, body, err)
	}
	// The apiserver is at the first ClusterIP, the name its certificate
	// holds, from inside a pod too.
	conn, err := netns.DialerAt(fmt.Sprintf("/proc/%d/ns/net", pid), "pod client")(ctx, "tcp", net.JoinHostPort(netns.KubernetesServiceIP, "443"))
	if err != nil {
		t.Errorf("dial the Service kubernetes from pod client: %v", err)
	} else {
		conn.Close()
	}

	// Logs and exec go through the apiserver to the kubelet.
	logs, err := admin.CoreV1().Pods(ns).GetLogs(pods[0].Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil || !bytes.Contains(logs, []byte("hello listening")) {
		t.Errorf("logs of %s: %q %v", pods[0].Name, logs, err)
	}
	kubectl := netns.Exec(c.Netns, bins.Kubectl, "--kubeconfig", c.PKI.Admin.Kubeconfig, "-n", ns, "exec", "client", "--", "box", "-say", "inside", "-exit", "0")
	var stdout, stderr bytes.Buffer
	kubectl.Stdout, kubectl.Stderr = &stdout, &stderr
	if err := kubectl.Run(); err != nil || stdout.String() != "inside\n" {
		t.Errorf("kubectl exec in pod client: %q %q %v", stdout.String(), stderr.String(), err)
	}

	// Down: nothing of the node is left on the host.
	l := node.NewLayout(c.StateDir, c.Name)
	t0 = time.Now()
	if err := node.Stop(ctx, c.StateDir, c.Name, log); err != nil {
		t.Fatal(err)
	}
	t.Logf("node down in %v", time.Since(t0).Round(time.Millisecond))
	for _, name := range []string{"containerd", "kubelet", "kube-scheduler", "kube-proxy"} {
		if p, ok := c.Process(name); !ok || p.Alive() {
			t.Errorf("%s: recorded %t, still running after Stop", name, ok)
		}
	}
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/pids", l.CgroupRoot)); err == nil {
		t.Errorf("cgroup %s remains after Stop", l.CgroupRoot)
	}
	if mounts, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Contains(mounts, []byte(l.Dir)) {
		t.Errorf("mounts under %s remain after Stop", l.Dir)
	}
	if _, err := podProcess(client.UID); err == nil {
		t.Errorf("a process of pod client remains after Stop")
	}
	if b, err := os.ReadFile("/proc/sys/kernel/panic_on_oops"); err == nil && strings.TrimSpace(string(b)) != "0" && !otherNodes(t) {
		t.Errorf("kernel.panic_on_oops is %s after the last node went, want it restored", b)
	}
}

func ready(p *corev1.Pod) bool {
	c := condition(p, corev1.PodReady)
	return c != nil && c.Status == corev1.ConditionTrue
}

func condition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

func describe(p *corev1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "phase %s", p.Status.Phase)
	for _, cs := range p.Status.ContainerStatuses {
		fmt.Fprintf(&b, ", %s ready %t %+v", cs.Name, cs.Ready, cs.State)
	}
	return b.String()
}

func get(c *http.Client, url string) (string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), err
}

// podProcess returns a process of the pod with the given UID: one in the
// pod's cgroup, which the kubelet names pod<UID>.
func podProcess(uid types.UID) (int, error) {
	want := []byte("pod" + string(uid))
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup")); err == nil && bytes.Contains(b, want) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no process in the cgroup of pod %s", uid)
}

// otherNodes says whether another node runs on this machine, which keeps
// the kubelet's kernel settings.
func otherNodes(t *testing.T) bool {
	m, _ := filepath.Glob("/sys/fs/cgroup/pids/swell-*")
	if len(m) > 0 {
		t.Logf("other nodes on this machine: %v", m)
	}
	return len(m) > 0
}
