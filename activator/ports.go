package activator

import (
	"errors"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"

	"go.uber.org/zap"
)

// servicePorts keeps a listener open on each service's own port
// (Service.Port), served by Config.ServePort: a connection says which
// service it is for by the port it arrived on (routeTable.byPort), so
// that whatever sends it there — kube-proxy for the Service's cluster IP,
// an ingress controller or a gateway reading its EndpointSlices — reaches
// that service with any Host and any path.
type servicePorts struct {
	serve  func(net.Listener) error
	listen func(port int) (net.Listener, error)
	log    *zap.Logger
	// open is every port with a listener; failed, the ports a listen
	// failed on, so that the failure is logged once.
	open   map[int]net.Listener
	failed map[int]string
}

// ListenPort is the default Config.ListenPort: every address, both
// families.
func ListenPort(port int) (net.Listener, error) {
	return net.Listen("tcp", ":"+strconv.Itoa(port))
}

// set makes the listeners those of want: it opens what is missing and
// closes what is no longer wanted, and returns the ports open. A port
// that cannot be opened is left out: no route slice lists this activator
// on it, since the router lists an activator on a port only once it takes
// a connection there, and it is tried again at the next change.
// Connections a closed listener accepted carry on; their requests no
// longer route by the port.
func (p *servicePorts) set(want map[int]bool) map[int]bool {
	for port, ln := range p.open {
		if !want[port] {
			ln.Close()
			delete(p.open, port)
		}
	}
	for _, port := range slices.Sorted(maps.Keys(want)) {
		if p.open[port] != nil {
			continue
		}
		ln, err := p.listen(port)
		if err != nil {
			if p.failed[port] != err.Error() {
				p.log.Error("cannot open a service's port; this activator serves it only by Host until it can",
					zap.Int("port", port), zap.Error(err))
				p.failed[port] = err.Error()
			}
			continue
		}
		delete(p.failed, port)
		p.open[port] = ln
		go func() {
			// Closing the listener ends Serve with the listener's error;
			// shutting the server down, with ErrServerClosed.
			if err := p.serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
				p.log.Error("a service port stopped serving", zap.Int("port", port), zap.Error(err))
			}
		}()
	}
	for port := range p.failed {
		if !want[port] {
			delete(p.failed, port)
		}
	}
	out := make(map[int]bool, len(p.open))
	for port := range p.open {
		out[port] = true
	}
	return out
}

// localPort is the port of the address a request arrived at, or 0.
func localPort(r *http.Request) int {
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr); ok {
		return a.Port
	}
	return 0
}
