package netns

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// DialContext is the signature of net.Dialer.DialContext, which
// client-go's rest.Config.Dial and http.Transport accept.
type DialContext func(ctx context.Context, network, address string) (net.Conn, error)

// Dialer returns a dial function whose connections are made inside the
// namespace name, so a process outside it (a test, the harness) can reach
// the cluster's loopback. A socket belongs to the namespace of the thread
// that created it, so the dial runs on a locked thread switched into the
// namespace and back.
func Dialer(name string) DialContext { return DialerAt(Path(name), name) }

// DialerAt is Dialer for the namespace whose file is path, such as
// /proc/<pid>/ns/net of a process inside it; name names it in errors.
// A pod's namespace is one: containerd keeps it under its own state
// directory, and a pod's process leads to it without knowing where.
func DialerAt(path, name string) DialContext {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		var conn net.Conn
		var dialErr error
		if err := runIn(path, func() {
			// No fast fallback: its parallel dials would run on other
			// threads, outside the namespace.
			d := net.Dialer{FallbackDelay: -1}
			conn, dialErr = d.DialContext(ctx, network, address)
		}); err != nil {
			return nil, fmt.Errorf("dial %s in network namespace %s: %w", address, name, err)
		}
		return conn, dialErr
	}
}

// runIn runs f inside the network namespace whose file is path, and
// returns once f has: what f does with sockets
// or with /proc/sys/net happens in that namespace. A namespace belongs to
// a thread, so f runs on a fresh goroutine locked to its thread, switched
// into the namespace and back; the caller's thread is never switched.
func runIn(path string, f func()) error {
	target, err := os.Open(path)
	if err != nil {
		return err
	}
	defer target.Close()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		defer orig.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("enter it: %w", err)
			return
		}
		f()
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			// Only a thread back in its own namespace may run other
			// goroutines; otherwise it dies with this one.
			runtime.UnlockOSThread()
		}
		done <- nil
	}()
	return <-done
}
