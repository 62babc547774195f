package activatorsource

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/swell-run/swell/activator"
	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/kube/inject"
	"github.com/swell-run/swell/pkg/netpol"
	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/service"
)

// namespace is a namespace with labels, alternating keys and values.
func namespace(name string, kv ...string) *corev1.Namespace {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	for i := 0; i+1 < len(kv); i += 2 {
		ns.Labels[kv[i]] = kv[i+1]
	}
	return ns
}

// labelled is p with labels, alternating keys and values.
func labelled(p *corev1.Pod, kv ...string) *corev1.Pod {
	p.Labels = map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		p.Labels[kv[i]] = kv[i+1]
	}
	return p
}

// optedIn is an opted-in, injected Deployment whose pods are labelled
// podLabels and whose app listens on ports.
func optedIn(ns, name string, podLabels map[string]string, ports ...corev1.ContainerPort) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{kube.LabelEnabled: "true"}},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": podLabels["app"]}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{
					{Name: "app", Image: "example/app", Ports: ports},
					{Name: inject.ContainerName, Image: "example/queue-proxy", Ports: []corev1.ContainerPort{{Name: inject.PortNameServing, ContainerPort: network.DefaultQueueServingPort}}},
				}},
			},
		},
	}
}

// onlyIngress is shop's policy for app=web: only pods labelled
// role=ingress in namespaces labelled purpose=ingress, on the app's port
// named http; and the activators, on the queue-proxy's port.
func onlyIngress() *networkingv1.NetworkPolicy {
	http, qp := intstr.FromString("http"), intstr.FromInt32(network.DefaultQueueServingPort)
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "only-ingress"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"purpose": "ingress"}},
					PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"role": "ingress"}},
				}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: &http}},
			}, {
				From: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: kube.DefaultSystemNamespace}},
				}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: &qp}},
			}},
		},
	}
}

// waitVerdicts waits, on the judge's Updated signal, until the callers'
// verdicts on service key are want (address → allowed).
func waitVerdicts(t *testing.T, src *Source, what string, key service.Key, want map[string]bool) {
	t.Helper()
	d := src.Callers()
	timeout := time.After(testTimeout)
	for {
		updated := d.Updated()
		got := map[string]bool{}
		why := map[string]string{}
		for ip := range want {
			v := d.Admits(key, netip.MustParseAddr(ip))
			got[ip], why[ip] = v.Allowed, v.Why
		}
		if reflect.DeepEqual(got, want) {
			return
		}
		select {
		case <-updated:
		case <-timeout:
			t.Fatalf("%s: verdicts %v, want %v\n%v", what, got, want, why)
		}
	}
}

// TestCallerVerdicts: a caller is admitted to a service exactly when the
// NetworkPolicies of the service's namespace that select its pods (as
// their Deployment's template labels them) admit the caller's pod, by its
// namespace's labels and its own, on the app's port; with no policy
// selecting the pods, everyone is. Every change of a policy, a namespace's
// labels, a pod's labels or the Deployment's template is followed, and
// changes the generation.
func TestCallerVerdicts(t *testing.T) {
	const (
		controller = "10.1.0.1" // ingress/controller, role=ingress
		stranger   = "10.1.0.2" // other/attacker, role=ingress
		plain      = "10.1.0.3" // ingress/plain, no role
		friend     = "10.1.0.4" // shop/friend
		node       = "192.0.2.9"
	)
	src, client := started(t,
		namespace("shop"), namespace("ingress", "purpose", "ingress"), namespace("other"),
		optedIn("shop", "web", map[string]string{"app": "web", "tier": "front"}, corev1.ContainerPort{Name: "http", ContainerPort: 8080}),
		labelled(pod("ingress", "controller", controller), "role", "ingress"),
		labelled(pod("other", "attacker", stranger), "role", "ingress"),
		pod("ingress", "plain", plain),
		pod("shop", "friend", friend),
	)
	all := func(allowed bool) map[string]bool {
		return map[string]bool{controller: allowed, stranger: allowed, plain: allowed, friend: allowed, node: allowed}
	}
	d := src.Callers()
	waitVerdicts(t, src, "no policy selects the pods", webKey, all(true))

	gen := d.Generation()
	nps := client.NetworkingV1().NetworkPolicies("shop")
	np, err := nps.Create(bg, onlyIngress(), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	only := map[string]bool{controller: true, stranger: false, plain: false, friend: false, node: false}
	waitVerdicts(t, src, "a policy admits only the ingress controller", webKey, only)
	if d.Generation() == gen {
		t.Error("the generation did not change with the policies")
	}
	if v := d.Admits(webKey, netip.MustParseAddr(stranger)); !strings.Contains(v.Why, "shop/only-ingress") {
		t.Errorf("the refusal %q does not name the policy", v.Why)
	}

	// The namespace's labels, then the pod's, as they change.
	ns, err := client.CoreV1().Namespaces().Get(bg, "other", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Labels = map[string]string{"purpose": "ingress"}
	if _, err := client.CoreV1().Namespaces().Update(bg, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	only[stranger] = true
	waitVerdicts(t, src, "the attacker's namespace labelled purpose=ingress", webKey, only)
	p, err := client.CoreV1().Pods("other").Get(bg, "attacker", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Labels = map[string]string{"role": "batch"}
	if _, err := client.CoreV1().Pods("other").Update(bg, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	only[stranger] = false
	waitVerdicts(t, src, "the attacker's pod relabelled", webKey, only)

	// The port: a policy admitting the controller on another port only
	// does not admit it on the app's.
	np.Spec.Ingress[0].Ports = []networkingv1.NetworkPolicyPort{{Port: ptrTo(intstr.FromInt32(9090))}}
	if np, err = nps.Update(bg, np, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitVerdicts(t, src, "the policy admits the controller on port 9090 only", webKey, all(false))
	np.Spec.Ingress[0].Ports = []networkingv1.NetworkPolicyPort{{Port: ptrTo(intstr.FromInt32(8080))}}
	if _, err = nps.Update(bg, np, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	only[stranger] = false
	waitVerdicts(t, src, "the policy admits the controller on port 8080", webKey, only)

	// The pods' labels come from the template: relabelled, the policy no
	// longer selects them.
	deps := client.AppsV1().Deployments("shop")
	dep, err := deps.Get(bg, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dep.Spec.Template.Labels = map[string]string{"app": "api"}
	if _, err := deps.Update(bg, dep, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitVerdicts(t, src, "the template no longer labelled app=web", webKey, all(true))

	// Without the policy, everyone again; without the Deployment, no one.
	if err := nps.Delete(bg, "only-ingress", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := deps.Delete(bg, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitVerdicts(t, src, "the Deployment deleted", webKey, all(false))
}

// TestCallerVerdictsOfAReusedAddress: an address two pods hold at once is
// admitted only if both would be.
func TestCallerVerdictsOfAReusedAddress(t *testing.T) {
	src, client := started(t,
		namespace("shop"), namespace("ingress", "purpose", "ingress"),
		optedIn("shop", "web", map[string]string{"app": "web"}, corev1.ContainerPort{Name: "http", ContainerPort: 8080}),
		onlyIngress(),
		labelled(pod("ingress", "controller", "10.1.0.1"), "role", "ingress"),
	)
	waitVerdicts(t, src, "the controller alone", webKey, map[string]bool{"10.1.0.1": true})
	if _, err := client.CoreV1().Pods("ingress").Create(bg, pod("ingress", "reuse", "10.1.0.1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitVerdicts(t, src, "a pod the policy refuses holding the address too", webKey, map[string]bool{"10.1.0.1": false})
}

// TestWorkloadTransform: of a Deployment the informer keeps its pods'
// labels and the app's port, as injection finds the app: named by
// swell.run/container, or the only container besides the queue-proxy;
// its first port, 8080 unnamed when it declares none.
func TestWorkloadTransform(t *testing.T) {
	labels := map[string]string{"app": "web"}
	for _, tc := range []struct {
		name    string
		d       *appsv1.Deployment
		port    netpol.Port
		problem string
	}{
		{"first port", optedIn("shop", "web", labels, corev1.ContainerPort{Name: "http", ContainerPort: 8081}, corev1.ContainerPort{ContainerPort: 9000}),
			netpol.Port{Number: 8081, Name: "http"}, ""},
		{"no port", optedIn("shop", "web", labels), netpol.Port{Number: network.DefaultUserPort}, ""},
		{"named container", func() *appsv1.Deployment {
			d := optedIn("shop", "web", labels, corev1.ContainerPort{ContainerPort: 8081})
			d.Spec.Template.Spec.Containers = append(d.Spec.Template.Spec.Containers,
				corev1.Container{Name: "sidecar", Ports: []corev1.ContainerPort{{ContainerPort: 7000, Protocol: corev1.ProtocolUDP}}})
			d.Annotations = map[string]string{inject.AnnotationContainer: "sidecar"}
			return d
		}(), netpol.Port{Number: 7000, Protocol: corev1.ProtocolUDP}, ""},
		{"two apps with ports", func() *appsv1.Deployment {
			d := optedIn("shop", "web", labels, corev1.ContainerPort{ContainerPort: 8081})
			d.Spec.Template.Spec.Containers = append(d.Spec.Template.Spec.Containers,
				corev1.Container{Name: "sidecar", Ports: []corev1.ContainerPort{{ContainerPort: 7000}}})
			return d
		}(), netpol.Port{}, "both declare ports"},
	} {
		got, err := workloadTransform(tc.d)
		if err != nil {
			t.Fatal(err)
		}
		w := got.(*workloadRef)
		if w.Name != "web" || w.Namespace != "shop" || !reflect.DeepEqual(w.PodLabels, labels) || w.Port != tc.port ||
			tc.problem == "" && w.Problem != "" || !strings.Contains(w.Problem, tc.problem) {
			t.Errorf("%s: %+v, want port %v, problem %q", tc.name, w, tc.port, tc.problem)
		}
		if again, _ := workloadTransform(w); again != w {
			t.Errorf("%s: a workloadRef transformed again changed", tc.name)
		}
	}
}

// TestNamespaceTransformKeepsLabels: of a namespace the informer keeps
// its name and labels.
func TestNamespaceTransformKeepsLabels(t *testing.T) {
	ns := namespace("shop", "team", "a")
	ns.Annotations = map[string]string{"x": "y"}
	ns.Spec.Finalizers = []corev1.FinalizerName{"kubernetes"}
	got, _ := namespaceTransform(ns)
	want := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{"team": "a"}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// TestSourceJudgesCallers: the Source's Callers is the judge, waited for
// with the other caches: a policy listed before the first sync is applied
// by the time WaitForSync returns.
func TestSourceJudgesCallers(t *testing.T) {
	src, _ := started(t, namespace("shop"), namespace("ingress", "purpose", "ingress"),
		optedIn("shop", "web", map[string]string{"app": "web"}, corev1.ContainerPort{Name: "http", ContainerPort: 8080}),
		onlyIngress(), pod("ingress", "plain", "10.1.0.3"), labelled(pod("ingress", "controller", "10.1.0.1"), "role", "ingress"))
	var d activator.CallerDirectory = src.Callers()
	if v := d.Admits(webKey, netip.MustParseAddr("10.1.0.3")); v.Allowed {
		t.Errorf("right after the sync, a caller the policy refuses: %+v", v)
	}
	if v := d.Admits(webKey, netip.MustParseAddr("10.1.0.1")); !v.Allowed {
		t.Errorf("right after the sync, a caller the policy admits: %+v", v)
	}
}

func ptrTo[T any](v T) *T { return &v }
