package netpol

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// FuzzAdmits builds policies, a target and a caller from the fuzzer's bytes,
// valid or not, and checks the laws of NetworkPolicy ingress on them:
//   - a verdict is consistent with itself, and the same whatever the
//     order of the policies; compiling changes no policy;
//   - policies add up: with another policy q, the pod is isolated when
//     either side isolates it, and the caller admitted exactly when the
//     pod is not isolated or an isolating side admits it; so a policy
//     turns a refusal into an admission only when it selects the pod and
//     admits the caller;
//   - an allow-all policy admits everyone, a deny-all one admits only what
//     the others admit on an isolated pod, an Egress-only one and policies
//     of other namespaces change nothing;
//   - the rule, peer and port a verdict names admit the caller alone, and
//     each policy a refusal names refuses alone.
func FuzzAdmits(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{1, 0, 0, 1, 1, 1, 0, 1, 2, 0, 0, 1})
	f.Add([]byte{3, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20})
	f.Add([]byte("deny all, then allow from namespace b on port 80"))
	f.Add([]byte{2, 0, 1, 0, 2, 3, 1, 1, 4, 2, 0, 3, 3, 3, 1, 2, 0, 0, 4, 1, 1, 1, 2, 2, 5, 5, 6})
	f.Add([]byte{255, 254, 253, 252, 251, 250, 249, 248, 247, 246, 245, 244, 243, 242, 241, 240})
	f.Add([]byte{1, 2, 6, 1, 1, 3, 2, 1, 0, 3, 1, 4, 1, 2, 2, 0, 1, 7, 9, 3, 2, 1, 1, 1, 1, 5, 2, 8})
	f.Fuzz(func(t *testing.T, data []byte) {
		g := &gen{b: data}
		ps := g.policies()
		q := g.policy("q")
		to := g.target()
		from := g.peer()

		before := deepCopy(ps)
		set := Compile(ps)
		if !reflect.DeepEqual(ps, before) {
			t.Fatal("Compile changed the policies")
		}
		v := set.Admits(to, from)
		checkVerdict(t, v)

		reversed := slices.Clone(ps)
		slices.Reverse(reversed)
		if w := Admits(reversed, to, from); w.Allowed != v.Allowed || w.Isolated != v.Isolated || w.By != v.By || !slices.Equal(w.Selecting, v.Selecting) {
			t.Fatalf("in reverse: %v\nin order:   %v", w, v)
		}

		// Policies add up.
		vq := Admits([]*networkingv1.NetworkPolicy{q}, to, from)
		both := Admits(append(slices.Clone(ps), q), to, from)
		checkVerdict(t, both)
		isolated := v.Isolated || vq.Isolated
		allowed := !isolated || v.Isolated && v.Allowed || vq.Isolated && vq.Allowed
		if both.Isolated != isolated || both.Allowed != allowed {
			t.Fatalf("with q: %v\nwithout: %v\nq alone: %v", both, v, vq)
		}
		if !v.Allowed && both.Allowed && both.By.Policy != policyName(q) {
			t.Fatalf("q turned a refusal into %v", both)
		}

		ns := to.Namespace
		allowAll := newPolicy(ns, "allow-all", networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{}}})
		if w := Admits(append(slices.Clone(ps), allowAll), to, from); !w.Allowed {
			t.Fatalf("with an allow-all policy: %v", w)
		}
		denyAll := newPolicy(ns, "deny-all", networkingv1.NetworkPolicySpec{})
		if w := Admits(append(slices.Clone(ps), denyAll), to, from); w.Allowed != (v.Isolated && v.Allowed) || !w.Isolated {
			t.Fatalf("with a deny-all policy: %v; without: %v", w, v)
		}
		egress := newPolicy(ns, "egress-only", networkingv1.NetworkPolicySpec{
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}, Ingress: q.Spec.Ingress})
		if w := Admits(append(slices.Clone(ps), egress), to, from); w.Allowed != v.Allowed || w.Isolated != v.Isolated {
			t.Fatalf("with an Egress-only policy: %v; without: %v", w, v)
		}
		elsewhere := deepCopy(ps)
		for _, p := range elsewhere {
			if p != nil {
				p.Namespace = "not-" + ns
			}
		}
		if w := Admits(elsewhere, to, from); !w.Allowed || w.Isolated {
			t.Fatalf("with the policies in another namespace: %v", w)
		}

		// Witnesses.
		byName := map[string]*networkingv1.NetworkPolicy{}
		for _, p := range ps {
			if p != nil {
				byName[policyName(p)] = p
			}
		}
		switch {
		case v.Isolated && v.Allowed:
			p := byName[v.By.Policy].DeepCopy()
			r := p.Spec.Ingress[v.By.Ingress]
			alone := networkingv1.NetworkPolicyIngressRule{}
			if v.By.From >= 0 {
				alone.From = r.From[v.By.From : v.By.From+1]
			}
			if v.By.Port >= 0 {
				alone.Ports = r.Ports[v.By.Port : v.By.Port+1]
			}
			p.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{alone}
			w := Admits([]*networkingv1.NetworkPolicy{p}, to, from)
			if want := (Rule{Policy: v.By.Policy, From: min(v.By.From, 0), Port: min(v.By.Port, 0)}); !w.Allowed || w.By != want {
				t.Fatalf("%v; its rule alone: %v", v, w)
			}
		case !v.Allowed:
			for _, n := range v.Selecting {
				if w := Admits([]*networkingv1.NetworkPolicy{byName[n]}, to, from); w.Allowed || !w.Isolated {
					t.Fatalf("%v; %s alone: %v", v, n, w)
				}
			}
		}
	})
}

// gen makes policies, targets and callers from a fuzzer's bytes, each
// byte a choice; past the end, every choice is the first.
type gen struct{ b []byte }

func (g *gen) n(k int) int {
	if len(g.b) == 0 {
		return 0
	}
	v := int(g.b[0]) % k
	g.b = g.b[1:]
	return v
}

func pick[T any](g *gen, xs ...T) T { return xs[g.n(len(xs))] }

var (
	genNamespaces = []string{"shop", "shop", "bank", ""}
	genKeys       = []string{"app", "team", corev1.LabelMetadataName, "bad key!"}
	genValues     = []string{"web", "shop", "bank", "", "-bad"}
	genCIDRs      = []string{"0.0.0.0/0", "10.0.0.0/8", "10.0.1.7/32", "192.0.2.0/24", "192.0.2.128/25", "::/0",
		"2001:db8::/32", "::ffff:192.0.2.0/120", "192.0.2.77/24", "192.0.2.0/33", "", "010.0.0.0/8"}
	genIPs = []string{"10.0.1.7", "192.0.2.10", "192.0.2.200", "::ffff:192.0.2.10", "2001:db8::1", "198.51.100.1"}
)

func (g *gen) labels() map[string]string {
	m := map[string]string{}
	for range g.n(3) {
		m[pick(g, genKeys...)] = pick(g, genValues...)
	}
	if len(m) == 0 && g.n(2) == 0 {
		return nil
	}
	return m
}

func (g *gen) selector() *metav1.LabelSelector {
	switch g.n(4) {
	case 0:
		return nil
	case 1:
		return &metav1.LabelSelector{}
	case 2:
		return &metav1.LabelSelector{MatchLabels: g.labels()}
	}
	s := &metav1.LabelSelector{}
	for range 1 + g.n(2) {
		e := metav1.LabelSelectorRequirement{
			Key:      pick(g, genKeys...),
			Operator: pick(g, metav1.LabelSelectorOpIn, metav1.LabelSelectorOpNotIn, metav1.LabelSelectorOpExists, metav1.LabelSelectorOpDoesNotExist, "Gt", ""),
		}
		for range g.n(3) {
			e.Values = append(e.Values, pick(g, genValues...))
		}
		s.MatchExpressions = append(s.MatchExpressions, e)
	}
	return s
}

func (g *gen) ipBlock() *networkingv1.IPBlock {
	if g.n(3) != 0 {
		return nil
	}
	b := &networkingv1.IPBlock{CIDR: pick(g, genCIDRs...)}
	for range g.n(3) {
		b.Except = append(b.Except, pick(g, genCIDRs...))
	}
	return b
}

func (g *gen) rule() networkingv1.NetworkPolicyIngressRule {
	var r networkingv1.NetworkPolicyIngressRule
	if g.n(3) == 1 {
		r.From = []networkingv1.NetworkPolicyPeer{}
	}
	for range g.n(4) {
		r.From = append(r.From, networkingv1.NetworkPolicyPeer{PodSelector: g.selector(), NamespaceSelector: g.selector(), IPBlock: g.ipBlock()})
	}
	for range g.n(3) {
		var p networkingv1.NetworkPolicyPort
		if g.n(2) == 1 {
			p.Protocol = ptr(pick(g, corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP, "tcp", ""))
		}
		switch g.n(3) {
		case 1:
			p.Port = ptr(intstr.FromInt32(pick[int32](g, 0, 53, 80, 8080, 65535, 70000, -1)))
		case 2:
			p.Port = ptr(intstr.FromString(pick(g, "http", "metrics", "HTTP", "", "80", "a--b")))
		}
		if g.n(3) == 1 {
			p.EndPort = ptr(pick[int32](g, 54, 81, 79, 8080, 65536))
		}
		r.Ports = append(r.Ports, p)
	}
	return r
}

func (g *gen) policy(name string) *networkingv1.NetworkPolicy {
	spec := networkingv1.NetworkPolicySpec{}
	if s := g.selector(); s != nil {
		spec.PodSelector = *s
	}
	spec.PolicyTypes = pick(g, nil, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
		[]networkingv1.PolicyType{networkingv1.PolicyTypeEgress, networkingv1.PolicyTypeIngress}, []networkingv1.PolicyType{"Bogus"}, []networkingv1.PolicyType{})
	for range g.n(4) {
		spec.Ingress = append(spec.Ingress, g.rule())
	}
	if g.n(3) == 1 {
		spec.Egress = []networkingv1.NetworkPolicyEgressRule{{}}
	}
	return newPolicy(pick(g, genNamespaces...), name, spec)
}

func (g *gen) policies() []*networkingv1.NetworkPolicy {
	var ps []*networkingv1.NetworkPolicy
	for i := range g.n(5) {
		if g.n(8) == 0 {
			ps = append(ps, nil)
			continue
		}
		ps = append(ps, g.policy(fmt.Sprintf("p%d", i)))
	}
	return ps
}

func (g *gen) target() Target {
	return Target{
		Namespace: pick(g, genNamespaces...),
		Labels:    g.labels(),
		Port: Port{
			Number:   pick[int32](g, 8080, 80, 53, 65535, 0),
			Name:     pick(g, "http", "", "metrics"),
			Protocol: pick(g, "", corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP),
		},
	}
}

func (g *gen) peer() Peer {
	var p Peer
	if i := g.n(len(genIPs) + 1); i < len(genIPs) {
		p.IP = netip.MustParseAddr(genIPs[i])
	}
	if g.n(2) == 0 {
		p.Pod = &Pod{Namespace: pick(g, genNamespaces...), NamespaceLabels: g.labels(), Labels: g.labels()}
	}
	return p
}

func newPolicy(namespace, name string, spec networkingv1.NetworkPolicySpec) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Spec: spec}
}

func policyName(p *networkingv1.NetworkPolicy) string { return p.Namespace + "/" + p.Name }

func deepCopy(ps []*networkingv1.NetworkPolicy) []*networkingv1.NetworkPolicy {
	var out []*networkingv1.NetworkPolicy
	for _, p := range ps {
		out = append(out, p.DeepCopy())
	}
	return out
}

func ptr[T any](v T) *T { return &v }
