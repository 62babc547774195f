package activator

import (
	"context"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/swell-run/swell/pkg/network"
)

// fakeDirectory is a CallerDirectory held in memory.
type fakeDirectory struct {
	mu      sync.Mutex
	ns      map[netip.Addr]string
	updated chan struct{}
}

func newFakeDirectory(kv ...string) *fakeDirectory {
	d := &fakeDirectory{ns: map[netip.Addr]string{}, updated: make(chan struct{})}
	for i := 0; i+1 < len(kv); i += 2 {
		d.ns[netip.MustParseAddr(kv[i])] = kv[i+1]
	}
	return d
}

func (d *fakeDirectory) Namespace(ip netip.Addr) (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ns, ok := d.ns[ip]
	return ns, ok
}

func (d *fakeDirectory) Updated() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.updated
}

func (d *fakeDirectory) set(ip, ns string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ns[netip.MustParseAddr(ip)] = ns
	close(d.updated)
	d.updated = make(chan struct{})
}

const testHint = "The annotation swell.run/allowed-callers admits others."

// callersEnv is an activator that knows callers' namespaces from dir, with
// tenant-a/app served by one pod.
func callersEnv(t *testing.T, dir CallerDirectory, callers Callers) (*testEnv, *fakePod, chan string) {
	t.Helper()
	pod := newFakePod(t, "app", true)
	pokes := make(chan string, 10)
	src := NewMemorySource(Service{Key: mustKey("tenant-a/app"), Pods: []Pod{pod.pod()}, Callers: callers})
	e := newEnv(t, src, func(c *Config) {
		c.Callers, c.CallersHint = dir, testHint
		c.Poke = func(s string) { pokes <- s }
	}, nil)
	e.waitRoutable(t, mustKey("tenant-a/app"), 1)
	return e, pod, pokes
}

// TestCallersOwnNamespaceOnly: with no Callers, a service takes requests
// from the pods of its own namespace only. Any other caller is refused
// 403 caller-not-allowed, with a body that says who called, who may and
// how to admit more; it reaches no pod, is not load for the autoscaler
// and pokes nobody.
func TestCallersOwnNamespaceOnly(t *testing.T) {
	dir := newFakeDirectory("127.0.0.1", "tenant-a", "127.0.0.2", "tenant-b")
	e, pod, pokes := callersEnv(t, dir, Callers{})
	ctx := context.Background()

	if a := recv(t, e.send(ctx, clientFrom("127.0.0.1"), "app.tenant-a"), "answer"); a.code != http.StatusOK || a.body != "app" {
		t.Errorf("a pod of tenant-a: %d %q, want 200", a.code, a.body)
	}
	a := recv(t, e.send(ctx, clientFrom("127.0.0.2"), "app.tenant-a"), "answer")
	if a.code != http.StatusForbidden || a.reason != network.ReasonCallerNotAllowed {
		t.Errorf("a pod of tenant-b: %d %s=%q, want 403 %s", a.code, network.ReasonHeader, a.reason, network.ReasonCallerNotAllowed)
	}
	for _, want := range []string{"127.0.0.2", "namespace tenant-b", "tenant-a/app", "only pods of namespace tenant-a", testHint} {
		if !strings.Contains(a.body, want) {
			t.Errorf("refusal %q does not say %q", a.body, want)
		}
	}
	if n := pod.requests.Load(); n != 1 {
		t.Errorf("the pod served %d requests, want only the allowed one", n)
	}
	for class, want := range map[string]float64{"2xx": 1, "4xx": 0} {
		if n := metric(t, e.reg, "swell_activator_requests_total", map[string]string{"service": "tenant-a/app", "status_class": class}); n != want {
			t.Errorf("%s requests counted %v, want %v: a refused caller is no load", class, n, want)
		}
	}
	if n := metric(t, e.reg, "swell_activator_refused_callers_total", map[string]string{"service": "tenant-a/app"}); n != 1 {
		t.Errorf("refused callers %v, want 1", n)
	}
	select {
	case p := <-pokes:
		t.Errorf("poked %s", p)
	default:
	}
}

// TestCallersListedNamespaces: Callers.Namespaces admits their pods too,
// and no one else.
func TestCallersListedNamespaces(t *testing.T) {
	dir := newFakeDirectory("127.0.0.2", "ingress", "127.0.0.3", "tenant-c")
	e, _, _ := callersEnv(t, dir, Callers{Namespaces: []string{"ingress", "tenant-b"}})
	ctx := context.Background()
	if a := recv(t, e.send(ctx, clientFrom("127.0.0.2"), "app.tenant-a"), "answer"); a.code != http.StatusOK {
		t.Errorf("a pod of a listed namespace: %d %q, want 200", a.code, a.body)
	}
	a := recv(t, e.send(ctx, clientFrom("127.0.0.3"), "app.tenant-a"), "answer")
	if a.code != http.StatusForbidden || !strings.Contains(a.body, "only pods of namespace tenant-a, ingress, tenant-b may") {
		t.Errorf("a pod of another namespace: %d %q, want 403 listing who may", a.code, a.body)
	}
}

// TestCallersNoPod: a caller whose address is no pod's — a node, a
// hostNetwork pod — is in no namespace: it waits CallerWait for its
// address to appear, then is refused, unless the service admits any
// caller, which it then is at once.
func TestCallersNoPod(t *testing.T) {
	e, _, _ := callersEnv(t, newFakeDirectory(), Callers{Namespaces: []string{"tenant-b"}})
	ch := e.send(context.Background(), clientFrom("127.0.0.1"), "app.tenant-a")
	for recv(t, e.clk.timers, "the caller's wait") != DefaultCallerWait {
	}
	e.clk.Step(DefaultCallerWait)
	a := recv(t, ch, "answer")
	if a.code != http.StatusForbidden || !strings.Contains(a.body, "no pod") {
		t.Errorf("a caller that is no pod: %d %q, want 403 saying it is no pod", a.code, a.body)
	}

	e, _, _ = callersEnv(t, newFakeDirectory(), Callers{Any: true})
	if a := recv(t, e.send(context.Background(), clientFrom("127.0.0.1"), "app.tenant-a"), "answer"); a.code != http.StatusOK {
		t.Errorf("a caller that is no pod, to a service that admits any: %d %q, want 200", a.code, a.body)
	}
}

// TestCallersNewPod: a pod whose address the directory learns while its
// request waits is served as soon as it does.
func TestCallersNewPod(t *testing.T) {
	dir := newFakeDirectory()
	e, _, _ := callersEnv(t, dir, Callers{})
	ch := e.send(context.Background(), clientFrom("127.0.0.1"), "app.tenant-a")
	for recv(t, e.clk.timers, "the caller's wait") != DefaultCallerWait {
	}
	dir.set("127.0.0.1", "tenant-a")
	if a := recv(t, ch, "answer"); a.code != http.StatusOK {
		t.Errorf("a pod that appeared while its request waited: %d %q, want 200", a.code, a.body)
	}
}

// TestCallersUnchecked: without a directory (no Kubernetes) every caller
// is served.
func TestCallersUnchecked(t *testing.T) {
	pod := newFakePod(t, "app", true)
	src := NewMemorySource(Service{Key: mustKey("tenant-a/app"), Pods: []Pod{pod.pod()}})
	e := newEnv(t, src, nil, nil)
	e.waitRoutable(t, mustKey("tenant-a/app"), 1)
	if a := recv(t, e.send(context.Background(), clientFrom("127.0.0.9"), "app.tenant-a"), "answer"); a.code != http.StatusOK {
		t.Errorf("%d %q, want 200", a.code, a.body)
	}
}

// TestAuthorizeAllocatesNothing: checking an admitted caller, on every
// request in Kubernetes mode, allocates nothing.
func TestAuthorizeAllocatesNothing(t *testing.T) {
	s := newStageEnv(t, 1, 1, nil)
	dir := newFakeDirectory("192.0.2.1", "default", "192.0.2.2", "other")
	passed := 0
	h := &authorize{callerLookup: callerLookup{dir: dir, clk: s.clk, wait: DefaultCallerWait}, next: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { passed++ })}
	s.t.callers.Store(&Callers{Namespaces: []string{"other"}})
	_, e, r := s.exchange(t, context.Background())
	for _, addr := range []string{"192.0.2.1:1234", "192.0.2.2:1234"} {
		r.RemoteAddr = addr
		if n := testing.AllocsPerRun(100, func() { h.ServeHTTP(e, r) }); n != 0 {
			t.Errorf("caller %s: %v allocations, want 0", addr, n)
		}
	}
	if passed == 0 {
		t.Fatal("no request went on")
	}
}
