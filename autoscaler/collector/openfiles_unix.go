//go:build unix

package collector

import (
	"math"
	"syscall"
)

// openFileLimit returns the process's limit of open files, if it has one.
func openFileLimit() (int, bool) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, false
	}
	return int(min(l.Cur, math.MaxInt32)), true
}
