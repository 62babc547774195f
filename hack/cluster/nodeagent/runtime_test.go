package nodeagent

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/clock"

	"github.com/swell-run/swell/hack/cluster/internal/clustertest"
)

// These tests run pods for real: network namespaces, veth pairs on a
// bridge in a namespace the test creates, and processes. They need root.

var (
	buildOnce  sync.Once
	testServer string
	buildErr   error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if testServer != "" {
		_ = os.RemoveAll(filepath.Dir(testServer))
	}
	os.Exit(code)
}

// testHTTPServer builds testdata/httpserver once per test binary.
func testHTTPServer(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "nodeagent-test-bin-")
		if err != nil {
			buildErr = err
			return
		}
		testServer = filepath.Join(dir, "httpserver")
		out, err := exec.Command("go", "build", "-o", testServer, "./testdata/httpserver").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build testdata/httpserver: %v: %s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return testServer
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

type testNode struct {
	rt      *runtime
	api     *fakeAPI
	netns   string
	dial    func(context.Context, string, string) (net.Conn, error)
	dir     string
	workers []*podWorker
}

// newTestNode creates a cluster namespace with a random name holding the
// pod bridge, and a runtime that puts pods behind it.
func newTestNode(t *testing.T) *testNode {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	t.Parallel()
	ipBin, err := exec.LookPath("ip")
	if err != nil {
		t.Skip("needs iproute2's ip")
	}
	ns := "swt" + randomHex(3)
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(ipBin, args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	ip("netns", "add", ns)
	n := &testNode{netns: ns, dir: t.TempDir(), dial: netnsDialer(ns)}
	t.Cleanup(func() {
		for _, w := range n.workers {
			w.terminate(0)
			<-w.Done()
		}
		if left := n.rt.net.leftovers(); len(left) > 0 {
			t.Errorf("pod namespaces left behind: %v", left)
		}
		out, _ := exec.Command(ipBin, "-n", ns, "-o", "link", "show", "type", "veth").CombinedOutput()
		if len(strings.TrimSpace(string(out))) > 0 {
			t.Errorf("veth links left behind in %s: %s", ns, out)
		}
		for _, leftover := range n.rt.net.leftovers() {
			n.rt.net.removeNetns(context.Background(), leftover)
		}
		_ = exec.Command(ipBin, "netns", "del", ns).Run()
	})
	ip("-n", ns, "link", "set", "lo", "up")
	ip("-n", ns, "link", "add", "swbr0", "type", "bridge")
	ip("-n", ns, "addr", "add", "198.18.0.1/16", "dev", "swbr0")
	ip("-n", ns, "link", "set", "swbr0", "up")

	n.api = newFakeAPI(clock.RealClock{})
	rt, err := newPodRuntime(Config{
		ClusterNetns: ns,
		Bridge:       "swbr0",
		Images:       map[string]string{"swell/test-http": testHTTPServer(t), "swell/shell": "/bin/sh"},
		StateDir:     n.dir,
		Log:          slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})),
	}, apiAccess{api: n.api, server: testAPIServer, ca: []byte(testCA)}, clock.RealClock{}, n.dial)
	if err != nil {
		t.Fatal(err)
	}
	n.rt = rt
	return n
}

// What the pods of the runtime tests are told of the apiserver; nothing
// listens there.
const (
	testAPIServer = "https://198.18.0.1:6443"
	testCA        = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
)

// netnsDialer dials from inside the named network namespace: the socket is
// created on a thread that entered it.
func netnsDialer(ns string) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		goruntime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			goruntime.UnlockOSThread()
			return nil, err
		}
		defer orig.Close()
		target, err := os.Open("/run/netns/" + ns)
		if err != nil {
			goruntime.UnlockOSThread()
			return nil, err
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			goruntime.UnlockOSThread()
			return nil, err
		}
		conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			goruntime.UnlockOSThread() // else the thread, stuck in ns, ends with the goroutine
		}
		return conn, err
	}
}

// run starts the pod and returns its worker and a channel that receives
// after each status change.
func (n *testNode) run(t *testing.T, pod *corev1.Pod) (*podWorker, <-chan struct{}) {
	t.Helper()
	if pod.UID == "" {
		pod.UID = types.UID(randomHex(4) + "-0000-4000-8000-" + randomHex(6))
	}
	if pod.Namespace == "" {
		pod.Namespace = "default"
	}
	changed := make(chan struct{}, 1)
	w := n.rt.start(pod, func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	})
	n.workers = append(n.workers, w)
	return w, changed
}

// waitStatus waits, change by change, until cond holds for the pod's status.
func waitStatus(t *testing.T, w *podWorker, changed <-chan struct{}, what string, cond func(corev1.PodStatus) bool) corev1.PodStatus {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		s := w.status(nil)
		if cond(s) {
			return s
		}
		select {
		case <-changed:
		case <-w.Done():
			if s = w.status(nil); cond(s) {
				return s
			}
			t.Fatalf("pod stopped before %s; status %+v", what, s)
		case <-deadline:
			t.Fatalf("timed out waiting for %s; status %+v", what, s)
		}
	}
}

func podCondition(s corev1.PodStatus, c corev1.PodConditionType) bool {
	for _, x := range s.Conditions {
		if x.Type == c {
			return x.Status == corev1.ConditionTrue
		}
	}
	return false
}

func shellContainer(name, script string, env ...corev1.EnvVar) corev1.Container {
	return corev1.Container{Name: name, Image: "swell/shell", Command: []string{"/bin/sh", "-c", script}, Env: env}
}

func envVal(name, value string) corev1.EnvVar { return corev1.EnvVar{Name: name, Value: value} }

func pidOf(t *testing.T, s corev1.ContainerStatus) int {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimPrefix(s.ContainerID, "swell://"))
	if err != nil {
		t.Fatalf("containerID %q: want swell://<pid>", s.ContainerID)
	}
	return pid
}

func TestPodNetworkProbesAndCleanup(t *testing.T) {
	n := newTestNode(t)
	out := filepath.Join(t.TempDir(), "fetched")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{
				Name: "server", Image: "swell/test-http:latest",
				Env: []corev1.EnvVar{
					{Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					{Name: "IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
					envVal("MESSAGE", "hello from $(POD) at $(IP)"),
					envVal("LISTEN", ":8080"),
				},
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
					HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromString("http")}}},
			},
			{
				// Reaches the server over the pod's shared localhost.
				Name: "client", Image: "swell/test-http",
				Env: []corev1.EnvVar{envVal("FETCH", "http://127.0.0.1:8080/"), envVal("FETCH_OUT", out),
					envVal("LISTEN", ":8081")},
				ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
					TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8081)}}},
			},
			{
				Name: "sidecar", Image: "swell/shell", Command: []string{"/bin/sh", "-c", "touch ready; exec sleep 1000"},
				ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
					Exec: &corev1.ExecAction{Command: []string{"/bin/sh", "-c", "test -e " + filepath.Join(n.dir, "pods", "default_web_*", "sidecar", "ready")}}}},
			},
		}},
	}
	w, changed := n.run(t, pod)
	s := waitStatus(t, w, changed, "pod Ready", func(s corev1.PodStatus) bool { return podCondition(s, corev1.PodReady) })
	if s.Phase != corev1.PodRunning || !strings.HasPrefix(s.PodIP, "198.18.1.") || s.HostIP != "198.18.0.1" {
		t.Errorf("phase %s podIP %s hostIP %s; want Running, 198.18.1.x, 198.18.0.1", s.Phase, s.PodIP, s.HostIP)
	}
	for _, c := range s.ContainerStatuses {
		if !c.Ready || c.State.Running == nil || c.RestartCount != 0 || !strings.HasPrefix(c.ContainerID, "swell://") || c.Started == nil || !*c.Started {
			t.Errorf("container %s: %+v", c.Name, c)
		}
	}

	// The node reaches the pod IP through the bridge.
	client := &http.Client{Transport: &http.Transport{DialContext: n.dial, DisableKeepAlives: true}}
	resp, err := client.Get("http://" + s.PodIP + ":8080/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := "hello from web at " + s.PodIP
	if string(body) != want {
		t.Errorf("GET pod IP: %q, want %q", body, want)
	}
	if got, err := os.ReadFile(out); err != nil || string(got) != want {
		t.Errorf("the second container fetched %q (%v) over localhost, want %q", got, err, want)
	}

	var pids []int
	for _, c := range s.ContainerStatuses {
		pids = append(pids, pidOf(t, c))
	}
	netns := w.netns
	w.terminate(5 * time.Second)
	<-w.Done()
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d still exists after the pod stopped (kill 0: %v)", pid, err)
		}
	}
	if _, err := os.Stat("/run/netns/" + netns); !os.IsNotExist(err) {
		t.Errorf("netns %s still exists: %v", netns, err)
	}
}

func TestRestartWithBackoff(t *testing.T) {
	n := newTestNode(t)
	runs := filepath.Join(t.TempDir(), "runs")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "crasher"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			shellContainer("c", `date +%s.%N >> "$RUNS"; exit 3`, envVal("RUNS", runs)),
		}},
	}
	w, changed := n.run(t, pod)
	sawBackoff := false
	s := waitStatus(t, w, changed, "two restarts", func(s corev1.PodStatus) bool {
		c := s.ContainerStatuses[0]
		if c.State.Waiting != nil && c.State.Waiting.Reason == "CrashLoopBackOff" {
			sawBackoff = true
		}
		return c.RestartCount >= 2 && c.State.Running == nil
	})
	c := s.ContainerStatuses[0]
	if last := c.LastTerminationState.Terminated; last == nil || last.ExitCode != 3 || last.Reason != "Error" {
		t.Errorf("lastState %+v, want terminated with exit code 3, reason Error", c.LastTerminationState)
	}
	if !sawBackoff {
		t.Error("never saw the container waiting in CrashLoopBackOff")
	}
	lines, _ := os.ReadFile(runs)
	var times []float64
	for _, l := range strings.Fields(string(lines)) {
		f, _ := strconv.ParseFloat(l, 64)
		times = append(times, f)
	}
	if len(times) < 3 {
		t.Fatalf("ran %d times, want 3", len(times))
	}
	// Backoff 1s, then 2s (the process itself takes a few ms).
	if d1, d2 := times[1]-times[0], times[2]-times[1]; d1 < 0.9 || d2 < 1.9 {
		t.Errorf("restarts after %.2fs and %.2fs, want ≥1s and ≥2s", d1, d2)
	}
	for i := range 2 {
		if _, err := os.Stat(filepath.Join(w.dir, "c", strconv.Itoa(i)+".log")); err != nil {
			t.Errorf("log of run %d: %v", i, err)
		}
	}
}

func TestRestartPolicies(t *testing.T) {
	n := newTestNode(t)
	for _, tc := range []struct {
		policy corev1.RestartPolicy
		code   int
		phase  corev1.PodPhase
	}{
		{corev1.RestartPolicyNever, 3, corev1.PodFailed},
		{corev1.RestartPolicyOnFailure, 0, corev1.PodSucceeded},
	} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "once-" + strings.ToLower(string(tc.policy))},
			Spec: corev1.PodSpec{RestartPolicy: tc.policy, Containers: []corev1.Container{
				shellContainer("c", "exit "+strconv.Itoa(tc.code)),
			}},
		}
		w, changed := n.run(t, pod)
		s := waitStatus(t, w, changed, string(tc.phase), func(s corev1.PodStatus) bool { return s.Phase == tc.phase })
		<-w.Done()
		c := w.status(nil).ContainerStatuses[0]
		if c.RestartCount != 0 || c.State.Terminated == nil || int(c.State.Terminated.ExitCode) != tc.code {
			t.Errorf("%s: container %+v", tc.policy, c)
		}
		if podCondition(s, corev1.PodReady) {
			t.Errorf("%s: a completed pod is Ready", tc.policy)
		}
	}
}

func TestGracePeriodThenSIGKILL(t *testing.T) {
	n := newTestNode(t)
	started := filepath.Join(t.TempDir(), "started")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "stubborn"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			shellContainer("ignores-term", `trap "" TERM; touch "$S.1"; while :; do sleep 0.05; done`, envVal("S", started)),
			shellContainer("obeys-term", `trap "exit 0" TERM; touch "$S.2"; while :; do sleep 0.05; done`, envVal("S", started)),
		}},
	}
	w, changed := n.run(t, pod)
	waitStatus(t, w, changed, "containers running", func(s corev1.PodStatus) bool { return podCondition(s, corev1.PodReady) })
	for _, f := range []string{started + ".1", started + ".2"} { // the traps are set once the files exist
		clustertest.Eventually(t, 5*time.Second, f, func() error {
			_, err := os.Stat(f)
			return err
		})
	}
	begin := time.Now()
	w.terminate(time.Second)
	<-w.Done()
	took := time.Since(begin)
	s := w.status(nil)
	byName := map[string]*corev1.ContainerStateTerminated{}
	for _, c := range s.ContainerStatuses {
		byName[c.Name] = c.State.Terminated
	}
	if got := byName["ignores-term"]; got == nil || got.ExitCode != 137 || got.Signal != 9 {
		t.Errorf("ignores-term: %+v, want SIGKILLed (exit code 137)", got)
	}
	if got := byName["obeys-term"]; got == nil || got.ExitCode != 0 {
		t.Errorf("obeys-term: %+v, want exit code 0 on SIGTERM", got)
	}
	if took < time.Second || took > 4*time.Second {
		t.Errorf("stopping took %s, want the grace period of 1s before SIGKILL", took)
	}
}

func TestPreStopRunsBeforeSIGTERM(t *testing.T) {
	n := newTestNode(t)
	events := filepath.Join(t.TempDir(), "events")
	c := shellContainer("c", `trap 'echo term >> "$F"; exit 0' TERM; echo started >> "$F"; while :; do sleep 0.05; done`, envVal("F", events))
	c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
		Exec: &corev1.ExecAction{Command: []string{"/bin/sh", "-c", `echo prestop >> "$F"`}}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "hooked"}, Spec: corev1.PodSpec{Containers: []corev1.Container{c}}}
	w, changed := n.run(t, pod)
	waitStatus(t, w, changed, "running", func(s corev1.PodStatus) bool { return podCondition(s, corev1.PodReady) })
	readWhenWritten(t, events) // the trap is set
	w.terminate(5 * time.Second)
	<-w.Done()
	got, _ := os.ReadFile(events)
	if want := "started\nprestop\nterm\n"; string(got) != want {
		t.Errorf("events %q, want %q", got, want)
	}
	if term := w.status(nil).ContainerStatuses[0].State.Terminated; term == nil || term.ExitCode != 0 {
		t.Errorf("terminated %+v, want exit code 0", term)
	}
}

func TestLivenessFailureRestarts(t *testing.T) {
	n := newTestNode(t)
	grace := int64(1)
	c := shellContainer("c", "exec sleep 1000")
	c.LivenessProbe = &corev1.Probe{PeriodSeconds: 1, FailureThreshold: 1, ProbeHandler: corev1.ProbeHandler{
		TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(9)}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "unhealthy"},
		Spec: corev1.PodSpec{TerminationGracePeriodSeconds: &grace, Containers: []corev1.Container{c}}}
	w, changed := n.run(t, pod)
	s := waitStatus(t, w, changed, "a restart", func(s corev1.PodStatus) bool { return s.ContainerStatuses[0].RestartCount >= 1 })
	if last := s.ContainerStatuses[0].LastTerminationState.Terminated; last == nil || last.ExitCode != 143 {
		t.Errorf("lastState %+v, want terminated by SIGTERM (143)", s.ContainerStatuses[0].LastTerminationState)
	}
}

func TestUnknownImage(t *testing.T) {
	n := newTestNode(t)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "nginx"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx:1.27"}}}}
	w, changed := n.run(t, pod)
	s := waitStatus(t, w, changed, "ErrImagePull", func(s corev1.PodStatus) bool {
		st := s.ContainerStatuses[0].State.Waiting
		return st != nil && st.Reason == "ErrImagePull"
	})
	if msg := s.ContainerStatuses[0].State.Waiting.Message; !strings.Contains(msg, "image table") {
		t.Errorf("message %q does not name the image table", msg)
	}
	if s.Phase != corev1.PodPending {
		t.Errorf("phase %s, want Pending", s.Phase)
	}
}

func TestInitContainersRunInOrder(t *testing.T) {
	n := newTestNode(t)
	f := filepath.Join(t.TempDir(), "order")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "init"},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{
				shellContainer("one", `echo one >> "$F"`, envVal("F", f)),
				shellContainer("two", `echo two >> "$F"`, envVal("F", f)),
			},
			Containers: []corev1.Container{shellContainer("main", `echo main >> "$F"; exec sleep 1000`, envVal("F", f))},
		}}
	w, changed := n.run(t, pod)
	s := waitStatus(t, w, changed, "Ready", func(s corev1.PodStatus) bool { return podCondition(s, corev1.PodReady) })
	if !podCondition(s, corev1.PodInitialized) {
		t.Error("Initialized is not True")
	}
	for _, c := range s.InitContainerStatuses {
		if c.State.Terminated == nil || c.State.Terminated.Reason != "Completed" {
			t.Errorf("init container %s: %+v", c.Name, c.State)
		}
	}
	clustertest.Eventually(t, 5*time.Second, "the containers' lines in order", func() error {
		if b, _ := os.ReadFile(f); string(b) != "one\ntwo\nmain\n" {
			return fmt.Errorf("order %q, want one two main", b)
		}
		return nil
	})
}

func TestLeftoversOfAnEarlierRunRemoved(t *testing.T) {
	n := newTestNode(t)
	stale := n.netns + "-deadbeef"
	if out, err := exec.Command(n.rt.net.ip, "netns", "add", stale).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Cleanup(func() { n.rt.net.removeNetns(context.Background(), stale) })
	orphan := exec.Command(n.rt.net.ip, "netns", "exec", stale, "sleep", "1000")
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- orphan.Wait() }()
	// A leftover of an earlier run has long been inside its namespace:
	// wait until this one is, or the removal races its entering.
	pid := strconv.Itoa(orphan.Process.Pid)
	clustertest.Eventually(t, 5*time.Second, "process "+pid+" in "+stale, func() error {
		out, err := exec.Command(n.rt.net.ip, "netns", "pids", stale).Output()
		if !slices.Contains(strings.Fields(string(out)), pid) {
			return fmt.Errorf("ip netns pids: %q (%v)", out, err)
		}
		return nil
	})
	if got := n.rt.net.leftovers(); len(got) != 1 || got[0] != stale {
		t.Fatalf("leftovers %v, want [%s]", got, stale)
	}
	n.rt.net.removeNetns(context.Background(), stale)
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		t.Error("the process in the stale namespace was not killed")
	}
	if got := n.rt.net.leftovers(); len(got) != 0 {
		t.Errorf("leftovers after removal: %v", got)
	}
}

// readWhenWritten waits for a container to write the file at path.
func readWhenWritten(t *testing.T, path string) string {
	t.Helper()
	var b []byte
	clustertest.Eventually(t, 5*time.Second, "line written to "+path, func() error {
		var err error
		if b, err = os.ReadFile(path); err == nil && !bytes.HasSuffix(b, []byte("\n")) {
			err = fmt.Errorf("%q has no complete line", b)
		}
		return err
	})
	return string(b)
}

func TestServiceAccountCredentials(t *testing.T) {
	n := newTestNode(t)
	n.api.life = time.Second // so the token is replaced every second
	out := filepath.Join(t.TempDir(), "out")
	init := shellContainer("init", `echo "$KUBECONFIG $KUBERNETES_SERVICE_HOST $KUBERNETES_SERVICE_PORT $(cat "${KUBECONFIG%/*}/token")" > "$OUT.init"`,
		envVal("OUT", out))
	// The container sets a port of its own, which wins. It becomes ready
	// once it reads a replaced token where its kubeconfig says.
	main := shellContainer("main", `echo "$KUBECONFIG $KUBERNETES_SERVICE_HOST $KUBERNETES_SERVICE_PORT" > "$OUT.main"; exec sleep 1000`,
		envVal("OUT", out), envVal("KUBERNETES_SERVICE_PORT", "443"))
	main.ReadinessProbe = &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{
		"/bin/sh", "-c", `dir=${KUBECONFIG%/*}; grep -q "tokenFile: $dir/token" "$KUBECONFIG" && test "$(cat "$dir/token")" != token-1`}}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "client"}, Spec: corev1.PodSpec{
		ServiceAccountName: "runner",
		InitContainers:     []corev1.Container{init},
		Containers:         []corev1.Container{main},
	}}
	w, changed := n.run(t, pod)
	waitStatus(t, w, changed, "Ready after a token refresh", func(s corev1.PodStatus) bool { return podCondition(s, corev1.PodReady) })

	dir := filepath.Join(w.dir, "kubernetes.io", "serviceaccount")
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if got, want := readWhenWritten(t, out+".init"), kubeconfig+" 198.18.0.1 6443 token-1\n"; got != want {
		t.Errorf("the init container saw %q, want %q", got, want)
	}
	if got, want := readWhenWritten(t, out+".main"), kubeconfig+" 198.18.0.1 443\n"; got != want {
		t.Errorf("the container saw %q, want %q", got, want)
	}
	for name, want := range map[string]string{"ca.crt": testCA, "namespace": "default"} {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != want {
			t.Errorf("%s: %q (%v), want %q", name, b, err, want)
		}
	}
	if n.api.tokensIssued("client") < 2 {
		t.Errorf("%d tokens issued, want a refresh", n.api.tokensIssued("client"))
	}

	w.terminate(time.Second)
	<-w.Done()
	if _, err := os.Stat(filepath.Dir(dir)); !os.IsNotExist(err) {
		t.Errorf("the service account files outlive the pod: %v", err)
	}
}

func TestNoServiceAccountToken(t *testing.T) {
	n := newTestNode(t)
	no := false
	n.api.accounts["default/quiet"] = &corev1.ServiceAccount{AutomountServiceAccountToken: &no}
	for _, pod := range []*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "pod-says-no"}, Spec: corev1.PodSpec{AutomountServiceAccountToken: &no}},
		{ObjectMeta: metav1.ObjectMeta{Name: "account-says-no"}, Spec: corev1.PodSpec{ServiceAccountName: "quiet"}},
	} {
		out := filepath.Join(t.TempDir(), "out")
		pod.Spec.RestartPolicy = corev1.RestartPolicyNever
		pod.Spec.Containers = []corev1.Container{shellContainer("c",
			`echo "${KUBECONFIG-unset} ${KUBERNETES_SERVICE_HOST-unset} ${KUBERNETES_SERVICE_PORT-unset}" > "$OUT"`, envVal("OUT", out))}
		w, changed := n.run(t, pod)
		waitStatus(t, w, changed, "Succeeded", func(s corev1.PodStatus) bool { return s.Phase == corev1.PodSucceeded })
		if got := readWhenWritten(t, out); got != "unset unset unset\n" {
			t.Errorf("%s: the container saw %q, want no apiserver variables", pod.Name, got)
		}
		if _, err := os.Stat(filepath.Join(w.dir, "kubernetes.io")); !os.IsNotExist(err) {
			t.Errorf("%s: service account files exist: %v", pod.Name, err)
		}
		if got := n.api.tokensIssued(pod.Name); got != 0 {
			t.Errorf("%s: %d tokens issued, want none", pod.Name, got)
		}
	}
}

func TestContainersWaitForTheirToken(t *testing.T) {
	n := newTestNode(t)
	n.api.failNext = 1
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "patient"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{shellContainer("c", "exec sleep 1000")}}}
	w, changed := n.run(t, pod)
	s := waitStatus(t, w, changed, "a container waiting for its token", func(s corev1.PodStatus) bool {
		st := s.ContainerStatuses[0].State.Waiting
		return st != nil && strings.Contains(st.Message, "service account token")
	})
	c := s.ContainerStatuses[0]
	if c.State.Waiting.Reason != "ContainerCreating" || c.ContainerID != "" || s.Phase != corev1.PodPending {
		t.Errorf("while the token is refused: phase %s, container %+v; want Pending, ContainerCreating and no process", s.Phase, c)
	}
	if !strings.Contains(c.State.Waiting.Message, "forbidden") {
		t.Errorf("message %q does not say why", c.State.Waiting.Message)
	}
	s = waitStatus(t, w, changed, "Ready once the token came", func(s corev1.PodStatus) bool { return podCondition(s, corev1.PodReady) })
	if msg := s.ContainerStatuses[0].State; msg.Running == nil {
		t.Errorf("state %+v, want running", msg)
	}
}

func TestEnvWaitsForItsSecret(t *testing.T) {
	n := newTestNode(t)
	out := filepath.Join(t.TempDir(), "out")
	c := shellContainer("c", `echo "$PASSWORD" > "$OUT"; exec sleep 1000`, envVal("OUT", out), corev1.EnvVar{
		Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "password"}}})
	// Probes and hooks see the container's environment as it started.
	c.ReadinessProbe = &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{
		Command: []string{"/bin/sh", "-c", `test "$PASSWORD" = s3cret`}}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "secretive"}, Spec: corev1.PodSpec{Containers: []corev1.Container{c}}}
	w, changed := n.run(t, pod)
	s := waitStatus(t, w, changed, "CreateContainerConfigError", func(s corev1.PodStatus) bool {
		st := s.ContainerStatuses[0].State.Waiting
		return st != nil && st.Reason == "CreateContainerConfigError"
	})
	if msg := s.ContainerStatuses[0].State.Waiting.Message; !strings.Contains(msg, "Secret default/creds: not found") {
		t.Errorf("message %q, want it to name the missing Secret", msg)
	}
	n.api.mu.Lock()
	n.api.secrets["default/creds"] = &corev1.Secret{Data: map[string][]byte{"password": []byte("s3cret")}}
	n.api.mu.Unlock()
	waitStatus(t, w, changed, "Ready once the Secret exists", func(s corev1.PodStatus) bool { return podCondition(s, corev1.PodReady) })
	if got := readWhenWritten(t, out); got != "s3cret\n" {
		t.Errorf("PASSWORD=%q, want s3cret", got)
	}
}

// TestReusedIPAnswersAtOnce: a pod that gets the IP of a pod just gone is
// reached at once, by the node (its readiness probe) and by another pod
// that talked to the old one, though their neighbour caches may still hold
// the old pod's entry. With a random MAC per pod the second pod stayed
// unreachable until those entries expired.
func TestReusedIPAnswersAtOnce(t *testing.T) {
	n := newTestNode(t)
	bystander, changed := n.run(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bystander"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{shellContainer("c", "exec sleep 1000")}}})
	waitStatus(t, bystander, changed, "bystander Ready", func(s corev1.PodStatus) bool { return podCondition(s, corev1.PodReady) })
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: netnsDialer(bystander.netns), DisableKeepAlives: true}}
	var ips []string
	for _, name := range []string{"first", "second"} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "server", Image: "swell/test-http",
			Env: []corev1.EnvVar{envVal("MESSAGE", name), envVal("LISTEN", ":8080")},
			ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
				TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}},
		}}}}
		w, changed := n.run(t, pod)
		s := waitStatus(t, w, changed, name+" Ready", func(s corev1.PodStatus) bool { return podCondition(s, corev1.PodReady) })
		ips = append(ips, s.PodIP)
		out, err := exec.Command(n.rt.net.ip, "-n", w.netns, "-br", "link", "show", "eth0").Output()
		if want := podMAC(netip.MustParseAddr(s.PodIP)); err != nil || !strings.Contains(string(out), want) {
			t.Errorf("%s: eth0 %q (%v), want MAC %s", name, out, err, want)
		}
		resp, err := client.Get("http://" + s.PodIP + ":8080/")
		if err != nil {
			t.Fatalf("GET %s at %s from another pod: %v", name, s.PodIP, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != name {
			t.Errorf("GET %s: %q, want %q", s.PodIP, body, name)
		}
		w.terminate(time.Second)
		<-w.Done()
	}
	if ips[0] != ips[1] {
		t.Fatalf("the second pod got %s, not the first's %s: the test shows nothing", ips[1], ips[0])
	}
}
