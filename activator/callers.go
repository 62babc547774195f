package activator

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"k8s.io/utils/clock"

	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/proxy"
)

// DefaultCallerWait is how long a request from an address that is no
// known pod's waits for one to appear before it is refused (Config).
const DefaultCallerWait = 2 * time.Second

// CallerDirectory tells which namespace a caller is in, by the address it
// called from. On Kubernetes, kube/activatorsource follows every pod of the
// cluster for it.
type CallerDirectory interface {
	// Namespace returns the namespace of the pod whose address ip is. It
	// reports false when no pod has it (a node, a hostNetwork pod, a client
	// outside the cluster, a pod not listed yet), and when pods of several
	// namespaces claim it (an address being reused).
	Namespace(ip netip.Addr) (string, bool)
	// Updated returns a channel closed at the next change of what
	// Namespace answers.
	Updated() <-chan struct{}
}

// authorize lets a request through only if its caller may call the
// service: a pod of the service's own namespace, or of one the service's
// Callers list, or anyone when they say Any. Otherwise the activator would
// carry any pod's traffic around the NetworkPolicies that keep it out of
// the service's namespace: the service's pods admit the activator.
//
// A caller whose address is no known pod's waits, bounded by wait, for the
// directory to learn of one: a pod's first requests may leave before the
// kubelet has published its address.
type authorize struct {
	next http.Handler
	callerLookup
	// hint ends a refusal: how to admit more callers.
	hint string
}

// callerLookup finds a caller's namespace in dir, waiting up to wait for
// an address no pod has yet.
type callerLookup struct {
	dir  CallerDirectory
	clk  clock.WithDelayedExecution
	wait time.Duration
}

// namespace returns the namespace of r's caller, if it is a pod the
// directory knows or learns of within the wait.
func (l callerLookup) namespace(ctx context.Context, r *http.Request) (string, bool) {
	ip, ok := callerAddr(r)
	if !ok {
		return "", false
	}
	if ns, ok := l.dir.Namespace(ip); ok {
		return ns, true
	}
	return l.await(ctx, ip)
}

func (h *authorize) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e := exchangeOf(r)
	c := e.t.callers.Load()
	if c.Any {
		h.next.ServeHTTP(w, r)
		return
	}
	ns, known := h.namespace(e, r)
	if known && (ns == e.t.key.Namespace || slices.Contains(c.Namespaces, ns)) {
		h.next.ServeHTTP(w, r)
		return
	}
	if e.Context.Err() != nil {
		return // the client left while its address was looked for
	}
	e.t.m.refused.Inc()
	h.refuse(w, r, e.t, c, ns, known)
}

// await waits until the directory knows ip, the wait bound passes or the
// client leaves.
func (h callerLookup) await(ctx context.Context, ip netip.Addr) (string, bool) {
	timer := h.clk.NewTimer(h.wait)
	defer timer.Stop()
	for {
		// Taken before the look, so that a change after it wakes us.
		updated := h.dir.Updated()
		if ns, ok := h.dir.Namespace(ip); ok {
			return ns, true
		}
		select {
		case <-updated:
		case <-timer.C():
			return "", false
		case <-ctx.Done():
			return "", false
		}
	}
}

// refuse answers 403 with a body that says who called, who may, and how to
// admit more.
func (h *authorize) refuse(w http.ResponseWriter, r *http.Request, t *target, c *Callers, ns string, known bool) {
	hdr := w.Header()
	hdr["Content-Type"] = proxy.PlainText
	hdr["X-Content-Type-Options"] = proxy.NoSniff
	hdr[network.ReasonHeader] = callerNotAllowed
	w.WriteHeader(http.StatusForbidden)
	who := "caller " + r.RemoteAddr + ", which is no pod the activator knows (a node, a hostNetwork pod, or outside the cluster),"
	if known {
		who = "caller " + r.RemoteAddr + ", a pod of namespace " + ns + ","
	}
	allowed := append([]string{t.key.Namespace}, c.Namespaces...)
	fmt.Fprintf(w, "%s may not call service %s through the activator: only pods of namespace %s may. %s\n",
		who, t.name, strings.Join(allowed, ", "), h.hint)
}

// callerAddr is the address the request came from: the connection's peer,
// never a header, so no client can choose it.
func callerAddr(r *http.Request) (netip.Addr, bool) {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap(), true
}
