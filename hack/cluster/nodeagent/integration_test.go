package nodeagent_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/swell-run/swell/hack/cluster/controlplane"
	"github.com/swell-run/swell/hack/cluster/internal/clustertest"
	"github.com/swell-run/swell/hack/cluster/netns"
)

// TestNodeAgent starts a real control plane, runs the node agent inside its
// namespace, and runs pods through it: a Deployment, and pods that use
// their service account's token. The control plane's first build takes
// minutes, so it runs only with SWELL_CLUSTER_IT=1.
func TestNodeAgent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	c, bins := clustertest.Start(ctx, t, "na", log)
	binDir := t.TempDir()
	goBuild(t, "../../..", filepath.Join(binDir, "hello"), "./cmd/hello")
	goBuild(t, ".", filepath.Join(binDir, "agent"), "./testdata/agent")

	agent, err := c.Run(ctx, "node-agent", []string{filepath.Join(binDir, "agent"),
		"-kubeconfig", c.PKI.Node.Kubeconfig, "-scheduler-kubeconfig", c.PKI.Scheduler.Kubeconfig,
		"-node", controlplane.DefaultNodeName, "-netns", c.Netns, "-bridge", netns.Bridge,
		"-state", filepath.Join(c.StateDir, "node"), "-image", "swell/hello=" + filepath.Join(binDir, "hello")})
	nodeState := filepath.Join(c.StateDir, "node")
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
	clustertest.Eventually(t, 30*time.Second, "the default ServiceAccount and an untainted Node", func() error {
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

	t.Run("Deployment", func(t *testing.T) { testDeployment(ctx, t, admin, c.Name, c.Netns) })
	t.Run("ServiceAccountToken", func(t *testing.T) {
		testServiceAccountToken(ctx, t, admin, nodeState, bins.Kubectl, c.Ports.APIServer)
	})
	t.Run("WebhookDialsPodIP", func(t *testing.T) { testWebhookDialsPodIP(ctx, t, admin) })

	if err := syscall.Kill(agent.PID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Exited(agent):
	case <-time.After(10 * time.Second):
		t.Error("the node agent did not stop within 10s of SIGTERM")
	}
}

// testDeployment checks that a Deployment of swell/hello gets Ready pods
// with pod IPs the cluster reaches, and that scaling to zero finishes the
// pods' deletion and removes their namespaces.
func testDeployment(ctx context.Context, t *testing.T, admin kubernetes.Interface, cluster, clusterNetns string) {
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
	clustertest.Eventually(t, 60*time.Second, "2 Ready pods with IPs", func() error {
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
	client := &http.Client{Transport: &http.Transport{DialContext: netns.Dialer(clusterNetns), DisableKeepAlives: true}}
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
	clustertest.Eventually(t, 60*time.Second, "no pods and no pod namespaces", func() error {
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
			if strings.HasPrefix(n, controlplane.PodNetnsPrefix(cluster)) {
				return fmt.Errorf("pod namespace %s remains", n)
			}
		}
		return nil
	})
}

// testServiceAccountToken checks that a pod gets a working kubeconfig with
// a token bound to it, whose ServiceAccount's Role the apiserver enforces,
// and that a pod with automounting off gets none.
func testServiceAccountToken(ctx context.Context, t *testing.T, admin kubernetes.Interface, nodeState, kubectl string, apiserverPort int) {
	ns := "tokens"
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 30*time.Second, "the namespace's default ServiceAccount", func() error {
		_, err := admin.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
	no := false
	for _, sa := range []*corev1.ServiceAccount{
		{ObjectMeta: metav1.ObjectMeta{Name: "reader"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "quiet"}, AutomountServiceAccountToken: &no},
	} {
		if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "greeting"}, Data: map[string]string{"message": "hello"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "configmap-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "configmap-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "configmap-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "reader"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The authorizer reads RBAC through an informer: wait until the grant
	// is in effect, so that the pod's one attempt counts.
	user := "system:serviceaccount:" + ns + ":reader"
	clustertest.Eventually(t, 30*time.Second, "the Role in effect for "+user, func() error {
		r, err := admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: []string{"system:serviceaccounts"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "get", Resource: "configmaps", Name: "greeting"}},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if !r.Status.Allowed {
			return fmt.Errorf("not allowed: %s", r.Status.Reason)
		}
		return nil
	})

	script := `echo "server=$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT"
echo "kubeconfig=${KUBECONFIG-unset}"
[ -n "${KUBECONFIG-}" ] || exit 0
echo "user=$("$KUBECTL" auth whoami -o jsonpath='{.status.userInfo.username}')"
echo "pod=$("$KUBECTL" auth whoami -o jsonpath='{.status.userInfo.extra.authentication\.kubernetes\.io/pod-name[0]}')"
echo "message=$("$KUBECTL" get configmap greeting -o jsonpath='{.data.message}')"
if "$KUBECTL" get secrets 2>&1; then echo secrets=allowed; fi`
	pod := func(name, sa string, automount *bool) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{
				ServiceAccountName:           sa,
				AutomountServiceAccountToken: automount,
				RestartPolicy:                corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "c", Image: "swell/shell", Command: []string{"/bin/sh", "-c", script},
					Env: []corev1.EnvVar{{Name: "KUBECTL", Value: kubectl}}}},
			},
		}
	}
	logs, dirs := map[string]string{}, map[string]string{}
	for _, p := range []*corev1.Pod{pod("reader", "reader", nil), pod("account-says-no", "quiet", nil), pod("pod-says-no", "reader", &no)} {
		created, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		clustertest.Eventually(t, 60*time.Second, "pod "+p.Name+" done", func() error {
			got, err := admin.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if got.Status.Phase != corev1.PodSucceeded && got.Status.Phase != corev1.PodFailed {
				return fmt.Errorf("phase %s", got.Status.Phase)
			}
			return nil
		})
		podDir := filepath.Join(nodeState, "pods", ns+"_"+p.Name+"_"+string(created.UID))
		b, err := os.ReadFile(filepath.Join(podDir, "c", "0.log"))
		if err != nil {
			t.Fatal(err)
		}
		logs[p.Name], dirs[p.Name] = string(b), podDir
		t.Logf("pod %s:\n%s", p.Name, b)
	}

	got := logs["reader"]
	for _, want := range []string{
		"server=198.18.0.1:" + strconv.Itoa(apiserverPort),
		"user=" + user,
		"pod=reader",
		"message=hello",
		`cannot list resource "secrets"`,
		"kubeconfig=" + filepath.Join(dirs["reader"], "kubernetes.io", "serviceaccount", "kubeconfig") + "\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("pod reader's log lacks %q", want)
		}
	}
	if strings.Contains(got, "secrets=allowed") {
		t.Error("pod reader listed Secrets its Role does not grant")
	}
	for _, name := range []string{"account-says-no", "pod-says-no"} {
		if logs[name] != "server=:\nkubeconfig=unset\n" {
			t.Errorf("pod %s got a way to the apiserver with automounting off", name)
		}
		if _, err := os.Stat(filepath.Join(dirs[name], "kubernetes.io")); !os.IsNotExist(err) {
			t.Errorf("pod %s has service account files: %v", name, err)
		}
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

func goBuild(t *testing.T, dir, out, pkg string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v: %s", pkg, err, b)
	}
}

// testWebhookDialsPodIP checks that the apiserver calls an admission
// webhook referenced by a Service at the Service's endpoint, a pod IP (there
// is no kube-proxy to make its ClusterIP work). The pod serves plain HTTP,
// so the call fails, and how it fails shows where it went: an HTTP answer
// to a TLS handshake comes from the pod; a dial of the ClusterIP would be
// refused.
func testWebhookDialsPodIP(ctx context.Context, t *testing.T, admin kubernetes.Interface) {
	ns := "hooks"
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 30*time.Second, "the namespace's default ServiceAccount", func() error {
		_, err := admin.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
	labels := map[string]string{"app": "hook"}
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hook", Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "hello", Image: "swell/hello", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
			ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
				HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}}},
		}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "hook"},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{
			{Name: "https", Port: 443, TargetPort: intstr.FromString("http")}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var podIP string
	clustertest.Eventually(t, 60*time.Second, "a ready endpoint of Service hook", func() error {
		p, err := admin.CoreV1().Pods(ns).Get(ctx, "hook", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !ready(p) {
			return fmt.Errorf("pod hook not ready: %s", p.Status.Phase)
		}
		podIP = p.Status.PodIP
		slices, err := admin.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=hook"})
		if err != nil {
			return err
		}
		for _, sl := range slices.Items {
			for _, ep := range sl.Endpoints {
				if ep.Conditions.Ready != nil && *ep.Conditions.Ready && len(ep.Addresses) > 0 && ep.Addresses[0] == podIP {
					return nil
				}
			}
		}
		return fmt.Errorf("no ready endpoint %s yet", podIP)
	})

	fail, none := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone
	path, port, timeout := "/validate", int32(443), int32(5)
	hook := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "hooks-test"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "configmaps.hooks.test",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: ns, Name: "hook", Path: &path, Port: &port}},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          &timeout,
		}},
	}
	if _, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, hook, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, hook.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete the webhook configuration: %v", err)
		}
	}()
	// The apiserver picks the configuration up through an informer: until
	// it does, creating a ConfigMap succeeds.
	const fromPod = "server gave HTTP response to HTTPS client"
	clustertest.Eventually(t, 30*time.Second, "webhook call that reached pod "+podIP, func() error {
		_, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-"}}, metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), fromPod) {
			return fmt.Errorf("create a ConfigMap: %v, want the webhook's call to fail with %q", err, fromPod)
		}
		return nil
	})
}
