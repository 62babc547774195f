package queueproxy

import (
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/proxy"
)

// Transport tuning for a single upstream on loopback.
const (
	// maxIdleConnsPerHost keeps enough warm connections for a burst at the
	// app: Go's default of 2 would close and redial almost every
	// connection under concurrency.
	maxIdleConnsPerHost = 1000
	// upstreamIdleTimeout closes idle app connections before the app
	// does: many app servers drop idle keep-alive connections after a few
	// seconds (Node.js and uvicorn after 5s), and a request sent on a
	// connection the app is closing fails with no way to retry a POST.
	// Redialing loopback costs tens of microseconds.
	upstreamIdleTimeout = 4 * time.Second
)

// newProxy returns the reverse proxy to the app at 127.0.0.1:userPort.
// HTTP/1 requests go over HTTP/1.1 (so upgrades such as websockets work);
// HTTP/2 requests go over cleartext HTTP/2 with prior knowledge, so gRPC
// streams and trailers pass end to end.
func newProxy(userPort int, log *zap.Logger) *httputil.ReverseProxy {
	target := net.JoinHostPort("127.0.0.1", strconv.Itoa(userPort))
	transport := proxy.NewTransport(proxy.TransportConfig{
		DialTimeout: 5 * time.Second,
		// Keep-alive probes are pointless on loopback.
		KeepAlive:           -1,
		MaxIdleConnsPerHost: maxIdleConnsPerHost,
		IdleConnTimeout:     upstreamIdleTimeout,
	})

	// ReverseProxy logs upstream read errors, which a cancelled request
	// causes routinely: not worth more than debug.
	errLog, _ := zap.NewStdLogAt(log, zap.DebugLevel)
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = target
			// pr.Out.Host keeps the client's Host: the app sees the name it
			// was called by, as it would without the sidecar.
			proxy.SetForwarded(pr)
			proxy.StripSwellHeaders(pr.Out.Header)
		},
		Transport: transport,
		// Zero leaves flushing to ReverseProxy's own rules, which flush
		// every write at once for exactly the responses that stream:
		// unknown length (chunked, HTTP/2 without Content-Length, gRPC)
		// and text/event-stream. A negative value would also flush
		// fixed-length responses write by write, costing a timer, a
		// goroutine and a separate packet for the headers on every request.
		FlushInterval: 0,
		BufferPool:    &proxy.BufferPool{},
		ModifyResponse: func(res *http.Response) error {
			// The reason header marks responses the data plane generated
			// (queue full, timeouts); an app must not be able to fake one.
			delete(res.Header, network.ReasonHeader)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				// The client left, or a timeout fired and the timeout
				// handler answers: nothing useful to write.
				return
			}
			log.Debug("app unreachable", zap.String("path", r.URL.Path), zap.Error(err))
			proxy.Reject(w, http.StatusBadGateway, network.ReasonAppUnreachable)
		},
		ErrorLog: errLog,
	}
}
