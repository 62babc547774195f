package nodeagent

import (
	"fmt"
	"net/netip"
	"sync"
)

// ipam hands out pod IPs from the pod CIDR. The /24 holding the gateway is
// the node's own and never handed out, nor are the network and broadcast
// addresses of the CIDR. Addresses are keyed by pod UID so that a release
// after a restart of the same pod is harmless.
type ipam struct {
	prefix   netip.Prefix
	reserved netip.Prefix // the gateway's /24

	mu    sync.Mutex
	used  map[netip.Addr]string // address → pod UID
	byUID map[string]netip.Addr
}

func newIPAM(cidr, gateway string) (*ipam, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil || !p.Addr().Is4() {
		return nil, fmt.Errorf("pod CIDR %q: want an IPv4 prefix such as 198.18.0.0/16", cidr)
	}
	p = p.Masked()
	if p.Bits() > 23 {
		return nil, fmt.Errorf("pod CIDR %q: want a prefix of /23 or wider (the gateway's /24 is reserved)", cidr)
	}
	gw, err := netip.ParseAddr(gateway)
	if err != nil || !p.Contains(gw) {
		return nil, fmt.Errorf("gateway %q: want an IPv4 address inside the pod CIDR %s", gateway, p)
	}
	res, _ := gw.Prefix(24)
	return &ipam{prefix: p, reserved: res, used: map[netip.Addr]string{}, byUID: map[string]netip.Addr{}}, nil
}

// allocate returns the pod's address, preferring want (the address a pod
// already reports, so that its status never changes IP across agent restarts)
// when it is free and allocatable.
func (a *ipam) allocate(uid string, want netip.Addr) (netip.Addr, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if ip, ok := a.byUID[uid]; ok {
		return ip, nil
	}
	if want.IsValid() && a.allocatable(want) {
		if _, taken := a.used[want]; !taken {
			a.take(uid, want)
			return want, nil
		}
	}
	for ip := a.prefix.Addr(); a.prefix.Contains(ip); ip = ip.Next() {
		if !a.allocatable(ip) {
			continue
		}
		if _, taken := a.used[ip]; !taken {
			a.take(uid, ip)
			return ip, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("pod CIDR %s is exhausted (%d pods)", a.prefix, len(a.used))
}

func (a *ipam) take(uid string, ip netip.Addr) {
	a.used[ip] = uid
	a.byUID[uid] = ip
}

func (a *ipam) allocatable(ip netip.Addr) bool {
	if !a.prefix.Contains(ip) || a.reserved.Contains(ip) || ip == a.prefix.Addr() {
		return false
	}
	return ip.Next().IsValid() && a.prefix.Contains(ip.Next()) // not the broadcast address
}

// release frees the pod's address, if it holds one.
func (a *ipam) release(uid string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if ip, ok := a.byUID[uid]; ok {
		delete(a.byUID, uid)
		delete(a.used, ip)
	}
}
