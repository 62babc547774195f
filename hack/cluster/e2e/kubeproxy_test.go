package e2e

import (
	"os"
	"slices"
	"testing"
)

// TestParseKubeProxyRules reads the nat table as kube-proxy programmed it
// on the test cluster's node during a run of the suite
// (testdata/iptables-nat.txt, `iptables-save -t nat` in the cluster's
// namespace): Swell's activators' Service, with two ports; a service of
// Swell's routed to the three activators; one routed to its three pods;
// the webhook's; names
// that only begin like a Service's; and a Service with no rules.
func TestParseKubeProxyRules(t *testing.T) {
	rules, err := os.ReadFile("testdata/iptables-nat.txt")
	if err != nil {
		t.Fatal(err)
	}
	const ns = "e2e-swellshardedbuckets-fls66/"
	for _, tc := range []struct {
		service string
		want    []string
	}{
		{"swell-system/activator", []string{"198.18.1.0:8012", "198.18.1.0:9090", "198.18.1.1:8012", "198.18.1.1:9090", "198.18.1.4:8012", "198.18.1.4:9090"}},
		{ns + "shard-cold", []string{"198.18.1.0:8012", "198.18.1.1:8012", "198.18.1.4:8012"}},
		{"e2e-swellleaderfailover-q2j8j/steady", []string{"198.18.1.19:8012", "198.18.1.21:8012", "198.18.1.22:8012"}},
		{"swell-system/swell-webhook", []string{"198.18.1.17:8443", "198.18.1.23:8443"}},
		{ns + "shard-c", nil},
		{ns + "shard", nil},
		{"swell-system/activato", nil},
		{ns + "nowhere", nil},
	} {
		if got := parseKubeProxyRules(string(rules), tc.service); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.service, got, tc.want)
		}
	}
}

// TestParseKubeProxyRulesIPv6 reads ip6tables' nat table as kube-proxy
// programmed it on the dual-stack node (testdata/ip6tables-nat.txt,
// `ip6tables-save -t nat`): a Service of ipFamilyPolicy RequireDualStack
// with two pods, whose IPv6 destinations are bracketed; a single-stack
// IPv4 Service of the same pods, which has no IPv6 rules; and a name that
// only begins like the first.
func TestParseKubeProxyRulesIPv6(t *testing.T) {
	rules, err := os.ReadFile("testdata/ip6tables-nat.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		service string
		want    []string
	}{
		{"default/dual", []string{"[fd00:198:18::1:0]:8080", "[fd00:198:18::1:1]:8080"}},
		{"default/plain", nil},
		{"default/dua", nil},
		{"default/kubernetes", nil},
	} {
		if got := parseKubeProxyRules(string(rules), tc.service); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.service, got, tc.want)
		}
	}
}
