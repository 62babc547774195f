package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"

	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/kube/statusview"
	"github.com/swell-run/swell/local"
)

func TestStatusTableAndJSON(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	st := local.Status{Time: at, Address: "127.0.0.1:8080", Services: []local.ServiceStatus{
		{Name: "hello", Ready: 6, Desired: 6, Route: "activator", Metric: "concurrency", TargetPerPod: 7,
			Load: 42.4, Stable: 38, Panic: 41, PanicMode: true, ExcessBurstCapacity: -192, Queued: 3,
			Reason: "panic: wants 6 pods for 6 ready at target 7",
			Events: []local.Event{{Time: at, Text: "hello: scale 0→1 (poke)"}, {Time: at, Text: "hello: panic — 19 in flight for 1 pod at target 7"}}},
		{Name: "idle", Route: "activator", Metric: "rps", TargetPerPod: 140, ExcessBurstCapacity: -1e308},
	}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != local.StatusPath {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(st)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")

	code, out, errs := swell(t, "status", "--addr", addr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{
		"SERVICE  READY  DESIRED  ROUTE",
		"hello    6      6        activator  concurrency  42.4  38.0    41.0   7           yes         -192            3",
		"idle     0      0        activator  rps          0.0   0.0     0.0    140         no          -inf            0",
		"hello (now: panic: wants 6 pods for 6 ready at target 7)",
		"hello: panic — 19 in flight for 1 pod at target 7",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}

	code, out, _ = swell(t, "status", "--addr", srv.URL, "-o", "json", "idle")
	var got local.Status
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil {
		t.Fatalf("-o json: exit %d, %v:\n%s", code, err, out)
	}
	if len(got.Services) != 1 || got.Services[0].Name != "idle" {
		t.Errorf("-o json idle: %+v, want the idle service only", got.Services)
	}

	if code, _, errs := swell(t, "status", "--addr", addr, "nope"); code != 1 || !strings.Contains(errs, "no service named nope") {
		t.Errorf("unknown service: exit %d, %q", code, errs)
	}
	srv.Close()
	if code, _, errs := swell(t, "status", "--addr", addr); code != 1 || !strings.Contains(errs, "is swell local running?") {
		t.Errorf("nothing listening: exit %d, %q", code, errs)
	}
}

var statusAt = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// The same service, from swell local and from a cluster, prints the same
// table; -A puts NAMESPACE in front of the same columns.
func TestStatusTableSameForLocalAndCluster(t *testing.T) {
	ls := local.Status{Services: []local.ServiceStatus{{
		Name: "hello", Ready: 6, Desired: 6, Route: "activator", Metric: "concurrency", TargetPerPod: 7,
		Load: 42.4, Stable: 38, Panic: 41, PanicMode: true, ExcessBurstCapacity: -math.MaxFloat64, Queued: 3,
		Reason: "panic: wants 6 pods for 6 ready at target 7",
		Events: []local.Event{{Time: statusAt, Text: "scale 1→6"}},
	}}}
	cv := statusview.View{Services: []statusview.Service{{
		Namespace: "default", Name: "hello", Ready: 6, Desired: 6, Decided: true, Route: "activator",
		Metric: "concurrency", TargetPerPod: 7, LoadsAsOf: statusAt,
		Load: 42.4, Stable: 38, Panic: 41, PanicMode: true, ExcessBurstCapacity: -math.MaxFloat64, Queued: 3,
		Reason: "panic: wants 6 pods for 6 ready at target 7",
		Events: []statusview.Event{{Time: statusAt, Text: "scale 1→6", Count: 1}},
	}}}
	var fromLocal, fromCluster bytes.Buffer
	printStatus(&fromLocal, localRows(ls), false, 5)
	printStatus(&fromCluster, clusterRows(cv), false, 5)
	if fromLocal.String() != fromCluster.String() {
		t.Errorf("swell local:\n%s\na cluster:\n%s", fromLocal.String(), fromCluster.String())
	}
	if want := "hello    6      6        activator  concurrency  42.4  38.0    41.0   7           yes         -inf            3"; !strings.Contains(fromCluster.String(), want) {
		t.Errorf("table lacks %q:\n%s", want, fromCluster.String())
	}

	header, lines := statusTable(clusterRows(cv), false)
	headerA, linesA := statusTable(clusterRows(cv), true)
	if got, want := strings.Fields(headerA), append([]string{"NAMESPACE"}, strings.Fields(header)...); !slices.Equal(got, want) {
		t.Errorf("-A header %q, want %q", got, want)
	}
	if got, want := strings.Fields(linesA[0]), append([]string{"default"}, strings.Fields(lines[0])...); !slices.Equal(got, want) {
		t.Errorf("-A row %q, want %q", got, want)
	}
}

// statusDeployment is an opted-in Deployment with the status annotation
// status (none when empty).
func statusDeployment(ns, name, status string, replicas, ready int32) *appsv1.Deployment {
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "-" + name),
			Labels: map[string]string{kube.LabelEnabled: "true"}},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{kube.LabelEnabled: "true"}}}},
		Status: appsv1.DeploymentStatus{ReadyReplicas: ready},
	}
	if status != "" {
		d.Annotations = map[string]string{kube.AnnotationStatus: status}
	}
	return d
}

func statusJSON(t *testing.T, st kube.Status) string {
	t.Helper()
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// statusCluster is a fake cluster: hello decided, with events; fresh not
// yet; broken with an annotation that does not read; old in team-a.
func statusCluster(t *testing.T) *fake.Clientset {
	hello := statusDeployment("default", "hello", statusJSON(t, kube.Status{
		Ready: 3, Desired: 4, Recommended: 5, Panic: true, Route: "pods", Reason: "panic: wants 5 pods for 3 ready at target 70",
		Class: "kpa", Metric: "concurrency", TargetPerPod: 70,
		Loads: kube.StatusLoads{Time: statusAt, Load: 301, Stable: 180.5, Panic: 290, ExcessBurstCapacity: -math.MaxFloat64, Queued: 12},
	}), 4, 3)
	ev := func(name, typ, reason, msg string, at time.Time, count int32) *corev1.Event {
		return &corev1.Event{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			InvolvedObject: corev1.ObjectReference{Kind: "Deployment", APIVersion: "apps/v1",
				Namespace: "default", Name: "hello", UID: hello.UID},
			Type: typ, Reason: reason, Message: msg, Count: count, LastTimestamp: metav1.NewTime(at),
			Source: corev1.EventSource{Component: kube.AutoscalerComponent},
		}
	}
	return fake.NewClientset(hello,
		statusDeployment("default", "fresh", "", 2, 1),
		statusDeployment("default", "broken", `{"ready":`, 1, 1),
		statusDeployment("team-a", "old", `{"ready":1,"desired":1,"recommended":1,"panic":false,"activatorInPath":true,"route":"activator","reason":"stable at target 10"}`, 1, 1),
		ev("e1", "Normal", "ScaledUp", "1 → 4: panic", statusAt.Add(-time.Minute), 1),
		ev("e2", "Warning", "ScaleFailed", "set scale: boom (retry in 400ms)", statusAt, 3),
	)
}

// statusOn runs `swell status args` on the cluster of client, in namespace
// ns ("" for every one).
func statusOn(ctx context.Context, t *testing.T, client kubernetes.Interface, ns string, stdout io.Writer, args ...string) (int, string) {
	t.Helper()
	var errb bytes.Buffer
	s := streams{stdout: stdout, stderr: &errb}
	f, code := parseStatusFlags(args, s)
	if f == nil {
		return code, errb.String()
	}
	return f.showView(ctx, s, client, ns), errb.String()
}

func TestStatusOnCluster(t *testing.T) {
	cs := statusCluster(t)
	var out bytes.Buffer
	if code, errs := statusOn(t.Context(), t, cs, "default", &out); code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{
		"SERVICE  READY  DESIRED  ROUTE  METRIC       LOAD   STABLE  PANIC  TARGET/POD  PANIC MODE  BURST CAPACITY  QUEUED\n",
		"broken   1      1        -      -            -      -       -      -           -           -               -\n",
		"fresh    1      2        -      -            -      -       -      -           -           -               -\n",
		"hello    3      4        pods   concurrency  301.0  180.5   290.0  70          yes         -inf            12\n",
		"\nbroken (now: status annotation unreadable: unexpected end of JSON input)\n",
		"\nhello (now: panic: wants 5 pods for 3 ready at target 70)\n",
		"  ScaledUp 1 → 4: panic\n",
		"  ScaleFailed set scale: boom (retry in 400ms) (x3)\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "old") {
		t.Errorf("namespace default shows team-a:\n%s", out.String())
	}

	out.Reset()
	if code, errs := statusOn(t.Context(), t, cs, "", &out, "-A", "--events", "0"); code != 0 {
		t.Fatalf("-A: exit %d: %s", code, errs)
	}
	for _, want := range []string{
		"NAMESPACE  SERVICE  READY",
		"default    hello    3      4        pods       concurrency",
		"team-a     old      1      1        activator  -            -",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("-A table lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "(now:") {
		t.Errorf("--events 0 shows the events:\n%s", out.String())
	}

	// The JSON's field names, as the end-to-end test reads them.
	out.Reset()
	if code, errs := statusOn(t.Context(), t, cs, "default", &out, "hello", "-o", "json"); code != 0 {
		t.Fatalf("-o json: exit %d: %s", code, errs)
	}
	var doc struct {
		Time      time.Time `json:"time"`
		Namespace string    `json:"namespace"`
		Services  []struct {
			Namespace           string    `json:"namespace"`
			Name                string    `json:"name"`
			Ready               int       `json:"ready"`
			Desired             int       `json:"desired"`
			Decided             bool      `json:"decided"`
			Recommended         int       `json:"recommended"`
			Route               string    `json:"route"`
			Class               string    `json:"class"`
			Metric              string    `json:"metric"`
			TargetPerPod        float64   `json:"targetPerPod"`
			PanicMode           bool      `json:"panicMode"`
			LoadsAsOf           time.Time `json:"loadsAsOf"`
			Load                float64   `json:"load"`
			Stable              float64   `json:"stable"`
			Panic               float64   `json:"panic"`
			ExcessBurstCapacity float64   `json:"excessBurstCapacity"`
			Queued              int       `json:"queued"`
			Reason              string    `json:"reason"`
			Events              []struct {
				Time   time.Time `json:"time"`
				Text   string    `json:"text"`
				Type   string    `json:"type"`
				Reason string    `json:"reason"`
				Count  int       `json:"count"`
			} `json:"events"`
		} `json:"services"`
	}
	dec := json.NewDecoder(&out)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("-o json: %v", err)
	}
	if len(doc.Services) != 1 || doc.Namespace != "default" {
		t.Fatalf("-o json hello: %+v", doc)
	}
	h := doc.Services[0]
	if h.Namespace != "default" || h.Name != "hello" || h.Ready != 3 || h.Desired != 4 || !h.Decided || h.Recommended != 5 ||
		h.Route != "pods" || h.Class != "kpa" || h.Metric != "concurrency" || h.TargetPerPod != 70 || !h.PanicMode ||
		!h.LoadsAsOf.Equal(statusAt) || h.Load != 301 || h.Stable != 180.5 || h.Panic != 290 ||
		h.ExcessBurstCapacity != -math.MaxFloat64 || h.Queued != 12 || len(h.Events) != 2 ||
		h.Events[1].Text != "ScaleFailed set scale: boom (retry in 400ms)" || h.Events[1].Count != 3 || h.Events[1].Type != "Warning" {
		t.Errorf("-o json hello: %+v", h)
	}

	out.Reset()
	if code, errs := statusOn(t.Context(), t, cs, "", &out, "-o", "yaml", "team-a/old"); code != 0 {
		t.Fatalf("-o yaml: exit %d: %s", code, errs)
	}
	var v statusview.View
	if err := yaml.UnmarshalStrict(out.Bytes(), &v); err != nil || len(v.Services) != 1 || v.Services[0].Route != "activator" {
		t.Errorf("-o yaml team-a/old: %v %+v\n%s", err, v, out.String())
	}

	if code, errs := statusOn(t.Context(), t, cs, "default", io.Discard, "nope"); code != 1 || !strings.Contains(errs, "no service named nope in namespace default") {
		t.Errorf("unknown service: exit %d, %q", code, errs)
	}
}

// lineWriter hands each line written to lines.
type lineWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		i := bytes.IndexByte(w.buf.Bytes(), '\n')
		if i < 0 {
			return len(p), nil
		}
		w.lines <- string(w.buf.Next(i + 1)[:i])
	}
}

func (w *lineWriter) next(t *testing.T) string {
	t.Helper()
	select {
	case l := <-w.lines:
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("no line written")
		return ""
	}
}

// redecide writes a new status annotation on default/hello: 6 desired.
func redecide(ctx context.Context, t *testing.T, cs *fake.Clientset) {
	t.Helper()
	d, err := cs.AppsV1().Deployments("default").Get(ctx, "hello", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d.Annotations[kube.AnnotationStatus] = statusJSON(t, kube.Status{Ready: 3, Desired: 6, Recommended: 6, Route: "pods",
		Reason: "stable at target 70", Class: "kpa", Metric: "concurrency", TargetPerPod: 70,
		Loads: kube.StatusLoads{Time: statusAt, Load: 400, Stable: 390, Panic: 410, ExcessBurstCapacity: 5}})
	d.Spec.Replicas = new(int32(6))
	if _, err := cs.AppsV1().Deployments("default").Update(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestStatusWatchCluster(t *testing.T) {
	t.Run("table", func(t *testing.T) {
		cs := statusCluster(t)
		ctx, cancel := context.WithCancel(t.Context())
		w := &lineWriter{lines: make(chan string, 100)}
		done := make(chan int, 1)
		go func() { code, _ := statusOn(ctx, t, cs, "default", w, "-w"); done <- code }()
		for _, prefix := range []string{"SERVICE", "broken", "fresh", "hello"} {
			if l := w.next(t); !strings.HasPrefix(l, prefix) {
				t.Fatalf("line %q, want the %s line", l, prefix)
			}
		}
		redecide(ctx, t, cs)
		if l, want := w.next(t), "hello    3      6        pods   concurrency  400.0  390.0   410.0  70          no          5               0"; l != want {
			t.Errorf("after the change: %q, want %q", l, want)
		}
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("exit %d", code)
		}
		if len(w.lines) != 0 {
			t.Errorf("more lines: %q", <-w.lines)
		}
	})
	t.Run("json", func(t *testing.T) {
		cs := statusCluster(t)
		ctx, cancel := context.WithCancel(t.Context())
		w := &lineWriter{lines: make(chan string, 100)}
		done := make(chan int, 1)
		go func() { code, _ := statusOn(ctx, t, cs, "default", w, "-w", "-o", "json"); done <- code }()
		doc := func() clusterChange {
			t.Helper()
			var c clusterChange
			if err := json.Unmarshal([]byte(w.next(t)), &c); err != nil {
				t.Fatal(err)
			}
			return c
		}
		if first := doc(); len(first.Services) != 3 {
			t.Fatalf("first document: %+v, want the 3 services", first)
		}
		redecide(ctx, t, cs)
		if c := doc(); len(c.Services) != 1 || c.Services[0].Name != "hello" || c.Services[0].Desired != 6 || len(c.Removed) != 0 {
			t.Errorf("after the change: %+v, want hello alone", c)
		}
		if err := cs.AppsV1().Deployments("default").Delete(ctx, "fresh", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if c := doc(); len(c.Services) != 0 || !slices.Equal(c.Removed, []string{"default/fresh"}) {
			t.Errorf("after the delete: %+v, want default/fresh removed", c)
		}
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("exit %d", code)
		}
	})
}

func TestStatusWatchLocal(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := int(n.Add(1))
		json.NewEncoder(w).Encode(local.Status{Time: statusAt, Services: []local.ServiceStatus{
			{Name: "hello", Ready: i, Desired: i, Route: "pods"}, {Name: "idle", Route: "activator"},
		}})
	}))
	defer srv.Close()
	defer func(p time.Duration) { statusPoll = p }(statusPoll)
	statusPoll = time.Millisecond

	ctx, cancel := context.WithCancel(t.Context())
	w := &lineWriter{lines: make(chan string, 1000)}
	done := make(chan int, 1)
	go func() {
		done <- dispatch(ctx, []string{"status", "--addr", srv.URL, "-w", "-o", "json"}, streams{stdout: w, stderr: io.Discard})
	}()
	for i := range 3 {
		var c localChange
		if err := json.Unmarshal([]byte(w.next(t)), &c); err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int{true: 2, false: 1}[i == 0]; len(c.Services) != want || c.Services[0].Name != "hello" || c.Services[0].Desired != i+1 {
			t.Errorf("document %d: %+v, want hello at %d (and idle in the first)", i, c.Services, i+1)
		}
	}
	cancel()
	for {
		select {
		case <-w.lines: // polled on meanwhile
			continue
		case code := <-done:
			if code != 0 {
				t.Errorf("exit %d", code)
			}
		}
		return
	}
}

func TestStatusFlags(t *testing.T) {
	for _, tc := range []struct {
		args string
		want string
	}{
		{"-o xml", `-o "xml"; accepted: table, json or yaml`},
		{"--events -1", "--events -1; accepted: a count ≥ 0"},
		{"--addr 127.0.0.1:1 -n default", "--addr shows swell local, --kubeconfig, --context, -n and -A a cluster; give one or the other"},
		{"--addr 127.0.0.1:1 --context kind", "give one or the other"},
		{"-A -n default", `-A shows every namespace and -n "default" one`},
		{"--bogus", "flag provided but not defined: -bogus (see swell status --help)"},
	} {
		code, out, errs := swell(t, append([]string{"status"}, strings.Fields(tc.args)...)...)
		if code != 2 || out != "" || !strings.Contains(errs, tc.want) {
			t.Errorf("swell status %s: exit %d, %q %q; want exit 2 and %q", tc.args, code, out, errs, tc.want)
		}
	}

	// Flags after the services, as kubectl takes them.
	f, code := parseStatusFlags([]string{"hello", "-n", "team-a", "world", "--output=yaml", "--", "-x"}, streams{stdout: io.Discard, stderr: io.Discard})
	if f == nil {
		t.Fatalf("exit %d", code)
	}
	if !slices.Equal(f.names, []string{"hello", "world", "-x"}) || f.namespace != "team-a" || f.output != "yaml" || !f.onCluster() {
		t.Errorf("parsed %+v", f)
	}
}

// writeKubeconfig writes a kubeconfig of a cluster at server whose
// current context's namespace is ns.
func writeKubeconfig(t *testing.T, server, ns string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config")
	text := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: %q}
users:
- name: u
  user: {}
contexts:
- name: one
  context: {cluster: c, user: u, namespace: %s}
current-context: one
`, server, ns)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// closedAddr is an address where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// Which it shows: swell local when it answers and nothing names a
// cluster, the cluster otherwise, and always the cluster as kubectl swell.
func TestStatusTarget(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	defer func(a, p string) { statusAddr, prog = a, p }(statusAddr, prog)
	localSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(local.Status{Services: []local.ServiceStatus{{Name: "on-my-laptop", Route: "pods"}}})
	}))
	defer localSrv.Close()
	// A cluster that refuses connections: reaching it shows in the error.
	kubeconfig := writeKubeconfig(t, "http://"+closedAddr(t), "team-a")
	onCluster := "read namespace team-a: list "

	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	statusAddr = closedAddr(t)
	if code, _, errs := swell(t, "status"); code != 1 || !strings.Contains(errs, "is swell local running?") || !strings.Contains(errs, "no cluster is configured") {
		t.Errorf("neither: exit %d, %q", code, errs)
	}
	statusAddr = strings.TrimPrefix(localSrv.URL, "http://")
	if code, out, errs := swell(t, "status"); code != 0 || !strings.Contains(out, "on-my-laptop") {
		t.Errorf("swell local alone: exit %d, %q %q", code, out, errs)
	}
	if code, _, errs := swell(t, "status", "--kubeconfig", kubeconfig); code != 1 || !strings.Contains(errs, onCluster) {
		t.Errorf("--kubeconfig: exit %d, %q; want the cluster's error", code, errs)
	}
	if code, _, errs := swell(t, "status", "--kubeconfig", filepath.Join(t.TempDir(), "missing")); code != 1 || !strings.Contains(errs, "find the cluster") {
		t.Errorf("--kubeconfig missing: exit %d, %q", code, errs)
	}

	t.Setenv("KUBECONFIG", kubeconfig)
	if code, out, errs := swell(t, "status"); code != 0 || !strings.Contains(out, "on-my-laptop") {
		t.Errorf("both, swell local answers: exit %d, %q %q; want swell local", code, out, errs)
	}
	if code, _, errs := swell(t, "status", "-A"); code != 1 || !strings.Contains(errs, "read every namespace: list ") {
		t.Errorf("both, -A: exit %d, %q; want the cluster's error", code, errs)
	}
	if code, _, errs := swell(t, "status", "-n", "team-b"); code != 1 || !strings.Contains(errs, "read namespace team-b: list ") {
		t.Errorf("both, -n team-b: exit %d, %q; want the cluster's error", code, errs)
	}
	statusAddr = closedAddr(t)
	if code, _, errs := swell(t, "status"); code != 1 || !strings.Contains(errs, onCluster) {
		t.Errorf("the cluster alone: exit %d, %q; want the cluster's error", code, errs)
	}

	prog = "kubectl swell"
	statusAddr = strings.TrimPrefix(localSrv.URL, "http://")
	if code, _, errs := swell(t, "status"); code != 1 || !strings.HasPrefix(errs, "kubectl swell status: ") || !strings.Contains(errs, onCluster) {
		t.Errorf("kubectl swell status: exit %d, %q; want the cluster's error", code, errs)
	}
	if code, out, errs := swell(t, "status", "--addr", localSrv.URL); code != 0 || !strings.Contains(out, "on-my-laptop") {
		t.Errorf("kubectl swell status --addr: exit %d, %q %q; want swell local", code, out, errs)
	}
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	if code, _, errs := swell(t, "status"); code != 1 || !strings.HasPrefix(errs, "kubectl swell status: no cluster is configured") {
		t.Errorf("kubectl swell status without a kubeconfig: exit %d, %q", code, errs)
	}
}

func TestKubectlPlugin(t *testing.T) {
	for arg0, want := range map[string]string{
		"/usr/local/bin/kubectl-swell": "kubectl swell", `C:\bin\kubectl-swell.exe`: "swell", "kubectl-swell.exe": "kubectl swell",
		"./bin/swell": "swell", "swell": "swell",
	} {
		if got := progName(arg0); got != want {
			t.Errorf("progName(%q) = %q, want %q", arg0, got, want)
		}
	}
	defer func(p string) { prog = p }(prog)
	prog = "kubectl swell"
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "Usage: kubectl swell COMMAND"},
		{[]string{"help"}, 0, "Run 'kubectl swell help COMMAND' (or 'kubectl swell COMMAND --help')"},
		{[]string{"help", "status"}, 0, "Usage: kubectl swell status [flags] [SERVICE...]"},
		{[]string{"status", "--help"}, 0, "or run as kubectl swell"},
		{[]string{"nope"}, 2, `kubectl swell: unknown command "nope"`},
		{[]string{"help", "nope"}, 2, `kubectl swell help: unknown command "nope"`},
		{[]string{"status", "-o", "xml"}, 2, `kubectl swell status: -o "xml"`},
	} {
		code, out, errs := swell(t, tc.args...)
		if code != tc.code || !strings.Contains(out+errs, tc.want) {
			t.Errorf("kubectl swell %v: exit %d, %q %q; want exit %d and %q", tc.args, code, out, errs, tc.code, tc.want)
		}
	}
}
