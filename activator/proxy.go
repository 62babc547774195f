package activator

import (
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/swell-run/swell/pkg/network"
)

// Transport tuning for many pods on the cluster network.
const (
	// maxIdleConnsPerHost keeps warm connections to each queue-proxy for
	// a burst: Go's default of 2 would redial almost every request.
	maxIdleConnsPerHost = 256
	// upstreamIdleTimeout closes idle connections before a queue-proxy
	// drops them, so no request is sent on a connection being closed.
	upstreamIdleTimeout = 30 * time.Second
	proxyBufferSize     = 32 << 10
)

// newProxy returns the reverse proxy to pods. The pod of each request is
// read from its exchange (handler.go). HTTP/1 requests go over HTTP/1.1 (so
// upgrades such as websockets work); HTTP/2 requests over cleartext HTTP/2
// with prior knowledge, so gRPC streams and trailers pass end to end.
func newProxy(log *zap.Logger, dialTimeout time.Duration) *httputil.ReverseProxy {
	dialer := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	h1 := &http.Transport{
		Proxy:               nil, // never a proxy from the environment
		DialContext:         dialer.DialContext,
		MaxIdleConnsPerHost: maxIdleConnsPerHost,
		IdleConnTimeout:     upstreamIdleTimeout,
		DisableCompression:  true, // the app's bytes go out as they came
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
	errLog, _ := zap.NewStdLogAt(log, zap.DebugLevel)
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			e := exchangeOf(pr.In)
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = e.pod.addr
			// pr.Out.Host keeps the client's Host: the app sees the name it
			// was called by.
			setForwarded(pr)
			pr.Out.Header[network.ProxyHeader] = proxyActivator
		},
		Transport: byProtocol{h1: h1, h2: h2},
		// Zero leaves flushing to ReverseProxy, which flushes at once
		// exactly the responses that stream (unknown length, gRPC,
		// text/event-stream).
		FlushInterval: 0,
		BufferPool:    &bufferPool{},
		ModifyResponse: func(res *http.Response) error {
			// Remembered for responses that bypass WriteHeader (101
			// Switching Protocols goes out on the hijacked connection).
			exchangeOf(res.Request).upstream = res.StatusCode
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			e := exchangeOf(r)
			if isDialError(err) && e.retryable() {
				// Nothing reached the pod nor the client: the handler
				// drops the pod and retries elsewhere.
				e.dialFailed = true
				return
			}
			if r.Context().Err() != nil {
				return // the client left: nothing useful to write
			}
			log.Debug("pod unreachable", zap.String("pod", e.pod.addr), zap.Error(err))
			reject(w, http.StatusBadGateway, network.ReasonAppUnreachable)
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

// setForwarded sets X-Forwarded-For to include this hop's client and keeps
// X-Forwarded-Host, X-Forwarded-Proto and Forwarded from a proxy in front
// (the ingress that terminated TLS) rather than describing this hop.
func setForwarded(pr *httputil.ProxyRequest) {
	in, out := pr.In.Header, pr.Out.Header
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

// byProtocol sends HTTP/2 requests over h2 and the rest over h1, so the pod
// sees the protocol the client chose.
type byProtocol struct{ h1, h2 http.RoundTripper }

func (t byProtocol) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.ProtoMajor == 2 {
		return t.h2.RoundTrip(r)
	}
	return t.h1.RoundTrip(r)
}

// bufferPool recycles ReverseProxy's copy buffers without allocating.
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

// Pre-built header values, so rejecting under overload does not allocate.
var (
	plainText      = []string{"text/plain; charset=utf-8"}
	noSniff        = []string{"nosniff"}
	probeQueue     = []string{network.ProbeQueue}
	proxyActivator = []string{network.ProxyActivator}
	unknownService = []string{network.ReasonUnknownService}
	reasonVals     = map[string][]string{}
	reasonBody     = map[string][]byte{}
)

func init() {
	for _, r := range []string{network.ReasonQueueFull, network.ReasonRequestTimeout, network.ReasonAppUnreachable} {
		reasonVals[r] = []string{r}
		reasonBody[r] = []byte(r + "\n")
	}
}

// reject answers with a response of the activator's own: the status, the
// reason in network.ReasonHeader and as a plain-text body.
func reject(w http.ResponseWriter, code int, reason string) {
	h := w.Header()
	h["Content-Type"] = plainText
	h["X-Content-Type-Options"] = noSniff
	h[network.ReasonHeader] = reasonVals[reason]
	w.WriteHeader(code)
	w.Write(reasonBody[reason])
}
