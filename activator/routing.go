package activator

import (
	"context"
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
	// callers resolves a short name; without a directory, none is.
	callers callerLookup
}

func (h *router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tab := h.table.Load()
	t := tab.lookup(r)
	if t == nil && h.callers.dir != nil {
		// A Service's name alone (http://hello/, hello:8080), as a pod
		// reaches a Service of its own namespace: cluster DNS completes
		// it with the caller's namespace, and so does the activator.
		if host := normalizeHost(r.Host); isShortName(host) {
			if ns, ok := h.callers.namespace(r.Context(), r); ok {
				t = tab.byHost[host+"."+ns]
			}
		}
	}
	if t == nil {
		notFound(w, r)
		return
	}
	e, out := newExchange(w, r, t)
	defer e.finish()
	h.next.ServeHTTP(e, out)
}

type serviceKey struct{}

// WithService returns ctx naming the service a request carrying it is
// for: the activator routes such a request there, whatever its Host. It is
// how a front door in the same process (swell local's) hands a request on
// once it has chosen its service; nothing a client sends can do the same.
// The Swell-Service header in particular routes nothing: from a client it
// is a request to route into any namespace.
func WithService(ctx context.Context, key service.Key) context.Context {
	return context.WithValue(ctx, serviceKey{}, key)
}

// ServiceFrom returns the service WithService named in ctx, if any.
func ServiceFrom(ctx context.Context) (service.Key, bool) {
	key, ok := ctx.Value(serviceKey{}).(service.Key)
	return key, ok
}

// routeTable maps normalised host names and service keys to services. It is
// immutable once published: the activator builds a new one on every source
// change and swaps it in atomically, so lookups take no lock.
type routeTable struct {
	byHost map[string]*target
	byKey  map[service.Key]*target
	// byPort holds the services' own ports that are open.
	byPort map[int]*target
	// gone are services that left the Source holding requests, within
	// their grace (Config.GoneGrace): nothing new routes to them, but
	// their held requests wait for them to come back and are reported.
	gone map[service.Key]*target
}

func newRouteTable() *routeTable {
	return &routeTable{byHost: map[string]*target{}, byKey: map[service.Key]*target{}, byPort: map[int]*target{}, gone: map[service.Key]*target{}}
}

// clusterLocalNames returns the names a service is reachable by inside the
// cluster: <name>.<ns>, <name>.<ns>.svc and <name>.<ns>.svc.<domain>.
func clusterLocalNames(key service.Key, domain string) []string {
	short := key.Name + "." + key.Namespace
	return []string{short, short + ".svc", short + ".svc." + domain}
}

// lookup finds the service for r: the one WithService named, else the one
// whose own port r arrived on, else the one its Host names; nil if there
// is none. It allocates nothing unless Host has upper-case letters.
//
// On a service's port, the Host is not read at all: an ingress controller
// sends the public host, a client of the Service's cluster IP whatever it
// dialled. A request on a port that has just been closed (on a connection
// accepted before) is routed by Host, as on the activator's own port: a
// caller may name any service there, and is judged by that service's
// callers.
func (t *routeTable) lookup(r *http.Request) *target {
	if key, ok := ServiceFrom(r.Context()); ok {
		return t.byKey[key]
	}
	if len(t.byPort) > 0 {
		if s := t.byPort[localPort(r)]; s != nil {
			return s
		}
	}
	return t.byHost[normalizeHost(r.Host)]
}

// isShortName reports whether host is a single DNS label: a Service's name
// without its namespace.
func isShortName(host string) bool {
	return host != "" && !strings.ContainsAny(host, ".:[]")
}

// clusterLocalForm reports whether host reads as a cluster-local name of
// some service: <name>.<namespace>, or with .svc after those.
func clusterLocalForm(host string) bool {
	first := strings.IndexByte(host, '.')
	if first < 0 {
		return false
	}
	rest := host[first+1:]
	second := strings.IndexByte(rest, '.')
	return second < 0 || strings.HasPrefix(rest[second+1:], "svc") && (len(rest) == second+4 || rest[second+4] == '.')
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

// notFound answers a request that names no known service.
func notFound(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h["Content-Type"] = proxy.PlainText
	h["X-Content-Type-Options"] = proxy.NoSniff
	h[network.ReasonHeader] = unknownService
	w.WriteHeader(http.StatusNotFound)
	if key, ok := ServiceFrom(r.Context()); ok {
		fmt.Fprintf(w, "no service %q\n", key.String())
		return
	}
	fmt.Fprintf(w, "no service for host %q\n", r.Host)
}
