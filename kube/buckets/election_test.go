package buckets

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/pkg/shard"
)

// autoscaler stands for cmd/autoscaler's callbacks: the buckets it acts
// for, as OnStarted adds them and OnStopped removes them, and the
// callbacks in the order they ran. hold, if not nil, holds OnStarted back
// before it adds the bucket, or until its context ends: room for a stop
// to come in between.
type autoscaler struct {
	owned *shard.Owned
	hold  chan struct{}

	mu    sync.Mutex
	calls []string
}

func newAutoscaler(t *testing.T, r *rig) *autoscaler {
	t.Helper()
	owned, err := shard.NewOwned(r.m.cfg.Buckets)
	if err != nil {
		t.Fatal(err)
	}
	a := &autoscaler{owned: owned}
	r.m.cfg.OnStarted = func(ctx context.Context, b int) {
		a.record("started")
		if a.hold != nil {
			select {
			case <-a.hold:
			case <-ctx.Done():
			}
		}
		a.owned.Add(b)
		a.record("started returned")
	}
	r.m.cfg.OnStopped = func(b int) {
		a.record("stopped")
		a.owned.Remove(b)
	}
	return a
}

func (a *autoscaler) record(call string) {
	a.mu.Lock()
	a.calls = append(a.calls, call)
	a.mu.Unlock()
}

func (a *autoscaler) check(t *testing.T, r *rig, want ...string) {
	t.Helper()
	a.mu.Lock()
	calls := slices.Clone(a.calls)
	a.mu.Unlock()
	if !slices.Equal(calls, want) {
		t.Errorf("callbacks ran as %q; want %q", calls, want)
	}
	if got := a.owned.List(); len(got) != 0 {
		t.Errorf("the autoscaler acts for buckets %v after their election ended; want none", got)
	}
	if led := r.m.Led(); len(led) != 0 {
		t.Errorf("Led() = %v after the election ended; want none", led)
	}
}

func newTerm(r *rig, b int) *term {
	return &term{m: r.m, b: b, name: kube.BucketLeaseName(b, r.m.cfg.Buckets)}
}

// ended is a lease's context once client-go has stopped renewing it.
func ended(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	return ctx
}

// client-go runs OnStartedLeading on a goroutine of its own; when the
// election ends at once (the rule stops contending, or the replica stops,
// as the Lease is taken) OnStoppedLeading can run first. A start that
// comes after the stop, or after the lease's context ended, must take
// nothing.
func TestLateStartTakesNothing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		events func(t *testing.T, tm *term)
	}{
		{"started after stopped", func(t *testing.T, tm *term) {
			tm.stop()
			tm.start(ended(t))
		}},
		{"started after stopped, lease context still live", func(t *testing.T, tm *term) {
			tm.stop()
			tm.start(t.Context())
		}},
		{"started once the lease's context ended, before stopped", func(t *testing.T, tm *term) {
			tm.start(ended(t))
			tm.stop()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, "as-a", 2)
			a := newAutoscaler(t, r)
			tc.events(t, newTerm(r, 1))
			a.check(t, r)
		})
	}
}

// A stop that comes while OnStarted runs (the Lease lost, or the election
// ended, before the autoscaler has added the bucket) ends OnStarted's
// context and lets OnStopped run only once OnStarted has returned, so
// OnStopped undoes all that OnStarted did.
func TestStopWaitsForStarted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, "as-a", 2)
		a := newAutoscaler(t, r)
		a.hold = make(chan struct{})
		tm := newTerm(r, 1)
		var wg sync.WaitGroup
		wg.Go(func() { tm.start(t.Context()) })
		synctest.Wait() // the bucket is taken; OnStarted waits
		if led := r.m.Led(); !slices.Equal(led, []int{1}) {
			t.Errorf("Led() = %v while OnStarted runs; want [1]", led)
		}
		wg.Go(tm.stop)
		synctest.Wait() // the stop has done all it does before OnStarted returns
		close(a.hold)
		wg.Wait()
		a.check(t, r, "started", "started returned", "stopped")
	})
}

// Through client-go's election: the election's context ends just as it
// takes the Lease, so client-go starts OnStartedLeading on its goroutine
// and, at once, releases the Lease and calls OnStoppedLeading. However the
// two goroutines run, the replica acts for the bucket no more.
func TestElectEndedAsTheLeaseIsTaken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, "as-a", 2)
		client := fake.NewClientset()
		r.m.cfg.Client = client
		a := newAutoscaler(t, r)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		client.PrependReactor("create", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
			cancel()
			return false, nil, nil // the Lease is made, for this replica
		})
		r.m.elect(ctx, 0)
		synctest.Wait() // a late OnStartedLeading has run by now
		a.check(t, r)   // the lease's context had ended: nothing to start
		l, err := client.CoordinationV1().Leases(ns).Get(t.Context(), kube.BucketLeaseName(0, 2), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if h := l.Spec.HolderIdentity; h != nil && *h != "" {
			t.Errorf("the Lease is held by %q after the election ended; want released", *h)
		}
	})
}
