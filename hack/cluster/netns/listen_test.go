package netns

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// listenIn opens a TCP listener on 127.0.0.1 inside the namespace name.
func listenIn(t *testing.T, name string) net.Listener {
	t.Helper()
	type result struct {
		ln  net.Listener
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			done <- result{err: err}
			return
		}
		defer orig.Close()
		target, err := os.Open("/run/netns/" + name)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- result{err: err}
			return
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		done <- result{ln, err}
	}()
	r := <-done
	if r.err != nil {
		t.Fatalf("listen inside %s: %v", name, r.err)
	}
	return r.ln
}
