// Package buckets leads buckets of services (package shard) among the
// autoscaler's replicas: one Lease per bucket, taken and kept through
// client-go's leader election, and a rule, read from the Leases and the
// replicas' Pods, that spreads the buckets evenly over the ready replicas
// while moving as few as it can.
//
// The rule: with r ready replicas, an even share is ⌊n/r⌋ to ⌈n/r⌉ of the
// n buckets. A replica contends for a bucket without a holder while it
// holds fewer than ⌈n/r⌉ and no more than any other ready replica; any
// replica contends for one that has had no holder for a grace period (a
// rescue). A replica gives a bucket back (releases its Lease) when it holds
// more than ⌈n/r⌉, or two more than the least loaded ready replica, once
// that one has been ready for the settle period, and only buckets it has
// led for as long, one at a time. So three replicas and ten buckets settle
// at 4, 3 and 3; a replica that goes away has only its own buckets taken
// by the others, at once when it released its Leases on SIGTERM, a lease
// duration and a grace period after a crash; and one that comes gets its
// share back, a settle period after it is ready.
package buckets

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/pkg/shard"
)

// Config configures a Manager. Client, Namespace, Identity, Peers,
// OnStarted and OnStopped are required.
type Config struct {
	Client kubernetes.Interface
	// Namespace holds the Leases and the replicas' Pods.
	Namespace string
	// Identity is this replica's Pod name: its name in the Leases and
	// among the peers.
	Identity string
	// Buckets is the number of buckets (shard.Check).
	Buckets int
	// Peers selects the autoscaler's Pods in Namespace.
	Peers labels.Selector
	// LeaseDuration, RenewDeadline and RetryPeriod are the elections'
	// (leaderelection.LeaderElectionConfig); Grace and Settle default to
	// LeaseDuration.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Grace is how long a bucket's Lease must have had no holder before a
	// replica it is not meant for takes it.
	Grace time.Duration
	// Settle is how long the replica a bucket is meant for must have been
	// ready, and this one must have led it, before it is given back.
	Settle time.Duration
	// OnStarted runs when this replica takes bucket b, on its own
	// goroutine; ctx ends when it stops leading b, and OnStarted must
	// return then. OnStopped runs after OnStarted has returned, once b is
	// no longer led here (released, lost, or at the end).
	OnStarted func(ctx context.Context, b int)
	OnStopped func(b int)
	// Recorder records the Leases' leader changes; optional.
	Recorder record.EventRecorder
	Clock    clock.Clock
	Logger   *zap.Logger
}

// Manager runs one election per bucket. Its methods are safe for
// concurrent use.
type Manager struct {
	cfg    Config
	pods   corelisters.PodLister
	leases coordinationlisters.LeaseLister
	synced []cache.InformerSynced
	inf    informers.SharedInformerFactory
	// changed wakes the buckets' loops when a Pod or a Lease changes.
	mu      sync.Mutex
	changed chan struct{}
	led     map[int]time.Time // bucket → since when it is led here
}

// New checks cfg and registers the Manager's informers; Run starts them.
func New(cfg Config) (*Manager, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("buckets: Config.Client is required")
	case cfg.Namespace == "" || cfg.Identity == "":
		return nil, errors.New("buckets: Config.Namespace and Config.Identity are required")
	case cfg.Peers == nil || cfg.Peers.Empty():
		return nil, errors.New("buckets: Config.Peers must select the autoscaler's Pods")
	case cfg.OnStarted == nil || cfg.OnStopped == nil:
		return nil, errors.New("buckets: Config.OnStarted and Config.OnStopped are required")
	}
	if err := shard.Check(cfg.Buckets); err != nil {
		return nil, fmt.Errorf("buckets: %w", err)
	}
	cfg.Grace = cmp.Or(cfg.Grace, cfg.LeaseDuration)
	cfg.Settle = cmp.Or(cfg.Settle, cfg.LeaseDuration)
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	m := &Manager{cfg: cfg, changed: make(chan struct{}), led: map[int]time.Time{}}
	m.inf = informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0, informers.WithNamespace(cfg.Namespace))
	pods := m.inf.Core().V1().Pods()
	leases := m.inf.Coordination().V1().Leases()
	m.pods, m.leases = pods.Lister(), leases.Lister()
	wake := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { m.wake() },
		UpdateFunc: func(any, any) { m.wake() },
		DeleteFunc: func(any) { m.wake() },
	}
	for _, inf := range []cache.SharedIndexInformer{pods.Informer(), leases.Informer()} {
		reg, err := inf.AddEventHandler(wake)
		if err != nil {
			return nil, fmt.Errorf("buckets: %w", err)
		}
		m.synced = append(m.synced, reg.HasSynced)
	}
	return m, nil
}

func (m *Manager) wake() {
	m.mu.Lock()
	close(m.changed)
	m.changed = make(chan struct{})
	m.mu.Unlock()
}

func (m *Manager) changes() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

// Led returns the buckets led here now, in order.
func (m *Manager) Led() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.led))
}

// Run takes part in every bucket's election until ctx ends; leaving, it
// releases the Leases it holds so the others take its buckets at once.
func (m *Manager) Run(ctx context.Context) error {
	m.inf.Start(ctx.Done())
	defer m.inf.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), m.synced...) {
		return fmt.Errorf("buckets: wait for the Pods' and Leases' caches: %w", context.Cause(ctx))
	}
	m.cfg.Logger.Info("leading buckets of services", zap.Int("buckets", m.cfg.Buckets), zap.String("identity", m.cfg.Identity))
	var wg sync.WaitGroup
	for b := range m.cfg.Buckets {
		wg.Go(func() { m.bucket(ctx, b) })
	}
	wg.Wait()
	return nil
}

// bucket takes part in bucket b's election while the rule says so.
func (m *Manager) bucket(ctx context.Context, b int) {
	for ctx.Err() == nil {
		if !m.contend(b) {
			m.waitChange(ctx)
			continue
		}
		m.elect(ctx, b)
	}
}

// waitChange waits for a Pod or Lease to change, or a retry period: the
// rule also depends on time passing.
func (m *Manager) waitChange(ctx context.Context) {
	t := m.cfg.Clock.NewTimer(m.cfg.RetryPeriod)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-m.changes():
	case <-t.C():
	}
}

// elect runs one election for b, until this replica no longer contends
// (while not leading) or gives b back or loses it (while leading).
func (m *Manager) elect(ctx context.Context, b int) {
	ectx, cancel := context.WithCancel(ctx)
	defer cancel()
	name := kube.BucketLeaseName(b, m.cfg.Buckets)
	t := &term{m: m, b: b, name: name}
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: m.cfg.Namespace, Name: name},
			Client:     m.cfg.Client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: m.cfg.Identity, EventRecorder: m.cfg.Recorder},
		},
		LeaseDuration:   m.cfg.LeaseDuration,
		RenewDeadline:   m.cfg.RenewDeadline,
		RetryPeriod:     m.cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: t.start,
			// Called whether or not it led: stop is then a no-op.
			OnStoppedLeading: t.stop,
		},
	})
	if err != nil { // only for a bad configuration, which New checked
		m.cfg.Logger.Error("bucket election", zap.Int("bucket", b), zap.Error(err))
		m.waitChange(ctx)
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		elector.Run(ectx)
	}()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			<-done
			return
		case <-m.changes():
		case <-m.cfg.Clock.After(m.cfg.RetryPeriod):
		}
		if elector.IsLeader() {
			if m.giveBack(b) {
				m.cfg.Logger.Info("giving a bucket back: this replica leads more than its share", zap.Int("bucket", b))
				t.stop() // its services leave this replica before the Lease goes
				cancel()
			}
		} else if !m.contend(b) {
			cancel()
		}
	}
}

// term is one election's lead of a bucket. client-go calls
// OnStartedLeading on a goroutine of its own and OnStoppedLeading when the
// election ends, so the two can run in either order: a start that ran
// after the stop would leave this replica acting for a bucket whose Lease
// it released, and one that ran alongside it would let OnStopped run
// before OnStarted. term makes them take effect in the order of the lead
// itself: a start after the stop, or once the lease's context ended, takes
// nothing; a stop ends OnStarted's context and waits for it to return
// before OnStopped.
type term struct {
	m    *Manager
	b    int
	name string

	mu     sync.Mutex
	ended  bool               // stopped: no later start takes b
	cancel context.CancelFunc // ends OnStarted's context; nil until started
	done   chan struct{}      // closed when OnStarted has returned
}

// start takes b for this term, unless the term or its lease (lctx) has
// ended, and runs OnStarted until b is no longer led here.
func (t *term) start(lctx context.Context) {
	t.mu.Lock()
	if t.ended || t.cancel != nil || lctx.Err() != nil {
		t.mu.Unlock()
		return
	}
	ctx, cancel := context.WithCancel(lctx)
	done := make(chan struct{})
	defer close(done)
	t.cancel, t.done = cancel, done
	t.m.mu.Lock()
	t.m.led[t.b] = t.m.cfg.Clock.Now()
	t.m.mu.Unlock()
	t.mu.Unlock()
	t.m.cfg.Logger.Info("leading bucket", zap.Int("bucket", t.b), zap.String("lease", t.name))
	t.m.cfg.OnStarted(ctx, t.b)
}

// stop ends the term and, if it took b, hands b back to the caller once:
// before the Lease is released when this replica gives b back, when the
// election ends otherwise.
func (t *term) stop() {
	t.mu.Lock()
	led := !t.ended && t.cancel != nil
	t.ended = true
	cancel, done := t.cancel, t.done
	t.mu.Unlock()
	if !led {
		return
	}
	cancel()
	<-done
	t.m.mu.Lock()
	delete(t.m.led, t.b)
	t.m.mu.Unlock()
	t.m.cfg.Logger.Info("no longer leading bucket", zap.Int("bucket", t.b), zap.String("lease", t.name))
	t.m.cfg.OnStopped(t.b)
}

// peers are the ready autoscaler Pods that are not being deleted, by name,
// with when each became ready.
func (m *Manager) peers() map[string]time.Time {
	pods, err := m.pods.Pods(m.cfg.Namespace).List(m.cfg.Peers)
	if err != nil {
		return nil
	}
	out := map[string]time.Time{}
	for _, p := range pods {
		if since, ok := readySince(p); ok {
			out[p.Name] = since
		}
	}
	return out
}

// readySince is when p became ready, if it is ready and not being deleted.
func readySince(p *corev1.Pod) (time.Time, bool) {
	if p.DeletionTimestamp != nil {
		return time.Time{}, false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time, true
		}
	}
	return time.Time{}, false
}

// view is the division as the Leases show it now.
type view struct {
	peers  map[string]time.Time // ready replicas
	counts map[string]int       // buckets each ready replica holds
	// lo and hi bound an even share: ⌊n/r⌋ and ⌈n/r⌉ for r ready
	// replicas (this one counted, ready or not yet).
	lo, hi int
	// least is the fewest buckets a ready replica holds, and which one.
	least     int
	leastPeer string
}

func (m *Manager) view() view {
	v := view{peers: m.peers(), counts: map[string]int{}}
	now := m.cfg.Clock.Now()
	for b := range m.cfg.Buckets {
		l, err := m.leases.Leases(m.cfg.Namespace).Get(kube.BucketLeaseName(b, m.cfg.Buckets))
		if err != nil {
			continue
		}
		if _, held := holderless(l, now); held {
			v.counts[*l.Spec.HolderIdentity]++
		}
	}
	r := len(v.peers)
	if _, ok := v.peers[m.cfg.Identity]; !ok {
		r++
	}
	v.lo, v.hi = m.cfg.Buckets/r, (m.cfg.Buckets+r-1)/r
	v.least = m.cfg.Buckets + 1
	for _, p := range slices.Sorted(maps.Keys(v.peers)) {
		if c := v.counts[p]; c < v.least {
			v.least, v.leastPeer = c, p
		}
	}
	return v
}

// contend says whether this replica should try to take b now: b's Lease
// has no holder, and this replica holds fewer than an even share and no
// more than any ready replica; or b has had no holder for the grace
// period, whoever takes it.
func (m *Manager) contend(b int) bool {
	l, err := m.leases.Leases(m.cfg.Namespace).Get(kube.BucketLeaseName(b, m.cfg.Buckets))
	if err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == m.cfg.Identity {
		// Held in this replica's name: its election is taking it (the
		// watch can show the write before the election sees its answer),
		// or an earlier run of this replica held it. Either way the
		// election takes it or renews it; stopping it now could leave the
		// Lease held with no one leading the bucket until it expires.
		return true
	}
	since, held := m.holderlessSince(b)
	if held {
		return false
	}
	if m.cfg.Clock.Since(since) >= m.cfg.Grace {
		return true
	}
	v := m.view()
	mine := v.counts[m.cfg.Identity]
	return mine < v.hi && mine <= v.least
}

// holderlessSince is since when b's Lease has had no valid holder; held
// while it has one. A Lease never made has had none forever.
func (m *Manager) holderlessSince(b int) (since time.Time, held bool) {
	l, err := m.leases.Leases(m.cfg.Namespace).Get(kube.BucketLeaseName(b, m.cfg.Buckets))
	if err != nil {
		return time.Time{}, false
	}
	return holderless(l, m.cfg.Clock.Now())
}

// holderless reads l at now: since when it has had no valid holder (a
// released Lease since its release, an expired one since it expired), or
// held.
func holderless(l *coordinationv1.Lease, now time.Time) (since time.Time, held bool) {
	s := l.Spec
	var renewed time.Time
	switch {
	case s.RenewTime != nil:
		renewed = s.RenewTime.Time
	case s.AcquireTime != nil:
		renewed = s.AcquireTime.Time
	}
	if s.HolderIdentity == nil || *s.HolderIdentity == "" {
		return renewed, false
	}
	d := time.Duration(0)
	if s.LeaseDurationSeconds != nil {
		d = time.Duration(*s.LeaseDurationSeconds) * time.Second
	}
	if end := renewed.Add(d); now.Before(end) {
		return time.Time{}, true
	} else {
		return end, false
	}
}

// giveBack says whether this replica, leading b, should release it: it
// holds more than an even share, or two more than the least loaded ready
// replica, which has been ready for the settle period. One bucket at a
// time: the highest-numbered of those led for the settle period.
func (m *Manager) giveBack(b int) bool {
	v := m.view()
	m.mu.Lock()
	led := len(m.led)
	m.mu.Unlock()
	mine := v.counts[m.cfg.Identity]
	if mine != led {
		// The Leases do not show this replica's last change yet (a bucket
		// just given back or taken): judging on them would give back
		// another, and another.
		return false
	}
	over := mine > v.hi || mine-v.least >= 2
	if !over || v.leastPeer == "" || v.leastPeer == m.cfg.Identity || m.cfg.Clock.Since(v.peers[v.leastPeer]) < m.cfg.Settle {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	last := -1
	for lb, since := range m.led {
		if m.cfg.Clock.Since(since) >= m.cfg.Settle && lb > last {
			last = lb
		}
	}
	return b == last
}

// Leader returns the address of the replica that leads bucket b now, as
// its Pod's IP: the holder of b's Lease, while it holds it, if that Pod
// is ready and not being deleted. ok is false while b has no such
// leader (a handover, or the Lease expired).
func (m *Manager) Leader(b int) (ip string, ok bool) {
	l, err := m.leases.Leases(m.cfg.Namespace).Get(kube.BucketLeaseName(b, m.cfg.Buckets))
	if err != nil {
		return "", false
	}
	if _, held := holderless(l, m.cfg.Clock.Now()); !held {
		return "", false
	}
	p, err := m.pods.Pods(m.cfg.Namespace).Get(*l.Spec.HolderIdentity)
	if err != nil || p.Status.PodIP == "" {
		return "", false
	}
	if _, ready := readySince(p); !ready {
		return "", false
	}
	return p.Status.PodIP, true
}
