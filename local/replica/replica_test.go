package replica

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/swell-run/swell/internal/proctest"
)

const waitFor = 15 * time.Second

func queueProxy(t *testing.T) []string {
	return []string{proctest.Build(t, "github.com/swell-run/swell/cmd/queue-proxy")}
}

func hello(t *testing.T) []string {
	return []string{proctest.Build(t, "github.com/swell-run/swell/cmd/hello")}
}

// output collects a replica's output.
type output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// start starts a replica of spec, filled in with test defaults, and kills it
// when the test ends.
func start(t *testing.T, spec Spec) (*Replica, *output) {
	t.Helper()
	if spec.Service == "" {
		spec.Service = "hello"
	}
	if spec.QueueProxy == nil {
		spec.QueueProxy = queueProxy(t)
	}
	out := &output{}
	if spec.Output == nil {
		spec.Output = out
	}
	if spec.Log == nil {
		spec.Log = zaptest.NewLogger(t)
	}
	if spec.DrainQuiet == 0 {
		spec.DrainQuiet = 50 * time.Millisecond
	}
	r, err := Start(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.Kill()
		if t.Failed() {
			t.Logf("--- output of %s ---\n%s", r.Name(), out.String())
		}
	})
	return r, out
}

func waitReady(t *testing.T, r *Replica) {
	t.Helper()
	proctest.Eventually(t, waitFor, r.Ready, "%s not ready", r.Name())
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// gone reports whether pid has exited (a zombie waiting for its new parent
// counts as exited).
func gone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// The state follows the command name in parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

func TestServesThroughQueueProxy(t *testing.T) {
	r, _ := start(t, Spec{Index: 3, Command: hello(t)})
	if r.Name() != "hello-3" {
		t.Fatalf("Name() = %q, want hello-3", r.Name())
	}
	waitReady(t, r)
	if s := r.State(); s != "ready" {
		t.Fatalf("State() = %q, want ready", s)
	}
	code, body := get(t, "http://"+r.ServingAddr()+"/")
	if code != http.StatusOK || !strings.Contains(body, "(replica 3)") {
		t.Fatalf("GET / = %d %q, want 200 from replica 3", code, body)
	}
	if code, _ := get(t, "http://"+r.MetricsAddr()+"/metrics"); code != http.StatusOK {
		t.Fatalf("GET /metrics = %d, want 200", code)
	}
	app, queue := r.pids()
	if err := r.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.Done():
	default:
		t.Fatal("Done not closed after Stop")
	}
	if r.Ready() || r.State() != "stopped" {
		t.Fatalf("after Stop: Ready() = %v, State() = %q", r.Ready(), r.State())
	}
	if !gone(app) || !gone(queue) {
		t.Fatalf("after Stop: app %d gone %v, queue-proxy %d gone %v", app, gone(app), queue, gone(queue))
	}
	if err := r.Stop(context.Background()); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

// TestStopLetsRequestInFlightFinish: a request the app holds is in
// flight when Stop begins: the replica is not ready and says it is
// stopping, Stop waits for the request, the request is answered, then
// Stop returns.
func TestStopLetsRequestInFlightFinish(t *testing.T) {
	release := filepath.Join(t.TempDir(), "release")
	if err := syscall.Mkfifo(release, 0o600); err != nil {
		t.Skip("no named pipes here:", err)
	}
	cmd, env := heldApp(t, release)
	r, _ := start(t, Spec{Command: cmd, Env: env})
	waitReady(t, r)
	addr := "http://" + r.ServingAddr()

	type result struct {
		code int
		body string
		err  error
	}
	res := make(chan result, 1)
	go func() {
		resp, err := http.Get(addr + "/hold")
		if err != nil {
			res <- result{err: err}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		res <- result{code: resp.StatusCode, body: string(b)}
	}()
	proctest.Eventually(t, waitFor, func() bool {
		_, body := get(t, addr+"/stats")
		var s struct {
			InFlight int `json:"inflight"`
		}
		return json.Unmarshal([]byte(body), &s) == nil && s.InFlight == 1
	}, "the held request never reached the app")

	stopped := make(chan error, 1)
	go func() { stopped <- r.Stop(context.Background()) }()
	proctest.Eventually(t, waitFor, func() bool { return !r.Ready() }, "still ready while stopping")
	if s := r.State(); s != "stopping" {
		t.Fatalf("State() = %q while stopping, want stopping", s)
	}
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned (%v) while a request was in flight", err)
	case got := <-res:
		t.Fatalf("the held request ended before it was released: %+v", got)
	default:
	}

	// Release it: writing to the pipe and closing it ends the app's read.
	f, err := os.OpenFile(release, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	var got result
	select {
	case got = <-res:
	case <-time.After(waitFor):
		t.Fatal("the request in flight never finished once released")
	}
	if got.err != nil || got.code != http.StatusOK || got.body != "released\n" {
		t.Fatalf("request in flight during Stop: %d %q %v, want 200 released", got.code, got.body, got.err)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
}

func TestCrashedProcessIsRestarted(t *testing.T) {
	var changes atomic.Int64
	r, _ := start(t, Spec{Command: hello(t), OnChange: func() { changes.Add(1) }})
	waitReady(t, r)
	app, queue := r.pids()

	// The app: the replica is not ready as soon as it is gone.
	syscall.Kill(app, syscall.SIGKILL)
	proctest.Eventually(t, waitFor, func() bool { return !r.Ready() }, "still ready after the app was killed")
	waitReady(t, r)
	app2, queue2 := r.pids()
	if app2 == app || queue2 != queue {
		t.Fatalf("pids (app, queue-proxy) went from (%d, %d) to (%d, %d): want a new app only", app, queue, app2, queue2)
	}
	if n := r.Restarts(); n != 1 {
		t.Fatalf("Restarts() = %d, want 1", n)
	}
	if code, _ := get(t, "http://"+r.ServingAddr()+"/"); code != http.StatusOK {
		t.Fatalf("GET / after the app's restart = %d, want 200", code)
	}

	// The queue-proxy, alone.
	syscall.Kill(queue2, syscall.SIGKILL)
	proctest.Eventually(t, waitFor, func() bool { return !r.Ready() }, "still ready after the queue-proxy was killed")
	waitReady(t, r)
	app3, queue3 := r.pids()
	if app3 != app2 || queue3 == queue2 {
		t.Fatalf("pids (app, queue-proxy) went from (%d, %d) to (%d, %d): want a new queue-proxy only", app2, queue2, app3, queue3)
	}
	if n := r.Restarts(); n != 2 {
		t.Fatalf("Restarts() = %d, want 2", n)
	}
	if code, _ := get(t, "http://"+r.ServingAddr()+"/"); code != http.StatusOK {
		t.Fatalf("GET / after the queue-proxy's restart = %d, want 200", code)
	}
	// ready, not ready, restarted, ready, twice.
	if n := changes.Load(); n < 7 {
		t.Fatalf("OnChange called %d times, want at least 7", n)
	}
}

func TestCrashLoopBacksOff(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	core, logs := observer.New(zap.InfoLevel)
	r, _ := start(t, Spec{Command: []string{"false"}, Clock: clk, Log: zap.New(core)})

	restarting := func() []observer.LoggedEntry {
		return logs.FilterMessageSnippet("restarting in").FilterField(zap.String("process", "app")).All()
	}
	ms := time.Millisecond
	for i, want := range []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms} {
		proctest.Eventually(t, waitFor, func() bool { return len(restarting()) == i+1 }, "crash #%d not seen", i+1)
		e := restarting()[i]
		if got := e.ContextMap()["backoff"]; got != want {
			t.Fatalf("backoff #%d = %v, want %s", i+1, got, want)
		}
		if s := r.State(); s != "crashed" {
			t.Fatalf("State() = %q during the backoff, want crashed", s)
		}
		// Nothing restarts until the backoff has passed on the clock.
		if n := r.Restarts(); n != i {
			t.Fatalf("Restarts() = %d before backoff #%d passed, want %d", n, i+1, i)
		}
		clk.Step(want - time.Nanosecond)
		if n := r.Restarts(); n != i {
			t.Fatalf("Restarts() = %d just before backoff #%d passed, want %d", n, i+1, i)
		}
		clk.Step(time.Nanosecond)
		proctest.Eventually(t, waitFor, func() bool { return r.Restarts() == i+1 }, "no restart after backoff #%d", i+1)
	}
	if r.Ready() {
		t.Fatal("an app that exits at once is ready")
	}
	crashes := logs.FilterMessage("crashed").FilterField(zap.String("process", "app")).All()
	if len(crashes) < 5 || crashes[0].ContextMap()["exit_code"] != int64(1) {
		t.Fatalf("crash logs %v: want 5 with exit_code 1", crashes)
	}
}

func TestStopKillsAppIgnoringSIGTERM(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	killAfter := 300 * time.Millisecond
	r, out := start(t, Spec{
		Command:   []string{"sh", "-c", `trap "" TERM; echo trapped; sleep 60`},
		KillAfter: killAfter,
		Log:       zap.New(core),
	})
	proctest.Eventually(t, waitFor, func() bool { return strings.Contains(out.String(), "hello-0 | trapped\n") }, "the app never set its trap")
	app, _ := r.pids()

	began := time.Now()
	if err := r.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took < killAfter {
		t.Fatalf("Stop took %s, less than KillAfter %s: the app did not ignore SIGTERM?", took, killAfter)
	}
	if !gone(app) {
		t.Fatalf("app %d still running after Stop", app)
	}
	if logs.FilterMessageSnippet("still running after SIGTERM").FilterField(zap.String("process", "app")).Len() != 1 {
		t.Fatalf("no log of the app's SIGKILL in %v", logs.All())
	}
}

func TestStopContextKillsAtOnce(t *testing.T) {
	r, out := start(t, Spec{
		Command:   []string{"sh", "-c", `trap "" TERM; echo trapped; sleep 60`},
		KillAfter: time.Minute,
	})
	proctest.Eventually(t, waitFor, func() bool { return strings.Contains(out.String(), "| trapped\n") }, "the app never set its trap")
	app, _ := r.pids()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := r.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop = %v, want the context's deadline", err)
	}
	if !gone(app) {
		t.Fatalf("app %d still running after Stop", app)
	}
}

func TestProcessGroupDies(t *testing.T) {
	for _, how := range []string{"stop", "kill"} {
		t.Run(how, func(t *testing.T) {
			r, out := start(t, Spec{Command: []string{"sh", "-c", `sleep 300 & echo child=$!; wait`}})
			var child int
			re := regexp.MustCompile(`hello-0 \| child=(\d+)\n`)
			proctest.Eventually(t, waitFor, func() bool {
				m := re.FindStringSubmatch(out.String())
				if m != nil {
					child, _ = strconv.Atoi(m[1])
				}
				return m != nil
			}, "the app never started its child")
			app, queue := r.pids()
			if how == "stop" {
				if err := r.Stop(context.Background()); err != nil {
					t.Fatal(err)
				}
			} else {
				r.Kill()
			}
			for _, pid := range []int{app, queue} {
				if !gone(pid) {
					t.Fatalf("process %d still running after %s", pid, how)
				}
			}
			// The grandchild is not ours to reap: SIGKILL was sent to its
			// group, and the kernel ends it a moment later.
			proctest.Eventually(t, waitFor, func() bool { return gone(child) }, "grandchild %d still running after %s", child, how)
		})
	}
}

func TestOutputIsPrefixedLines(t *testing.T) {
	r, out := start(t, Spec{Index: 3, Command: []string{"sh", "-c", `echo out; echo err >&2; printf partial; sleep 60`}})
	proctest.Eventually(t, waitFor, func() bool {
		return strings.Contains(out.String(), "hello-3 queue-proxy | ")
	}, "no queue-proxy output")
	if err := r.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{"hello-3 | out\n", "hello-3 | err\n", "hello-3 | partial\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	for line := range strings.Lines(text) {
		if !strings.HasPrefix(line, "hello-3 | ") && !strings.HasPrefix(line, "hello-3 queue-proxy | ") {
			t.Errorf("line without prefix: %q", line)
		}
	}
}

func (r *Replica) allPorts() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return []int{r.appPort, r.servingPort, r.adminPort, r.metricsPort}
}

func TestReplicasNeverSharePorts(t *testing.T) {
	a, _ := start(t, Spec{Index: 0, Command: hello(t)})
	b, _ := start(t, Spec{Index: 1, Command: hello(t)})
	seen := map[int]string{}
	for _, r := range []*Replica{a, b} {
		for _, p := range r.allPorts() {
			if other, ok := seen[p]; ok {
				t.Fatalf("port %d given to %s and %s", p, other, r.Name())
			}
			seen[p] = r.Name()
		}
	}
	waitReady(t, a)
	waitReady(t, b)
	_, bodyA := get(t, "http://"+a.ServingAddr()+"/")
	_, bodyB := get(t, "http://"+b.ServingAddr()+"/")
	if !strings.Contains(bodyA, "replica 0") || !strings.Contains(bodyB, "replica 1") {
		t.Fatalf("answers %q and %q: want replicas 0 and 1", bodyA, bodyB)
	}
}

// A port taken while the app was down is replaced by a new one, and the
// queue-proxy follows the app there.
func TestTakenPortIsReplaced(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	r, _ := start(t, Spec{Command: hello(t), Clock: clk})
	readyOnClock := func() {
		t.Helper()
		proctest.Eventually(t, waitFor, func() bool {
			clk.Step(probeFast)
			return r.Ready()
		}, "%s not ready", r.Name())
	}
	readyOnClock()
	old := r.allPorts()
	app, _ := r.pids()
	syscall.Kill(app, syscall.SIGKILL)
	proctest.Eventually(t, waitFor, func() bool { return r.State() == "crashed" }, "the app's crash not seen")

	l, err := net.Listen("tcp", loopback(old[0]))
	if err != nil {
		t.Fatalf("take the app's port: %v", err)
	}
	defer l.Close()
	readyOnClock()
	now := r.allPorts()
	if now[0] == old[0] {
		t.Fatalf("app port %d kept though taken", old[0])
	}
	if now[1] != old[1] {
		t.Fatalf("serving port moved from %d to %d though free", old[1], now[1])
	}
	if code, _ := get(t, "http://"+r.ServingAddr()+"/"); code != http.StatusOK {
		t.Fatalf("GET / = %d, want 200", code)
	}
	if n := r.Restarts(); n != 1 {
		t.Fatalf("Restarts() = %d, want 1 (moving the queue-proxy is no restart)", n)
	}
}

func TestStartRejectsBadSpec(t *testing.T) {
	tests := []struct {
		name string
		spec Spec
		want string
	}{
		{"no command", Spec{Service: "s", QueueProxy: []string{"true"}}, "empty Command"},
		{"no queue-proxy", Spec{Service: "s", Command: []string{"true"}}, "empty QueueProxy"},
		{"no service", Spec{Command: []string{"true"}, QueueProxy: []string{"true"}}, "empty Service"},
		{"unknown command", Spec{Service: "s", Command: []string{"no-such-command-here"}, QueueProxy: []string{"true"}}, "no-such-command-here"},
		{"missing file", Spec{Service: "s", Command: []string{"./nope"}, QueueProxy: []string{"true"}, Dir: t.TempDir()}, "nope"},
		{"bad env", Spec{Service: "s", Command: []string{"true"}, QueueProxy: []string{"true"}, Env: []string{"NOEQUALS"}}, `"NOEQUALS": must be KEY=VALUE`},
		{"negative duration", Spec{Service: "s", Command: []string{"true"}, QueueProxy: []string{"true"}, KillAfter: -1}, "invalid KillAfter"},
		{"quiet over timeout", Spec{Service: "s", Command: []string{"true"}, QueueProxy: []string{"true"}, DrainQuiet: time.Minute}, "DrainQuiet 1m0s exceeds DrainTimeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Start(tt.spec)
			if err == nil {
				r.Kill()
				t.Fatal("Start succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not mention %q", err, tt.want)
			}
		})
	}
}
