package activator

import (
	"math/rand/v2"
	"net/http"
	"sync/atomic"

	"k8s.io/utils/clock"
)

// balance sends the request on to a routable pod with a free slot, chosen
// by the service's policy (below), and holds the slot until the proxy is
// done. Finding none, it leaves noPod set for retry to wait for a change of
// pods. The first pod found ends the request's wait for one, which the
// queue-wait (and, for a cold start, the cold-start) histogram observes.
type balance struct {
	next    http.Handler
	clk     clock.PassiveClock
	metrics *metrics
}

func (h *balance) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e := exchangeOf(r)
	t := e.t
	// Taken before the pick, so that a change after it wakes retry.
	e.podsChanged = *t.changed.Load()
	p := t.pick()
	if p == nil {
		e.noPod = true
		return
	}
	defer p.inflight.Add(-1)
	if !e.admitted {
		e.admitted = true
		waited := h.clk.Since(e.arrived).Seconds()
		h.metrics.queueWait.Observe(waited)
		if e.cold {
			h.metrics.coldStart.Observe(waited)
		}
	}
	e.pod = p
	h.next.ServeHTTP(w, r)
}

// pod is the activator's state for one pod of a service.
type pod struct {
	name, addr string
	// inflight counts requests sent to the pod and not yet finished.
	inflight atomic.Int64

	// Guarded by the service's mu.
	routable bool
	stop     func() // stops the pod's prober; nil when none runs
}

// Load-balancing policies, chosen by containerConcurrency (cc). Each returns
// a pod with one in-flight slot already reserved (the caller decrements
// inflight when done), or nil when no pod has a free slot.
//
// Small cc (1-3): fill pods in a fixed order. A pod that takes only one or
// two requests at a time gains nothing from spreading, and packing keeps the
// last pods idle so the autoscaler can remove them.
// Larger cc: round robin over pods with a free slot spreads the load.
// cc 0 (unbounded): power of two random choices, the less loaded wins —
// no scan of every pod, yet close to least-loaded.

// pick chooses a routable pod with a free slot and reserves it.
func (t *target) pick() *pod {
	pods := *t.routable.Load()
	switch cc := t.cc.Load(); {
	case cc == 0:
		return pickTwoChoices(pods)
	case cc <= 3:
		return pickFirst(pods, cc)
	default:
		return pickRoundRobin(pods, cc, &t.rr)
	}
}

// reserve takes a slot on p if it has fewer than cc requests in flight.
func reserve(p *pod, cc int64) bool {
	for {
		n := p.inflight.Load()
		if n >= cc {
			return false
		}
		if p.inflight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// pickFirst returns the first pod in order with a free slot.
func pickFirst(pods []*pod, cc int64) *pod {
	for _, p := range pods {
		if reserve(p, cc) {
			return p
		}
	}
	return nil
}

// pickRoundRobin returns the next pod after the last choice with a free slot.
func pickRoundRobin(pods []*pod, cc int64, next *atomic.Uint64) *pod {
	n := uint64(len(pods))
	if n == 0 {
		return nil
	}
	start := next.Add(1) - 1
	for i := uint64(0); i < n; i++ {
		if p := pods[(start+i)%n]; reserve(p, cc) {
			return p
		}
	}
	return nil
}

// pickTwoChoices returns the less loaded of two distinct random pods.
func pickTwoChoices(pods []*pod) *pod {
	var p *pod
	switch n := len(pods); n {
	case 0:
		return nil
	case 1:
		p = pods[0]
	default:
		i := rand.IntN(n)
		j := rand.IntN(n - 1)
		if j >= i {
			j++
		}
		p = pods[i]
		if q := pods[j]; q.inflight.Load() < p.inflight.Load() {
			p = q
		}
	}
	p.inflight.Add(1)
	return p
}
