package activator

import (
	"net/http"
	"strings"
	"testing"

	"github.com/swell-run/swell/pkg/network"
)

// TestServiceHeaderNeverRoutes: the Swell-Service header a client sends
// names no route: a client that reaches the activator could otherwise
// route into any namespace whatever the Host it called. The request goes
// where its Host says, or nowhere.
func TestServiceHeaderNeverRoutes(t *testing.T) {
	app := newFakePod(t, "tenant-a-app", true)
	internal := newFakePod(t, "tenant-b-internal", true)
	src := NewMemorySource(
		Service{Key: mustKey("tenant-a/app"), Pods: []Pod{app.pod()}},
		Service{Key: mustKey("tenant-b/internal"), Pods: []Pod{internal.pod()}},
	)
	e := newEnv(t, src, nil, nil)
	e.waitRoutable(t, mustKey("tenant-a/app"), 1)
	e.waitRoutable(t, mustKey("tenant-b/internal"), 1)

	hdr := http.Header{network.ServiceHeader: {"tenant-b/internal"}}
	res, body := e.get(t, "app.tenant-a.svc.cluster.local", hdr)
	if res.StatusCode != http.StatusOK || body != "tenant-a-app" {
		t.Errorf("Host app.tenant-a with %s tenant-b/internal: %d %q, want 200 from tenant-a-app", network.ServiceHeader, res.StatusCode, body)
	}
	res, body = e.get(t, "nowhere.example.com", hdr)
	if res.StatusCode != http.StatusNotFound || strings.Contains(body, "tenant-b-internal") {
		t.Errorf("unknown Host with %s tenant-b/internal: %d %q, want 404", network.ServiceHeader, res.StatusCode, body)
	}
	if n := internal.requests.Load(); n != 0 {
		t.Errorf("tenant-b/internal served %d requests, want none", n)
	}
}

// TestProxyStripsSwellHeaders: the pod sees no Swell-* request header but
// the one the activator sets: a client cannot pass itself off as the
// activator (Swell-Proxy), as a probe (Swell-Probe), or carry a route on
// (Swell-Service), whatever the case it writes them in.
func TestProxyStripsSwellHeaders(t *testing.T) {
	pod := newFakePod(t, "p1", true)
	e := newServing(t, pod)
	req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/", nil)
	req.Host = "hello.default"
	req.Header.Set(network.ServiceHeader, "default/hello")
	req.Header.Set(network.ProxyHeader, "something-else")
	req.Header.Set(network.ReasonHeader, "queue-full")
	req.Header.Set("Swell-Future-Header", "x")
	req.Header["swell-lower"] = []string{"y"} // sent as written over HTTP/1.1
	req.Header.Set("X-Kept", "z")
	if res, body := do(t, req); res.StatusCode != http.StatusOK {
		t.Fatalf("%d %q, want 200", res.StatusCode, body)
	}
	r := recv(t, pod.arrived, "request")
	for k, v := range r.Header {
		if strings.HasPrefix(strings.ToLower(k), "swell-") && k != network.ProxyHeader {
			t.Errorf("the pod received %s: %q", k, v)
		}
	}
	if got := r.Header[network.ProxyHeader]; len(got) != 1 || got[0] != network.ProxyActivator {
		t.Errorf("%s = %q at the pod, want only %q", network.ProxyHeader, got, network.ProxyActivator)
	}
	if r.Header.Get("X-Kept") != "z" {
		t.Errorf("other headers lost: %v", r.Header)
	}
}

// TestProxyNamesTheActivator: an activator with a name puts it on every
// request it forwards, in place of any a client sent, so that the pod
// counts the request in that activator's share.
func TestProxyNamesTheActivator(t *testing.T) {
	pod := newFakePod(t, "p1", true)
	e := newEnv(t, NewMemorySource(Service{Key: mustKey("default/hello"), Pods: []Pod{pod.pod()}}),
		func(c *Config) { c.Name = "activator-x" }, nil)
	e.waitRoutable(t, mustKey("default/hello"), 1)
	res, body := e.get(t, "hello.default", http.Header{network.ActivatorHeader: {"activator-forged"}})
	if res.StatusCode != http.StatusOK {
		t.Fatalf("%d %q, want 200", res.StatusCode, body)
	}
	r := recv(t, pod.arrived, "request")
	if got := r.Header[network.ActivatorHeader]; len(got) != 1 || got[0] != "activator-x" {
		t.Errorf("%s = %q at the pod, want only activator-x", network.ActivatorHeader, got)
	}
}
