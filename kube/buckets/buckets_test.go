package buckets

import (
	"testing"
	"time"

	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	testclock "k8s.io/utils/clock/testing"

	"github.com/swell-run/swell/kube"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

const ns = "swell-system"

// rig is a Manager over listers the test fills, at a fake time: the rule,
// without elections.
type rig struct {
	m      *Manager
	clk    *testclock.FakeClock
	pods   cache.Indexer
	leases cache.Indexer
}

func newRig(t *testing.T, identity string, buckets int) *rig {
	t.Helper()
	r := &rig{
		clk:    testclock.NewFakeClock(t0),
		pods:   cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}),
		leases: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}),
	}
	r.m = &Manager{
		cfg: Config{Namespace: ns, Identity: identity, Buckets: buckets, Peers: labels.Everything(),
			LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second, Grace: 15 * time.Second, Settle: 15 * time.Second,
			Clock: r.clk, Logger: zap.NewNop()},
		pods:    corelisters.NewPodLister(r.pods),
		leases:  coordinationlisters.NewLeaseLister(r.leases),
		led:     map[int]time.Time{},
		changed: make(chan struct{}),
	}
	return r
}

// pod adds a replica's Pod, ready since readyAt (zero: not ready).
func (r *rig) pod(name string, readyAt time.Time) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if !readyAt.IsZero() {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(readyAt)}}
	}
	r.pods.Add(p)
}

// lease sets bucket b's Lease: held by holder ("" released), renewed at.
func (r *rig) lease(b int, holder string, renewed time.Time) {
	d := int32(15)
	r.leases.Add(&coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: kube.BucketLeaseName(b, r.m.cfg.Buckets)},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &d,
			RenewTime: &metav1.MicroTime{Time: renewed}},
	})
}

// holdAll sets bucket b's Lease to holders[b], renewed now.
func (r *rig) holdAll(holders ...string) {
	for b, h := range holders {
		r.lease(b, h, r.clk.Now())
	}
}

func TestContendForAFreeBucketWhenLeastLoaded(t *testing.T) {
	r := newRig(t, "as-b", 10)
	r.pod("as-a", t0)
	r.pod("as-b", t0)
	r.pod("as-c", t0)
	r.pod("as-d", time.Time{}) // not ready: not a peer
	// a 4, b 3, c 2, bucket 9 released just now.
	r.holdAll("as-a", "as-a", "as-a", "as-a", "as-b", "as-b", "as-b", "as-c", "as-c", "")
	if r.m.contend(9) {
		t.Error("as-b (3 buckets) contends for a free bucket while as-c holds 2")
	}
	rc := newRig(t, "as-c", 10)
	rc.pods, rc.leases = r.pods, r.leases
	rc.m.pods, rc.m.leases = r.m.pods, r.m.leases
	if !rc.m.contend(9) {
		t.Error("as-c, the least loaded, does not contend for the free bucket")
	}
	if rc.m.contend(0) {
		t.Error("as-c contends for a bucket as-a holds")
	}
	// No one took it for the grace period: anyone rescues it.
	r.clk.SetTime(t0.Add(15 * time.Second))
	r.holdAll("as-a", "as-a", "as-a", "as-a", "as-b", "as-b", "as-b", "as-c", "as-c") // renewed
	if !r.m.contend(9) {
		t.Error("as-b does not rescue a bucket without a holder for the grace period")
	}
}

func TestRescueAfterGrace(t *testing.T) {
	r := newRig(t, "as-b", 2)
	r.pod("as-a", t0)
	r.pod("as-b", t0)
	r.lease(0, "as-a", t0)
	r.lease(1, "as-b", t0)
	if r.m.contend(0) {
		t.Fatal("as-b contends for a bucket held by as-a")
	}
	// as-a stops renewing: the Lease expires at t0+15s; as-b (which holds
	// as many as as-a did) takes it a grace period later.
	r.lease(1, "as-b", t0.Add(29*time.Second))
	r.clk.SetTime(t0.Add(29 * time.Second))
	if r.m.contend(0) {
		t.Error("as-b contends 14 s after the Lease expired; grace is 15 s")
	}
	r.lease(1, "as-b", t0.Add(30*time.Second))
	r.clk.SetTime(t0.Add(30 * time.Second))
	if !r.m.contend(0) {
		t.Error("as-b does not contend once the Lease has had no holder for the grace period")
	}
	// A Lease held in its own name, which its election is taking or took
	// in an earlier run, is contended for even while "held".
	r.lease(0, "as-b", r.clk.Now())
	if !r.m.contend(0) {
		t.Error("as-b stops contending for a Lease held in its own name")
	}
	// A bucket whose Lease was never made is taken at once.
	r2 := newRig(t, "as-b", 2)
	r2.pod("as-a", t0)
	if !r2.m.contend(1) {
		t.Error("a bucket with no Lease yet must be contended for")
	}
}

func TestGiveBackOnceSettled(t *testing.T) {
	r := newRig(t, "as-a", 4)
	r.pod("as-a", t0)
	for b := range 4 {
		r.m.led[b] = t0
	}
	r.holdAll("as-a", "as-a", "as-a", "as-a")
	for b := range 4 {
		if r.m.giveBack(b) {
			t.Fatalf("gave back bucket %d with no other replica to take it", b)
		}
	}
	// as-b becomes ready at t0+20s: as-a holds 4, more than 2, an even
	// share; it gives back its highest bucket once as-b has been ready for
	// the settle period.
	r.pod("as-b", t0.Add(20*time.Second))
	r.clk.SetTime(t0.Add(30 * time.Second))
	r.holdAll("as-a", "as-a", "as-a", "as-a")
	if r.m.giveBack(3) {
		t.Error("gave a bucket back to a replica ready for only 10 s; settle is 15 s")
	}
	r.clk.SetTime(t0.Add(35 * time.Second))
	r.holdAll("as-a", "as-a", "as-a", "as-a")
	if !r.m.giveBack(3) {
		t.Error("kept bucket 3 although it leads 4 of 4 with another replica ready")
	}
	if r.m.giveBack(2) {
		t.Error("gives back two buckets at once")
	}
	// A bucket led for less than the settle period is not given back.
	r.m.led[3] = t0.Add(30 * time.Second)
	if r.m.giveBack(3) {
		t.Error("gave back a bucket led for 5 s")
	}
	// Until the Leases show a bucket given back, no other goes.
	delete(r.m.led, 3)
	if r.m.giveBack(2) {
		t.Error("gave back bucket 2 while the Leases still showed bucket 3 held here")
	}
	// At an even share, nothing moves.
	delete(r.m.led, 2)
	r.holdAll("as-a", "as-a", "as-b", "as-b")
	for b := range 2 {
		if r.m.giveBack(b) {
			t.Errorf("gave back bucket %d at 2 of 4 with two replicas", b)
		}
	}
	// A replica being deleted is no peer.
	r.m.led[2], r.m.led[3] = t0, t0
	r.holdAll("as-a", "as-a", "as-a", "as-a")
	p, _ := r.m.pods.Pods(ns).Get("as-b")
	p = p.DeepCopy()
	now := metav1.NewTime(t0)
	p.DeletionTimestamp = &now
	r.pods.Update(p)
	if r.m.giveBack(2) {
		t.Error("gave a bucket back to a replica being deleted")
	}
}

func TestHolderless(t *testing.T) {
	d := int32(10)
	held := "as-a"
	none := ""
	at := func(s int) *metav1.MicroTime { return &metav1.MicroTime{Time: t0.Add(time.Duration(s) * time.Second)} }
	for _, tc := range []struct {
		name      string
		spec      coordinationv1.LeaseSpec
		now       int
		wantHeld  bool
		wantSince int
	}{
		{"held and renewed", coordinationv1.LeaseSpec{HolderIdentity: &held, LeaseDurationSeconds: &d, RenewTime: at(0)}, 5, true, 0},
		{"expired", coordinationv1.LeaseSpec{HolderIdentity: &held, LeaseDurationSeconds: &d, RenewTime: at(0)}, 12, false, 10},
		{"released", coordinationv1.LeaseSpec{HolderIdentity: &none, LeaseDurationSeconds: &d, RenewTime: at(3)}, 4, false, 3},
		{"no holder field", coordinationv1.LeaseSpec{AcquireTime: at(2)}, 4, false, 2},
	} {
		since, h := holderless(&coordinationv1.Lease{Spec: tc.spec}, t0.Add(time.Duration(tc.now)*time.Second))
		if h != tc.wantHeld || !h && !since.Equal(t0.Add(time.Duration(tc.wantSince)*time.Second)) {
			t.Errorf("%s: holderless = %v, %v; want held %v since +%ds", tc.name, since, h, tc.wantHeld, tc.wantSince)
		}
	}
}

// Leader is the ready Pod that holds a bucket's Lease, by its IP; none
// while the Lease is released or expired, or its holder not ready.
func TestLeader(t *testing.T) {
	r := newRig(t, "as-a", 3)
	r.pod("as-a", t0)
	r.pod("as-b", time.Time{}) // not ready
	for _, name := range []string{"as-a", "as-b"} {
		p, _ := r.m.pods.Pods(ns).Get(name)
		p = p.DeepCopy()
		p.Status.PodIP = map[string]string{"as-a": "10.0.0.1", "as-b": "10.0.0.2"}[name]
		r.pods.Update(p)
	}
	r.lease(0, "as-a", t0)
	r.lease(1, "as-b", t0)
	r.lease(2, "", t0)
	for _, c := range []struct {
		b    int
		ip   string
		lead bool
	}{{0, "10.0.0.1", true}, {1, "", false}, {2, "", false}} {
		if ip, ok := r.m.Leader(c.b); ip != c.ip || ok != c.lead {
			t.Errorf("Leader(%d) = %q, %t; want %q, %t", c.b, ip, ok, c.ip, c.lead)
		}
	}
	r.clk.Step(16 * time.Second) // as-a's Lease expires unrenewed
	if ip, ok := r.m.Leader(0); ok {
		t.Errorf("Leader(0) = %q past its Lease's expiry", ip)
	}
}
