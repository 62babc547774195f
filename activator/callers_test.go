package activator

import (
	"context"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/service"
)

// fakeDirectory is a CallerDirectory held in memory. Its NetworkPolicies
// are a function of the service and the caller's namespace; by default,
// one that admits only the pods of the service's own namespace.
type fakeDirectory struct {
	mu      sync.Mutex
	ns      map[netip.Addr]string
	updated chan struct{}
	// policy, if set, is the verdict on a caller of namespace ns (known
	// false: no pod) to service key.
	policy func(key service.Key, ns string, known bool) bool
	gen    atomic.Uint64
	// judged counts the calls to Admits.
	judged atomic.Int64
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

func (d *fakeDirectory) Admits(key service.Key, ip netip.Addr) CallerVerdict {
	d.judged.Add(1)
	ns, known := d.Namespace(ip)
	d.mu.Lock()
	policy := d.policy
	d.mu.Unlock()
	if policy == nil {
		policy = func(key service.Key, ns string, known bool) bool { return known && ns == key.Namespace }
	}
	if policy(key, ns, known) {
		return CallerVerdict{Allowed: true, Why: "allowed by NetworkPolicy " + key.Namespace + "/fake"}
	}
	return CallerVerdict{Why: "refused: NetworkPolicy " + key.Namespace + "/fake-secret selects the pod for ingress"}
}

func (d *fakeDirectory) Generation() uint64 { return d.gen.Load() }

func (d *fakeDirectory) set(ip, ns string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ns[netip.MustParseAddr(ip)] = ns
	d.gen.Add(1)
	close(d.updated)
	d.updated = make(chan struct{})
}

// setPolicy replaces the directory's policies.
func (d *fakeDirectory) setPolicy(policy func(key service.Key, ns string, known bool) bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.policy = policy
	d.gen.Add(1)
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

// TestCallersJudgedByPolicies: a service takes requests only from the
// callers its NetworkPolicies admit (here: its own namespace's pods). Any
// other caller is refused 403 caller-not-allowed, with a body that says
// who called, that the policies do not admit it and how to admit more,
// but not which policies refused, which are another namespace's to read;
// it reaches no pod, is not load for the autoscaler and pokes nobody.
func TestCallersJudgedByPolicies(t *testing.T) {
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
	for _, want := range []string{"127.0.0.2", "namespace tenant-b", "tenant-a/app", "NetworkPolicies", testHint} {
		if !strings.Contains(a.body, want) {
			t.Errorf("refusal %q does not say %q", a.body, want)
		}
	}
	if strings.Contains(a.body, "fake-secret") {
		t.Errorf("refusal %q names the service's policies to a caller of another namespace", a.body)
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

// TestCallersPoliciesNotNamespaces: the policies decide, not the caller's
// namespace: a service whose policies admit only an ingress namespace
// refuses its own namespace's pods, and one whose pods no policy selects
// (admitting everyone, as Kubernetes does) takes callers of any namespace
// and callers that are no pod, at once.
func TestCallersPoliciesNotNamespaces(t *testing.T) {
	dir := newFakeDirectory("127.0.0.1", "tenant-a", "127.0.0.2", "ingress", "127.0.0.3", "tenant-b")
	dir.setPolicy(func(_ service.Key, ns string, _ bool) bool { return ns == "ingress" })
	e, _, _ := callersEnv(t, dir, Callers{})
	ctx := context.Background()
	for from, want := range map[string]int{"127.0.0.1": http.StatusForbidden, "127.0.0.2": http.StatusOK, "127.0.0.3": http.StatusForbidden} {
		if a := recv(t, e.send(ctx, clientFrom(from), "app.tenant-a"), "answer"); a.code != want {
			t.Errorf("a pod at %s under a policy admitting only namespace ingress: %d %q, want %d", from, a.code, a.body, want)
		}
	}

	dir.setPolicy(func(service.Key, string, bool) bool { return true })
	for _, from := range []string{"127.0.0.1", "127.0.0.3", "127.0.0.9"} {
		if a := recv(t, e.send(ctx, clientFrom(from), "app.tenant-a"), "answer"); a.code != http.StatusOK {
			t.Errorf("%s with no policy selecting the pods: %d %q, want 200", from, a.code, a.body)
		}
	}
}

// TestCallersListedNamespaces: Callers.Namespaces admits their pods too,
// whatever the policies say, and no one else.
func TestCallersListedNamespaces(t *testing.T) {
	dir := newFakeDirectory("127.0.0.2", "ingress", "127.0.0.3", "tenant-c")
	e, _, _ := callersEnv(t, dir, Callers{Namespaces: []string{"ingress", "tenant-b"}})
	ctx := context.Background()
	if a := recv(t, e.send(ctx, clientFrom("127.0.0.2"), "app.tenant-a"), "answer"); a.code != http.StatusOK {
		t.Errorf("a pod of a listed namespace: %d %q, want 200", a.code, a.body)
	}
	a := recv(t, e.send(ctx, clientFrom("127.0.0.3"), "app.tenant-a"), "answer")
	if a.code != http.StatusForbidden || !strings.Contains(a.body, "namespace tenant-c") {
		t.Errorf("a pod of another namespace: %d %q, want 403 naming it", a.code, a.body)
	}
}

// TestCallerVerdictsCached: a caller's verdict is asked of the directory
// once, and again only after the directory changed; a refusal is logged
// with what the policies said, once, and again only if they say
// otherwise.
func TestCallerVerdictsCached(t *testing.T) {
	dir := newFakeDirectory("127.0.0.1", "tenant-a", "127.0.0.2", "tenant-b")
	core, logs := observer.New(zap.InfoLevel)
	pod := newFakePod(t, "app", true)
	src := NewMemorySource(Service{Key: mustKey("tenant-a/app"), Pods: []Pod{pod.pod()}})
	e := newEnv(t, src, func(c *Config) { c.Callers, c.CallersHint, c.Logger = dir, testHint, zap.New(core) }, nil)
	e.waitRoutable(t, mustKey("tenant-a/app"), 1)
	ctx := context.Background()
	send := func(from string, want int) {
		t.Helper()
		if a := recv(t, e.send(ctx, clientFrom(from), "app.tenant-a"), "answer"); a.code != want {
			t.Errorf("from %s: %d %q, want %d", from, a.code, a.body, want)
		}
	}
	for range 3 {
		send("127.0.0.1", http.StatusOK)
		send("127.0.0.2", http.StatusForbidden)
	}
	if n := dir.judged.Load(); n != 2 {
		t.Errorf("the directory judged %d times for 6 requests from 2 callers, want 2", n)
	}
	refused := func() []observer.LoggedEntry {
		return logs.FilterMessage("caller not admitted by the service's NetworkPolicies").All()
	}
	if r := refused(); len(r) != 1 || !strings.Contains(r[0].ContextMap()["verdict"].(string), "tenant-a/fake-secret") {
		t.Errorf("refusals logged: %v; want one, with the verdict", r)
	}

	// Whatever changes, the verdicts are judged again; a refusal that
	// says the same is not logged again.
	dir.set("127.0.0.9", "elsewhere")
	send("127.0.0.2", http.StatusForbidden)
	if n, r := dir.judged.Load(), refused(); n != 3 || len(r) != 1 {
		t.Errorf("after a change elsewhere: judged %d times, %d refusals logged; want 3 and still 1", n, len(r))
	}
	dir.setPolicy(func(service.Key, string, bool) bool { return true })
	send("127.0.0.2", http.StatusOK)
	send("127.0.0.2", http.StatusOK)
	if n := dir.judged.Load(); n != 4 {
		t.Errorf("the directory judged %d times, want 4: once more after the policies changed", n)
	}
}

// TestVerdictsBounded: a service caches at most maxVerdicts callers'
// verdicts, however many addresses call.
func TestVerdictsBounded(t *testing.T) {
	var vs verdicts
	for i := range 3 * maxVerdicts {
		vs.store(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), verdict{gen: 1, allowed: true})
	}
	n := 0
	vs.m.Range(func(any, any) bool { n++; return true })
	if n > maxVerdicts {
		t.Errorf("%d verdicts cached, want at most %d", n, maxVerdicts)
	}
	ip := netip.MustParseAddr("192.0.2.1")
	vs.store(ip, verdict{gen: 7, allowed: true})
	if !vs.allowed(ip, 7) || vs.allowed(ip, 8) {
		t.Error("a verdict is read at its own generation only")
	}
}

// TestCallersNoPod: a caller whose address is no pod's — a node, a
// hostNetwork pod — is judged by its address alone; refused, it waits
// CallerWait for its address to appear, then is refused, unless the
// service admits any caller, which it then is at once, as it is when the
// policies admit it.
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

	dir := newFakeDirectory()
	dir.setPolicy(func(_ service.Key, _ string, known bool) bool { return !known }) // an ipBlock
	e, _, _ = callersEnv(t, dir, Callers{})
	if a := recv(t, e.send(context.Background(), clientFrom("127.0.0.1"), "app.tenant-a"), "answer"); a.code != http.StatusOK {
		t.Errorf("a caller that is no pod, admitted by the policies: %d %q, want 200", a.code, a.body)
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
// request in Kubernetes mode, allocates nothing once its verdict is
// cached: admitted by the policies, or refused by them and admitted by
// Callers.
func TestAuthorizeAllocatesNothing(t *testing.T) {
	s := newStageEnv(t, 1, 1, nil)
	dir := newFakeDirectory("192.0.2.1", "default", "192.0.2.2", "other")
	passed := 0
	h := &authorize{callerLookup: callerLookup{dir: dir, clk: s.clk, wait: DefaultCallerWait}, log: zap.NewNop(),
		next: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { passed++ })}
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
