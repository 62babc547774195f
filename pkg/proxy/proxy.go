// Package proxy holds the reverse-proxy plumbing the queue-proxy and the
// activator share: transports that keep the client's HTTP version (HTTP/1.1
// or cleartext HTTP/2), pooled copy buffers, X-Forwarded-* handling and the
// plain-text answers Swell writes itself.
package proxy

import (
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"time"

	"github.com/swell-run/swell/pkg/network"
)

// Chain assembles a request path: the first stage wraps the second, and so
// on, and the last stage wraps last. A nil stage (one a configuration turns
// off) is left out. The queue-proxy's and the activator's paths are built
// with it, so that each reads top to bottom in the order a request meets
// its stages.
func Chain(last http.Handler, stages ...func(http.Handler) http.Handler) http.Handler {
	h := last
	for i := len(stages) - 1; i >= 0; i-- {
		if stages[i] != nil {
			h = stages[i](h)
		}
	}
	return h
}

// StripSwellHeaders removes every header of Swell's own
// (network.HeaderPrefix) from h: they speak to the data plane, and any
// client can send them, so none may pass on to an app as Swell's word, and
// none from a client may reach a pod as if the activator had set it (the
// activator sets its own after). Names are compared without regard to
// case, so no spelling slips through; it allocates nothing.
func StripSwellHeaders(h http.Header) {
	for k := range h {
		if len(k) >= len(network.HeaderPrefix) && strings.EqualFold(k[:len(network.HeaderPrefix)], network.HeaderPrefix) {
			delete(h, k)
		}
	}
}

// TransportConfig tunes NewTransport for its upstreams.
type TransportConfig struct {
	// DialTimeout bounds a connection attempt.
	DialTimeout time.Duration
	// KeepAlive is the TCP keep-alive period; negative disables probes
	// (pointless on loopback).
	KeepAlive time.Duration
	// MaxIdleConnsPerHost keeps warm connections for bursts: Go's default
	// of 2 would redial almost every request under concurrency.
	MaxIdleConnsPerHost int
	// IdleConnTimeout closes idle connections before the upstream does, so
	// no request is sent on a connection the upstream is closing.
	IdleConnTimeout time.Duration
}

// NewTransport returns a RoundTripper that sends HTTP/2 requests over
// cleartext HTTP/2 with prior knowledge (so gRPC streams and trailers pass
// end to end) and the rest over HTTP/1.1 (so upgrades such as websockets
// work): the upstream sees the protocol the client chose. It never uses a
// proxy from the environment and never decompresses: the upstream's bytes
// go out as they came.
func NewTransport(o TransportConfig) http.RoundTripper {
	dialer := &net.Dialer{Timeout: o.DialTimeout, KeepAlive: o.KeepAlive}
	h1 := &http.Transport{
		Proxy:               nil,
		DialContext:         dialer.DialContext,
		MaxIdleConnsPerHost: o.MaxIdleConnsPerHost,
		IdleConnTimeout:     o.IdleConnTimeout,
		DisableCompression:  true,
	}
	var h2Protocols http.Protocols
	h2Protocols.SetUnencryptedHTTP2(true)
	h2 := &http.Transport{
		Proxy:              nil,
		DialContext:        dialer.DialContext,
		Protocols:          &h2Protocols,
		IdleConnTimeout:    o.IdleConnTimeout,
		DisableCompression: true,
	}
	return byProtocol{h1: h1, h2: h2}
}

type byProtocol struct{ h1, h2 http.RoundTripper }

func (t byProtocol) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.ProtoMajor == 2 {
		return t.h2.RoundTrip(r)
	}
	return t.h1.RoundTrip(r)
}

// CloseIdleConnections closes the idle connections of both protocols, as
// http.Client.CloseIdleConnections expects of a transport: a server that
// stops closes its way to its upstreams too.
func (t byProtocol) CloseIdleConnections() {
	for _, rt := range []http.RoundTripper{t.h1, t.h2} {
		if c, ok := rt.(interface{ CloseIdleConnections() }); ok {
			c.CloseIdleConnections()
		}
	}
}

// SetForwarded sets the X-Forwarded-* headers of pr.Out. X-Forwarded-For
// gains this hop's client; X-Forwarded-Host, X-Forwarded-Proto and
// Forwarded keep the values a proxy in front set (the ingress that
// terminated TLS, the activator) rather than describing this cleartext hop.
func SetForwarded(pr *httputil.ProxyRequest) {
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

// BufferSize is the size of the buffers that copy response bodies.
const BufferSize = 32 << 10

// BufferPool recycles ReverseProxy's copy buffers. It stores array pointers
// so that neither Get nor Put allocates.
type BufferPool struct{ pool sync.Pool }

// Get implements httputil.BufferPool.
func (p *BufferPool) Get() []byte {
	if b, ok := p.pool.Get().(*[BufferSize]byte); ok {
		return b[:]
	}
	return new([BufferSize]byte)[:]
}

// Put implements httputil.BufferPool.
func (p *BufferPool) Put(b []byte) {
	if cap(b) >= BufferSize {
		p.pool.Put((*[BufferSize]byte)(b[:BufferSize]))
	}
}

// Pre-built header values for the answers Swell writes itself, so that a
// component rejecting requests under overload does not allocate for each.
var (
	PlainText  = []string{"text/plain; charset=utf-8"}
	NoSniff    = []string{"nosniff"}
	reasonVals = map[string][]string{}
	reasonBody = map[string][]byte{}
)

func init() {
	for _, r := range []string{
		network.ReasonQueueFull, network.ReasonRequestTimeout, network.ReasonResponseTimeout,
		network.ReasonIdleTimeout, network.ReasonAppUnreachable, network.ReasonNotReady,
		network.ReasonDraining, network.ReasonUnknownService,
	} {
		reasonVals[r] = []string{r}
		reasonBody[r] = []byte(r + "\n")
	}
}

// Reject answers with a response of Swell's own: the status, the reason in
// network.ReasonHeader and as a plain-text body.
func Reject(w http.ResponseWriter, code int, reason string) {
	h := w.Header()
	h["Content-Type"] = PlainText
	h["X-Content-Type-Options"] = NoSniff
	vals, ok := reasonVals[reason]
	if !ok {
		vals = []string{reason}
	}
	h[network.ReasonHeader] = vals
	w.WriteHeader(code)
	if body, ok := reasonBody[reason]; ok {
		w.Write(body)
	} else {
		w.Write([]byte(reason + "\n"))
	}
}
