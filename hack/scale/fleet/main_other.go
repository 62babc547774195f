//go:build !linux

package main

import (
	"fmt"
	"os"
)

// The fleet serves its pods with epoll and a socket bound to the loopback
// device: Linux only.
func main() {
	fmt.Fprintln(os.Stderr, "fleet: runs on Linux only (epoll, SO_BINDTODEVICE)")
	os.Exit(2)
}
