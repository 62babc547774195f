package usage

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// helperEnv makes the test binary run burnHelper instead of the tests.
const helperEnv = "USAGE_TEST_BURN"

// burnHelper is the child process TestRealProc measures. It says when it
// has started, burns CPU when told to until it has used 50ms of it (or 10
// seconds have passed), says so, and exits when its stdin closes.
func burnHelper() int {
	in := bufio.NewReader(os.Stdin)
	fmt.Println("started")
	if _, err := in.ReadString('\n'); err != nil {
		return 1
	}
	start, deadline := cpuTime(), time.Now().Add(10*time.Second)
	x := uint64(1)
	for cpuTime()-start < 50*time.Millisecond && time.Now().Before(deadline) {
		for range 100000 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	fmt.Println("burned", x%2)
	_, _ = io.Copy(io.Discard, in)
	return 0
}

// cpuTime is the CPU time the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestRealProc measures, in this machine's /proc, the tree of the test
// process, which listens on a port, and of a child that burns CPU between
// two samples.
func TestRealProc(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s, err := New(Config{Scope: Listener(ln.Addr().(*net.TCPAddr).Port)})
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("helper: %v", err)
		}
	}()
	out := bufio.NewReader(stdout)
	expect := func(word string) {
		t.Helper()
		line, err := out.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, word) {
			t.Fatalf("helper said %q, %v; want %q", line, err, word)
		}
	}

	expect("started")
	u, err := s.Sample(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if u.Processes < 2 || u.Memory == 0 {
		t.Errorf("first sample: %+v, want this process and its child, with memory", u)
	}
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	expect("burned")
	u, err = s.Sample(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if u.CPU <= 0 || u.Memory == 0 || u.Processes < 2 {
		t.Errorf("second sample: %+v, want CPU and memory used by at least 2 processes", u)
	}
}

// BenchmarkSample measures a Sample of this machine's /proc: every
// process but this one's tree, or this process found as the listener of
// a port; and a pre-fork server in a fake proc tree, to show the cost of
// walking the tree by its children files where the kernel has none.
func BenchmarkSample(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	fakeDir := b.TempDir()
	world{uptime: 1000, procs: listenerProcs(0), socks: []sock{{addr: "127.0.0.1", port: 8080, inode: 7777}}}.write(b, fakeDir, true)

	for _, bc := range []struct {
		name string
		cfg  Config
	}{
		{"pod", Config{Scope: Pod(os.Getpid())}},
		{"listener", Config{Scope: Listener(ln.Addr().(*net.TCPAddr).Port)}},
		{"fake-children", Config{ProcRoot: fakeDir, Scope: Listener(8080)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s, err := New(bc.cfg)
			if err != nil {
				b.Fatal(err)
			}
			now := t0
			var u Usage
			for b.Loop() {
				now = now.Add(time.Second)
				if u, err = s.Sample(now); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(u.Processes), "procs")
		})
	}
}
