package activator

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/proxy"
)

// Transport tuning for many pods on the cluster network.
const (
	// maxIdleConnsPerHost keeps warm connections to each queue-proxy for
	// a burst: Go's default of 2 would redial almost every request.
	maxIdleConnsPerHost = 256
	// upstreamIdleTimeout closes idle connections before a queue-proxy
	// drops them, so no request is sent on a connection being closed.
	upstreamIdleTimeout = 30 * time.Second
)

// newProxy returns the reverse proxy to pods, the chain's last stage. It
// reads the pod of each request from its exchange (exchange.go), where
// balance put it, and notes there a failure that retry can mend. HTTP/1
// requests go over HTTP/1.1 (so upgrades such as websockets work); HTTP/2
// requests over cleartext HTTP/2 with prior knowledge, so gRPC streams and
// trailers pass end to end.
func newProxy(log *zap.Logger, dialTimeout time.Duration, name string) *httputil.ReverseProxy {
	var named []string // built once: the header costs no allocation per request
	if name != "" {
		named = []string{name}
	}
	transport := proxy.NewTransport(proxy.TransportConfig{
		DialTimeout:         dialTimeout,
		KeepAlive:           30 * time.Second,
		MaxIdleConnsPerHost: maxIdleConnsPerHost,
		IdleConnTimeout:     upstreamIdleTimeout,
	})
	errLog, _ := zap.NewStdLogAt(log, zap.DebugLevel)
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			e := exchangeOf(pr.In)
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = e.pod.addr
			// pr.Out.Host keeps the client's Host: the app sees the name it
			// was called by.
			proxy.SetForwarded(pr)
			proxy.StripSwellHeaders(pr.Out.Header)
			pr.Out.Header[network.ProxyHeader] = proxyActivator
			if named != nil {
				pr.Out.Header[network.ActivatorHeader] = named
			}
		},
		Transport: transport,
		// Zero leaves flushing to ReverseProxy, which flushes at once
		// exactly the responses that stream (unknown length, gRPC,
		// text/event-stream).
		FlushInterval: 0,
		BufferPool:    &proxy.BufferPool{},
		ModifyResponse: func(res *http.Response) error {
			// Remembered for responses that bypass WriteHeader (101
			// Switching Protocols goes out on the hijacked connection).
			exchangeOf(res.Request).upstream = int32(res.StatusCode)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			e := exchangeOf(r)
			if isDialError(err) && e.retryable() {
				// Nothing reached the pod nor the client: retry drops
				// the pod and tries another.
				e.dialFailed = true
				return
			}
			if r.Context().Err() != nil {
				return // the client left: nothing useful to write
			}
			if isConnLost(err) && replayable(r, e) && !e.lostOnce {
				// The pod went away with the request sent and no answer
				// (a pod killed, a connection it had just accepted): a
				// request safe to repeat is sent once more, elsewhere,
				// as net/http does on a reused connection. Once only, so
				// that a request that kills every pod it reaches cannot
				// take them all down.
				e.dialFailed, e.lostOnce = true, true
				return
			}
			log.Debug("pod unreachable", zap.String("pod", e.pod.addr), zap.Error(err))
			proxy.Reject(w, http.StatusBadGateway, network.ReasonAppUnreachable)
		},
		ErrorLog: errLog,
	}
}

// isDialError reports whether err is a failure to connect, after which
// nothing of the request has been sent.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// isConnLost reports whether err is the connection to the pod ending
// before any answer: closed, reset, or broken.
func isConnLost(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// replayable reports whether a request may be sent twice: an idempotent,
// safe method without a body.
func replayable(r *http.Request, e *exchange) bool {
	if e.hasBody {
		return false
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return true
	}
	return false
}

// Pre-built header values, so rejecting under overload does not allocate.
var (
	probeQueue       = []string{network.ProbeQueue}
	proxyActivator   = []string{network.ProxyActivator}
	unknownService   = []string{network.ReasonUnknownService}
	callerNotAllowed = []string{network.ReasonCallerNotAllowed}
	queueFull        = []string{network.ReasonQueueFull}
)
