package autoscaler

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/swell-run/swell/autoscaler/engine"
	"github.com/swell-run/swell/autoscaler/plan"
	"github.com/swell-run/swell/pkg/autoscaling"
	"github.com/swell-run/swell/pkg/service"
)

// memStore is a MemoryStore in memory.
type memStore struct {
	mu     sync.Mutex
	recall map[service.Key][]byte
	kept   map[service.Key][][]byte
}

func newMemStore() *memStore {
	return &memStore{recall: map[service.Key][]byte{}, kept: map[service.Key][][]byte{}}
}

func (m *memStore) Recall(k service.Key) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.recall[k]
}

func (m *memStore) Keep(k service.Key, mem []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.kept[k] = append(m.kept[k], mem)
}

func (m *memStore) keeps(k service.Key) [][]byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.kept[k]
}

func adaptiveSpec() autoscaling.Spec {
	sp := autoscaling.DefaultSpec()
	sp.Class = autoscaling.ClassAdaptive
	return sp
}

// A service's memory is recalled when the loop adds it, and a changed one
// is kept at most every KeepInterval; an unchanged one is not written
// again, and one that does not read is set aside with a warning.
func TestMemoryRecalledAndKept(t *testing.T) {
	h := newHarness(t)
	store := newMemStore()
	h.a.memory, h.a.keepEvery = store, 10*time.Second

	// A memory learned elsewhere: a service that measured a 4 s start.
	learner := engine.New(adaptiveSpec(), t0, 0)
	learner.Decide(engine.Inputs{Now: t0})                                // asks for its initial pod
	learner.Decide(engine.Inputs{Now: t0.Add(4 * time.Second), Ready: 1}) // ready 4 s later
	mem := learner.Memory()
	if mem == nil {
		t.Fatal("the learner learned nothing")
	}
	known, fresh, bad := key("known"), key("fresh"), key("bad")
	store.recall[known] = mem
	store.recall[bad] = []byte{0xff, 1, 2}
	for _, k := range []service.Key{known, fresh, bad} {
		// Being created: its initial pod asked for, not ready yet.
		h.be.Set(k, plan.Status{Desired: 1, Route: plan.RouteActivator})
		h.a.Upsert(k, adaptiveSpec())
	}
	h.step()
	if got := h.a.services[known].core.Memory(); !bytes.Equal(got, mem) {
		t.Errorf("known: memory %x, want the recalled %x", got, mem)
	}
	if got := h.a.services[bad].core.Memory(); got != nil {
		t.Errorf("bad: memory %x, want nothing learned", got)
	}
	if h.logs.FilterMessage("a kept memory does not read: learning afresh").Len() != 1 {
		t.Error("no warning for the memory that does not read")
	}

	// fresh's initial pod is ready 4 s on.
	for range 4 {
		h.step()
	}
	h.be.Set(fresh, plan.Status{Desired: 1, Ready: 1, Route: plan.RouteActivator})
	for range 10 {
		h.step()
	}
	if k := store.keeps(known); len(k) != 0 {
		t.Errorf("known: kept %x, unchanged since recalled", k)
	}
	// fresh scaled to its initial pod and saw it ready: it measured a
	// startup, and its memory is kept once.
	kept := store.keeps(fresh)
	if len(kept) != 1 || kept[0] == nil {
		t.Fatalf("fresh: kept %x, want one memory", kept)
	}
	for range 24 {
		h.step()
	}
	if got := store.keeps(fresh); len(got) != 1 {
		t.Errorf("fresh: kept %d times, want once while nothing changes", len(got))
	}
}
