// Package proctest builds Swell's binaries and runs them as real processes
// for end-to-end tests: free loopback ports, captured output, readiness
// waits bounded by a deadline, and no process left behind.
package proctest

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildMu  sync.Mutex
	buildDir string
	built    = map[string]string{}
)

// Main runs the tests of a package that calls Build, then removes what
// Build compiled (a hundred megabytes a run with the race detector) and
// exits with the tests' code. Call it from the package's TestMain.
func Main(m *testing.M) {
	code := m.Run()
	buildMu.Lock()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	buildMu.Unlock()
	os.Exit(code)
}

// Build compiles the main package at pkg (an import path such as
// "github.com/swell-run/swell/cmd/queue-proxy") once per test binary and
// returns the executable's path; the package's TestMain calls Main, which
// removes it after the tests. The race detector is enabled when the test
// binary itself was built with it, so end-to-end runs catch races too.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[pkg]; ok {
		return p
	}
	if buildDir == "" {
		d, err := os.MkdirTemp("", "swell-e2e-bin-")
		if err != nil {
			t.Fatalf("temp dir: %v", err)
		}
		buildDir = d
	}
	out := filepath.Join(buildDir, filepath.Base(pkg))
	args := []string{"build", "-o", out}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, pkg)
	cmd := exec.Command("go", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, stderr.String())
	}
	built[pkg] = out
	return out
}

var (
	portMu sync.Mutex
	// handedOut holds the ports FreePort returned, so one test binary never
	// hands the same port out twice while the first taker has not bound it.
	handedOut = map[int]bool{}
)

// Ports are drawn at random below Linux's ephemeral range (32768 and up),
// where the kernel never puts the local end of an outgoing connection, so
// test binaries running in parallel rarely draw the same one.
const portMin, portMax = 10000, 32000

// FreePort returns a TCP port that was free on all interfaces a moment ago
// and that no other FreePort call of this test binary returned. The caller
// binds it later, so a port is only likely, not certain, to stay free.
func FreePort(t testing.TB) int {
	t.Helper()
	portMu.Lock()
	defer portMu.Unlock()
	for range 1000 {
		port := portMin + rand.IntN(portMax-portMin)
		if handedOut[port] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
		if err != nil {
			continue
		}
		l.Close()
		handedOut[port] = true
		return port
	}
	t.Fatal("no free port found")
	return 0
}

// Process is a running child process whose output is kept for the test log.
type Process struct {
	Name string
	Cmd  *exec.Cmd

	out    *syncBuffer
	done   chan struct{}
	waitMu sync.Mutex
	err    error
}

// Start runs bin with args and the given extra environment (KEY=VALUE),
// and stops it (SIGKILL) when the test ends if it is still running. Its
// output is printed to the test log if the test fails.
func Start(t testing.TB, name, bin string, env []string, args ...string) *Process {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	// Own process group, so a test can signal the process alone and the
	// kernel kills it with the test binary if that dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &Process{Name: name, Cmd: cmd, out: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout = p.out
	cmd.Stderr = p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		err := cmd.Wait()
		p.waitMu.Lock()
		p.err = err
		p.waitMu.Unlock()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
		if t.Failed() {
			t.Logf("--- output of %s ---\n%s", name, p.Output())
		}
	})
	return p
}

// Output returns everything the process wrote so far.
func (p *Process) Output() string { return p.out.String() }

// Signal sends sig to the process.
func (p *Process) Signal(sig os.Signal) error { return p.Cmd.Process.Signal(sig) }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait waits up to timeout for the process to exit; exited says whether it
// did, err is its exit error (nil for status 0).
func (p *Process) Wait(timeout time.Duration) (exited bool, err error) {
	select {
	case <-p.done:
		p.waitMu.Lock()
		defer p.waitMu.Unlock()
		return true, p.err
	case <-time.After(timeout):
		return false, nil
	}
}

// ExitCode returns the exit code of an exited process, or -1.
func (p *Process) ExitCode() int {
	select {
	case <-p.done:
		return p.Cmd.ProcessState.ExitCode()
	default:
		return -1
	}
}

// WaitHTTP polls url until it answers with status want, the process exits,
// or timeout passes. Polling is the only way to learn when another process
// is ready; the deadline keeps a broken build from hanging the suite.
func (p *Process) WaitHTTP(t testing.TB, url string, want int, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	var last string
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == want {
				return
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-p.done:
			t.Fatalf("%s exited while waiting for %s: %v\n%s", p.Name, url, p.err, p.Output())
		case <-ctx.Done():
			t.Fatalf("%s: %s did not answer %d within %v (last: %s)\n%s", p.Name, url, want, timeout, last, p.Output())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Eventually polls cond every few milliseconds until it returns true or
// timeout passes, then fails the test with msg. For state owned by another
// process, which a test cannot be notified of.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: "+msg, append([]any{timeout}, args...)...)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Await polls observe every few milliseconds until ok accepts what it
// returned, and returns that; after timeout it fails the test with msg and
// the last value observed, so the failure shows how far the other process
// got. For state owned by another process, which a test cannot be notified
// of.
func Await[T any](t testing.TB, timeout time.Duration, observe func() T, ok func(T) bool, msg string, args ...any) T {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		v := observe()
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s; last observed: %+v", timeout, fmt.Sprintf(msg, args...), v)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// HeldApp is an app in the test process that holds each request to /hold
// until the test releases them all, so that a test needing a request in
// flight while it acts holds one as long as that takes, rather than for a
// guessed time a busy machine may overrun. Other paths answer at once.
type HeldApp struct {
	// Port is where it listens, on loopback.
	Port    int
	arrived chan struct{}
	release chan struct{}
	once    sync.Once
}

// StartHeldApp starts a HeldApp, closed when the test ends.
func StartHeldApp(t testing.TB) *HeldApp {
	t.Helper()
	h := &HeldApp{arrived: make(chan struct{}, 64), release: make(chan struct{})}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			select {
			case h.arrived <- struct{}{}:
			default:
			}
			select {
			case <-h.release:
			case <-r.Context().Done():
				return
			}
		}
		w.Write([]byte("ok\n"))
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("held app: %v", err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() {
		h.Release()
		srv.Close()
	})
	h.Port = ln.Addr().(*net.TCPAddr).Port
	return h
}

// WaitArrived waits until a request has reached /hold.
func (h *HeldApp) WaitArrived(t testing.TB, timeout time.Duration) {
	t.Helper()
	select {
	case <-h.arrived:
	case <-time.After(timeout):
		t.Fatalf("no request reached the held app's /hold within %v", timeout)
	}
}

// Release answers every request held, and those to come.
func (h *HeldApp) Release() { h.once.Do(func() { close(h.release) }) }

// Addr formats a loopback host:port.
func Addr(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }

// Env formats KEY=VALUE pairs from alternating arguments.
func Env(kv ...string) []string {
	var out []string
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, kv[i]+"="+kv[i+1])
	}
	return out
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Clone(b.buf.String())
}
