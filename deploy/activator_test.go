package deploy

import (
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	networkingv1 "k8s.io/api/networking/v1"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/swell-run/swell/pkg/network"
)

// decodeFile decodes the objects of one manifest file.
func decodeFile(t *testing.T, file string) []any {
	t.Helper()
	strict := kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
		kjson.SerializerOptions{Yaml: true, Strict: true})
	var objs []any
	for _, doc := range manifests(t, ".")[file] {
		obj, _, err := strict.Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		objs = append(objs, obj)
	}
	return objs
}

// admits returns the rules of p that admit port, and whether one of them
// admits it from anywhere (no from).
func admits(p *networkingv1.NetworkPolicy, port int) (rules []networkingv1.NetworkPolicyIngressRule, fromAnywhere bool) {
	for _, r := range p.Spec.Ingress {
		open := len(r.Ports) == 0
		for _, pp := range r.Ports {
			if pp.Port == nil || pp.Port.IntValue() == port || (pp.EndPort != nil && int(*pp.EndPort) >= port && pp.Port.IntValue() <= port) {
				open = true
			}
		}
		if open {
			rules = append(rules, r)
			fromAnywhere = fromAnywhere || len(r.From) == 0
		}
	}
	return rules, fromAnywhere
}

// TestNetworkPoliciesCloseAdminPorts: no pod may reach an admin port
// (8022) of Swell's own pods — the kubelet's probes come from the node,
// which NetworkPolicies do not filter — and the metrics ports (9090) admit
// only the pods a rule names, not any. The activator's serving port admits
// anyone: it checks callers itself.
func TestNetworkPoliciesCloseAdminPorts(t *testing.T) {
	policies := map[string]*networkingv1.NetworkPolicy{}
	for _, o := range decodeFile(t, "network.yaml") {
		if p, ok := o.(*networkingv1.NetworkPolicy); ok {
			policies[p.Name] = p
		}
	}
	for _, name := range []string{"activator", "autoscaler"} {
		p := policies[name]
		if p == nil {
			t.Fatalf("network.yaml has no NetworkPolicy %s", name)
		}
		if !slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
			t.Errorf("%s: policy types %v, want Ingress", name, p.Spec.PolicyTypes)
		}
		if rules, _ := admits(p, 8022); len(rules) > 0 {
			t.Errorf("%s: the admin port 8022 is admitted by %+v; want no rule: only the kubelet needs it", name, rules)
		}
		if rules, any := admits(p, 9090); len(rules) == 0 || any {
			t.Errorf("%s: the metrics port 9090 is admitted by %+v; want a rule naming Prometheus, and no rule from anywhere", name, rules)
		}
	}
	if _, any := admits(policies["activator"], 8012); !any {
		t.Error("activator: the serving port 8012 is not open to every caller; the activator stands in for every service's pods")
	}
}

// TestActivatorDrainsOnSIGTERM: the activator's pod starts its drain on
// SIGTERM, not with an HTTP hook (the kubelet's call, from the node, may
// not start one), and its grace period outlasts the drain.
func TestActivatorDrainsOnSIGTERM(t *testing.T) {
	var d *appsv1.Deployment
	for _, o := range decodeFile(t, "activator.yaml") {
		if dep, ok := o.(*appsv1.Deployment); ok && dep.Name == "activator" {
			d = dep
		}
	}
	if d == nil {
		t.Fatal("activator.yaml has no Deployment activator")
	}
	spec := d.Spec.Template.Spec
	for _, c := range spec.Containers {
		if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.HTTPGet != nil && c.Lifecycle.PreStop.HTTPGet.Path == network.DrainPath {
			t.Errorf("container %s: a preStop httpGet %s, which the activator refuses to start a drain from (not loopback)", c.Name, network.DrainPath)
		}
		for _, e := range c.Env {
			if e.Name != "DRAIN_TIMEOUT" {
				continue
			}
			drain, err := time.ParseDuration(e.Value)
			if err != nil {
				t.Fatalf("DRAIN_TIMEOUT %q: %v", e.Value, err)
			}
			if grace := spec.TerminationGracePeriodSeconds; grace == nil || time.Duration(*grace)*time.Second <= drain {
				t.Errorf("terminationGracePeriodSeconds %v, want more than DRAIN_TIMEOUT %s", grace, drain)
			}
		}
	}
}
