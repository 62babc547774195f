package netpol

import (
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/yaml"
)

// The world of testdata/truth.yaml: pods x, y and z in each of the
// namespaces a, b and c, and three callers that are no pod. Each case
// lists policies and, for a port, the grid of who reaches whom: a row per
// caller, a column per target pod, "." where the caller is admitted and
// "X" where it is refused.
var (
	worldNamespaces = []struct {
		name   string
		labels map[string]string
	}{
		{"a", map[string]string{"ns": "a", "env": "dev"}},
		{"b", map[string]string{"ns": "b", "env": "prod"}},
		{"c", map[string]string{"ns": "c"}},
	}
	worldPods = []struct {
		name   string
		labels map[string]string
	}{
		{"x", map[string]string{"pod": "x", "app": "web"}},
		{"y", map[string]string{"pod": "y", "app": "web"}},
		{"z", map[string]string{"pod": "z"}},
	}
	// worldOutside are callers that are no pod: two addresses outside the
	// cluster and a node's.
	worldOutside = []string{"192.0.2.10", "192.0.2.200", "10.0.0.5"}
)

// worldPortName is the name pod declares for a port: serve-<number>-<tcp|udp>,
// except z, which calls its 81/TCP metrics.
func worldPortName(pod string, number int32, protocol corev1.Protocol) string {
	if pod == "z" && number == 81 && protocol == corev1.ProtocolTCP {
		return "metrics"
	}
	return fmt.Sprintf("serve-%d-%s", number, strings.ToLower(string(protocol)))
}

type worldPod struct {
	id   string // namespace/pod
	name string
	pod  Pod
	ip   netip.Addr
}

func world() []worldPod {
	var out []worldPod
	for i, ns := range worldNamespaces {
		for j, p := range worldPods {
			out = append(out, worldPod{
				id:   ns.name + "/" + p.name,
				name: p.name,
				pod:  Pod{Namespace: ns.name, NamespaceLabels: ns.labels, Labels: p.labels},
				ip:   netip.AddrFrom4([4]byte{10, 0, byte(i + 1), byte(j + 1)}),
			})
		}
	}
	return out
}

// worldCallers are the grid's rows: every pod, then the callers that are no pod.
func worldCallers() (ids []string, peers []Peer) {
	for _, p := range world() {
		ids = append(ids, p.id)
		peers = append(peers, Peer{IP: p.ip, Pod: &p.pod})
	}
	for _, s := range worldOutside {
		ids = append(ids, s)
		peers = append(peers, Peer{IP: netip.MustParseAddr(s)})
	}
	return ids, peers
}

type truthCase struct {
	Name     string                        `json:"name"`
	Policies []*networkingv1.NetworkPolicy `json:"policies"`
	// Reach maps a port such as 80/TCP to its grid.
	Reach map[string]string `json:"reach"`
}

// TestTruthTable checks every case of testdata/truth.yaml, cell by cell.
// A failing case prints the grid it got, to compare with the one written.
func TestTruthTable(t *testing.T) {
	raw, err := os.ReadFile("testdata/truth.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cases []truthCase
	if err := yaml.UnmarshalStrict(raw, &cases); err != nil {
		t.Fatalf("testdata/truth.yaml: %v", err)
	}
	if len(cases) == 0 {
		t.Fatal("testdata/truth.yaml holds no case")
	}
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			if len(tc.Reach) == 0 {
				t.Fatal("the case has no grid")
			}
			set := Compile(tc.Policies)
			for _, key := range slices.Sorted(maps.Keys(tc.Reach)) {
				number, protocol := parseWorldPort(t, key)
				got := grid(t, set, tc.Policies, number, protocol)
				want := parseGrid(t, key, tc.Reach[key])
				if !slices.EqualFunc(got, want, slices.Equal[[]string]) {
					t.Errorf("port %s: got\n%s\nwant\n%s", key, formatGrid(got), formatGrid(want))
				}
			}
		})
	}
}

func parseWorldPort(t *testing.T, key string) (int32, corev1.Protocol) {
	t.Helper()
	num, proto, ok := strings.Cut(key, "/")
	n, err := strconv.ParseInt(num, 10, 32)
	if !ok || err != nil || (proto != "TCP" && proto != "UDP") {
		t.Fatalf("reach key %q: want a port such as 80/TCP or 81/UDP", key)
	}
	return int32(n), corev1.Protocol(proto)
}

// grid judges every caller against every pod of the world, "." for
// admitted and "X" for refused, a row per caller. It also checks each
// verdict against Admits and against itself.
func grid(t *testing.T, set *Set, policies []*networkingv1.NetworkPolicy, number int32, protocol corev1.Protocol) [][]string {
	_, peers := worldCallers()
	var rows [][]string
	for _, from := range peers {
		var row []string
		for _, to := range world() {
			target := Target{Namespace: to.pod.Namespace, Labels: to.pod.Labels,
				Port: Port{Number: number, Name: worldPortName(to.name, number, protocol), Protocol: protocol}}
			v := set.Admits(target, from)
			if again := Admits(policies, target, from); again.Allowed != v.Allowed {
				t.Fatalf("Admits and Set.Admits disagree: %v; %v", again, v)
			}
			checkVerdict(t, v)
			mark := "X"
			if v.Allowed {
				mark = "."
			}
			row = append(row, mark)
		}
		rows = append(rows, row)
	}
	return rows
}

// parseGrid reads a grid as written, checking its header and row labels
// against the world.
func parseGrid(t *testing.T, key, text string) [][]string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(text), "\n")
	var header []string
	for _, p := range world() {
		header = append(header, p.id)
	}
	if got := strings.Fields(lines[0]); len(got) == 0 || got[0] != "-" || !slices.Equal(got[1:], header) {
		t.Fatalf("port %s: header %v, want - and %v", key, got, header)
	}
	ids, _ := worldCallers()
	if len(lines)-1 != len(ids) {
		t.Fatalf("port %s: %d rows, want one for each of %v", key, len(lines)-1, ids)
	}
	var rows [][]string
	for i, line := range lines[1:] {
		f := strings.Fields(line)
		if len(f) != len(header)+1 || f[0] != ids[i] {
			t.Fatalf("port %s: row %q: want %s and %d marks", key, line, ids[i], len(header))
		}
		for _, m := range f[1:] {
			if m != "." && m != "X" {
				t.Fatalf("port %s: row %q: mark %q is neither . nor X", key, line, m)
			}
		}
		rows = append(rows, f[1:])
	}
	return rows
}

func formatGrid(rows [][]string) string {
	var b strings.Builder
	b.WriteString(fmt.Sprintf("%-12s", "-"))
	for _, p := range world() {
		b.WriteString(fmt.Sprintf(" %-3s", p.id))
	}
	ids, _ := worldCallers()
	for i, row := range rows {
		b.WriteString(fmt.Sprintf("\n%-12s", ids[i]))
		for _, m := range row {
			b.WriteString(fmt.Sprintf(" %-3s", m))
		}
	}
	return b.String()
}
