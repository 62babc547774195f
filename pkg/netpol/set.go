package netpol

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Set is a cluster's NetworkPolicies, compiled: selectors parsed, CIDRs and
// ports read, once. It is immutable and safe for concurrent use; a nil Set
// holds no policy.
type Set struct {
	// byNamespace holds each namespace's policies, sorted by name, so that
	// verdicts do not depend on the order policies were listed in.
	byNamespace map[string][]*policy
	problems    []Note
}

// Compile reads policies into a Set. It never fails: every part of a policy
// the API server would have refused is compiled to admit nothing (the
// package comment says how) and reported by Problems. Nil policies are
// skipped.
func Compile(policies []*networkingv1.NetworkPolicy) *Set {
	s := &Set{byNamespace: map[string][]*policy{}}
	for _, np := range policies {
		if np == nil {
			continue
		}
		p := compilePolicy(np)
		s.byNamespace[p.namespace] = append(s.byNamespace[p.namespace], p)
		s.problems = append(s.problems, p.notes...)
	}
	for _, ps := range s.byNamespace {
		slices.SortStableFunc(ps, func(a, b *policy) int { return cmp.Compare(a.name, b.name) })
	}
	slices.SortStableFunc(s.problems, func(a, b Note) int { return cmp.Compare(a.Policy, b.Policy) })
	return s
}

// Problems lists the parts of the policies that the API server would have
// refused, each compiled to admit nothing, by policy name.
func (s *Set) Problems() []Note {
	if s == nil {
		return nil
	}
	return slices.Clone(s.problems)
}

// Admits judges whether the policies admit from reaching to: allowed when
// no policy of to's namespace selects the pod for ingress, else allowed
// exactly when an ingress rule of a selecting policy matches both the
// caller and the port.
func (s *Set) Admits(to Target, from Peer) Verdict {
	var ps []*policy
	if s != nil {
		ps = s.byNamespace[to.Namespace]
	}
	c := newCaller(from)
	port := Port{Number: to.Port.Number, Name: to.Port.Name, Protocol: protocolOf(to.Port.Protocol)}
	pod := labels.Set(to.Labels)
	isolated := false
	for _, p := range ps {
		if !p.selects(pod) {
			continue
		}
		isolated = true
		for i := range p.rules {
			if f, n, ok := p.rules[i].admits(&c, port, p.namespace); ok {
				return Verdict{Allowed: true, Isolated: true, By: Rule{Policy: p.name, Ingress: i, From: f, Port: n}}
			}
		}
	}
	if !isolated {
		return Verdict{Allowed: true}
	}
	v := Verdict{Isolated: true}
	for _, p := range ps {
		if !p.selects(pod) {
			continue
		}
		v.Selecting = append(v.Selecting, p.name)
		v.Notes = append(v.Notes, p.notes...)
		v.Notes = p.appendPodInBlock(v.Notes, &c)
	}
	return v
}

// caller is a Peer as the rules look at it.
type caller struct {
	pod       *Pod
	ip        netip.Addr
	labels    labels.Set
	nsLabels  labels.Labels
	namespace string
}

func newCaller(from Peer) caller {
	c := caller{pod: from.Pod, ip: from.IP.Unmap()}
	if from.Pod == nil {
		return c
	}
	c.namespace = from.Pod.Namespace
	c.labels = labels.Set(from.Pod.Labels)
	c.nsLabels = labels.Set(from.Pod.NamespaceLabels)
	if name, ok := from.Pod.NamespaceLabels[corev1.LabelMetadataName]; c.namespace != "" && (!ok || name != c.namespace) {
		c.nsLabels = namespaceLabels{name: c.namespace, set: from.Pod.NamespaceLabels}
	}
	return c
}

// namespaceLabels are a namespace's labels with kubernetes.io/metadata.name
// set to its name, as the API server keeps it.
type namespaceLabels struct {
	name string
	set  labels.Set
}

func (l namespaceLabels) Has(key string) bool {
	_, ok := l.Lookup(key)
	return ok
}

func (l namespaceLabels) Get(key string) string {
	v, _ := l.Lookup(key)
	return v
}

func (l namespaceLabels) Lookup(key string) (string, bool) {
	if key == corev1.LabelMetadataName {
		return l.name, true
	}
	return l.set.Lookup(key)
}

// policy is one compiled NetworkPolicy.
type policy struct {
	name, namespace string
	// ingress reports whether the policy isolates the pods it selects
	// for ingress.
	ingress bool
	// pods selects the pods the policy applies to; nil when the selector
	// is invalid, and then the policy is taken to select every pod.
	pods  labels.Selector
	rules []rule
	notes []Note
}

// selects reports whether p isolates a pod with these labels for ingress.
func (p *policy) selects(pod labels.Set) bool {
	return p.ingress && (p.pods == nil || p.pods.Matches(pod))
}

// appendPodInBlock notes each ipBlock of p that holds a pod caller's
// address, which it does not admit.
func (p *policy) appendPodInBlock(notes []Note, c *caller) []Note {
	if c.pod == nil || !c.ip.IsValid() {
		return notes
	}
	for i, r := range p.rules {
		for j, pe := range r.from {
			if pe.kind == peerBlock && pe.holds(c.ip) {
				notes = append(notes, Note{Policy: p.name, Field: "spec." + index("ingress", i) + "." + index("from", j) + ".ipBlock",
					Text: "holds the caller's address, but an ipBlock admits only callers that are no pod; a pod is admitted by podSelector and namespaceSelector"})
			}
		}
	}
	return notes
}

// rule is one compiled ingress rule.
type rule struct {
	// anyFrom and anyPort are set when the rule lists no peers or no
	// ports: then it admits every source or every port.
	anyFrom, anyPort bool
	from             []peer
	ports            []port
}

// admits reports whether r admits c on to, with the indexes of the peer
// and of the port entry that matched (-1 for a list the rule leaves out).
func (r *rule) admits(c *caller, to Port, namespace string) (from, entry int, ok bool) {
	from, entry = -1, -1
	if !r.anyPort {
		for i := range r.ports {
			if r.ports[i].matches(to) {
				entry = i
				break
			}
		}
		if entry < 0 {
			return 0, 0, false
		}
	}
	if !r.anyFrom {
		for i := range r.from {
			if r.from[i].matches(c, namespace) {
				from = i
				break
			}
		}
		if from < 0 {
			return 0, 0, false
		}
	}
	return from, entry, true
}

type peerKind uint8

const (
	// peerNone matches no caller: the peer is invalid.
	peerNone peerKind = iota
	// peerPods matches pods by pod and namespace selectors.
	peerPods
	// peerBlock matches callers that are no pod by address.
	peerBlock
)

// peer is one compiled entry of a rule's from.
type peer struct {
	kind peerKind
	// pods selects pods; nil selects every pod.
	pods labels.Selector
	// namespaces selects namespaces; nil selects the policy's own.
	namespaces labels.Selector
	cidr       netip.Prefix
	except     []netip.Prefix
}

func (p *peer) matches(c *caller, namespace string) bool {
	switch p.kind {
	case peerNone:
		return false
	case peerBlock:
		return c.pod == nil && p.holds(c.ip)
	}
	if c.pod == nil {
		return false
	}
	if p.namespaces == nil {
		if c.namespace != namespace {
			return false
		}
	} else if !p.namespaces.Matches(c.nsLabels) {
		return false
	}
	return p.pods == nil || p.pods.Matches(c.labels)
}

// holds reports whether an ipBlock's range, less its exceptions, holds ip.
func (p *peer) holds(ip netip.Addr) bool {
	if !p.cidr.Contains(ip) {
		return false
	}
	for _, e := range p.except {
		if e.Contains(ip) {
			return false
		}
	}
	return true
}

type portKind uint8

const (
	// portNone matches no port: the entry is invalid.
	portNone portKind = iota
	// portAll matches every port of the protocol.
	portAll
	// portRange matches the numbers first to last.
	portRange
	// portNamed matches the pod's port of that name.
	portNamed
)

// port is one compiled entry of a rule's ports.
type port struct {
	kind        portKind
	protocol    corev1.Protocol
	first, last int32
	name        string
}

func (p *port) matches(to Port) bool {
	if p.protocol != to.Protocol {
		return false
	}
	switch p.kind {
	case portNone:
		return false
	case portAll:
		return true
	case portRange:
		return p.first <= to.Number && to.Number <= p.last
	}
	return to.Name != "" && p.name == to.Name
}

// compiler reads one policy and gathers its problems.
type compiler struct {
	policy *policy
	// inRule, inFrom and inPort locate the part being read: its indexes in
	// spec.ingress and in that rule's from and ports, -1 outside them.
	inRule, inFrom, inPort int
}

// problem notes the part being read, or the field suffix of it, as
// admitting nothing. Field paths are made only here, so that reading a
// valid policy formats none.
func (c *compiler) problem(suffix, format string, args ...any) {
	field := "spec"
	if c.inRule >= 0 {
		field += "." + index("ingress", c.inRule)
	}
	if c.inFrom >= 0 {
		field += "." + index("from", c.inFrom)
	}
	if c.inPort >= 0 {
		field += "." + index("ports", c.inPort)
	}
	c.policy.notes = append(c.policy.notes, Note{Policy: c.policy.name, Field: field + suffix, Text: fmt.Sprintf(format, args...)})
}

func index(list string, i int) string { return list + "[" + strconv.Itoa(i) + "]" }

func compilePolicy(np *networkingv1.NetworkPolicy) *policy {
	p := &policy{name: np.Namespace + "/" + np.Name, namespace: np.Namespace}
	c := compiler{policy: p, inRule: -1, inFrom: -1, inPort: -1}
	spec := &np.Spec
	valid := true
	p.ingress = len(spec.PolicyTypes) == 0
	for i, t := range spec.PolicyTypes {
		switch t {
		case networkingv1.PolicyTypeIngress:
			p.ingress = true
		case networkingv1.PolicyTypeEgress:
		default:
			c.problem("."+index("policyTypes", i), "%q is neither Ingress nor Egress; the policy is taken to isolate the pods it selects and to admit nothing", t)
			p.ingress = true
			valid = false
		}
	}
	if !p.ingress {
		// Egress is not judged: nothing else of the policy matters.
		return p
	}
	sel, err := metav1.LabelSelectorAsSelector(&spec.PodSelector)
	if err != nil {
		c.problem(".podSelector", "%v; the policy is taken to select every pod of its namespace and to admit nothing", err)
		valid = false
	} else {
		p.pods = sel
	}
	if !valid {
		return p
	}
	p.rules = make([]rule, len(spec.Ingress))
	for i := range spec.Ingress {
		c.inRule = i
		p.rules[i] = c.rule(&spec.Ingress[i])
	}
	return p
}

func (c *compiler) rule(r *networkingv1.NetworkPolicyIngressRule) rule {
	out := rule{anyFrom: len(r.From) == 0, anyPort: len(r.Ports) == 0}
	if !out.anyFrom {
		out.from = make([]peer, len(r.From))
		for i := range r.From {
			c.inFrom = i
			out.from[i] = c.peer(&r.From[i])
		}
		c.inFrom = -1
	}
	if !out.anyPort {
		out.ports = make([]port, len(r.Ports))
		for i := range r.Ports {
			c.inPort = i
			out.ports[i] = c.port(&r.Ports[i])
		}
		c.inPort = -1
	}
	return out
}

func (c *compiler) peer(pe *networkingv1.NetworkPolicyPeer) peer {
	selectors := pe.PodSelector != nil || pe.NamespaceSelector != nil
	switch {
	case pe.IPBlock != nil && selectors:
		c.problem("", "sets ipBlock together with a selector, which the API refuses; admits nothing")
		return peer{}
	case pe.IPBlock != nil:
		return c.block(pe.IPBlock)
	case !selectors:
		c.problem("", "sets none of podSelector, namespaceSelector and ipBlock, which the API refuses; admits nothing")
		return peer{}
	}
	out := peer{kind: peerPods}
	ok := true
	if pe.PodSelector != nil {
		out.pods, ok = c.selector(".podSelector", pe.PodSelector)
	}
	if pe.NamespaceSelector != nil {
		var nsOK bool
		out.namespaces, nsOK = c.selector(".namespaceSelector", pe.NamespaceSelector)
		ok = ok && nsOK
	}
	if !ok {
		return peer{}
	}
	return out
}

func (c *compiler) selector(suffix string, ls *metav1.LabelSelector) (labels.Selector, bool) {
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		c.problem(suffix, "%v; admits nothing", err)
		return nil, false
	}
	return sel, true
}

func (c *compiler) block(b *networkingv1.IPBlock) peer {
	cidr, err := parseCIDR(b.CIDR)
	if err != nil {
		c.problem(".ipBlock.cidr", "%q is not a CIDR such as 192.0.2.0/24 or 2001:db8::/64; admits nothing", b.CIDR)
		return peer{}
	}
	out := peer{kind: peerBlock, cidr: cidr}
	for i, s := range b.Except {
		e, err := parseCIDR(s)
		if err != nil {
			// Without this exception the block would admit what its
			// author excluded: it admits nothing instead.
			c.problem(".ipBlock."+index("except", i), "%q is not a CIDR such as 192.0.2.0/24 or 2001:db8::/64; the ipBlock admits nothing", s)
			return peer{}
		}
		out.except = append(out.except, e)
	}
	return out
}

// parseCIDR reads a CIDR as the API does, host bits allowed and ignored;
// an IPv4 range written in IPv6 form (::ffff:a.b.c.d/104) is read as the
// IPv4 range, since callers' addresses are.
func parseCIDR(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return p, err
	}
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}

func (c *compiler) port(np *networkingv1.NetworkPolicyPort) port {
	out := port{protocol: corev1.ProtocolTCP}
	if np.Protocol != nil {
		switch pr := *np.Protocol; pr {
		case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
			out.protocol = pr
		default:
			c.problem(".protocol", "%q is not TCP, UDP or SCTP; matches no port", pr)
			return port{}
		}
	}
	if np.Port == nil {
		if np.EndPort != nil {
			c.problem(".endPort", "is set without port, which the API refuses; matches no port")
			return port{}
		}
		out.kind = portAll
		return out
	}
	switch np.Port.Type {
	case intstr.Int:
		n := np.Port.IntVal
		if !validPort(n) {
			c.problem(".port", "%d is not a port number (1-65535); matches no port", n)
			return port{}
		}
		out.kind, out.first, out.last = portRange, n, n
		if np.EndPort != nil {
			end := *np.EndPort
			if !validPort(end) || end < n {
				c.problem(".endPort", "%d is not a port number from port (%d) to 65535; matches no port", end, n)
				return port{}
			}
			out.last = end
		}
		return out
	case intstr.String:
		name := np.Port.StrVal
		if errs := validation.IsValidPortName(name); len(errs) > 0 {
			c.problem(".port", "%s is not a port name: %s; matches no port", strconv.Quote(name), strings.Join(errs, "; "))
			return port{}
		}
		if np.EndPort != nil {
			c.problem(".endPort", "is set with a named port, which the API refuses; matches no port")
			return port{}
		}
		out.kind, out.name = portNamed, name
		return out
	}
	c.problem(".port", "is neither a number nor a name; matches no port")
	return port{}
}

func validPort(n int32) bool { return 1 <= n && n <= 65535 }
