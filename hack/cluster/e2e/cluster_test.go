package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/swell-run/swell/hack/cluster/netns"
	"github.com/swell-run/swell/hack/cluster/nodeimages"
)

const (
	// pollInterval paces every wait on state another process owns.
	pollInterval = 150 * time.Millisecond
	// pollTimeout bounds one look at the state a test waits for, which
	// may be several requests.
	pollTimeout = 20 * time.Second
	// waitTimeout bounds a wait for the control plane and the node to
	// converge. Measured convergence is a few seconds at most; the bound
	// only turns a hang into a failure that shows the pods.
	waitTimeout = 60 * time.Second

	// helloGreeting starts the answer of cmd/hello to a plain GET.
	helloGreeting = "Hello from Swell!"
	// helloPort is where the hello pods listen (env PORT).
	helloPort = 8080
	// helloContainer names the container of every hello pod.
	helloContainer = "hello"

	// nodeIP is the node's address, on the pod network's bridge in the
	// cluster's namespace, where the suite runs: the kubelet probes and
	// calls hooks from it, and the suite listens on it.
	nodeIP = netns.Gateway
)

// runHint says how to run the suite, for skips and failures that need the
// cluster's environment.
const runHint = "run the suite with `make e2e`, which starts a cluster and runs it inside the cluster's network namespace"

var adminConfig = sync.OnceValues(func() (*rest.Config, error) {
	path := os.Getenv("KUBECONFIG")
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("KUBECONFIG %s: %w", path, err)
	}
	// The tests poll in parallel; client-go's default of 5 requests per
	// second would make them wait on the client instead of the cluster.
	cfg.QPS, cfg.Burst = 100, 200
	cfg.UserAgent = "swell-e2e"
	return cfg, nil
})

// env is one test's view of the cluster: the admin's clients and a namespace
// of the test's own.
type env struct {
	t   *testing.T
	cfg *rest.Config
	cs  kubernetes.Interface
	ns  string
}

// setup skips the test when KUBECONFIG is not set, and otherwise creates a
// namespace with a random name for it, deleted (without waiting) when the
// test ends, and waits for the namespace's default ServiceAccount: until
// kube-controller-manager has created it, pods are refused.
func setup(t *testing.T) *env {
	t.Helper()
	if os.Getenv("KUBECONFIG") == "" {
		t.Skip("KUBECONFIG is not set: " + runHint)
	}
	cfg, err := adminConfig()
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("client for %s: %v", cfg.Host, err)
	}
	ns, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: namespacePrefix(t.Name())},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	e := &env{t: t, cfg: cfg, cs: cs, ns: ns.Name}
	t.Logf("namespace %s", e.ns)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := cs.CoreV1().Namespaces().Delete(ctx, e.ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete namespace %s: %v", e.ns, err)
		}
	})
	// Before the namespace goes: cleanups run last registered first.
	t.Cleanup(e.keepNamespaceEvidence)
	e.eventually("ServiceAccount default in namespace "+e.ns, func(ctx context.Context) error {
		_, err := cs.CoreV1().ServiceAccounts(e.ns).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
	return e
}

var notLabelChars = regexp.MustCompile(`[^a-z0-9-]+`)

// namespacePrefix turns a test's name into the generateName of its
// namespace; the apiserver appends a random suffix.
func namespacePrefix(test string) string {
	s := notLabelChars.ReplaceAllString(strings.ToLower(strings.TrimPrefix(test, "Test")), "-")
	return "e2e-" + strings.Trim(s[:min(len(s), 40)], "-") + "-"
}

// podLogs returns the log of the named container of pod, as the kubelet
// serves it through the apiserver: of its current run, or of the one
// before with previous.
func (e *env) podLogs(ctx context.Context, pod *corev1.Pod, container string, previous bool) (string, error) {
	b, err := e.cs.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: container, Previous: previous}).DoRaw(ctx)
	if err != nil {
		return "", fmt.Errorf("logs of container %s of pod %s (previous %t): %w", container, pod.Name, previous, err)
	}
	return string(b), nil
}

// eventually polls cond until it returns nil, for at most waitTimeout; see
// eventuallyWithin.
func (e *env) eventually(what string, cond func(ctx context.Context) error) {
	e.t.Helper()
	e.eventuallyWithin(what, waitTimeout, cond)
}

// eventuallyWithin polls cond until it returns nil, for at most timeout, and
// fails the test naming what did not happen and cond's last error, which
// says what it saw instead (the namespace's pods and events follow, from
// the test's cleanup).
func (e *env) eventuallyWithin(what string, timeout time.Duration, cond func(ctx context.Context) error) {
	e.t.Helper()
	start := time.Now()
	end := start.Add(timeout)
	var last error
	// The bound is kept apart from the context cond gets, as in
	// consistently: a poll whose context ran out with the bound (or that a
	// client's rate limiter saw coming) would end on an error that says
	// nothing of what the test waits for, and hide the one before it.
	err := wait.PollUntilContextCancel(e.t.Context(), pollInterval, true, func(ctx context.Context) (bool, error) {
		if last != nil && !time.Now().Before(end) {
			return false, context.DeadlineExceeded
		}
		ctx, cancel := context.WithTimeout(ctx, pollTimeout)
		defer cancel()
		last = cond(ctx)
		return last == nil, nil
	})
	if err != nil {
		e.t.Fatalf("%s: not within %s\nlast seen: %v", what, timeout, last)
	}
	e.t.Logf("%s after %s", what, time.Since(start).Round(time.Millisecond))
}

// consistently polls cond for d and fails the test as soon as it returns an
// error, saying what broke.
func (e *env) consistently(what string, d time.Duration, cond func(ctx context.Context) error) {
	e.t.Helper()
	// The window is kept apart from the context cond gets: a poll's
	// context that expired with the window would fail a request in flight
	// and read as the condition breaking.
	end := time.Now().Add(d)
	var broken error
	err := wait.PollUntilContextCancel(e.t.Context(), pollInterval, true, func(ctx context.Context) (bool, error) {
		if !time.Now().Before(end) {
			return true, nil
		}
		broken = cond(ctx)
		return broken != nil, nil
	})
	if broken != nil {
		e.t.Fatalf("%s: broken: %v", what, broken)
	}
	if err != nil {
		e.t.Fatalf("%s: %v", what, err)
	}
}

// describe lists the namespace's pods with their statuses and its recent
// events, for failure messages.
func (e *env) describe() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var b strings.Builder
	pods, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		fmt.Fprintf(&b, "pods of %s: %v\n", e.ns, err)
	} else {
		fmt.Fprintf(&b, "pods of %s: %d\n", e.ns, len(pods.Items))
		for i := range pods.Items {
			b.WriteString(describePod(&pods.Items[i]))
		}
	}
	events, err := e.cs.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		fmt.Fprintf(&b, "events of %s: %v\n", e.ns, err)
		return b.String()
	}
	items := events.Items
	sort.SliceStable(items, func(i, j int) bool { return eventTime(&items[i]).Before(eventTime(&items[j])) })
	const maxEvents = 20
	if len(items) > maxEvents {
		items = items[len(items)-maxEvents:]
	}
	fmt.Fprintf(&b, "events of %s (last %d):\n", e.ns, len(items))
	for _, ev := range items {
		fmt.Fprintf(&b, "  %s %s/%s %s: %s\n", ev.Type, ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Reason, ev.Message)
	}
	return b.String()
}

func eventTime(ev *corev1.Event) time.Time {
	if !ev.EventTime.IsZero() {
		return ev.EventTime.Time
	}
	return ev.LastTimestamp.Time
}

// describePod renders a pod's status in a few lines.
func describePod(p *corev1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  pod %s (uid %s): phase %s, node %q, IP %q", p.Name, p.UID, p.Status.Phase, p.Spec.NodeName, p.Status.PodIP)
	if p.DeletionTimestamp != nil {
		fmt.Fprintf(&b, ", deleting since %s", p.DeletionTimestamp.Format(time.RFC3339))
	}
	if p.Status.Reason != "" || p.Status.Message != "" {
		fmt.Fprintf(&b, ", %s: %s", p.Status.Reason, p.Status.Message)
	}
	b.WriteString("\n")
	for _, c := range p.Status.Conditions {
		fmt.Fprintf(&b, "    condition %s=%s since %s", c.Type, c.Status, c.LastTransitionTime.Format(time.RFC3339))
		if c.Reason != "" || c.Message != "" {
			fmt.Fprintf(&b, " (%s: %s)", c.Reason, c.Message)
		}
		b.WriteString("\n")
	}
	for _, c := range p.Status.ContainerStatuses {
		fmt.Fprintf(&b, "    container %s: ready %t, restarts %d, state %s, last state %s\n",
			c.Name, c.Ready, c.RestartCount, describeState(c.State), describeState(c.LastTerminationState))
	}
	return b.String()
}

func describeState(s corev1.ContainerState) string {
	switch {
	case s.Running != nil:
		return "running since " + s.Running.StartedAt.Format(time.RFC3339)
	case s.Waiting != nil:
		return fmt.Sprintf("waiting (%s: %s)", s.Waiting.Reason, s.Waiting.Message)
	case s.Terminated != nil:
		return fmt.Sprintf("terminated with exit code %d (%s: %s)", s.Terminated.ExitCode, s.Terminated.Reason, s.Terminated.Message)
	}
	return "none"
}

// podReady returns the pod's Ready condition, or nil when it has none.
func podReady(p *corev1.Pod) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == corev1.PodReady {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// isReady reports whether the pod's Ready condition is True.
func isReady(p *corev1.Pod) bool {
	c := podReady(p)
	return c != nil && c.Status == corev1.ConditionTrue
}

// containerStatus returns the status of the named container, or nil.
func containerStatus(p *corev1.Pod, name string) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == name {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// helloDeployment is a Deployment of hello pods (nodeimages.Hello)
// labelled app=name, ready once GET /healthz answers, probed every second.
func helloDeployment(name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name:            helloContainer,
						Image:           nodeimages.Hello,
						ImagePullPolicy: corev1.PullIfNotPresent,
						Env:             []corev1.EnvVar{{Name: "PORT", Value: fmt.Sprint(helloPort)}},
						Ports:           []corev1.ContainerPort{{Name: "http", ContainerPort: helloPort, Protocol: corev1.ProtocolTCP}},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
								Path: "/healthz",
								Port: intstr.FromInt32(helloPort),
							}},
							PeriodSeconds: 1,
						},
					}},
				},
			},
		},
	}
}

// helloService is a Service named like the Deployment that selects its pods,
// port 80 to the pods' 8080.
func helloService(name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{
				Name:       "http",
				Port:       80,
				TargetPort: intstr.FromInt32(helloPort),
				Protocol:   corev1.ProtocolTCP,
			}},
		},
	}
}

// createHello creates the Deployment and a Service for it.
func (e *env) createHello(d *appsv1.Deployment) {
	e.t.Helper()
	if _, err := e.cs.AppsV1().Deployments(e.ns).Create(e.t.Context(), d, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create deployment %s: %v", d.Name, err)
	}
	if _, err := e.cs.CoreV1().Services(e.ns).Create(e.t.Context(), helloService(d.Name), metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create service %s: %v", d.Name, err)
	}
}

// pods lists the pods labelled app=name.
func (e *env) pods(ctx context.Context, name string) ([]corev1.Pod, error) {
	list, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{"app": name}).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("list pods of %s: %w", name, err)
	}
	return list.Items, nil
}

// endpoint is one address of a Service's EndpointSlices.
type endpoint struct {
	ip    string
	ready bool
}

// endpoints lists the addresses in the EndpointSlices of the Service, in
// the order of the slices, with their ready condition (nil counts as ready,
// as the API defines it), and checks every slice carries the target port.
func (e *env) endpoints(ctx context.Context, service string) ([]endpoint, error) {
	list, err := e.cs.DiscoveryV1().EndpointSlices(e.ns).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + service,
	})
	if err != nil {
		return nil, fmt.Errorf("list EndpointSlices of service %s: %w", service, err)
	}
	var eps []endpoint
	for _, s := range list.Items {
		if len(s.Endpoints) > 0 && !slices.ContainsFunc(s.Ports, func(p discoveryv1.EndpointPort) bool {
			return p.Port != nil && *p.Port == helloPort
		}) {
			return nil, fmt.Errorf("EndpointSlice %s has ports %v, want %d among them", s.Name, describePorts(s.Ports), helloPort)
		}
		for _, ep := range s.Endpoints {
			ready := ep.Conditions.Ready == nil || *ep.Conditions.Ready
			for _, a := range ep.Addresses {
				eps = append(eps, endpoint{ip: a, ready: ready})
			}
		}
	}
	return eps, nil
}

func describePorts(ports []discoveryv1.EndpointPort) []string {
	var s []string
	for _, p := range ports {
		if p.Port != nil {
			s = append(s, fmt.Sprint(*p.Port))
		}
	}
	return s
}

// waitServing waits until exactly n pods of the Deployment exist, all
// Running, Ready and not being deleted, and the Service's EndpointSlices list
// exactly their IPs, each once and ready. It returns the pods.
func (e *env) waitServing(name string, n int) []corev1.Pod {
	e.t.Helper()
	var serving []corev1.Pod
	e.eventually(fmt.Sprintf("%d ready pods of %s, and exactly their IPs ready in the EndpointSlices", n, name), func(ctx context.Context) error {
		pods, err := e.pods(ctx, name)
		if err != nil {
			return err
		}
		var ips []string
		for i := range pods {
			p := &pods[i]
			if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || !isReady(p) || p.Status.PodIP == "" {
				return fmt.Errorf("pod %s is not Running and Ready with an IP", p.Name)
			}
			ips = append(ips, p.Status.PodIP)
		}
		if len(pods) != n {
			return fmt.Errorf("%d pods, want %d", len(pods), n)
		}
		eps, err := e.endpoints(ctx, name)
		if err != nil {
			return err
		}
		var listed []string
		for _, ep := range eps {
			if !ep.ready {
				return fmt.Errorf("endpoints %v: %s is not ready", eps, ep.ip)
			}
			listed = append(listed, ep.ip)
		}
		slices.Sort(ips)
		slices.Sort(listed)
		if !slices.Equal(ips, listed) {
			return fmt.Errorf("EndpointSlices list %v, want the pod IPs %v", listed, ips)
		}
		serving = pods
		return nil
	})
	return serving
}

// httpClient reaches pod IPs and ClusterIPs directly, never through a
// proxy from the environment, on a new connection each time: kube-proxy
// picks a Service's endpoint per connection.
var httpClient = &http.Client{
	Transport: &http.Transport{
		Proxy:             nil,
		DialContext:       (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		DisableKeepAlives: true,
	},
	Timeout: 10 * time.Second,
}

// get sends GET url and returns the status code and body.
func get(ctx context.Context, url string) (int, string, error) {
	return getWith(ctx, httpClient, url)
}

// getWith is get through client c.
func getWith(ctx context.Context, c *http.Client, url string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, "", fmt.Errorf("GET %s: read body: %w", url, err)
	}
	return resp.StatusCode, string(body), nil
}

// serviceURL is the URL of path at the Service's ClusterIP and first
// port, where kube-proxy sends it on to one of the Service's endpoints.
func (e *env) serviceURL(ctx context.Context, service, path string) (string, error) {
	s, err := e.cs.CoreV1().Services(e.ns).Get(ctx, service, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if s.Spec.ClusterIP == "" || s.Spec.ClusterIP == corev1.ClusterIPNone || len(s.Spec.Ports) == 0 {
		return "", fmt.Errorf("service %s has ClusterIP %q and ports %v", service, s.Spec.ClusterIP, s.Spec.Ports)
	}
	return "http://" + net.JoinHostPort(s.Spec.ClusterIP, fmt.Sprint(s.Spec.Ports[0].Port)) + path, nil
}

// waitProxied waits until kube-proxy sends new connections to the Swell
// service's ClusterIP to exactly the endpoints its route slice lists, the
// slice routing to route ("pods" or "activator"; "" for either). A
// written slice says nothing yet of where a connection goes: kube-proxy
// programs it a moment later, and a client sent before then is refused, or
// reaches what the slice listed before.
func (e *env) waitProxied(service, route string) {
	e.t.Helper()
	what := "kube-proxy sending the ClusterIP of " + service + " to what Swell's EndpointSlice lists"
	if route != "" {
		what += ", routed to the " + route
	}
	e.eventually(what, func(ctx context.Context) error {
		if route != "" {
			if err := e.routeIs(ctx, service, route); err != nil {
				return err
			}
		}
		return proxiedAsListed(ctx, e.cs, e.ns, service)
	})
}

// proxiedAsListed reports, as an error, when kube-proxy does not send new
// connections to the ClusterIP of the Service ns/name to exactly the ready
// endpoints its EndpointSlices list, or when they list none.
func proxiedAsListed(ctx context.Context, cs kubernetes.Interface, ns, name string) error {
	list, err := cs.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + name,
	})
	if err != nil {
		return err
	}
	var ready []string
	for _, s := range list.Items {
		for _, p := range s.Ports {
			for _, ep := range s.Endpoints {
				if p.Port == nil || (ep.Conditions.Ready != nil && !*ep.Conditions.Ready) {
					continue
				}
				for _, a := range ep.Addresses {
					ready = append(ready, net.JoinHostPort(a, fmt.Sprint(*p.Port)))
				}
			}
		}
	}
	if len(ready) == 0 {
		return fmt.Errorf("service %s/%s has no ready endpoint", ns, name)
	}
	slices.Sort(ready)
	got, err := kubeProxyDestinations(ctx, ns, name)
	if err != nil {
		return err
	}
	if !slices.Equal(got, slices.Compact(ready)) {
		return fmt.Errorf("kube-proxy sends the ClusterIP of %s/%s to %v, its ready endpoints are %v", ns, name, got, ready)
	}
	return nil
}

// iptablesComment matches kube-proxy's comment on the rules of one port of
// a Service: "ns/name:port", or "ns/name" for a single unnamed port.
var iptablesComment = regexp.MustCompile(`--comment "?([^" :]+/[^" :]+)(:[^" ]*)?[ "]`)

// kubeProxyDestinations reads the rules kube-proxy (in iptables mode, as
// the node runs it) programmed in the cluster's network namespace, where
// the suite runs, and returns the sorted ip:port destinations it sends new
// connections to the ClusterIPs of the Service ns/name to: none until it
// has seen ready endpoints for it. The cluster is dual-stack: a Service's
// IPv4 ClusterIP is in iptables' nat table, its IPv6 one in ip6tables'.
func kubeProxyDestinations(ctx context.Context, ns, name string) ([]string, error) {
	var dests []string
	for _, prog := range []string{"iptables-save", "ip6tables-save"} {
		bin, err := exec.LookPath(prog)
		if err != nil {
			bin = "/usr/sbin/" + prog
		}
		out, err := exec.CommandContext(ctx, bin, "-t", "nat").Output()
		if err != nil {
			return nil, fmt.Errorf("read kube-proxy's rules: %s: %w", bin, err)
		}
		dests = append(dests, parseKubeProxyRules(string(out), ns+"/"+name)...)
	}
	slices.Sort(dests)
	return dests, nil
}

// parseKubeProxyRules follows the iptables-save output of kube-proxy's nat
// table from the Service's cluster-IP rule in KUBE-SERVICES, through its
// KUBE-SVC chain, to the DNAT of each KUBE-SEP chain it jumps to.
func parseKubeProxyRules(rules, service string) []string {
	jump := func(line string) string {
		_, after, ok := strings.Cut(line, " -j ")
		if !ok {
			return ""
		}
		return strings.Fields(after)[0]
	}
	ofService := func(line string) bool {
		m := iptablesComment.FindStringSubmatch(line)
		return m != nil && m[1] == service
	}
	svcChains := map[string]bool{}
	sepChains := map[string]bool{}
	dnat := map[string]string{}
	var lines []string
	for line := range strings.Lines(rules) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "-A ") {
			continue
		}
		lines = append(lines, line)
		chain := strings.Fields(line)[1]
		j := jump(line)
		switch {
		case chain == "KUBE-SERVICES" && strings.HasPrefix(j, "KUBE-SVC-") && ofService(line) && strings.Contains(line, "cluster IP"):
			svcChains[j] = true
		case strings.HasPrefix(chain, "KUBE-SEP-") && j == "DNAT":
			if _, to, ok := strings.Cut(line, "--to-destination "); ok {
				dnat[chain] = strings.Fields(to)[0]
			}
		}
	}
	for _, line := range lines {
		f := strings.Fields(line)
		if svcChains[f[1]] && strings.HasPrefix(jump(line), "KUBE-SEP-") {
			sepChains[jump(line)] = true
		}
	}
	var dests []string
	for sep := range sepChains {
		if d, ok := dnat[sep]; ok {
			dests = append(dests, d)
		}
	}
	slices.Sort(dests)
	return slices.Compact(dests)
}

// podProcess returns the PID of a process of the pod: one in the pod's
// cgroup, which the kubelet names pod<UID>.
func podProcess(p *corev1.Pod) (int, error) {
	want := []byte("/pod" + string(p.UID) + "/")
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, d := range entries {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cg, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cgroup"))
		if err == nil && bytes.Contains(cg, want) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no process in the cgroup of pod %s (UID %s)", p.Name, p.UID)
}

// podURL is the URL of path on a hello pod's own IP and port.
func podURL(p *corev1.Pod, path string) string {
	return "http://" + net.JoinHostPort(p.Status.PodIP, fmt.Sprint(helloPort)) + path
}
