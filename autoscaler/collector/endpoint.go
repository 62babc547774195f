package collector

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/swell-run/swell/pkg/stats"
)

// Close codes the endpoint sends besides the standard ones (1001 going away
// on shutdown, 1003 for a text frame, 1007 for a malformed frame, 1008 for a
// protocol violation, 1009 for a frame over the size limit).
const (
	// CloseReplaced closes a connection whose activator opened a newer one.
	CloseReplaced = 4000
	// CloseIdle closes a connection on which nothing, not even a pong,
	// arrived for IdleTimeout.
	CloseIdle = 4001
)

// Defaults of EndpointConfig.
const (
	DefaultIdleTimeout    = 10 * time.Second
	DefaultWriteTimeout   = 5 * time.Second
	DefaultMaxConnections = 256
	// MinTokenLength is the shortest bearer token accepted: 16 bytes, as
	// from `head -c 32 /dev/urandom | base64` (44).
	MinTokenLength = 16
)

// An Authenticator checks an activator's bearer token and says which
// activator presents it.
type Authenticator interface {
	// Authenticate returns the name of the activator token, presented
	// from address from, belongs to: the name its hello must carry. An
	// error wrapping ErrRetryLater says the token could not be checked
	// now (the client is told to retry); any other error refuses it.
	Authenticate(ctx context.Context, from netip.Addr, token string) (name string, err error)
}

// ErrRetryLater marks an Authenticator's error that is no verdict on the
// token: it could not be checked now.
var ErrRetryLater = errors.New("cannot check the token now; retry later")

// authTimeout bounds an Authenticator's check.
const authTimeout = 10 * time.Second

// EndpointConfig configures an ActivatorEndpoint. Sink is required, and
// either Tokens or Authenticator.
type EndpointConfig struct {
	// Tokens are bearer tokens that any activator may present, naming
	// itself as it likes (swell local; a static token file). Several allow
	// a rotation: add the new token here, roll it out to the activators,
	// remove the old one.
	Tokens []string
	// Authenticator checks each token instead, and binds it to one
	// activator: a hello that names another is refused, so one activator's
	// credential cannot speak for the others (on Kubernetes, each
	// activator's service-account token, checked with the TokenReview API).
	Authenticator Authenticator
	// Sink receives every validated Report and Poke frame.
	Sink ActivatorSink
	// OnPoke, if set, is called for each service a Poke names, after Sink
	// has applied the poke, on the connection's goroutine: it must not block
	// (the engine makes a non-blocking send to its decision loop).
	OnPoke func(service string)
	// MaxFrameSize is the read limit per frame (default
	// stats.ActivatorMaxFrameSize). A larger frame closes the connection.
	MaxFrameSize int64
	// IdleTimeout closes a connection on which nothing arrived for this long
	// (default DefaultIdleTimeout); the endpoint pings every third of it, so
	// a live activator always answers in time.
	IdleTimeout time.Duration
	// WriteTimeout bounds each ping and close frame (default
	// DefaultWriteTimeout).
	WriteTimeout time.Duration
	// MaxConnections caps simultaneous connections (default
	// DefaultMaxConnections); more are refused with 503 before upgrading.
	MaxConnections int
	// Logger logs connections and why they closed (default none).
	Logger *zap.Logger
	// Registerer, if set, gets the endpoint's metrics.
	Registerer prometheus.Registerer
}

// ActivatorEndpoint is the http.Handler activators open their websocket on.
// It authenticates the upgrade request with a bearer token, reads binary
// activator frames (pkg/stats), hands Reports and Pokes to the sink and
// calls OnPoke for pokes. Each activator names itself in its first frame; a
// newer connection from the same activator replaces the older one, and
// frames from a replaced connection are dropped, so one activator's figures
// are never applied twice or out of order. A broken frame closes only its
// own connection, and nothing from it is applied.
type ActivatorEndpoint struct {
	tokens   [][sha256.Size]byte
	auth     Authenticator
	sink     ActivatorSink
	onPoke   func(string)
	maxFrame int64
	idle     time.Duration
	writeTO  time.Duration
	maxConns int
	log      *zap.Logger
	metrics  *endpointMetrics
	upgrader websocket.Upgrader

	mu     sync.Mutex
	closed bool
	conns  int // upgrades in progress and open connections
	open   map[*activatorConn]struct{}
	slots  map[string]*activatorConnSlot
}

// activatorConnSlot holds the current connection of one activator. Its
// mutex makes "is this connection still the current one" and "apply the
// frame" one step, so a frame read just before a replacement is never
// applied after it.
type activatorConnSlot struct {
	mu  sync.Mutex
	cur *activatorConn
}

type activatorConn struct {
	ws     *websocket.Conn
	remote string
	// identity is the activator the token proved, which the hello must
	// name; "" for a shared token, which may name any.
	identity string
	name     string // set by register, under ActivatorEndpoint.mu
	slot     *activatorConnSlot
	once     sync.Once
	done     chan struct{}
}

// NewActivatorEndpoint returns an ActivatorEndpoint, or an error saying
// which setting is missing or unacceptable.
func NewActivatorEndpoint(cfg EndpointConfig) (*ActivatorEndpoint, error) {
	if cfg.Sink == nil {
		return nil, errors.New("activator endpoint: EndpointConfig.Sink is required")
	}
	switch {
	case len(cfg.Tokens) == 0 && cfg.Authenticator == nil:
		return nil, errors.New("activator endpoint: EndpointConfig.Tokens or EndpointConfig.Authenticator is required")
	case len(cfg.Tokens) > 0 && cfg.Authenticator != nil:
		return nil, errors.New("activator endpoint: EndpointConfig.Tokens and EndpointConfig.Authenticator are exclusive")
	}
	e := &ActivatorEndpoint{
		auth:     cfg.Authenticator,
		sink:     cfg.Sink,
		onPoke:   cfg.OnPoke,
		maxFrame: cfg.MaxFrameSize,
		idle:     cfg.IdleTimeout,
		writeTO:  cfg.WriteTimeout,
		maxConns: cfg.MaxConnections,
		log:      cfg.Logger,
		open:     make(map[*activatorConn]struct{}),
		slots:    make(map[string]*activatorConnSlot),
	}
	for i, t := range cfg.Tokens {
		if len(t) < MinTokenLength {
			return nil, fmt.Errorf("activator endpoint: token %d has %d bytes, at least %d are required", i, len(t), MinTokenLength)
		}
		if j := strings.IndexFunc(t, func(r rune) bool { return r <= ' ' || r == 0x7f }); j >= 0 {
			return nil, fmt.Errorf("activator endpoint: token %d has a space or control character at byte %d (trim the newline of a Secret file)", i, j)
		}
		e.tokens = append(e.tokens, sha256.Sum256([]byte(t)))
	}
	if e.maxFrame <= 0 {
		e.maxFrame = stats.ActivatorMaxFrameSize
	}
	if e.idle <= 0 {
		e.idle = DefaultIdleTimeout
	}
	if e.writeTO <= 0 {
		e.writeTO = DefaultWriteTimeout
	}
	if e.maxConns <= 0 {
		e.maxConns = DefaultMaxConnections
	}
	if e.log == nil {
		e.log = zap.NewNop()
	}
	e.upgrader = websocket.Upgrader{
		HandshakeTimeout: e.writeTO,
		ReadBufferSize:   16 << 10,
		// The endpoint writes only control frames, which bypass this buffer.
		WriteBufferSize: 256,
	}
	var err error
	if e.metrics, err = newEndpointMetrics(cfg.Registerer, e.connected); err != nil {
		return nil, err
	}
	return e, nil
}

// ServeHTTP authenticates and upgrades the request, then reads frames until
// the connection ends.
func (e *ActivatorEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	identity, err := e.authenticate(r)
	switch {
	case errors.Is(err, ErrRetryLater):
		e.metrics.rejected("auth-unavailable")
		e.log.Warn("cannot check an activator's token", zap.String("remote", r.RemoteAddr), zap.Error(err))
		w.Header().Set("Retry-After", "1")
		http.Error(w, "activator endpoint: "+err.Error(), http.StatusServiceUnavailable)
		return
	case err != nil:
		e.metrics.rejected("unauthorized")
		e.log.Info("activator token refused", zap.String("remote", r.RemoteAddr), zap.Error(err))
		w.Header().Set("WWW-Authenticate", `Bearer realm="swell-autoscaler"`)
		http.Error(w, "activator endpoint: missing or wrong bearer token", http.StatusUnauthorized)
		return
	}
	e.mu.Lock()
	switch {
	case e.closed:
		e.mu.Unlock()
		e.metrics.rejected("shutting-down")
		http.Error(w, "activator endpoint: shutting down", http.StatusServiceUnavailable)
		return
	case e.conns >= e.maxConns:
		e.mu.Unlock()
		e.metrics.rejected("too-many")
		http.Error(w, fmt.Sprintf("activator endpoint: %d connections open, the maximum", e.maxConns), http.StatusServiceUnavailable)
		return
	}
	e.conns++
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.conns--
		e.mu.Unlock()
	}()

	ws, err := e.upgrader.Upgrade(w, r, nil) // answers the client itself on error
	if err != nil {
		e.metrics.rejected("handshake")
		e.log.Info("activator handshake failed", zap.String("remote", r.RemoteAddr), zap.Error(err))
		return
	}
	c := &activatorConn{ws: ws, remote: r.RemoteAddr, identity: identity, done: make(chan struct{})}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		e.closeConn(c, websocket.CloseGoingAway, "shutting down")
		return
	}
	e.open[c] = struct{}{}
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.open, c)
		e.mu.Unlock()
	}()
	e.serve(c)
}

// errNoToken refuses a request without a bearer token.
var errNoToken = errors.New("no bearer token")

// authenticate checks the request's bearer token and returns the activator
// it binds the connection to ("" for a shared token). A shared token is
// compared with each accepted one in constant time: comparing SHA-256
// digests keeps the comparison's length fixed, so not even a token's
// length leaks through timing.
func (e *ActivatorEndpoint) authenticate(r *http.Request) (string, error) {
	const scheme = "bearer "
	h := r.Header.Get("Authorization")
	if len(h) <= len(scheme) || !strings.EqualFold(h[:len(scheme)], scheme) {
		return "", errNoToken
	}
	token := strings.TrimSpace(h[len(scheme):])
	if e.auth != nil {
		ctx, cancel := context.WithTimeout(r.Context(), authTimeout)
		defer cancel()
		from, _ := netip.ParseAddrPort(r.RemoteAddr) // the zero address if it does not parse: no pod's
		name, err := e.auth.Authenticate(ctx, from.Addr(), token)
		if err == nil && name == "" {
			err = errors.New("the authenticator named no activator")
		}
		return name, err
	}
	sum := sha256.Sum256([]byte(token))
	ok := 0
	for i := range e.tokens {
		ok |= subtle.ConstantTimeCompare(sum[:], e.tokens[i][:])
	}
	if ok != 1 {
		return "", errors.New("not an accepted token")
	}
	return "", nil
}

// serve runs one connection: the hello, then frames until an error.
func (e *ActivatorEndpoint) serve(c *activatorConn) {
	ws := c.ws
	ws.SetReadLimit(e.maxFrame)
	extend := func() { ws.SetReadDeadline(time.Now().Add(e.idle)) }
	ws.SetPongHandler(func(string) error { extend(); return nil })
	extend()

	var (
		buf []byte
		f   stats.ActivatorFrame
	)
	buf, code, reason := e.readFrame(c, buf, &f)
	switch {
	case code != 0:
	case f.Type != stats.ActivatorHello:
		code, reason = websocket.ClosePolicyViolation, "first frame must be a hello, got a "+f.Type.String()
	case c.identity != "" && string(f.Activator) != c.identity:
		code, reason = websocket.ClosePolicyViolation, fmt.Sprintf("the hello names activator %q but the token is %q's", f.Activator, c.identity)
	}
	if code != 0 {
		e.closeConn(c, code, reason)
		return
	}
	e.register(c, string(f.Activator))
	defer e.unregister(c)
	go e.keepalive(c)

	for {
		buf, code, reason = e.readFrame(c, buf, &f)
		if code == 0 && f.Type == stats.ActivatorHello {
			code, reason = websocket.ClosePolicyViolation, "a second hello on one connection"
		}
		if code != 0 {
			e.closeConn(c, code, reason)
			return
		}
		if !e.apply(c, &f) {
			return // replaced; the replacement closed c
		}
	}
}

// readFrame reads and decodes one frame into f, reusing buf. A non-zero
// code is the close code for the failure, with its reason.
func (e *ActivatorEndpoint) readFrame(c *activatorConn, buf []byte, f *stats.ActivatorFrame) ([]byte, int, string) {
	mt, r, err := c.ws.NextReader()
	if err == nil && mt != websocket.BinaryMessage {
		return buf, websocket.CloseUnsupportedData, "text frame; activator frames are binary"
	}
	if err == nil {
		buf, err = readAll(r, buf[:0])
	}
	if err != nil {
		var ce *websocket.CloseError
		var ne net.Error
		switch {
		case errors.As(err, &ce):
			return buf, websocket.CloseNormalClosure, "peer closed: " + ce.Error()
		case errors.Is(err, websocket.ErrReadLimit):
			return buf, websocket.CloseMessageTooBig, fmt.Sprintf("frame larger than %d bytes", e.maxFrame)
		case errors.As(err, &ne) && ne.Timeout():
			return buf, CloseIdle, fmt.Sprintf("nothing received for %v", e.idle)
		}
		return buf, websocket.CloseAbnormalClosure, err.Error()
	}
	c.ws.SetReadDeadline(time.Now().Add(e.idle))
	if err := stats.DecodeActivatorFrame(buf, f); err != nil {
		return buf, websocket.CloseInvalidFramePayloadData, err.Error()
	}
	e.metrics.frames(f.Type)
	return buf, 0, ""
}

// readAll reads r to its end into buf's spare capacity, growing it as
// needed; the read limit bounds the growth.
func readAll(r io.Reader, buf []byte) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// register names c and makes it its activator's current connection, then
// closes the one it replaces. The name is set under e.mu because Close may
// log it from another goroutine.
func (e *ActivatorEndpoint) register(c *activatorConn, name string) {
	e.mu.Lock()
	c.name = name
	s := e.slots[c.name]
	if s == nil {
		s = &activatorConnSlot{}
		e.slots[c.name] = s
	}
	c.slot = s
	s.mu.Lock()
	old := s.cur
	s.cur = c
	s.mu.Unlock()
	e.mu.Unlock()
	if old != nil {
		e.log.Info("activator reconnected", zap.String("activator", c.name),
			zap.String("remote", c.remote), zap.String("replaced", old.remote))
		e.closeConn(old, CloseReplaced, "replaced by a newer connection from "+c.remote)
	} else {
		e.log.Info("activator connected", zap.String("activator", c.name), zap.String("remote", c.remote))
	}
}

func (e *ActivatorEndpoint) unregister(c *activatorConn) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c.slot.mu.Lock()
	defer c.slot.mu.Unlock()
	if c.slot.cur == c {
		c.slot.cur = nil
		delete(e.slots, c.name)
	}
}

// apply hands f to the sink if c is still its activator's connection, then
// calls OnPoke for a poke. It reports whether c is current.
func (e *ActivatorEndpoint) apply(c *activatorConn, f *stats.ActivatorFrame) bool {
	c.slot.mu.Lock()
	current := c.slot.cur == c
	if current {
		e.sink.Apply(c.name, f)
	}
	c.slot.mu.Unlock()
	if current && f.Type == stats.ActivatorPoke && e.onPoke != nil {
		for i := range f.Entries {
			e.onPoke(string(f.Entries[i].Service))
		}
	}
	return current
}

// keepalive pings every third of the idle timeout until c closes; the
// activator's pongs (and its frames) push the read deadline forward.
func (e *ActivatorEndpoint) keepalive(c *activatorConn) {
	t := time.NewTicker(max(e.idle/3, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
			if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(e.writeTO)); err != nil {
				e.closeConn(c, websocket.CloseAbnormalClosure, "ping: "+err.Error())
				return
			}
		}
	}
}

// closeConn sends a close frame with code and reason (when the code may be
// sent) and closes the socket, once; the reader then ends.
func (e *ActivatorEndpoint) closeConn(c *activatorConn, code int, reason string) {
	c.once.Do(func() {
		e.mu.Lock()
		name := c.name
		e.mu.Unlock()
		// Counted before the close frame goes out, so whoever sees the
		// frame sees the count too.
		e.metrics.closed(code)
		// Codes 1005 and 1006 describe a connection that ended without a
		// close frame; they are never sent.
		if code != websocket.CloseAbnormalClosure && code != websocket.CloseNoStatusReceived {
			msg := reason
			if len(msg) > 123 { // a close frame's payload is at most 125 bytes
				msg = msg[:120] + "..."
			}
			c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, msg), time.Now().Add(e.writeTO))
		}
		c.ws.Close()
		close(c.done)
		lvl := zap.InfoLevel
		if code == websocket.CloseInvalidFramePayloadData || code == websocket.CloseMessageTooBig ||
			code == websocket.ClosePolicyViolation || code == websocket.CloseUnsupportedData {
			lvl = zap.WarnLevel
		}
		e.log.Log(lvl, "activator connection closed", zap.String("activator", name),
			zap.String("remote", c.remote), zap.Int("code", code), zap.String("reason", reason))
	})
}

// Connected returns the names of the activators connected now, sorted.
func (e *ActivatorEndpoint) Connected() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	names := make([]string, 0, len(e.slots))
	for n := range e.slots {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func (e *ActivatorEndpoint) connected() float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return float64(len(e.slots))
}

// Close closes every connection with 1001 (going away) and refuses new
// ones; http.Server.Shutdown does not reach hijacked connections.
func (e *ActivatorEndpoint) Close() error {
	e.mu.Lock()
	e.closed = true
	conns := make([]*activatorConn, 0, len(e.open))
	for c := range e.open {
		conns = append(conns, c)
	}
	e.mu.Unlock()
	for _, c := range conns {
		e.closeConn(c, websocket.CloseGoingAway, "autoscaler shutting down")
	}
	return nil
}
