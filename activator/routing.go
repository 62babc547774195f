package activator

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/proxy"
	"github.com/swell-run/swell/pkg/service"
)

// DefaultClusterDomain is the cluster DNS suffix used when Config leaves it
// empty.
const DefaultClusterDomain = "cluster.local"

// router finds the request's service and gives the request its exchange,
// which every stage below reads; a request for no known service is
// answered 404 here.
type router struct {
	next  http.Handler
	table *atomic.Pointer[routeTable]
}

func (h *router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t, err := h.table.Load().lookup(r)
	if t == nil {
		notFound(w, r, err)
		return
	}
	e, out := newExchange(w, r, t)
	defer e.finish()
	h.next.ServeHTTP(e, out)
}

// routeTable maps normalised host names and service keys to services. It is
// immutable once published: the activator builds a new one on every source
// change and swaps it in atomically, so lookups take no lock.
type routeTable struct {
	byHost map[string]*target
	byKey  map[service.Key]*target
}

func newRouteTable() *routeTable {
	return &routeTable{byHost: map[string]*target{}, byKey: map[service.Key]*target{}}
}

// clusterLocalNames returns the names a service is reachable by inside the
// cluster: <name>.<ns>, <name>.<ns>.svc and <name>.<ns>.svc.<domain>.
func clusterLocalNames(key service.Key, domain string) []string {
	short := key.Name + "." + key.Namespace
	return []string{short, short + ".svc", short + ".svc." + domain}
}

// lookup finds the service for r: by network.ServiceHeader when present
// (an explicit choice is never second-guessed by Host), else by Host. It
// returns nil if there is none, with an error if the header is not a
// service key. It allocates nothing unless Host has upper-case letters or
// the header is malformed.
func (t *routeTable) lookup(r *http.Request) (*target, error) {
	if v := r.Header[network.ServiceHeader]; len(v) > 0 {
		key, err := service.Parse(v[0])
		if err != nil {
			return nil, fmt.Errorf("header %s: %w", network.ServiceHeader, err)
		}
		return t.byKey[key], nil
	}
	return t.byHost[normalizeHost(r.Host)], nil
}

// normalizeHost strips the port and a trailing dot and lower-cases host.
func normalizeHost(host string) string {
	if strings.HasPrefix(host, "[") {
		// IPv6 literal, with or without a port.
		if i := strings.IndexByte(host, ']'); i > 0 {
			host = host[:i+1]
		}
	} else if i := strings.LastIndexByte(host, ':'); i >= 0 && strings.IndexByte(host, ':') == i {
		host = host[:i]
	}
	host = strings.TrimSuffix(host, ".")
	// strings.ToLower returns host itself when it has no upper-case ASCII.
	return strings.ToLower(host)
}

// notFound answers a request that names no known service; err, if set,
// says why the name it gave is not one.
func notFound(w http.ResponseWriter, r *http.Request, err error) {
	h := w.Header()
	h["Content-Type"] = proxy.PlainText
	h["X-Content-Type-Options"] = proxy.NoSniff
	h[network.ReasonHeader] = unknownService
	w.WriteHeader(http.StatusNotFound)
	switch v := r.Header[network.ServiceHeader]; {
	case err != nil:
		fmt.Fprintf(w, "no service: %v\n", err)
	case len(v) > 0:
		fmt.Fprintf(w, "no service %q (from header %s)\n", v[0], network.ServiceHeader)
	default:
		fmt.Fprintf(w, "no service for host %q\n", r.Host)
	}
}
