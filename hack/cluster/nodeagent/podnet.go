package nodeagent

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// podNet creates and removes pods' network namespaces with iproute2. Host
// ends of the veth pairs live in the cluster's namespace, addressed by name
// (ip -n), so the agent may run inside it or, in tests, beside it.
type podNet struct {
	ip           string // the ip binary
	clusterNetns string
	bridge       string
	gateway      string
	prefixBits   int
}

// netnsName is the name of the pod's network namespace.
func (n *podNet) netnsName(uid string) string { return n.clusterNetns + "-" + uidPrefix(uid) }

// hostLink is the name of the host end of the pod's veth pair (at most 15
// bytes, as the kernel requires).
func hostLink(uid string) string { return "sw" + uidPrefix(uid) }

func uidPrefix(uid string) string {
	u := strings.ReplaceAll(uid, "-", "")
	if len(u) > 8 {
		u = u[:8]
	}
	return u
}

// podMAC is the MAC address of the eth0 holding ip: 0a:58 (locally
// administered, unicast) and the address's four bytes, as CNI's bridge
// plugin does. An IP handed to a new pod so keeps its MAC, and the neighbour
// caches of the node and of other pods, which still hold the old pod's
// entry, stay right; with a random MAC they would send the new pod's frames
// to a link that no longer exists until the entry expired.
func podMAC(ip netip.Addr) string {
	b := ip.As4()
	return fmt.Sprintf("0a:58:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3])
}

// setUp creates the pod's namespace with lo up and eth0 holding ip, its
// veth peer on the bridge, and a default route via the gateway. A namespace
// left from before is replaced.
func (n *podNet) setUp(ctx context.Context, uid string, ip netip.Addr) error {
	ns, host := n.netnsName(uid), hostLink(uid)
	n.tearDown(ctx, uid)
	steps := [][]string{
		{"netns", "add", ns},
		{"-n", n.clusterNetns, "link", "add", host, "type", "veth", "peer", "name", "eth0", "address", podMAC(ip), "netns", ns},
		{"-n", n.clusterNetns, "link", "set", host, "master", n.bridge, "up"},
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "addr", "add", ip.String() + "/" + strconv.Itoa(n.prefixBits), "dev", "eth0"},
		{"-n", ns, "link", "set", "eth0", "up"},
		{"-n", ns, "route", "add", "default", "via", n.gateway},
	}
	for _, args := range steps {
		if err := n.run(ctx, args...); err != nil {
			n.tearDown(ctx, uid)
			return fmt.Errorf("pod network for %s: %w", uid, err)
		}
	}
	return nil
}

// tearDown kills whatever still runs in the pod's namespace and removes the
// namespace and the host end of its veth pair. It is idempotent.
func (n *podNet) tearDown(ctx context.Context, uid string) {
	n.removeNetns(ctx, n.netnsName(uid))
	_ = n.run(ctx, "-n", n.clusterNetns, "link", "del", hostLink(uid))
}

func (n *podNet) removeNetns(ctx context.Context, ns string) {
	if _, err := os.Stat("/run/netns/" + ns); err != nil {
		return
	}
	killNetnsProcesses(ctx, n.ip, ns)
	_ = n.run(ctx, "netns", "del", ns)
}

var podNetnsSuffix = regexp.MustCompile(`^[0-9a-f]{8}$`)

// leftovers lists pod namespaces of this cluster namespace that exist now.
func (n *podNet) leftovers() []string {
	entries, _ := os.ReadDir("/run/netns")
	var out []string
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), n.clusterNetns+"-")
		if ok && podNetnsSuffix.MatchString(rest) {
			out = append(out, e.Name())
		}
	}
	return out
}

// killNetnsProcesses SIGKILLs every process inside the namespace and waits
// briefly for them to go.
func killNetnsProcesses(ctx context.Context, ip, ns string) {
	for range 50 {
		out, err := exec.CommandContext(ctx, ip, "netns", "pids", ns).Output()
		if err != nil || len(bytes.TrimSpace(out)) == 0 {
			return
		}
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(20 * time.Millisecond) // waiting for the kernel to reap external processes
	}
}

func (n *podNet) run(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, n.ip, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}
