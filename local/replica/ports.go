package replica

import (
	"fmt"
	"net"
	"strconv"
	"sync"
)

var (
	portsMu sync.Mutex
	// portsInUse holds the ports handed to live replicas of this process, so
	// two replicas never get the same one even before either has bound it.
	portsInUse = map[int]bool{}
)

// allocatePorts returns n different loopback ports that were free a moment
// ago and that no live replica holds; releasePorts gives them back.
func allocatePorts(n int) ([]int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	// The listeners stay open until all n ports are found, so the kernel
	// cannot hand the same port out twice in this loop.
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for len(ports) < n {
		if len(held) >= 100*n {
			return nil, fmt.Errorf("no free loopback port found in %d tries", len(held))
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free loopback port: %w", err)
		}
		held = append(held, l)
		if p := l.Addr().(*net.TCPAddr).Port; !portsInUse[p] {
			ports = append(ports, p)
		}
	}
	for _, p := range ports {
		portsInUse[p] = true
	}
	return ports, nil
}

// releasePorts gives ports from allocatePorts back.
func releasePorts(ports ...int) {
	portsMu.Lock()
	defer portsMu.Unlock()
	for _, p := range ports {
		delete(portsInUse, p)
	}
}

// portFree reports whether port can be bound on loopback now.
func portFree(port int) bool {
	l, err := net.Listen("tcp", loopback(port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// loopback formats 127.0.0.1:port.
func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
