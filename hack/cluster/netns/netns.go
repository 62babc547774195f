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
	"fmt"
	"os/exec"
	"strings"
)

// The cluster network's fixed addresses (see the module's README).
const (
	// Bridge is the pod network's bridge inside the cluster's namespace.
	Bridge = "swbr0"
	// Gateway is the bridge's address, the pods' default route.
	Gateway = "198.18.0.1"
	// PodCIDR is the pod network, routed through Bridge.
	PodCIDR = "198.18.0.0/16"
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
)

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
// on lo, Bridge up with Gateway/16, and ServiceCIDR routed to Bridge from
// Gateway. It fails if the namespace exists:
// two clusters must never share one. On failure nothing is left behind.
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
		{"link", "set", Bridge, "up"},
		{"route", "add", ServiceCIDR, "dev", Bridge, "src", Gateway},
	}
	for _, s := range steps {
		if err := in(s...); err != nil {
			return fmt.Errorf("set up network namespace %s: %w", name, err)
		}
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
