package activator

import (
	"fmt"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/proxy"
)

// DefaultMaxHeld is how many requests may wait for pods across all
// services (Config.MaxHeld). A held request costs about 23 KB (an
// HTTP/1.1 connection's buffers, its goroutine's stack, the request and its
// queue entry: BenchmarkHeldRequestMemory), so 10,000 hold about 230 MB:
// under the deployment's 600 MiB limit with room for the caches, the
// requests being proxied and the garbage collector's headroom.
const DefaultMaxHeld = 10000

// waitLimits bounds the requests waiting for a pod beyond each service's
// queue depth: across all services, so that the activator is not killed
// for its memory with everything it holds, and per caller within a
// service, so that one caller cannot fill a service's queue and lock the
// others out of it. Only requests that wait pay for them: the fast path
// (a free slot) never counts.
type waitLimits struct {
	held      atomic.Int64
	maxHeld   int64
	perCaller int
	// Answers built once: refusing under overload allocates nothing.
	heldBody, callerBody []byte
}

func newWaitLimits(maxHeld, perCaller int) *waitLimits {
	return &waitLimits{
		maxHeld:   int64(maxHeld),
		perCaller: perCaller,
		heldBody: fmt.Appendf(nil, "%s: %d requests already wait for pods across all services, as many as the activator holds; try again later\n",
			network.ReasonQueueFull, maxHeld),
		callerBody: fmt.Appendf(nil, "%s: this caller already has %d requests waiting for this service, as many as one caller may; try again later\n",
			network.ReasonQueueFull, perCaller),
	}
}

// callerWaits counts one service's waiting requests by caller address.
type callerWaits struct {
	mu sync.Mutex
	n  map[netip.Addr]int
}

// enter counts a request from caller that is about to wait for t's
// throttler. It reports false, counting nothing, when the activator holds
// its most, or the caller has its share of t's queue; refuse then answers.
func (l *waitLimits) enter(t *target, caller netip.Addr) (bool, []byte) {
	if l.held.Add(1) > l.maxHeld {
		l.held.Add(-1)
		return false, l.heldBody
	}
	t.waits.mu.Lock()
	n := t.waits.n[caller]
	if n >= l.perCaller {
		t.waits.mu.Unlock()
		l.held.Add(-1)
		return false, l.callerBody
	}
	t.waits.n[caller] = n + 1
	t.waits.mu.Unlock()
	return true, nil
}

// leave uncounts a request enter counted, once it no longer waits.
func (l *waitLimits) leave(t *target, caller netip.Addr) {
	t.waits.mu.Lock()
	if n := t.waits.n[caller]; n > 1 {
		t.waits.n[caller] = n - 1
	} else {
		delete(t.waits.n, caller)
	}
	t.waits.mu.Unlock()
	l.held.Add(-1)
}

// refuse answers a request enter turned away: 503 queue-full, as for a
// full queue, and body, which says which limit.
func (l *waitLimits) refuse(w http.ResponseWriter, body []byte) {
	h := w.Header()
	h["Content-Type"] = proxy.PlainText
	h["X-Content-Type-Options"] = proxy.NoSniff
	h[network.ReasonHeader] = queueFull
	w.WriteHeader(http.StatusServiceUnavailable)
	w.Write(body)
}
