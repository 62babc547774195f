// Command pause is the sandbox ("pause") image of the test cluster's node:
// the first process of every pod, which holds the pod's namespaces while
// its containers come and go. It waits for SIGTERM or SIGINT and exits 0,
// reaping meanwhile every child re-parented to it (when a pod shares its
// process namespace, pause is that namespace's init).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		reap()
	}
}

// reap waits for every child that has exited, without blocking.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
