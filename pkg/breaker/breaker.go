// Package breaker admits at most a fixed number of concurrent holders and
// queues the rest, first in first out, in a bounded queue.
//
// The queue-proxy puts one Breaker of capacity containerConcurrency in front
// of the app; the activator keeps one per service whose capacity follows the
// ready pods (SetCapacity). Both call it once per request, so the common case
// — a free slot and nobody waiting — is one compare-and-swap on a packed
// atomic word and takes no lock. Only when callers must wait does the
// Breaker take its mutex and queue them.
package breaker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// ErrQueueFull is returned by Acquire when every slot is taken and the queue
// is at its depth.
var ErrQueueFull = errors.New("breaker: queue full")

// MaxCapacity is the largest Capacity and QueueDepth a Breaker accepts (the
// capacity lives in 31 bits of the Breaker's atomic state word).
const MaxCapacity = 1<<31 - 1

// Config configures a Breaker.
type Config struct {
	// Capacity is how many holders may hold a slot at once. Zero admits
	// nobody (requests queue until capacity is raised).
	Capacity int
	// QueueDepth is how many callers may wait for a slot; one more gets
	// ErrQueueFull at once.
	QueueDepth int
}

// The state word packs everything the lock-free paths need to decide alone:
//
//	bits  0..31  in-flight holders (may exceed capacity after SetCapacity down)
//	bits 32..62  capacity
//	bit  63      waiters: set while the queue is non-empty
//
// Keeping capacity in the same word as in-flight makes "a slot is free" and
// "take it" one atomic step even while SetCapacity runs concurrently. The
// waiters bit is what keeps the order strict: while it is set, neither
// Acquire nor Release touches the word without the mutex, so a newcomer can
// never overtake a queued caller and every freed slot goes to the queue.
const (
	inflightMask = 1<<32 - 1
	capShift     = 32
	capMask      = MaxCapacity
	waitersBit   = 1 << 63
)

func inflightOf(s uint64) uint64 { return s & inflightMask }
func capOf(s uint64) uint64      { return s >> capShift & capMask }

func pack(inflight, capacity uint64, waiters bool) uint64 {
	s := inflight | capacity<<capShift
	if waiters {
		s |= waitersBit
	}
	return s
}

// Breaker is a FIFO-fair admission gate. The fast path (a free slot and
// nobody waiting) takes no lock. The zero value is not usable; call New.
type Breaker struct {
	state atomic.Uint64
	// waiting mirrors n for Waiting(), which must not take the mutex.
	waiting atomic.Int64

	queueDepth int

	mu sync.Mutex
	// q is the sentinel of a circular doubly linked list of waiters, head at
	// q.next: O(1) push, pop and removal of a cancelled waiter from the
	// middle.
	q waiter
	n int
}

// waiter is one queued Acquire. Its channel has room for exactly the one
// token that grants it a slot, so a grant never blocks the releaser.
type waiter struct {
	ch         chan struct{}
	prev, next *waiter
	// queued is true while the waiter is in the list; read and written only
	// under the Breaker's mutex. A waiter whose ctx fires looks at it to know
	// whether it was granted a slot first.
	queued bool
}

// waiters are pooled so that a contended breaker makes no garbage: each one
// carries a channel, and a busy activator queues thousands a second.
var waiterPool = sync.Pool{New: func() any { return &waiter{ch: make(chan struct{}, 1)} }}

// New returns a Breaker. It returns an error for negative values or values
// above MaxCapacity.
func New(p Config) (*Breaker, error) {
	if p.Capacity < 0 || p.Capacity > MaxCapacity {
		return nil, fmt.Errorf("breaker: capacity %d out of range: want 0..%d", p.Capacity, MaxCapacity)
	}
	if p.QueueDepth < 0 || p.QueueDepth > MaxCapacity {
		return nil, fmt.Errorf("breaker: queue depth %d out of range: want 0..%d", p.QueueDepth, MaxCapacity)
	}
	b := &Breaker{queueDepth: p.QueueDepth}
	b.q.next, b.q.prev = &b.q, &b.q
	b.state.Store(pack(0, uint64(p.Capacity), false))
	return b, nil
}

// Acquire takes a slot, waiting in FIFO order if none is free. It returns
// ErrQueueFull at once if the queue is full, and ctx.Err() as soon as ctx is
// done while waiting (the caller then holds nothing and has left the queue).
// A nil error means the caller holds a slot and must call Release.
//
// A free slot is taken even if ctx is already done; ctx is only consulted
// when the caller would have to wait. If a slot is handed to a waiter at the
// very moment its ctx fires, the waiter passes the slot on (to the next
// waiter, or back to the pool) and returns ctx.Err(), so no slot is lost.
func (b *Breaker) Acquire(ctx context.Context) error {
	if b.TryAcquire() {
		return nil
	}
	return b.acquireSlow(ctx)
}

// TryAcquire takes a slot only if one is free and nobody waits. It never
// blocks and never queues.
func (b *Breaker) TryAcquire() bool {
	for {
		s := b.state.Load()
		if s&waitersBit != 0 || inflightOf(s) >= capOf(s) {
			return false
		}
		if b.state.CompareAndSwap(s, s+1) {
			return true
		}
	}
}

func (b *Breaker) acquireSlow(ctx context.Context) error {
	b.mu.Lock()
	for {
		s := b.state.Load()
		if s&waitersBit == 0 {
			if inflightOf(s) < capOf(s) {
				// A slot freed between the fast path and the lock.
				if b.state.CompareAndSwap(s, s+1) {
					b.mu.Unlock()
					return nil
				}
				continue
			}
		}
		if b.n >= b.queueDepth {
			b.mu.Unlock()
			return ErrQueueFull
		}
		if err := ctx.Err(); err != nil {
			b.mu.Unlock()
			return err
		}
		// Setting the bit may race with a lock-free Release that saw no
		// waiters; whichever CAS loses re-reads and decides again.
		if s&waitersBit != 0 || b.state.CompareAndSwap(s, s|waitersBit) {
			break
		}
	}
	w := waiterPool.Get().(*waiter)
	b.pushLocked(w)
	b.mu.Unlock()

	select {
	case <-w.ch:
		waiterPool.Put(w)
		return nil
	case <-ctx.Done():
	}

	b.mu.Lock()
	if w.queued {
		b.removeLocked(w)
		if b.n == 0 {
			b.commitLocked(false, -1) // clears the waiters bit
		}
		b.mu.Unlock()
		waiterPool.Put(w)
		return ctx.Err()
	}
	b.mu.Unlock()
	// A Release granted us the slot while ctx fired; its token is already in
	// the channel (sent under the mutex). Take it so the pooled waiter comes
	// back clean, and hand the slot on.
	<-w.ch
	waiterPool.Put(w)
	b.Release()
	return ctx.Err()
}

// Release gives back a slot taken by Acquire or TryAcquire, handing it
// directly to the longest waiter if there is one. It panics if no slot is
// held, as that means a caller released twice.
func (b *Breaker) Release() {
	for {
		s := b.state.Load()
		if s&waitersBit != 0 {
			b.mu.Lock()
			b.commitLocked(true, -1)
			b.mu.Unlock()
			return
		}
		if inflightOf(s) == 0 {
			panic("breaker: Release without a held slot")
		}
		if b.state.CompareAndSwap(s, s-1) {
			return
		}
	}
}

// SetCapacity changes the number of slots (the activator follows ready pods
// with it). Raising it admits waiters in order; lowering it lets current
// holders finish and admits no one until they are below the new capacity.
// n is clamped to 0..MaxCapacity: a capacity computed from a transiently
// wrong pod count must not take the data plane down.
func (b *Breaker) SetCapacity(n int) {
	n = min(max(n, 0), MaxCapacity)
	b.mu.Lock()
	b.commitLocked(false, n)
	b.mu.Unlock()
}

// Capacity returns the current number of slots.
func (b *Breaker) Capacity() int { return int(capOf(b.state.Load())) }

// InFlight returns how many callers hold a slot. After SetCapacity lowers the
// capacity it may exceed Capacity until holders release.
func (b *Breaker) InFlight() int { return int(inflightOf(b.state.Load())) }

// Waiting returns how many callers are queued. A caller counted here is in
// the queue: callers queued later are admitted after it.
func (b *Breaker) Waiting() int { return int(b.waiting.Load()) }

// commitLocked is the one place that changes the state word while callers
// may be queued: it applies a release and/or a new capacity (newCap < 0 keeps
// the current one), grants slots to as many head waiters as now fit, and
// sets the waiters bit to whether any remain. Must hold b.mu, which freezes
// the queue, so the CAS loop only races with lock-free paths that saw no
// waiters.
func (b *Breaker) commitLocked(release bool, newCap int) {
	for {
		s := b.state.Load()
		in, c := inflightOf(s), capOf(s)
		if release {
			if in == 0 {
				panic("breaker: Release without a held slot")
			}
			in--
		}
		if newCap >= 0 {
			c = uint64(newCap)
		}
		grant := 0
		if in < c {
			grant = int(min(c-in, uint64(b.n)))
		}
		in += uint64(grant)
		if !b.state.CompareAndSwap(s, pack(in, c, b.n > grant)) {
			continue
		}
		for ; grant > 0; grant-- {
			w := b.q.next
			b.removeLocked(w)
			w.ch <- struct{}{}
		}
		return
	}
}

func (b *Breaker) pushLocked(w *waiter) {
	w.prev, w.next = b.q.prev, &b.q
	b.q.prev.next = w
	b.q.prev = w
	w.queued = true
	b.n++
	b.waiting.Store(int64(b.n))
}

func (b *Breaker) removeLocked(w *waiter) {
	w.prev.next = w.next
	w.next.prev = w.prev
	w.prev, w.next = nil, nil
	w.queued = false
	b.n--
	b.waiting.Store(int64(b.n))
}
