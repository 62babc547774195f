package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// Swell's services behind the suite's ingress controller: Traefik reads
// a routed Service's endpoints (Swell's route slice) and proxies to them
// itself, with the public host and path the client asked for. A service
// at zero is reached at the activators, on the port they open for it
// (docs/routing.md#service-ports), not at its ClusterIP: the port alone
// says which service a request is for.
//
// Traefik is shared by the whole suite: each test claims a public host of
// its own, so that no test's routes take another's requests.

// traefikGatewayController is the controllerName of Traefik's Gateway
// API provider: the GatewayClasses that name it are Traefik's.
const traefikGatewayController = "traefik.io/gateway-controller"

// traefikWebsecurePort is the port of Traefik's websecure entry point in
// its pod (traefikManifest). A Gateway's listener names it, not the
// Service's 443: Traefik attaches a listener to the entry point whose
// address ends in the listener's port.
const traefikWebsecurePort = 8443

// The Gateway API's resources, as the Traefik tests use them.
var (
	gatewayClasses = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "gatewayclasses"}
	gateways       = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "gateways"}
	httpRoutes     = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "httproutes"}
)

// swellBehindTraefik is setup for a test of Swell behind the ingress
// controller: Swell and Traefik installed and ready, a namespace of the
// test's own.
func swellBehindTraefik(t *testing.T) *env {
	t.Helper()
	e := swellSetup(t)
	t.Cleanup(e.keepTraefikEvidence)
	if err := installTraefik(); err != nil {
		t.Fatalf("install Traefik: %v", err)
	}
	e.eventuallyWithin("Traefik ready", installTimeout, func(ctx context.Context) error {
		return traefikReady(ctx, e.cs)
	})
	return e
}

// optedIn is a hello Deployment at zero replicas with nothing of Swell's
// but the opt-in label: swellHello without the annotation that admits any
// caller, so that the activators judge callers by the namespace's
// NetworkPolicies alone (with none, everyone is served, as Kubernetes
// does).
func optedIn(name string) *appsv1.Deployment {
	d := swellHello(name, int32p(0), nil)
	delete(d.Annotations, allowedCallers)
	return d
}

// pathBackend is one Swell service behind a path of a public host: its
// Deployment and Service, name, take the requests under prefix; probe is
// the path a request for it asks for, with a query so that the app names
// the address the request came from (Demo-Peer).
type pathBackend struct {
	name, prefix, probe string
}

// shopBackends split a host by path: /api to the service api, the rest to
// web.
var shopBackends = []pathBackend{
	{name: "api", prefix: "/api", probe: "/api/orders?sleep=100ms"},
	{name: "web", prefix: "/", probe: "/catalog?sleep=100ms"},
}

// TestSwellBehindIngressSplitByPath: two Swell services under one public
// host of an Ingress, split by path (/api to api, the rest to web), TLS
// terminated by Traefik with a self-signed certificate for the host. Both
// start at zero, and Traefik sends their paths to the activators, as
// their route slices list them. An open-loop stream over TLS (SNI the
// host) at Traefik's websecure port wakes both through the activators;
// once each is answered by its pods the stream stops and both go back to
// zero, where Traefik sends them to the activators again. Every request
// is counted: each must be answered 200 by a pod of its own service,
// through that pod's queue-proxy; none may be lost. The Deployments carry
// nothing of Swell's but the opt-in label.
func TestSwellBehindIngressSplitByPath(t *testing.T) {
	t.Parallel()
	e := swellBehindTraefik(t)
	const host, secret = "store.example.com", "store-tls"
	roots := e.createTLSSecret(secret, host)
	for _, b := range shopBackends {
		e.createHello(optedIn(b.name))
	}
	e.createSplitIngress("store", host, secret, shopBackends)

	routed := func(ctx context.Context) error {
		for _, b := range shopBackends {
			_, servers, err := e.routeServers(ctx, b.name)
			if err != nil {
				return err
			}
			// The Ingress's backends name the Services' port by its name.
			if err := traefikRoutes(ctx, e.cs, e.ns+"-"+b.name+"-http", host, b.prefix, servers); err != nil {
				return err
			}
		}
		return nil
	}
	e.streamOverTLS(host, roots, routed)
}

// TestSwellBehindGatewaySplitByPath is TestSwellBehindIngressSplitByPath
// through the Gateway API: a GatewayClass of Traefik's controller, a
// Gateway whose HTTPS listener (on Traefik's websecure entry point)
// terminates TLS for the host with the test's certificate, and an
// HTTPRoute splitting the host by path between the two Swell services.
func TestSwellBehindGatewaySplitByPath(t *testing.T) {
	t.Parallel()
	e := swellBehindTraefik(t)
	const host, secret, gateway = "mall.example.com", "mall-tls", "mall"
	roots := e.createTLSSecret(secret, host)
	for _, b := range shopBackends {
		e.createHello(optedIn(b.name))
	}
	class := e.createGateway(gateway, host, secret, shopBackends)

	dc, err := dynamic.NewForConfig(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.eventually("GatewayClass "+class+" accepted, Gateway "+gateway+" programmed, its HTTPRoute accepted with its references resolved", func(ctx context.Context) error {
		gc, err := dc.Resource(gatewayClasses).Get(ctx, class, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := conditionTrue(gc.Object, "GatewayClass "+class, "Accepted", "status", "conditions"); err != nil {
			return err
		}
		gw, err := dc.Resource(gateways).Namespace(e.ns).Get(ctx, gateway, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := conditionTrue(gw.Object, "Gateway "+gateway, "Programmed", "status", "conditions"); err != nil {
			return err
		}
		hr, err := dc.Resource(httpRoutes).Namespace(e.ns).Get(ctx, gateway, metav1.GetOptions{})
		if err != nil {
			return err
		}
		parents, _, _ := unstructured.NestedSlice(hr.Object, "status", "parents")
		for _, p := range parents {
			p, _ := p.(map[string]any)
			if c, _, _ := unstructured.NestedString(p, "controllerName"); c != traefikGatewayController {
				continue
			}
			for _, cond := range []string{"Accepted", "ResolvedRefs"} {
				if err := conditionTrue(p, "HTTPRoute "+gateway, cond, "conditions"); err != nil {
					return err
				}
			}
			return nil
		}
		return fmt.Errorf("HTTPRoute %s has no status from %s: %v", gateway, traefikGatewayController, parents)
	})
	routed := func(ctx context.Context) error {
		for _, b := range shopBackends {
			_, servers, err := e.routeServers(ctx, b.name)
			if err != nil {
				return err
			}
			// The HTTPRoute's backends name the Services' port by its
			// number.
			if err := traefikGatewayRoutes(ctx, e, b.name, 80, host, b.prefix, servers); err != nil {
				return err
			}
		}
		return nil
	}
	e.streamOverTLS(host, roots, routed)
}

// streamOverTLS runs the split stream at Traefik's websecure entry point,
// over TLS to host (SNI) trusting roots, once Traefik presents host's
// certificate; routed says when Traefik routes every path as it should.
func (e *env) streamOverTLS(host string, roots *x509.CertPool, routed func(ctx context.Context) error) {
	e.t.Helper()
	addr, err := traefikEntryPoint(e.t.Context(), e, "websecure")
	if err != nil {
		e.t.Fatal(err)
	}
	e.eventually("Traefik presenting the certificate of "+host, func(ctx context.Context) error {
		return tlsPresents(ctx, addr, host, roots)
	})
	tlsConf := &tls.Config{ServerName: host, RootCAs: roots}
	e.streamThroughZero(newIngressStream(e.t, "https://"+addr, host, tlsConf, shopBackends), routed)
}

// streamThroughZero runs s's stream through the ingress while its
// services go from zero to their pods and back: once every service is at
// zero behind the activators and routed says the ingress sends it there,
// s streams 5 requests a second to each until each has a ready pod and
// has been answered by its pods 30 times; then stops, until each is back
// at zero behind the activators and the ingress follows. Every request
// must have been answered by its own service.
func (e *env) streamThroughZero(s *ingressStream, routed func(ctx context.Context) error) {
	e.t.Helper()
	atZero := func(ctx context.Context) error {
		for _, b := range s.backends {
			if n, err := e.replicas(ctx, b.name); err != nil || n != 0 {
				return fmt.Errorf("%s: scale %d %v, want 0", b.name, n, err)
			}
			if err := e.routeIs(ctx, b.name, "activator"); err != nil {
				return fmt.Errorf("%s: %w", b.name, err)
			}
		}
		return routed(ctx)
	}
	var names []string
	for _, b := range s.backends {
		names = append(names, b.name)
	}
	e.eventually(strings.Join(names, " and ")+" at zero, the ingress sending them to the activators", atZero)
	for _, b := range s.backends {
		_, servers, err := e.routeServers(e.t.Context(), b.name)
		e.t.Logf("%s%s (%s) at zero: the ingress sends it to %v %v", s.host, b.prefix, b.name, servers, err)
	}

	// The counts are reported however the test ends, the stream stopped
	// first.
	defer s.report()
	start := time.Now()
	stop := s.run(5, "from zero")
	defer stop()
	e.eventuallyWithin(strings.Join(names, " and ")+" each with a ready pod, answered by its pods 30 times", scaleTimeout, func(ctx context.Context) error {
		for _, b := range s.backends {
			d, err := e.cs.AppsV1().Deployments(e.ns).Get(ctx, b.name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if d.Status.ReadyReplicas < 1 {
				return fmt.Errorf("%s: %d ready replicas", b.name, d.Status.ReadyReplicas)
			}
			if n := s.right(b.name); n < 30 {
				return fmt.Errorf("%s: answered by its pods %d times", b.name, n)
			}
		}
		return nil
	})
	stop()
	e.t.Logf("woken and served through the ingress in %v", time.Since(start).Round(time.Millisecond))
	for _, b := range s.backends {
		n, err := e.replicas(e.t.Context(), b.name)
		route, _, rerr := e.routeServers(e.t.Context(), b.name)
		e.t.Logf("%s when the stream stopped: scale %d %v, route %q %v", b.name, n, err, route, rerr)
	}
	e.eventuallyWithin(strings.Join(names, " and ")+" back at zero, the ingress sending them to the activators again", scaleTimeout, atZero)
	s.check()
}

// ingressStream is an open-loop stream of requests through the ingress,
// each on a new connection, for the paths of backends; it counts each
// request and what came of it, per service.
type ingressStream struct {
	t        *testing.T
	client   *http.Client
	base     string
	host     string
	backends []pathBackend

	mu     sync.Mutex
	phase  string
	counts map[string]*streamCount
	// examples keeps the first few requests that were lost or answered
	// by another service, for the failure message.
	examples []string
	wg       sync.WaitGroup
}

// streamCount is what came of a service's requests: each sent request is
// answered right (200 from a pod of the service, through its
// queue-proxy), wrong (by anything else), or lost (an error or another
// status).
type streamCount struct {
	sent, right, wrong, lost int
}

// newIngressStream streams to base (the ingress's scheme and address)
// with the Host host, over TLS with tlsConf when it is not nil. Each
// request has a new connection, so that none is sent again by the client
// on a kept connection the server closed: a request that fails is lost.
func newIngressStream(t *testing.T, base, host string, tlsConf *tls.Config, backends []pathBackend) *ingressStream {
	s := &ingressStream{
		t: t,
		client: &http.Client{
			Transport: &http.Transport{
				Proxy:             nil,
				DialContext:       (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
				TLSClientConfig:   tlsConf,
				DisableKeepAlives: true,
			},
			// A request waits for a cold start behind the activators.
			Timeout: scaleTimeout,
		},
		base:     base,
		host:     host,
		backends: backends,
		counts:   map[string]*streamCount{},
	}
	for _, b := range backends {
		s.counts[b.name] = &streamCount{}
	}
	return s
}

// run sends rate requests a second to each backend, each on its own (a
// slow answer does not slow the stream), until the returned stop is
// called (once or more).
func (s *ingressStream) run(rate int, phase string) (stop func()) {
	s.mu.Lock()
	s.phase = phase
	s.mu.Unlock()
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-s.t.Context().Done():
				return
			case <-tick.C:
				for _, b := range s.backends {
					s.send(b)
				}
			}
		}
	}()
	return sync.OnceFunc(func() {
		close(done)
		<-stopped
	})
}

// send sends one request for b and counts what comes of it.
func (s *ingressStream) send(b pathBackend) {
	s.mu.Lock()
	s.counts[b.name].sent++
	phase := s.phase
	s.mu.Unlock()
	s.wg.Go(func() {
		at := time.Now()
		code, peer, body, err := clientGet(s.t.Context(), s.client, s.base+b.probe, s.host)
		s.note(at, phase, b, code, peer, body, err)
	})
}

// note records what came of one request for b.
func (s *ingressStream) note(at time.Time, phase string, b pathBackend, code int, peer, body string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.counts[b.name]
	example := func(what string) {
		if len(s.examples) < 10 {
			s.examples = append(s.examples, fmt.Sprintf("%s %s: %s%s: %s", at.Format("15:04:05.000"), phase, s.host, b.probe, what))
		}
	}
	replica := replicaOf(body)
	switch {
	case err != nil:
		c.lost++
		example(err.Error())
	case code != http.StatusOK:
		c.lost++
		example(fmt.Sprintf("status %d: %q", code, lastBytes(body, 200)))
	case !strings.HasPrefix(replica, b.name+"-"):
		c.wrong++
		example(fmt.Sprintf("answered by %s, not by a pod of %s", replica, b.name))
	case peer != "127.0.0.1" && peer != "::1":
		c.wrong++
		example(fmt.Sprintf("answered by %s for a request from %q, not through its queue-proxy", replica, peer))
	default:
		c.right++
	}
}

// right says how many of b's requests its pods have answered so far.
func (s *ingressStream) right(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[name].right
}

// report waits for the requests in flight and logs the counts.
func (s *ingressStream) report() {
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.backends {
		c := s.counts[b.name]
		s.t.Logf("%s%s (%s): %d requests sent, %d answered by its pods, %d by anything else, %d lost", s.host, b.prefix, b.name, c.sent, c.right, c.wrong, c.lost)
	}
	if len(s.examples) > 0 {
		s.t.Logf("the first requests that went wrong:\n%s", strings.Join(s.examples, "\n"))
	}
}

// check waits for the requests in flight and fails the test when any was
// lost or answered by anything but its own service's pods.
func (s *ingressStream) check() {
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.backends {
		if c := s.counts[b.name]; c.sent == 0 || c.right != c.sent {
			s.t.Errorf("%s%s: of %d requests to %s, %d were answered by anything else and %d lost; want every one answered by its pods", s.host, b.prefix, c.sent, b.name, c.wrong, c.lost)
		}
	}
}

// clientGet sends GET url with the Host header host through c, and
// returns the status, the Demo-Peer header and the body.
func clientGet(ctx context.Context, c *http.Client, url, host string) (code int, peer, body string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", "", err
	}
	req.Host = host
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get(demoPeer), string(b), err
}

// TestSwellBehindIngressWebsocketWakes: a websocket through the ingress
// to a service at zero. Traefik sends the upgrade to the activators,
// which hold it while the service wakes; the app's echo answers through
// the ingress, the activator and the pod's queue-proxy.
func TestSwellBehindIngressWebsocketWakes(t *testing.T) {
	t.Parallel()
	e := swellBehindTraefik(t)
	const name, host = "chat", "chat.example.com"
	e.createHello(optedIn(name))
	e.createIngress(name, host, "/")
	e.eventually(name+" at zero, Traefik sending it to the activators", func(ctx context.Context) error {
		servers, err := e.atZeroBehindActivators(ctx, name)
		if err != nil {
			return err
		}
		return traefikRoutes(ctx, e.cs, e.ns+"-"+name+"-http", host, "/", servers)
	})

	addr, err := traefikEntryPoint(t.Context(), e, "web")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), scaleTimeout)
	defer cancel()
	const msg = "hello through the ingress"
	start := time.Now()
	echo, err := websocketEcho(ctx, addr, host, "/ws", msg)
	if err != nil {
		t.Fatalf("websocket to %s/ws at Traefik's %s: %v", host, addr, err)
	}
	if echo != msg {
		t.Fatalf("websocket echo %q, want %q", echo, msg)
	}
	t.Logf("websocket echoed through the ingress from zero after %v", time.Since(start).Round(time.Millisecond))
	if n, err := e.replicas(t.Context(), name); err != nil || n < 1 {
		t.Errorf("scale after the websocket: %d %v, want at least 1", n, err)
	}
}

// websocketEcho opens a websocket to path at addr (host:port) with the
// Host header host, sends msg as one text message and returns the message
// that comes back, then closes. ctx bounds it all, the cold start
// included.
func websocketEcho(ctx context.Context, addr, host, path, msg string) (string, error) {
	d := websocket.Dialer{NetDialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext}
	c, resp, err := d.DialContext(ctx, "ws://"+addr+path, http.Header{"Host": {host}})
	if err != nil {
		if resp != nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
			return "", fmt.Errorf("upgrade answered %d (Swell-Reason %q): %q: %w", resp.StatusCode, resp.Header.Get("Swell-Reason"), body, err)
		}
		return "", err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetReadDeadline(dl)
		c.SetWriteDeadline(dl)
	}
	if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
		return "", fmt.Errorf("send the message: %w", err)
	}
	typ, echo, err := c.ReadMessage()
	if err != nil {
		return "", fmt.Errorf("read the echo: %w", err)
	}
	if typ != websocket.TextMessage {
		return "", fmt.Errorf("the echo is a message of type %d, want text", typ)
	}
	c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
	return string(echo), nil
}

// TestSwellBehindIngressNetworkPolicy: a Swell service whose
// NetworkPolicy admits, on the app's port, only Traefik's pods (by their
// namespace's name and their labels), behind an Ingress. The activators
// judge whoever reaches them as the policy would judge that caller
// reaching the pods directly:
//
//   - a pod of another namespace, carrying Traefik's pod labels, calling
//     the Service at its ClusterIP at zero is refused 403
//     caller-not-allowed, as it is by every activator it calls directly
//     on the service's port, and wakes nothing;
//   - the ingress reaches the service from zero through the activators;
//   - with the service scaled up (kept so by a stream through the ingress,
//     every request of which must be answered), the same pod is still
//     refused 403 at the Service's ClusterIP, the activators being still
//     in its path (the default burst capacity keeps them there), and by
//     every activator directly.
//
// The test cluster's network plugin does not enforce NetworkPolicies: the
// pod reaching the service's pods directly is not refused here, and is
// logged, not asserted. What is shown is the activators' side: standing
// in for the pods, at zero and scaled up, they refuse what an enforcing
// network would refuse, and serve what it would let through.
func TestSwellBehindIngressNetworkPolicy(t *testing.T) {
	t.Parallel()
	e := swellBehindTraefik(t)
	other := setup(t)
	const name, host = "guarded", "guarded.example.com"

	// The policy comes first, so that no activator ever judges the
	// service without it.
	e.admitOnly("only-traefik", name, map[string]string{corev1.LabelMetadataName: traefikNamespace}, map[string]string{"app": traefikName})
	e.createHello(optedIn(name))
	e.createIngress(name, host, "/")

	// Traefik's own pod labels, in the wrong namespace.
	stranger := other.labelledIdlePod(other.ns, "stranger", "app", traefikName)
	strangerClient := e.clientIn(stranger, 10*time.Second)
	clusterHost := name + "." + e.ns + ".svc.cluster.local"

	var acts []string
	e.eventually(name+" at zero, its Service and Traefik sending it to the activators", func(ctx context.Context) error {
		servers, err := e.atZeroBehindActivators(ctx, name)
		if err != nil {
			return err
		}
		if err := proxiedAsListed(ctx, e.cs, e.ns, name); err != nil {
			return err
		}
		acts = servers
		return traefikRoutes(ctx, e.cs, e.ns+"-"+name+"-http", host, "/", servers)
	})
	serviceURL, err := e.serviceURL(t.Context(), name, "/")
	if err != nil {
		t.Fatal(err)
	}

	// refused checks that the stranger is refused at the Service's
	// ClusterIP and by every activator the route slice listed (at the
	// address and port the Service leads to). An activator that does not
	// route the service yet (404, for a moment after it appears) is asked
	// again; any other answer fails the test.
	refused := func(when string) {
		t.Helper()
		e.eventually(when+", the stranger refused at the ClusterIP and by every activator", func(ctx context.Context) error {
			for _, url := range append([]string{serviceURL}, acts...) {
				code, reason, body, err := tryBody(strangerClient, strings.TrimSuffix(url, "/")+"/", clusterHost)
				switch {
				case err == nil && code == http.StatusNotFound && reason == "unknown-service":
					return fmt.Errorf("%s does not route %s yet: %q", url, clusterHost, body)
				case err != nil || code != http.StatusForbidden || reason != "caller-not-allowed":
					t.Errorf("%s, %s answered the stranger %d %q %q %v; want 403 caller-not-allowed", when, url, code, reason, body, err)
				}
			}
			return nil
		})
	}

	// 1. At zero: refused, and nothing wakes.
	refused("at zero")
	e.consistently(name+" kept at zero after the stranger's requests", 3*time.Second, func(ctx context.Context) error {
		if n, err := e.replicas(ctx, name); err != nil || n != 0 {
			return fmt.Errorf("scale %d %v, want 0", n, err)
		}
		return nil
	})

	// 2. Through the ingress from zero: Traefik's pod is admitted.
	web, err := traefikEntryPoint(t.Context(), e, "web")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	code, body, err := hostGet(t.Context(), "http://"+web+"/", host)
	if err != nil || code != http.StatusOK || !strings.HasPrefix(replicaOf(body), name+"-") {
		t.Fatalf("GET %s/ through Traefik at zero: %d %q %v; want 200 from a pod of %s", host, code, body, err, name)
	}
	t.Logf("the ingress's first answer from zero after %v", time.Since(start).Round(time.Millisecond))

	// 3. Scaled up, kept so by a stream through the ingress.
	s := newIngressStream(t, "http://"+web, host, nil, []pathBackend{{name: name, prefix: "/", probe: "/?sleep=100ms"}})
	defer s.report()
	stop := s.run(4, "scaled up")
	defer stop()
	e.waitReady(name)
	if err := e.routeIs(t.Context(), name, "activator"); err != nil {
		t.Fatalf("scaled up with the default burst capacity, %s's route: %v; the activators should still be in its path", name, err)
	}
	refused("scaled up")
	e.eventually("the ingress's stream answered 12 times", func(context.Context) error {
		if n := s.right(name); n < 12 {
			return fmt.Errorf("answered %d times", n)
		}
		return nil
	})
	pods, err := e.pods(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if isReady(&p) {
			code, reason, _, err := tryBody(strangerClient, "http://"+net.JoinHostPort(p.Status.PodIP, strconv.Itoa(queueProxyPort))+"/", clusterHost)
			t.Logf("the stranger at pod %s's queue-proxy directly (the policy is not enforced on this cluster's pods): %d %q %v", p.Name, code, reason, err)
			break
		}
	}
	stop()
	s.check()
}

// waitReady waits until the Deployment has a ready pod.
func (e *env) waitReady(name string) {
	e.t.Helper()
	e.eventuallyWithin(name+" with a ready pod", scaleTimeout, func(ctx context.Context) error {
		d, err := e.cs.AppsV1().Deployments(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Status.ReadyReplicas < 1 {
			return fmt.Errorf("%d ready replicas", d.Status.ReadyReplicas)
		}
		return nil
	})
}

// atZeroBehindActivators reports, as an error, when the service name is
// not at zero with its route slice listing the activators, and returns the
// servers the slice lists.
func (e *env) atZeroBehindActivators(ctx context.Context, name string) ([]string, error) {
	if n, err := e.replicas(ctx, name); err != nil || n != 0 {
		return nil, fmt.Errorf("scale %d %v, want 0", n, err)
	}
	route, servers, err := e.routeServers(ctx, name)
	if err != nil {
		return nil, err
	}
	if route != "activator" {
		return nil, fmt.Errorf("route %q, want activator", route)
	}
	return servers, nil
}

// routeServers reads Swell's route slice of the Service: its route
// ("pods" or "activator") and the servers an ingress controller that
// reads the Service's endpoints proxies its port http to, as Traefik
// names them (http://address:port), sorted. The port is the slice's,
// whatever it is: the activators' own, or the one they open for the
// service.
func (e *env) routeServers(ctx context.Context, service string) (string, []string, error) {
	s, err := e.routeSlice(ctx, service)
	if err != nil {
		return "", nil, err
	}
	var port int32
	for _, p := range s.Ports {
		if p.Name != nil && *p.Name == "http" && p.Port != nil {
			port = *p.Port
		}
	}
	if port == 0 {
		return "", nil, fmt.Errorf("route slice of %s has no port http: %v", service, describePorts(s.Ports))
	}
	var servers []string
	for _, ep := range s.Endpoints {
		if ep.Conditions.Ready == nil || !*ep.Conditions.Ready {
			continue
		}
		for _, a := range ep.Addresses {
			servers = append(servers, "http://"+net.JoinHostPort(a, strconv.Itoa(int(port))))
		}
	}
	if len(servers) == 0 {
		return "", nil, fmt.Errorf("route slice of %s lists no ready endpoint", service)
	}
	slices.Sort(servers)
	return s.Labels[labelRoute], servers, nil
}

// traefikEntryPoint is the address (ClusterIP and port) of the entry
// point port of Traefik's Service, as clients in the cluster reach it.
func traefikEntryPoint(ctx context.Context, e *env, port string) (string, error) {
	s, err := e.cs.CoreV1().Services(traefikNamespace).Get(ctx, traefikName, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	for _, p := range s.Spec.Ports {
		if p.Name == port {
			return net.JoinHostPort(s.Spec.ClusterIP, strconv.Itoa(int(p.Port))), nil
		}
	}
	return "", fmt.Errorf("service %s/%s has no port %s: %v", traefikNamespace, traefikName, port, s.Spec.Ports)
}

// createTLSSecret creates a Secret of type kubernetes.io/tls, name,
// holding a new self-signed certificate for host and its key, and returns
// a pool that trusts that certificate alone.
func (e *env) createTLSSecret(name, host string) *x509.CertPool {
	e.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		e.t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		e.t.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		// Its own issuer: the client trusts it as a root.
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		e.t.Fatalf("self-signed certificate for %s: %v", host, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		e.t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		e.t.Fatal(err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Type:       corev1.SecretTypeTLS,
		Data: map[string][]byte{
			corev1.TLSCertKey:       pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			corev1.TLSPrivateKeyKey: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		},
	}
	if _, err := e.cs.CoreV1().Secrets(e.ns).Create(e.t.Context(), secret, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create TLS secret %s: %v", name, err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	return roots
}

// tlsPresents reports, as an error, when the TLS server at addr does not
// complete a handshake for the server name host with a certificate roots
// trust. It sends no request.
func tlsPresents(ctx context.Context, addr, host string, roots *x509.CertPool) error {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: &tls.Config{ServerName: host, RootCAs: roots}}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("TLS handshake with %s for %s: %w", addr, host, err)
	}
	return c.Close()
}

// createSplitIngress creates an Ingress of Traefik's class, name, that
// sends host's requests under each backend's prefix to its Service's port
// http, with TLS for host terminated with the certificate of the Secret
// secret.
func (e *env) createSplitIngress(name, host, secret string, backends []pathBackend) {
	e.t.Helper()
	class, prefix := traefikClass, networkingv1.PathTypePrefix
	var paths []networkingv1.HTTPIngressPath
	for _, b := range backends {
		paths = append(paths, networkingv1.HTTPIngressPath{
			Path:     b.prefix,
			PathType: &prefix,
			Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
				Name: b.name,
				Port: networkingv1.ServiceBackendPort{Name: "http"},
			}},
		})
	}
	ing := &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			// Traefik takes the certificate from the Ingress's tls
			// section, but serves its routers over TLS only when asked:
			// its websecure entry point has no TLS of its own.
			Annotations: map[string]string{"traefik.ingress.kubernetes.io/router.tls": "true"},
		},
		Spec: networkingv1.IngressSpec{
			IngressClassName: &class,
			TLS:              []networkingv1.IngressTLS{{Hosts: []string{host}, SecretName: secret}},
			Rules: []networkingv1.IngressRule{{
				Host:             host,
				IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: paths}},
			}},
		},
	}
	if _, err := e.cs.NetworkingV1().Ingresses(e.ns).Create(e.t.Context(), ing, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create ingress %s: %v", name, err)
	}
}

// gatewayManifest is a GatewayClass %[1]s of Traefik's Gateway provider;
// a Gateway %[2]s in namespace %[3]s with one HTTPS listener on Traefik's
// websecure entry point for the host %[4]s, terminating TLS with the
// certificate of the Secret %[5]s; and an HTTPRoute %[2]s for that host
// whose rules (%[6]s) send each path prefix to its Service's port 80.
const gatewayManifest = `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata:
  name: %[1]s
spec:
  controllerName: ` + traefikGatewayController + `
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: %[2]s
  namespace: %[3]s
spec:
  gatewayClassName: %[1]s
  listeners:
    - name: websecure
      protocol: HTTPS
      port: %[7]d
      hostname: %[4]s
      tls:
        mode: Terminate
        certificateRefs: [{kind: Secret, name: %[5]s}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: %[2]s
  namespace: %[3]s
spec:
  parentRefs: [{name: %[2]s}]
  hostnames: [%[4]s]
  rules:
%[6]s`

// createGateway creates a GatewayClass of Traefik's controller, named
// after the test's namespace and deleted when the test ends, and in the
// namespace a Gateway and an HTTPRoute, name, for host, terminating TLS
// with the Secret secret and splitting the host by the backends'
// prefixes. It returns the GatewayClass's name.
func (e *env) createGateway(name, host, secret string, backends []pathBackend) string {
	e.t.Helper()
	class := e.ns
	var rules strings.Builder
	for _, b := range backends {
		fmt.Fprintf(&rules, "    - matches: [{path: {type: PathPrefix, value: %q}}]\n      backendRefs: [{name: %s, port: 80}]\n", b.prefix, b.name)
	}
	manifest := fmt.Sprintf(gatewayManifest, class, name, e.ns, host, secret, rules.String(), traefikWebsecurePort)
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if out, err := kubectl(ctx, nil, "delete", "gatewayclass", class, "--ignore-not-found", "--wait=false"); err != nil {
			e.t.Errorf("delete GatewayClass %s: %v\n%s", class, err, out)
		}
	})
	if out, err := kubectl(e.t.Context(), []byte(manifest), "create", "-f", "-"); err != nil {
		e.t.Fatalf("create the Gateway API objects: %v\n%s\n%s", err, out, manifest)
	}
	return class
}

// conditionTrue reports, as an error, when the conditions of obj at path
// have no condition typ of status True.
func conditionTrue(obj map[string]any, what, typ string, path ...string) error {
	conds, _, _ := unstructured.NestedSlice(obj, path...)
	for _, c := range conds {
		c, _ := c.(map[string]any)
		if c["type"] != typ {
			continue
		}
		if c["status"] != "True" {
			return fmt.Errorf("%s: condition %s is %v: %v: %v", what, typ, c["status"], c["reason"], c["message"])
		}
		return nil
	}
	return fmt.Errorf("%s has no condition %s yet: %v", what, typ, conds)
}

// traefikGatewayRoutes reports, as an error, when any ready pod of
// Traefik does not route host under prefix, through its Gateway provider,
// to the backend service (Service on port) alone, whose servers are
// exactly want (sorted), each up. The provider's router leads to a
// weighted service of the route's rule, which leads to the backend: the
// names of both are the provider's, followed here from the router.
func traefikGatewayRoutes(ctx context.Context, e *env, service string, port int, host, prefix string, want []string) error {
	pods, err := traefikPods(ctx, e.cs)
	if err != nil {
		return err
	}
	const provider = "@kubernetesgateway"
	qualified := func(name string) string {
		if strings.Contains(name, "@") {
			return name
		}
		return name + provider
	}
	for i := range pods {
		p := &pods[i]
		var routers []traefikRouter
		if err := traefikAPI(ctx, p, "/api/http/routers?per_page=1000", &routers); err != nil {
			return err
		}
		i := slices.IndexFunc(routers, func(r traefikRouter) bool {
			return strings.HasSuffix(r.Name, provider) && strings.Contains(r.Rule, "Host("+strconv.Quote(host)+")") && strings.Contains(r.Rule, strconv.Quote(prefix))
		})
		if i < 0 {
			var of []string
			for _, r := range routers {
				if strings.HasSuffix(r.Name, provider) {
					of = append(of, r.Name+": "+r.Rule)
				}
			}
			return fmt.Errorf("Traefik's pod %s has no router of its Gateway provider for %s%s among %q", p.Name, host, prefix, of)
		}
		r := routers[i]
		if r.Status != "enabled" {
			return fmt.Errorf("Traefik's pod %s: router %s is %s", p.Name, r.Name, r.Status)
		}
		var wrr struct {
			Status   string
			Weighted *struct {
				Services []struct{ Name string }
			}
		}
		if err := traefikAPI(ctx, p, "/api/http/services/"+qualified(r.Service), &wrr); err != nil {
			return err
		}
		if wrr.Status != "enabled" || wrr.Weighted == nil || len(wrr.Weighted.Services) != 1 {
			return fmt.Errorf("Traefik's pod %s: router %s's service %s is %s, weighted %v; want one backend", p.Name, r.Name, r.Service, wrr.Status, wrr.Weighted)
		}
		// "<namespace>-<Service>-<port's name>-<port>" in v3.6.
		name := qualified(wrr.Weighted.Services[0].Name)
		if !strings.HasPrefix(name, e.ns+"-"+service+"-") || !strings.HasSuffix(name, "-"+strconv.Itoa(port)+provider) {
			return fmt.Errorf("Traefik's pod %s: router %s leads to %s, want the Service %s/%s on port %d", p.Name, r.Name, name, e.ns, service, port)
		}
		var s traefikService
		if err := traefikAPI(ctx, p, "/api/http/services/"+name, &s); err != nil {
			return err
		}
		if s.Status != "enabled" || s.LoadBalancer == nil {
			return fmt.Errorf("Traefik's pod %s: service %s is %s, load balancer %v", p.Name, name, s.Status, s.LoadBalancer)
		}
		var got []string
		for _, srv := range s.LoadBalancer.Servers {
			got = append(got, srv.URL)
			if st := s.ServerStatus[srv.URL]; st != "UP" {
				return fmt.Errorf("Traefik's pod %s: service %s: server %s is %q", p.Name, name, srv.URL, st)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			return fmt.Errorf("Traefik's pod %s sends %s%s to %v, want %v", p.Name, host, prefix, got, want)
		}
	}
	return nil
}
