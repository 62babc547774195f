//go:build !linux

package replica

import "syscall"

// sysProcAttr puts a process in a process group of its own, so a signal to
// the group reaches its children too. Only Linux can also tie the child's
// life to its parent's.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
