package replica

import "syscall"

// sysProcAttr puts a process in a process group of its own, so a signal to
// the group reaches its children too, and has the kernel kill it if the
// process that started it dies, even by SIGKILL.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
