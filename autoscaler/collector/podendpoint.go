package collector

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/time/rate"
	"k8s.io/utils/clock"

	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/service"
	"github.com/swell-run/swell/pkg/stats"
)

// Defaults of PodEndpointConfig.
const (
	// DefaultPodMaxConnections is one connection for each of 50,000 pods
	// and room for the replacements of those reconnecting.
	DefaultPodMaxConnections = 65536
	// DefaultPodIdleTimeout closes a connection that sent no frame for
	// this long: a queue-proxy pushes every second.
	DefaultPodIdleTimeout = 5 * time.Second
	// DefaultPodFrameRate and DefaultPodFrameBurst bound the frames one
	// connection has applied: a queue-proxy pushes once a second and at
	// once on a sharp change, a few a second at most.
	DefaultPodFrameRate  = 5
	DefaultPodFrameBurst = 10
	// podDropsToClose closes a connection that had this many frames in a
	// row refused for coming too fast: it is not a queue-proxy.
	podDropsToClose = 50
)

// PodResolver says which pod a push connection comes from. On Kubernetes
// it reads the pods informer: the source address must be a ready pod of
// an opted-in Deployment of the service. Its answer is the only trust a
// connection gets; the claimed address serves where several pods share a
// host (swell local), and is ignored where the source address is the pod.
type PodResolver interface {
	// PodAddr returns the address the service's Target lists the pod at,
	// for a connection from remote whose queue-proxy says it serves its
	// stats at claimed; false when remote is no ready pod of svc.
	PodAddr(svc service.Key, remote netip.AddrPort, claimed string) (addr string, ok bool)
}

// PodEndpointConfig configures a PodEndpoint. Pushes and Resolver are
// required.
type PodEndpointConfig struct {
	// Pushes receives every frame of an accepted connection.
	Pushes *Pushes
	// Resolver names the pod each connection comes from, or refuses it.
	Resolver PodResolver
	// OnSharp, if set, is called with a pod's service when a frame shows
	// its load rising sharply (Pushes.Push), on the connection's
	// goroutine: it must return quickly.
	OnSharp func(svc service.Key)
	// Route, if set, says whether this replica takes the pushes of a
	// service (it leads the service's bucket) or, if not, the address of
	// the one that does ("host:port"; "" while none is known). A pod sent
	// elsewhere is redirected there (307); one with nowhere to go is told
	// to retry (503). nil takes every service.
	Route func(svc service.Key) (here bool, elsewhere string)
	// MaxConnections caps open connections (default
	// DefaultPodMaxConnections); more are refused with 503.
	MaxConnections int
	// IdleTimeout closes a connection that sent no frame for this long
	// (default DefaultPodIdleTimeout).
	IdleTimeout time.Duration
	// FrameRate and FrameBurst bound the frames a connection has applied
	// (defaults DefaultPodFrameRate, DefaultPodFrameBurst); faster ones
	// are dropped, and a connection whose frames keep coming too fast is
	// closed.
	FrameRate  rate.Limit
	FrameBurst int
	// Clock times the frame rate (default the real clock); the idle
	// timeout is a socket deadline, in real time.
	Clock clock.PassiveClock
	// Logger logs connections and why they closed (default none).
	Logger *zap.Logger
	// Registerer, if set, gets the endpoint's metrics.
	Registerer prometheus.Registerer
}

// PodEndpoint is the http.Handler queue-proxies push their stats on: one
// websocket per pod, each binary frame a stats Report (any version),
// applied to Pushes as the pod's latest. A connection is trusted as the
// pod its source address is, for the service that pod serves, and as
// nothing else: the resolver refuses any other before the upgrade. A pod
// has one connection at a time; a newer one replaces the older. A broken
// frame closes only its own connection. Each connection costs one
// goroutine blocked in a read, and no timer: its idle timeout is the
// socket's read deadline.
type PodEndpoint struct {
	pushes   *Pushes
	resolver PodResolver
	route    func(service.Key) (bool, string)
	onSharp  func(service.Key)
	maxConns int
	idle     time.Duration
	frameLim rate.Limit
	burst    int
	clock    clock.PassiveClock
	log      *zap.Logger
	metrics  *podEndpointMetrics
	upgrader websocket.Upgrader
	refusals rate.Sometimes
	// applied, if set (by tests), is called after each frame applied.
	applied func(service, addr string)

	mu     sync.Mutex
	closed bool
	conns  int // upgrades in progress and open connections
	pods   map[podID]*podConn
}

// podConn is one pod's push connection.
type podConn struct {
	ws      *websocket.Conn
	key     service.Key
	id      podID
	remote  string
	limiter *rate.Limiter
	// current is false once the connection is replaced or closed: its
	// frames are no longer applied.
	current atomic.Bool
	once    sync.Once
}

// NewPodEndpoint returns a PodEndpoint, or an error naming what is
// missing.
func NewPodEndpoint(cfg PodEndpointConfig) (*PodEndpoint, error) {
	switch {
	case cfg.Pushes == nil:
		return nil, errors.New("pod endpoint: PodEndpointConfig.Pushes is required")
	case cfg.Resolver == nil:
		return nil, errors.New("pod endpoint: PodEndpointConfig.Resolver is required")
	}
	e := &PodEndpoint{
		pushes:   cfg.Pushes,
		resolver: cfg.Resolver,
		route:    cfg.Route,
		onSharp:  cfg.OnSharp,
		maxConns: cfg.MaxConnections,
		idle:     cfg.IdleTimeout,
		frameLim: cfg.FrameRate,
		burst:    cfg.FrameBurst,
		clock:    cfg.Clock,
		log:      cfg.Logger,
		refusals: rate.Sometimes{First: 5, Interval: time.Second},
		pods:     make(map[podID]*podConn),
	}
	if e.maxConns <= 0 {
		e.maxConns = DefaultPodMaxConnections
	}
	if e.idle <= 0 {
		e.idle = DefaultPodIdleTimeout
	}
	if e.frameLim <= 0 {
		e.frameLim = DefaultPodFrameRate
	}
	if e.burst <= 0 {
		e.burst = DefaultPodFrameBurst
	}
	if e.clock == nil {
		e.clock = clock.RealClock{}
	}
	if e.log == nil {
		e.log = zap.NewNop()
	}
	e.upgrader = websocket.Upgrader{
		HandshakeTimeout: DefaultWriteTimeout,
		// A frame is at most stats.MaxBinarySize; the endpoint writes only
		// control frames.
		ReadBufferSize:  512,
		WriteBufferSize: 256,
	}
	var err error
	if e.metrics, err = newPodEndpointMetrics(cfg.Registerer, e.connected); err != nil {
		return nil, err
	}
	return e, nil
}

// ServeHTTP checks the pod, upgrades the request and hands the connection
// to a goroutine of its own, returning at once: net/http's state for the
// request is then free, which is most of what a connection would cost.
func (e *PodEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	svc, err := service.Parse(q.Get(network.PodPushService))
	if err != nil {
		e.refuse(w, r, "bad-request", http.StatusBadRequest, fmt.Sprintf("pod endpoint: %s: %v", network.PodPushService, err))
		return
	}
	if e.route != nil {
		here, elsewhere := e.route(svc)
		switch {
		case !here && elsewhere != "":
			u := url.URL{Scheme: "ws", Host: elsewhere, Path: network.PodPushPath, RawQuery: r.URL.RawQuery}
			e.metrics.rejected("elsewhere")
			http.Redirect(w, r, u.String(), http.StatusTemporaryRedirect)
			return
		case !here:
			w.Header().Set("Retry-After", "1")
			e.refuse(w, r, "unrouted", http.StatusServiceUnavailable, "pod endpoint: no autoscaler leads "+svc.String()+" yet")
			return
		}
	}
	remote, _ := netip.ParseAddrPort(r.RemoteAddr) // the zero address if it does not parse: no pod's
	addr, ok := e.resolver.PodAddr(svc, remote, q.Get(network.PodPushAddr))
	if !ok {
		e.refuse(w, r, "not-a-pod", http.StatusForbidden, "pod endpoint: "+remote.Addr().String()+" is no ready pod of "+svc.String())
		return
	}
	e.mu.Lock()
	closed, full := e.closed, e.conns >= e.maxConns
	if !closed && !full {
		e.conns++
	}
	e.mu.Unlock()
	switch {
	case closed:
		e.refuse(w, r, "shutting-down", http.StatusServiceUnavailable, "pod endpoint: shutting down")
		return
	case full:
		w.Header().Set("Retry-After", "1")
		e.refuse(w, r, "too-many", http.StatusServiceUnavailable, fmt.Sprintf("pod endpoint: %d connections open, the maximum", e.maxConns))
		return
	}
	ws, err := e.upgrader.Upgrade(w, r, nil) // answers the client itself on error
	if err != nil {
		e.mu.Lock()
		e.conns--
		e.mu.Unlock()
		e.metrics.rejected("handshake")
		return
	}
	c := &podConn{ws: ws, key: svc, id: podID{service: svc.String(), addr: addr}, remote: r.RemoteAddr,
		limiter: rate.NewLimiter(e.frameLim, e.burst)}
	ws.SetReadLimit(stats.MaxBinarySize)
	if !e.register(c) {
		return
	}
	go e.read(c)
}

// refuse answers a request refused before the upgrade, counted under
// reason and logged a few times a second at most: anyone who reaches the
// port can cause them, as often as they like.
func (e *PodEndpoint) refuse(w http.ResponseWriter, r *http.Request, reason string, code int, msg string) {
	e.metrics.rejected(reason)
	e.refusals.Do(func() {
		e.log.Info("a push connection refused", zap.String("reason", reason), zap.String("remote", r.RemoteAddr))
	})
	http.Error(w, msg, code)
}

// register makes c its pod's connection, closing the one it replaces; it
// reports false, having closed c, when the endpoint is closing.
func (e *PodEndpoint) register(c *podConn) bool {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		e.closeConn(c, websocket.CloseGoingAway, "shutting down")
		return false
	}
	old := e.pods[c.id]
	e.pods[c.id] = c
	c.current.Store(true)
	e.mu.Unlock()
	if old != nil {
		e.closeConn(old, CloseReplaced, "replaced by a newer connection from "+c.remote)
	}
	return true
}

// read applies c's frames until it breaks, is replaced or goes idle.
func (e *PodEndpoint) read(c *podConn) {
	var (
		buf   []byte
		rep   stats.Report
		drops int
	)
	for {
		c.ws.SetReadDeadline(time.Now().Add(e.idle))
		var code int
		var reason string
		if buf, code, reason = readBinary(c.ws, buf, stats.MaxBinarySize); code != 0 {
			e.closeConn(c, code, reason)
			return
		}
		if !c.limiter.AllowN(e.clock.Now(), 1) {
			e.metrics.dropped.Inc()
			if drops++; drops >= podDropsToClose {
				e.closeConn(c, websocket.ClosePolicyViolation,
					fmt.Sprintf("%d frames in a row faster than %v a second", drops, float64(e.frameLim)))
				return
			}
			continue
		}
		drops = 0
		if err := rep.UnmarshalBinary(buf); err != nil {
			e.closeConn(c, websocket.CloseInvalidFramePayloadData, err.Error())
			return
		}
		if !c.current.Load() {
			return // replaced: whoever replaced it closed it
		}
		sharp, err := e.pushes.Push(c.id.service, c.id.addr, &rep)
		if err != nil {
			e.closeConn(c, websocket.CloseInvalidFramePayloadData, err.Error())
			return
		}
		e.metrics.applied.Inc()
		if sharp && e.onSharp != nil {
			e.onSharp(c.key)
		}
		if e.applied != nil {
			e.applied(c.id.service, c.id.addr)
		}
	}
}

// closeConn closes c, once: it stops applying c's frames, gives its slot
// back, counts the close, sends a close frame with code and reason (when
// the code may be sent) and closes the socket.
func (e *PodEndpoint) closeConn(c *podConn, code int, reason string) {
	c.once.Do(func() {
		e.mu.Lock()
		c.current.Store(false)
		if e.pods[c.id] == c {
			delete(e.pods, c.id)
		}
		e.conns--
		e.mu.Unlock()
		e.metrics.closed(closeReasons[code])
		sendClose(c.ws, code, reason, DefaultWriteTimeout)
		e.log.Log(closeLevel(code, zap.DebugLevel), "push connection closed", zap.String("service", c.id.service), zap.String("pod", c.id.addr),
			zap.String("remote", c.remote), zap.Int("code", code), zap.String("reason", reason))
	})
}

func (e *PodEndpoint) connected() float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return float64(len(e.pods))
}

// Pushing returns how many pods have a connection open now.
func (e *PodEndpoint) Pushing() int { return int(e.connected()) }

// Close closes every connection with 1001 (going away) and refuses new
// ones; http.Server.Shutdown does not reach hijacked connections.
func (e *PodEndpoint) Close() error {
	e.mu.Lock()
	e.closed = true
	conns := make([]*podConn, 0, len(e.pods))
	for _, c := range e.pods {
		conns = append(conns, c)
	}
	e.mu.Unlock()
	for _, c := range conns {
		e.closeConn(c, websocket.CloseGoingAway, "autoscaler shutting down")
	}
	return nil
}

// CloseWhere closes, with 1001 (going away), the connections of the pods
// of every service for which moved reports true: this replica no longer
// leads their bucket. Each pod dials again and is sent to the replica
// that does.
func (e *PodEndpoint) CloseWhere(moved func(service.Key) bool) {
	e.mu.Lock()
	var conns []*podConn
	for _, c := range e.pods {
		if moved(c.key) {
			conns = append(conns, c)
		}
	}
	e.mu.Unlock()
	for _, c := range conns {
		e.closeConn(c, websocket.CloseGoingAway, "the service is led by another autoscaler replica now")
	}
}

// podEndpointMetrics are the pod endpoint's operator metrics.
type podEndpointMetrics struct {
	rejectedBy map[string]prometheus.Counter
	// applied and dropped count frames, one each per frame read: fields,
	// not a map lookup, on the push path.
	applied, dropped prometheus.Counter
	closedBy         map[string]prometheus.Counter
}

var (
	podRejectReasons = []string{"bad-request", "elsewhere", "unrouted", "not-a-pod", "too-many", "shutting-down", "handshake"}
)

func newPodEndpointMetrics(reg prometheus.Registerer, connected func() float64) (*podEndpointMetrics, error) {
	m := &podEndpointMetrics{rejectedBy: map[string]prometheus.Counter{}, closedBy: map[string]prometheus.Counter{}}
	gauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "swell_autoscaler_pods_pushing",
		Help: "Pods with a push connection open to this replica.",
	}, connected)
	rejected := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "swell_autoscaler_push_rejected_total",
		Help: "Push connections refused before the upgrade, by reason: " + strings.Join(podRejectReasons, ", ") + ".",
	}, []string{"reason"})
	for _, r := range podRejectReasons {
		m.rejectedBy[r] = rejected.WithLabelValues(r)
	}
	frames := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "swell_autoscaler_push_frames_total",
		Help: "Pushed reports by result: applied, or dropped for coming faster than a pod may push.",
	}, []string{"result"})
	m.applied, m.dropped = frames.WithLabelValues("applied"), frames.WithLabelValues("dropped")
	closed := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "swell_autoscaler_push_disconnects_total",
		Help: "Push connections closed, by reason.",
	}, []string{"reason"})
	for _, r := range closeReasons {
		m.closedBy[r] = closed.WithLabelValues(r)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{gauge, rejected, frames, closed} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("pod endpoint: register metrics: %w", err)
			}
		}
	}
	return m, nil
}

func (m *podEndpointMetrics) rejected(reason string) { m.rejectedBy[reason].Inc() }
func (m *podEndpointMetrics) closed(reason string) {
	if c, ok := m.closedBy[reason]; ok {
		c.Inc()
	}
}
