package demo

import (
	"cmp"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/gorilla/websocket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"k8s.io/utils/clock"
)

// Reserved paths; every other path greets, shaped by the knobs.
const (
	statsPath      = "/stats"
	statsResetPath = "/stats/reset"
	healthzPath    = "/healthz"
	websocketPath  = "/ws"
	ssePath        = "/sse"
)

// textPlain is shared by every response rather than built per request. Header
// values are only ever read or replaced, never modified in place.
var textPlain = []string{"text/plain; charset=utf-8"}

// ok is the body of /healthz.
var ok = []byte("ok\n")

// options shape a server.
type options struct {
	// Replica names this process in the greeting so tests can tell replicas
	// apart; empty leaves it out.
	Replica string
	// Clock times the background jobs; nil is the real clock.
	Clock clock.Clock
}

// server is the app's whole http.Handler: the greeting with its knobs, the
// reserved paths and gRPC.
type server struct {
	hello       []byte
	helloLength []string // Content-Length of hello, prebuilt for the plain path

	counter inflight
	jobs    *jobs

	grpc     *grpc.Server
	health   *health.Server
	upgrader websocket.Upgrader

	// stopping is closed when the app starts draining; websocket echoes
	// watch it, as the HTTP server's shutdown does not see hijacked
	// connections.
	stopping chan struct{}
	stopOnce sync.Once
}

// newServer returns the app's handler. Its gRPC health service reports
// NOT_SERVING until setReady is called.
func newServer(o options) *server {
	greeting := "Hello from Swell!\n"
	if o.Replica != "" {
		greeting = "Hello from Swell! (replica " + o.Replica + ")\n"
	}
	s := &server{
		hello:       []byte(greeting),
		helloLength: []string{strconv.Itoa(len(greeting))},
		grpc:        grpc.NewServer(),
		health:      health.NewServer(),
		upgrader: websocket.Upgrader{
			// A test app: clients are CLIs, load generators and pages served
			// from anywhere, so every origin is welcome.
			CheckOrigin: func(*http.Request) bool { return true },
		},
		stopping: make(chan struct{}),
		jobs:     newJobs(cmp.Or[clock.Clock](o.Clock, clock.RealClock{})),
	}
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	return s
}

// setReady makes the gRPC health service report SERVING.
func (s *server) setReady() {
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
}

// drain turns gRPC health to NOT_SERVING for good, ends gRPC streams and asks
// websocket peers to go away. It is safe to call more than once.
func (s *server) drain() {
	s.stopOnce.Do(func() {
		s.health.Shutdown()
		close(s.stopping)
		s.grpc.Stop()
	})
}

// ServeHTTP routes the request. Everything except /stats and /healthz counts
// as in flight, gRPC and websockets included, for as long as it lasts.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case statsPath, statsResetPath:
		s.serveStats(w, r)
		return
	case healthzPath:
		h := w.Header()
		h["Content-Type"] = textPlain
		_, _ = w.Write(ok)
		return
	case metricsPath:
		s.serveMetrics(w)
		return
	}

	s.counter.begin()
	defer s.counter.end()
	switch {
	case r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc"):
		s.grpc.ServeHTTP(w, r)
	case r.URL.Path == websocketPath:
		s.serveWebsocket(w, r)
	case r.URL.Path == ssePath:
		s.serveKnobs(w, r, true)
	case r.URL.Path == jobsPath:
		s.serveJobs(w, r)
	case r.URL.RawQuery == "":
		// The benchmark baseline: kept free of allocation.
		s.serveHello(w)
	default:
		s.serveKnobs(w, r, false)
	}
}

// serveHello writes the greeting with headers set up front, so the server
// neither sniffs the content type nor computes the length.
func (s *server) serveHello(w http.ResponseWriter) {
	h := w.Header()
	h["Content-Type"] = textPlain
	h["Content-Length"] = s.helloLength
	_, _ = w.Write(s.hello)
}

// statsSnapshot is the JSON body of /stats.
type statsSnapshot struct {
	InFlight    int64 `json:"inflight"`
	MaxInFlight int64 `json:"max_inflight"`
	Requests    int64 `json:"requests"`
}

// serveStats answers /stats with the counters and resets them on DELETE
// /stats or POST /stats/reset, answering with the values before the reset.
func (s *server) serveStats(w http.ResponseWriter, r *http.Request) {
	var snap statsSnapshot
	switch {
	case r.URL.Path == statsPath && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		snap = s.counter.snapshot()
	case r.URL.Path == statsPath && r.Method == http.MethodDelete,
		r.URL.Path == statsResetPath && r.Method == http.MethodPost:
		snap = s.counter.reset()
	default:
		allow := "GET, HEAD, DELETE"
		if r.URL.Path == statsResetPath {
			allow = http.MethodPost
		}
		w.Header().Set("Allow", allow)
		http.Error(w, r.Method+" "+r.URL.Path+": accepted methods are "+allow, http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(snap)
}
