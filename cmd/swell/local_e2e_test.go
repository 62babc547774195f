package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/swell-run/swell/internal/proctest"
	"github.com/swell-run/swell/local"
	"github.com/swell-run/swell/pkg/loadgen"
)

// End-to-end tests of `swell local`: the real binary, its real replicas
// (queue-proxy and app processes) and real sockets on loopback. The
// autoscaler's windows are shortened (--window 6s, its minimum) so that
// scaling shows within seconds.

const swellPkg = "github.com/swell-run/swell/cmd/swell"

// e2eWait bounds each wait on the processes: generous, as the binaries run
// under the race detector on a shared machine.
const e2eWait = 60 * time.Second

// localRun is one `swell local` process.
type localRun struct {
	p     *proctest.Process
	url   string // the front door
	admin string // the admin port
	bin   string
}

// startLocal runs `swell local` with args (its own flags, then "--" and a
// command if any) and waits until it serves.
func startLocal(t *testing.T, args ...string) *localRun {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end: runs processes for seconds")
	}
	bin := proctest.Build(t, swellPkg)
	port, admin := proctest.FreePort(t), proctest.FreePort(t)
	// A state directory of the test's own: what the policies learned in
	// the user's runs (--state-dir auto) must not decide the test's.
	// args may name another; the last one given counts.
	full := append([]string{"local", "--port", strconv.Itoa(port), "--admin-port", strconv.Itoa(admin),
		"--log-level", "warn", "--log-format", "console", "--state-dir", t.TempDir()}, args...)
	p := proctest.Start(t, "swell local", bin, nil, full...)
	r := &localRun{p: p, url: "http://" + proctest.Addr(port), admin: "http://" + proctest.Addr(admin), bin: bin}
	p.WaitHTTP(t, r.admin+local.StatusPath, http.StatusOK, e2eWait)
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop stops swell local gracefully, once.
func (r *localRun) stop(t *testing.T) {
	select {
	case <-r.p.Done():
		return
	default:
	}
	r.p.Signal(syscall.SIGTERM)
	if exited, _ := r.p.Wait(e2eWait); !exited {
		t.Errorf("swell local did not stop within %v of SIGTERM", e2eWait)
	}
}

func (r *localRun) status(t *testing.T) local.ServiceStatus {
	t.Helper()
	st := r.fullStatus(t)
	if len(st.Services) != 1 {
		t.Fatalf("status has %d services, want 1", len(st.Services))
	}
	return st.Services[0]
}

func (r *localRun) fullStatus(t *testing.T) local.Status {
	t.Helper()
	res, err := http.Get(r.admin + local.StatusPath)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	defer res.Body.Close()
	var st local.Status
	if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
		t.Fatalf("status: %v", err)
	}
	return st
}

// get sends one request through the front door and returns its status
// and body.
func (r *localRun) get(t *testing.T, path string, hdr ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, r.url+path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	client := &http.Client{Timeout: e2eWait}
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// awaitStatus polls the one service's status until ok accepts it, and
// returns it; a failure shows the last status seen.
func (r *localRun) awaitStatus(t *testing.T, ok func(local.ServiceStatus) bool, msg string, args ...any) local.ServiceStatus {
	t.Helper()
	return proctest.Await(t, e2eWait, func() local.ServiceStatus { return r.status(t) }, ok, msg, args...)
}

func (r *localRun) waitOutput(t *testing.T, want string) {
	t.Helper()
	proctest.Eventually(t, e2eWait, func() bool { return strings.Contains(r.p.Output(), want) },
		"swell local never printed %q", want)
}

// TestLocalFromZeroAndBackToZero: the demo starts at zero, the first
// request is held while a replica starts and then answered, and the
// service scales back to zero after the grace period; the next request
// wakes it again.
func TestLocalFromZeroAndBackToZero(t *testing.T) {
	r := startLocal(t, "--demo", "--scale-to-zero-grace-period", "1s", "--window", "6s")
	if st := r.status(t); st.Desired != 0 || len(st.Replicas) != 0 {
		t.Fatalf("demo started with %d desired, %d replicas; want zero", st.Desired, len(st.Replicas))
	}
	code, body := r.get(t, "/")
	if code != http.StatusOK || !strings.Contains(body, "Hello from Swell! (replica 1)") {
		t.Fatalf("first request: %d %q, want 200 from replica 1", code, body)
	}
	r.waitOutput(t, "hello: scale 0→1 (poke)")
	// The activator's own probe may find the replica ready a little
	// before the backend's readiness poll does.
	r.awaitStatus(t, func(st local.ServiceStatus) bool { return st.Ready == 1 && st.Desired == 1 },
		"after the first request: want 1 ready of 1 desired")

	r.awaitStatus(t, func(st local.ServiceStatus) bool { return st.Desired == 0 && len(st.Replicas) == 0 },
		"the service did not scale to zero")
	r.waitOutput(t, "hello: scale 1→0 (scale to zero after 1s idle)")
	code, body = r.get(t, "/")
	if code != http.StatusOK || !strings.Contains(body, "(replica 2)") {
		t.Fatalf("request after scaling to zero: %d %q, want 200 from replica 2", code, body)
	}
}

// helloStats is cmd/hello's own count of its requests.
type helloStats struct {
	MaxInflight int64 `json:"max_inflight"`
	Requests    int64 `json:"requests"`
}

// TestLocalBurstPanicsAndConcurrencyHolds: a burst far beyond one replica's
// containerConcurrency of 1 puts kpa in panic mode and scales up; every
// request is answered, and no replica ever ran two at once.
func TestLocalBurstPanicsAndConcurrencyHolds(t *testing.T) {
	r := startLocal(t, "--name", "hello", "--class", "kpa", "--container-concurrency", "1", "--max-scale", "4", "--window", "6s",
		"--scale-to-zero-grace-period", "30s", "--", proctest.Build(t, swellPkg), "hello")
	const burst = 12
	var wg sync.WaitGroup
	codes := make(chan int, burst)
	for range burst {
		wg.Go(func() {
			res, err := (&http.Client{Timeout: e2eWait}).Get(r.url + "/?sleep=2s")
			if err != nil {
				codes <- -1
				return
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			codes <- res.StatusCode
		})
	}
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != http.StatusOK {
			t.Errorf("a request of the burst answered %d, want 200", c)
		}
	}
	r.waitOutput(t, "hello: panic — ")
	st := r.status(t)
	if st.Desired < 2 {
		t.Fatalf("desired %d after a burst of %d at containerConcurrency 1, want a scale-up", st.Desired, burst)
	}
	var served int64
	for _, rep := range st.Replicas {
		res, err := http.Get("http://" + rep.Address + "/stats")
		if err != nil {
			t.Fatalf("stats of %s: %v", rep.Name, err)
		}
		var hs helloStats
		err = json.NewDecoder(res.Body).Decode(&hs)
		res.Body.Close()
		if err != nil {
			t.Fatalf("stats of %s: %v", rep.Name, err)
		}
		if hs.MaxInflight > 1 {
			t.Errorf("replica %s ran %d requests at once, containerConcurrency is 1", rep.Name, hs.MaxInflight)
		}
		served += hs.Requests
	}
	if served < burst {
		t.Errorf("replicas served %d requests, want at least the %d of the burst", served, burst)
	}
}

// TestLocalScaleDownLosesNothing: a heavy phase scales a service up, and
// as it ends the service scales down while a steady light load goes on;
// every request of both is answered.
func TestLocalScaleDownLosesNothing(t *testing.T) {
	r := startLocal(t, "--name", "hello", "--container-concurrency", "1", "--max-scale", "3", "--window", "6s",
		"--scale-to-zero-grace-period", "30s", "--", proctest.Build(t, swellPkg), "hello")
	type outcome struct {
		name string
		res  loadgen.Result
		err  error
	}
	done := make(chan outcome, 2)
	run := func(name string, o loadgen.Config) {
		res, err := loadgen.Run(context.Background(), o)
		done <- outcome{name, res, err}
	}
	// Light: 10 requests a second of 20 ms for the whole test. Heavy: 6
	// workers back to back on 200 ms requests, 3 replicas' worth, for 10 s.
	go run("light", loadgen.Config{URL: r.url + "/?sleep=20ms", Rate: 10, Duration: 40 * time.Second})
	go run("heavy", loadgen.Config{URL: r.url + "/?sleep=200ms", Workers: 6, Duration: 10 * time.Second})
	r.awaitStatus(t, func(st local.ServiceStatus) bool { return st.Ready == 3 }, "the heavy phase did not scale to 3")
	r.awaitStatus(t, func(st local.ServiceStatus) bool { return st.Desired < 3 && len(st.Replicas) == st.Desired },
		"the service did not scale down once the heavy phase ended")
	for range 2 {
		o := <-done
		if o.err != nil {
			t.Fatalf("%s load: %v", o.name, o.err)
		}
		if o.res.Requests == 0 || o.res.Successes != o.res.Requests {
			t.Errorf("%s load: %d of %d requests succeeded, want all; codes %v, errors %v",
				o.name, o.res.Successes, o.res.Requests, o.res.StatusCodes, o.res.Errors)
		}
	}
	r.waitOutput(t, "hello: scale 3→")
}

// TestLocalCrashedReplicaIsReplaced: the app of a replica killed from
// outside is restarted, reported, and serves again.
func TestLocalCrashedReplicaIsReplaced(t *testing.T) {
	r := startLocal(t, "--demo", "--min-scale", "1")
	r.awaitStatus(t, func(st local.ServiceStatus) bool { return st.Ready == 1 }, "the replica never became ready")
	apps := descendants(r.p.Cmd.Process.Pid, "hello")
	if len(apps) != 1 {
		t.Fatalf("found %d app processes (%v), want 1", len(apps), apps)
	}
	if err := syscall.Kill(apps[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r.waitOutput(t, "replica hello-1 crashed")
	r.awaitStatus(t, func(st local.ServiceStatus) bool {
		return st.Ready == 1 && len(st.Replicas) == 1 && st.Replicas[0].Restarts == 1
	}, "the crashed replica was not restarted")
	if code, _ := r.get(t, "/"); code != http.StatusOK {
		t.Fatalf("after the restart: %d, want 200", code)
	}
}

// TestLocalLeavesNoProcess: whether swell local stops on SIGTERM, is
// killed outright, or fails to start a replica, none of its replicas'
// processes survive it.
func TestLocalLeavesNoProcess(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			r := startLocal(t, "--demo", "--min-scale", "2")
			r.awaitStatus(t, func(st local.ServiceStatus) bool { return st.Ready == 2 }, "two replicas never became ready")
			kids := descendants(r.p.Cmd.Process.Pid, "")
			if len(kids) < 4 {
				t.Fatalf("found %d processes under swell local, want at least 4 (2 × queue-proxy and app)", len(kids))
			}
			r.p.Signal(sig)
			if exited, _ := r.p.Wait(e2eWait); !exited {
				t.Fatalf("swell local did not exit on %v", sig)
			}
			if sig == syscall.SIGTERM && r.p.ExitCode() != 0 {
				t.Errorf("exit code %d after SIGTERM, want 0", r.p.ExitCode())
			}
			proctest.Eventually(t, e2eWait, func() bool { return len(alive(kids)) == 0 },
				"processes %v outlived swell local", kids)
		})
	}
	t.Run("failed start", func(t *testing.T) {
		bin := proctest.Build(t, swellPkg)
		p := proctest.Start(t, "swell local", bin, nil, "local", "--port", strconv.Itoa(proctest.FreePort(t)),
			"--admin-port", strconv.Itoa(proctest.FreePort(t)), "--min-scale", "2", "--",
			filepath.Join(t.TempDir(), "no-such-app"))
		if exited, _ := p.Wait(e2eWait); !exited || p.ExitCode() != 1 {
			t.Fatalf("swell local with a missing app: exited %v, code %d; want exit 1\n%s", exited, p.ExitCode(), p.Output())
		}
		if !strings.Contains(p.Output(), "no-such-app") {
			t.Errorf("the error does not name the app:\n%s", p.Output())
		}
	})
}

// TestLocalFileRoutesByHost: services from a file, each reached by its
// host; a request wakes only its own service.
func TestLocalFileRoutesByHost(t *testing.T) {
	bin := proctest.Build(t, swellPkg)
	file := filepath.Join(t.TempDir(), "swell.yaml")
	yaml := fmt.Sprintf(`defaults:
  allow-zero-initial-scale: true
services:
  - name: alpha
    command: [%q, hello]
    hosts: [alpha.example]
    annotations:
      autoscaling.swell.run/initial-scale: 0
  - name: beta
    command: [%q, hello]
    containerConcurrency: 2
    annotations:
      autoscaling.swell.run/initial-scale: 0
`, bin, bin)
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startLocal(t, "-f", file)
	desired := func() map[string]int {
		m := map[string]int{}
		for _, s := range r.fullStatus(t).Services {
			m[s.Name] = s.Desired
		}
		return m
	}
	if d := desired(); d["alpha"] != 0 || d["beta"] != 0 || len(d) != 2 {
		t.Fatalf("desired at start %v, want alpha and beta at 0", d)
	}
	if code, _ := r.get(t, "/", "Host", "alpha.example:80"); code != http.StatusOK {
		t.Fatalf("alpha by its host: %d, want 200", code)
	}
	if d := desired(); d["alpha"] != 1 || d["beta"] != 0 {
		t.Fatalf("desired after a request for alpha %v, want alpha 1, beta 0", d)
	}
	if code, _ := r.get(t, "/", "Host", "beta.localhost"); code != http.StatusOK {
		t.Fatalf("beta by <name>.localhost: %d, want 200", code)
	}
	if code, _ := r.get(t, "/", "Swell-Service", "beta"); code != http.StatusOK {
		t.Fatalf("beta by the Swell-Service header: %d, want 200", code)
	}
	if d := desired(); d["beta"] != 1 {
		t.Fatalf("desired after requests for beta %v, want beta 1", d)
	}
	code, body := r.get(t, "/", "Host", "gamma.localhost")
	if code != http.StatusNotFound || !strings.Contains(body, "services: alpha, beta") {
		t.Fatalf("unknown host: %d %q, want 404 naming the services", code, body)
	}
}

// TestLocalBadFileIsRefused: a bad file is reported with its lines before
// anything starts.
func TestLocalBadFileIsRefused(t *testing.T) {
	file := filepath.Join(t.TempDir(), "swell.yaml")
	bad := "services:\n  - name: Bad_Name\n    command: [app]\n    annotations:\n      autoscaling.swell.run/min-scale: lots\n"
	if err := os.WriteFile(file, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := swell(t, "local", "-f", file)
	if code != 2 || !strings.Contains(stderr, "swell.yaml:2:") || !strings.Contains(stderr, "swell.yaml:5:") ||
		!strings.Contains(stderr, `"lots" is not an integer`) {
		t.Fatalf("bad file: exit %d, stderr:\n%s\nwant exit 2 naming lines 2 and 5", code, stderr)
	}
	code, _, stderr = swell(t, "local", "-f", file, "--min-scale", "1")
	if code != 2 || !strings.Contains(stderr, "--min-scale: one-service flags do not go with -f") {
		t.Fatalf("-f with --min-scale: exit %d, stderr %q", code, stderr)
	}
}

// descendants returns the pids of the processes below pid whose command
// line contains match ("" for all), from /proc.
func descendants(pid int, match string) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after
		// its closing parenthesis.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		children[ppid] = append(children[ppid], p)
	}
	var out []int
	var walk func(int)
	walk = func(p int) {
		for _, c := range children[p] {
			cmd, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(c), "cmdline"))
			if match == "" || strings.Contains(string(cmd), match) {
				out = append(out, c)
			}
			walk(c)
		}
	}
	walk(pid)
	return out
}

// alive returns those of pids still running (zombies count as gone).
func alive(pids []int) []int {
	var out []int
	for _, p := range pids {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		if f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]); len(f) > 0 && f[0] != "Z" {
			out = append(out, p)
		}
	}
	return out
}
