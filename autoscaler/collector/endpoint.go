package collector

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/time/rate"
	"k8s.io/utils/clock"

	"github.com/swell-run/swell/pkg/stats"
)

// Close codes the endpoint sends besides the standard ones (1001 going away
// on shutdown, 1003 for a text frame, 1007 for a malformed frame, 1008 for a
// protocol violation, no hello in time or a token refused on a recheck,
// 1009 for a frame over the size limit).
const (
	// CloseReplaced closes a connection whose activator opened a newer one.
	CloseReplaced = 4000
	// CloseIdle closes a connection on which nothing, not even a pong,
	// arrived for IdleTimeout after its hello.
	CloseIdle = 4001
)

// Defaults of EndpointConfig.
const (
	DefaultIdleTimeout = 10 * time.Second
	// DefaultHelloTimeout is how long a connection has to say hello. An
	// activator sends its hello as its first write, at once.
	DefaultHelloTimeout   = 10 * time.Second
	DefaultWriteTimeout   = 5 * time.Second
	DefaultMaxConnections = 256
	// DefaultMaxConnectionsPerActivator caps one authenticated activator's
	// connections to one autoscaler replica. An activator keeps one
	// connection to each replica (its reporter pool runs one reporter per
	// replica, however many buckets that replica leads, and a reporter
	// dials again only once its connection has ended). So one replica sees
	// at most the connection it holds, which may be dead without its
	// knowing yet; the new one that will replace it; and handshakes whose
	// answer never reached the activator, each gone at the hello deadline
	// and each costing the activator its dial timeout (5 s), so two in a
	// HelloTimeout. Eight is twice those four, and keeps a stolen token to 8
	// of the 256 slots.
	DefaultMaxConnectionsPerActivator = 8
	// DefaultRecheckInterval is how often an open connection's token is
	// checked again: the activators' token reviewer remembers an accepted
	// token for as long (kube/activatorauth.DefaultCacheTTL), so each check
	// asks the API server afresh.
	DefaultRecheckInterval = time.Minute
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

// ErrUnknownCaller marks an Authenticator's refusal to check a token at
// all: its caller's address is no activator's, as far as the
// Authenticator knows yet (an activator just started may not be known
// for a moment, so it wraps ErrRetryLater).
var ErrUnknownCaller = fmt.Errorf("the caller's address is no activator pod's: %w", ErrRetryLater)

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
	// HelloTimeout closes a connection that has not sent its hello this
	// long after its upgrade (default DefaultHelloTimeout). Nothing else
	// extends it, pongs included: a credential cannot hold connections
	// without saying which activator they are for.
	HelloTimeout time.Duration
	// IdleTimeout closes a connection on which nothing arrived for this long
	// after its hello (default DefaultIdleTimeout); the endpoint pings every
	// third of it, so a live activator always answers in time.
	IdleTimeout time.Duration
	// WriteTimeout bounds each ping and close frame (default
	// DefaultWriteTimeout).
	WriteTimeout time.Duration
	// MaxConnections caps simultaneous connections (default
	// DefaultMaxConnections); more are refused with 503 before upgrading.
	MaxConnections int
	// MaxConnectionsPerActivator caps the connections one credential holds
	// at once, upgrades in progress included: one activator's with an
	// Authenticator (default DefaultMaxConnectionsPerActivator), one shared
	// token's with Tokens (default MaxConnections, as every activator of a
	// fleet may hold the same token). More are refused with 429 before
	// upgrading, so one credential cannot take every connection.
	MaxConnectionsPerActivator int
	// RecheckInterval is how often the Authenticator is asked again about
	// each open connection's token (default DefaultRecheckInterval). A
	// token it refuses, or that now belongs to another activator, closes
	// the connection with 1008; one it cannot check now (ErrRetryLater)
	// keeps it, so an API server that does not answer drops no activator.
	// Shared tokens are fixed for the endpoint's life and not rechecked.
	RecheckInterval time.Duration
	// Clock drives the hello deadline, the pings, the idle timeout and the
	// rechecks (default the real clock). Socket write deadlines use real
	// time.
	Clock clock.WithTicker
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
	helloTO  time.Duration
	idle     time.Duration
	writeTO  time.Duration
	recheck  time.Duration
	maxConns int
	maxPer   int
	clock    clock.WithTicker
	log      *zap.Logger
	metrics  *endpointMetrics
	upgrader websocket.Upgrader
	// refusals bounds the log lines of refused attempts (the metrics
	// count them all).
	refusals rate.Sometimes

	mu     sync.Mutex
	closed bool
	conns  int // upgrades in progress and open connections
	per    map[credential]int
	open   map[*activatorConn]struct{}
	slots  map[string]*activatorConnSlot
}

// credential is what a connection was admitted on, as the per-activator
// cap counts it: the activator an Authenticator named, or a shared token.
type credential struct {
	activator string
	token     int // 1 + the shared token's index; 0 with an Authenticator
}

func (k credential) String() string {
	if k.token > 0 {
		return "shared token " + strconv.Itoa(k.token-1)
	}
	return "activator " + strconv.Quote(k.activator)
}

// admission is what authenticate learnt of a connection.
type admission struct {
	cred credential
	// token and from are kept, with an Authenticator, to check the token
	// again while the connection lasts.
	token string
	from  netip.Addr
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
	// admission.cred.activator is the activator the token proved, which
	// the hello must name; "" for a shared token, which may name any.
	admission
	name string // set by register, under ActivatorEndpoint.mu
	slot *activatorConnSlot
	// closed is set by closeConn under ActivatorEndpoint.mu; register
	// refuses a closed connection.
	closed bool
	// greeted is closed once the hello is registered: from then on the
	// hello deadline is over, and frames and pongs keep the connection.
	greeted chan struct{}
	// seen is when the latest frame or pong arrived, in the clock's
	// nanoseconds since the epoch.
	seen atomic.Int64
	once sync.Once
	// ctx ends when the connection is closed.
	ctx    context.Context
	cancel context.CancelFunc
}

// connTimers are one connection's clock: its hello deadline, the keepalive
// tick and, with an Authenticator, the rechecks. They are armed before the
// upgrade, so they run from the moment the activator has its websocket.
type connTimers struct {
	hello   clock.Timer
	tick    clock.Ticker
	recheck clock.Ticker // nil without an Authenticator
}

func (t *connTimers) stop() {
	t.hello.Stop()
	t.tick.Stop()
	if t.recheck != nil {
		t.recheck.Stop()
	}
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
		refusals: rate.Sometimes{First: 5, Interval: time.Second},
		auth:     cfg.Authenticator,
		sink:     cfg.Sink,
		onPoke:   cfg.OnPoke,
		maxFrame: cfg.MaxFrameSize,
		helloTO:  cfg.HelloTimeout,
		idle:     cfg.IdleTimeout,
		writeTO:  cfg.WriteTimeout,
		recheck:  cfg.RecheckInterval,
		maxConns: cfg.MaxConnections,
		maxPer:   cfg.MaxConnectionsPerActivator,
		clock:    cfg.Clock,
		log:      cfg.Logger,
		per:      make(map[credential]int),
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
	if e.helloTO <= 0 {
		e.helloTO = DefaultHelloTimeout
	}
	if e.idle <= 0 {
		e.idle = DefaultIdleTimeout
	}
	if e.recheck <= 0 {
		e.recheck = DefaultRecheckInterval
	}
	if e.writeTO <= 0 {
		e.writeTO = DefaultWriteTimeout
	}
	if e.maxConns <= 0 {
		e.maxConns = DefaultMaxConnections
	}
	switch {
	case e.maxPer > 0:
	case e.auth != nil:
		e.maxPer = DefaultMaxConnectionsPerActivator
	default:
		e.maxPer = e.maxConns
	}
	if e.clock == nil {
		e.clock = clock.RealClock{}
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
	a, err := e.authenticate(r)
	// Refusals are logged a few times a second at most: anyone who
	// reaches the port can cause them, as often as they like.
	switch {
	case errors.Is(err, ErrRetryLater):
		reason, level, msg := "auth-unavailable", zap.WarnLevel, "cannot check an activator's token"
		if errors.Is(err, ErrUnknownCaller) {
			reason, level, msg = "unknown-caller", zap.InfoLevel, "a caller that is no activator, refused without a review"
		}
		e.metrics.rejected(reason)
		e.refusals.Do(func() { e.log.Log(level, msg, zap.String("remote", r.RemoteAddr), zap.Error(err)) })
		w.Header().Set("Retry-After", "1")
		http.Error(w, "activator endpoint: "+err.Error(), http.StatusServiceUnavailable)
		return
	case err != nil:
		e.metrics.rejected("unauthorized")
		e.refusals.Do(func() {
			e.log.Info("activator token refused", zap.String("remote", r.RemoteAddr), zap.Error(err))
		})
		w.Header().Set("WWW-Authenticate", `Bearer realm="swell-autoscaler"`)
		http.Error(w, "activator endpoint: missing or wrong bearer token", http.StatusUnauthorized)
		return
	}
	if !e.admit(w, r, a.cred) {
		return
	}

	t := &connTimers{hello: e.clock.NewTimer(e.helloTO), tick: e.clock.NewTicker(max(e.idle/3, time.Millisecond))}
	if e.auth != nil {
		t.recheck = e.clock.NewTicker(e.recheck)
	}
	ws, err := e.upgrader.Upgrade(w, r, nil) // answers the client itself on error
	if err != nil {
		t.stop()
		e.mu.Lock()
		e.releaseLocked(a.cred)
		e.mu.Unlock()
		e.metrics.rejected("handshake")
		e.log.Info("activator handshake failed", zap.String("remote", r.RemoteAddr), zap.Error(err))
		return
	}
	// From here the connection holds the slot admit took; closeConn gives
	// it back.
	ctx, cancel := context.WithCancel(context.Background())
	c := &activatorConn{ws: ws, remote: r.RemoteAddr, admission: a, greeted: make(chan struct{}), ctx: ctx, cancel: cancel}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		t.stop()
		e.closeConn(c, websocket.CloseGoingAway, "shutting down")
		return
	}
	e.open[c] = struct{}{}
	e.mu.Unlock()
	e.serve(c, t)
}

// admit takes a connection slot for a connection admitted on cred, or
// answers why there is none: the endpoint is closing, every slot is taken,
// or cred holds as many as one credential may.
func (e *ActivatorEndpoint) admit(w http.ResponseWriter, r *http.Request, cred credential) bool {
	e.mu.Lock()
	closed, held, conns := e.closed, e.per[cred], e.conns
	ok := !closed && held < e.maxPer && conns < e.maxConns
	if ok {
		e.conns++
		e.per[cred]++
	}
	e.mu.Unlock()
	switch {
	case ok:
		return true
	case closed:
		e.metrics.rejected("shutting-down")
		http.Error(w, "activator endpoint: shutting down", http.StatusServiceUnavailable)
	case conns >= e.maxConns:
		e.metrics.rejected("too-many")
		http.Error(w, fmt.Sprintf("activator endpoint: %d connections open, the maximum", e.maxConns), http.StatusServiceUnavailable)
	default:
		e.metrics.rejected("too-many-per-activator")
		e.log.Info("activator refused: its credential holds the most connections it may",
			zap.Stringer("credential", cred), zap.String("remote", r.RemoteAddr), zap.Int("connections", held))
		// Connections that never said hello are gone by the hello deadline.
		w.Header().Set("Retry-After", strconv.Itoa(int((e.helloTO+time.Second-1)/time.Second)))
		http.Error(w, fmt.Sprintf("activator endpoint: %s already holds %d connections, the most one credential may hold "+
			"(a connection without a hello ends %v after its upgrade)", cred, held, e.helloTO), http.StatusTooManyRequests)
	}
	return false
}

// releaseLocked gives back the slot admit took for cred.
func (e *ActivatorEndpoint) releaseLocked(cred credential) {
	e.conns--
	if e.per[cred]--; e.per[cred] <= 0 {
		delete(e.per, cred)
	}
}

// errNoToken refuses a request without a bearer token.
var errNoToken = errors.New("no bearer token")

// authenticate checks the request's bearer token and returns what it
// admits the connection on: with an Authenticator, the activator it binds
// the connection to; else the shared token it matched. A shared token is
// compared with each accepted one in constant time: comparing SHA-256
// digests keeps the comparison's length fixed, so not even a token's
// length leaks through timing, and which one matched is selected without
// a branch.
func (e *ActivatorEndpoint) authenticate(r *http.Request) (admission, error) {
	const scheme = "bearer "
	h := r.Header.Get("Authorization")
	if len(h) <= len(scheme) || !strings.EqualFold(h[:len(scheme)], scheme) {
		return admission{}, errNoToken
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
		return admission{cred: credential{activator: name}, token: token, from: from.Addr()}, err
	}
	sum := sha256.Sum256([]byte(token))
	matched := 0
	for i := range e.tokens {
		matched = subtle.ConstantTimeSelect(subtle.ConstantTimeCompare(sum[:], e.tokens[i][:]), i+1, matched)
	}
	if matched == 0 {
		return admission{}, errors.New("not an accepted token")
	}
	return admission{cred: credential{token: matched}}, nil
}

// serve runs one connection: the hello, then frames until an error. Every
// way out of it has closed c.
func (e *ActivatorEndpoint) serve(c *activatorConn, t *connTimers) {
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		e.watch(c, t)
	}()
	defer func() { <-watched }()

	ws := c.ws
	ws.SetReadLimit(e.maxFrame)
	var (
		buf []byte
		f   stats.ActivatorFrame
	)
	// Until the hello, pongs are ignored (gorilla's default), so only the
	// hello ends the hello deadline.
	buf, code, reason := e.readFrame(c, buf, &f)
	switch {
	case code != 0:
	case f.Type != stats.ActivatorHello:
		code, reason = websocket.ClosePolicyViolation, "first frame must be a hello, got a "+f.Type.String()
	case c.cred.activator != "" && string(f.Activator) != c.cred.activator:
		code, reason = websocket.ClosePolicyViolation, fmt.Sprintf("the hello names activator %q but the token is %q's", f.Activator, c.cred.activator)
	}
	if code != 0 {
		e.closeConn(c, code, reason)
		return
	}
	if !e.register(c, string(f.Activator)) {
		return // closed meanwhile: the hello deadline passed, or shutdown
	}
	ws.SetPongHandler(func(string) error { c.seen.Store(e.clock.Now().UnixNano()); return nil })
	close(c.greeted)

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
			return // replaced or closed; whoever did it closed c
		}
	}
}

// readFrame reads and decodes one frame into f, reusing buf. A non-zero
// code is the close code for the failure, with its reason.
func (e *ActivatorEndpoint) readFrame(c *activatorConn, buf []byte, f *stats.ActivatorFrame) ([]byte, int, string) {
	buf, code, reason := readBinary(c.ws, buf, e.maxFrame)
	if code != 0 {
		return buf, code, reason
	}
	c.seen.Store(e.clock.Now().UnixNano())
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
// closes the one it replaces; it reports false, and does nothing, if c is
// closed already. The name is set under e.mu because Close may log it from
// another goroutine.
func (e *ActivatorEndpoint) register(c *activatorConn, name string) bool {
	e.mu.Lock()
	if c.closed {
		e.mu.Unlock()
		return false
	}
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
	return true
}

// unregisterLocked ends c's turn as its activator's connection, if it is
// still that; no frame of c is applied after it.
func (e *ActivatorEndpoint) unregisterLocked(c *activatorConn) {
	if c.slot == nil {
		return // never registered
	}
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

// watch keeps c's time until c is closed. It closes c if no hello came
// within the hello deadline; after the hello, it pings every third of the
// idle timeout and closes c once nothing (no frame, no pong) arrived for
// that long; and with an Authenticator it has c's token checked again
// every recheck interval.
func (e *ActivatorEndpoint) watch(c *activatorConn, t *connTimers) {
	defer t.stop()
	var recheck <-chan time.Time
	if t.recheck != nil {
		recheck = t.recheck.C()
	}
	hello, greeted := t.hello.C(), c.greeted
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-greeted:
			t.hello.Stop()
			hello, greeted = nil, nil
		case <-hello:
			select {
			case <-c.greeted: // in time, only just
				hello, greeted = nil, nil
				continue
			default:
			}
			e.closeAs(c, websocket.ClosePolicyViolation, "no-hello", fmt.Sprintf("no hello within %v of the upgrade", e.helloTO))
			return
		case now := <-t.tick.C():
			if greeted != nil {
				continue // before the hello only its deadline counts
			}
			if now.Sub(time.Unix(0, c.seen.Load())) >= e.idle {
				e.closeConn(c, CloseIdle, fmt.Sprintf("nothing received for %v", e.idle))
				return
			}
			if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(e.writeTO)); err != nil {
				e.closeConn(c, websocket.CloseAbnormalClosure, "ping: "+err.Error())
				return
			}
		case <-recheck:
			if !e.recheckToken(c) {
				return
			}
		}
	}
}

// recheckToken asks the Authenticator again about c's token, from c's
// address. It closes c and reports false if the token is refused now or
// belongs to another activator; a token that cannot be checked now keeps
// c, so an API server that does not answer drops no activator.
func (e *ActivatorEndpoint) recheckToken(c *activatorConn) bool {
	ctx, cancel := context.WithTimeout(c.ctx, authTimeout)
	name, err := e.auth.Authenticate(ctx, c.from, c.token)
	cancel()
	if c.ctx.Err() != nil {
		return false // closed meanwhile
	}
	e.mu.Lock()
	activator := c.name // "" before the hello
	e.mu.Unlock()
	var reason string
	switch {
	case errors.Is(err, ErrRetryLater):
		e.metrics.rechecked("unavailable")
		e.log.Warn("cannot check an activator's token again now; its connection stays",
			zap.String("activator", activator), zap.String("remote", c.remote), zap.Error(err))
		return true
	case err != nil:
		reason = "the token was refused when checked again"
	case name != c.cred.activator:
		err = fmt.Errorf("the token is now %q's, not %q's", name, c.cred.activator)
		reason = "the token belongs to another activator now"
	default:
		e.metrics.rechecked("ok")
		return true
	}
	e.metrics.rechecked("refused")
	e.log.Warn("activator token refused when checked again: closing its connection",
		zap.String("activator", activator), zap.String("remote", c.remote), zap.Error(err))
	e.closeAs(c, websocket.ClosePolicyViolation, "revoked", reason)
	return false
}

// closeConn closes c with code and reason, counted under the code's reason
// (closeReasons).
func (e *ActivatorEndpoint) closeConn(c *activatorConn, code int, reason string) {
	e.closeAs(c, code, closeReasons[code], reason)
}

// closeAs closes c, once: it unregisters c and gives its slot back, counts
// the close under label, sends a close frame with code and reason (when the
// code may be sent) and closes the socket; the reader then ends.
func (e *ActivatorEndpoint) closeAs(c *activatorConn, code int, label, reason string) {
	c.once.Do(func() {
		// Done before the close frame goes out, so whoever sees the frame
		// sees the activator gone, its slot free and the close counted.
		e.mu.Lock()
		name := c.name
		c.closed = true
		e.unregisterLocked(c)
		delete(e.open, c)
		e.releaseLocked(c.cred)
		e.mu.Unlock()
		c.cancel()
		e.metrics.closed(label)
		sendClose(c.ws, code, reason, e.writeTO)
		e.log.Log(closeLevel(code, zap.InfoLevel), "activator connection closed", zap.String("activator", name),
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
