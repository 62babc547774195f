package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/swell-run/swell/hack/cluster/netns"
	"github.com/swell-run/swell/hack/cluster/nodeimages"
)

// The adversarial suite: a pod in another namespace tries each attack of
// docs/security.md on a service and on Swell's own pods, and is refused;
// the service it targets keeps serving its own namespace's callers, and
// keeps scaling.

// idlePod starts a pod that only waits, in namespace ns: a place to send
// requests from, with the pod's address as their source.
func (e *env) idlePod(ns, name string) *corev1.Pod {
	e.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "box", Image: nodeimages.Box, ImagePullPolicy: corev1.PullIfNotPresent}},
		},
	}
	if _, err := e.cs.CoreV1().Pods(ns).Create(e.t.Context(), p, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create pod %s/%s: %v", ns, name, err)
	}
	var running *corev1.Pod
	e.eventually("pod "+ns+"/"+name+" running with an IP", func(ctx context.Context) error {
		got, err := e.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got.Status.Phase != corev1.PodRunning || got.Status.PodIP == "" {
			return fmt.Errorf("phase %s, IP %q", got.Status.Phase, got.Status.PodIP)
		}
		running = got
		return nil
	})
	return running
}

// clientIn returns an HTTP client whose connections are made inside the
// pod's network namespace: they leave from the pod's address, as the
// pod's own would. The namespace is entered through a process of the pod.
func (e *env) clientIn(p *corev1.Pod, timeout time.Duration) *http.Client {
	e.t.Helper()
	pid, err := podProcess(p)
	if err != nil {
		e.t.Fatalf("a process of pod %s/%s: %v", p.Namespace, p.Name, err)
	}
	dial := netns.DialerAt(fmt.Sprintf("/proc/%d/ns/net", pid), p.Namespace+"/"+p.Name)
	return &http.Client{
		Transport: &http.Transport{Proxy: nil, DialContext: dial, DisableKeepAlives: true},
		Timeout:   timeout,
	}
}

// try sends one request and returns its status and Swell-Reason, or the
// error.
func try(c *http.Client, method, url, host string, header http.Header) (int, string, error) {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		return 0, "", err
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range header {
		req.Header[k] = v
	}
	res, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	io.Copy(io.Discard, res.Body)
	return res.StatusCode, res.Header.Get("Swell-Reason"), nil
}

func TestSwellRefusesAnAttackerInAnotherNamespace(t *testing.T) {
	t.Parallel()
	e := swellSetup(t)
	const name = "victim"
	// Only its own namespace may call it through the activator; a pod
	// there may hold 1 request at a time, a second pod joins past 1 in
	// flight.
	e.createHello(swellHello(name, nil, map[string]string{
		allowedCallers:                                        "",
		"swell.run/container-concurrency":                     "4",
		"autoscaling.swell.run/target":                        "1",
		"autoscaling.swell.run/target-utilization-percentage": "100",
		"autoscaling.swell.run/min-scale":                     "1",
		"autoscaling.swell.run/target-burst-capacity":         "0",
		"autoscaling.swell.run/max-scale":                     "3",
	}))
	// Its NetworkPolicy admits its own namespace, and Swell's pods to its
	// queue-proxy and stats ports; the activators judge callers by it.
	e.onlyOwnNamespace(name)
	e.waitServingSwell(name, 1)
	victims, err := e.pods(t.Context(), name)
	if err != nil || len(victims) != 1 {
		t.Fatalf("pods of %s: %v %v", name, victims, err)
	}
	victim := victims[0]
	host := name + "." + e.ns + ".svc.cluster.local"

	// A friend in the victim's namespace, and an attacker in another.
	friend := e.clientIn(e.idlePod(e.ns, "friend"), scaleTimeout)
	other := setup(t)
	attacker := e.clientIn(other.idlePod(other.ns, "attacker"), 3*time.Second)
	acts, err := activatorAddrs(t.Context(), e.cs)
	if err != nil {
		t.Fatal(err)
	}
	// An activator knows a caller's namespace from its pods informer: a
	// pod just started is a stranger to it for a moment, and refused as
	// one. The friend is told apart once every activator has seen it.
	e.eventually("every activator admitting the friend", func(ctx context.Context) error {
		for _, a := range acts {
			if code, reason, err := try(friend, http.MethodGet, "http://"+a+"/", host, nil); err != nil || code != http.StatusOK {
				return fmt.Errorf("activator %s answered the friend %d %q %v", a, code, reason, err)
			}
		}
		return nil
	})
	activatorIP, _, _ := net.SplitHostPort(acts[0])
	victimQP := "http://" + net.JoinHostPort(victim.Status.PodIP, "8012")
	victimAdmin := "http://" + net.JoinHostPort(victim.Status.PodIP, "8022")
	victimMetrics := "http://" + net.JoinHostPort(victim.Status.PodIP, "9090")

	// The friend reaches the victim through the activators all along, at
	// their Service's ClusterIP.
	actSvc, err := e.cs.CoreV1().Services(swellNamespace).Get(t.Context(), "activator", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	throughActivators := "http://" + net.JoinHostPort(actSvc.Spec.ClusterIP, "80") + "/?sleep=100ms"
	var friendOK, friendFailed atomic.Int64
	ctx, stopFriend := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			code, _, err := try(friend, http.MethodGet, throughActivators, host, nil)
			switch {
			case err == nil && code == http.StatusOK:
				friendOK.Add(1)
			case ctx.Err() == nil:
				friendFailed.Add(1)
				t.Logf("the friend's request: %d %v", code, err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	})
	defer func() { stopFriend(); wg.Wait() }()

	refused := func(what string, want int, code int, reason string, err error, wantReason string) {
		t.Helper()
		if err != nil || code != want || (wantReason != "" && reason != wantReason) {
			t.Errorf("%s: %d %q %v; want %d %q", what, code, reason, err, want, wantReason)
		} else {
			t.Logf("%s: refused with %d %s", what, code, reason)
		}
	}

	// 1. Stopping the victim's queue-proxy, or an activator.
	code, reason, err := try(attacker, http.MethodPost, victimAdmin+"/drain", "", nil)
	refused("POST /drain to the victim's queue-proxy", http.StatusForbidden, code, reason, err, "")
	if code, _, err := try(attacker, http.MethodGet, victimAdmin+"/drain", "", nil); err == nil {
		// A GET only waits for a drain SIGTERM started; none has.
		t.Errorf("GET /drain to the victim's queue-proxy answered %d at once; want it to wait", code)
	}
	code, reason, err = try(attacker, http.MethodPost, "http://"+net.JoinHostPort(activatorIP, "8022")+"/drain", "", nil)
	refused("POST /drain to an activator", http.StatusForbidden, code, reason, err, "")

	// 2. Reaching the victim through the activator from another namespace,
	// by Host or by the header that used to route.
	code, reason, err = try(attacker, http.MethodGet, "http://"+acts[0]+"/", host, nil)
	refused("a request for the victim through the activator", http.StatusForbidden, code, reason, err, "caller-not-allowed")
	code, _, err = try(attacker, http.MethodGet, "http://"+acts[0]+"/", "nowhere."+other.ns+".svc", http.Header{"Swell-Service": {e.ns + "/" + name}})
	if err != nil || code == http.StatusOK {
		t.Errorf("a request routed by Swell-Service: %d %v; want it never to reach the victim", code, err)
	}

	// 3. Profiles from the metrics port.
	code, _, err = try(attacker, http.MethodGet, victimMetrics+"/debug/pprof/", "", nil)
	if err != nil || code == http.StatusOK {
		t.Errorf("pprof from another pod: %d %v; want a refusal", code, err)
	}

	// 4. Load hidden behind Swell-Proxy: the attacker's direct requests,
	// marked as the activator's, still scale the victim up while the
	// friend's trickle keeps an activator reporting it.
	loadCtx, stopLoad := context.WithTimeout(t.Context(), scaleTimeout)
	defer stopLoad()
	loader := e.clientIn(mustPod(t, other, "attacker"), 30*time.Second)
	var load sync.WaitGroup
	for range 6 {
		load.Go(func() {
			for loadCtx.Err() == nil {
				try(loader, http.MethodGet, victimQP+"/?sleep=2s", "", http.Header{"Swell-Proxy": {"activator"}})
			}
		})
	}
	e.eventuallyWithin(name+" scaled up by load marked as the activator's", scaleTimeout, func(ctx context.Context) error {
		n, err := e.replicas(ctx, name)
		if err != nil {
			return err
		}
		if n < 2 {
			return fmt.Errorf("scale %d", n)
		}
		return nil
	})
	stopLoad()
	load.Wait()

	// 5. Speaking for an activator: the autoscaler takes reports only over
	// TLS, and only with a token of the activators' account, from the pod
	// it is bound to. Without a token the attacker is refused (401); with
	// one, its own account's or a forged one, it is refused before any
	// review, as a caller that is no activator pod (503, Retry-After).
	leader, err := autoscalerAddr(t.Context(), e)
	if err != nil {
		t.Fatal(err)
	}
	other.serviceAccount("attacker")
	tr, err := other.cs.CoreV1().ServiceAccounts(other.ns).CreateToken(t.Context(), "attacker", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tlsAttacker := e.clientIn(mustPod(t, other, "attacker"), 5*time.Second)
	tlsAttacker.Transport.(*http.Transport).TLSClientConfig = &tls.Config{InsecureSkipVerify: true} // the attacker trusts anything
	for _, tc := range []struct {
		what   string
		header http.Header
		want   int
	}{
		{"no token", nil, http.StatusUnauthorized},
		{"the attacker's own service-account token", http.Header{"Authorization": {"Bearer " + tr.Status.Token}}, http.StatusServiceUnavailable},
		{"a forged token", http.Header{"Authorization": {"Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhIn0.c2ln"}}, http.StatusServiceUnavailable},
	} {
		code, _, err := try(tlsAttacker, http.MethodGet, "https://"+leader+"/activator", "", tc.header)
		refused("a report to the autoscaler with "+tc.what, tc.want, code, "", err, "")
	}
	// In clear text the TLS server answers only its own 400 ("an HTTP
	// request to an HTTPS server"), never the endpoint's 401.
	if code, _, err := try(attacker, http.MethodGet, "http://"+leader+"/activator", "", nil); err == nil && code != http.StatusBadRequest {
		t.Errorf("the autoscaler answered %d in clear text; want TLS only", code)
	}

	// 5b. Pushing stats for the victim: the push port takes a pod's
	// frames only as the ready pod its source address is, for that pod's
	// service, and refuses the connection before it opens otherwise. The
	// attacker's pod is refused whatever it claims; so is a ready pod of
	// a Swell service of its own namespace, as soon as it names the
	// victim, while for its own service it passes the check (and, not
	// asking for a websocket, fails only the handshake).
	pushAt, err := autoscalerPort(t.Context(), e, "push")
	if err != nil {
		t.Fatal(err)
	}
	pushURL := func(svc, addr string) string {
		return "http://" + pushAt + "/pods?" + url.Values{"service": {svc}, "addr": {addr}}.Encode()
	}
	victimStats := net.JoinHostPort(victim.Status.PodIP, "9090")
	code, _, err = try(attacker, http.MethodGet, pushURL(e.ns+"/"+name, victimStats), "", nil)
	refused("stats pushed for the victim by a pod of another namespace", http.StatusForbidden, code, "", err, "")
	const decoy = "decoy"
	other.createHello(swellHello(decoy, nil, map[string]string{
		"autoscaling.swell.run/min-scale":             "1",
		"autoscaling.swell.run/target-burst-capacity": "0",
	}))
	other.waitServingSwell(decoy, 1)
	decoys, err := other.pods(t.Context(), decoy)
	if err != nil || len(decoys) != 1 {
		t.Fatalf("pods of %s: %v %v", decoy, decoys, err)
	}
	fromDecoy := e.clientIn(&decoys[0], 5*time.Second)
	code, _, err = try(fromDecoy, http.MethodGet, pushURL(e.ns+"/"+name, victimStats), "", nil)
	refused("stats pushed for the victim by a ready Swell pod of another service", http.StatusForbidden, code, "", err, "")
	code, _, err = try(fromDecoy, http.MethodGet, pushURL(other.ns+"/"+decoy, victimStats), "", nil)
	if err != nil || code != http.StatusBadRequest {
		t.Errorf("the decoy's own service, without a websocket: %d %v; want 400 (trusted as itself, then no upgrade)", code, err)
	}

	// 6. Reading every tenant's services, pod counts and rates from the
	// autoscaler's status: the activators' port does not serve it, and
	// the port that does listens on the pod's loopback only.
	if code, _, err := try(tlsAttacker, http.MethodGet, "https://"+leader+"/status", "", nil); err != nil || code == http.StatusOK {
		t.Errorf("the autoscaler's status on the activators' port: %d %v; want a refusal", code, err)
	}
	leaderIP, _, _ := net.SplitHostPort(leader)
	if code, _, err := try(attacker, http.MethodGet, "http://"+net.JoinHostPort(leaderIP, "8023")+"/status", "", nil); err == nil {
		t.Errorf("the autoscaler's status port answered a pod of another namespace: %d", code)
	}

	// 7. The victim kept serving its own namespace, and was never
	// restarted or drained.
	stopFriend()
	wg.Wait()
	if friendOK.Load() == 0 || friendFailed.Load() > 0 {
		t.Errorf("the friend's requests: %d answered, %d failed; want all answered", friendOK.Load(), friendFailed.Load())
	}
	got, err := e.cs.CoreV1().Pods(e.ns).Get(t.Context(), victim.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !isReady(got) || got.DeletionTimestamp != nil {
		t.Errorf("the victim pod after the attacks: %s", describePod(got))
	}
	for _, cs := range got.Status.ContainerStatuses {
		if cs.RestartCount != 0 {
			t.Errorf("container %s of the victim restarted %d times", cs.Name, cs.RestartCount)
		}
	}
}

// onlyOwnNamespace gives the pods of app a NetworkPolicy admitting the
// pods of their own namespace, and those of Swell's namespace to the
// queue-proxy's traffic and stats ports.
func (e *env) onlyOwnNamespace(app string) {
	e.t.Helper()
	qp, stats := intstr.FromInt32(queueProxyPort), intstr.FromInt32(9090)
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: app + "-own-namespace"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{
				{From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}}},
				{
					From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{
						MatchLabels: map[string]string{corev1.LabelMetadataName: swellNamespace}}}},
					Ports: []networkingv1.NetworkPolicyPort{{Port: &qp}, {Port: &stats}},
				},
			},
		},
	}
	if _, err := e.cs.NetworkingV1().NetworkPolicies(e.ns).Create(e.t.Context(), np, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create NetworkPolicy %s: %v", np.Name, err)
	}
}

// serviceAccount creates a service account in e's namespace.
func (e *env) serviceAccount(name string) {
	e.t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := e.cs.CoreV1().ServiceAccounts(e.ns).Create(e.t.Context(), sa, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create service account %s/%s: %v", e.ns, name, err)
	}
}

// autoscalerAddr is ip:port of the autoscaler that leads, from its
// Service's one EndpointSlice.
func autoscalerAddr(ctx context.Context, e *env) (string, error) {
	return autoscalerPort(ctx, e, "http")
}

// autoscalerPort is the leader's address at its Service port named port
// ("http": the activators' reports; "push": the pods' stats).
func autoscalerPort(ctx context.Context, e *env, port string) (string, error) {
	list, err := e.cs.DiscoveryV1().EndpointSlices(swellNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=autoscaler",
	})
	if err != nil {
		return "", err
	}
	for _, s := range list.Items {
		for _, p := range s.Ports {
			if p.Port == nil || p.Name == nil || *p.Name != port {
				continue
			}
			for _, ep := range s.Endpoints {
				if len(ep.Addresses) > 0 {
					return net.JoinHostPort(ep.Addresses[0], fmt.Sprint(*p.Port)), nil
				}
			}
		}
	}
	return "", fmt.Errorf("the autoscaler Service has no endpoint at port %s", port)
}

// mustPod reads a pod of e's namespace.
func mustPod(t *testing.T, e *env, name string) *corev1.Pod {
	t.Helper()
	p, err := e.cs.CoreV1().Pods(e.ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}
