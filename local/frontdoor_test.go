package local

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/swell-run/swell/activator"
	"github.com/swell-run/swell/autoscaler/plan"
	"github.com/swell-run/swell/local/config"
	"github.com/swell-run/swell/pkg/network"
)

// activatorStub stands in for the activator: it answers with the service
// the front door named in the request's context (activator.WithService).
var activatorStub = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	key, _ := activator.ServiceFrom(r.Context())
	io.WriteString(w, "activator:"+key.String())
})

func newTestDoor(t *testing.T, names ...string) (*frontDoor, *backend) {
	t.Helper()
	var svcs []config.Service
	for _, n := range names {
		svcs = append(svcs, config.Service{Name: n, Command: []string{"app"}, Hosts: []string{n + ".example.com"}})
	}
	b := newBackend(context.Background(), zap.NewNop(), svcs)
	return newFrontDoor(b, activatorStub, zap.NewNop()), b
}

func serve(f http.Handler, host string, hdr ...string) (int, string, http.Header) {
	req := httptest.NewRequest(http.MethodGet, "http://"+host+"/", nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	f.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String(), rec.Header()
}

func TestFrontDoorRoutes(t *testing.T) {
	f, _ := newTestDoor(t, "alpha", "beta")
	for _, tc := range []struct {
		host string
		hdr  []string
		want string
	}{
		{"alpha.example.com", nil, "activator:local/alpha"},
		{"ALPHA.example.com:8080", nil, "activator:local/alpha"},
		{"beta.localhost:8080", nil, "activator:local/beta"},
		{"beta", nil, "activator:local/beta"},
		{"beta.local", nil, "activator:local/beta"},
		{"127.0.0.1:8080", []string{network.ServiceHeader, "alpha"}, "activator:local/alpha"},
		{"alpha.localhost", []string{network.ServiceHeader, "local/beta"}, "activator:local/beta"},
	} {
		if code, body, _ := serve(f, tc.host, tc.hdr...); code != http.StatusOK || body != tc.want {
			t.Errorf("Host %s %v: %d %q, want 200 %q", tc.host, tc.hdr, code, body, tc.want)
		}
	}
	for _, tc := range []struct {
		host string
		hdr  []string
		want string
	}{
		{"127.0.0.1:8080", nil, "no service for host 127.0.0.1:8080; services: alpha, beta"},
		{"alpha.localhost", []string{network.ServiceHeader, "gamma"}, "no service named gamma"},
	} {
		code, body, h := serve(f, tc.host, tc.hdr...)
		if code != http.StatusNotFound || !strings.Contains(body, tc.want) || h.Get(network.ReasonHeader) != network.ReasonUnknownService {
			t.Errorf("Host %s %v: %d %q %v, want 404 with %q and the reason", tc.host, tc.hdr, code, body, h, tc.want)
		}
	}
}

func TestFrontDoorOneServiceTakesEverything(t *testing.T) {
	f, _ := newTestDoor(t, "only")
	if code, body, _ := serve(f, "127.0.0.1:8080"); code != http.StatusOK || body != "activator:local/only" {
		t.Fatalf("%d %q, want the one service", code, body)
	}
}

// TestFrontDoorDirectToPods: once the activator is out of the path, requests
// go straight to the ready replicas, round robin, without the activator's
// header; with no ready replica they go through the activator whatever the
// route.
func TestFrontDoorDirectToPods(t *testing.T) {
	f, b := newTestDoor(t, "hello")
	var got []string
	pod := func(name string) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got = append(got, name)
			if r.Header.Get(network.ProxyHeader) != "" || r.Header.Get(network.ServiceHeader) != "" {
				t.Errorf("a direct request carries %v", r.Header)
			}
			io.WriteString(w, name)
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	p1, p2 := pod("p1"), pod("p2")
	s := b.order[0]
	s.view.Store(&routeView{route: plan.RoutePods, ready: []string{p1.Listener.Addr().String(), p2.Listener.Addr().String()}})
	for range 4 {
		if code, _, _ := serve(f, "hello.localhost"); code != http.StatusOK {
			t.Fatalf("direct request: %d", code)
		}
	}
	if strings.Join(got, ",") != "p2,p1,p2,p1" {
		t.Errorf("replicas served %v, want round robin", got)
	}

	s.view.Store(&routeView{route: plan.RoutePods})
	if _, body, _ := serve(f, "hello.localhost"); body != "activator:local/hello" {
		t.Errorf("with no ready replica: %q, want the activator", body)
	}
	s.view.Store(&routeView{route: plan.RouteActivator, ready: []string{p1.Listener.Addr().String()}})
	if _, body, _ := serve(f, "hello.localhost"); body != "activator:local/hello" {
		t.Errorf("routed to the activator: %q, want the activator", body)
	}

	// A replica gone between the choice and the dial: nothing was sent,
	// so the activator takes the request.
	gone := p2.Listener.Addr().String()
	p2.Close()
	s.view.Store(&routeView{route: plan.RoutePods, ready: []string{gone}})
	if code, body, _ := serve(f, "hello.localhost"); code != http.StatusOK || body != "activator:local/hello" {
		t.Errorf("to a closed replica: %d %q, want the activator's answer", code, body)
	}
	// A replica that fails after the request reached it: 502 with the
	// reason, never sent twice.
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		panic(http.ErrAbortHandler)
	}))
	t.Cleanup(broken.Close)
	s.view.Store(&routeView{route: plan.RoutePods, ready: []string{broken.Listener.Addr().String()}})
	if code, _, h := serve(f, "hello.localhost"); code != http.StatusBadGateway || h.Get(network.ReasonHeader) != network.ReasonAppUnreachable {
		t.Errorf("to a replica that failed mid-request: %d %v, want 502 app-unreachable", code, h)
	}
}

// TestFrontDoorStripsSwellHeaders: a request sent straight to a replica
// carries none of the client's Swell-* headers, so that no client of
// swell local passes itself off as the activator (which the replica's
// queue-proxy would count apart) or as a probe.
func TestFrontDoorStripsSwellHeaders(t *testing.T) {
	f, b := newTestDoor(t, "hello")
	got := make(chan http.Header, 1)
	pod := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
	}))
	t.Cleanup(pod.Close)
	b.order[0].view.Store(&routeView{route: plan.RoutePods, ready: []string{pod.Listener.Addr().String()}})
	code, _, _ := serve(f, "hello.localhost", network.ProxyHeader, network.ProxyActivator, network.ServiceHeader, "hello",
		network.ProbeHeader, network.ProbeQueue, "Swell-Other", "x", "X-Kept", "y")
	if code != http.StatusOK {
		t.Fatalf("direct request: %d", code)
	}
	h := <-got
	for k, v := range h {
		if strings.HasPrefix(strings.ToLower(k), "swell-") {
			t.Errorf("the replica received %s: %q", k, v)
		}
	}
	if h.Get("X-Kept") != "y" {
		t.Errorf("other headers lost: %v", h)
	}
}
