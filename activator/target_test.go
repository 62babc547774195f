package activator

import "testing"

// TestUnchangedServiceNotRepublished: a source lists every service on any
// change; a service whose listing is the same keeps its routable pods
// without waking its waiting requests, and one whose concurrency changed
// publishes it.
func TestUnchangedServiceNotRepublished(t *testing.T) {
	p := newFakePod(t, "p1", true)
	hello := Service{Key: helloKey, Pods: []Pod{p.pod()}}
	e := newEnv(t, NewMemorySource(hello), nil, nil)
	e.waitRoutable(t, helloKey, 1)
	s := e.a.table.Load().byKey[helloKey]
	published := *s.changed.Load()

	// Another service appearing re-lists hello as it was.
	synced := *e.a.tableChanged.Load()
	e.src.Set(Service{Key: mustKey("default/other")})
	recv(t, synced, "sync of the new service")
	select {
	case <-published:
		t.Fatal("hello republished though nothing of it changed")
	default:
	}
	if n := s.routableCount(); n != 1 {
		t.Fatalf("hello has %d routable pods after an unrelated change, want 1", n)
	}

	hello.ContainerConcurrency = 2
	e.src.Set(hello)
	recv(t, published, "publication of the new concurrency")
	if got := s.br.Capacity(); got != 2 {
		t.Errorf("capacity %d after the concurrency became 2 on one pod, want 2", got)
	}
}
