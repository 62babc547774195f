package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// What Swell's manifests and controllers name (kube/ in the main
// module, which this module does not import).
const (
	swellNamespace   = "swell-system"
	labelEnabled     = "swell.run/enabled"
	allowedCallers   = "swell.run/allowed-callers"
	labelRoute       = "swell.run/route"
	annotationStatus = "swell.run/status"
	annotationSel    = "swell.run/selector"
	leaseName        = "swell-autoscaler"
	activatorPort    = "http"
	queueProxyPort   = 8012
	// activators is how many activators the suite runs.
	activators = 3
	// memoryKeepInterval is the autoscaler's MEMORY_KEEP_INTERVAL in the
	// suite.
	memoryKeepInterval = 3 * time.Second
	// installTimeout bounds Swell's install: the images are on the node
	// already, so this is the control plane, the containers' start and the
	// readiness probes.
	installTimeout = 2 * time.Minute
	// scaleTimeout bounds a scaling decision that waits on the stable
	// window the tests set (6 s) and the pods' start.
	scaleTimeout = 90 * time.Second
)

// installSwell installs Swell once for the whole suite, as its users
// do: `helm install` of its chart, packaged by the harness with the images
// built from this tree pinned by digest (SWELL_DEPLOY/swell.tgz), with the
// settings the tests rely on; and waits until both the autoscaler's
// replicas and the activator's are ready and the webhooks hold the
// autoscaler's CA. The tests that need Swell call it first.
var installSwell = sync.OnceValue(func() error {
	ctx, cancel := context.WithTimeout(context.Background(), installTimeout)
	defer cancel()
	overlay := os.Getenv("SWELL_DEPLOY")
	if overlay == "" {
		return fmt.Errorf("SWELL_DEPLOY is not set, so Swell's images are not known: %s", runHint)
	}
	env, err := json.Marshal([]map[string]string{
		// What a service's policy learns is written every few seconds
		// rather than every five minutes, so that a test sees it kept
		// (TestSwellLeaderFailover).
		{"name": "MEMORY_KEEP_INTERVAL", "value": memoryKeepInterval.String()},
	})
	if err != nil {
		return err
	}
	if out, err := helm(ctx, "install", "swell", filepath.Join(overlay, "swell.tgz"),
		"--namespace", swellNamespace, "--create-namespace",
		"--set-json", "autoscaler.env="+string(env),
		// Three activators rather than two, so that every test splits a
		// service's capacity among several and the pods count each one's
		// requests apart.
		"--set", fmt.Sprintf("activator.autoscaling.minReplicas=%d", activators),
		// Short windows, so that scaling to zero happens within a test.
		"--set", "defaults.window=6s",
		"--set", "defaults.scale-to-zero-grace-period=4s",
		"--set", "defaults.enable-scale-to-zero=true",
	); err != nil {
		return fmt.Errorf("helm install %s: %v\n%s", filepath.Join(overlay, "swell.tgz"), err, out)
	}
	cfg, err := adminConfig()
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	// The HPA raises the activators to its minimum on its own, at its
	// next sync; scaled here, they start at once. A patch, not an update:
	// the HPA and the Deployment's controller write the same object.
	patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, activators)
	if _, err := cs.AppsV1().Deployments(swellNamespace).Patch(ctx, "activator", types.MergePatchType, patch, metav1.PatchOptions{}, "scale"); err != nil {
		return fmt.Errorf("scale the activators to %d: %w", activators, err)
	}
	var last error
	if err := wait.PollUntilContextCancel(ctx, pollInterval, true, func(ctx context.Context) (bool, error) {
		last = swellReady(ctx, cs)
		return last == nil, nil
	}); err != nil {
		return fmt.Errorf("Swell not ready within %v: %v", installTimeout, last)
	}
	return nil
})

// helm runs the Helm the harness built (SWELL_HELM) against the cluster.
func helm(ctx context.Context, args ...string) (string, error) {
	bin := os.Getenv("SWELL_HELM")
	if bin == "" {
		return "", fmt.Errorf("SWELL_HELM is not set: %s", runHint)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// swellReady says what Swell still lacks, or nil.
func swellReady(ctx context.Context, cs kubernetes.Interface) error {
	for _, name := range []string{"autoscaler", "activator"} {
		d, err := cs.AppsV1().Deployments(swellNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := rolledOut(d); err != nil {
			return err
		}
	}
	mw, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "swell-webhook", metav1.GetOptions{})
	if err != nil {
		return err
	}
	vw, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "swell-webhook", metav1.GetOptions{})
	if err != nil {
		return err
	}
	if len(mw.Webhooks) == 0 || len(mw.Webhooks[0].ClientConfig.CABundle) == 0 || len(vw.Webhooks) == 0 || len(vw.Webhooks[0].ClientConfig.CABundle) == 0 {
		return fmt.Errorf("the webhook configurations have no CA bundle yet")
	}
	if _, err := activatorAddrs(ctx, cs); err != nil {
		return err
	}
	// The API server calls the webhooks at their Service's ClusterIP, and
	// clients reach the activators at theirs: both through kube-proxy,
	// which programs them a moment after the endpoints are ready.
	for _, svc := range []string{"swell-webhook", "activator"} {
		if err := proxiedAsListed(ctx, cs, swellNamespace, svc); err != nil {
			return err
		}
	}
	// Every activator reports to the autoscalers that lead: until one has
	// connected, a request it holds for a service at zero pokes no one.
	return activatorsConnected(ctx, cs)
}

// rolledOut reports, as an error, when the Deployment's controller has not
// seen its latest spec, or it has not exactly as many replicas as it
// wants, all updated and ready.
func rolledOut(d *appsv1.Deployment) error {
	want := ptrOr(d.Spec.Replicas, 1)
	if st := d.Status; st.ObservedGeneration < d.Generation || st.UpdatedReplicas < want || st.ReadyReplicas < want || st.Replicas > want {
		return fmt.Errorf("deployment %s/%s: %d of %d updated and %d ready, %d in all", d.Namespace, d.Name, st.UpdatedReplicas, want, st.ReadyReplicas, st.Replicas)
	}
	return nil
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// kubectl runs kubectl (on PATH in the cluster's environment) with stdin,
// and returns its combined output.
func kubectl(ctx context.Context, stdin []byte, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "kubectl", args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// swellSetup is setup for a test of Swell: Swell installed and ready, a
// namespace of the test's own.
func swellSetup(t *testing.T) *env {
	t.Helper()
	e := setup(t)
	t.Cleanup(e.keepSwellEvidence)
	if err := installSwell(); err != nil {
		t.Fatalf("install Swell: %v", err)
	}
	// Whole again after the tests that take a part of it away (a leader
	// deleted, the autoscaler restarted in buckets), whatever ran before.
	e.eventuallyWithin("Swell ready", installTimeout, func(ctx context.Context) error {
		return swellReady(ctx, e.cs)
	})
	return e
}

// swellHello is a hello Deployment opted into Swell, with annotations.
func swellHello(name string, replicas *int32, annotations map[string]string) *appsv1.Deployment {
	d := helloDeployment(name, 1)
	d.Spec.Replicas = replicas
	d.Labels = map[string]string{"app": name, labelEnabled: "true"}
	// The template's labels are a map of their own: the selector keeps
	// only app.
	d.Spec.Template.Labels = map[string]string{"app": name, labelEnabled: "true"}
	// The suite's requests come from the test process on the node, which
	// is no pod: the activator admits it as no NetworkPolicy selects the
	// pods, and, whatever a test's policies say, as the Deployment allows
	// any caller (docs/security.md).
	d.Annotations = map[string]string{allowedCallers: "*"}
	maps.Copy(d.Annotations, annotations)
	return d
}

func int32p(n int32) *int32 { return &n }

// noPods reports, as an error, when a pod of service is left: one still
// draining after a scale to zero serves a request the activator sends it,
// and a test of a start from zero would measure none.
func (e *env) noPods(ctx context.Context, service string) error {
	pods, err := e.pods(ctx, service)
	if err != nil {
		return err
	}
	if len(pods) > 0 {
		return fmt.Errorf("%d pods left, the first %s (deleting: %v)", len(pods), pods[0].Name, pods[0].DeletionTimestamp != nil)
	}
	return nil
}

// routeIs reports, as an error, when service's route slice does not route
// to want ("pods" or "activator").
func (e *env) routeIs(ctx context.Context, service, want string) error {
	s, err := e.routeSlice(ctx, service)
	if err != nil {
		return err
	}
	if got := s.Labels[labelRoute]; got != want {
		return fmt.Errorf("route %q, want %q", got, want)
	}
	return nil
}

// routeSlice returns the EndpointSlice Swell writes for the Service.
func (e *env) routeSlice(ctx context.Context, service string) (*discoveryv1.EndpointSlice, error) {
	return e.cs.DiscoveryV1().EndpointSlices(e.ns).Get(ctx, service+"-swell", metav1.GetOptions{})
}

// sliceIPs lists a slice's addresses, sorted.
func sliceIPs(s *discoveryv1.EndpointSlice) []string {
	var ips []string
	for _, ep := range s.Endpoints {
		ips = append(ips, ep.Addresses...)
	}
	slices.Sort(ips)
	return ips
}

// activatorAddrs lists the ready activators' serving addresses, IPv4 (the
// activators' Service prefers dual stack: on a dual-stack cluster each
// activator is listed once in each family).
func activatorAddrs(ctx context.Context, cs kubernetes.Interface) ([]string, error) {
	list, err := cs.DiscoveryV1().EndpointSlices(swellNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=activator",
	})
	if err != nil {
		return nil, err
	}
	var addrs []string
	for _, s := range list.Items {
		if s.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		var port int32
		for _, p := range s.Ports {
			if p.Name != nil && *p.Name == activatorPort && p.Port != nil {
				port = *p.Port
			}
		}
		for _, ep := range s.Endpoints {
			if port == 0 || (ep.Conditions.Ready != nil && !*ep.Conditions.Ready) {
				continue
			}
			for _, a := range ep.Addresses {
				addrs = append(addrs, net.JoinHostPort(a, fmt.Sprint(port)))
			}
		}
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("no ready activator endpoint")
	}
	slices.Sort(addrs)
	return addrs, nil
}

// slowClient waits for a cold start behind the activator.
var slowClient = &http.Client{
	Transport: &http.Transport{Proxy: nil, DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext},
	Timeout:   scaleTimeout,
}

// viaService sends GET path to the Service as its clients do: to its
// ClusterIP, with its cluster host name, for kube-proxy to send on to one
// of the endpoints Swell gives it (the activators, or the pods'
// queue-proxies).
func (e *env) viaService(ctx context.Context, service, path string) (int, string, error) {
	url, err := e.serviceURL(ctx, service, path)
	if err != nil {
		return 0, "", err
	}
	return hostGet(ctx, url, service+"."+e.ns+".svc.cluster.local")
}

// viaActivator sends GET path to the Service through the activators: to
// the ClusterIP of their own Service, with the Service's host name, by
// which they route.
func (e *env) viaActivator(ctx context.Context, service, path string) (int, string, error) {
	s, err := e.cs.CoreV1().Services(swellNamespace).Get(ctx, "activator", metav1.GetOptions{})
	if err != nil {
		return 0, "", err
	}
	return hostGet(ctx, "http://"+net.JoinHostPort(s.Spec.ClusterIP, "80")+path, service+"."+e.ns+".svc.cluster.local")
}

// hostGet sends GET url with the Host header host, waiting for a cold
// start, and returns the status and body.
func hostGet(ctx context.Context, url, host string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	req.Host = host
	resp, err := slowClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// replicas reads the Deployment's spec.replicas.
func (e *env) replicas(ctx context.Context, name string) (int32, error) {
	d, err := e.cs.AppsV1().Deployments(e.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	return ptrOr(d.Spec.Replicas, 1), nil
}

// events lists the reasons of the Events on the Deployment, oldest first.
func (e *env) events(ctx context.Context, name string) ([]string, error) {
	list, err := e.cs.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{
		FieldSelector: fields.Set{"involvedObject.kind": "Deployment", "involvedObject.name": name}.String(),
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(list.Items, func(a, b corev1.Event) int { return eventTime(&a).Compare(eventTime(&b)) })
	var reasons []string
	for _, ev := range list.Items {
		reasons = append(reasons, ev.Reason+": "+ev.Message)
	}
	return reasons, nil
}

// status reads the autoscaler's status annotation of the Deployment.
func (e *env) status(ctx context.Context, name string) (map[string]any, error) {
	d, err := e.cs.AppsV1().Deployments(e.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	raw, ok := d.Annotations[annotationStatus]
	if !ok {
		return nil, fmt.Errorf("no %s annotation", annotationStatus)
	}
	var st map[string]any
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		return nil, fmt.Errorf("%s %q: %w", annotationStatus, raw, err)
	}
	return st, nil
}

// TestSwellInjectsAndRoutesToPods: a labelled Deployment's pods get the
// queue-proxy, its Service gives up its selector to Swell, and Swell's
// EndpointSlice sends the Service's port to the pods' queue-proxies.
func TestSwellInjectsAndRoutesToPods(t *testing.T) {
	t.Parallel()
	e := swellSetup(t)
	const name = "hello"
	e.createHello(swellHello(name, nil, map[string]string{
		"autoscaling.swell.run/min-scale": "1",
		"swell.run/container-concurrency": "4",
		// No burst capacity asked for: the activator leaves the path as
		// soon as a pod is ready.
		"autoscaling.swell.run/target-burst-capacity": "0",
	}))

	d, err := e.cs.AppsV1().Deployments(e.ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(d.Spec.Template.Spec.Containers, func(c corev1.Container) bool { return c.Name == "queue-proxy" }) {
		t.Fatalf("the Deployment's template was not injected: containers %v", containerNames(d.Spec.Template.Spec.Containers))
	}
	if d.Spec.Template.Spec.Containers[0].ReadinessProbe != nil {
		t.Errorf("the app's readiness probe stayed on the app; want it moved to the queue-proxy")
	}

	var podIPs []string
	e.eventually("a ready pod of "+name+" with the queue-proxy", func(ctx context.Context) error {
		pods, err := e.pods(ctx, name)
		if err != nil {
			return err
		}
		podIPs = podIPs[:0]
		for i := range pods {
			p := &pods[i]
			if containerStatus(p, "queue-proxy") == nil {
				return fmt.Errorf("pod %s has no queue-proxy: %v", p.Name, containerNames(p.Spec.Containers))
			}
			if isReady(p) && p.DeletionTimestamp == nil {
				podIPs = append(podIPs, p.Status.PodIP)
			}
		}
		if len(podIPs) == 0 {
			return fmt.Errorf("no ready pod")
		}
		return nil
	})

	e.eventually("Swell's EndpointSlice for "+name+" routes to the pods' queue-proxies", func(ctx context.Context) error {
		s, err := e.routeSlice(ctx, name)
		if err != nil {
			return err
		}
		if s.Labels[labelRoute] != "pods" {
			return fmt.Errorf("route %q, want pods", s.Labels[labelRoute])
		}
		if len(s.Ports) != 1 || s.Ports[0].Port == nil || *s.Ports[0].Port != queueProxyPort || ptrOr(s.Ports[0].Name, "") != "http" {
			return fmt.Errorf("ports %v, want http → %d", describePorts(s.Ports), queueProxyPort)
		}
		slices.Sort(podIPs)
		if got := sliceIPs(s); !slices.Equal(got, podIPs) {
			return fmt.Errorf("endpoints %v, want the ready pods %v", got, podIPs)
		}
		return nil
	})

	// The user's manifest applied again, selector and all (a GitOps
	// sync): the webhook keeps the selector out.
	manifest := helloService(name)
	manifest.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}
	raw, err := json.Marshal(manifest)
	if err != nil {
		t.Fatal(err)
	}
	// The object kubectl prints is the one stored, after admission: the
	// routing controller has had no chance to fix it.
	cmd := exec.CommandContext(t.Context(), "kubectl", "apply", "-n", e.ns, "-f", "-", "-o", "json")
	cmd.Stdin = bytes.NewReader(raw)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl apply of the Service: %v\n%s", err, stderr.Bytes())
	}
	var svc corev1.Service
	if err := json.Unmarshal(out, &svc); err != nil {
		t.Fatalf("kubectl apply printed %q: %v", out, err)
	}
	if len(svc.Spec.Selector) != 0 || svc.Annotations[annotationSel] == "" {
		t.Errorf("Service %s as kubectl apply stored it: selector %v, annotation %q; want no selector and the old one kept in the annotation", name, svc.Spec.Selector, svc.Annotations[annotationSel])
	}
	// Only Swell's slice remains: Kubernetes' own, to the app's port, went
	// with the selector.
	e.eventually("Kubernetes' own EndpointSlices for "+name+" gone", func(ctx context.Context) error {
		list, err := e.cs.DiscoveryV1().EndpointSlices(e.ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + name})
		if err != nil {
			return err
		}
		for _, s := range list.Items {
			if s.Name != name+"-swell" {
				return fmt.Errorf("slice %s still lists %v", s.Name, sliceIPs(&s))
			}
		}
		return nil
	})

	code, body, err := get(t.Context(), "http://"+net.JoinHostPort(podIPs[0], fmt.Sprint(queueProxyPort))+"/")
	if err != nil || code != http.StatusOK || !strings.HasPrefix(body, helloGreeting) {
		t.Errorf("GET through the queue-proxy: %d %q %v", code, body, err)
	}
	e.waitProxied(name, "pods")
	code, body, err = e.viaService(t.Context(), name, "/")
	if err != nil || code != http.StatusOK || !strings.HasPrefix(body, helloGreeting) {
		t.Errorf("GET at the Service's ClusterIP: %d %q %v", code, body, err)
	}
	code, body, err = e.viaActivator(t.Context(), name, "/")
	if err != nil || code != http.StatusOK || !strings.HasPrefix(body, helloGreeting) {
		t.Errorf("GET through the activator: %d %q %v", code, body, err)
	}
}

func containerNames(cs []corev1.Container) []string {
	var names []string
	for _, c := range cs {
		names = append(names, c.Name)
	}
	return names
}

// TestSwellRejectsBadAnnotations: kubectl apply of an opted-in Deployment
// with an invalid annotation fails with the parser's message; the same
// Deployment without the label is admitted.
func TestSwellRejectsBadAnnotations(t *testing.T) {
	t.Parallel()
	e := swellSetup(t)
	bad := swellHello("bad", int32p(0), map[string]string{"autoscaling.swell.run/target": "-5"})
	bad.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}
	manifest, err := json.Marshal(bad)
	if err != nil {
		t.Fatal(err)
	}
	out, err := kubectl(t.Context(), manifest, "apply", "-n", e.ns, "-f", "-")
	if err == nil {
		t.Fatalf("kubectl apply accepted a Deployment with autoscaling.swell.run/target: -5:\n%s", out)
	}
	for _, want := range []string{`admission webhook "validate.swell.run" denied the request`, "autoscaling.swell.run/target", `"-5"`} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl apply said\n%s\nwant it to contain %s", out, want)
		}
	}
	if _, err := e.cs.AppsV1().Deployments(e.ns).Get(t.Context(), "bad", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the rejected Deployment exists (err %v)", err)
	}

	// Not opted in: never rejected, whatever its annotations.
	plain := bad.DeepCopy()
	plain.Name = "plain"
	delete(plain.Labels, labelEnabled)
	delete(plain.Spec.Template.Labels, labelEnabled)
	manifest, _ = json.Marshal(plain)
	if out, err := kubectl(t.Context(), manifest, "apply", "-n", e.ns, "-f", "-"); err != nil {
		t.Errorf("kubectl apply of a Deployment that has not opted in failed: %v\n%s", err, out)
	}
}

// TestSwellScalesFromZeroThroughActivator: a service at zero has the
// activator as its endpoints; a request through the activator scales it to
// one and is answered; the Deployment carries the decision as an Event and
// in its status annotation.
func TestSwellScalesFromZeroThroughActivator(t *testing.T) {
	t.Parallel()
	e := swellSetup(t)
	const name = "cold"
	e.createHello(swellHello(name, int32p(0), map[string]string{"autoscaling.swell.run/min-scale": "0"}))

	// The autoscaler may hold a new service at one replica until the
	// activators are in its path ("waiting for the activator before
	// scaling to zero"): wait for zero and the activators together.
	var acts []string
	e.eventually(name+" at zero with no pod left, Swell's EndpointSlice listing the activators", func(ctx context.Context) error {
		if n, err := e.replicas(ctx, name); err != nil || n != 0 {
			return fmt.Errorf("scale %d %v, want 0", n, err)
		}
		if err := e.noPods(ctx, name); err != nil {
			return err
		}
		s, err := e.routeSlice(ctx, name)
		if err != nil {
			return err
		}
		addrs, err := activatorAddrs(ctx, e.cs)
		if err != nil {
			return err
		}
		acts = acts[:0]
		for _, a := range addrs {
			host, _, _ := net.SplitHostPort(a)
			acts = append(acts, host)
		}
		if s.Labels[labelRoute] != "activator" || !slices.Equal(sliceIPs(s), acts) {
			return fmt.Errorf("route %q endpoints %v, want activator %v", s.Labels[labelRoute], sliceIPs(s), acts)
		}
		// On the service's own port, which the ports table gives it.
		own, err := e.servicePort(ctx, name)
		if err != nil {
			return err
		}
		if len(s.Ports) != 1 || s.Ports[0].Port == nil || *s.Ports[0].Port != own {
			return fmt.Errorf("route slice ports %v, want the service's own port %d", s.Ports, own)
		}
		return nil
	})
	e.waitProxied(name, "activator")

	// The Service's ClusterIP leads to the activators while it is at zero,
	// with a Host and a path they know nothing of: the port says which
	// service the request is for.
	start := time.Now()
	url, err := e.serviceURL(t.Context(), name, "/some/where")
	if err != nil {
		t.Fatal(err)
	}
	code, body, err := hostGet(t.Context(), url, "cold.example.com")
	if err != nil || code != http.StatusOK || !strings.HasPrefix(body, helloGreeting) {
		t.Fatalf("GET at the ClusterIP at zero, Host cold.example.com: %d %q %v", code, body, err)
	}
	t.Logf("cold start through the ClusterIP and an activator answered in %v", time.Since(start).Round(time.Millisecond))
	if n, err := e.replicas(t.Context(), name); err != nil || n < 1 {
		t.Errorf("scale after the request: %d %v, want at least 1", n, err)
	}
	e.eventually("a ScaledUp Event and a status annotation on "+name, func(ctx context.Context) error {
		evs, err := e.events(ctx, name)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(evs, func(s string) bool { return strings.HasPrefix(s, "ScaledUp: ") }) {
			return fmt.Errorf("events %q, want a ScaledUp", evs)
		}
		st, err := e.status(ctx, name)
		if err != nil {
			return err
		}
		if ready, _ := st["ready"].(float64); ready < 1 {
			return fmt.Errorf("status %v, want ready ≥ 1", st)
		}
		return nil
	})
}

// TestSwellBurstScalesUp: more requests than one pod takes (concurrency 1)
// make the autoscaler add pods.
func TestSwellBurstScalesUp(t *testing.T) {
	t.Parallel()
	e := swellSetup(t)
	const name, burst = "burst", 6
	e.createHello(swellHello(name, nil, map[string]string{
		"swell.run/container-concurrency": "1",
		"autoscaling.swell.run/min-scale": "1",
		"autoscaling.swell.run/max-scale": "4",
	}))
	e.eventually("a ready pod of "+name, func(ctx context.Context) error {
		pods, err := e.pods(ctx, name)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(pods, func(p corev1.Pod) bool { return isReady(&p) }) {
			return fmt.Errorf("no ready pod among %d", len(pods))
		}
		return nil
	})

	e.waitProxied(name, "")
	ctx, cancel := context.WithTimeout(t.Context(), scaleTimeout)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	var lost []string
	for range burst {
		wg.Go(func() {
			for ctx.Err() == nil {
				code, _, err := e.viaService(ctx, name, "/?sleep=2s")
				mu.Lock()
				switch {
				case err == nil:
					codes[code]++
				case ctx.Err() == nil:
					lost = append(lost, err.Error())
				}
				mu.Unlock()
			}
		})
	}
	e.eventuallyWithin(name+" scaled to at least 3 by the burst", scaleTimeout, func(ctx context.Context) error {
		n, err := e.replicas(ctx, name)
		if err != nil {
			return err
		}
		if n < 3 {
			return fmt.Errorf("scale %d", n)
		}
		return nil
	})
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("answers by status: %v", codes)
	for code, n := range codes {
		if code != http.StatusOK {
			t.Errorf("%d answers with status %d during the burst; want all 200", n, code)
		}
	}
	if len(lost) > 0 {
		t.Errorf("%d requests failed during the burst, the first: %s", len(lost), lost[0])
	}
}

// TestSwellIdleScalesToZeroBehindActivator: a service that had traffic
// and is routed to its pod goes to zero once idle, after the grace period,
// and the activator is in its path before its last pod goes.
func TestSwellIdleScalesToZeroBehindActivator(t *testing.T) {
	t.Parallel()
	e := swellSetup(t)
	const name = "idle"
	e.createHello(swellHello(name, nil, map[string]string{
		"autoscaling.swell.run/min-scale":             "0",
		"autoscaling.swell.run/target-burst-capacity": "0",
	}))

	// Watch the route slice and the Deployment from now on: the order of
	// what is seen is the order of what happened.
	type seen struct {
		at   time.Time
		what string
	}
	var mu sync.Mutex
	var history []seen
	note := func(what string) {
		mu.Lock()
		defer mu.Unlock()
		if len(history) == 0 || history[len(history)-1].what != what {
			history = append(history, seen{time.Now(), what})
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	sw, err := e.cs.DiscoveryV1().EndpointSlices(e.ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name + "-swell"})
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Stop()
	dw, err := e.cs.AppsV1().Deployments(e.ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	defer dw.Stop()
	go func() {
		for {
			select {
			case ev, ok := <-sw.ResultChan():
				if !ok {
					return
				}
				if s, ok := ev.Object.(*discoveryv1.EndpointSlice); ok {
					note(fmt.Sprintf("route %s %v", s.Labels[labelRoute], sliceIPs(s)))
				}
			case ev, ok := <-dw.ResultChan():
				if !ok {
					return
				}
				if d, ok := ev.Object.(*appsv1.Deployment); ok {
					note(fmt.Sprintf("replicas %d", ptrOr(d.Spec.Replicas, 1)))
				}
			}
		}
	}()

	// Some traffic first, so that the service is routed to its pod; an
	// idle service that never saw a request heads for zero at once and
	// keeps the activator.
	e.waitProxied(name, "")
	load, stopLoad := context.WithCancel(ctx)
	loaded := make(chan struct{})
	go func() {
		defer close(loaded)
		for load.Err() == nil {
			if code, _, err := e.viaService(load, name, "/?sleep=50ms"); err == nil && code != http.StatusOK {
				t.Errorf("GET at the ClusterIP under load: status %d", code)
			}
		}
	}()
	e.eventuallyWithin("Swell routes "+name+" to its pod under load", scaleTimeout, func(ctx context.Context) error {
		return e.routeIs(ctx, name, "pods")
	})
	stopLoad()
	<-loaded

	e.backToZero(name)
	e.eventually("Swell's EndpointSlice for "+name+" lists the activators", func(ctx context.Context) error {
		s, err := e.routeSlice(ctx, name)
		if err != nil {
			return err
		}
		if s.Labels[labelRoute] != "activator" || len(s.Endpoints) == 0 {
			return fmt.Errorf("route %q endpoints %v", s.Labels[labelRoute], sliceIPs(s))
		}
		return nil
	})
	cancel()

	mu.Lock()
	defer mu.Unlock()
	var lines []string
	routedToPods, routedToActivator, zero := -1, -1, -1
	for i, h := range history {
		lines = append(lines, h.at.Format("15:04:05.000")+" "+h.what)
		if routedToPods < 0 && strings.HasPrefix(h.what, "route pods") {
			routedToPods = i
		}
		if routedToPods >= 0 && routedToActivator < 0 && strings.HasPrefix(h.what, "route activator") && zero < 0 {
			routedToActivator = i
		}
		if zero < 0 && h.what == "replicas 0" {
			zero = i
		}
		if strings.HasSuffix(h.what, " []") {
			t.Errorf("Swell's EndpointSlice was empty at %s", h.at.Format("15:04:05.000"))
		}
	}
	t.Logf("seen:\n%s", strings.Join(lines, "\n"))
	if routedToPods < 0 {
		t.Errorf("the Service was never routed to the pod")
	}
	if zero < 0 || routedToActivator < 0 || routedToActivator > zero {
		t.Errorf("the activator was not in the path before the scale to zero (route to activator at %d, replicas 0 at %d)", routedToActivator, zero)
	}
	code, body, err := e.viaService(t.Context(), name, "/")
	if err != nil || code != http.StatusOK || !strings.HasPrefix(body, helloGreeting) {
		t.Errorf("GET at the ClusterIP after scaling to zero: %d %q %v", code, body, err)
	}
}

// TestSwellLeaderFailover: the autoscaler's leader is killed; another
// replica takes the lead, publishes itself to the activators and carries
// on from the running scale, not from an empty history.
//
// Not parallel: it takes the autoscaler away from every other test.
func TestSwellLeaderFailover(t *testing.T) {
	e := swellSetup(t)
	const name = "steady"
	e.createHello(swellHello(name, nil, map[string]string{
		"autoscaling.swell.run/initial-scale": "3",
		"autoscaling.swell.run/min-scale":     "0",
		// A long stable window: with no traffic the 3 pods stay for a
		// minute after they are first ready, and only an empty history
		// would drop them sooner.
		"autoscaling.swell.run/window":                "120s",
		"autoscaling.swell.run/target-burst-capacity": "0",
	}))
	// A service of the learning policy: once its first pod is ready it
	// has measured a startup, which the leader keeps in its status
	// annotation.
	const learner = "learner"
	e.createHello(swellHello(learner, nil, map[string]string{
		"autoscaling.swell.run/class":         "adaptive",
		"autoscaling.swell.run/initial-scale": "1",
		"autoscaling.swell.run/min-scale":     "1",
	}))
	e.waitServingSwell(name, 3)
	var memory string
	e.eventuallyWithin(learner+"'s memory in its status annotation", scaleTimeout, func(ctx context.Context) error {
		st, err := e.status(ctx, learner)
		if err != nil {
			return err
		}
		m, _ := st["memory"].(string)
		if m == "" {
			return fmt.Errorf("status %v has no memory", st)
		}
		memory = m
		return nil
	})
	t.Logf("%s's memory: %s", learner, memory)

	lease, err := e.cs.CoordinationV1().Leases(swellNamespace).Get(t.Context(), leaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	old := ptrOr(lease.Spec.HolderIdentity, "")
	if old == "" {
		t.Fatalf("lease %s has no holder", leaseName)
	}
	t.Logf("leader %s; deleting it at once", old)
	zero := int64(0)
	if err := e.cs.CoreV1().Pods(swellNamespace).Delete(t.Context(), old, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatalf("delete the leader's pod: %v", err)
	}

	var leader string
	e.eventuallyWithin("a new leader", scaleTimeout, func(ctx context.Context) error {
		l, err := e.cs.CoordinationV1().Leases(swellNamespace).Get(ctx, leaseName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		leader = ptrOr(l.Spec.HolderIdentity, "")
		if leader == "" || leader == old {
			return fmt.Errorf("holder %q", leader)
		}
		return nil
	})
	t.Logf("new leader %s", leader)
	e.eventually("the new leader published as the autoscaler's endpoint", func(ctx context.Context) error {
		p, err := e.cs.CoreV1().Pods(swellNamespace).Get(ctx, leader, metav1.GetOptions{})
		if err != nil {
			return err
		}
		s, err := e.cs.DiscoveryV1().EndpointSlices(swellNamespace).Get(ctx, "autoscaler", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := sliceIPs(s); !slices.Equal(got, []string{p.Status.PodIP}) {
			return fmt.Errorf("autoscaler endpoints %v, want the new leader's %s", got, p.Status.PodIP)
		}
		return nil
	})
	// The activators report to the new leader, over TLS trusting only the
	// CAs of the ConfigMap swell-ca: its status lists them.
	e.eventually("the activators connected to the new leader", func(ctx context.Context) error {
		want, err := activatorAddrs(ctx, e.cs)
		if err != nil {
			return err
		}
		st, err := e.replicaStatus(ctx, leader)
		if err != nil {
			return err
		}
		if st.Leading == nil || !*st.Leading {
			return fmt.Errorf("the new leader's status does not say it leads (leading: %t)", ptrOr(st.Leading, false))
		}
		if len(st.Activators) != len(want) {
			return fmt.Errorf("activators %v connected, want %d", st.Activators, len(want))
		}
		return nil
	})
	// An empty history read as no load would scale down within a tick or
	// two; the new leader holds the running scale.
	e.consistently(name+" keeps its 3 replicas under the new leader", 10*time.Second, func(ctx context.Context) error {
		n, err := e.replicas(ctx, name)
		if err != nil {
			return err
		}
		if n != 3 {
			return fmt.Errorf("scale %d, want 3", n)
		}
		return nil
	})
	code, body, err := e.viaService(t.Context(), name, "/")
	if err != nil || code != http.StatusOK || !strings.HasPrefix(body, helloGreeting) {
		t.Errorf("GET at the ClusterIP after the failover: %d %q %v", code, body, err)
	}
	// The new leader took the learner in with what the old one learned,
	// and its status writes keep the memory there.
	e.eventually("the new leader remembering what "+learner+" learned", func(ctx context.Context) error {
		p, err := e.cs.CoreV1().Pods(swellNamespace).Get(ctx, leader, metav1.GetOptions{})
		if err != nil {
			return err
		}
		logs, err := e.podLogs(ctx, p, "autoscaler", false)
		if err != nil {
			return err
		}
		for line := range strings.Lines(logs) {
			if strings.Contains(line, "service added") && strings.Contains(line, e.ns+"/"+learner) {
				if !strings.Contains(line, "remembering what it learned") {
					return fmt.Errorf("the new leader added %s without its memory: %s", learner, line)
				}
				return nil
			}
		}
		return fmt.Errorf("the new leader has not added %s yet", learner)
	})
	if st, err := e.status(t.Context(), learner); err != nil || st["memory"] == nil || st["memory"] == "" {
		t.Errorf("%s's status after the failover: %v %v, want its memory kept", learner, st, err)
	}
}

// waitServingSwell waits until n pods of the Swell service are ready and
// Swell's EndpointSlice routes to exactly them.
func (e *env) waitServingSwell(name string, n int) {
	e.t.Helper()
	e.eventuallyWithin(fmt.Sprintf("%d ready pods of %s routed by Swell", n, name), scaleTimeout, func(ctx context.Context) error {
		pods, err := e.pods(ctx, name)
		if err != nil {
			return err
		}
		var ips []string
		for i := range pods {
			if p := &pods[i]; isReady(p) && p.DeletionTimestamp == nil {
				ips = append(ips, p.Status.PodIP)
			}
		}
		if len(ips) != n {
			return fmt.Errorf("%d ready pods, want %d", len(ips), n)
		}
		s, err := e.routeSlice(ctx, name)
		if err != nil {
			return err
		}
		slices.Sort(ips)
		if s.Labels[labelRoute] != "pods" || !slices.Equal(sliceIPs(s), ips) {
			return fmt.Errorf("route %q endpoints %v, want pods %v", s.Labels[labelRoute], sliceIPs(s), ips)
		}
		return nil
	})
}

// servicePort is the port of its own the ports table in swell-system gives
// the Swell service name (docs/routing.md, "Service ports").
func (e *env) servicePort(ctx context.Context, name string) (int32, error) {
	list, err := e.cs.CoreV1().ConfigMaps(swellNamespace).List(ctx, metav1.ListOptions{LabelSelector: "swell.run/service-ports=true"})
	if err != nil {
		return 0, err
	}
	for _, cm := range list.Items {
		for k, v := range cm.Data {
			if v == e.ns+"/"+name {
				p, err := strconv.ParseInt(k, 10, 32)
				return int32(p), err
			}
		}
	}
	return 0, fmt.Errorf("the service ports table has no port for %s/%s", e.ns, name)
}
