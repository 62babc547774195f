package queueproxy

import (
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/swell-run/swell/pkg/network"
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
	// proxyBufferSize is the size of the buffers that copy response bodies.
	proxyBufferSize = 32 << 10
)

// newProxy returns the reverse proxy to the app at 127.0.0.1:userPort.
// HTTP/1 requests go over HTTP/1.1 (so upgrades such as websockets work);
// HTTP/2 requests go over cleartext HTTP/2 with prior knowledge, so gRPC
// streams and trailers pass end to end.
func newProxy(userPort int, log *zap.Logger) *httputil.ReverseProxy {
	target := net.JoinHostPort("127.0.0.1", strconv.Itoa(userPort))
	// Keep-alive probes are pointless on loopback.
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: -1}

	h1 := &http.Transport{
		Proxy:               nil, // never a proxy from the environment
		DialContext:         dialer.DialContext,
		MaxIdleConnsPerHost: maxIdleConnsPerHost,
		IdleConnTimeout:     upstreamIdleTimeout,
		// Pass the client's Accept-Encoding through and never decompress:
		// the app's bytes go out as they came.
		DisableCompression: true,
	}
	var h2Protocols http.Protocols
	h2Protocols.SetUnencryptedHTTP2(true)
	h2 := &http.Transport{
		Proxy:              nil,
		DialContext:        dialer.DialContext,
		Protocols:          &h2Protocols,
		IdleConnTimeout:    upstreamIdleTimeout,
		DisableCompression: true,
	}

	// ReverseProxy logs upstream read errors, which a cancelled request
	// causes routinely: not worth more than debug.
	errLog, _ := zap.NewStdLogAt(log, zap.DebugLevel)
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = target
			// pr.Out.Host keeps the client's Host: the app sees the name it
			// was called by, as it would without the sidecar.
			setForwarded(pr)
		},
		Transport: byProtocol{h1: h1, h2: h2},
		// Zero leaves flushing to ReverseProxy's own rules, which flush
		// every write at once for exactly the responses that stream:
		// unknown length (chunked, HTTP/2 without Content-Length, gRPC)
		// and text/event-stream. A negative value would also flush
		// fixed-length responses write by write, costing a timer, a
		// goroutine and a separate packet for the headers on every request.
		FlushInterval: 0,
		BufferPool:    &bufferPool{},
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
			reject(w, http.StatusBadGateway, network.ReasonAppUnreachable)
		},
		ErrorLog: errLog,
	}
}

// setForwarded sets the X-Forwarded-* headers. X-Forwarded-For gains this
// hop's client; X-Forwarded-Host, X-Forwarded-Proto and Forwarded describe
// the original request, so values set by a proxy in front (the ingress that
// terminated TLS, the activator) are kept rather than replaced by this
// cleartext hop's.
func setForwarded(pr *httputil.ProxyRequest) {
	in, out := pr.In.Header, pr.Out.Header
	// Rewrite stripped the inbound values; SetXForwarded appends to these.
	if v := in["X-Forwarded-For"]; len(v) > 0 {
		out["X-Forwarded-For"] = v
	}
	pr.SetXForwarded()
	for _, k := range [...]string{"X-Forwarded-Host", "X-Forwarded-Proto", "Forwarded"} {
		if v := in[k]; len(v) > 0 {
			out[k] = v
		}
	}
}

// byProtocol sends HTTP/2 requests over h2 and the rest over h1, so the app
// sees the protocol the client chose.
type byProtocol struct{ h1, h2 http.RoundTripper }

func (t byProtocol) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.ProtoMajor == 2 {
		return t.h2.RoundTrip(r)
	}
	return t.h1.RoundTrip(r)
}

// bufferPool recycles ReverseProxy's copy buffers. It stores array
// pointers so that neither Get nor Put allocates.
type bufferPool struct{ pool sync.Pool }

func (p *bufferPool) Get() []byte {
	if b, ok := p.pool.Get().(*[proxyBufferSize]byte); ok {
		return b[:]
	}
	return new([proxyBufferSize]byte)[:]
}

func (p *bufferPool) Put(b []byte) {
	if cap(b) >= proxyBufferSize {
		p.pool.Put((*[proxyBufferSize]byte)(b[:proxyBufferSize]))
	}
}

// Pre-built header values for the responses the queue-proxy writes itself,
// so an overloaded pod rejecting requests does not allocate for each.
var (
	plainText  = []string{"text/plain; charset=utf-8"}
	noSniff    = []string{"nosniff"}
	reasonVals = map[string][]string{}
	reasonBody = map[string][]byte{}
)

func init() {
	for _, r := range []string{
		network.ReasonQueueFull, network.ReasonRequestTimeout, network.ReasonResponseTimeout,
		network.ReasonIdleTimeout, network.ReasonAppUnreachable, network.ReasonNotReady,
		network.ReasonDraining,
	} {
		reasonVals[r] = []string{r}
		reasonBody[r] = []byte(r + "\n")
	}
}

// reject answers with a response of the queue-proxy's own: the given
// status, the reason in network.ReasonHeader and as a plain-text body.
func reject(w http.ResponseWriter, code int, reason string) {
	h := w.Header()
	h["Content-Type"] = plainText
	h["X-Content-Type-Options"] = noSniff
	h[network.ReasonHeader] = reasonVals[reason]
	w.WriteHeader(code)
	w.Write(reasonBody[reason])
}
