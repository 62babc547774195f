package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Reading processes through /proc: which processes `swell local` runs,
// what each is, and its resident set and open files. The root is a field so
// that the tests read a fake tree.

// kind is what a process is to the soak.
type kind string

const (
	kindLocal kind = "local"       // `swell local` itself
	kindQueue kind = "queue-proxy" // `swell queue-proxy`, one per replica
	kindApp   kind = "app"         // `swell hello`, the demo app, one per replica
)

// procFS reads a /proc tree.
type procFS struct{ root string }

func (fs procFS) path(pid int, name ...string) string {
	return filepath.Join(append([]string{fs.root, strconv.Itoa(pid)}, name...)...)
}

// children lists pid's children. A Go program forks from any of its
// threads, so every thread's list counts.
func (fs procFS) children(pid int) ([]int, error) {
	lists, err := filepath.Glob(fs.path(pid, "task", "*", "children"))
	if err != nil || len(lists) == 0 {
		return nil, fmt.Errorf("children of %d: no %s", pid, fs.path(pid, "task", "*", "children"))
	}
	var pids []int
	for _, f := range lists {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended
		}
		for s := range strings.FieldsSeq(string(b)) {
			if n, err := strconv.Atoi(s); err == nil {
				pids = append(pids, n)
			}
		}
	}
	slices.Sort(pids)
	return slices.Compact(pids), nil
}

// cmdline is pid's argv.
func (fs procFS) cmdline(pid int) ([]string, error) {
	b, err := os.ReadFile(fs.path(pid, "cmdline"))
	if err != nil {
		return nil, err
	}
	return splitNUL(b), nil
}

// environ is pid's environment as KEY=VALUE entries.
func (fs procFS) environ(pid int) ([]string, error) {
	b, err := os.ReadFile(fs.path(pid, "environ"))
	if err != nil {
		return nil, err
	}
	return splitNUL(b), nil
}

func splitNUL(b []byte) []string {
	s := strings.TrimRight(string(b), "\x00")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\x00")
}

// rss is pid's resident set in bytes.
func (fs procFS) rss(pid int) (int64, error) {
	f, err := os.Open(fs.path(pid, "status"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return parseVmRSS(f)
}

// fds counts pid's open file descriptors.
func (fs procFS) fds(pid int) (int, error) {
	entries, err := os.ReadDir(fs.path(pid, "fd"))
	if err != nil {
		return 0, err
	}
	return len(entries), nil
}

// parseVmRSS reads VmRSS ("VmRSS:\t  9876 kB") from a /proc/PID/status.
func parseVmRSS(r io.Reader) (int64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		num, unit, _ := strings.Cut(strings.TrimSpace(rest), " ")
		if unit != "kB" {
			return 0, fmt.Errorf("malformed /proc/PID/status line %q: unit %q, want kB", sc.Text(), unit)
		}
		kb, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("malformed /proc/PID/status line %q: %w", sc.Text(), err)
		}
		return kb << 10, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	// A zombie has no VmRSS: it holds no memory any more.
	return 0, errors.New("/proc/PID/status has no VmRSS (the process exited)")
}

// classify says what argv runs: the soak's own swell binary bin with the
// subcommand local, queue-proxy or hello; "" for anything else.
func classify(argv []string, bin string) kind {
	if len(argv) < 2 || argv[0] != bin {
		return ""
	}
	switch argv[1] {
	case "local":
		return kindLocal
	case "queue-proxy":
		return kindQueue
	case "hello":
		return kindApp
	}
	return ""
}

// envPort returns the port in the last KEY=PORT entry of env, 0 if none
// or not a port.
func envPort(env []string, key string) int {
	port := 0
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			port = 0
			if n, err := strconv.Atoi(v); err == nil && n > 0 && n < 1<<16 {
				port = n
			}
		}
	}
	return port
}

// gauges reads the unlabelled samples named in names from a Prometheus
// text exposition ("go_goroutines 38", "go_memstats_heap_alloc_bytes
// 1.119952e+06"); names absent from the text are absent from the map.
func gauges(r io.Reader, names ...string) (map[string]float64, error) {
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	got := make(map[string]float64, len(names))
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Fields(line)
		// name value [timestamp]; a labelled sample's name holds '{'.
		if len(f) < 2 || !want[f[0]] {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			return nil, fmt.Errorf("metric %s: value %q: %w", f[0], f[1], err)
		}
		got[f[0]] = v
	}
	return got, sc.Err()
}
