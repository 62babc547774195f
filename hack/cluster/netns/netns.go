// Package netns creates and removes the network namespaces a test cluster
// runs in, runs commands inside them, and dials into them from outside.
//
// A cluster's namespace holds lo (with the apiserver's advertise address),
// the pod network's bridge and the route to the Services' ClusterIPs, so
// nothing the cluster does can leave the machine. It is driven with
// iproute2 and util-linux's nsenter, which must be installed; creating
// namespaces needs root.
package netns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// The cluster network's fixed addresses (see the module's README). The
// cluster is dual-stack, IPv4 first: each family has its pod network, its
// gateway on Bridge and its service CIDR, and a Service that asks for no
// family gets an IPv4 ClusterIP only. The IPv6 ranges are unique local
// addresses (fd00::/8) that echo the IPv4 ones, so nothing can route them
// off the machine either.
const (
	// Bridge is the pod network's bridge inside the cluster's namespace.
	Bridge = "swbr0"
	// Gateway is the bridge's address, the pods' default route.
	Gateway = "198.18.0.1"
	// PodCIDR is the pod network, routed through Bridge.
	PodCIDR = "198.18.0.0/16"
	// GatewayV6 is the bridge's IPv6 address, the pods' IPv6 default
	// route.
	GatewayV6 = "fd00:198:18::1"
	// PodCIDRV6 is the pod network's IPv6 range, routed through Bridge.
	PodCIDRV6 = "fd00:198:18::/64"
	// AdvertiseAddress is on lo: the apiserver's --advertise-address,
	// which may not be loopback.
	AdvertiseAddress = "198.19.0.1"
	// ServiceCIDR holds the Services' ClusterIPs, which kube-proxy
	// translates. It is not loopback: a loopback ClusterIP would be each
	// pod's own. The namespace routes it to Bridge, so that a connection
	// to a ClusterIP has a route to take before kube-proxy's rules
	// rewrite its destination.
	ServiceCIDR = "10.96.0.0/16"
	// KubernetesServiceIP is the first address of ServiceCIDR, the
	// ClusterIP of the Service "kubernetes", where pods reach the
	// apiserver.
	KubernetesServiceIP = "10.96.0.1"
	// ServiceCIDRV6 holds the Services' IPv6 ClusterIPs, routed to Bridge
	// from GatewayV6 as ServiceCIDR is from Gateway: a /112, as many
	// addresses as ServiceCIDR.
	ServiceCIDRV6 = "fd00:10:96::/112"
)

// forwarding are the namespace's kernel settings, under /proc/sys, that
// make it the pods' router in both families: a connection kube-proxy
// translates to a pod is forwarded, not delivered. (The CNI bridge plugin
// turns them on too, but only once a pod of that family starts.)
var forwarding = []string{"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding"}

// IP is the iproute2 program; Nsenter is util-linux's.
var (
	IP      = "/usr/sbin/ip"
	Nsenter = "/usr/bin/nsenter"
)

func ip(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, IP, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// Create creates the network namespace name with lo up, AdvertiseAddress
// on lo, Bridge up with Gateway/16 and GatewayV6/64, ServiceCIDR routed
// to Bridge from Gateway and ServiceCIDRV6 from GatewayV6, and forwarding
// on in both families. It fails if the namespace exists: two clusters
// must never share one. On failure nothing is left behind.
func Create(ctx context.Context, name string) (err error) {
	if err := ip(ctx, "netns", "add", name); err != nil {
		return fmt.Errorf("create network namespace %s: %w", name, err)
	}
	defer func() {
		if err != nil {
			_ = Delete(context.WithoutCancel(ctx), name)
		}
	}()
	in := func(args ...string) error {
		return ip(ctx, append([]string{"-n", name}, args...)...)
	}
	steps := [][]string{
		{"link", "set", "lo", "up"},
		{"addr", "add", AdvertiseAddress + "/32", "dev", "lo"},
		{"link", "add", Bridge, "type", "bridge"},
		{"addr", "add", Gateway + "/16", "dev", Bridge},
		// No duplicate address detection: the address is usable at once,
		// not tentative for a second, and the kubelet checks that its
		// node IPs are there when it starts.
		{"addr", "add", GatewayV6 + "/64", "dev", Bridge, "nodad"},
		{"link", "set", Bridge, "up"},
		{"route", "add", ServiceCIDR, "dev", Bridge, "src", Gateway},
		{"route", "add", ServiceCIDRV6, "dev", Bridge, "src", GatewayV6},
	}
	for _, s := range steps {
		if err := in(s...); err != nil {
			return fmt.Errorf("set up network namespace %s: %w", name, err)
		}
	}
	var errs []error
	if err := runIn(Path(name), func() {
		// /proc/sys/net is the namespace of the thread that opens it.
		for _, key := range forwarding {
			errs = append(errs, os.WriteFile("/proc/sys/"+key, []byte("1"), 0))
		}
	}); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("set up network namespace %s: %w", name, err)
	}
	return nil
}

// Delete removes the network namespace name, and with it every link inside.
// A namespace that does not exist is not an error.
func Delete(ctx context.Context, name string) error {
	names, err := List(ctx)
	if err != nil {
		return err
	}
	for _, n := range names {
		if n == name {
			if err := ip(ctx, "netns", "delete", name); err != nil {
				return fmt.Errorf("delete network namespace %s: %w", name, err)
			}
			return nil
		}
	}
	return nil
}

// List returns the names of the named network namespaces.
func List(ctx context.Context) ([]string, error) {
	out, err := exec.CommandContext(ctx, IP, "netns", "list").Output()
	if err != nil {
		return nil, fmt.Errorf("list network namespaces: %w", err)
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		// Lines look like "name" or "name (id: 3)".
		if f := strings.Fields(line); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	return names, nil
}

// Exec returns a command that runs argv inside the network namespace name
// and nothing else of its own: unlike `ip netns exec`, which gives it a
// mount namespace of its own, it shares the host's mounts, so what the
// kubelet mounts for a pod (its volumes) is what containerd sees. nsenter
// execs argv in place, so the started process's PID is argv's own.
func Exec(name string, argv ...string) *exec.Cmd {
	return exec.Command(Nsenter, append([]string{"--net=" + Path(name), "--"}, argv...)...)
}

// Path is the file of the named network namespace name.
func Path(name string) string { return "/run/netns/" + name }
