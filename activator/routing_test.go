package activator

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/swell-run/swell/pkg/service"

	"github.com/swell-run/swell/pkg/network"
)

func TestNormalizeHost(t *testing.T) {
	for in, want := range map[string]string{
		"hello.default":                       "hello.default",
		"hello.default:8080":                  "hello.default",
		"HELLO.Default.SVC":                   "hello.default.svc",
		"hello.default.svc.cluster.local.":    "hello.default.svc.cluster.local",
		"hello.default.svc.cluster.local.:80": "hello.default.svc.cluster.local",
		"[::1]:80":                            "[::1]",
		"[::1]":                               "[::1]",
		"":                                    "",
	} {
		if got := normalizeHost(in); got != want {
			t.Errorf("normalizeHost(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRouting(t *testing.T) {
	hello := newFakePod(t, "hello-pod", true)
	other := newFakePod(t, "other-pod", true)
	src := NewMemorySource(
		Service{Key: helloKey, Hosts: []string{"hello.example.com"}, ContainerConcurrency: 10, Pods: []Pod{hello.pod()}},
		Service{Key: mustKey("team/other"), Pods: []Pod{other.pod()}},
	)
	e := newEnv(t, src, func(c *Config) { c.ClusterDomain = "corp.internal" }, nil)
	e.waitRoutable(t, helloKey, 1)
	e.waitRoutable(t, mustKey("team/other"), 1)

	for _, tc := range []struct {
		host, header string
		want         string // pod name, or "" for 404
	}{
		{host: "hello.default", want: "hello-pod"},
		{host: "hello.default:80", want: "hello-pod"},
		{host: "hello.default.svc", want: "hello-pod"},
		{host: "Hello.Default.Svc.Corp.Internal:8080", want: "hello-pod"},
		{host: "hello.default.svc.corp.internal.", want: "hello-pod"},
		{host: "HELLO.example.com:443", want: "hello-pod"},
		{host: "other.team", want: "other-pod"},
		// The header routes nothing (TestServiceHeaderNeverRoutes).
		{host: "hello.default", header: "team/other", want: "hello-pod"},
		{host: "nowhere.example.com", header: "default/hello"},
		{host: "hello.default.svc.cluster.local"}, // not this cluster's domain
		{host: "unknown.example.com"},
	} {
		hdr := http.Header{}
		if tc.header != "" {
			hdr.Set(network.ServiceHeader, tc.header)
		}
		res, body := e.get(t, tc.host, hdr)
		if tc.want == "" {
			if res.StatusCode != http.StatusNotFound || res.Header.Get(network.ReasonHeader) != network.ReasonUnknownService {
				t.Errorf("host %q header %q: %d %s=%q, want 404 %s", tc.host, tc.header, res.StatusCode,
					network.ReasonHeader, res.Header.Get(network.ReasonHeader), network.ReasonUnknownService)
			}
			if !strings.Contains(body, tc.host) {
				t.Errorf("404 body %q does not name %q", body, tc.host)
			}
			continue
		}
		if res.StatusCode != http.StatusOK || body != tc.want {
			t.Errorf("host %q header %q: %d %q, want 200 %q", tc.host, tc.header, res.StatusCode, body, tc.want)
		}
	}

	// Removing a service removes its routes.
	src.Remove(mustKey("team/other"))
	e.waitTableWithout(t, "team/other")
	if res, _ := e.get(t, "other.team", nil); res.StatusCode != http.StatusNotFound {
		t.Errorf("removed service: status %d, want 404", res.StatusCode)
	}
}

func (e *testEnv) waitTableWithout(t *testing.T, key string) {
	t.Helper()
	k, err := service.Parse(key)
	if err != nil {
		t.Fatal(err)
	}
	for {
		ch := *e.a.tableChanged.Load()
		if _, ok := e.a.Routable(k); !ok {
			return
		}
		recv(t, ch, "table change")
	}
}

func TestLookupAllocatesNothing(t *testing.T) {
	src := NewMemorySource(Service{Key: helloKey})
	a, err := New(Config{Source: src})
	if err != nil {
		t.Fatal(err)
	}
	a.sync(src.Services())
	tab := a.table.Load()
	byHost, _ := http.NewRequest("GET", "http://hello.default.svc.cluster.local:8080/", nil)
	byContext, _ := http.NewRequestWithContext(WithService(context.Background(), helloKey), "GET", "http://x/", nil)
	for _, r := range []*http.Request{byHost, byContext} {
		if got := tab.lookup(r); got == nil {
			t.Fatalf("no route for %s", r.Host)
		}
		if n := testing.AllocsPerRun(100, func() { tab.lookup(r) }); n != 0 {
			t.Errorf("lookup %s: %v allocations, want 0", r.Host, n)
		}
	}
}

// TestRouter: a routed request reaches the next stage carrying its
// exchange, which is also the writer it answers through; a request for no
// service is answered 404 here.
func TestRouter(t *testing.T) {
	s := newStageEnv(t, 1, 1, nil)
	tab := newRouteTable()
	tab.byKey[helloKey] = s.t
	tab.byHost["hello.default"] = s.t
	var table atomic.Pointer[routeTable]
	table.Store(tab)
	var got *exchange
	h := &router{table: &table, next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = exchangeOf(r)
		if w != got {
			t.Errorf("next writes to %T, want the exchange", w)
		}
		io.Copy(io.Discard, r.Body)
	})}

	for _, tc := range []struct {
		name, host string
		route      string // the service WithService names, if any
		body       string
		want       string // 404 body, "" for routed
	}{
		{name: "host", host: "Hello.Default:8080"},
		{name: "context", host: "elsewhere", route: "default/hello", body: "payload"},
		{name: "unknown host", host: "nowhere", want: `no service for host "nowhere"`},
		{name: "unknown key", host: "hello.default", route: "default/nope", want: `no service "default/nope"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got = nil
			req := httptest.NewRequest(http.MethodPost, "http://"+tc.host+"/", strings.NewReader(tc.body))
			if tc.route != "" {
				req = req.WithContext(WithService(req.Context(), mustKey(tc.route)))
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if tc.want != "" {
				if got != nil || rec.Code != http.StatusNotFound || rec.Header().Get(network.ReasonHeader) != network.ReasonUnknownService ||
					!strings.Contains(rec.Body.String(), tc.want) {
					t.Errorf("got %d %s=%q %q (routed: %v), want 404 %s naming %s", rec.Code, network.ReasonHeader,
						rec.Header().Get(network.ReasonHeader), rec.Body, got != nil, network.ReasonUnknownService, tc.want)
				}
				return
			}
			if got == nil || got.t != s.t {
				t.Fatalf("exchange %+v, want one for %s", got, helloKey)
			}
			if got.hasBody != (tc.body != "") || got.body.read.Load() != (tc.body != "") {
				t.Errorf("body tracked %v, read %v; want %v", got.hasBody, got.body.read.Load(), tc.body != "")
			}
		})
	}
}

// TestShortNamesAndClusterIPs: a Service's name alone (http://app/,
// app:8080) routes in the caller's namespace, as cluster DNS completes it,
// and so does a request to a Service's cluster IP; an unknown caller's
// short name, or a short name of another namespace, does not.
func TestShortNamesAndClusterIPs(t *testing.T) {
	dir := newFakeDirectory("127.0.0.1", "tenant-a", "127.0.0.2", "tenant-b", "127.0.0.3", "ingress")
	app := newFakePod(t, "app", true)
	b := newFakePod(t, "b-app", true)
	src := NewMemorySource(
		Service{Key: mustKey("tenant-a/app"), Hosts: []string{"10.96.0.20", "[fd00:96::20]"}, Pods: []Pod{app.pod()},
			Callers: Callers{Namespaces: []string{"ingress"}}},
		Service{Key: mustKey("tenant-b/app"), Pods: []Pod{b.pod()}},
	)
	e := newEnv(t, src, func(c *Config) { c.Callers = dir }, nil)
	e.waitRoutable(t, mustKey("tenant-a/app"), 1)
	e.waitRoutable(t, mustKey("tenant-b/app"), 1)
	ctx := context.Background()
	for _, tc := range []struct {
		from, host string
		code       int
		body       string
	}{
		{"127.0.0.1", "app", http.StatusOK, "app"},
		{"127.0.0.1", "APP:8080", http.StatusOK, "app"},
		{"127.0.0.2", "app", http.StatusOK, "b-app"},
		{"127.0.0.1", "10.96.0.20", http.StatusOK, "app"},
		{"127.0.0.3", "10.96.0.20:80", http.StatusOK, "app"},
		{"127.0.0.1", "[fd00:96::20]:80", http.StatusOK, "app"},
		// The ingress namespace has no Service named app.
		{"127.0.0.3", "app", http.StatusNotFound, ""},
		// A cluster IP routes, but callers are still judged.
		{"127.0.0.2", "10.96.0.20", http.StatusForbidden, ""},
	} {
		a := recv(t, e.send(ctx, clientFrom(tc.from), tc.host), "answer")
		if a.code != tc.code || tc.body != "" && a.body != tc.body {
			t.Errorf("from %s host %q: %d %q, want %d %q", tc.from, tc.host, a.code, a.body, tc.code, tc.body)
		}
	}
	// A caller that is no pod has no namespace to complete a name in,
	// once the wait for its address is over.
	ch := e.send(ctx, clientFrom("127.0.0.9"), "app")
	for recv(t, e.clk.timers, "the caller's wait") != DefaultCallerWait {
	}
	e.clk.Step(DefaultCallerWait)
	if a := recv(t, ch, "answer"); a.code != http.StatusNotFound {
		t.Errorf("a short name from a caller that is no pod: %d %q, want 404", a.code, a.body)
	}
}

// TestClaimedHosts: a claimed host routes to its service, unless it is a
// service's own name or an earlier claim has it: a newer claim, whatever
// its key, cannot take a host over; a cluster-local name is never taken by
// a claim.
func TestClaimedHosts(t *testing.T) {
	first, second, owner := newFakePod(t, "first", true), newFakePod(t, "second", true), newFakePod(t, "owner", true)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	src := NewMemorySource(
		Service{Key: mustKey("zz/shop"), ClaimedAt: t0, ClaimedHosts: []string{"shop.example.com"}, Pods: []Pod{first.pod()}},
		// Sorts first by key, claims later: it gets only what nobody had.
		Service{Key: mustKey("aa/squat"), ClaimedAt: t0.Add(time.Hour),
			ClaimedHosts: []string{"shop.example.com", "free.example.com", "web.payments", "web.payments.svc.cluster.local"},
			Pods:         []Pod{second.pod()}},
		Service{Key: mustKey("payments/web"), Pods: []Pod{owner.pod()}},
	)
	e := newEnv(t, src, nil, nil)
	for _, k := range []string{"zz/shop", "aa/squat", "payments/web"} {
		e.waitRoutable(t, mustKey(k), 1)
	}
	for host, want := range map[string]string{
		"shop.example.com":               "first",
		"free.example.com":               "second",
		"web.payments":                   "owner",
		"web.payments.svc.cluster.local": "owner",
	} {
		res, body := e.get(t, host, nil)
		if res.StatusCode != http.StatusOK || body != want {
			t.Errorf("host %q: %d %q, want %q", host, res.StatusCode, body, want)
		}
	}
	if !clusterLocalForm("a.b") || !clusterLocalForm("a.b.svc") || !clusterLocalForm("a.b.svc.x.y") || clusterLocalForm("a.b.c") || clusterLocalForm("a.b.svcx") || clusterLocalForm("a") {
		t.Error("clusterLocalForm misreads")
	}
}
