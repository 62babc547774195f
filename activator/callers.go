package activator

import (
	"context"
	"fmt"
	"hash/maphash"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/proxy"
	"github.com/swell-run/swell/pkg/service"
)

// DefaultCallerWait is how long a refused request from an address that is
// no known pod's waits for one to appear before it is refused (Config).
const DefaultCallerWait = 2 * time.Second

// maxVerdicts bounds the verdicts a service caches: past it, they are
// forgotten and judged again. Callers are pods, nodes and, behind a load
// balancer that keeps clients' addresses, anyone: no number of addresses
// can hold more memory than this.
const maxVerdicts = 4096

// CallerDirectory tells who a caller is, by the address it called from, and
// whether a service's NetworkPolicies would admit it. On Kubernetes,
// kube/activatorsource follows every pod, namespace and NetworkPolicy of
// the cluster for it.
type CallerDirectory interface {
	// Namespace returns the namespace of the pod whose address ip is. It
	// reports false when no pod has it (a node, a hostNetwork pod, a client
	// outside the cluster, a pod not listed yet), and when pods of several
	// namespaces claim it (an address being reused).
	Namespace(ip netip.Addr) (string, bool)
	// Updated returns a channel closed at the next change of what
	// Namespace or Admits answers.
	Updated() <-chan struct{}
	// Admits judges the caller at ip as the NetworkPolicies selecting the
	// pods of service key would judge it reaching them directly, on the
	// app's port. It may be slow and allocate: the activator caches its
	// verdicts for as long as Generation is unchanged.
	Admits(key service.Key, ip netip.Addr) CallerVerdict
	// Generation changes whenever what Admits answers may have changed (a
	// pod, a namespace, a policy or a service's pods' labels changed).
	Generation() uint64
}

// CallerVerdict is whether a service's NetworkPolicies admit a caller.
type CallerVerdict struct {
	// Allowed reports whether they do.
	Allowed bool
	// Why says which policies admitted or refused the caller, and why:
	// for the activator's log only, never for the caller, who may be in
	// another namespace and has no business reading its policies.
	Why string
}

// authorize lets a request through only if its caller may call the
// service: one its NetworkPolicies would admit reaching its pods directly,
// or a pod of a namespace the service's Callers list, or anyone when they
// say Any. Otherwise the activator would carry any pod's traffic around
// those policies: the service's pods admit the activator.
//
// A refused caller whose address is no known pod's waits, bounded by
// wait, for the directory to learn of one: a pod's first requests may
// leave before the kubelet has published its address.
type authorize struct {
	next http.Handler
	callerLookup
	log *zap.Logger
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
	t := e.t
	c := t.callers.Load()
	ip, ok := callerAddr(r)
	// An admitted caller's cached verdict is all most requests look at.
	if c.Any || ok && (t.verdicts.allowed(ip, h.dir.Generation()) || h.admitted(e, t, c, ip)) {
		h.next.ServeHTTP(w, r)
		return
	}
	if e.Context.Err() != nil {
		return // the client left while its address was looked for
	}
	t.m.refused.Inc()
	h.refuse(w, r, t, ip)
}

// admitted reports whether the caller at ip may call t (judge), waiting,
// if it may not and its address is no known pod's, until the directory
// learns of a pod there, the wait bound passes or the client leaves.
func (h *authorize) admitted(ctx context.Context, t *target, c *Callers, ip netip.Addr) bool {
	var timer clock.Timer
	for {
		// Taken before the look, so that a change after it wakes us.
		updated := h.dir.Updated()
		if h.judge(t, c, ip) {
			return true
		}
		if _, known := h.dir.Namespace(ip); known {
			return false
		}
		if timer == nil {
			timer = h.clk.NewTimer(h.wait)
			defer timer.Stop()
		}
		select {
		case <-updated:
		case <-timer.C():
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// judge reports whether t's NetworkPolicies admit the caller at ip, from
// its cached verdict or, when the directory changed since, a new one, or
// else whether c lists the caller's namespace. A new refusal is logged
// with the whole verdict.
func (h *authorize) judge(t *target, c *Callers, ip netip.Addr) bool {
	// Read before judging, so that a change while the directory judges
	// leaves the verdict stale rather than wrong.
	gen := h.dir.Generation()
	last, had := t.verdicts.load(ip)
	allowed := last.allowed
	if !had || last.gen != gen {
		v := h.dir.Admits(t.key, ip)
		next := verdict{gen: gen, allowed: v.Allowed, why: maphash.String(whySeed, v.Why)}
		t.verdicts.store(ip, next)
		allowed = v.Allowed
		// Once per caller and verdict, not at each change elsewhere in
		// the cluster: a refused caller cannot flood the log.
		if !allowed && (!had || last.allowed || last.why != next.why) {
			h.log.Info("caller not admitted by the service's NetworkPolicies",
				zap.String("service", t.name), zap.Stringer("caller", ip), zap.String("verdict", v.Why))
		}
	}
	if allowed {
		return true
	}
	if len(c.Namespaces) == 0 {
		return false
	}
	ns, known := h.dir.Namespace(ip)
	return known && slices.Contains(c.Namespaces, ns)
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

// refuse answers 403 with a body that says who called, why it may not and
// how to admit more. It names no policy: the caller may be in another
// namespace, whose policies are not its to read (the log has them).
func (h *authorize) refuse(w http.ResponseWriter, r *http.Request, t *target, ip netip.Addr) {
	hdr := w.Header()
	hdr["Content-Type"] = proxy.PlainText
	hdr["X-Content-Type-Options"] = proxy.NoSniff
	hdr[network.ReasonHeader] = callerNotAllowed
	w.WriteHeader(http.StatusForbidden)
	who := "caller " + r.RemoteAddr + ", which is no pod the activator knows (a node, a hostNetwork pod, or outside the cluster),"
	if ns, known := h.dir.Namespace(ip); known {
		who = "caller " + r.RemoteAddr + ", a pod of namespace " + ns + ","
	}
	fmt.Fprintf(w, "%s may not call service %s through the activator: the NetworkPolicies of the service's pods would not admit it reaching them directly. %s\n",
		who, t.name, h.hint)
}

// verdicts caches a service's NetworkPolicy verdicts by caller address,
// each valid while the directory's generation is the one it was judged
// at. Read on every request without a lock, and without allocating.
type verdicts struct {
	m sync.Map // netip.Addr → verdict
	n atomic.Int64
}

// verdict is one caller's.
type verdict struct {
	// gen is the directory's generation it was judged at.
	gen     uint64
	allowed bool
	// why is a hash of the verdict's text: whether it changed.
	why uint64
}

// whySeed hashes verdicts' texts.
var whySeed = maphash.MakeSeed()

// load returns the verdict last cached for ip, if any.
func (vs *verdicts) load(ip netip.Addr) (verdict, bool) {
	v, ok := vs.m.Load(ip)
	if !ok {
		return verdict{}, false
	}
	return v.(verdict), true
}

// allowed reports whether a verdict admitting ip is cached at gen.
func (vs *verdicts) allowed(ip netip.Addr, gen uint64) bool {
	e, ok := vs.load(ip)
	return ok && e.gen == gen && e.allowed
}

// store caches ip's verdict, forgetting every other once the cache holds
// maxVerdicts addresses.
func (vs *verdicts) store(ip netip.Addr, v verdict) {
	if _, had := vs.m.Swap(ip, v); had {
		return
	}
	if vs.n.Add(1) > maxVerdicts {
		vs.m.Clear()
		vs.n.Store(0)
	}
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
