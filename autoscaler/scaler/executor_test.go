package scaler_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/swell-run/swell/autoscaler/decider"
	"github.com/swell-run/swell/autoscaler/plan"
	. "github.com/swell-run/swell/autoscaler/scaler"
	"github.com/swell-run/swell/autoscaler/scaler/scalertest"
	"github.com/swell-run/swell/pkg/service"
)

var (
	hello = service.Key{Namespace: "default", Name: "hello"}
	svcX  = service.Key{Namespace: "default", Name: "x"}
	svcY  = service.Key{Namespace: "default", Name: "y"}
)

// guard bounds every wait on the executor, so a bug fails the test instead
// of hanging it. It is never what the test waits for.
const guard = 10 * time.Second

type result struct {
	svc   service.Key
	after time.Duration
	err   error
}

type harness struct {
	t      *testing.T
	clk    *clocktesting.FakeClock
	b      *scalertest.Backend
	e      *Executor
	done   chan result
	events chan Event
	// targets are the services' Targets, as the autoscaler keeps them.
	targets map[service.Key]*Target
}

// tgt returns svc's Target, made on first use.
func (h *harness) tgt(svc service.Key) *Target {
	t := h.targets[svc]
	if t == nil {
		t = NewTarget(svc)
		h.targets[svc] = t
	}
	return t
}

// newHarness starts an executor on a fake clock and a fake backend. Every
// reconcile reports on h.done, every event on h.events.
func newHarness(t *testing.T, opts Config) *harness {
	t.Helper()
	h := &harness{
		t:       t,
		clk:     clocktesting.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)),
		b:       scalertest.NewBackend(),
		done:    make(chan result, 1000),
		events:  make(chan Event, 1000),
		targets: make(map[service.Key]*Target),
	}
	opts.Clock = h.clk
	opts.OnEvent = func(ev Event) { h.events <- ev }
	opts.OnReconcile = func(svc service.Key, after time.Duration, err error) { h.done <- result{svc, after, err} }
	opts.Backend = h.b
	h.e = mustNew(t, opts)
	h.e.Start()
	t.Cleanup(h.e.Stop)
	return h
}

// wait returns the next finished reconcile.
func (h *harness) wait() result {
	h.t.Helper()
	select {
	case r := <-h.done:
		return r
	case <-time.After(guard):
		h.t.Fatal("no reconcile finished")
		return result{}
	}
}

// update gives a decision and waits for the reconcile it causes.
func (h *harness) update(svc service.Key, d decider.Decision) result {
	h.t.Helper()
	h.e.Update(h.tgt(svc), d)
	return h.wait()
}

// step moves the clock and waits for the reconcile a timer causes.
func (h *harness) step(d time.Duration) result {
	h.t.Helper()
	h.clk.Step(d)
	return h.wait()
}

func (h *harness) writes(want ...string) {
	h.t.Helper()
	var got []string
	for _, c := range h.b.Writes() {
		got = append(got, c.String())
	}
	if !reflect.DeepEqual(got, want) {
		h.t.Fatalf("backend writes:\n got %q\nwant %q", got, want)
	}
}

func (h *harness) noEvents() {
	h.t.Helper()
	select {
	case ev := <-h.events:
		h.t.Fatalf("unexpected event %v", ev)
	default:
	}
}

func (h *harness) event(want string) {
	h.t.Helper()
	select {
	case ev := <-h.events:
		if got := ev.String(); got != want {
			h.t.Fatalf("event %q, want %q", got, want)
		}
	default:
		h.t.Fatalf("no event, want %q", want)
	}
}

func (h *harness) status(svc service.Key) plan.Status {
	s, ok := h.b.Get(svc)
	if !ok {
		h.t.Fatalf("%v not in backend", svc)
	}
	return s
}

func mustNew(tb testing.TB, cfg Config) *Executor {
	tb.Helper()
	e, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return e
}

func scale(n int, reason string) decider.Decision {
	return decider.Decision{Scale: n, Desired: n, ExcessBurstCapacity: 100, Reason: reason}
}

func TestDedupe(t *testing.T) {
	h := newHarness(t, Config{})
	h.b.Set(hello, plan.Status{Desired: 3, Ready: 3, Route: plan.RoutePods})

	r := h.update(hello, scale(3, "stable"))
	if r.err != nil || r.after != 0 {
		t.Fatalf("reconcile = %+v, want no error, nothing to wait for", r)
	}
	h.writes()
	h.noEvents()

	h.update(hello, scale(4, "stable"))
	h.writes("scale default/hello 4")
	h.event("default/hello: scale 3→4 (stable)")

	// The same decision again, on the next tick: nothing to do.
	h.update(hello, scale(4, "stable"))
	h.writes("scale default/hello 4")
	h.noEvents()
	if n := len(h.b.Calls()); n != 4 {
		t.Fatalf("%d backend calls, want 4 (3 status, 1 scale)", n)
	}
}

func TestCoalescesUnderSlowBackend(t *testing.T) {
	h := newHarness(t, Config{})
	h.b.Set(hello, plan.Status{Desired: 1, Ready: 1, Route: plan.RoutePods})
	entered, release := make(chan struct{}), make(chan struct{})
	h.b.SetHook(func(ctx context.Context, c scalertest.Call) error {
		if c.Op == scalertest.OpSetScale && c.Replicas == 2 {
			entered <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})

	h.e.Update(h.tgt(hello), scale(2, "stable"))
	<-entered
	// While the backend is slow, decisions keep coming: only the newest
	// may be applied next, and never by a second worker at once.
	for n := 3; n <= 6; n++ {
		h.e.Update(h.tgt(hello), scale(n, fmt.Sprint("tick ", n)))
	}
	close(release)
	h.wait()
	h.wait()
	h.writes("scale default/hello 2", "scale default/hello 6")
	h.event("default/hello: scale 1→2 (stable)")
	h.event("default/hello: scale 2→6 (tick 6)")
	if n := len(h.b.Calls()); n != 4 {
		t.Fatalf("%d backend calls, want 4: %v", n, h.b.Calls())
	}
}

func TestRateLimit(t *testing.T) {
	h := newHarness(t, Config{Rules: plan.Rules{ChangeInterval: time.Second, ChangeBurst: 2, DownHold: -1}})
	h.b.Set(hello, plan.Status{Desired: 1, Ready: 1, Route: plan.RoutePods})

	h.update(hello, scale(2, "a"))
	h.update(hello, scale(3, "b"))
	// The burst is spent: the next change waits for a token.
	if r := h.update(hello, scale(4, "c")); r.after != time.Second {
		t.Fatalf("after = %v, want 1s", r.after)
	}
	h.writes("scale default/hello 2", "scale default/hello 3")

	h.clk.Step(500 * time.Millisecond)
	// A newer decision half-way: still limited, and it replaces 4.
	if r := h.update(hello, scale(5, "d")); r.after != 500*time.Millisecond {
		t.Fatalf("after = %v, want 500ms", r.after)
	}
	h.writes("scale default/hello 2", "scale default/hello 3")

	// One timer is pending, not two.
	if n := h.clk.Waiters(); n != 1 {
		t.Fatalf("%d timers pending, want 1", n)
	}
	h.step(500 * time.Millisecond)
	h.writes("scale default/hello 2", "scale default/hello 3", "scale default/hello 5")

	// Down is limited alike.
	if r := h.update(hello, scale(1, "e")); r.after != time.Second {
		t.Fatalf("after = %v, want 1s", r.after)
	}
	h.step(time.Second)
	h.writes("scale default/hello 2", "scale default/hello 3", "scale default/hello 5", "scale default/hello 1")
}

func TestScaleFromZeroBypassesLimits(t *testing.T) {
	// One change an hour, and a scale-down held an hour after a scale-up.
	h := newHarness(t, Config{Rules: plan.Rules{ChangeInterval: time.Hour, ChangeBurst: 1, DownHold: time.Hour}})
	h.b.Set(hello, plan.Status{Desired: 1, Ready: 1, Route: plan.RouteActivator})

	h.update(hello, decider.Decision{Scale: 0, NeedActivator: true, Reason: "idle"})
	h.writes("scale default/hello 0")

	// A request at the activator: no token is left, yet it goes now.
	r := h.update(hello, decider.Decision{Scale: 1, NeedActivator: true, Reason: "poke"})
	if r.after != 0 {
		t.Fatalf("after = %v, want 0", r.after)
	}
	h.writes("scale default/hello 0", "scale default/hello 1")
	h.event("default/hello: scale 1→0 (idle)")
	h.event("default/hello: scale 0→1 (poke)")

	// An ordinary scale-up still waits for its token.
	if r := h.update(hello, decider.Decision{Scale: 2, NeedActivator: true}); r.after <= 0 {
		t.Fatalf("scale-up not rate limited: after = %v", r.after)
	}
	// Scaled to zero by hand meanwhile: waking it does not wait either.
	h.b.Set(hello, plan.Status{Desired: 0, Route: plan.RouteActivator})
	h.update(hello, decider.Decision{Scale: 2, NeedActivator: true, Reason: "panic"})
	h.writes("scale default/hello 0", "scale default/hello 1", "scale default/hello 2")
}

func TestScaleToZeroWaitsForActivator(t *testing.T) {
	h := newHarness(t, Config{})
	h.b.SetHoldRoutes(true)
	h.b.Set(hello, plan.Status{Desired: 1, Ready: 1, Route: plan.RoutePods})
	zero := decider.Decision{Scale: 0, NeedActivator: true, Reason: "scale to zero after 30s idle"}

	// The activator is asked for; replicas stay until it is in the path.
	r := h.update(hello, zero)
	if r.after != plan.DefaultRoutePoll {
		t.Fatalf("after = %v, want the route poll %v", r.after, plan.DefaultRoutePoll)
	}
	h.writes("route default/hello activator")
	h.event("default/hello: route pods→activator (before scale to zero)")

	// Not confirmed yet at the poll: still 1, and no second request.
	h.step(plan.DefaultRoutePoll)
	h.writes("route default/hello activator")
	if s := h.status(hello); s.Desired != 1 {
		t.Fatalf("desired = %d before the activator was confirmed", s.Desired)
	}

	h.b.ConfirmRoute(hello)
	h.step(plan.DefaultRoutePoll)
	h.writes("route default/hello activator", "scale default/hello 0")
	h.event("default/hello: scale 1→0 (scale to zero after 30s idle)")
}

func TestZeroWaitsOutPendingSwitchToPods(t *testing.T) {
	h := newHarness(t, Config{})
	h.b.SetHoldRoutes(true)
	// The activator is in effect, but a switch to the pods is pending: it
	// would take the activator out right after a scale to zero.
	h.b.Set(hello, plan.Status{Desired: 1, Ready: 1, Route: plan.RouteActivator, Requested: plan.RoutePods})
	if s := h.status(hello); s.ActivatorInPath() {
		t.Fatal("ActivatorInPath with a switch to the pods pending")
	}
	zero := decider.Decision{Scale: 0, NeedActivator: true, Reason: "idle"}
	if r := h.update(hello, zero); r.after != plan.DefaultRoutePoll {
		t.Fatalf("after = %v, want a poll", r.after)
	}
	h.writes("route default/hello activator")
	h.step(plan.DefaultRoutePoll)
	h.writes("route default/hello activator", "scale default/hello 0")
}

func TestRequestCancelsPendingZero(t *testing.T) {
	h := newHarness(t, Config{})
	h.b.SetHoldRoutes(true)
	h.b.Set(hello, plan.Status{Desired: 1, Ready: 1, Route: plan.RoutePods})

	h.update(hello, decider.Decision{Scale: 0, NeedActivator: true, Reason: "idle"})
	h.writes("route default/hello activator")

	// A request arrives before the activator is confirmed: the decider
	// says 1 again. Confirmation then must not lead to zero.
	h.update(hello, decider.Decision{Scale: 1, NeedActivator: true, Reason: "poke"})
	h.b.ConfirmRoute(hello)
	h.step(plan.DefaultRoutePoll)
	h.writes("route default/hello activator")
	if s := h.status(hello); s.Desired != 1 || s.Route != plan.RouteActivator {
		t.Fatalf("status = %+v, want 1 replica behind the activator", s)
	}
}

func TestNewerDecisionBeatsZeroInFlight(t *testing.T) {
	h := newHarness(t, Config{})
	h.b.Set(hello, plan.Status{Desired: 1, Ready: 1, Route: plan.RouteActivator})
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h.b.SetHook(func(ctx context.Context, c scalertest.Call) error {
		if c.Op == scalertest.OpStatus {
			once.Do(func() {
				entered <- struct{}{}
				<-release
			})
		}
		return nil
	})
	// The zero reconcile is reading the backend when the request arrives.
	h.e.Update(h.tgt(hello), decider.Decision{Scale: 0, NeedActivator: true, Reason: "idle"})
	<-entered
	h.e.Update(h.tgt(hello), decider.Decision{Scale: 1, NeedActivator: true, Reason: "poke"})
	close(release)
	h.wait()
	h.wait()
	h.writes()
	h.noEvents()
}

func TestDirectToPodsOnlyOnceReady(t *testing.T) {
	h := newHarness(t, Config{})
	h.b.Set(hello, plan.Status{Desired: 0, Route: plan.RouteActivator})
	h.b.SetHook(func(ctx context.Context, c scalertest.Call) error {
		if c.Op == scalertest.OpSetRoute && c.Route == plan.RoutePods {
			if s, _ := h.b.Get(c.Service); s.Ready == 0 {
				t.Errorf("activator taken out of the path with no ready pod: %+v", s)
			}
		}
		return nil
	})
	direct := decider.Decision{Scale: 2, NeedActivator: false, ExcessBurstCapacity: 50, Reason: "stable"}

	r := h.update(hello, direct)
	h.writes("scale default/hello 2")
	if r.after != plan.DefaultRoutePoll {
		t.Fatalf("after = %v, want a poll for ready pods", r.after)
	}
	h.step(plan.DefaultRoutePoll)
	h.writes("scale default/hello 2")

	h.b.SetReady(hello, 1)
	h.step(plan.DefaultRoutePoll)
	h.writes("scale default/hello 2", "route default/hello pods")
	h.event("default/hello: scale 0→2 (stable)")
	h.event("default/hello: route activator→pods (excess burst capacity 50)")

	// Asked and pending: not asked again on the next tick.
	h.b.SetHoldRoutes(true)
	h.update(hello, direct)
	h.writes("scale default/hello 2", "route default/hello pods")
}

func TestResyncOnBackendChange(t *testing.T) {
	h := newHarness(t, Config{Rules: plan.Rules{RoutePoll: time.Hour}})
	h.b.OnChange(func(k service.Key) { h.e.Resync(h.tgt(k)) })
	h.b.Set(hello, plan.Status{Desired: 0, Route: plan.RouteActivator})
	h.wait() // the Set itself: no decision yet, nothing done
	h.update(hello, decider.Decision{Scale: 1, ExcessBurstCapacity: 10})
	// A pod becomes ready: the backend says so, no poll needed.
	h.b.SetReady(hello, 1)
	h.wait()
	h.writes("scale default/hello 1", "route default/hello pods")
}

func TestAntiThrash(t *testing.T) {
	h := newHarness(t, Config{Rules: plan.Rules{DownHold: 10 * time.Second, ChangeInterval: -1}})
	h.b.Set(hello, plan.Status{Desired: 2, Ready: 2, Route: plan.RoutePods})

	h.update(hello, scale(4, "up"))
	// Down right after up is held for DownHold, then the newest decision
	// is applied.
	if r := h.update(hello, scale(3, "down")); r.after != 10*time.Second {
		t.Fatalf("after = %v, want 10s", r.after)
	}
	h.clk.Step(5 * time.Second)
	if r := h.update(hello, scale(2, "down more")); r.after != 5*time.Second {
		t.Fatalf("after = %v, want 5s", r.after)
	}
	h.writes("scale default/hello 4")
	h.step(5 * time.Second)
	h.writes("scale default/hello 4", "scale default/hello 2")

	// Up is never held.
	h.update(hello, scale(5, "up again"))
	h.writes("scale default/hello 4", "scale default/hello 2", "scale default/hello 5")

	// The activator out of the path is held alike after it went in.
	h.update(hello, decider.Decision{Scale: 5, NeedActivator: true, ExcessBurstCapacity: -30, Reason: "burst"})
	if r := h.update(hello, scale(5, "calm")); r.after != 10*time.Second {
		t.Fatalf("after = %v, want 10s", r.after)
	}
	h.step(10 * time.Second)
	h.writes("scale default/hello 4", "scale default/hello 2", "scale default/hello 5",
		"route default/hello activator", "route default/hello pods")
}

// TestHeldChangeKeepsItsReason: a change held by DownHold is reported with
// the reason of the decision that asked for it, not of the latest one.
func TestHeldChangeKeepsItsReason(t *testing.T) {
	h := newHarness(t, Config{Rules: plan.Rules{DownHold: 10 * time.Second, ChangeInterval: -1}})
	h.b.Set(hello, plan.Status{Desired: 1, Ready: 1, Route: plan.RoutePods, Requested: plan.RoutePods})
	h.update(hello, scale(3, "up"))
	h.event("default/hello: scale 1→3 (up)")
	if r := h.update(hello, scale(1, "stable at target 70")); r.after != 10*time.Second {
		t.Fatalf("after = %v, want 10s", r.after)
	}
	h.clk.Step(5 * time.Second)
	h.update(hello, scale(1, "stable: max-scale-down-rate limits to 1"))
	h.step(5 * time.Second)
	h.event("default/hello: scale 3→1 (stable at target 70)")
}

func TestManualChangeOverwritten(t *testing.T) {
	h := newHarness(t, Config{})
	h.b.Set(hello, plan.Status{Desired: 3, Ready: 3, Route: plan.RoutePods})
	h.update(hello, scale(3, "stable"))
	h.writes()

	// Someone runs `kubectl scale --replicas=7`: the next decision puts
	// it back, saying so.
	h.b.Set(hello, plan.Status{Desired: 7, Ready: 7, Route: plan.RoutePods})
	h.update(hello, scale(3, "stable"))
	h.writes("scale default/hello 3")
	h.event("default/hello: scale 7→3 (stable; replicas had been set to 7 outside the autoscaler)")

	// By hand to zero: it is a wake-up, applied at once.
	h.b.Set(hello, plan.Status{Desired: 0, Route: plan.RouteActivator})
	h.update(hello, scale(3, "stable"))
	h.writes("scale default/hello 3", "scale default/hello 3")
}

func TestRetriesWithBackoff(t *testing.T) {
	// One worker, so a FIFO queue makes the order of reconciles certain.
	h := newHarness(t, Config{Workers: 1, RetryBase: 100 * time.Millisecond, RetryMax: 400 * time.Millisecond})
	h.b.Set(hello, plan.Status{Desired: 1, Ready: 1, Route: plan.RoutePods})
	h.b.Set(svcX, plan.Status{Desired: 1, Ready: 1, Route: plan.RoutePods})
	boom := errors.New("boom")
	var failing atomic.Bool
	failing.Store(true)
	var statusCalls atomic.Int32
	h.b.SetHook(func(ctx context.Context, c scalertest.Call) error {
		if c.Op == scalertest.OpStatus {
			statusCalls.Add(1)
		}
		if c.Op == scalertest.OpSetScale && failing.Load() {
			return boom
		}
		return nil
	})

	r := h.update(hello, scale(3, "stable"))
	if !errors.Is(r.err, boom) || r.after != 100*time.Millisecond {
		t.Fatalf("reconcile = %+v, want boom, retry in 100ms", r)
	}
	h.event("default/hello: error: set scale to 3: boom (retry in 100ms)")

	// A new decision while backing off waits for the retry: the next
	// reconcile is another service's, given later.
	h.e.Update(h.tgt(hello), scale(4, "stable"))
	if r := h.update(svcX, scale(1, "stable")); r.svc != svcX {
		t.Fatalf("%v reconciled during its backoff", r.svc)
	}
	for _, want := range []time.Duration{200, 400, 400} {
		r = h.step(r.after)
		if !errors.Is(r.err, boom) || r.after != want*time.Millisecond {
			t.Fatalf("retry = %+v, want boom, next in %v", r, want*time.Millisecond)
		}
	}
	if n := statusCalls.Load(); n != 5 {
		t.Fatalf("%d reconciles, want 4: a decision during backoff retried early", n)
	}
	failing.Store(false)
	h.step(400 * time.Millisecond)
	h.writes("scale default/hello 4")
}

func TestWakeSkipsBackoff(t *testing.T) {
	h := newHarness(t, Config{RetryBase: time.Hour})
	h.b.Set(hello, plan.Status{Desired: 0, Route: plan.RouteActivator})
	var fail atomic.Bool
	fail.Store(true)
	h.b.SetHook(func(ctx context.Context, c scalertest.Call) error {
		if c.Op == scalertest.OpSetScale && fail.Load() {
			return errors.New("conflict")
		}
		return nil
	})
	if r := h.update(hello, decider.Decision{Scale: 1, NeedActivator: true}); r.err == nil {
		t.Fatal("want an error")
	}
	fail.Store(false)
	// Another request at the activator: no waiting out the hour.
	h.update(hello, decider.Decision{Scale: 1, NeedActivator: true, Reason: "poke"})
	h.writes("scale default/hello 1")
}

func TestUnknownService(t *testing.T) {
	h := newHarness(t, Config{})
	r := h.update(hello, scale(1, "stable"))
	if !errors.Is(r.err, ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", r.err)
	}
	ev := <-h.events
	if ev.Kind != EventError || !strings.Contains(ev.String(), "service not found") {
		t.Fatalf("event = %v", ev)
	}
}

func TestConcurrentAcrossServicesBounded(t *testing.T) {
	const workers = 3
	h := newHarness(t, Config{Workers: workers})
	var inFlight, peak atomic.Int32
	entered := make(chan service.Key, 10)
	release := make(chan struct{})
	h.b.SetHook(func(ctx context.Context, c scalertest.Call) error {
		if c.Op != scalertest.OpSetScale {
			return nil
		}
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		entered <- c.Service
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	var svcs []service.Key
	for i := range 5 {
		svc := service.Key{Namespace: "default", Name: fmt.Sprint("s", i)}
		svcs = append(svcs, svc)
		h.b.Set(svc, plan.Status{Desired: 1, Ready: 1, Route: plan.RoutePods})
	}
	for _, svc := range svcs {
		h.e.Update(h.tgt(svc), scale(2, "stable"))
	}
	// As many slow calls at once as there are workers: services do not
	// wait for each other...
	for range workers {
		select {
		case <-entered:
		case <-time.After(guard):
			t.Fatal("services were not reconciled concurrently")
		}
	}
	// ...and no more.
	close(release)
	for range len(svcs) {
		h.wait()
	}
	if p := peak.Load(); p != workers {
		t.Fatalf("peak concurrency %d, want %d", p, workers)
	}
	for _, svc := range svcs {
		if s := h.status(svc); s.Desired != 2 {
			t.Fatalf("%v: desired %d, want 2", svc, s.Desired)
		}
	}
}

func TestUrgentWakeJumpsTheQueue(t *testing.T) {
	h := newHarness(t, Config{Workers: 1})
	entered, release := make(chan struct{}), make(chan struct{})
	h.b.SetHook(func(ctx context.Context, c scalertest.Call) error {
		if c.Op == scalertest.OpSetScale && c.Service == svcX {
			entered <- struct{}{}
			<-release
		}
		return nil
	})
	for _, svc := range []service.Key{svcX, svcY, hello} {
		h.b.Set(svc, plan.Status{Desired: 1, Ready: 1, Route: plan.RouteActivator})
	}
	h.b.Set(hello, plan.Status{Desired: 0, Route: plan.RouteActivator})
	// Learn that hello is at zero.
	h.update(hello, decider.Decision{Scale: 0, NeedActivator: true})

	h.e.Update(h.tgt(svcX), scale(2, "stable")) // occupies the only worker
	<-entered
	h.e.Update(h.tgt(svcY), scale(2, "stable"))
	h.e.Update(h.tgt(hello), decider.Decision{Scale: 1, NeedActivator: true, Reason: "poke"})
	close(release)
	var order []service.Key
	for range 3 {
		order = append(order, h.wait().svc)
	}
	if want := []service.Key{svcX, hello, svcY}; !reflect.DeepEqual(order, want) {
		t.Fatalf("order %v, want %v", order, want)
	}
}

func TestDecisionsBeforeStart(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	b := scalertest.NewBackend()
	b.Set(hello, plan.Status{Desired: 1, Ready: 1, Route: plan.RoutePods})
	done := make(chan struct{}, 1)
	e := mustNew(t, Config{Backend: b, Clock: clk, OnReconcile: func(service.Key, time.Duration, error) { done <- struct{}{} }})
	e.Update(NewTarget(hello), scale(2, "early"))
	e.Start()
	defer e.Stop()
	select {
	case <-done:
	case <-time.After(guard):
		t.Fatal("decision given before Start never applied")
	}
	if s, _ := b.Get(hello); s.Desired != 2 {
		t.Fatalf("desired = %d, want 2", s.Desired)
	}
}

func TestForget(t *testing.T) {
	h := newHarness(t, Config{})
	h.b.SetHoldRoutes(true)
	h.b.Set(hello, plan.Status{Desired: 1, Ready: 1, Route: plan.RoutePods})
	h.update(hello, decider.Decision{Scale: 0, NeedActivator: true})
	if !h.clk.HasWaiters() {
		t.Fatal("no poll scheduled")
	}
	h.e.Forget(h.tgt(hello))
	if h.clk.HasWaiters() {
		t.Fatal("Forget left a timer")
	}
	h.e.Resync(h.tgt(hello)) // no decision any more: nothing to do
	h.wait()
	h.writes("route default/hello activator")
}

func TestStopWaitsForWorkersAndLeaksNothing(t *testing.T) {
	base := runtime.NumGoroutine()
	clk := clocktesting.NewFakeClock(time.Now())
	b := scalertest.NewBackend()
	b.SetHoldRoutes(true)
	b.Set(svcX, plan.Status{Desired: 1, Ready: 1, Route: plan.RoutePods})
	b.Set(svcY, plan.Status{Desired: 1, Ready: 1, Route: plan.RoutePods})
	entered := make(chan struct{})
	var cancelled atomic.Bool
	b.SetHook(func(ctx context.Context, c scalertest.Call) error {
		if c.Op == scalertest.OpSetScale && c.Service == svcX {
			close(entered)
			<-ctx.Done() // a backend call that never returns on its own
			cancelled.Store(true)
			return ctx.Err()
		}
		return nil
	})
	done := make(chan struct{}, 10)
	e := mustNew(t, Config{Backend: b, Clock: clk, Workers: 4, OnReconcile: func(service.Key, time.Duration, error) { done <- struct{}{} }})
	e.Start()
	tx, ty := NewTarget(svcX), NewTarget(svcY)
	e.Update(ty, decider.Decision{Scale: 0, NeedActivator: true}) // leaves a poll timer
	<-done
	e.Update(tx, scale(5, "stable"))
	<-entered

	stopped := make(chan struct{})
	go func() { e.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(guard):
		t.Fatal("Stop did not return")
	}
	if !cancelled.Load() {
		t.Fatal("Stop returned before the blocked backend call was cancelled")
	}
	if clk.HasWaiters() {
		t.Fatal("Stop left timers")
	}
	e.Update(tx, scale(6, "late")) // ignored, no panic
	e.Stop()                       // idempotent

	// Workers have returned (Stop waited for them); allow the runtime a
	// moment to reap the exiting goroutines.
	deadline := time.Now().Add(guard)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	if n := runtime.NumGoroutine(); n > base {
		t.Fatalf("%d goroutines after Stop, %d before Start", n, base)
	}
}

func TestEventString(t *testing.T) {
	for _, tc := range []struct {
		ev   Event
		want string
	}{
		{Event{Service: hello, Kind: EventScale, From: 0, To: 1, Reason: "poke"}, "default/hello: scale 0→1 (poke)"},
		{Event{Service: hello, Kind: EventRoute, FromRoute: plan.RoutePods, ToRoute: plan.RouteActivator, Reason: "before scale to zero"},
			"default/hello: route pods→activator (before scale to zero)"},
		{Event{Service: hello, Kind: EventError, Err: errors.New("set scale to 3: boom"), RetryIn: 400 * time.Millisecond},
			"default/hello: error: set scale to 3: boom (retry in 400ms)"},
	} {
		if got := tc.ev.String(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

// TestScaleDownMarksTheLeastBusyFirst: before a scale-down that leaves
// pods running, a Trimmer backend is told the least busy pods, as many as
// go; a scale up, and a scale to zero (every pod goes), tell it nothing; a
// failure to mark costs only the choice.
func TestScaleDownMarksTheLeastBusyFirst(t *testing.T) {
	var asked []int
	h := newHarness(t, Config{
		Rules: plan.Rules{DownHold: -1},
		LeastBusy: func(svc service.Key, n int) []string {
			asked = append(asked, n)
			return LeastBusy([]PodLoad{
				{Addr: "10.0.0.1:9090", Concurrency: 3, Known: true},
				{Addr: "10.0.0.2:9090", Concurrency: 0.2, Known: true},
				{Addr: "10.0.0.3:9090", Concurrency: 1, Known: true},
				{Addr: "10.0.0.4:9090", Concurrency: 0, Known: true},
			}, n)
		},
	})
	h.b.Set(hello, plan.Status{Desired: 4, Ready: 4, Route: plan.RoutePods})

	h.update(hello, scale(2, "down"))
	h.writes("prefer-removal default/hello [10.0.0.4:9090 10.0.0.2:9090]", "scale default/hello 2")

	h.b.ResetCalls()
	h.update(hello, scale(3, "up"))
	h.writes("scale default/hello 3")

	h.b.ResetCalls()
	h.b.SetHook(func(_ context.Context, c scalertest.Call) error {
		if c.Op == scalertest.OpPreferRemoval {
			return errors.New("forbidden")
		}
		return nil
	})
	h.update(hello, scale(1, "down"))
	h.writes("scale default/hello 1")
	h.b.SetHook(nil)

	h.b.ResetCalls()
	h.b.Set(hello, plan.Status{Desired: 1, Ready: 1, Route: plan.RouteActivator})
	h.update(hello, decider.Decision{Scale: 0, NeedActivator: true, Reason: "idle"})
	h.writes("scale default/hello 0")

	if want := []int{2, 2}; !reflect.DeepEqual(asked, want) {
		t.Errorf("LeastBusy asked for %v pods, want %v", asked, want)
	}
}

func TestLeastBusy(t *testing.T) {
	pods := []PodLoad{
		{Addr: "b", Concurrency: 0, Known: true},
		{Addr: "c", Concurrency: 2, Known: true},
		{Addr: "new", Known: false},
		{Addr: "a", Concurrency: 0, Known: true},
		{Addr: "d", Concurrency: 0.5, Known: true},
	}
	for _, tc := range []struct {
		n    int
		want []string
	}{
		{0, nil},
		{1, []string{"new"}},
		{3, []string{"new", "a", "b"}},
		{9, []string{"new", "a", "b", "d", "c"}},
	} {
		if got := LeastBusy(slices.Clone(pods), tc.n); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("LeastBusy(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}
