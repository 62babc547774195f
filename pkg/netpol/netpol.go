// Package netpol judges a caller as the cluster's NetworkPolicies would
// judge its packets reaching a pod directly, so that a proxy standing in
// for the pod (the activator, while a service is at zero) refuses what the
// network would have refused.
//
// It reads Kubernetes NetworkPolicy ingress as the API defines it: the
// policies of the pod's namespace whose podSelector matches the pod and
// whose policyTypes include Ingress (an empty policyTypes always does)
// isolate it; a pod no such policy selects admits every caller; an
// isolated pod admits a caller when at least one ingress rule of at least
// one of those policies matches both the caller and the port. Egress is
// not judged.
//
// Where the API leaves the outcome to the network plugin, or a policy is
// malformed, the package takes the reading that admits less, because a
// wrong refusal is a visible 403 that a policy's owner can fix, while a
// wrong admission is a silent way around their policy:
//
//   - An ipBlock matches only callers that are no pod: a node, a
//     hostNetwork pod, an address outside the cluster. The API meant
//     ipBlock for cluster-external addresses, and plugins differ on pod
//     addresses: some match a pod's traffic against ipBlock, others judge
//     a pod only by its labels. A pod is judged here only by the pod and
//     namespace selectors, so an ipBlock wide enough to cover the pod
//     network does not admit every pod through the proxy. When a refusal
//     might surprise (an ipBlock of a selecting policy holds the pod
//     caller's address) the verdict says so.
//   - Pod and namespace selectors match only callers that are pods. A
//     hostNetwork pod shares its node's address and plugins differ on
//     whether selectors reach it, so it should be given as a Peer without
//     a Pod.
//   - The API always admits traffic from the pod's own node. A proxy
//     cannot tell which node a pod at zero will run on, so no caller is
//     admitted for being a node.
//   - A part of a policy the API server would have refused admits
//     nothing, and never widens what the rest admits: an invalid selector
//     or ipBlock makes its peer match no caller, an invalid port entry
//     matches no port (a rule whose every entry is invalid admits
//     nothing, rather than every port), an invalid podSelector or an
//     unknown policy type makes the policy isolate the pods it might
//     select while admitting no one. Each such part is reported, by
//     Set.Problems and in the verdicts it affects.
//
// The label kubernetes.io/metadata.name, which the API server sets on every
// namespace to its name, is taken as set even when a Pod's NamespaceLabels
// lack it.
//
// Compile a cluster's policies once into a Set, which is immutable and
// safe for concurrent use, and ask it about each caller.
package netpol

import (
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// Target is the pod a caller wants to reach, and the port it reaches.
type Target struct {
	// Namespace is the pod's namespace: only the policies of this
	// namespace apply to it.
	Namespace string
	// Labels are the pod's labels, which the policies' podSelectors match.
	Labels map[string]string
	// Port is the port of the pod the caller reaches.
	Port Port
}

// Port is a port of a pod as a container declares it.
type Port struct {
	// Number is the container port, 1-65535.
	Number int32
	// Name is the name the container gives the port, "" when it gives
	// none: a policy's named port matches the pod's port of that name.
	Name string
	// Protocol is TCP, UDP or SCTP; "" means TCP.
	Protocol corev1.Protocol
}

// String reads like "8080/TCP (http)".
func (p Port) String() string {
	s := fmt.Sprintf("%d/%s", p.Number, protocolOf(p.Protocol))
	if p.Name != "" {
		s += " (" + p.Name + ")"
	}
	return s
}

// Peer is the caller.
type Peer struct {
	// IP is the address the caller's connection comes from. IPv4 addresses
	// written in IPv6 form (::ffff:a.b.c.d) are taken as IPv4.
	IP netip.Addr
	// Pod is the caller's pod, nil for a caller that is no pod: a node, a
	// hostNetwork pod, an address outside the cluster. Only a Pod is
	// matched by pod and namespace selectors; only a caller without one is
	// matched by ipBlocks.
	Pod *Pod
}

// Pod is a calling pod, as the selectors of a policy see it.
type Pod struct {
	// Namespace is the pod's namespace.
	Namespace string
	// NamespaceLabels are the labels of the pod's namespace.
	NamespaceLabels map[string]string
	// Labels are the pod's labels.
	Labels map[string]string
}

// Verdict is whether the policies admit a caller, and why.
type Verdict struct {
	// Allowed reports whether the caller is admitted.
	Allowed bool
	// Isolated reports whether any policy selects the pod for ingress.
	// When it is false, Allowed is true.
	Isolated bool
	// By is the rule that admitted the caller to an isolated pod: the
	// first that does, in the order of the policies' names.
	By Rule
	// Selecting names the policies that select the pod for ingress, as
	// namespace/name, when they refuse the caller.
	Selecting []string
	// Notes are, when the caller is refused, the parts of the selecting
	// policies that admitted nothing where their author may have expected
	// otherwise: invalid selectors, CIDRs or ports, ipBlocks that hold a
	// pod caller's address.
	Notes []Note
}

// Rule names an ingress rule of a policy, and the parts of it that
// matched.
type Rule struct {
	// Policy is the policy, as namespace/name.
	Policy string
	// Ingress is the rule's index in spec.ingress.
	Ingress int
	// From is the index in the rule's from of the peer that matched the
	// caller, -1 when the rule has no from and admits every source.
	From int
	// Port is the index in the rule's ports of the entry that matched the
	// port, -1 when the rule has no ports and admits every port.
	Port int
}

// String reads like "NetworkPolicy shop/web spec.ingress[1]: from[0], ports[2]".
func (r Rule) String() string {
	from, port := "any source", "any port"
	if r.From >= 0 {
		from = fmt.Sprintf("from[%d]", r.From)
	}
	if r.Port >= 0 {
		port = fmt.Sprintf("ports[%d]", r.Port)
	}
	return fmt.Sprintf("NetworkPolicy %s spec.ingress[%d]: %s, %s", r.Policy, r.Ingress, from, port)
}

// Note is a part of a policy that admits nothing, and why.
type Note struct {
	// Policy is the policy, as namespace/name.
	Policy string
	// Field is the part, as a path in the policy such as
	// spec.ingress[0].from[1].namespaceSelector.
	Field string
	// Text says what is wrong with it and what it does instead.
	Text string
}

// String reads like "shop/web spec.ingress[0].ports[0].port: 0 is not a
// port number (1-65535); matches no port".
func (n Note) String() string {
	return n.Policy + " " + n.Field + ": " + n.Text
}

// String says the verdict in one line, for a refusal's body and a log. It
// names neither the caller nor the port, which the one asking knows.
func (v Verdict) String() string {
	switch {
	case !v.Isolated:
		return "allowed: no NetworkPolicy selects the pod for ingress"
	case v.Allowed:
		return "allowed by " + v.By.String()
	}
	var b strings.Builder
	b.WriteString("refused: ")
	if len(v.Selecting) == 1 {
		fmt.Fprintf(&b, "NetworkPolicy %s selects the pod for ingress and does not admit this caller on this port", v.Selecting[0])
	} else {
		fmt.Fprintf(&b, "NetworkPolicies %s select the pod for ingress and none admits this caller on this port", strings.Join(v.Selecting, ", "))
	}
	for _, n := range v.Notes {
		b.WriteString("; ")
		b.WriteString(n.String())
	}
	return b.String()
}

// Admits judges one caller against policies; see Set.Admits. To judge
// many callers, Compile the policies once.
func Admits(policies []*networkingv1.NetworkPolicy, to Target, from Peer) Verdict {
	return Compile(policies).Admits(to, from)
}

// protocolOf is p, with "" read as TCP as the API defaults it.
func protocolOf(p corev1.Protocol) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return p
}
