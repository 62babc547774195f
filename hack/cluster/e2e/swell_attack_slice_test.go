package e2e

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestSwellIgnoresASliceNamingAnotherNamespacesPod: a tenant who may
// write EndpointSlices in its own namespace lists another namespace's pod
// among its own service's pods, to have the activators (trusted by every
// namespace's NetworkPolicies) carry its calls there. The activators
// serve the tenant's service from its own pod only; the victim's pod is
// never reached.
func TestSwellIgnoresASliceNamingAnotherNamespacesPod(t *testing.T) {
	t.Parallel()
	e := swellSetup(t)
	const victimName, lureName = "victim", "lure"
	// One pod each, routed to directly (no burst capacity to keep the
	// activators in the path).
	oneDirectPod := map[string]string{
		allowedCallers:                                "",
		"autoscaling.swell.run/min-scale":             "1",
		"autoscaling.swell.run/max-scale":             "1",
		"autoscaling.swell.run/target-burst-capacity": "0",
	}
	e.createHello(swellHello(victimName, nil, oneDirectPod))
	other := setup(t)
	t.Cleanup(other.keepSwellEvidence)
	// The tenant's own service: one pod, which the tenant's own pod may
	// call through the activators.
	other.createHello(swellHello(lureName, nil, oneDirectPod))
	e.waitServingSwell(victimName, 1)
	other.waitServingSwell(lureName, 1)
	victims, err := e.pods(t.Context(), victimName)
	if err != nil || len(victims) != 1 {
		t.Fatalf("pods of %s: %v %v", victimName, victims, err)
	}
	victim := victims[0]
	lures, err := other.pods(t.Context(), lureName)
	if err != nil || len(lures) != 1 {
		t.Fatalf("pods of %s: %v %v", lureName, lures, err)
	}
	caller := other.clientIn(other.idlePod(other.ns, "caller"), 20*time.Second)
	host := lureName + "." + other.ns + ".svc.cluster.local"
	acts, err := activatorAddrs(t.Context(), e.cs)
	if err != nil {
		t.Fatal(err)
	}
	// answeredBy sends one request for the lure through activator a and
	// returns the pod that answered, from the greeting.
	answeredBy := func(a string) (string, error) {
		req, err := http.NewRequest(http.MethodGet, "http://"+a+"/", nil)
		if err != nil {
			return "", err
		}
		req.Host = host
		res, err := caller.Do(req)
		if err != nil {
			return "", err
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		if err != nil {
			return "", err
		}
		if res.StatusCode != http.StatusOK {
			return "", fmt.Errorf("%d %s %q", res.StatusCode, res.Header.Get("Swell-Reason"), body)
		}
		for _, p := range []string{victim.Name, lures[0].Name} {
			if strings.Contains(string(body), p) {
				return p, nil
			}
		}
		return "", fmt.Errorf("answered by no pod known: %q", body)
	}
	e.eventually("every activator serving the tenant's service to the tenant", func(ctx context.Context) error {
		for _, a := range acts {
			if _, err := answeredBy(a); err != nil {
				return fmt.Errorf("activator %s: %w", a, err)
			}
		}
		return nil
	})

	// The forged slices: labelled as Kubernetes labels the slices of the
	// tenant's pods-Service, on the queue-proxy's port, one naming the
	// victim's pod as what it is, one as a pod of the tenant's namespace.
	forged := func(name string, ref corev1.ObjectReference) *discoveryv1.EndpointSlice {
		portName, port := "http", int32(8012)
		return &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
				discoveryv1.LabelServiceName: lureName + "-swell-pods",
				discoveryv1.LabelManagedBy:   "forger.tenant.example", // Kubernetes' controller would delete its own extras
				labelDeployment:              lureName,
			}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &port}},
			Endpoints: []discoveryv1.Endpoint{{
				Addresses:  []string{victim.Status.PodIP},
				Conditions: discoveryv1.EndpointConditions{Ready: new(true)},
				TargetRef:  &ref,
			}},
		}
	}
	for _, s := range []*discoveryv1.EndpointSlice{
		forged(lureName+"-forged-a", corev1.ObjectReference{Kind: "Pod", Namespace: e.ns, Name: victim.Name, UID: victim.UID}),
		forged(lureName+"-forged-b", corev1.ObjectReference{Kind: "Pod", Namespace: other.ns, Name: lureName + "-forged"}),
	} {
		if _, err := other.cs.DiscoveryV1().EndpointSlices(other.ns).Create(t.Context(), s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create the forged slice %s: %v", s.Name, err)
		}
	}
	// The activators learn of a slice within milliseconds, and spread a
	// service's requests over the pods they list; for 10 s, with two
	// senders at each activator, every answer comes from the tenant's own
	// pod.
	var victimHits, lureHits, failed atomic.Int64
	ctx, stop := context.WithTimeout(t.Context(), 10*time.Second)
	defer stop()
	var wg sync.WaitGroup
	for i := range 2 * len(acts) {
		a := acts[i%len(acts)]
		wg.Go(func() {
			// 50 requests a second at most from each sender: enough to
			// spread over every pod listed, little beside the parallel
			// tests.
			pace := time.NewTicker(20 * time.Millisecond)
			defer pace.Stop()
			for ctx.Err() == nil {
				select {
				case <-ctx.Done():
					return
				case <-pace.C:
				}
				switch pod, err := answeredBy(a); {
				case err != nil:
					failed.Add(1)
					t.Logf("a request for the lure through %s: %v", a, err)
				case pod == victim.Name:
					victimHits.Add(1)
				default:
					lureHits.Add(1)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("requests for the tenant's service after the forged slices: %d answered by its pod, %d by the victim's, %d failed",
		lureHits.Load(), victimHits.Load(), failed.Load())
	if victimHits.Load() > 0 {
		t.Errorf("%d of the tenant's requests reached the victim's pod in namespace %s", victimHits.Load(), e.ns)
	}
	if lureHits.Load() == 0 {
		t.Error("no request answered by the tenant's own pod: the test saw nothing")
	}
	for _, name := range []string{lureName + "-forged-a", lureName + "-forged-b"} {
		if _, err := other.cs.DiscoveryV1().EndpointSlices(other.ns).Get(t.Context(), name, metav1.GetOptions{}); err != nil {
			t.Errorf("the forged slice %s is gone (%v): the test saw nothing", name, err)
		}
	}
}

// TestSwellActivatorReconnectsThroughATokenFlood: a pod of another
// namespace floods every autoscaler replica's activator port with junk
// bearer tokens while an activator restarts. The new activator connects
// within seconds, and a service at zero still wakes through it: no
// caller can spend the token reviews the activators need.
func TestSwellActivatorReconnectsThroughATokenFlood(t *testing.T) {
	e := swellSetup(t)
	const name = "sleeper"
	e.createHello(swellHello(name, int32p(0), map[string]string{"autoscaling.swell.run/min-scale": "0"}))
	other := setup(t)
	attacker := other.idlePod(other.ns, "flooder")
	flood := e.clientIn(attacker, 5*time.Second)
	flood.Transport.(*http.Transport).TLSClientConfig = &tls.Config{InsecureSkipVerify: true} // the attacker trusts anything
	targets, err := readyAutoscalers(t.Context(), e.cs)
	if err != nil {
		t.Fatal(err)
	}
	var urls []string
	for _, name := range targets {
		p, err := e.cs.CoreV1().Pods(swellNamespace).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		urls = append(urls, "https://"+net.JoinHostPort(p.Status.PodIP, "8080")+"/activator")
	}

	// The flood: 100 new connections a second, each with a token of its
	// own, shaped as a service-account token is; far past the 5 reviews a
	// second the autoscaler may ask for.
	ctx, stopFlood := context.WithCancel(t.Context())
	var sent, upgraded atomic.Int64
	codes := sync.Map{}
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			tick := time.NewTicker(40 * time.Millisecond)
			defer tick.Stop()
			for n := 0; ; n++ {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				code, _, err := try(flood, http.MethodGet, urls[(i+n)%len(urls)], "", http.Header{"Authorization": {"Bearer " + junkToken()}})
				if err != nil {
					continue
				}
				sent.Add(1)
				if code == http.StatusSwitchingProtocols || code == http.StatusOK {
					upgraded.Add(1)
				}
				v, _ := codes.LoadOrStore(code, new(atomic.Int64))
				v.(*atomic.Int64).Add(1)
			}
		})
	}
	defer func() { stopFlood(); wg.Wait() }()

	e.eventually(name+" at zero, routed to the activators", func(ctx context.Context) error {
		if n, err := e.replicas(ctx, name); err != nil || n != 0 {
			return fmt.Errorf("scale %d %v, want 0", n, err)
		}
		return e.routeIs(ctx, name, "activator")
	})
	e.waitProxied(name, "activator")

	// An activator restarts in the flood.
	pods, err := e.cs.CoreV1().Pods(swellNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=swell-activator"})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("activator pods: %v %v", pods, err)
	}
	old := pods.Items[0].Name
	t.Logf("deleting activator %s in a flood of junk tokens", old)
	if err := e.cs.CoreV1().Pods(swellNamespace).Delete(t.Context(), old, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var fresh *corev1.Pod
	e.eventuallyWithin("a new activator ready", scaleTimeout, func(ctx context.Context) error {
		list, err := e.cs.CoreV1().Pods(swellNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=swell-activator"})
		if err != nil {
			return err
		}
		for i := range list.Items {
			if p := &list.Items[i]; !slices.ContainsFunc(pods.Items, func(q corev1.Pod) bool { return q.Name == p.Name }) && isReady(p) && p.DeletionTimestamp == nil {
				fresh = p
				return nil
			}
		}
		return fmt.Errorf("no new activator ready yet")
	})
	ready := time.Now()
	// Within a few seconds: its reconnects back off from 100 ms.
	e.eventuallyWithin("the new activator "+fresh.Name+" connected to every autoscaler replica that leads", 15*time.Second, func(ctx context.Context) error {
		return activatorsConnected(ctx, e.cs)
	})
	t.Logf("the new activator connected %v after it was ready", time.Since(ready).Round(time.Millisecond))

	// A service at zero wakes through the activators.
	start := time.Now()
	code, body, err := e.viaService(t.Context(), name, "/")
	if err != nil || code != http.StatusOK || !strings.HasPrefix(body, helloGreeting) {
		t.Fatalf("GET %s at zero in the flood: %d %q %v", name, code, body, err)
	}
	t.Logf("%s woke from zero in the flood in %v", name, time.Since(start).Round(time.Millisecond))
	stopFlood()
	wg.Wait()
	var seen []string
	codes.Range(func(k, v any) bool {
		seen = append(seen, fmt.Sprintf("%d×%d", k, v.(*atomic.Int64).Load()))
		return true
	})
	t.Logf("junk tokens sent: %d, answered %v", sent.Load(), seen)
	if upgraded.Load() > 0 {
		t.Errorf("%d junk tokens were accepted", upgraded.Load())
	}
	if sent.Load() < 100 {
		t.Errorf("only %d junk tokens reached the autoscalers: the flood did not happen", sent.Load())
	}
}

// junkToken is a random token shaped as a service-account token is.
func junkToken() string {
	b := make([]byte, 48)
	rand.Read(b)
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256","kid":"x"}`)) + "." + enc(b[:32]) + "." + enc(b[32:])
}
