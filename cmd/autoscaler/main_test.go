package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/swell-run/swell/autoscaler"
	"github.com/swell-run/swell/autoscaler/collector"
	"github.com/swell-run/swell/autoscaler/scaler/scalertest"
	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/kube/certs"
	"github.com/swell-run/swell/kube/inject"
	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/service"
)

// testServers builds a replica's servers as run does, around an
// autoscaler that knows no service yet.
func testServers(t *testing.T) (*app, []server) {
	t.Helper()
	cfg := defaultConfig()
	cfg.PodName, cfg.PodIP = "autoscaler-0", "10.0.0.7"
	a := &app{cfg: cfg, log: zap.NewNop(), client: fake.NewClientset()}
	reg := prometheus.NewRegistry()
	as, err := autoscaler.New(autoscaler.Config{
		Backend:  scalertest.NewBackend(),
		Endpoint: collector.EndpointConfig{Tokens: []string{"an-activator-token-long-enough"}},
		Pods: collector.PodEndpointConfig{
			Resolver: podResolver(func(service.Key, netip.AddrPort, string) (string, bool) { return "", false }),
			Route:    a.pushRoute,
		},
		Registerer: reg,
		Clock:      testingclock.NewFakeClock(time.Unix(0, 0)),
	})
	if err != nil {
		t.Fatal(err)
	}
	certMgr, err := certs.New(certs.Config{Client: a.client, Namespace: cfg.Namespace, OtherServices: []string{kube.AutoscalerService}})
	if err != nil {
		t.Fatal(err)
	}
	return a, a.servers(as, certMgr, reg)
}

func get(h http.Handler, path string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec
}

// The push port takes the pods' websocket and nothing else: a follower
// has the pod retry, the leader refuses a connection from no pod of the
// service, and the status is not there.
func TestPushPort(t *testing.T) {
	a, servers := testServers(t)
	var push http.Handler
	for _, s := range servers {
		if s.port == a.cfg.PushPort {
			if s.tls || s.loopback {
				t.Errorf("push port %d: TLS %t, loopback %t; want plain, open to the pods", s.port, s.tls, s.loopback)
			}
			push = s.srv.Handler
		}
	}
	if push == nil || a.cfg.PushPort != network.DefaultAutoscalerPushPort {
		t.Fatalf("no server on PUSH_PORT %d", a.cfg.PushPort)
	}
	path := network.PodPushPath + "?" + network.PodPushService + "=ns/web&" + network.PodPushAddr + "=10.1.2.3:9090"
	if rec := get(push, path); rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Errorf("a follower: %d %q, want 503 with Retry-After", rec.Code, rec.Header().Get("Retry-After"))
	}
	a.leading.Store(true)
	if rec := get(push, path); rec.Code != http.StatusForbidden {
		t.Errorf("the leader, to no pod: %d, want 403", rec.Code)
	}
	for _, p := range []string{network.AutoscalerStatusPath, network.ActivatorReportPath} {
		if rec := get(push, p); rec.Code != http.StatusNotFound {
			t.Errorf("GET %s on the push port: %d, want 404", p, rec.Code)
		}
	}
}

// TestStatusOnlyOnLoopback: the status names every tenant's services, so
// the activators' port, which every pod may reach, does not serve it, and
// neither does any other port open to the pod network; a server of its
// own does, on loopback addresses only, whether the replica leads or not.
func TestStatusOnlyOnLoopback(t *testing.T) {
	a, servers := testServers(t)
	a.leading.Store(true)
	var status *server
	for i, s := range servers {
		switch {
		case s.srv == nil: // the webhooks', built by package webhook
		case s.loopback:
			if status != nil {
				t.Fatalf("two loopback servers, ports %d and %d", status.port, s.port)
			}
			status = &servers[i]
		default:
			if rec := get(s.srv.Handler, network.AutoscalerStatusPath); strings.Contains(rec.Body.String(), `"tickInterval"`) {
				t.Errorf("port %d, open to the pod network, serves the status: %d %s", s.port, rec.Code, rec.Body)
			}
		}
		if s.port == a.cfg.Port {
			if rec := get(s.srv.Handler, network.AutoscalerStatusPath); rec.Code != http.StatusNotFound {
				t.Errorf("GET %s on the activators' port: %d, want 404", network.AutoscalerStatusPath, rec.Code)
			}
			// Still the activators' port: their websocket asks for a token.
			if rec := get(s.srv.Handler, network.ActivatorReportPath); rec.Code != http.StatusUnauthorized {
				t.Errorf("GET %s on the activators' port without a token: %d, want 401", network.ActivatorReportPath, rec.Code)
			}
		}
	}
	if status == nil {
		t.Fatal("no server of the status")
	}
	if status.port != a.cfg.StatusPort || status.port != defaultStatusPort || status.tls {
		t.Errorf("status on port %d (TLS %t), want STATUS_PORT %d in clear text", status.port, status.tls, defaultStatusPort)
	}

	// Listening, on a port of the system's choosing.
	status.port = 0
	lns, err := a.listen(*status)
	if err != nil {
		t.Fatal(err)
	}
	for _, ln := range lns {
		go status.srv.Serve(ln)
	}
	t.Cleanup(func() { status.srv.Close() })
	for _, ln := range lns {
		addr := ln.Addr().(*net.TCPAddr)
		if !addr.IP.IsLoopback() {
			t.Errorf("the status listens on %s, not a loopback address", addr)
		}
		for _, leading := range []bool{true, false} {
			a.leading.Store(leading)
			st := getStatus(t, "http://"+addr.String()+network.AutoscalerStatusPath)
			if st.Leading == nil || *st.Leading != leading {
				t.Errorf("status at %s says leading %v, want %t", addr, st.Leading, leading)
			}
		}
	}
	if lns[0].Addr().(*net.TCPAddr).IP.String() != "127.0.0.1" {
		t.Errorf("first listener %s, want 127.0.0.1, which kubectl port-forward dials", lns[0].Addr())
	}
}

func getStatus(t *testing.T, url string) autoscaler.Status {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, res.StatusCode, body)
	}
	var st autoscaler.Status
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("GET %s: %v: %s", url, err, body)
	}
	return st
}

// The injected push URL is the autoscaler Service's ClusterIP at its push
// port, which needs no DNS in the pod; without the Service, a ClusterIP or
// a push port, it is the Service's name.
func TestPushURL(t *testing.T) {
	const ns = "swell-system"
	dns := inject.PushURL(ns)
	svc := func(ip string, ports ...corev1.ServicePort) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: kube.AutoscalerService},
			Spec: corev1.ServiceSpec{ClusterIP: ip, Ports: ports}}
	}
	push := corev1.ServicePort{Name: kube.PortNamePush, Port: 8081}
	reports := corev1.ServicePort{Name: kube.PortNameHTTP, Port: 8080}
	for _, c := range []struct {
		name string
		svc  *corev1.Service
		want string
	}{
		{"no Service", nil, dns},
		{"a ClusterIP and a push port", svc("10.96.0.9", reports, push), "ws://10.96.0.9:8081/pods"},
		{"IPv6", svc("fd00::9", reports, push), "ws://[fd00::9]:8081/pods"},
		{"headless", svc("None", reports, push), dns},
		{"no push port", svc("10.96.0.9", reports), dns},
	} {
		idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		if c.svc != nil {
			idx.Add(c.svc)
		}
		if got := pushURL(corelisters.NewServiceLister(idx), ns); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}
