package activator

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/swell-run/swell/pkg/breaker"
)

func testPods(inflight ...int64) []*pod {
	pods := make([]*pod, len(inflight))
	for i, n := range inflight {
		pods[i] = &pod{name: string(rune('a' + i))}
		pods[i].inflight.Store(n)
	}
	return pods
}

func names(ps ...*pod) string {
	s := ""
	for _, p := range ps {
		if p == nil {
			s += "-"
		} else {
			s += p.name
		}
	}
	return s
}

func TestPickFirstFillsInOrder(t *testing.T) {
	pods := testPods(0, 0, 0)
	var got []*pod
	for i := 0; i < 7; i++ {
		got = append(got, pickFirst(pods, 2))
	}
	if s := names(got...); s != "aabbcc-" {
		t.Errorf("picks %s, want aabbcc-", s)
	}
	pods[1].inflight.Add(-1)
	if p := pickFirst(pods, 2); p != pods[1] {
		t.Errorf("after b freed a slot: picked %s, want b", names(p))
	}
}

func TestPickRoundRobinSkipsFull(t *testing.T) {
	pods := testPods(0, 4, 0) // b is full at cc 4
	var next atomic.Uint64
	var got []*pod
	for i := 0; i < 4; i++ {
		got = append(got, pickRoundRobin(pods, 4, &next))
	}
	if s := names(got...); s != "acca" {
		t.Errorf("picks %s, want acca", s)
	}
	if p := pickRoundRobin(nil, 4, &next); p != nil {
		t.Errorf("no pods: picked %s", p.name)
	}
	full := testPods(4, 4)
	if p := pickRoundRobin(full, 4, &next); p != nil {
		t.Errorf("all full: picked %s", p.name)
	}
}

func TestPickTwoChoicesPrefersLessLoaded(t *testing.T) {
	// With two pods both are always compared: the less loaded wins.
	pods := testPods(5, 2)
	for i := 0; i < 3; i++ {
		if p := pickTwoChoices(pods); p != pods[1] {
			t.Fatalf("pick %d: %s, want b", i, p.name)
		}
	}
	// Now b has 5 too: from there the two stay within one of each other.
	for i := 0; i < 100; i++ {
		pickTwoChoices(pods)
	}
	if d := pods[0].inflight.Load() - pods[1].inflight.Load(); d < -1 || d > 1 {
		t.Errorf("loads %d and %d differ by more than one", pods[0].inflight.Load(), pods[1].inflight.Load())
	}
	if p := pickTwoChoices(nil); p != nil {
		t.Errorf("no pods: picked %s", p.name)
	}
	if p := pickTwoChoices(testPods(7)); p == nil || p.inflight.Load() != 8 {
		t.Errorf("one pod: not picked and reserved")
	}
}

func TestCapacity(t *testing.T) {
	for _, tc := range []struct{ pods, cc, peers, want int }{
		{0, 0, 1, 0}, {0, 5, 1, 0}, {1, 0, 1, breaker.MaxCapacity}, {3, 0, 3, breaker.MaxCapacity},
		{1, 1, 1, 1}, {3, 10, 1, 30}, {1 << 20, 1 << 20, 1, breaker.MaxCapacity},
		// Shared among activators, rounded up: each may always send one.
		{3, 10, 3, 10}, {1, 10, 3, 4}, {1, 1, 3, 1}, {2, 5, 0, 10}, {0, 5, 3, 0},
	} {
		if got := capacity(tc.pods, tc.cc, tc.peers); got != tc.want {
			t.Errorf("capacity(%d pods, cc %d, %d activators) = %d, want %d", tc.pods, tc.cc, tc.peers, got, tc.want)
		}
	}
}

// TestServicePolicyByConcurrency: the service picks the policy from cc.
func TestServicePolicyByConcurrency(t *testing.T) {
	s := &target{}
	pods := testPods(0, 0, 0)
	s.routable.Store(&pods)
	s.cc.Store(3) // first available
	if got := names(s.pick(), s.pick(), s.pick(), s.pick()); got != "aaab" {
		t.Errorf("cc 3: %s, want aaab", got)
	}
	pods = testPods(0, 0, 0)
	s.routable.Store(&pods)
	s.cc.Store(4) // round robin
	if got := names(s.pick(), s.pick(), s.pick(), s.pick()); got != "bcab" && got != "abca" && got != "cabc" {
		t.Errorf("cc 4: %s, want a rotation", got)
	}
}

// TestBalance: an admitted request goes on holding a slot on a pod, given
// back once done; the first pod found ends its wait, observed once however
// many attempts it takes, and as a cold start only if it arrived cold.
func TestBalance(t *testing.T) {
	for _, cold := range []bool{false, true} {
		s := newStageEnv(t, 1, 1, nil)
		p := s.routablePods()[0]
		h := &balance{clk: s.clk, metrics: s.a.metrics, next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if e := exchangeOf(r); e.pod != p {
				t.Errorf("sent to %v, want %s", e.pod, p.name)
			}
			if n := p.inflight.Load(); n != 1 {
				t.Errorf("%d in flight at the pod while the request is there, want 1", n)
			}
		})}
		rec, e, r := s.exchange(t, t.Context())
		e.arrived, e.cold = s.clk.Now(), cold
		s.clk.Step(time.Second)
		h.ServeHTTP(e, r)
		h.ServeHTTP(e, r) // a retry
		if rec.Code != http.StatusOK || e.noPod {
			t.Errorf("answered %d, noPod %v; want it sent to the pod", rec.Code, e.noPod)
		}
		if n := p.inflight.Load(); n != 0 {
			t.Errorf("%d in flight at the pod once done, want 0", n)
		}
		if n := metric(t, s.reg, "swell_activator_queue_wait_seconds", nil); n != 1 {
			t.Errorf("%v queue waits observed, want 1", n)
		}
		want := 0.0
		if cold {
			want = 1
		}
		if n := metric(t, s.reg, "swell_activator_cold_start_seconds", nil); n != want {
			t.Errorf("cold %v: %v cold starts observed, want %v", cold, n, want)
		}
	}
}

// TestBalanceNoFreeSlot: with every pod's slots taken the request does not
// go on; it notes so, with the signal of the next change of pods.
func TestBalanceNoFreeSlot(t *testing.T) {
	s := newStageEnv(t, 1, 1, nil)
	s.routablePods()[0].inflight.Store(1)
	h := &balance{clk: s.clk, metrics: s.a.metrics, next: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		t.Error("sent on with no free slot")
	})}
	_, e := s.serve(t, h)
	if !e.noPod || e.pod != nil || e.podsChanged != *s.t.changed.Load() {
		t.Errorf("noPod %v, pod %v, signal current %v; want true, none, true", e.noPod, e.pod, e.podsChanged == *s.t.changed.Load())
	}
	if n := metric(t, s.reg, "swell_activator_queue_wait_seconds", nil); n != 0 {
		t.Errorf("%v queue waits observed without a pod, want 0", n)
	}
}

// peerSource is a MemorySource that says how many activators serve.
type peerSource struct {
	*MemorySource
	n atomic.Int64
}

func (p *peerSource) Peers() int { return int(p.n.Load()) }

// TestCapacitySharedAmongActivators: with three activators serving a
// service, each admits a third of its pods' slots (rounded up), so that
// together they do not send the pods three times what they take; when the
// count changes, the share follows.
func TestCapacitySharedAmongActivators(t *testing.T) {
	pods := []Pod{newFakePod(t, "p1", true).pod(), newFakePod(t, "p2", true).pod()}
	src := &peerSource{MemorySource: NewMemorySource(Service{Key: helloKey, ContainerConcurrency: 3, Pods: pods})}
	src.n.Store(3)
	e := newEnv(t, src.MemorySource, func(c *Config) { c.Source = src }, nil)
	e.waitRoutable(t, helloKey, 2)
	tg := e.a.table.Load().byKey[helloKey]
	if c := tg.br.Capacity(); c != 2 {
		t.Errorf("capacity with 3 activators: %d, want ceil(2×3/3) = 2", c)
	}
	src.n.Store(1)
	src.Set(Service{Key: helloKey, ContainerConcurrency: 3, Pods: pods}) // signals the change
	for {
		ch := *tg.changed.Load()
		if tg.br.Capacity() == 6 {
			break
		}
		recv(t, ch, "the capacity to follow the activator count")
	}
}
