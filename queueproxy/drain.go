package queueproxy

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/proxy"
)

// maxDrainWaiters bounds the callers from outside the pod that wait at
// once for a drain that has not started. The kubelet needs one (the app's
// preStop hook); the bound is what any other pod in the cluster can hold
// open here, at most drainWaitBound each.
const maxDrainWaiters = 8

// serveDrain answers network.DrainPath once a drain has ended.
//
// A drain ends the process, so only the process's own shutdown (SIGTERM)
// or a caller on loopback — a process of the pod, an exec hook, `swell
// local` — may start one: the admin port is reachable by every pod of the
// cluster. From anywhere else GET only waits for a drain started
// otherwise, which is what the app's preStop hook needs: the kubelet calls
// it from the node at the moment it sends the queue-proxy SIGTERM, and the
// app gets its own SIGTERM once the call answers. POST, which means
// "start", is refused from there.
func (q *QueueProxy) serveDrain(w http.ResponseWriter, r *http.Request) {
	switch {
	case network.IsFromLoopback(r):
		q.StartDrain()
		if err := q.drainer.Wait(r.Context()); err != nil {
			return // the caller gave up; the drain goes on
		}
		writeDrained(w)
	case r.Method == http.MethodPost:
		http.Error(w, "POST "+network.DrainPath+" starts a drain only from loopback (a process of the pod); "+
			"a drain starts with the queue-proxy's SIGTERM, and GET "+network.DrainPath+" from elsewhere waits for it",
			http.StatusForbidden)
	default:
		q.awaitDrain(w, r)
	}
}

// awaitDrain answers once a drain started otherwise has ended, or at
// drainWaitBound, or when a newer caller takes this one's place.
func (q *QueueProxy) awaitDrain(w http.ResponseWriter, r *http.Request) {
	var evicted <-chan struct{} // nil, never ready, once a drain has started
	if !q.drainer.Draining() {
		var leave func()
		evicted, leave = q.waiters.join()
		defer leave()
	}
	bound := q.drainWaitBound()
	t := q.clock.NewTimer(bound)
	defer t.Stop()
	select {
	case <-q.drainer.Done():
		writeDrained(w)
	case <-evicted:
		http.Error(w, fmt.Sprintf("more than %d callers from outside the pod wait for a drain: a newer one took this one's place", maxDrainWaiters),
			http.StatusServiceUnavailable)
	case <-t.C():
		http.Error(w, fmt.Sprintf("no drain ended within %s: GET %s from outside the pod only waits for a drain, which the queue-proxy's SIGTERM starts",
			bound, network.DrainPath), http.StatusServiceUnavailable)
	case <-r.Context().Done():
	}
}

// drainWaitBound is the longest a caller from outside the pod waits:
// DRAIN_TIMEOUT plus REQUEST_TIMEOUT (the default request timeout when
// there is none). A drain started up to a request timeout after the call
// is thus waited for to its end, and no caller is held longer than the
// kubelet holds a preStop hook: injection sets the grace period to the
// request timeout plus the quiet period plus 10s.
func (q *QueueProxy) drainWaitBound() time.Duration {
	rt := q.cfg.RequestTimeout
	if rt == 0 {
		rt = network.DefaultRequestTimeout
	}
	return q.cfg.DrainTimeout + rt
}

func writeDrained(w http.ResponseWriter) {
	w.Header()["Content-Type"] = proxy.PlainText
	w.Write([]byte("drained\n"))
}

// drainWaiters are the callers from outside the pod waiting for a drain
// that had not started when they arrived, oldest first, at most
// maxDrainWaiters. A newcomer when they are full takes the oldest's place
// rather than being turned away: the caller that matters, the kubelet's
// preStop hook, arrives last — at the pod's deletion — so callers that
// came before cannot keep it out.
type drainWaiters struct {
	mu      sync.Mutex
	waiting []chan struct{} // closed to evict
}

// join adds a waiter, evicting the oldest if full. evicted is closed if a
// newer waiter takes its place; leave removes it and must be called once
// it stops waiting.
func (d *drainWaiters) join() (evicted <-chan struct{}, leave func()) {
	ch := make(chan struct{})
	d.mu.Lock()
	if len(d.waiting) >= maxDrainWaiters {
		close(d.waiting[0])
		d.waiting = slices.Delete(d.waiting, 0, 1)
	}
	d.waiting = append(d.waiting, ch)
	d.mu.Unlock()
	return ch, func() {
		d.mu.Lock()
		if i := slices.Index(d.waiting, ch); i >= 0 {
			d.waiting = slices.Delete(d.waiting, i, i+1)
		}
		d.mu.Unlock()
	}
}

// len is how many wait.
func (d *drainWaiters) len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.waiting)
}
