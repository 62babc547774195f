package decider

import (
	"strings"
	"testing"
	"time"

	"github.com/swell-run/swell/pkg/autoscaling"
)

// sizedSpec is an adaptive service of four slots a pod, at the default
// 70% target (2.8 requests a pod).
func sizedSpec() autoscaling.Spec {
	return testSpec(func(s *autoscaling.Spec) {
		s.Class = autoscaling.ClassAdaptive
		s.ContainerConcurrency, s.Target = 4, 4
	})
}

// knowing is a decider that has learned the service time and the pods'
// start, with no pod: what a service at zero remembers.
func knowing(t *testing.T, sp autoscaling.Spec, service, startup time.Duration) *Decider {
	t.Helper()
	d := Resume(sp, at(0), 0)
	l := learned{service: service, startup: startup}
	if err := d.Remember(l.marshal()); err != nil {
		t.Fatal(err)
	}
	return d
}

// burst is an observation of a burst arriving at rate a second, with
// pending requests held at the activator (queued or being served through
// it) and as many in the service's windows.
func burst(sec float64, ready int, rate float64, pending int) Observation {
	o := obs(sec, ready, float64(pending), float64(pending))
	o.ActivatorPending = pending
	o.ArrivalsStable, o.ArrivalsPanic, o.HasArrivals = rate, rate, true
	return o
}

// A burst of 12 requests a second, 0.56 s each, meets a service at zero
// whose pods take 10 s to start. kpa reads the queue at the activator as
// concurrency and asks a pod per 2.8 queued requests, more at every tick
// while the first pods start. Sized by work, the ask is the pods that
// serve the arrivals (2.4) and drain, within one start, what is queued
// and what will queue until they are ready: 6, and it does not grow while
// they start, the queue growing as expected.
func TestSizedBurstAsksForTheWork(t *testing.T) {
	d := knowing(t, sizedSpec(), 560*time.Millisecond, 10*time.Second)
	kpa := Resume(testSpec(func(s *autoscaling.Spec) { s.ContainerConcurrency, s.Target = 4, 4 }), at(0), 0)
	var got, kpaGot []int
	for i, pending := range []int{12, 36, 60, 84, 108} {
		o := burst(float64(2*i+1), 0, 12, pending)
		dec := d.Decide(o)
		got = append(got, dec.Scale)
		kpaGot = append(kpaGot, kpa.Decide(o).Scale)
		if dec.InPanic {
			t.Errorf("at %v: sized by work, yet in panic", o.Now.Sub(t0))
		}
		if i == 0 && !strings.HasPrefix(dec.Reason, "work: ") {
			t.Errorf("reason %q, want it to name the work", dec.Reason)
		}
	}
	for i, n := range got {
		if n < 3 || n > 6 {
			t.Errorf("sized by work: %v pods over the start, want 3 to 6 throughout", got)
			break
		}
		if i > 0 && n != got[i-1] && got[i-1] == 6 {
			t.Errorf("sized by work: %v pods, want no more once 6 are starting", got)
		}
	}
	if last := kpaGot[len(kpaGot)-1]; last < 30 {
		t.Errorf("kpa asked for %v: the comparison expects it to pile on (39 at the end)", kpaGot)
	}
}

// After the burst the arrivals stop while the panic window still holds
// its load: kpa stays in panic at the burst's pods for a stable window;
// sized by work, the surplus is kept for one start (keeping it longer
// costs more than starting it again would) and then let go.
func TestSizedSurplusGoesAfterAStart(t *testing.T) {
	d := knowing(t, sizedSpec(), 560*time.Millisecond, 10*time.Second)
	var peak int
	sec := 1.0
	for pending := 12; pending <= 108; pending += 24 {
		peak = max(peak, d.Decide(burst(sec, 0, 12, pending)).Scale)
		sec += 2
	}
	// The pods are ready and have drained the queue; nothing arrives, and
	// the stable window keeps the burst's average.
	scales := map[float64]int{}
	ready := peak
	for ; sec <= 35; sec += 2 {
		o := obs(sec, ready, 8, 8)
		o.ArrivalsStable, o.ArrivalsPanic, o.HasArrivals = 2.4, 0, true
		scales[sec] = d.Decide(o).Scale
		ready = scales[sec]
	}
	if scales[11] != peak {
		t.Errorf("%d pods right after the burst, want the %d kept for a start", scales[11], peak)
	}
	// A start (10 s) after the last need, then halving a tick at most
	// (max-scale-down-rate 2): one pod left, for the idle plan, 20 s after.
	if scales[29] != 1 {
		t.Errorf("pods after the burst: %v; want 1 by 29 s, the surplus gone", scales)
	}
}

// Nothing served yet: the first pods are starting and the queue grows.
// Without a service time the queue says nothing of the work, so the
// decision holds the pods starting rather than read the queue as load.
func TestSizedWaitsForTheFirstPodsToServe(t *testing.T) {
	sp := sizedSpec()
	d := Resume(sp, at(0), 0)
	o := burst(0.5, 0, 0, 1)
	o.Poked = true
	if n := d.Decide(o).Scale; n != 1 {
		t.Fatalf("poke: %d pods, want 1", n)
	}
	for i, pending := range []int{20, 40, 60, 80} {
		dec := d.Decide(burst(float64(2*i+2), 0, 10, pending))
		if dec.Scale != 1 || !strings.HasPrefix(dec.Reason, "work unknown") {
			t.Fatalf("%d pending, first pod starting: %d pods (%q), want 1 held", pending, dec.Scale, dec.Reason)
		}
	}
	// The pod is ready and has served 4 requests at a time for 2 s, 16 in
	// all: a service time of 0.5 s, whatever the 76 still queued.
	o = burst(10, 1, 10, 80)
	o.Served, o.ServedRequests = 8, 16
	dec := d.Decide(o)
	if a := d.policy.(*adaptive); a.service != 500*time.Millisecond {
		t.Errorf("learned a service time of %v from the pods' figures, want 500ms", a.service)
	}
	if !strings.HasPrefix(dec.Reason, "work: ") || dec.Scale < 3 || dec.Scale > 8 {
		t.Errorf("once served: %d pods (%q), want the work's", dec.Scale, dec.Reason)
	}
}

// The service time comes from the pods' own figures: a queue at the
// activator, which the service-wide concurrency includes, does not
// lengthen it.
func TestServiceTimeFromThePods(t *testing.T) {
	d := knowing(t, sizedSpec(), 0, 2*time.Second)
	for sec := 2.0; sec <= 60; sec += 2 {
		o := burst(sec, 3, 8, 40)
		o.Stable, o.Panic = 52, 52
		// Over the 2 s: 16 requests at the pods, 2 busy on average.
		o.Served, o.ServedRequests = 4, 16
		d.Decide(o)
	}
	if a := d.policy.(*adaptive); a.service < 240*time.Millisecond || a.service > 260*time.Millisecond {
		t.Errorf("service time %v, want 250ms (the totals would say %v)", a.service, time.Duration(52/8.0*float64(time.Second)))
	}
}

// A rate that has not changed is taken from the stable window; one the
// panic window shows beyond Poisson noise, from the panic window.
func TestArrivalRate(t *testing.T) {
	pw := 6 * time.Second
	for _, c := range []struct{ stable, panic, want float64 }{
		{10, 10, 10},
		{10, 12, 10},    // 72 against 60 expected: within 2 × √60
		{10, 14, 14},    // 84: beyond
		{10, 8, 10},     // 48: within
		{10, 7, 7},      // 42: beyond
		{10, 0, 0},      // stopped
		{0, 0.25, 0},    // 1.5 in 6 s, nothing expected: within 2 × √1
		{0, 1, 1},       // 6 in 6 s: beyond
		{100, 105, 100}, // 630 against 600: within 2 × √600
	} {
		if got := arrivalRate(c.stable, c.panic, pw); got != c.want {
			t.Errorf("arrivalRate(%v, %v) = %v, want %v", c.stable, c.panic, got, c.want)
		}
	}
}

// A decision on the pods' pushed frames sizes for at least the requests
// the pods hold: a service time learned while the load rose (50 ms where
// requests take 200) asks for 1 pod for 40 a second, the 8 requests the
// pods hold ask for 3 at 2.8 a pod.
func TestSizedForWhatThePodsHold(t *testing.T) {
	d := knowing(t, sizedSpec(), 50*time.Millisecond, time.Second)
	o := burst(1, 1, 40, 0)
	if got := d.Decide(o).Scale; got != 1 {
		t.Fatalf("on the arrivals alone: %d pods, want 1", got)
	}
	o = burst(1.1, 1, 40, 0)
	o.InPods = 8
	if dec := d.Decide(o); dec.Scale != 3 || !strings.HasPrefix(dec.Reason, "work: 3 pods") {
		t.Fatalf("with the pods holding 8: %d pods (%q), want 3 by work", dec.Scale, dec.Reason)
	}
}
