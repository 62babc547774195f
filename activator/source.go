package activator

import (
	"slices"
	"sync"
	"time"

	"github.com/swell-run/swell/pkg/service"
)

// Pod is one replica of a service as the activator reaches it: through its
// queue-proxy.
type Pod struct {
	// Name identifies the pod within its service (a Kubernetes pod name, a
	// local process id).
	Name string
	// Addr is host:port of the pod's queue-proxy serving port.
	Addr string
}

// Service is one service the activator routes for.
type Service struct {
	// Key names the service; service.Parse or service.New makes it.
	// Requests whose context names it (WithService) route here.
	Key service.Key
	// Hosts are more names routed here besides the cluster-local ones
	// derived from Key, from what the cluster says is the service's: the
	// cluster-local names of the Services routed to it, and their cluster
	// IPs (IPv6 in brackets), for clients that dialled them. Each is the
	// service's alone; a name two services hold is the first's, in key
	// order, and logged.
	Hosts []string
	// ClaimedHosts are names the service claims besides (an Ingress's or
	// a gateway's host, swell.run/hosts on Kubernetes). They never take a
	// name of Hosts or a cluster-local name of any service; a name claimed
	// by several services is the earliest claim's (ClaimedAt, then key),
	// so a newer claim cannot take a name over.
	ClaimedHosts []string
	// ClaimedAt orders claims: when the service first claimed its hosts
	// (the pods-Service's creation on Kubernetes).
	ClaimedAt time.Time
	// Port is the service's own port on the activator, when it has one
	// (Config.ServePort): a request that arrives on it is for this
	// service, whatever its Host. 0: none.
	Port int
	// ContainerConcurrency is how many requests one pod takes at once; 0
	// means unbounded.
	ContainerConcurrency int
	// Pods are the service's pods, ready or not: the activator probes each
	// before sending it traffic.
	Pods []Pod
	// Callers admits callers besides those the NetworkPolicies of the
	// service's pods admit, when the activator can tell who calls
	// (Config.Callers); the zero value admits none.
	Callers Callers
}

// Callers is who may call a service through the activator besides the
// callers its NetworkPolicies admit (callers.go).
type Callers struct {
	// Any admits every caller, also one that is no pod: a node, a
	// hostNetwork pod, a client outside the cluster.
	Any bool
	// Namespaces admits the pods of these namespaces.
	Namespaces []string
}

// Source supplies the services and their pods. It is level-triggered: a
// receive on Changed means "call Services again", and several changes may be
// coalesced into one signal.
type Source interface {
	// Services returns the complete current set. The caller must not
	// modify it.
	Services() []Service
	// Changed delivers a value after the set returned by Services changed.
	Changed() <-chan struct{}
}

// A PeerSource is a Source that also knows how many activators serve the
// services (this one included): each then admits its share of a service's
// capacity, so that together they send its pods no more than they take.
// Peers is read after each Changed signal; a change of it must signal too.
type PeerSource interface {
	Source
	// Peers returns how many activators serve the services, at least 1.
	Peers() int
}

// MemorySource is a Source held in memory, for tests and embedding. Safe for
// concurrent use.
type MemorySource struct {
	mu       sync.Mutex
	services map[service.Key]Service
	changed  chan struct{}
}

// NewMemorySource returns a MemorySource holding services.
func NewMemorySource(services ...Service) *MemorySource {
	m := &MemorySource{services: map[service.Key]Service{}, changed: make(chan struct{}, 1)}
	for _, s := range services {
		m.services[s.Key] = s
	}
	return m
}

// Set adds or replaces the service with s.Key.
func (m *MemorySource) Set(s Service) {
	m.mu.Lock()
	m.services[s.Key] = s
	m.mu.Unlock()
	m.notify()
}

// Remove deletes the service with the given key, if present.
func (m *MemorySource) Remove(key service.Key) {
	m.mu.Lock()
	delete(m.services, key)
	m.mu.Unlock()
	m.notify()
}

// Services implements Source, sorted by namespace, then name.
func (m *MemorySource) Services() []Service {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Service, 0, len(m.services))
	for _, s := range m.services {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b Service) int {
		return a.Key.Compare(b.Key)
	})
	return out
}

// Changed implements Source.
func (m *MemorySource) Changed() <-chan struct{} { return m.changed }

// notify signals a change; a pending signal already covers this one.
func (m *MemorySource) notify() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
}
