package collector

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	testclock "k8s.io/utils/clock/testing"

	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/service"
	"github.com/swell-run/swell/pkg/stats"
)

// podTable is a PodResolver over a fixed table: a loopback connection is
// the pod it claims to be if the table lists that address for the
// service, as swell local's resolver does.
type podTable struct {
	mu   sync.Mutex
	pods map[string][]string // service → stats addresses
}

func (p *podTable) PodAddr(svc service.Key, remote netip.AddrPort, claimed string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !remote.Addr().IsLoopback() {
		return "", false
	}
	for _, a := range p.pods[svc.String()] {
		if a == claimed {
			return a, true
		}
	}
	return "", false
}

// pushRig is a PodEndpoint on a loopback server, with a fake clock for
// the frame rate.
type pushRig struct {
	clock  *testclock.FakeClock
	pushes *Pushes
	table  *podTable
	reg    *prometheus.Registry
	ep     *PodEndpoint
	srv    *httptest.Server
	// applied gets the pod of each frame applied.
	applied chan podID
}

func newPushRig(t *testing.T, tweak func(*PodEndpointConfig)) *pushRig {
	t.Helper()
	r := &pushRig{clock: testclock.NewFakeClock(t0), table: &podTable{pods: map[string][]string{}}, reg: prometheus.NewRegistry()}
	r.pushes = NewPushes(r.clock, 0)
	cfg := PodEndpointConfig{Pushes: r.pushes, Resolver: r.table, Clock: r.clock, Registerer: r.reg}
	if tweak != nil {
		tweak(&cfg)
	}
	ep, err := NewPodEndpoint(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.ep = ep
	r.applied = make(chan podID, 1024)
	ep.applied = func(svc, addr string) { r.applied <- podID{service: svc, addr: addr} }
	r.srv = httptest.NewServer(ep)
	t.Cleanup(func() {
		ep.Close()
		r.srv.Close()
	})
	return r
}

func (r *pushRig) url(svc, addr string) string {
	q := url.Values{network.PodPushService: {svc}, network.PodPushAddr: {addr}}
	return "ws" + strings.TrimPrefix(r.srv.URL, "http") + network.PodPushPath + "?" + q.Encode()
}

// dial opens a push connection as the pod at addr of svc; the response
// says why one was refused.
func (r *pushRig) dial(t *testing.T, svc, addr string) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
	ws, resp, err := d.Dial(r.url(svc, addr), nil)
	if ws != nil {
		t.Cleanup(func() { ws.Close() })
	}
	return ws, resp, err
}

// push sends r as one frame.
func push(t *testing.T, ws *websocket.Conn, r stats.Report) {
	t.Helper()
	if err := ws.WriteMessage(websocket.BinaryMessage, r.AppendBinaryV3(nil)); err != nil {
		t.Fatal(err)
	}
}

// closedWith waits for the endpoint to close ws and returns its close
// code.
func closedWith(t *testing.T, ws *websocket.Conn) int {
	t.Helper()
	ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		_, _, err := ws.ReadMessage()
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			return ce.Code
		}
		if err != nil {
			t.Fatalf("read: %v, want a close frame", err)
		}
	}
}

// fresh reports the figures the round would read of the pod, if any.
func (r *pushRig) fresh(svc, addr string) (figures, bool) {
	j := job{pod: podID{service: svc, addr: addr}}
	ok := r.pushes.fill(&j, r.clock.Now())
	return j.figures, ok
}

// waitPushed waits until a frame of the pod applied shows concurrency c:
// frames are applied on the endpoint's goroutine.
func (r *pushRig) waitPushed(t *testing.T, svc, addr string, c float64) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case id := <-r.applied:
			if f, ok := r.fresh(svc, addr); id == (podID{service: svc, addr: addr}) && ok && near(f.concurrency, c) {
				return
			}
		case <-timeout:
			t.Fatalf("no push of concurrency %v from %s of %s", c, addr, svc)
		}
	}
}

// A pod the resolver names pushes its reports, each the pod's latest;
// anyone else — a stranger, or a pod claiming another service's — is
// refused before the upgrade, and nothing of theirs is kept.
func TestPodPushesOnlyAsItself(t *testing.T) {
	r := newPushRig(t, nil)
	r.table.pods["ns/web"] = []string{"10.0.0.1:9091"}
	r.table.pods["ns/shop"] = []string{"10.0.0.2:9091"}

	ws, _, err := r.dial(t, "ns/web", "10.0.0.1:9091")
	if err != nil {
		t.Fatal(err)
	}
	push(t, ws, rep(3, 1, 30, 10))
	r.waitPushed(t, "ns/web", "10.0.0.1:9091", 2)
	push(t, ws, rep(7, 0, 70, 0))
	r.waitPushed(t, "ns/web", "10.0.0.1:9091", 7)

	for _, c := range []struct{ svc, addr, reason string }{
		{"ns/web", "10.0.0.2:9091", "not-a-pod"},  // shop's pod pushing as web's
		{"ns/shop", "10.0.0.1:9091", "not-a-pod"}, // web's pod pushing for shop
		{"ns/web", "10.9.9.9:9091", "not-a-pod"},  // nobody's
		{"web", "10.0.0.1:9091", "bad-request"},   // no namespace
	} {
		_, resp, err := r.dial(t, c.svc, c.addr)
		if err == nil || resp == nil {
			t.Fatalf("%s as %s: connected, want it refused", c.addr, c.svc)
		}
		want := http.StatusForbidden
		if c.reason == "bad-request" {
			want = http.StatusBadRequest
		}
		if resp.StatusCode != want {
			t.Errorf("%s as %s: %s, want %d", c.addr, c.svc, resp.Status, want)
		}
	}
	if _, ok := r.fresh("ns/shop", "10.0.0.1:9091"); ok {
		t.Error("a push kept for a pod of another service")
	}
	if n := gatheredCounter(t, r.reg, "swell_autoscaler_push_rejected_total", "not-a-pod"); n != 3 {
		t.Errorf("%v refused as no pod, want 3", n)
	}
}

// A pod reconnecting replaces its older connection, whose frames are no
// longer applied; a broken or oversized frame, or a text one, closes only
// its own connection.
func TestPodConnectionsReplaceAndBreakAlone(t *testing.T) {
	r := newPushRig(t, nil)
	r.table.pods["ns/web"] = []string{"10.0.0.1:9091", "10.0.0.2:9091"}
	old, _, err := r.dial(t, "ns/web", "10.0.0.1:9091")
	if err != nil {
		t.Fatal(err)
	}
	push(t, old, rep(1, 0, 10, 0))
	r.waitPushed(t, "ns/web", "10.0.0.1:9091", 1)
	newer, _, err := r.dial(t, "ns/web", "10.0.0.1:9091")
	if err != nil {
		t.Fatal(err)
	}
	if code := closedWith(t, old); code != CloseReplaced {
		t.Fatalf("the older connection closed with %d, want %d (replaced)", code, CloseReplaced)
	}
	push(t, newer, rep(4, 0, 40, 0))
	r.waitPushed(t, "ns/web", "10.0.0.1:9091", 4)

	other, _, err := r.dial(t, "ns/web", "10.0.0.2:9091")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		send func(*websocket.Conn) error
		code int
	}{
		{"malformed", func(ws *websocket.Conn) error { return ws.WriteMessage(websocket.BinaryMessage, []byte{9, 9}) }, websocket.CloseInvalidFramePayloadData},
		{"text", func(ws *websocket.Conn) error { return ws.WriteMessage(websocket.TextMessage, []byte("{}")) }, websocket.CloseUnsupportedData},
		{"too big", func(ws *websocket.Conn) error {
			return ws.WriteMessage(websocket.BinaryMessage, make([]byte, stats.MaxBinarySize+1))
		}, websocket.CloseMessageTooBig},
	} {
		ws := other
		if ws == nil {
			if ws, _, err = r.dial(t, "ns/web", "10.0.0.2:9091"); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.send(ws); err != nil {
			t.Fatal(err)
		}
		if code := closedWith(t, ws); code != c.code {
			t.Errorf("%s frame: closed with %d, want %d", c.name, code, c.code)
		}
		other = nil
	}
	// The other pod's connection carried on.
	push(t, newer, rep(5, 0, 50, 0))
	r.waitPushed(t, "ns/web", "10.0.0.1:9091", 5)
}

// Frames beyond the rate a pod may push are dropped, and a connection
// that keeps pushing too fast is closed; the clock does not move, so
// only the burst is applied.
func TestPodFramesBounded(t *testing.T) {
	r := newPushRig(t, func(c *PodEndpointConfig) { c.FrameBurst = 3 })
	r.table.pods["ns/web"] = []string{"10.0.0.1:9091"}
	ws, _, err := r.dial(t, "ns/web", "10.0.0.1:9091")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 + podDropsToClose {
		if err := ws.WriteMessage(websocket.BinaryMessage, rep(float64(i), 0, 0, 0).AppendBinaryV3(nil)); err != nil {
			break // closed: the rest is moot
		}
	}
	if code := closedWith(t, ws); code != websocket.ClosePolicyViolation {
		t.Fatalf("a flood closed with %d, want %d", code, websocket.ClosePolicyViolation)
	}
	applied := gatheredCounter(t, r.reg, "swell_autoscaler_push_frames_total", "applied")
	dropped := gatheredCounter(t, r.reg, "swell_autoscaler_push_frames_total", "dropped")
	if applied != 3 || dropped != podDropsToClose {
		t.Fatalf("%v applied, %v dropped; want the burst of 3, and %d dropped", applied, dropped, podDropsToClose)
	}
	// No round read them: the burst's three periods are merged, 0, 1
	// and 2 averaged.
	if f, ok := r.fresh("ns/web", "10.0.0.1:9091"); !ok || !near(f.concurrency, 1) {
		t.Fatalf("kept %+v (%v), want the burst's three merged, concurrency 1", f, ok)
	}
}

// A replica that does not lead the service's bucket sends the pod to the
// one that does, or to try again while none does; Close ends every
// connection with 1001 and refuses new ones.
func TestPodPushRoutedAndClosed(t *testing.T) {
	var mu sync.Mutex
	leader := map[string]string{"ns/web": "", "ns/shop": "10.1.2.3:8080"}
	r := newPushRig(t, func(c *PodEndpointConfig) {
		c.Route = func(svc service.Key) (bool, string) {
			mu.Lock()
			defer mu.Unlock()
			l, ok := leader[svc.String()]
			return !ok, l
		}
	})
	r.table.pods["ns/web"] = []string{"10.0.0.1:9091"}
	r.table.pods["ns/shop"] = []string{"10.0.0.2:9091"}
	r.table.pods["ns/here"] = []string{"10.0.0.3:9091"}

	req, _ := http.NewRequest(http.MethodGet, r.srv.URL+network.PodPushPath+"?service=ns/shop&addr=10.0.0.2:9091", nil)
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusTemporaryRedirect ||
		loc != "ws://10.1.2.3:8080"+network.PodPushPath+"?service=ns/shop&addr=10.0.0.2:9091" {
		t.Fatalf("a pod of another leader's bucket: %s to %q", resp.Status, loc)
	}
	if _, resp, err := r.dial(t, "ns/web", "10.0.0.1:9091"); err == nil || resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a bucket without a leader: %v, want 503 with Retry-After", err)
	}

	ws, _, err := r.dial(t, "ns/here", "10.0.0.3:9091")
	if err != nil {
		t.Fatal(err)
	}
	push(t, ws, rep(2, 0, 20, 0))
	r.waitPushed(t, "ns/here", "10.0.0.3:9091", 2)
	if n := r.ep.Pushing(); n != 1 {
		t.Fatalf("%d pods pushing, want 1", n)
	}
	r.ep.Close()
	if code := closedWith(t, ws); code != websocket.CloseGoingAway {
		t.Fatalf("closed with %d, want 1001", code)
	}
	if _, resp, err := r.dial(t, "ns/here", "10.0.0.3:9091"); err == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("after Close: %v, want 503", err)
	}
}

// A connection that pushes nothing for the idle timeout is closed.
func TestPodIdleClosed(t *testing.T) {
	r := newPushRig(t, func(c *PodEndpointConfig) { c.IdleTimeout = 50 * time.Millisecond })
	r.table.pods["ns/web"] = []string{"10.0.0.1:9091"}
	ws, _, err := r.dial(t, "ns/web", "10.0.0.1:9091")
	if err != nil {
		t.Fatal(err)
	}
	if code := closedWith(t, ws); code != CloseIdle {
		t.Fatalf("an idle connection closed with %d, want %d", code, CloseIdle)
	}
}

// A frame that shows a pod's load rising sharply calls OnSharp with the
// pod's service, after it is applied; others do not.
func TestPodEndpointSharp(t *testing.T) {
	sharp := make(chan service.Key, 8)
	r := newPushRig(t, func(c *PodEndpointConfig) { c.OnSharp = func(k service.Key) { sharp <- k } })
	r.table.pods["ns/web"] = []string{"10.0.0.1:9091"}
	ws, _, err := r.dial(t, "ns/web", "10.0.0.1:9091")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []float64{2, 3, 8} {
		push(t, ws, rep(c, 0, 0, 0))
		<-r.applied
	}
	select {
	case k := <-sharp:
		if k.String() != "ns/web" {
			t.Fatalf("OnSharp(%v), want ns/web", k)
		}
	default:
		t.Fatal("no OnSharp for a rise from 3 to 8")
	}
	if len(sharp) != 0 {
		t.Fatalf("%d more OnSharp calls, want one (2 → 3 is no sharp rise)", len(sharp))
	}
}

// CloseWhere closes the connections of the services it is told moved,
// with 1001, and leaves the others open.
func TestPodEndpointCloseWhere(t *testing.T) {
	r := newPushRig(t, nil)
	r.table.pods["ns/a"] = []string{"10.0.0.1:9091"}
	r.table.pods["ns/b"] = []string{"10.0.0.2:9091"}
	a, _, err := r.dial(t, "ns/a", "10.0.0.1:9091")
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := r.dial(t, "ns/b", "10.0.0.2:9091")
	if err != nil {
		t.Fatal(err)
	}
	push(t, a, rep(1, 0, 1, 0))
	push(t, b, rep(1, 0, 1, 0))
	<-r.applied
	<-r.applied
	r.ep.CloseWhere(func(k service.Key) bool { return k.Name == "a" })
	if code := closedWith(t, a); code != websocket.CloseGoingAway {
		t.Fatalf("moved service's connection closed with %d, want 1001", code)
	}
	push(t, b, rep(2, 0, 2, 0))
	if got := <-r.applied; got.service != "ns/b" {
		t.Fatalf("frame applied for %v, want ns/b's", got)
	}
	if n := r.ep.Pushing(); n != 1 {
		t.Fatalf("%d pods pushing, want b alone", n)
	}
}
