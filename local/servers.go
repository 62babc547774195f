package local

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// ConnTimeouts bound a port's connections while no request is under way on
// them. Neither bounds a request once its headers are read: a long upload,
// a request the activator holds through a cold start and a streamed
// response take as long as the service's request timeout lets them, as on
// the activator and the queue-proxy.
type ConnTimeouts struct {
	// ReadHeader bounds how long a client may take to send a request's
	// headers — from a new connection's start, or from the first byte of a
	// request on a kept-alive one — so that connections that send nothing,
	// or dribble their headers, are closed rather than piling up, each
	// holding a goroutine and a socket.
	ReadHeader time.Duration
	// Idle bounds how long a connection may wait for its next request
	// (HTTP/1.1), or with no stream open for its next stream (h2c), so
	// that an abandoned keep-alive connection is not held forever.
	Idle time.Duration
}

var (
	// frontTimeouts are the activator's serving port's, whose part the
	// front door plays: its clients (curl, load generators, browsers, gRPC
	// clients) send a request's headers at once, and 10 minutes of idle
	// outlast their connection pools' own idle timeouts (Go's 90 s,
	// nginx's 60 s), so that they, not the front door, close an idle
	// connection: one a server closes just as its client reuses it fails
	// the request sent on it.
	frontTimeouts = ConnTimeouts{ReadHeader: 10 * time.Second, Idle: 10 * time.Minute}
	// adminTimeouts are the activator's metrics port's: the admin port's
	// callers (the dashboard, polling every second; swell status;
	// Prometheus, which keeps its connection between scrapes) send their
	// headers at once, and 2 minutes outlast a 1-minute scrape interval.
	// The activator's websocket is bound by neither once upgraded.
	adminTimeouts = ConnTimeouts{ReadHeader: 5 * time.Second, Idle: 2 * time.Minute}
)

// orDefault fills t's zero fields from def.
func (t ConnTimeouts) orDefault(def ConnTimeouts) ConnTimeouts {
	return ConnTimeouts{ReadHeader: cmp.Or(t.ReadHeader, def.ReadHeader), Idle: cmp.Or(t.Idle, def.Idle)}
}

// check reports every negative field of t, named as Config's field name.
func (t ConnTimeouts) check(name string, def ConnTimeouts) error {
	var errs []error
	if t.ReadHeader < 0 {
		errs = append(errs, fmt.Errorf("%s.ReadHeader %v: accepted is a positive duration, or 0 for %v", name, t.ReadHeader, def.ReadHeader))
	}
	if t.Idle < 0 {
		errs = append(errs, fmt.Errorf("%s.Idle %v: accepted is a positive duration, or 0 for %v", name, t.Idle, def.Idle))
	}
	return errors.Join(errs...)
}

// newServer serves h within t. It sets no ReadTimeout or WriteTimeout:
// they would cut a long upload or a streamed response. MaxHeaderBytes
// stays net/http's 1 MB, as on the activator and the queue-proxy.
func newServer(h http.Handler, t ConnTimeouts) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: t.ReadHeader, IdleTimeout: t.Idle}
}

// newFrontServer serves the front door: HTTP/1.1, and cleartext HTTP/2
// with prior knowledge too, so that gRPC clients reach their service as
// through the activator. That HTTP/2 is net/http's own, whose server takes
// its idle timeout from IdleTimeout: t bounds both protocols.
func newFrontServer(h http.Handler, t ConnTimeouts) *http.Server {
	srv := newServer(h, t)
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	return srv
}
