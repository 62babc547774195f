package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Process is one program of the cluster, as recorded in cluster.json.
type Process struct {
	Name string `json:"name"`
	PID  int    `json:"pid"`
	// StartTime is the process's start in clock ticks since boot
	// (/proc/PID/stat field 22): a PID reused by another program after
	// this one exited does not match, so Stop never signals a stranger.
	StartTime uint64   `json:"startTime"`
	Log       string   `json:"log"`
	Args      []string `json:"args"`
}

// procStat is what /proc/PID/stat says about a process.
type procStat struct {
	state     byte
	startTime uint64
}

func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	return parseStat(b)
}

// parseStat parses /proc/PID/stat. The command name (field 2) is in
// parentheses and may itself contain spaces and parentheses, so fields are
// counted from the last ')'.
func parseStat(b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("malformed /proc stat %q", b)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); starttime is field 22.
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("malformed /proc stat %q", b)
	}
	st, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("malformed /proc stat starttime %q: %w", f[19], err)
	}
	return procStat{state: f[0][0], startTime: st}, nil
}

// Alive reports whether p still runs: its PID exists, is the same process
// (same start time), and is not a zombie, which still passes kill -0.
func (p Process) Alive() bool {
	st, err := readStat(p.PID)
	if err != nil {
		return false
	}
	if p.StartTime != 0 && st.startTime != p.StartTime {
		return false
	}
	return st.state != 'Z' && st.state != 'X'
}

// RSS returns p's resident set size in bytes (VmRSS).
func (p Process) RSS() (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) != 2 || f[1] != "kB" {
				break
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for %s (pid %d)", p.Name, p.PID)
}

// Stop stops p if it still runs (see terminate, with stopGrace) and logs
// how long it took.
func (p Process) Stop(ctx context.Context, log *slog.Logger) error {
	if !p.Alive() {
		return nil
	}
	t0 := time.Now()
	if err := terminate(ctx, p, stopGrace); err != nil {
		return err
	}
	log.Info("stopped", "process", p.Name, "pid", p.PID, "took", since(t0))
	return nil
}

// terminate stops p: SIGTERM, then SIGKILL if it is still alive after
// grace, then waits up to another grace for it to be gone.
func terminate(ctx context.Context, p Process, grace time.Duration) error {
	if !p.Alive() {
		return nil
	}
	if err := syscall.Kill(p.PID, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop %s (pid %d): %w", p.Name, p.PID, err)
	}
	if waitGone(ctx, p, grace) {
		return nil
	}
	if err := syscall.Kill(p.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill %s (pid %d): %w", p.Name, p.PID, err)
	}
	if waitGone(ctx, p, grace) {
		return nil
	}
	return fmt.Errorf("stop %s (pid %d): still running after SIGKILL", p.Name, p.PID)
}

func waitGone(ctx context.Context, p Process, bound time.Duration) bool {
	deadline := time.Now().Add(bound)
	for p.Alive() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}
