package main

import (
	"io"
	"net/http"
	"time"

	"github.com/swell-run/swell/activator"
	"github.com/swell-run/swell/pkg/drain"
	"github.com/swell-run/swell/pkg/network"
)

// The bounds of the activator's servers. Each bounds the time a client
// may take to send its headers, so that connections that send nothing
// cannot pile up, and how long a connection may idle between requests, so
// that an abandoned keep-alive connection is not held forever.
const (
	// Clients of the serving port — pods through their Service, ingress
	// controllers — send their headers at once; 10 s is ample on a loaded
	// node.
	servingReadHeaderTimeout = 10 * time.Second
	// The activator stands in for a Service's pods, so its clients'
	// connection pools treat it as they treat the queue-proxies: the same
	// 10 minutes, longer than those pools' own idle timeouts (Go's 90 s,
	// nginx's 60 s), so that they, not the activator, close an idle
	// connection. A connection a server closes just as its client reuses
	// it fails the request sent on it.
	servingIdleTimeout = 10 * time.Minute
	// The admin port's callers are the kubelet's probes, which open a
	// connection each, and drain waiters, which send one request: nothing
	// there needs to idle long.
	adminReadHeaderTimeout = 5 * time.Second
	adminIdleTimeout       = 30 * time.Second
	// Prometheus keeps its connection from one scrape to the next: 2
	// minutes outlast a 1-minute scrape interval, the longest usual.
	metricsReadHeaderTimeout = 5 * time.Second
	metricsIdleTimeout       = 2 * time.Minute
)

// servers are the activator's three servers.
type servers struct {
	serving, admin, metrics *http.Server
}

func newServers(serving, admin, metrics http.Handler) servers {
	s := servers{
		serving: &http.Server{Handler: serving, ReadHeaderTimeout: servingReadHeaderTimeout, IdleTimeout: servingIdleTimeout},
		admin:   &http.Server{Handler: admin, ReadHeaderTimeout: adminReadHeaderTimeout, IdleTimeout: adminIdleTimeout},
		metrics: &http.Server{Handler: metrics, ReadHeaderTimeout: metricsReadHeaderTimeout, IdleTimeout: metricsIdleTimeout},
	}
	// HTTP/2 without TLS (prior knowledge) too, so gRPC clients reach
	// their service through the activator as they do through a pod.
	s.serving.Protocols = new(http.Protocols)
	s.serving.Protocols.SetHTTP1(true)
	s.serving.Protocols.SetUnencryptedHTTP2(true)
	return s
}

// all lists the servers in the order of their ports: serving, admin,
// metrics.
func (s servers) all() []*http.Server { return []*http.Server{s.serving, s.admin, s.metrics} }

// adminHandler serves liveness, readiness and drain. Readiness waits for
// the activator's first sync of the source (every listed service known to
// it; in Kubernetes mode it starts once the caches synced), so a new
// activator is not sent traffic it would 404.
func adminHandler(d *drain.Drainer, act *activator.Activator) http.Handler {
	ready := func() bool {
		if d.Draining() {
			return false
		}
		select {
		case <-act.Synced():
			return true
		default:
			return false
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc(healthzPath, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc(network.ReadyPath, func(w http.ResponseWriter, r *http.Request) {
		if !ready() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ready\n")
	})
	mux.Handle(network.DrainPath, newDrainEndpoint(d))
	return mux
}

// maxDrainWaiters bounds the GETs of network.DrainPath that wait for the
// drain at once: each holds a connection until the drain ends, and any pod
// of the cluster may call.
const maxDrainWaiters = 8

// drainEndpoint serves network.DrainPath. A drain ends the process, and
// every pod of the cluster reaches the admin port, so no call from the
// network starts one: a drain starts on SIGTERM, or from loopback — a
// command run in the activator's own pod (an exec hook, kubectl exec or
// port-forward).
//
//   - POST from loopback starts the drain and answers 202 at once.
//   - GET from loopback starts it and answers 200 once it has ended.
//   - GET from elsewhere only waits for a drain already under way, and
//     answers 200 once it has ended (a drain ends at DRAIN_TIMEOUT at the
//     latest); 409 when none is, 429 when maxDrainWaiters already wait.
//   - POST from elsewhere: 403.
type drainEndpoint struct {
	d *drain.Drainer
	// waiters holds a token per waiting GET.
	waiters chan struct{}
}

func newDrainEndpoint(d *drain.Drainer) *drainEndpoint {
	return &drainEndpoint{d: d, waiters: make(chan struct{}, maxDrainWaiters)}
}

func (h *drainEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	local := network.IsFromLoopback(r)
	switch r.Method {
	case http.MethodPost:
		if !local {
			http.Error(w, "a drain starts on SIGTERM, or by a POST from loopback (inside the activator's pod); "+
				"this caller is not on loopback. GET "+network.DrainPath+" waits for a drain under way.", http.StatusForbidden)
			return
		}
		h.d.Start()
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, "draining\n")
	case http.MethodGet:
		if local {
			h.d.Start()
		} else if !h.d.Draining() {
			http.Error(w, "no drain is under way: a drain starts on SIGTERM, or from loopback (inside the activator's pod); "+
				"GET "+network.DrainPath+" from elsewhere only waits for one.", http.StatusConflict)
			return
		}
		select {
		case h.waiters <- struct{}{}:
			defer func() { <-h.waiters }()
		default:
			http.Error(w, "too many callers already wait for the drain; try again later", http.StatusTooManyRequests)
			return
		}
		select {
		case <-h.d.Done():
			io.WriteString(w, "drained\n")
		case <-r.Context().Done():
		}
	default:
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "method not allowed: POST (from loopback) starts a drain, GET waits for it", http.StatusMethodNotAllowed)
	}
}

// waiting returns how many GETs wait for the drain.
func (h *drainEndpoint) waiting() int { return len(h.waiters) }
