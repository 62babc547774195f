package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
)

// readyDelay is how long the hello pods of TestDeploymentBecomesReadyEndpoints
// wait before they listen (env READY_DELAY): long enough that the kubelet
// reports each container running while its readiness probe still fails.
const readyDelay = 2 * time.Second

// podHistory is what a watch saw of one pod.
type podHistory struct {
	last *corev1.Pod
	// runningUnready is set when the pod was seen Running with its
	// container running and its Ready condition not True.
	runningUnready bool
}

func TestDeploymentBecomesReadyEndpoints(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const name, replicas = "hello", 3

	// Watch from before the pods exist, so every status the kubelet writes
	// is seen, not just the latest.
	w, err := e.cs.CoreV1().Pods(e.ns).Watch(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("watch pods: %v", err)
	}
	defer w.Stop()

	d := helloDeployment(name, replicas)
	c := &d.Spec.Template.Spec.Containers[0]
	c.Env = append(c.Env, corev1.EnvVar{Name: "READY_DELAY", Value: readyDelay.String()})
	e.createHello(d)

	seen := map[types.UID]*podHistory{}
	readyPods := func() int {
		n := 0
		for _, h := range seen {
			if h.last.DeletionTimestamp == nil && isReady(h.last) {
				n++
			}
		}
		return n
	}
	timeout := time.After(waitTimeout)
	for readyPods() < replicas {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("pod watch ended before %d pods were Ready", replicas)
			}
			if ev.Type == watch.Error {
				t.Fatalf("pod watch: %v", ev.Object)
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			h := seen[p.UID]
			if h == nil {
				h = &podHistory{}
				seen[p.UID] = h
			}
			h.last = p
			if cs := containerStatus(p, helloContainer); p.Status.Phase == corev1.PodRunning &&
				cs != nil && cs.State.Running != nil && !isReady(p) {
				h.runningUnready = true
			}
		case <-timeout:
			t.Fatalf("%d of %d pods Ready after %s", readyPods(), replicas, waitTimeout)
		}
	}

	for _, h := range seen {
		p := h.last
		if p.DeletionTimestamp != nil || !isReady(p) {
			continue
		}
		if !h.runningUnready {
			t.Errorf("pod %s was never seen running and not Ready before it turned Ready, though it listens only %s after it starts", p.Name, readyDelay)
		}
		cs := containerStatus(p, helloContainer)
		if cs == nil || cs.State.Running == nil {
			t.Errorf("pod %s is Ready without a running container:\n%s", p.Name, describePod(p))
			continue
		}
		// The API keeps whole seconds, so a transition at least readyDelay
		// after the start may show as readyDelay-1s after it, never less.
		ready := podReady(p).LastTransitionTime.Time
		if earliest := cs.State.Running.StartedAt.Add(readyDelay - time.Second); ready.Before(earliest) {
			t.Errorf("pod %s turned Ready at %s, container started at %s: before the app could have answered its probe",
				p.Name, ready.Format(time.RFC3339), cs.State.Running.StartedAt.Format(time.RFC3339))
		}
	}

	pods := e.waitServing(name, replicas)
	for i := range pods {
		url := podURL(&pods[i], "/")
		code, body, err := get(t.Context(), url)
		if err != nil {
			t.Errorf("pod %s: %v", pods[i].Name, err)
			continue
		}
		if code != http.StatusOK || !strings.HasPrefix(body, helloGreeting) {
			t.Errorf("GET %s: %d %q, want 200 starting with %q", url, code, body, helloGreeting)
		}
	}

	// The Service's ClusterIP spreads connections over every pod: the
	// greeting names the replica that answered.
	answered := map[string]bool{}
	e.eventually(fmt.Sprintf("each of the %d pods answering at the ClusterIP of service %s", replicas, name), func(ctx context.Context) error {
		url, err := e.serviceURL(ctx, name, "/")
		if err != nil {
			return err
		}
		code, body, err := get(ctx, url)
		if err != nil || code != http.StatusOK || !strings.HasPrefix(body, helloGreeting) {
			return fmt.Errorf("GET %s: %d %q %v", url, code, body, err)
		}
		for i := range pods {
			if strings.Contains(body, pods[i].Name) {
				answered[pods[i].Name] = true
			}
		}
		if len(answered) < replicas {
			return fmt.Errorf("answered by %v so far", answered)
		}
		return nil
	})
}

func TestScaleSubresource(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const name = "hello"

	// The preStop hook calls the test: the kubelet sends it before it
	// stops the container, to the host the hook names, the node's own
	// address, where the test listens.
	hooks := make(chan string, 16)
	ln, err := net.Listen("tcp", net.JoinHostPort(nodeIP, "0"))
	if err != nil {
		t.Fatalf("listen for the preStop hooks on the node's address: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hooks <- r.URL.Query().Get("from")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	d := helloDeployment(name, 3)
	grace := int64(5)
	spec := &d.Spec.Template.Spec
	spec.TerminationGracePeriodSeconds = &grace
	c := &spec.Containers[0]
	c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
		HTTPGet: &corev1.HTTPGetAction{
			Host: nodeIP,
			Port: intstr.FromInt32(int32(ln.Addr().(*net.TCPAddr).Port)),
			Path: "/prestop?from=" + name,
		},
	}}
	e.createHello(d)
	removed := e.waitServing(name, 3)

	// Every status the kubelet writes from now on, up to each pod's
	// deletion: the last one holds how its container ended.
	w, err := e.cs.CoreV1().Pods(e.ns).Watch(t.Context(), metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		t.Fatalf("watch pods: %v", err)
	}
	defer w.Stop()
	final := map[string]*corev1.Pod{}
	deleted := map[string]bool{}

	e.scale(name, 0)
	// hello drains at once on SIGTERM: the pods go well within their grace
	// period, and a kubelet that waited it out and killed them would still
	// make the bound.
	timeout := time.After(time.Duration(grace)*time.Second + 20*time.Second)
	for len(deleted) < len(removed) {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("pod watch ended with %d of %d pods deleted", len(deleted), len(removed))
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			final[p.Name] = p
			if ev.Type == watch.Deleted {
				deleted[p.Name] = true
			}
		case <-timeout:
			t.Fatalf("%d of %d pods of %s deleted from the API after scaling to 0", len(deleted), len(removed), name)
		}
	}
	e.eventually("no endpoints for "+name, func(ctx context.Context) error {
		eps, err := e.endpoints(ctx, name)
		if err != nil {
			return err
		}
		if len(eps) > 0 {
			return fmt.Errorf("endpoints %v", eps)
		}
		return nil
	})
	// The kubelet ran each pod's hook before it stopped the container.
	for i := range removed {
		select {
		case from := <-hooks:
			if from != name {
				t.Errorf("a preStop hook came from %q, want %q", from, name)
			}
		default:
			t.Errorf("%d preStop hooks ran for %d pods removed", i, len(removed))
		}
	}
	for i := range removed {
		p := final[removed[i].Name]
		if p == nil {
			t.Errorf("pod %s: no status seen", removed[i].Name)
			continue
		}
		// Exit code 0 is hello's clean drain on SIGTERM; SIGKILL at the end
		// of the grace period would have left 137.
		cs := containerStatus(p, helloContainer)
		if cs == nil || cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0 {
			t.Errorf("pod %s did not drain on SIGTERM: its last status\n%s", p.Name, describePod(p))
		}
		// No process of a removed pod is left in its cgroup.
		e.eventually(fmt.Sprintf("every process of pod %s gone", p.Name), func(context.Context) error {
			if pid, err := podProcess(p); err == nil {
				return fmt.Errorf("process %d still runs", pid)
			}
			return nil
		})
	}

	e.scale(name, 5)
	e.waitServing(name, 5)
}

// scale sets the Deployment's replicas through its scale subresource and
// waits until the subresource's status reports them.
func (e *env) scale(name string, replicas int32) {
	e.t.Helper()
	deployments := e.cs.AppsV1().Deployments(e.ns)
	var s *autoscalingv1.Scale
	var from int32
	// The Scale carries the Deployment's resourceVersion, which the
	// deployment controller moves as it writes the status: a conflict is
	// retried on a fresh read, as every client of the subresource does.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := deployments.GetScale(e.t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		from = cur.Spec.Replicas
		cur.Spec.Replicas = replicas
		s, err = deployments.UpdateScale(e.t.Context(), name, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Fatalf("scale %s from %d to %d: %v", name, from, replicas, err)
	}
	if s.Spec.Replicas != replicas {
		e.t.Fatalf("scale %s to %d: the update answered spec.replicas %d", name, replicas, s.Spec.Replicas)
	}
	e.t.Logf("scaled %s from %d to %d", name, from, replicas)
	e.eventually(fmt.Sprintf("scale of %s reports %d replicas", name, replicas), func(ctx context.Context) error {
		s, err := deployments.GetScale(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if s.Spec.Replicas != replicas || s.Status.Replicas != replicas {
			return fmt.Errorf("spec.replicas %d, status.replicas %d", s.Spec.Replicas, s.Status.Replicas)
		}
		return nil
	})
}

// observeFor is how long TestFailingReadinessNeverAnEndpoint watches a pod
// whose probe fails: ten periods of its probe.
const observeFor = 10 * time.Second

func TestFailingReadinessNeverAnEndpoint(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const name = "unready"

	d := helloDeployment(name, 1)
	// hello answers the status a request's query asks for, whatever the path.
	d.Spec.Template.Spec.Containers[0].ReadinessProbe.HTTPGet.Path = "/?status=503"
	e.createHello(d)

	var pod corev1.Pod
	e.eventually("one pod of "+name+" Running with an IP", func(ctx context.Context) error {
		pods, err := e.pods(ctx, name)
		if err != nil {
			return err
		}
		if len(pods) != 1 {
			return fmt.Errorf("%d pods, want 1", len(pods))
		}
		p := pods[0]
		if cs := containerStatus(&p, helloContainer); p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" || cs == nil || cs.State.Running == nil {
			return fmt.Errorf("pod %s: phase %s, IP %q, container not running", p.Name, p.Status.Phase, p.Status.PodIP)
		}
		pod = p
		return nil
	})

	// Not ready endpoints are listed too: waiting for the pod's IP shows the
	// EndpointSlice controller has seen the pod, so what follows is not
	// vacuous.
	readyEndpoint := func(ctx context.Context) (listed bool, err error) {
		eps, err := e.endpoints(ctx, name)
		if err != nil {
			return false, err
		}
		for _, ep := range eps {
			if ep.ip == pod.Status.PodIP {
				if ep.ready {
					return true, fmt.Errorf("EndpointSlices list %s as ready: %v", ep.ip, eps)
				}
				listed = true
			}
		}
		return listed, nil
	}
	e.eventually("pod IP "+pod.Status.PodIP+" listed not ready in the EndpointSlices", func(ctx context.Context) error {
		listed, err := readyEndpoint(ctx)
		if err == nil && !listed {
			return fmt.Errorf("%s not listed", pod.Status.PodIP)
		}
		return err
	})

	e.consistently("pod "+pod.Name+" never Ready and never a ready endpoint", observeFor, func(ctx context.Context) error {
		p, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.UID != pod.UID {
			return fmt.Errorf("pod %s was replaced", pod.Name)
		}
		if cs := containerStatus(p, helloContainer); p.Status.Phase != corev1.PodRunning || cs == nil || cs.State.Running == nil {
			return fmt.Errorf("pod is not running any more:\n%s", describePod(p))
		}
		if isReady(p) {
			return fmt.Errorf("pod turned Ready though its probe answers 503:\n%s", describePod(p))
		}
		_, err = readyEndpoint(ctx)
		return err
	})

	p, err := e.cs.CoreV1().Pods(e.ns).Get(t.Context(), pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := podReady(p); c == nil || c.Status != corev1.ConditionFalse {
		t.Errorf("pod %s has Ready condition %v, want False", p.Name, c)
	}
	// hello counts every request but /stats and /healthz: the probe's
	// requests show it really asked the app, once a second.
	code, body, err := get(t.Context(), podURL(p, "/stats"))
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /stats of pod %s: %d %q %v", p.Name, code, body, err)
	}
	var stats struct {
		Requests *int `json:"requests"`
	}
	if err := json.Unmarshal([]byte(body), &stats); err != nil || stats.Requests == nil {
		t.Fatalf("GET /stats of pod %s: no request count in %q (%v)", p.Name, body, err)
	}
	if want := int(observeFor/time.Second) / 2; *stats.Requests < want {
		t.Errorf("the app of pod %s answered %d requests while it was observed for %s, want at least %d probes", p.Name, *stats.Requests, observeFor, want)
	}
}
