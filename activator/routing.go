package activator

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/proxy"
)

// DefaultClusterDomain is the cluster DNS suffix used when Config leaves it
// empty.
const DefaultClusterDomain = "cluster.local"

// routeTable maps normalised host names and service keys to services. It is
// immutable once published: the activator builds a new one on every source
// change and swaps it in atomically, so lookups take no lock.
type routeTable struct {
	byHost map[string]*service
	byKey  map[string]*service
}

func newRouteTable() *routeTable {
	return &routeTable{byHost: map[string]*service{}, byKey: map[string]*service{}}
}

// clusterLocalNames returns the names a service is reachable by inside the
// cluster: <name>.<ns>, <name>.<ns>.svc and <name>.<ns>.svc.<domain>.
func clusterLocalNames(key, domain string) []string {
	ns, name, _ := strings.Cut(key, "/")
	short := name + "." + ns
	return []string{short, short + ".svc", short + ".svc." + domain}
}

// lookup finds the service for r: by network.ServiceHeader when present
// (an explicit choice is never second-guessed by Host), else by Host.
// It allocates nothing unless Host has upper-case letters.
func (t *routeTable) lookup(r *http.Request) *service {
	if v := r.Header[network.ServiceHeader]; len(v) > 0 {
		return t.byKey[v[0]]
	}
	return t.byHost[normalizeHost(r.Host)]
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
	if v := r.Header[network.ServiceHeader]; len(v) > 0 {
		fmt.Fprintf(w, "no service %q (from header %s)\n", v[0], network.ServiceHeader)
		return
	}
	fmt.Fprintf(w, "no service for host %q\n", r.Host)
}
