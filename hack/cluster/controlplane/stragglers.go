package controlplane

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// killStragglers SIGKILLs every process still inside the network namespace
// ns, such as a program of the node left behind by a harness that was
// killed (a pod's processes are in namespaces of their own). It
// returns the processes it found.
func killStragglers(ctx context.Context, ns string, log *slog.Logger) []Process {
	var target syscall.Stat_t
	if err := syscall.Stat(filepath.Join("/run/netns", ns), &target); err != nil {
		return nil
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var found []Process
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join("/proc", e.Name(), "ns", "net"), &st) != nil {
			continue
		}
		if st.Dev != target.Dev || st.Ino != target.Ino {
			continue
		}
		ps, err := readStat(pid)
		if err != nil {
			continue
		}
		comm, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		p := Process{Name: string(trimNewline(comm)), PID: pid, StartTime: ps.startTime}
		if !p.Alive() {
			continue
		}
		log.Warn("killing a process left in the namespace", "netns", ns, "pid", pid, "comm", p.Name)
		_ = syscall.Kill(pid, syscall.SIGKILL)
		found = append(found, p)
	}
	for _, p := range found {
		waitGone(ctx, p, 5*time.Second)
	}
	return found
}

func trimNewline(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n') {
		b = b[:len(b)-1]
	}
	return b
}
