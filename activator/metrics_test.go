package activator

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestRemovedServiceSeriesDeleted: a service that leaves the Source takes
// its series with it, and the others keep theirs, values and all.
func TestRemovedServiceSeriesDeleted(t *testing.T) {
	gone, kept := mustKey("default/gone"), mustKey("default/kept")
	e := newEnv(t, NewMemorySource(Service{Key: gone}, Service{Key: kept}), nil, nil)
	recv(t, e.a.Synced(), "the first sync")
	e.a.table.Load().byKey[kept].m.refused.Inc()
	perService := len(statusClasses) + 3 // requests by class, queued, in flight, refused
	if got := seriesByService(t, e.reg); got[gone.String()] != perService || got[kept.String()] != perService {
		t.Fatalf("series by service %v, want %d each", got, perService)
	}

	synced := *e.a.tableChanged.Load()
	e.src.Remove(gone)
	recv(t, synced, "the sync without default/gone")
	got := seriesByService(t, e.reg)
	if n := got[gone.String()]; n != 0 {
		t.Errorf("%d series of the removed service left, want none", n)
	}
	if n := got[kept.String()]; n != perService {
		t.Errorf("%d series of the remaining service, want %d", n, perService)
	}
	if n := metric(t, e.reg, "swell_activator_refused_callers_total", map[string]string{"service": kept.String()}); n != 1 {
		t.Errorf("remaining service's refused callers %v after another's removal, want 1", n)
	}
}

// seriesByService counts reg's series by their service label.
func seriesByService(t *testing.T, reg *prometheus.Registry) map[string]int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			for _, lp := range m.Label {
				if lp.GetName() == "service" {
					n[lp.GetValue()]++
				}
			}
		}
	}
	return n
}
