package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The harness's child processes: built once, started with their output in
// a log file, waited for by polling, stopped with SIGTERM then SIGKILL, and
// measured through /proc.

const (
	// readyTimeout bounds a process's start-up; generous because the
	// machine may be busy.
	readyTimeout = 30 * time.Second
	// stopGrace is how long a process may drain after SIGTERM.
	stopGrace = 10 * time.Second
	// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat:
	// 100 on every Linux architecture Go supports.
	clockTicks = 100
)

// releaseBuildFlags are the flags Swell's binaries ship with (Makefile's
// release target): static, no symbol tables. They matter for memory: the
// kernel maps a binary's pages in around every page the program touches,
// so a smaller file is a smaller resident set.
var releaseBuildFlags = []string{"-trimpath", "-ldflags=-s -w"}

// buildAll compiles the main packages (import paths) into dir with one go
// build, so the toolchain's cache and parallelism serve them all, and
// returns each binary's path by package. Binaries are built as released.
func buildAll(dir string, pkgs ...string) (map[string]string, error) {
	args := append([]string{"build", "-o", dir + "/"}, releaseBuildFlags...)
	cmd := exec.Command("go", append(args, pkgs...)...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go build %s: %w\n%s", strings.Join(pkgs, " "), err, stderr.String())
	}
	bins := make(map[string]string, len(pkgs))
	for _, p := range pkgs {
		bins[p] = filepath.Join(dir, filepath.Base(p))
	}
	return bins, nil
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// process is a running child.
type process struct {
	name string
	log  string // path of the file holding its output
	cmd  *exec.Cmd
	done chan struct{}
	err  error // the exit error, once done is closed
}

// start runs bin with env (KEY=VALUE pairs) added to the harness's own,
// writing its output to logDir/name.log.
func start(name, bin, logDir string, env ...string) (*process, error) {
	p, _, err := startArgs(name, bin, logDir, nil, env...)
	return p, err
}

// startArgs is start with command-line arguments; it also returns the
// moment just before the exec, for timing a start-up.
func startArgs(name, bin, logDir string, args []string, env ...string) (p *process, began time.Time, err error) {
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("start %s: %w", name, err)
	}
	defer f.Close() // the child has its own copy
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	// The kernel kills the child if the harness dies, so an interrupted
	// run leaves nothing behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	began = time.Now()
	if err := cmd.Start(); err != nil {
		return nil, time.Time{}, fmt.Errorf("start %s: %w", name, err)
	}
	p = &process{name: name, log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, began, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// waitHTTP polls url until it answers 200, the process exits or
// readyTimeout passes.
func (p *process) waitHTTP(url string) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(readyTimeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		last = err
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before %s answered (%v); see %s", p.name, url, p.err, p.log)
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %s not ready after %s (last: %v); see %s", p.name, url, readyTimeout, last, p.log)
		}
	}
}

// stop sends SIGTERM and, if the process has not exited after stopGrace,
// SIGKILL.
func (p *process) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopGrace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// cpuTime returns the CPU time (user + system) pid has used so far, all its
// threads included. /proc/PID/schedstat would give nanoseconds but counts
// the main thread only; a Go program runs on many, so the clock ticks of
// /proc/PID/stat it is (10ms resolution, under 1% of a measured window).
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("cpu time of %d: %w", pid, err)
	}
	return parseStatCPU(string(b))
}

// parseStatCPU reads utime and stime (fields 14 and 15) from a
// /proc/PID/stat line. The command name, field 2, is in parentheses and may
// hold spaces, so counting starts after its closing one.
func parseStatCPU(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("malformed /proc/PID/stat: no command name")
	}
	f := strings.Fields(stat[i+1:]) // f[0] is field 3, the state
	if len(f) < 13 {
		return 0, errors.New("malformed /proc/PID/stat: too few fields")
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("malformed /proc/PID/stat: %w", err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// threadsCPU returns the CPU time the threads pid has now have run, to
// the nanosecond, from each /proc/PID/task/TID/schedstat: precise where
// cpuTime's 10ms ticks are too coarse, as for a process that is idle but
// for a few milliseconds a second. A thread that has exited takes its time
// with it (a Go program rarely ends a thread).
func threadsCPU(pid int) (time.Duration, error) {
	files, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(files) == 0 {
		return 0, fmt.Errorf("cpu time of %d: no /proc/%d/task/*/schedstat", pid, pid)
	}
	var sum time.Duration
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended
		}
		d, err := parseSchedstat(string(b))
		if err != nil {
			return 0, fmt.Errorf("cpu time of %d: %s: %w", pid, f, err)
		}
		sum += d
	}
	return sum, nil
}

// parseSchedstat reads the first field of a schedstat line ("run wait
// slices"): nanoseconds spent on a CPU.
func parseSchedstat(line string) (time.Duration, error) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return 0, errors.New("malformed schedstat: empty")
	}
	ns, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("malformed schedstat: %w", err)
	}
	return time.Duration(ns), nil
}

// memory is a process's resident set, from /proc/PID/status.
type memory struct {
	RSS  int64 // VmRSS, bytes: resident now
	Peak int64 // VmHWM, bytes: the most ever resident
}

func memoryOf(pid int) (memory, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memory{}, fmt.Errorf("memory of %d: %w", pid, err)
	}
	return parseStatusMemory(string(b))
}

// parseStatusMemory reads VmRSS and VmHWM ("VmHWM:\t  9876 kB") from
// /proc/PID/status.
func parseStatusMemory(status string) (memory, error) {
	var m memory
	var found int
	for line := range strings.SplitSeq(status, "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return m, fmt.Errorf("malformed /proc/PID/status line %q: %w", line, err)
		}
		if name == "VmRSS" {
			m.RSS = kb << 10
		} else {
			m.Peak = kb << 10
		}
		found++
	}
	if found != 2 {
		return m, errors.New("/proc/PID/status lacks VmRSS or VmHWM")
	}
	return m, nil
}
