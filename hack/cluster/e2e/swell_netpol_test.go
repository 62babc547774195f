package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestSwellJudgesCallersByNetworkPolicy: a service whose NetworkPolicy
// admits, on the app's port, only pods labelled role=ingress in namespaces
// labelled purpose=ingress (and the activators, on the queue-proxy's
// port). Through the activators, as the policy would judge them reaching
// the pods directly:
//
//   - the ingress pod reaches the service from zero;
//   - a pod of another namespace, labelled role=ingress too, gets 403
//     caller-not-allowed from every activator, with a body that names
//     neither the policy nor its rules;
//   - with the service scaled up, the same pod is still refused by every
//     activator, while the ingress pod is served.
//
// The test cluster's network plugin does not enforce NetworkPolicies, so
// the policy itself stops nothing here: the other pod reaches the pods
// directly at their Service's ClusterIP once the activators are out of the
// path (logged, not asserted). What is shown is the activators' side: they
// refuse what an enforcing network would have refused, so that standing in
// for the pods they open no way around the policy.
func TestSwellJudgesCallersByNetworkPolicy(t *testing.T) {
	t.Parallel()
	e := swellSetup(t)
	const name = "guarded"
	ingress, other := setup(t), setup(t)
	if _, err := ingress.cs.CoreV1().Namespaces().Patch(t.Context(), ingress.ns, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"purpose":"ingress"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("label namespace %s: %v", ingress.ns, err)
	}

	// The policy comes first, so that no activator ever judges the
	// service without it.
	const policy = "only-ingress"
	e.admitOnly(policy, name, map[string]string{"purpose": "ingress"}, map[string]string{"role": "ingress"})
	// No caller is admitted by the annotation: the policy alone decides.
	// No burst capacity keeps the activators in the path once a pod is
	// ready.
	e.createHello(swellHello(name, int32p(0), map[string]string{
		allowedCallers:                                "",
		"autoscaling.swell.run/min-scale":             "0",
		"autoscaling.swell.run/target-burst-capacity": "0",
	}))

	// Both callers carry role=ingress; only one is in a namespace labelled
	// purpose=ingress.
	entry := ingress.labelledIdlePod(ingress.ns, "ingress", "role", "ingress")
	stranger := other.labelledIdlePod(other.ns, "stranger", "role", "ingress")
	entryClient, strangerClient := e.clientIn(entry, scaleTimeout), e.clientIn(stranger, 10*time.Second)
	host := name + "." + e.ns + ".svc.cluster.local"

	e.eventually(name+" at zero, its Service routed to the activators", func(ctx context.Context) error {
		if n, err := e.replicas(ctx, name); err != nil || n != 0 {
			return fmt.Errorf("scale %d %v, want 0", n, err)
		}
		return e.routeIs(ctx, name, "activator")
	})
	e.waitProxied(name, "activator")
	acts, err := activatorAddrs(t.Context(), e.cs)
	if err != nil {
		t.Fatal(err)
	}

	// refusedEverywhere checks that every activator refuses the stranger,
	// saying only that the policies do not admit it. An activator that
	// does not route the service yet (404, for a moment after it appears)
	// is asked again; any other answer is a failure at once.
	refusedEverywhere := func(when string) {
		t.Helper()
		e.eventually(when+", every activator refusing the stranger", func(ctx context.Context) error {
			for _, a := range acts {
				code, reason, body, err := tryBody(strangerClient, "http://"+a+"/", host)
				switch {
				case err == nil && code == http.StatusNotFound:
					return fmt.Errorf("activator %s does not route %s yet: %q", a, host, body)
				case err != nil || code != http.StatusForbidden || reason != "caller-not-allowed":
					t.Errorf("%s, activator %s answered the stranger %d %q %v; want 403 caller-not-allowed", when, a, code, reason, err)
				case !strings.Contains(body, "NetworkPolicies") || strings.Contains(body, policy):
					t.Errorf("%s, activator %s's refusal %q: want it to say the NetworkPolicies do not admit the caller, naming none", when, a, body)
				default:
					t.Logf("%s, activator %s refused the stranger: %s", when, a, strings.TrimSpace(body))
				}
			}
			return nil
		})
	}

	// 1. At zero, the stranger is refused by every activator (a pod just
	// started may be unknown to one for a moment: it is then judged as no
	// pod, which the policy does not admit either), and wakes nothing.
	refusedEverywhere("at zero")
	e.consistently(name+" kept at zero after the stranger's requests: a refused caller wakes nothing", 5*time.Second, func(ctx context.Context) error {
		if n, err := e.replicas(ctx, name); err != nil || n != 0 {
			return fmt.Errorf("scale %d %v, want 0", n, err)
		}
		return nil
	})

	// 2. The ingress pod reaches the service from zero, at its ClusterIP,
	// through an activator. Until the activators have seen the pod's
	// labels it may be refused as the policy would refuse it.
	url, err := e.serviceURL(t.Context(), name, "/")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	e.eventuallyWithin("the ingress pod served from zero", scaleTimeout, func(ctx context.Context) error {
		code, reason, body, err := tryBody(entryClient, url, host)
		if err != nil || code != http.StatusOK || !strings.HasPrefix(body, helloGreeting) {
			return fmt.Errorf("%d %q %q %v", code, reason, body, err)
		}
		return nil
	})
	t.Logf("the ingress pod's first answer from zero after %v", time.Since(start).Round(time.Millisecond))

	// 3. Scaled up and out of the activators' path, the service keeps one
	// pod; the activators still judge whoever reaches them.
	if _, err := e.cs.AppsV1().Deployments(e.ns).Patch(t.Context(), name, types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"autoscaling.swell.run/min-scale":"1"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitServingSwell(name, 1)
	refusedEverywhere("scaled up")
	for _, a := range acts {
		if code, reason, body, err := tryBody(entryClient, "http://"+a+"/", host); err != nil || code != http.StatusOK {
			t.Errorf("scaled up, activator %s answered the ingress pod %d %q %q %v; want 200", a, code, reason, body, err)
		}
	}

	// Not enforced by this cluster's network: the stranger reaches the
	// pods directly. Logged only: on a cluster that enforces the policy
	// this is refused too.
	e.waitProxied(name, "pods")
	code, _, _, err := tryBody(strangerClient, url, host)
	t.Logf("the stranger at the Service's ClusterIP, routed to the pods (the policy is not enforced on this cluster's pods): %d %v", code, err)
}

// labelledIdlePod is idlePod with labels, alternating keys and values,
// set once the pod runs.
func (e *env) labelledIdlePod(ns, name string, kv ...string) *corev1.Pod {
	e.t.Helper()
	e.idlePod(ns, name)
	labels := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		labels[kv[i]] = kv[i+1]
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	if err != nil {
		e.t.Fatal(err)
	}
	p, err := e.cs.CoreV1().Pods(ns).Patch(e.t.Context(), name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		e.t.Fatalf("label pod %s/%s: %v", ns, name, err)
	}
	return p
}

// tryBody sends GET url with the Host header host and returns the status,
// Swell-Reason and body, or the error.
func tryBody(c *http.Client, url, host string) (int, string, string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, "", "", err
	}
	req.Host = host
	res, err := c.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 1<<16))
	return res.StatusCode, res.Header.Get("Swell-Reason"), string(body), err
}

// admitOnly creates the NetworkPolicy name for the pods of the Deployment
// app (labelled app=<app>): on the app's port, only the pods labelled
// pods in the namespaces labelled namespaces; on the queue-proxy's ports,
// what Swell needs where policies are enforced (the activators and the
// autoscaler), a rule that admits no caller to the app's port.
func (e *env) admitOnly(name, app string, namespaces, pods map[string]string) {
	e.t.Helper()
	appPort, qp, stats := intstr.FromString("http"), intstr.FromInt32(queueProxyPort), intstr.FromInt32(9090)
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: namespaces},
					PodSelector:       &metav1.LabelSelector{MatchLabels: pods},
				}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: &appPort}},
			}, {
				From: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: swellNamespace}},
				}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: &qp}, {Port: &stats}},
			}},
		},
	}
	if _, err := e.cs.NetworkingV1().NetworkPolicies(e.ns).Create(e.t.Context(), np, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create NetworkPolicy %s: %v", name, err)
	}
}
