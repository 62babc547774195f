package activator

import (
	"net/http"
	"strings"
	"testing"

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
		Service{Key: "default/hello", Hosts: []string{"hello.example.com"}, ContainerConcurrency: 10, Pods: []Pod{hello.pod()}},
		Service{Key: "team/other", Pods: []Pod{other.pod()}},
	)
	e := newEnv(t, src, func(c *Config) { c.ClusterDomain = "corp.internal" }, nil)
	e.waitRoutable(t, "default/hello", 1)
	e.waitRoutable(t, "team/other", 1)

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
		{host: "hello.default", header: "team/other", want: "other-pod"},
		{host: "nowhere.example.com", header: "default/hello", want: "hello-pod"},
		{host: "hello.default.svc.cluster.local"},       // not this cluster's domain
		{host: "hello.default", header: "default/nope"}, // an explicit header is never second-guessed
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
			name := tc.host
			if tc.header != "" {
				name = tc.header
			}
			if !strings.Contains(body, name) {
				t.Errorf("404 body %q does not name %q", body, name)
			}
			continue
		}
		if res.StatusCode != http.StatusOK || body != tc.want {
			t.Errorf("host %q header %q: %d %q, want 200 %q", tc.host, tc.header, res.StatusCode, body, tc.want)
		}
	}

	// Removing a service removes its routes.
	src.Remove("team/other")
	e.waitTableWithout(t, "team/other")
	if res, _ := e.get(t, "other.team", nil); res.StatusCode != http.StatusNotFound {
		t.Errorf("removed service: status %d, want 404", res.StatusCode)
	}
}

func (e *testEnv) waitTableWithout(t *testing.T, key string) {
	t.Helper()
	for {
		ch := *e.a.tableChanged.Load()
		if _, ok := e.a.Routable(key); !ok {
			return
		}
		recv(t, ch, "table change")
	}
}

func TestLookupAllocatesNothing(t *testing.T) {
	src := NewMemorySource(Service{Key: "default/hello"})
	a, err := New(Config{Source: src})
	if err != nil {
		t.Fatal(err)
	}
	a.sync(src.Services())
	tab := a.table.Load()
	byHost, _ := http.NewRequest("GET", "http://hello.default.svc.cluster.local:8080/", nil)
	byHeader, _ := http.NewRequest("GET", "http://x/", nil)
	byHeader.Header.Set(network.ServiceHeader, "default/hello")
	for _, r := range []*http.Request{byHost, byHeader} {
		if tab.lookup(r) == nil {
			t.Fatalf("no route for %s %v", r.Host, r.Header)
		}
		if n := testing.AllocsPerRun(100, func() { tab.lookup(r) }); n != 0 {
			t.Errorf("lookup %s: %v allocations, want 0", r.Host, n)
		}
	}
}
