package scaler

import (
	"testing"

	"github.com/swell-run/swell/pkg/service"
)

var (
	svcA = NewTarget(service.Key{Namespace: "default", Name: "a"})
	svcB = NewTarget(service.Key{Namespace: "default", Name: "b"})
	svcC = NewTarget(service.Key{Namespace: "default", Name: "c"})
)

// get pops without blocking; the test fails if the queue is empty.
func mustGet(t *testing.T, q *queue, want *Target) {
	t.Helper()
	q.mu.Lock()
	empty := true
	for l := range q.lanes {
		if q.lanes[l].head < len(q.lanes[l].items) {
			empty = false
		}
	}
	q.mu.Unlock()
	if empty {
		t.Fatalf("queue empty, want %v", want.Key())
	}
	got, ok := q.get()
	if !ok || got != want {
		t.Fatalf("get = %v, %v; want %v", got.Key(), ok, want.Key())
	}
}

func queued(q *queue) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.dirty)
}

func TestQueueCoalesces(t *testing.T) {
	q := newQueue()
	q.add(svcA, false)
	q.add(svcB, false)
	q.add(svcA, false)
	if n := queued(q); n != 2 {
		t.Fatalf("queued = %d, want 2", n)
	}
	mustGet(t, q, svcA)
	// Added while processed: not handed out again until done.
	q.add(svcA, false)
	q.add(svcA, false)
	mustGet(t, q, svcB)
	q.mu.Lock()
	n := len(q.lanes[laneNormal].items) - q.lanes[laneNormal].head
	q.mu.Unlock()
	if n != 0 {
		t.Fatalf("a key in processing was queued: %d live entries", n)
	}
	q.done(svcA)
	mustGet(t, q, svcA)
	q.done(svcA)
	q.done(svcB)
	if n := queued(q); n != 0 {
		t.Fatalf("queued = %d after draining, want 0", n)
	}
}

func TestQueueUrgentFirstAndPromotion(t *testing.T) {
	q := newQueue()
	q.add(svcA, false)
	q.add(svcB, false)
	q.add(svcC, true)
	q.add(svcB, true) // promoted ahead of a
	mustGet(t, q, svcC)
	mustGet(t, q, svcB)
	mustGet(t, q, svcA)
	// The stale normal entry of b is skipped, not handed out twice.
	q.done(svcA)
	q.done(svcB)
	q.done(svcC)
	q.add(svcC, false)
	mustGet(t, q, svcC)
	q.done(svcC)
	if n := queued(q); n != 0 {
		t.Fatalf("queued = %d, want 0", n)
	}
}

func TestQueueForgetThenAddNeverDoubleHandsOut(t *testing.T) {
	q := newQueue()
	q.add(svcA, false)
	q.forget(svcA)
	q.add(svcA, false) // two entries for a now sit in the lane
	mustGet(t, q, svcA)
	q.add(svcA, false) // dirty again while processing
	// The second entry must not hand a out while it is being processed.
	q.add(svcB, false)
	mustGet(t, q, svcB)
	q.done(svcA)
	mustGet(t, q, svcA)
}

func TestQueueCloseWakesGet(t *testing.T) {
	q := newQueue()
	got := make(chan bool)
	go func() {
		_, ok := q.get()
		got <- ok
	}()
	q.close()
	if ok := <-got; ok {
		t.Fatal("get after close returned ok")
	}
	q.add(svcA, false)
	if n := queued(q); n != 0 {
		t.Fatalf("add after close queued %d", n)
	}
}
