package netpol

import (
	"fmt"
	"net/netip"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// benchPolicies are 20 policies of namespace shop that all select the web
// pods, each with 4 rules of selectors, ipBlocks, expressions and ports.
// Only the last rule of the last policy admits benchCaller.
func benchPolicies() []*networkingv1.NetworkPolicy {
	var ps []*networkingv1.NetworkPolicy
	for i := range 20 {
		team := fmt.Sprintf("team-%d", i)
		last := i == 19
		if last {
			team = "shop"
		}
		ps = append(ps, newPolicy("shop", fmt.Sprintf("p%02d", i), networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{
					{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("client-%d", i)}}},
					{IPBlock: &networkingv1.IPBlock{CIDR: fmt.Sprintf("203.0.113.%d/32", i), Except: []string{"203.0.113.255/32"}}},
				},
			}, {
				From: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
						{Key: "env", Operator: metav1.LabelSelectorOpIn, Values: []string{"prod", "staging"}}}},
					PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "frontend"}},
				}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: ptr(intstr.FromInt32(9000 + int32(i)))}},
			}, {
				Ports: []networkingv1.NetworkPolicyPort{{Port: ptr(intstr.FromInt32(9100)), EndPort: ptr[int32](9199)}},
			}, {
				From: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": team}},
					PodSelector:       &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpExists}}},
				}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: ptr(intstr.FromString("http"))}},
			}},
		}))
	}
	return ps
}

var (
	benchTarget = Target{Namespace: "shop", Labels: map[string]string{"app": "web", "version": "v2"}, Port: Port{Number: 8080, Name: "http"}}
	benchCaller = Peer{IP: netip.MustParseAddr("10.0.1.7"), Pod: &Pod{Namespace: "shop",
		NamespaceLabels: map[string]string{"kubernetes.io/metadata.name": "shop", "team": "shop", "env": "dev"},
		Labels:          map[string]string{"app": "cart", "pod-template-hash": "5d9f8c7b6"}}}
)

// BenchmarkAdmits judges one caller against 20 policies of 4 rules each:
// admitted by the very last rule, refused by all, and for a pod no policy
// selects.
func BenchmarkAdmits(b *testing.B) {
	set := Compile(benchPolicies())
	refused := benchCaller
	refused.Pod = &Pod{Namespace: "bank", NamespaceLabels: map[string]string{"kubernetes.io/metadata.name": "bank"}, Labels: map[string]string{"app": "x"}}
	other := benchTarget
	other.Labels = map[string]string{"app": "db"}
	for _, bc := range []struct {
		name    string
		to      Target
		from    Peer
		allowed bool
	}{
		{"admitted-by-last-rule", benchTarget, benchCaller, true},
		{"refused", benchTarget, refused, false},
		{"not-isolated", other, benchCaller, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if v := set.Admits(bc.to, bc.from); v.Allowed != bc.allowed {
				b.Fatalf("%v, want allowed %v", v, bc.allowed)
			}
			b.ReportAllocs()
			for b.Loop() {
				set.Admits(bc.to, bc.from)
			}
		})
	}
}

// BenchmarkCompile compiles the 20 policies, as the activator will on
// every change to a namespace's policies.
func BenchmarkCompile(b *testing.B) {
	ps := benchPolicies()
	b.ReportAllocs()
	for b.Loop() {
		Compile(ps)
	}
}
