package scaler

import "sync"

// queue is a keyed work queue that coalesces: a key waits in it at most
// once however often it is added, and a key being processed is never handed
// to a second worker; if it is added meanwhile it is queued again when the
// first worker is done. Since the executor reads a service's newest
// decision only when it starts on the key, a slow backend call makes the
// decisions that arrived during it collapse into one.
//
// Two lanes: urgent keys (a service waking from zero, with a request
// waiting at the activator) are handed out before the others, so a wake-up
// never queues behind a backlog of routine changes.
type queue struct {
	mu   sync.Mutex
	cond sync.Cond
	// lanes[laneUrgent] and lanes[laneNormal], each a FIFO with a head
	// index, so steady-state use does not allocate. An entry is live only
	// while dirty[key] names its lane; promotion to urgent leaves a stale
	// entry behind in the normal lane, skipped when reached.
	lanes      [2]fifo
	dirty      map[*Target]lane
	processing map[*Target]struct{}
	shutdown   bool
}

type lane uint8

const (
	laneUrgent lane = iota
	laneNormal
)

type fifo struct {
	items []*Target
	head  int
}

func (f *fifo) push(k *Target) { f.items = append(f.items, k) }

func (f *fifo) pop() (*Target, bool) {
	if f.head == len(f.items) {
		return nil, false
	}
	k := f.items[f.head]
	f.items[f.head] = nil
	f.head++
	if f.head == len(f.items) {
		f.items, f.head = f.items[:0], 0
	}
	return k, true
}

func newQueue() *queue {
	q := &queue{
		dirty:      make(map[*Target]lane),
		processing: make(map[*Target]struct{}),
	}
	q.cond.L = &q.mu
	return q
}

// add marks k as needing work, in the urgent lane if urgent.
func (q *queue) add(k *Target, urgent bool) {
	l := laneNormal
	if urgent {
		l = laneUrgent
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shutdown {
		return
	}
	if cur, ok := q.dirty[k]; ok {
		if cur == laneNormal && l == laneUrgent {
			q.dirty[k] = laneUrgent
			if _, busy := q.processing[k]; !busy {
				q.lanes[laneUrgent].push(k)
				q.cond.Signal()
			}
		}
		return
	}
	q.dirty[k] = l
	if _, busy := q.processing[k]; busy {
		return // done() queues it again
	}
	q.lanes[l].push(k)
	q.cond.Signal()
}

// get blocks until a key is ready or the queue is shut down (ok false).
// The caller must call done(k) when finished with it.
func (q *queue) get() (k *Target, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		if q.shutdown {
			return nil, false
		}
		for l := laneUrgent; l <= laneNormal; l++ {
			for {
				k, ok := q.lanes[l].pop()
				if !ok {
					break
				}
				if cur, dirty := q.dirty[k]; !dirty || cur != l {
					continue // stale: promoted, forgotten or handed out
				}
				if _, busy := q.processing[k]; busy {
					continue // a stale duplicate; done() queues k again
				}
				delete(q.dirty, k)
				q.processing[k] = struct{}{}
				return k, true
			}
		}
		q.cond.Wait()
	}
}

// done releases k; if it was added while processed, it is queued again.
func (q *queue) done(k *Target) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.processing, k)
	if l, ok := q.dirty[k]; ok && !q.shutdown {
		q.lanes[l].push(k)
		q.cond.Signal()
	}
}

// pending says whether k has been added since it was last handed out: a
// newer decision is waiting.
func (q *queue) pending(k *Target) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	_, ok := q.dirty[k]
	return ok
}

// forget drops k if it is waiting (not if it is being processed).
func (q *queue) forget(k *Target) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.dirty, k) // its lane entry becomes stale
}

// close wakes every waiting get, which then returns ok false.
func (q *queue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.shutdown = true
	q.cond.Broadcast()
}
