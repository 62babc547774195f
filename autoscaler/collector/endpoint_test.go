package collector

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	testclock "k8s.io/utils/clock/testing"

	"github.com/swell-run/swell/pkg/stats"
)

const testToken = "0123456789abcdef-test-token"

// notifySink applies frames to an Activators store, then says so on a
// channel, so tests wait for the endpoint without sleeping.
type notifySink struct {
	acts    *Activators
	applied chan string
}

func (s notifySink) Apply(activator string, f *stats.ActivatorFrame) {
	s.acts.Apply(activator, f)
	s.applied <- fmt.Sprintf("%s %s %d", activator, f.Type, len(f.Entries))
}

type epRig struct {
	acts  *Activators
	sink  notifySink
	pokes chan string
	ep    *ActivatorEndpoint
	srv   *httptest.Server
	url   string
	reg   *prometheus.Registry
}

func newEndpointRig(t *testing.T, tweak func(*EndpointConfig)) *epRig {
	t.Helper()
	r := &epRig{
		acts:  NewActivators(testclock.NewFakeClock(t0), 0),
		pokes: make(chan string, 16),
		reg:   prometheus.NewRegistry(),
	}
	r.sink = notifySink{acts: r.acts, applied: make(chan string, 64)}
	cfg := EndpointConfig{
		Tokens:     []string{testToken},
		Sink:       r.sink,
		Registerer: r.reg,
		OnPoke: func(svc string) {
			// Runs after the sink applied the poke: the gate already sees it.
			r.pokes <- fmt.Sprintf("%s pending=%d", svc, r.acts.Pending(svc))
		},
	}
	if tweak != nil {
		tweak(&cfg)
	}
	ep, err := NewActivatorEndpoint(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.ep = ep
	r.srv = httptest.NewServer(ep)
	r.url = "ws" + strings.TrimPrefix(r.srv.URL, "http")
	t.Cleanup(func() { ep.Close(); r.srv.Close() })
	return r
}

func (r *epRig) dial(t *testing.T, token string) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	ws, resp, err := websocket.DefaultDialer.Dial(r.url, h)
	if ws != nil {
		t.Cleanup(func() { ws.Close() })
	}
	return ws, resp, err
}

// connect dials and says hello as name.
func (r *epRig) connect(t *testing.T, name string) *websocket.Conn {
	t.Helper()
	ws, _, err := r.dial(t, testToken)
	if err != nil {
		t.Fatal(err)
	}
	send(t, ws, stats.AppendActivatorHello(nil, name))
	return ws
}

func send(t *testing.T, ws *websocket.Conn, frame []byte) {
	t.Helper()
	if err := ws.WriteMessage(websocket.BinaryMessage, frame); err != nil {
		t.Fatal(err)
	}
}

func reportFrame(entries map[string]stats.ActivatorFigures) []byte {
	b := stats.AppendActivatorReportHeader(nil, t0, time.Second)
	for svc, f := range entries {
		b = stats.AppendActivatorEntry(b, svc, f)
	}
	return b
}

func (r *epRig) applied(t *testing.T, want string) {
	t.Helper()
	select {
	case got := <-r.sink.applied:
		if got != want {
			t.Fatalf("applied %q, want %q", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("nothing applied within 10s, want %q", want)
	}
}

// closed reads from ws until the server's close frame and checks its code
// and reason.
func closed(t *testing.T, ws *websocket.Conn, code int, reason string) {
	t.Helper()
	ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		_, _, err := ws.ReadMessage()
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		if !errors.As(err, &ce) {
			t.Fatalf("read: %v, want a close frame with code %d", err, code)
		}
		if ce.Code != code || !strings.Contains(ce.Text, reason) {
			t.Fatalf("closed with %d %q, want %d and a reason containing %q", ce.Code, ce.Text, code, reason)
		}
		return
	}
}

func TestEndpointConfig(t *testing.T) {
	sink := NewActivators(testclock.NewFakeClock(t0), 0)
	for _, c := range []struct {
		cfg  EndpointConfig
		want string
	}{
		{EndpointConfig{Tokens: []string{testToken}}, "Sink is required"},
		{EndpointConfig{Sink: sink}, "Tokens or EndpointConfig.Authenticator is required"},
		{EndpointConfig{Sink: sink, Tokens: []string{testToken}, Authenticator: tokenTable{}}, "are exclusive"},
		{EndpointConfig{Sink: sink, Tokens: []string{"short"}}, "token 0 has 5 bytes, at least 16"},
		{EndpointConfig{Sink: sink, Tokens: []string{testToken, testToken + "\n"}}, "token 1 has a space or control character at byte 27"},
	} {
		if _, err := NewActivatorEndpoint(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewActivatorEndpoint(%+v) = %v, want an error containing %q", c.cfg, err, c.want)
		}
	}
}

// TestEndpointAuth: a missing or wrong token is refused with 401 before
// any upgrade; any configured token (a rotation) is accepted, the scheme in
// any case.
func TestEndpointAuth(t *testing.T) {
	const next = "the-next-token-after-rotation"
	r := newEndpointRig(t, func(c *EndpointConfig) { c.Tokens = append(c.Tokens, next) })
	for _, h := range []string{"", "Bearer", "Bearer ", "Bearer wrong-token-of-some-length", "Basic " + testToken, "Bearer " + testToken + "x", "Bearer " + testToken[1:]} {
		hdr := http.Header{}
		if h != "" {
			hdr.Set("Authorization", h)
		}
		ws, resp, err := websocket.DefaultDialer.Dial(r.url, hdr)
		if err == nil {
			ws.Close()
			t.Fatalf("Authorization %q: upgraded", h)
		}
		if resp == nil || resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Fatalf("Authorization %q: %v %+v, want 401 with WWW-Authenticate: Bearer", h, err, resp)
		}
	}
	// A plain request (no upgrade) with no token gets 401 too, not 400.
	resp, err := http.Get(r.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("plain GET: %d, want 401", resp.StatusCode)
	}
	if n := gatheredCounter(t, r.reg, "swell_autoscaler_activator_rejected_total", "unauthorized"); n != 8 {
		t.Fatalf("rejected{unauthorized} = %v, want 8", n)
	}

	for _, h := range []string{"Bearer " + testToken, "bearer " + next, "BEARER  " + testToken} {
		ws, _, err := websocket.DefaultDialer.Dial(r.url, http.Header{"Authorization": {h}})
		if err != nil {
			t.Fatalf("Authorization %q: %v", h, err)
		}
		ws.Close()
	}
}

// tokenTable is an Authenticator: each token belongs to one activator;
// the token "busy" cannot be checked now.
type tokenTable map[string]string

func (t tokenTable) Authenticate(_ context.Context, _ netip.Addr, token string) (string, error) {
	switch token {
	case "busy":
		return "", fmt.Errorf("token review: %w", ErrRetryLater)
	case "from-a-stranger":
		return "", fmt.Errorf("10.0.9.9: %w", ErrUnknownCaller)
	}
	if name, ok := t[token]; ok {
		return name, nil
	}
	return "", errors.New("unknown token")
}

// TestEndpointIdentity: with an Authenticator a token speaks only for its
// own activator. A hello naming another is refused and nothing it sends
// is applied, so one activator's credential cannot report, poke or replace
// the connection of another; a token that cannot be checked now, or from
// an address no activator is known at yet, gets 503 and Retry-After, not
// 401, so the activator retries.
func TestEndpointIdentity(t *testing.T) {
	r := newEndpointRig(t, func(c *EndpointConfig) {
		c.Tokens = nil
		c.Authenticator = tokenTable{"token-of-a": "activator-a", "token-of-b": "activator-b"}
	})
	a, _, err := r.dial(t, "token-of-a")
	if err != nil {
		t.Fatal(err)
	}
	send(t, a, stats.AppendActivatorHello(nil, "activator-a"))
	send(t, a, reportFrame(map[string]stats.ActivatorFigures{"ns/svc": {Requests: 3, InFlight: 2}}))
	r.applied(t, "activator-a report 1")

	// b's token, naming a: refused before anything is applied, and a's
	// connection stays.
	b, _, err := r.dial(t, "token-of-b")
	if err != nil {
		t.Fatal(err)
	}
	send(t, b, stats.AppendActivatorHello(nil, "activator-a"))
	send(t, b, reportFrame(map[string]stats.ActivatorFigures{"ns/svc": {Requests: 1000, InFlight: 900}}))
	closed(t, b, websocket.ClosePolicyViolation, `the hello names activator "activator-a" but the token is "activator-b"'s`)
	send(t, a, reportFrame(map[string]stats.ActivatorFigures{"ns/svc": {Requests: 4, InFlight: 5}}))
	r.applied(t, "activator-a report 1")
	if got := r.acts.Pending("ns/svc"); got != 5 {
		t.Errorf("pending %v, want a's 5: the impostor's figures were applied or a's connection replaced", got)
	}

	for token, want := range map[string]int{"token-of-c": http.StatusUnauthorized, "busy": http.StatusServiceUnavailable, "from-a-stranger": http.StatusServiceUnavailable} {
		_, resp, err := r.dial(t, token)
		if err == nil || resp == nil || resp.StatusCode != want {
			t.Fatalf("token %q: %v %+v, want %d", token, err, resp, want)
		}
		if want == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") == "" {
			t.Errorf("token %q: no Retry-After", token)
		}
	}
	for reason, want := range map[string]float64{"auth-unavailable": 1, "unknown-caller": 1, "unauthorized": 1} {
		if n := gatheredCounter(t, r.reg, "swell_autoscaler_activator_rejected_total", reason); n != want {
			t.Errorf("rejected{%s} = %v, want %v", reason, n, want)
		}
	}
}

// TestEndpointReports: figures from several activators reach the store and
// add up; a poke fires the callback after the store has it.
func TestEndpointReports(t *testing.T) {
	r := newEndpointRig(t, nil)
	a := r.connect(t, "act-a")
	b := r.connect(t, "act-b")
	send(t, a, reportFrame(map[string]stats.ActivatorFigures{"ns/svc": {Concurrency: 3, Requests: 30, InFlight: 2}}))
	r.applied(t, "act-a report 1")
	send(t, b, reportFrame(map[string]stats.ActivatorFigures{"ns/svc": {Concurrency: 4, Requests: 10, InFlight: 1}, "ns/other": {}}))
	r.applied(t, "act-b report 2")
	if l := r.acts.Load("ns/svc"); l.Concurrency != 7 || l.RPS != 40 || l.Activators != 2 || l.Pending != 3 {
		t.Fatalf("ns/svc = %+v, want the two activators summed", l)
	}
	if got := r.ep.Connected(); len(got) != 2 || got[0] != "act-a" || got[1] != "act-b" {
		t.Fatalf("Connected() = %v", got)
	}

	send(t, b, stats.AppendActivatorPoke(nil, "ns/cold"))
	r.applied(t, "act-b poke 1")
	select {
	case got := <-r.pokes:
		if got != "ns/cold pending=1" {
			t.Fatalf("poke callback saw %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("poke callback not called")
	}
	if n := gatheredCounter(t, r.reg, "swell_autoscaler_activator_frames_total", "report"); n != 2 {
		t.Fatalf("frames{report} = %v, want 2", n)
	}
}

// TestEndpointReconnectReplaces: the same activator connecting again
// replaces its old connection, which is closed; its figures are replaced,
// not added.
func TestEndpointReconnectReplaces(t *testing.T) {
	r := newEndpointRig(t, nil)
	old := r.connect(t, "act-a")
	send(t, old, reportFrame(map[string]stats.ActivatorFigures{"ns/svc": {Concurrency: 5}}))
	r.applied(t, "act-a report 1")

	fresh := r.connect(t, "act-a")
	closed(t, old, CloseReplaced, "replaced by a newer connection")
	send(t, fresh, reportFrame(map[string]stats.ActivatorFigures{"ns/svc": {Concurrency: 7}}))
	r.applied(t, "act-a report 1")
	if l := r.acts.Load("ns/svc"); l.Concurrency != 7 || l.Activators != 1 {
		t.Fatalf("after the reconnect: %+v, want act-a's latest figure only", l)
	}
	if got := r.ep.Connected(); len(got) != 1 {
		t.Fatalf("Connected() = %v", got)
	}
	// The replaced connection's end did not unregister the new one.
	send(t, fresh, reportFrame(map[string]stats.ActivatorFigures{"ns/svc": {Concurrency: 8}}))
	r.applied(t, "act-a report 1")
}

// TestEndpointBrokenFrames: each protocol error closes its own connection
// with a code and a reason, applies nothing, and leaves the store and the
// other connections alone.
func TestEndpointBrokenFrames(t *testing.T) {
	r := newEndpointRig(t, func(c *EndpointConfig) { c.MaxFrameSize = 256 })
	bystander := r.connect(t, "act-ok")
	send(t, bystander, reportFrame(map[string]stats.ActivatorFigures{"ns/svc": {Concurrency: 1}}))
	r.applied(t, "act-ok report 1")

	truncated := reportFrame(map[string]stats.ActivatorFigures{"ns/svc": {Concurrency: 9}})
	truncated = truncated[:len(truncated)-3]
	big := stats.AppendActivatorReportHeader(nil, t0, time.Second)
	for i := 0; len(big) <= 256; i++ {
		big = stats.AppendActivatorEntry(big, fmt.Sprintf("ns/svc-%d", i), stats.ActivatorFigures{Concurrency: 1})
	}
	for _, c := range []struct {
		name   string
		hello  bool
		mt     int
		frame  []byte
		code   int
		reason string
	}{
		{"garbage", true, websocket.BinaryMessage, []byte{7, 7, 7}, websocket.CloseInvalidFramePayloadData, "unknown activator frame version 7"},
		{"truncated report", true, websocket.BinaryMessage, truncated, websocket.CloseInvalidFramePayloadData, "report entry 0"},
		{"bad service", true, websocket.BinaryMessage, reportFrame(map[string]stats.ActivatorFigures{"NS/svc": {}}), websocket.CloseInvalidFramePayloadData, "namespace: character 'N'"},
		{"text frame", true, websocket.TextMessage, []byte("hello"), websocket.CloseUnsupportedData, "text frame"},
		{"too big", true, websocket.BinaryMessage, big, websocket.CloseMessageTooBig, ""},
		{"report before hello", false, websocket.BinaryMessage, reportFrame(nil), websocket.ClosePolicyViolation, "first frame must be a hello, got a report"},
		{"second hello", true, websocket.BinaryMessage, stats.AppendActivatorHello(nil, "act-x"), websocket.ClosePolicyViolation, "a second hello"},
		{"bad hello", false, websocket.BinaryMessage, stats.AppendActivatorHello(nil, "Act X"), websocket.CloseInvalidFramePayloadData, "activator name"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ws, _, err := r.dial(t, testToken)
			if err != nil {
				t.Fatal(err)
			}
			if c.hello {
				send(t, ws, stats.AppendActivatorHello(nil, "act-broken"))
			}
			if err := ws.WriteMessage(c.mt, c.frame); err != nil {
				t.Fatal(err)
			}
			closed(t, ws, c.code, c.reason)
			select {
			case got := <-r.sink.applied:
				t.Fatalf("applied %q from a broken connection", got)
			default:
			}
		})
	}
	if l := r.acts.Load("ns/svc"); l.Concurrency != 1 || l.Activators != 1 {
		t.Fatalf("store after broken frames: %+v, want act-ok's figures untouched", l)
	}
	send(t, bystander, reportFrame(map[string]stats.ActivatorFigures{"ns/svc": {Concurrency: 2}}))
	r.applied(t, "act-ok report 1")
	if n := gatheredCounter(t, r.reg, "swell_autoscaler_activator_disconnects_total", "malformed"); n != 4 {
		t.Fatalf("disconnects{malformed} = %v, want 4", n)
	}
}

// TestEndpointIdle: a peer that answers no ping is closed after the idle
// timeout; one that answers stays connected for as long as it likes.
func TestEndpointIdle(t *testing.T) {
	const idle = 300 * time.Millisecond
	r := newEndpointRig(t, func(c *EndpointConfig) { c.IdleTimeout = idle })

	silent := r.connect(t, "act-silent")
	silent.SetPingHandler(func(string) error { return nil }) // no pong
	start := time.Now()
	closed(t, silent, CloseIdle, "nothing received for 300ms")
	if d := time.Since(start); d < idle-50*time.Millisecond {
		t.Fatalf("closed after %v, before the %v idle timeout", d, idle)
	}

	alive := r.connect(t, "act-alive")
	pings := make(chan struct{}, 64)
	alive.SetPingHandler(func(data string) error {
		pings <- struct{}{}
		return alive.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
	})
	readErr := make(chan error, 1)
	go func() {
		for {
			if _, _, err := alive.ReadMessage(); err != nil {
				readErr <- err
				return
			}
		}
	}()
	// Six pings are two idle timeouts: only the pongs kept it open.
	for i := range 6 {
		select {
		case <-pings:
		case err := <-readErr:
			t.Fatalf("connection closed after %d pings: %v", i, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("no ping %d", i)
		}
	}
	send(t, alive, reportFrame(nil))
	r.applied(t, "act-alive report 0")
}

func TestEndpointMaxConnections(t *testing.T) {
	r := newEndpointRig(t, func(c *EndpointConfig) { c.MaxConnections = 1 })
	r.connect(t, "act-a")
	_, resp, err := r.dial(t, testToken)
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("second connection: %v %+v, want 503", err, resp)
	}
}

// TestEndpointHelloDeadline: a connection that sends no hello is closed at
// the hello deadline, counted from its upgrade, however many pongs and
// pings it sends meanwhile, so a valid token cannot hold connections
// without saying which activator they are for.
func TestEndpointHelloDeadline(t *testing.T) {
	clk := testclock.NewFakeClock(t0)
	r := newEndpointRig(t, func(c *EndpointConfig) { c.Clock = clk; c.HelloTimeout = 10 * time.Second })
	ws, _, err := r.dial(t, testToken)
	if err != nil {
		t.Fatal(err)
	}
	echoes := make(chan string, 1)
	ws.SetPongHandler(func(data string) error { echoes <- data; return nil })
	ended := make(chan error, 1)
	go func() {
		for {
			if _, _, err := ws.ReadMessage(); err != nil {
				ended <- err
				return
			}
		}
	}()
	for i := range 10 {
		// A pong, then a ping: the ping's answer says the endpoint has read
		// the pong, and that the connection is open i seconds in.
		deadline := time.Now().Add(10 * time.Second)
		if err := ws.WriteControl(websocket.PongMessage, nil, deadline); err != nil {
			t.Fatal(err)
		}
		if err := ws.WriteControl(websocket.PingMessage, []byte(strconv.Itoa(i)), deadline); err != nil {
			t.Fatal(err)
		}
		select {
		case <-echoes:
		case err := <-ended:
			t.Fatalf("closed %ds after the upgrade, before the hello deadline: %v", i, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("no answer to a ping %ds after the upgrade", i)
		}
		clk.Step(time.Second)
	}
	var end error
	select {
	case end = <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("still open at the hello deadline, pongs and all")
	}
	var ce *websocket.CloseError
	if !errors.As(end, &ce) || ce.Code != websocket.ClosePolicyViolation || !strings.Contains(ce.Text, "no hello within 10s of the upgrade") {
		t.Fatalf("closed with %v, want 1008 and no hello within 10s", end)
	}
	if n := gatheredCounter(t, r.reg, "swell_autoscaler_activator_disconnects_total", "no-hello"); n != 1 {
		t.Errorf("disconnects{no-hello} = %v, want 1", n)
	}
}

// TestEndpointMaxConnectionsPerActivator: one activator's credential holds
// at most its cap of connections, hello or not; the next is refused with
// 429 before the upgrade, another activator still connects, and a slot
// comes back as soon as one of the activator's connections is closed.
func TestEndpointMaxConnectionsPerActivator(t *testing.T) {
	clk := testclock.NewFakeClock(t0)
	r := newEndpointRig(t, func(c *EndpointConfig) {
		c.Tokens = nil
		c.Authenticator = tokenTable{"token-of-a": "activator-a", "token-of-b": "activator-b"}
		c.MaxConnectionsPerActivator = 2
		c.Clock = clk
		c.IdleTimeout = time.Hour
	})
	var held []*websocket.Conn
	for range 2 {
		ws, _, err := r.dial(t, "token-of-a")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, ws)
	}
	_, resp, err := r.dial(t, "token-of-a")
	if err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a's third connection: %v %+v, want 429", err, resp)
	}
	body, _ := io.ReadAll(resp.Body)
	if want := `activator "activator-a" already holds 2 connections`; !strings.Contains(string(body), want) || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("429 %q (Retry-After %q), want a body containing %q and a Retry-After", body, resp.Header.Get("Retry-After"), want)
	}
	if n := gatheredCounter(t, r.reg, "swell_autoscaler_activator_rejected_total", "too-many-per-activator"); n != 1 {
		t.Errorf("rejected{too-many-per-activator} = %v, want 1", n)
	}

	b, _, err := r.dial(t, "token-of-b")
	if err != nil {
		t.Fatalf("b, while a holds its cap: %v", err)
	}
	send(t, b, stats.AppendActivatorHello(nil, "activator-b"))
	send(t, b, reportFrame(nil))
	r.applied(t, "activator-b report 0")

	// Once the endpoint has closed one of a's connections, a may open one.
	clk.Step(DefaultHelloTimeout)
	closed(t, held[0], websocket.ClosePolicyViolation, "no hello within")
	a, _, err := r.dial(t, "token-of-a")
	if err != nil {
		t.Fatalf("a, after its connections were closed: %v", err)
	}
	send(t, a, stats.AppendActivatorHello(nil, "activator-a"))
	send(t, a, reportFrame(nil))
	r.applied(t, "activator-a report 0")
}

// TestEndpointMaxConnectionsPerSharedToken: a shared token is one
// credential, capped on its own, and by default only by MaxConnections: a
// whole fleet of activators may hold the same token.
func TestEndpointMaxConnectionsPerSharedToken(t *testing.T) {
	const next = "the-next-token-after-rotation"
	r := newEndpointRig(t, func(c *EndpointConfig) {
		c.Tokens = append(c.Tokens, next)
		c.MaxConnectionsPerActivator = 1
	})
	r.connect(t, "act-a")
	_, resp, err := r.dial(t, testToken)
	if err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("the first token's second connection: %v %+v, want 429", err, resp)
	}
	if body, _ := io.ReadAll(resp.Body); !strings.Contains(string(body), "shared token 0 already holds 1 connections") {
		t.Fatalf("429 %q, want it to name shared token 0", body)
	}
	if _, _, err := r.dial(t, next); err != nil {
		t.Fatalf("the other token: %v", err)
	}

	fleet := newEndpointRig(t, nil)
	for i := range DefaultMaxConnectionsPerActivator + 1 {
		fleet.connect(t, fmt.Sprintf("act-%d", i))
	}
}

// verdicts is an Authenticator whose answers a test changes as it goes:
// each token's activator, or its error. Each call is told on calls, as
// "token from".
type verdicts struct {
	mu    sync.Mutex
	by    map[string]verdict
	calls chan string
}

type verdict struct {
	name string
	err  error
}

func newVerdicts(by map[string]verdict) *verdicts {
	return &verdicts{by: by, calls: make(chan string, 64)}
}

func (v *verdicts) set(token string, d verdict) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.by[token] = d
}

func (v *verdicts) Authenticate(_ context.Context, from netip.Addr, token string) (string, error) {
	v.mu.Lock()
	d, ok := v.by[token]
	v.mu.Unlock()
	select {
	case v.calls <- token + " " + from.String():
	default:
	}
	if !ok {
		return "", errors.New("unknown token")
	}
	return d.name, d.err
}

// called waits for the authenticator to be asked about want.
func (v *verdicts) called(t *testing.T, want string) {
	t.Helper()
	for {
		select {
		case got := <-v.calls:
			if got == want {
				return
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the authenticator was not asked %q", want)
		}
	}
}

// TestEndpointRecheck: each open connection's token is checked again
// every RecheckInterval, from the connection's address. One the
// authenticator refuses now, or that now belongs to another activator, is
// closed with 1008 at that recheck, and the activator is gone from the
// endpoint; one it cannot check now (ErrRetryLater: the API server does
// not answer) stays and goes on reporting.
func TestEndpointRecheck(t *testing.T) {
	clk := testclock.NewFakeClock(t0)
	v := newVerdicts(map[string]verdict{
		"token-of-a": {name: "activator-a"},
		"token-of-b": {name: "activator-b"},
		"token-of-c": {name: "activator-c"},
	})
	r := newEndpointRig(t, func(c *EndpointConfig) {
		c.Tokens = nil
		c.Authenticator = v
		c.Clock = clk
		c.RecheckInterval = time.Minute
		c.IdleTimeout = time.Hour
	})
	conns := map[string]*websocket.Conn{}
	for _, name := range []string{"a", "b", "c"} {
		ws, _, err := r.dial(t, "token-of-"+name)
		if err != nil {
			t.Fatal(err)
		}
		v.called(t, "token-of-"+name+" 127.0.0.1") // at the upgrade
		send(t, ws, stats.AppendActivatorHello(nil, "activator-"+name))
		send(t, ws, reportFrame(nil))
		r.applied(t, "activator-"+name+" report 0")
		conns[name] = ws
	}

	v.set("token-of-a", verdict{err: errors.New("the API server did not authenticate the token: pod deleted")})
	v.set("token-of-b", verdict{err: fmt.Errorf("token review: connection refused: %w", ErrRetryLater)})
	v.set("token-of-c", verdict{name: "activator-z"})
	clk.Step(time.Minute)
	closed(t, conns["a"], websocket.ClosePolicyViolation, "the token was refused when checked again")
	closed(t, conns["c"], websocket.ClosePolicyViolation, "the token belongs to another activator now")
	if got := r.ep.Connected(); len(got) != 1 || got[0] != "activator-b" {
		t.Fatalf("Connected() = %v after the recheck, want activator-b only", got)
	}
	// b's token is asked about again at the next recheck only if the first
	// left b open.
	v.called(t, "token-of-b 127.0.0.1")
	clk.Step(time.Minute)
	v.called(t, "token-of-b 127.0.0.1")
	send(t, conns["b"], reportFrame(map[string]stats.ActivatorFigures{"ns/svc": {InFlight: 1}}))
	r.applied(t, "activator-b report 1")

	for label, want := range map[string]float64{"revoked": 2, "protocol": 0} {
		if n := gatheredCounter(t, r.reg, "swell_autoscaler_activator_disconnects_total", label); n != want {
			t.Errorf("disconnects{%s} = %v, want %v", label, n, want)
		}
	}
	if n := gatheredCounter(t, r.reg, "swell_autoscaler_activator_token_rechecks_total", "refused"); n != 2 {
		t.Errorf("rechecks{refused} = %v, want 2", n)
	}
}

// TestEndpointClose: Close says "going away" to every activator and refuses
// new connections.
func TestEndpointClose(t *testing.T) {
	r := newEndpointRig(t, nil)
	a := r.connect(t, "act-a")
	send(t, a, reportFrame(nil))
	r.applied(t, "act-a report 0")
	pre, _, err := r.dial(t, testToken) // connected, no hello yet
	if err != nil {
		t.Fatal(err)
	}
	r.ep.Close()
	closed(t, a, websocket.CloseGoingAway, "shutting down")
	closed(t, pre, websocket.CloseGoingAway, "shutting down")
	_, resp, err := r.dial(t, testToken)
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("after Close: %v %+v, want 503", err, resp)
	}
}

// TestEndpointConcurrentActivators: several activators report at once; the
// store ends with the sum of each one's latest figures.
func TestEndpointConcurrentActivators(t *testing.T) {
	const activators, reports = 4, 50
	r := newEndpointRig(t, nil)
	conns := make([]*websocket.Conn, activators)
	for i := range conns {
		conns[i] = r.connect(t, fmt.Sprintf("act-%d", i))
	}
	errs := make(chan error, activators)
	for i, ws := range conns {
		go func() {
			for k := 1; k <= reports; k++ {
				frame := reportFrame(map[string]stats.ActivatorFigures{"ns/svc": {Concurrency: float64(i*1000 + k), InFlight: 1}})
				if err := ws.WriteMessage(websocket.BinaryMessage, frame); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range activators {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for range activators * reports {
		select {
		case <-r.sink.applied:
		case <-time.After(10 * time.Second):
			t.Fatal("not every report was applied")
		}
	}
	want := 0.0
	for i := range activators {
		want += float64(i*1000 + reports)
	}
	if l := r.acts.Load("ns/svc"); l.Concurrency != want || l.Activators != activators || l.Pending != activators {
		t.Fatalf("ns/svc = %+v, want concurrency %v from %d activators", l, want, activators)
	}
}
