package replica

import (
	"net"
	"testing"
)

func TestAllocatePortsNeverRepeats(t *testing.T) {
	seen := map[int]bool{}
	var all []int
	for range 50 {
		ports, err := allocatePorts(4)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ports {
			if seen[p] {
				t.Fatalf("port %d handed out twice", p)
			}
			seen[p] = true
			if !portFree(p) {
				t.Fatalf("port %d handed out but not free", p)
			}
		}
		all = append(all, ports...)
	}
	releasePorts(all...)
	portsMu.Lock()
	defer portsMu.Unlock()
	for _, p := range all {
		if portsInUse[p] {
			t.Fatalf("port %d still held after release", p)
		}
	}
}

func TestPortFree(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if portFree(port) {
		t.Fatalf("port %d reported free while listened on", port)
	}
	l.Close()
	if !portFree(port) {
		t.Fatalf("port %d reported taken after the listener closed", port)
	}
}
