package sim

import "time"

// eventKind orders events that fall on the same instant: a second closes
// before anything at its end counts toward the next one, completions and
// pods becoming ready are seen by a tick at the same instant, the
// executor's scheduled look at a service comes after the tick, and arrivals
// (which are not in the heap) come last.
type eventKind uint8

const (
	evSecond eventKind = iota
	evCompletion
	evReady
	evRoute
	evTick
	evRecheck
)

// event is a scheduled happening. Events that may be superseded (a pod's
// next completion, a pending route switch) carry the version of what they
// were computed from and are ignored when it has moved on.
type event struct {
	at      time.Duration
	kind    eventKind
	seq     uint64
	pod     *pod
	version uint64
}

func (a *event) before(b *event) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	if a.kind != b.kind {
		return a.kind < b.kind
	}
	return a.seq < b.seq
}

// eventHeap is a binary min-heap of events by time, kind and order of
// scheduling, so that runs are deterministic. Hand-written rather than
// container/heap so that pushes do not box events into interfaces.
type eventHeap struct {
	ev  []event
	seq uint64
}

func (h *eventHeap) push(e event) {
	h.seq++
	e.seq = h.seq
	h.ev = append(h.ev, e)
	i := len(h.ev) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h.ev[i].before(&h.ev[p]) {
			break
		}
		h.ev[i], h.ev[p] = h.ev[p], h.ev[i]
		i = p
	}
}

func (h *eventHeap) peek() (*event, bool) {
	if len(h.ev) == 0 {
		return nil, false
	}
	return &h.ev[0], true
}

func (h *eventHeap) pop() event {
	top := h.ev[0]
	last := len(h.ev) - 1
	h.ev[0] = h.ev[last]
	h.ev[last] = event{}
	h.ev = h.ev[:last]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(h.ev) && h.ev[l].before(&h.ev[m]) {
			m = l
		}
		if r < len(h.ev) && h.ev[r].before(&h.ev[m]) {
			m = r
		}
		if m == i {
			return top
		}
		h.ev[i], h.ev[m] = h.ev[m], h.ev[i]
		i = m
	}
}

// requestHeap holds a pod's requests in service, earliest finish first.
type requestHeap []*request

func (h *requestHeap) push(r *request) {
	*h = append(*h, r)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if s[i].tag >= s[p].tag {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *requestHeap) pop() *request {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s[last] = nil
	s = s[:last]
	*h = s
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(s) && s[l].tag < s[m].tag {
			m = l
		}
		if r < len(s) && s[r].tag < s[m].tag {
			m = r
		}
		if m == i {
			return top
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
}

// fifo is a queue of requests.
type fifo struct {
	q    []*request
	head int
}

func (f *fifo) len() int { return len(f.q) - f.head }

func (f *fifo) push(r *request) {
	if f.head > 0 && f.head == len(f.q) {
		// Empty: reuse the array from its start.
		f.q, f.head = f.q[:0], 0
	}
	f.q = append(f.q, r)
}

func (f *fifo) pop() *request {
	r := f.q[f.head]
	f.q[f.head] = nil
	f.head++
	if f.head > 1024 && f.head*2 > len(f.q) {
		// Mostly consumed: move the rest down so the array does not grow
		// without bound under a steady queue.
		n := copy(f.q, f.q[f.head:])
		clear(f.q[n:])
		f.q, f.head = f.q[:n], 0
	}
	return r
}
