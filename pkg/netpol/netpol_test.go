package netpol

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/yaml"
)

// policiesOf reads a YAML list of NetworkPolicies.
func policiesOf(t testing.TB, text string) []*networkingv1.NetworkPolicy {
	t.Helper()
	var ps []*networkingv1.NetworkPolicy
	if err := yaml.UnmarshalStrict([]byte(text), &ps); err != nil {
		t.Fatalf("policies: %v\n%s", err, text)
	}
	return ps
}

var (
	web     = Target{Namespace: "shop", Labels: map[string]string{"app": "web"}, Port: Port{Number: 8080, Name: "http"}}
	podIP   = netip.MustParseAddr("10.0.1.7")
	shopPod = Peer{IP: podIP, Pod: &Pod{Namespace: "shop", NamespaceLabels: map[string]string{"team": "shop"}, Labels: map[string]string{"app": "cart"}}}
	outside = Peer{IP: netip.MustParseAddr("192.0.2.10")}
)

// TestVerdicts checks what a verdict says: who admitted, or who refused
// and what in their policies admitted nothing.
func TestVerdicts(t *testing.T) {
	for _, tc := range []struct {
		name     string
		policies string
		to       Target
		from     Peer
		want     string
	}{{
		name: "no policy selects the pod",
		policies: `
- metadata: {namespace: shop, name: other-pods}
  spec:
    podSelector: {matchLabels: {app: db}}
- metadata: {namespace: bank, name: deny-all}
  spec: {podSelector: {}}`,
		to: web, from: shopPod,
		want: "allowed: no NetworkPolicy selects the pod for ingress",
	}, {
		name: "admitted by a peer and a port",
		policies: `
- metadata: {namespace: shop, name: web}
  spec:
    podSelector: {matchLabels: {app: web}}
    ingress:
    - from: [{podSelector: {matchLabels: {app: db}}}]
    - from:
      - ipBlock: {cidr: 192.0.2.0/24}
      - podSelector: {matchLabels: {app: cart}}
      ports: [{port: 9090}, {port: http}]`,
		to: web, from: shopPod,
		want: "allowed by NetworkPolicy shop/web spec.ingress[1]: from[1], ports[1]",
	}, {
		name: "admitted by a rule for every source and port, the first by name",
		policies: `
- metadata: {namespace: shop, name: z-all}
  spec:
    podSelector: {}
    ingress: [{}]
- metadata: {namespace: shop, name: a-all}
  spec:
    podSelector: {}
    ingress: [{}]`,
		to: web, from: outside,
		want: "allowed by NetworkPolicy shop/a-all spec.ingress[0]: any source, any port",
	}, {
		name: "refused by one policy",
		policies: `
- metadata: {namespace: shop, name: deny-all}
  spec: {podSelector: {}}`,
		to: web, from: shopPod,
		want: "refused: NetworkPolicy shop/deny-all selects the pod for ingress and does not admit this caller on this port",
	}, {
		name: "refused by several, with what admitted nothing",
		policies: `
- metadata: {namespace: shop, name: web}
  spec:
    podSelector: {matchLabels: {app: web}}
    ingress:
    - from:
      - ipBlock: {cidr: 10.0.0.0/8}
      - namespaceSelector: {matchExpressions: [{key: team, operator: In}]}
- metadata: {namespace: shop, name: deny-all}
  spec: {podSelector: {}}
- metadata: {namespace: shop, name: other-pods}
  spec:
    podSelector: {matchLabels: {app: db}}`,
		to: web, from: shopPod,
		want: "refused: NetworkPolicies shop/deny-all, shop/web select the pod for ingress and none admits this caller on this port" +
			"; shop/web spec.ingress[0].from[1].namespaceSelector: values: Invalid value: null: for 'in', 'notin' operators, values set can't be empty; admits nothing" +
			"; shop/web spec.ingress[0].from[0].ipBlock: holds the caller's address, but an ipBlock admits only callers that are no pod; a pod is admitted by podSelector and namespaceSelector",
	}, {
		name: "an ipBlock that excludes the pod's address says nothing of it",
		policies: `
- metadata: {namespace: shop, name: web}
  spec:
    podSelector: {}
    ingress:
    - from:
      - ipBlock: {cidr: 10.0.0.0/8, except: [10.0.1.0/24]}`,
		to: web, from: shopPod,
		want: "refused: NetworkPolicy shop/web selects the pod for ingress and does not admit this caller on this port",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			v := Admits(policiesOf(t, tc.policies), tc.to, tc.from)
			checkVerdict(t, v)
			if got := v.String(); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestFailsClosed checks each part the API server would refuse: it admits
// nothing, is reported by Problems and noted in a refusal, and the rest of
// the policy still admits what it admits.
func TestFailsClosed(t *testing.T) {
	for _, tc := range []struct {
		name string
		// spec is a policy's spec in namespace shop, named p. Its other
		// parts admit nothing for shopPod.
		spec  string
		from  Peer
		field string
		text  string
	}{{
		name:  "invalid pod selector",
		spec:  `{podSelector: {matchLabels: {"bad key!": x}}, ingress: [{}]}`,
		from:  shopPod,
		field: "spec.podSelector",
		text:  "the policy is taken to select every pod of its namespace and to admit nothing",
	}, {
		name:  "unknown policy type",
		spec:  `{podSelector: {}, policyTypes: [Egress, Inbound], ingress: [{}]}`,
		from:  shopPod,
		field: "spec.policyTypes[1]",
		text:  `"Inbound" is neither Ingress nor Egress; the policy is taken to isolate the pods it selects and to admit nothing`,
	}, {
		name:  "invalid operator",
		spec:  `{podSelector: {}, ingress: [{from: [{podSelector: {matchExpressions: [{key: app, operator: Gt, values: ["1"]}]}}]}]}`,
		from:  shopPod,
		field: "spec.ingress[0].from[0].podSelector",
		text:  `"Gt" is not a valid label selector operator; admits nothing`,
	}, {
		name:  "valid pod selector, invalid namespace selector",
		spec:  `{podSelector: {}, ingress: [{from: [{podSelector: {}, namespaceSelector: {matchExpressions: [{key: team, operator: Exists, values: [shop]}]}}]}]}`,
		from:  shopPod,
		field: "spec.ingress[0].from[0].namespaceSelector",
		text:  "admits nothing",
	}, {
		name:  "peer with nothing",
		spec:  `{podSelector: {}, ingress: [{from: [{}]}]}`,
		from:  shopPod,
		field: "spec.ingress[0].from[0]",
		text:  "sets none of podSelector, namespaceSelector and ipBlock, which the API refuses; admits nothing",
	}, {
		name:  "ipBlock with a selector",
		spec:  `{podSelector: {}, ingress: [{from: [{podSelector: {}, ipBlock: {cidr: 0.0.0.0/0}}]}]}`,
		from:  outside,
		field: "spec.ingress[0].from[0]",
		text:  "sets ipBlock together with a selector, which the API refuses; admits nothing",
	}, {
		name:  "invalid CIDR",
		spec:  `{podSelector: {}, ingress: [{from: [{ipBlock: {cidr: 192.0.2.0/33}}]}]}`,
		from:  outside,
		field: "spec.ingress[0].from[0].ipBlock.cidr",
		text:  `"192.0.2.0/33" is not a CIDR such as 192.0.2.0/24 or 2001:db8::/64; admits nothing`,
	}, {
		name:  "invalid exception",
		spec:  `{podSelector: {}, ingress: [{from: [{ipBlock: {cidr: 192.0.2.0/24, except: [192.0.2.128/25, 192.0.2.010/32]}}]}]}`,
		from:  outside,
		field: "spec.ingress[0].from[0].ipBlock.except[1]",
		text:  `"192.0.2.010/32" is not a CIDR such as 192.0.2.0/24 or 2001:db8::/64; the ipBlock admits nothing`,
	}, {
		name:  "unknown protocol",
		spec:  `{podSelector: {}, ingress: [{ports: [{protocol: tcp, port: 8080}]}]}`,
		from:  shopPod,
		field: "spec.ingress[0].ports[0].protocol",
		text:  `"tcp" is not TCP, UDP or SCTP; matches no port`,
	}, {
		name:  "port zero",
		spec:  `{podSelector: {}, ingress: [{ports: [{port: 0}]}]}`,
		from:  shopPod,
		field: "spec.ingress[0].ports[0].port",
		text:  "0 is not a port number (1-65535); matches no port",
	}, {
		name:  "invalid port name",
		spec:  `{podSelector: {}, ingress: [{ports: [{port: HTTP}]}]}`,
		from:  shopPod,
		field: "spec.ingress[0].ports[0].port",
		text:  "matches no port",
	}, {
		name:  "end below port",
		spec:  `{podSelector: {}, ingress: [{ports: [{port: 8081, endPort: 8080}]}]}`,
		from:  shopPod,
		field: "spec.ingress[0].ports[0].endPort",
		text:  "8080 is not a port number from port (8081) to 65535; matches no port",
	}, {
		name:  "end of a named port",
		spec:  `{podSelector: {}, ingress: [{ports: [{port: http, endPort: 8080}]}]}`,
		from:  shopPod,
		field: "spec.ingress[0].ports[0].endPort",
		text:  "is set with a named port, which the API refuses; matches no port",
	}, {
		name:  "end without port",
		spec:  `{podSelector: {}, ingress: [{ports: [{endPort: 8080}]}]}`,
		from:  shopPod,
		field: "spec.ingress[0].ports[0].endPort",
		text:  "is set without port, which the API refuses; matches no port",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ps := policiesOf(t, "[{metadata: {namespace: shop, name: p}, spec: "+tc.spec+"}]")
			set := Compile(ps)
			problems := set.Problems()
			if len(problems) != 1 || problems[0].Policy != "shop/p" || problems[0].Field != tc.field || !strings.HasSuffix(problems[0].Text, tc.text) {
				t.Fatalf("problems %q, want one at %s ending %q", problems, tc.field, tc.text)
			}
			v := set.Admits(web, tc.from)
			checkVerdict(t, v)
			if v.Allowed || !slices.Contains(v.Notes, problems[0]) {
				t.Fatalf("%v: want refused, with the problem noted", v)
			}
			// The same policy with a rule that admits everyone admits
			// everyone: a broken part does not spoil the rest.
			ps[0].Spec.PolicyTypes = nil
			ps[0].Spec.Ingress = append(ps[0].Spec.Ingress, networkingv1.NetworkPolicyIngressRule{})
			if v := Admits(ps, web, tc.from); tc.field != "spec.podSelector" && !v.Allowed {
				t.Fatalf("with an allow-all rule added: %v", v)
			}
		})
	}
}

// TestCallers checks how callers are seen: addresses in either form,
// namespaces by their name label, pods with no labels at all.
func TestCallers(t *testing.T) {
	ps := policiesOf(t, `
- metadata: {namespace: shop, name: p}
  spec:
    podSelector: {}
    ingress:
    - from:
      - ipBlock: {cidr: "::ffff:192.0.2.0/120"}
      - ipBlock: {cidr: 198.51.100.77/24, except: ["::ffff:198.51.100.128/121"]}
      - ipBlock: {cidr: "2001:db8::/32"}
      - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: ingress}}
      - namespaceSelector: {}
        podSelector: {matchExpressions: [{key: app, operator: DoesNotExist}]}`)
	set := Compile(ps)
	if p := set.Problems(); p != nil {
		t.Fatalf("problems: %v", p)
	}
	for _, tc := range []struct {
		name string
		from Peer
		want bool
	}{
		{"IPv4 in a range written as IPv6", Peer{IP: netip.MustParseAddr("192.0.2.1")}, true},
		{"IPv4 written as IPv6", Peer{IP: netip.MustParseAddr("::ffff:198.51.100.1")}, true},
		{"IPv4 excluded in IPv6 form", Peer{IP: netip.MustParseAddr("198.51.100.200")}, false},
		{"IPv6", Peer{IP: netip.MustParseAddr("2001:db8::1")}, true},
		{"IPv6 outside", Peer{IP: netip.MustParseAddr("2001:db9::1")}, false},
		{"no address", Peer{}, false},
		{"namespace by name, no labels given", Peer{Pod: &Pod{Namespace: "ingress", Labels: map[string]string{"app": "nginx"}}}, true},
		{"a name label that disagrees is the namespace's name", Peer{Pod: &Pod{Namespace: "shop",
			NamespaceLabels: map[string]string{corev1.LabelMetadataName: "ingress"}, Labels: map[string]string{"app": "nginx"}}}, false},
		{"a pod with no labels in any namespace", Peer{Pod: &Pod{Namespace: "elsewhere"}}, true},
		{"a pod with labels", Peer{Pod: &Pod{Namespace: "elsewhere", Labels: map[string]string{"app": "x"}}}, false},
		{"a pod in a range is no address", Peer{IP: netip.MustParseAddr("192.0.2.1"), Pod: &Pod{Namespace: "x", Labels: map[string]string{"app": "x"}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := set.Admits(web, tc.from)
			checkVerdict(t, v)
			if v.Allowed != tc.want {
				t.Errorf("%v, want allowed %v", v, tc.want)
			}
		})
	}
}

// TestPorts checks a target's port against policy ports: protocols
// defaulted on both sides, names only where the pod declares them.
func TestPorts(t *testing.T) {
	ps := policiesOf(t, `
- metadata: {namespace: shop, name: p}
  spec:
    podSelector: {}
    ingress:
    - ports:
      - port: http
      - {protocol: SCTP}
      - {protocol: UDP, port: 53, endPort: 54}
      - {port: 65535}`)
	for _, tc := range []struct {
		port Port
		want bool
	}{
		{Port{Number: 8080, Name: "http"}, true},
		{Port{Number: 8080, Name: "http", Protocol: corev1.ProtocolTCP}, true},
		{Port{Number: 8080, Name: "http", Protocol: corev1.ProtocolUDP}, false},
		{Port{Number: 8080}, false},
		{Port{Number: 1, Protocol: corev1.ProtocolSCTP}, true},
		{Port{Number: 54, Protocol: corev1.ProtocolUDP}, true},
		{Port{Number: 55, Protocol: corev1.ProtocolUDP}, false},
		{Port{Number: 54}, false},
		{Port{Number: 65535}, true},
		{Port{Number: 0}, false},
	} {
		to := web
		to.Port = tc.port
		if v := Admits(ps, to, outside); v.Allowed != tc.want {
			t.Errorf("%s: %v, want allowed %v", tc.port, v, tc.want)
		}
	}
}

// TestOrder checks that verdicts do not depend on the order policies are
// listed in, and that nil policies and a nil Set hold nothing.
func TestOrder(t *testing.T) {
	ps := policiesOf(t, `
- metadata: {namespace: shop, name: c}
  spec: {podSelector: {}, ingress: [{from: [{namespaceSelector: {}}]}]}
- metadata: {namespace: shop, name: a}
  spec: {podSelector: {}, ingress: [{ports: [{port: 8080}]}]}
- metadata: {namespace: shop, name: b}
  spec: {podSelector: {}}`)
	want := Admits(ps, web, shopPod)
	if want.By.Policy != "shop/a" {
		t.Fatalf("%v, want admitted by shop/a", want)
	}
	slices.Reverse(ps)
	ps = append(ps, nil)
	if got := Admits(ps, web, shopPod); got.By != want.By {
		t.Errorf("reversed: %v, want %v", got, want)
	}
	var empty *Set
	if v := empty.Admits(web, shopPod); !v.Allowed || v.Isolated || empty.Problems() != nil {
		t.Errorf("nil Set: %v", v)
	}
}

func TestPortString(t *testing.T) {
	for p, want := range map[Port]string{
		{Number: 8080, Name: "http"}:                          "8080/TCP (http)",
		{Number: 53, Protocol: corev1.ProtocolUDP}:            "53/UDP",
		{Number: 9, Name: "x", Protocol: corev1.ProtocolSCTP}: "9/SCTP (x)",
	} {
		if got := p.String(); got != want {
			t.Errorf("%#v: %q, want %q", p, got, want)
		}
	}
}
