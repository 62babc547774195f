package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"

	"github.com/swell-run/swell/activator"
	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/kube/activatorsource"
	"github.com/swell-run/swell/pkg/network"
)

// listener accepts on loopback and reports each connection.
func listener(t *testing.T) (string, <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan struct{}, 10)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
			accepted <- struct{}{}
		}
	}()
	return ln.Addr().String(), accepted
}

func TestAutoscalerDialer(t *testing.T) {
	leaderAddr, leader := listener(t)
	otherAddr, other := listener(t)
	var endpoint string
	dial := autoscalerDialer(kube.HostNames(kube.AutoscalerService, "swell-system", "cluster.local"), "swell-system/autoscaler",
		func() (string, bool) { return endpoint, endpoint != "" }, (&net.Dialer{}).DialContext)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	_, err := dial(ctx, "tcp", "autoscaler.swell-system.svc:8080")
	if err == nil || !strings.Contains(err.Error(), "Service swell-system/autoscaler has no ready endpoint") {
		t.Fatalf("no endpoint: got %v, want an error naming the Service", err)
	}

	endpoint = leaderAddr
	for _, tc := range []struct {
		addr     string
		toLeader bool
	}{
		{"autoscaler.swell-system.svc:8080", true},
		{"AUTOSCALER.swell-system.svc.cluster.local.:8080", true},
		{"autoscaler.swell-system:80", true},
		{otherAddr, false},
	} {
		c, err := dial(ctx, "tcp", tc.addr)
		if err != nil {
			t.Fatalf("%s: %v", tc.addr, err)
		}
		c.Close()
		select {
		case <-leader:
			if !tc.toLeader {
				t.Errorf("%s reached the autoscaler's endpoint", tc.addr)
			}
		case <-other:
			if tc.toLeader {
				t.Errorf("%s reached %s, not the autoscaler's endpoint", tc.addr, otherAddr)
			}
		case <-ctx.Done():
			t.Fatalf("%s: nobody accepted", tc.addr)
		}
	}
}

// TestReporterDialerReachesAutoscalerEndpoint: the websocket dialer of
// Kubernetes mode connects the default autoscaler URL to the endpoint in
// the autoscaler Service's EndpointSlice, with no DNS involved, over TLS
// that trusts only the CAs of the ConfigMap the autoscaler publishes:
// without it, or with another CA in it, nothing is sent.
func TestReporterDialerReachesAutoscalerEndpoint(t *testing.T) {
	const serverName = "autoscaler.infra.svc"
	chain, key, err := certutil.GenerateSelfSignedCertKey(serverName, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := tls.X509KeyPair(chain, key)
	if err != nil {
		t.Fatal(err)
	}
	upgraded := make(chan struct{}, 4)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != network.ActivatorReportPath {
			http.NotFound(w, r)
			return
		}
		c, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			return
		}
		c.Close()
		upgraded <- struct{}{}
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{serving}}
	srv.StartTLS()
	defer srv.Close()
	host, portText, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ := strconv.Atoi(portText)
	port32, name, ready := int32(port), kube.PortNameHTTP, true
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: "autoscaler-leader",
			Labels: map[string]string{discoveryv1.LabelServiceName: kube.AutoscalerService}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port32}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{host},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
	}

	cfg, err := parseConfig(nil, envOf("SYSTEM_NAMESPACE", "infra"))
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(slice)
	src, err := activatorsource.New(activatorsource.Config{Client: client, SystemNamespace: cfg.SystemNamespace})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() { src.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	if !src.WaitForSync(ctx) {
		t.Fatal("the source never synced")
	}
	k := &kubeMode{cfg: cfg, src: src, log: zap.NewNop()}
	dial := func() error {
		leader := src.AutoscalerLeaders()
		if len(leader) != 1 {
			t.Fatalf("leaders %q, want one bucket", leader)
		}
		c, _, err := k.dialerFor(leader[0]).DialContext(ctx, cfg.AutoscalerURL, nil)
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := dial(); err == nil || !strings.Contains(err.Error(), "no CA to trust the autoscaler by yet") {
		t.Fatalf("dial without the CA ConfigMap: %v, want refused", err)
	}

	// Another CA: the autoscaler's certificate is not trusted.
	otherChain, _, err := certutil.GenerateSelfSignedCertKey(serverName, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	setCA := func(bundle []byte) {
		t.Helper()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: kube.CAConfigMap},
			Data: map[string]string{kube.CAConfigMapKey: string(bundle)}}
		cms := client.CoreV1().ConfigMaps("infra")
		_, err := cms.Update(ctx, cm, metav1.UpdateOptions{})
		if apierrors.IsNotFound(err) {
			_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
		want := caOf(t, bundle)
		for {
			if p := src.AutoscalerRoots(); p != nil && p.Equal(want) {
				return
			}
			select {
			case <-src.AutoscalerChanged():
			case <-ctx.Done():
				t.Fatal("the source never loaded the CA")
			}
		}
	}
	setCA(otherChain)
	if err := dial(); err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Fatalf("dial trusting another CA: %v, want refused", err)
	}
	setCA(chain)
	if err := dial(); err != nil {
		t.Fatalf("dial %s: %v", cfg.AutoscalerURL, err)
	}
	<-upgraded
}

// TestTrustedByChecksTheAutoscalersName: a certificate of a CA the
// activator trusts is accepted for the autoscaler only if it names the
// autoscaler's Service, whatever was dialled: an AUTOSCALER_URL with an IP
// address checked no name, and any certificate a CA of swell-ca issued
// passed for the autoscaler (review finding 8).
func TestTrustedByChecksTheAutoscalersName(t *testing.T) {
	const name = "autoscaler.infra.svc"
	for _, tc := range []struct {
		names   string
		refused bool
	}{
		{name, false},
		{"other.infra.svc", true},
	} {
		// Both also name the address dialled.
		chain, key, err := certutil.GenerateSelfSignedCertKey(tc.names, []net.IP{net.IPv4(127, 0, 0, 1)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		serving, err := tls.X509KeyPair(chain, key)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewUnstartedServer(http.NotFoundHandler())
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{serving}}
		srv.StartTLS()
		roots := caOf(t, chain)
		cfg := trustedBy(func() *x509.CertPool { return roots }, "infra/swell-ca", name)
		c, err := tls.Dial("tcp", srv.Listener.Addr().String(), cfg)
		if err == nil {
			c.Close()
		}
		srv.Close()
		switch {
		case tc.refused && (err == nil || !strings.Contains(err.Error(), "not "+name)):
			t.Errorf("a certificate for %s, dialled by address: %v; want it refused as not %s", tc.names, err, name)
		case !tc.refused && err != nil:
			t.Errorf("a certificate for %s, dialled by address: %v; want it accepted", tc.names, err)
		}
	}
}

// caOf is a pool of the CA certificates (the self-signed ones) in bundle.
func caOf(t *testing.T, bundle []byte) *x509.CertPool {
	t.Helper()
	certs, err := certutil.ParseCertsPEM(bundle)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool
}

// TestKubeModeCredentials: the activator presents its service-account
// token, preferring the file the kubelet renews to a fixed token.
func TestKubeModeCredentials(t *testing.T) {
	for _, tc := range []struct {
		rest        rest.Config
		token, file string
	}{
		{rest.Config{BearerTokenFile: "/var/run/secrets/kubernetes.io/serviceaccount/token", BearerToken: "read-at-start"}, "", "/var/run/secrets/kubernetes.io/serviceaccount/token"},
		{rest.Config{BearerToken: "from-a-kubeconfig"}, "from-a-kubeconfig", ""},
	} {
		k := &kubeMode{rest: &tc.rest}
		token, file, err := k.credentials()
		if err != nil || token != tc.token || file != tc.file {
			t.Errorf("credentials() = %q, %q, %v; want %q, %q", token, file, err, tc.token, tc.file)
		}
	}
	k := &kubeMode{rest: &rest.Config{}}
	if _, _, err := k.credentials(); err == nil || !strings.Contains(err.Error(), "automountServiceAccountToken") {
		t.Errorf("no token: %v, want an error saying how to mount one", err)
	}
}

// TestKubeModeKnowsCallers: in Kubernetes mode the activator knows each
// caller's namespace from the cluster's pods, and its refusals say which
// annotation admits more callers.
func TestKubeModeKnowsCallers(t *testing.T) {
	src, err := activatorsource.New(activatorsource.Config{Client: fake.NewClientset()})
	if err != nil {
		t.Fatal(err)
	}
	var c activator.Config
	(&kubeMode{src: src}).configure(&c)
	if c.Callers == nil || !strings.Contains(c.CallersHint, kube.AnnotationAllowedCallers) {
		t.Errorf("Callers %v, hint %q; want the source's directory and a hint naming %s", c.Callers, c.CallersHint, kube.AnnotationAllowedCallers)
	}
}
