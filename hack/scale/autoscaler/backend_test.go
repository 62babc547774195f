package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/swell-run/swell/autoscaler/plan"
	"github.com/swell-run/swell/autoscaler/scaler"
	"github.com/swell-run/swell/hack/scale/pods"
	"github.com/swell-run/swell/pkg/service"
)

// loopCalls records what the backend tells the loop.
type loopCalls []string

func (l *loopCalls) SetPods(key service.Key, addrs []string) {
	*l = append(*l, fmt.Sprintf("pods %s %v", key, addrs))
}

func (l *loopCalls) Resync(key service.Key) { *l = append(*l, "resync "+key.String()) }

func (l *loopCalls) ClosePushes(moved func(service.Key) bool) {
	for _, k := range []service.Key{keyA, keyZ} {
		if moved(k) {
			*l = append(*l, "close pushes "+k.String())
		}
	}
}

var (
	keyA = service.Key{Namespace: "scale", Name: "a"}
	keyZ = service.Key{Namespace: "scale", Name: "z"}
)

func TestBackendFollowsScale(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	b := newBackend(clk)
	var loop loopCalls
	b.loop = &loop
	b.add(keyA, []string{"p1", "p2", "p3"}, plan.Status{Desired: 3, Route: plan.RoutePods, Requested: plan.RoutePods})
	ctx := context.Background()

	if st, _ := b.Status(ctx, keyA); st.Ready != 3 || st.Desired != 3 {
		t.Errorf("at start %+v, want 3 ready of 3", st)
	}
	if _, err := b.Status(ctx, keyZ); !errors.Is(err, scaler.ErrNotFound) {
		t.Errorf("unknown service: %v, want ErrNotFound", err)
	}

	// Ready follows desired up to the fleet's pods; the loop hears of a
	// change in the ready pods, as from the EndpointSlices.
	steps := []struct {
		scale int
		ready int
		told  []string
	}{
		{5, 3, nil},
		{2, 2, []string{"pods scale/a [p1 p2]", "resync scale/a"}},
		// At zero its pods are gone, their push connections too.
		{0, 0, []string{"pods scale/a []", "resync scale/a", "close pushes scale/a"}},
		{1, 1, []string{"pods scale/a [p1]", "resync scale/a"}},
	}
	for _, s := range steps {
		loop = nil
		clk.SetTime(clk.Now().Add(time.Second))
		if err := b.SetScale(ctx, keyA, s.scale); err != nil {
			t.Fatal(err)
		}
		st, _ := b.Status(ctx, keyA)
		if st.Desired != s.scale || st.Ready != s.ready || !reflect.DeepEqual([]string(loop), s.told) {
			t.Errorf("scale %d: %+v, told %q; want %d ready, told %q", s.scale, st, loop, s.ready, s.told)
		}
	}
	if err := b.SetRoute(ctx, keyA, plan.RouteActivator); err != nil {
		t.Fatal(err)
	}
	if st, _ := b.Status(ctx, keyA); !st.ActivatorInPath() {
		t.Errorf("after SetRoute(activator): %+v", st)
	}
	b.PreferRemoval(ctx, keyA, []string{"p1"})

	// The first scale write after a time, and the counts.
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	if w, ok := b.firstScaleAfter(keyA, start.Add(2500*time.Millisecond)); !ok || !w.Equal(start.Add(3*time.Second)) {
		t.Errorf("first scale after 2.5 s: %v, %v; want at 3 s", w, ok)
	}
	if _, ok := b.firstScaleAfter(keyA, start.Add(time.Hour)); ok {
		t.Error("a write after the last")
	}
	tot := b.totals(start)
	if tot.ReadyPods != 1 || tot.Writes["scale"] != 4 || tot.Writes["route"] != 1 || tot.Writes["prefer-removal"] != 1 {
		t.Errorf("totals %+v", tot)
	}
	if len(tot.PerSecond) != 5 || tot.PerSecond[1].ByOp["scale"] != 1 || tot.PerSecond[4].ByOp["route"] != 1 {
		t.Errorf("per second %+v", tot.PerSecond)
	}
}

func TestScaleWritesKeptAreBounded(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(0, 0))
	b := newBackend(clk)
	b.add(keyA, []string{"p1"}, plan.Status{})
	for range 3 * recentWrites {
		clk.SetTime(clk.Now().Add(time.Second))
		b.SetScale(context.Background(), keyA, 1)
	}
	// The oldest kept is recentWrites back; an earlier question gets it.
	w, ok := b.firstScaleAfter(keyA, time.Unix(0, 0))
	if want := time.Unix(int64(2*recentWrites+1), 0); !ok || !w.Equal(want) {
		t.Errorf("first kept write %v, want %v", w, want)
	}
}

func TestAddServicesByKind(t *testing.T) {
	svcs := []pods.Service{
		{Service: "scale/busy", Kind: pods.KindBusy, Pods: []string{"a", "b"}},
		{Service: "scale/burst", Kind: pods.KindBursting, Pods: []string{"c", "d"}},
		{Service: "scale/idle", Kind: pods.KindIdle, Pods: []string{"e", "f"}},
		{Service: "scale/zero", Kind: pods.KindZero, Pods: []string{"g", "h"}},
	}
	b := newBackend(clocktesting.NewFakePassiveClock(time.Unix(0, 0)))
	specs, err := addServices(b, svcs)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct {
		ready    int
		route    plan.Route
		minScale int
	}{
		{2, plan.RoutePods, 0},
		{0, plan.RouteActivator, 0},
		{2, plan.RoutePods, 2}, // kept warm
		{0, plan.RouteActivator, 0},
	} {
		key, _ := service.Parse(svcs[i].Service)
		st, _ := b.Status(context.Background(), key)
		if st.Ready != want.ready || st.Route != want.route || st.Requested != want.route || specs[i].MinScale != want.minScale {
			t.Errorf("%s: %+v, min-scale %d; want %d ready via %s, min-scale %d", key, st, specs[i].MinScale, want.ready, want.route, want.minScale)
		}
	}
}

// A push connection is the pod it claims only if that is a ready pod of
// the service, and only from loopback.
func TestBackendResolvesPushes(t *testing.T) {
	b := newBackend(clocktesting.NewFakePassiveClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)))
	b.loop = &loopCalls{}
	b.add(keyA, []string{"127.1.0.1:9090", "127.1.0.2:9090", "127.1.0.3:9090"}, plan.Status{Desired: 2, Route: plan.RoutePods, Requested: plan.RoutePods})
	lo := netip.MustParseAddrPort("127.1.0.2:40000")
	for _, tt := range []struct {
		svc     service.Key
		remote  netip.AddrPort
		claimed string
		ok      bool
	}{
		{keyA, lo, "127.1.0.2:9090", true},
		{keyA, netip.MustParseAddrPort("127.0.0.1:40000"), "127.1.0.1:9090", true},
		{keyA, lo, "127.1.0.3:9090", false}, // the fleet's, not ready
		{keyA, lo, "127.1.0.9:9090", false}, // no pod of the service
		{keyZ, lo, "127.1.0.1:9090", false}, // another service's
		{keyA, netip.MustParseAddrPort("10.0.0.1:40000"), "127.1.0.1:9090", false},
		{keyA, netip.AddrPort{}, "127.1.0.1:9090", false},
	} {
		if addr, ok := b.PodAddr(tt.svc, tt.remote, tt.claimed); ok != tt.ok || ok && addr != tt.claimed {
			t.Errorf("%s from %s claiming %s: %q, %v; want %v", tt.svc, tt.remote, tt.claimed, addr, ok, tt.ok)
		}
	}
	// Scaled up, the third is ready too.
	if err := b.SetScale(context.Background(), keyA, 3); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.PodAddr(keyA, lo, "127.1.0.3:9090"); !ok {
		t.Error("a pod made ready is refused")
	}
}
