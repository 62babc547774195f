package deploy

import (
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/swell-run/swell/kube/ports"
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
	for _, port := range []int{8012, ports.DefaultRange.First, ports.DefaultRange.Last} {
		if _, any := admits(policies["activator"], port); !any {
			t.Errorf("activator: port %d is not open to every caller; the activator stands in for every service's pods on it", port)
		}
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

// deployment returns the Deployment name of file.
func deployment(t *testing.T, file, name string) *appsv1.Deployment {
	t.Helper()
	for _, o := range decodeFile(t, file) {
		if d, ok := o.(*appsv1.Deployment); ok && d.Name == name {
			return d
		}
	}
	t.Fatalf("%s has no Deployment %s", file, name)
	return nil
}

// env returns the value of the variable name of d's container.
func env(d *appsv1.Deployment, container, name string) (string, bool) {
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name != container {
			continue
		}
		for _, e := range c.Env {
			if e.Name == name {
				return e.Value, true
			}
		}
	}
	return "", false
}

// The activators present to the autoscaler a token bound to their pod and
// meant for the autoscaler alone, which the autoscaler asks the API
// server about for that audience: a token the API server would take is
// never sent, and one meant for the API server is refused.
func TestActivatorTokenIsMeantForTheAutoscaler(t *testing.T) {
	act, as := deployment(t, "activator.yaml", "activator"), deployment(t, "autoscaler.yaml", "autoscaler")
	audience, ok := env(as, "autoscaler", "ACTIVATOR_TOKEN_AUDIENCES")
	if !ok || audience == "" || strings.Contains(audience, ",") {
		t.Fatalf("the autoscaler's ACTIVATOR_TOKEN_AUDIENCES %q, want one audience", audience)
	}
	file, ok := env(act, "activator", "AUTOSCALER_TOKEN_FILE")
	if !ok {
		t.Fatal("the activator has no AUTOSCALER_TOKEN_FILE: it would present the API server's token")
	}
	spec := act.Spec.Template.Spec
	var mount *corev1.VolumeMount
	for _, c := range spec.Containers {
		for i, m := range c.VolumeMounts {
			if c.Name == "activator" && strings.HasPrefix(file, m.MountPath+"/") {
				mount = &c.VolumeMounts[i]
			}
		}
	}
	if mount == nil {
		t.Fatalf("AUTOSCALER_TOKEN_FILE %s is on no volume of the activator", file)
	}
	for _, v := range spec.Volumes {
		if v.Name != mount.Name || v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			if tok := src.ServiceAccountToken; tok != nil && mount.MountPath+"/"+tok.Path == file {
				if tok.Audience != audience {
					t.Errorf("the activator's token is for audience %q, the autoscaler asks for %q", tok.Audience, audience)
				}
				if tok.ExpirationSeconds == nil || *tok.ExpirationSeconds > 3600 {
					t.Errorf("the activator's token lives %v s, want at most an hour", tok.ExpirationSeconds)
				}
				return
			}
		}
	}
	t.Errorf("AUTOSCALER_TOKEN_FILE %s is no projected service-account token", file)
}
