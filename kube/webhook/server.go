package webhook

import (
	"crypto/tls"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
	"k8s.io/utils/clock"

	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/proxy"
)

// Bounds of the webhooks' server. The webhook port is reachable by any pod
// of the cluster, and the replica that serves it may also lead the
// autoscaling loop, so nothing a caller sends may hold the replica's memory
// or goroutines for long:
//
//   - at most MaxInFlight reviews are read and judged at once, each at most
//     DefaultMaxBody (3 MiB, the API server's own limit); a review that
//     finds none free waits up to QueueWait for one, holding only its
//     connection, then gets 503;
//   - a connection must send its headers within ReadHeaderTimeout and its
//     whole request within ReadTimeout (the API server sends a review at
//     once), and the answer must be written within WriteTimeout;
//   - an idle keep-alive connection is closed after IdleTimeout;
//   - at most MaxConns connections are open at once (more wait in the
//     listener's backlog), and an HTTP/2 connection carries at most
//     MaxStreams requests at once.
//
// The API server calls a webhook with a timeout of its own (10 s by
// default), so every bound is under it.
const (
	MaxInFlight       = 8
	QueueWait         = 5 * time.Second
	ReadHeaderTimeout = 5 * time.Second
	ReadTimeout       = 10 * time.Second
	WriteTimeout      = 15 * time.Second
	IdleTimeout       = 60 * time.Second
	MaxHeaderBytes    = 64 << 10
	MaxConns          = 256
	MaxStreams        = 16
)

// Server returns the webhooks' HTTPS server for h, with the bounds above,
// and the listener to serve it on: ln, limited to MaxConns connections.
// Serve it with srv.ServeTLS(limited, "", "").
func Server(h http.Handler, ln net.Listener, getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error)) (*http.Server, net.Listener) {
	srv := &http.Server{
		Handler:           limit(h, MaxInFlight, QueueWait, clock.RealClock{}),
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: getCert},
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: MaxStreams},
	}
	return srv, netutil.LimitListener(ln, MaxConns)
}

// limit lets at most n requests past at once; one that finds none free
// waits up to wait for a slot, then gets 503 with a Retry-After. Health
// checks are never held.
func limit(h http.Handler, n int, wait time.Duration, clk clock.Clock) http.Handler {
	slots := make(chan struct{}, n)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			h.ServeHTTP(w, r)
			return
		}
		select {
		case slots <- struct{}{}:
		default:
			t := clk.NewTimer(wait)
			select {
			case slots <- struct{}{}:
				t.Stop()
			case <-t.C():
				w.Header().Set("Retry-After", "1")
				proxy.Reject(w, http.StatusServiceUnavailable, network.ReasonBusy)
				return
			case <-r.Context().Done():
				t.Stop()
				return
			}
		}
		defer func() { <-slots }()
		h.ServeHTTP(w, r)
	})
}
