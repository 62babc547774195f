// Package fdlimit raises a process's open-file limit (RLIMIT_NOFILE) to
// what a scale run needs: tens of thousands of pod sockets in the fleet,
// and a connection to each of them in the autoscaler.
package fdlimit

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Raise makes the soft open-file limit at least need, raising the hard
// limit too when it is lower (which takes CAP_SYS_RESOURCE: root, or a
// container granted it). It returns the limits before and after. Go
// already lifts the soft limit to the hard one at start-up, so only a
// need above the hard limit takes privilege.
func Raise(need uint64) (before, after syscall.Rlimit, err error) {
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &before); err != nil {
		return before, before, fmt.Errorf("open-file limit: %w", err)
	}
	if before.Cur >= need {
		return before, before, nil
	}
	// The kernel refuses a hard limit above fs.nr_open.
	if max, ok := nrOpen(); ok && need > max {
		return before, before, fmt.Errorf("open-file limit: need %d, above the kernel's fs.nr_open %d", need, max)
	}
	want := syscall.Rlimit{Cur: need, Max: max(before.Max, need)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
		if errors.Is(err, syscall.EPERM) {
			return before, before, fmt.Errorf("open-file limit: need %d, the hard limit is %d and raising it needs CAP_SYS_RESOURCE (run as root, or raise `ulimit -Hn` first)", need, before.Max)
		}
		return before, before, fmt.Errorf("open-file limit: set %d: %w", need, err)
	}
	return before, want, nil
}

func nrOpen() (uint64, bool) {
	b, err := os.ReadFile("/proc/sys/fs/nr_open")
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}
