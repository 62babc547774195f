package breaker

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func mustNew(t testing.TB, capacity, depth int) *Breaker {
	t.Helper()
	b, err := New(Config{Capacity: capacity, QueueDepth: depth})
	if err != nil {
		t.Fatalf("New(%d, %d): %v", capacity, depth, err)
	}
	return b
}

// waitUntil yields until cond holds. Queued goroutines are only observable
// through the Breaker's counters, so the tests poll them (without sleeping);
// the deadline only turns a bug into a clear failure instead of a hang.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		runtime.Gosched()
	}
}

// enqueue starts an Acquire that is expected to wait, and returns once it is
// in the queue. Its result is delivered on the returned channel.
func enqueue(t *testing.T, b *Breaker, ctx context.Context) <-chan error {
	t.Helper()
	want := b.Waiting() + 1
	done := make(chan error, 1)
	go func() { done <- b.Acquire(ctx) }()
	waitUntil(t, "the caller is queued", func() bool { return b.Waiting() == want })
	return done
}

// recv returns an Acquire's result, failing the test instead of hanging if
// it never comes (the breaker lost a slot or admitted the wrong caller).
func recv(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for Acquire to return")
		return nil
	}
}

func expectPending(t *testing.T, ch <-chan error, what string) {
	t.Helper()
	select {
	case err := <-ch:
		t.Fatalf("%s: Acquire returned %v, want it still waiting", what, err)
	default:
	}
}

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		name    string
		p       Config
		wantErr bool
	}{
		{"zero", Config{}, false},
		{"typical", Config{Capacity: 10, QueueDepth: 100}, false},
		{"max", Config{Capacity: MaxCapacity, QueueDepth: MaxCapacity}, false},
		{"negative capacity", Config{Capacity: -1, QueueDepth: 1}, true},
		{"negative depth", Config{Capacity: 1, QueueDepth: -1}, true},
		{"capacity too large", Config{Capacity: MaxCapacity + 1}, true},
		{"depth too large", Config{QueueDepth: MaxCapacity + 1}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := New(tc.p)
			if (err != nil) != tc.wantErr {
				t.Fatalf("New(%+v) error = %v, want error: %v", tc.p, err, tc.wantErr)
			}
			if err == nil && (b.Capacity() != tc.p.Capacity || b.InFlight() != 0 || b.Waiting() != 0) {
				t.Errorf("New(%+v): capacity %d in-flight %d waiting %d", tc.p, b.Capacity(), b.InFlight(), b.Waiting())
			}
		})
	}
}

func TestTryAcquire(t *testing.T) {
	for _, tc := range []struct {
		name     string
		capacity int
		held     int
		waiters  int
		want     bool
	}{
		{"free slot", 2, 0, 0, true},
		{"last free slot", 2, 1, 0, true},
		{"all held", 2, 2, 0, false},
		{"capacity zero", 0, 0, 0, false},
		// Capacity 0 with a waiter; raising it would admit the waiter, but
		// here the point is that TryAcquire never jumps the queue.
		{"waiter queued", 0, 0, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := mustNew(t, tc.capacity, 10)
			for i := 0; i < tc.held; i++ {
				if !b.TryAcquire() {
					t.Fatalf("setup: TryAcquire %d failed", i)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			for i := 0; i < tc.waiters; i++ {
				enqueue(t, b, ctx)
			}
			if got := b.TryAcquire(); got != tc.want {
				t.Errorf("TryAcquire() = %v, want %v", got, tc.want)
			}
			wantHeld := tc.held
			if tc.want {
				wantHeld++
			}
			if b.InFlight() != wantHeld || b.Waiting() != tc.waiters {
				t.Errorf("in-flight %d waiting %d, want %d and %d", b.InFlight(), b.Waiting(), wantHeld, tc.waiters)
			}
		})
	}
}

// TestTryAcquireDoesNotOvertake frees a slot while a waiter is queued: the
// slot must go to the waiter, not to a TryAcquire that races for it.
func TestTryAcquireDoesNotOvertake(t *testing.T) {
	b := mustNew(t, 1, 1)
	b.TryAcquire()
	w := enqueue(t, b, context.Background())
	if b.TryAcquire() {
		t.Fatal("TryAcquire succeeded with a waiter queued")
	}
	b.Release()
	if err := recv(t, w); err != nil {
		t.Fatalf("waiter: %v", err)
	}
	if b.TryAcquire() {
		t.Fatal("TryAcquire succeeded although the waiter holds the only slot")
	}
	b.Release()
	if !b.TryAcquire() {
		t.Fatal("TryAcquire failed on an idle breaker")
	}
}

func TestFIFO(t *testing.T) {
	const n = 50
	b := mustNew(t, 1, n)
	if err := b.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	order := make(chan int, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := b.Acquire(context.Background()); err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			// Recording before releasing makes the channel order the
			// admission order: the next waiter is admitted only by this
			// Release.
			order <- i
			b.Release()
		}()
		waitUntil(t, "the waiter is queued", func() bool { return b.Waiting() == i+1 })
	}
	b.Release()
	wg.Wait()
	close(order)
	want := 0
	for got := range order {
		if got != want {
			t.Fatalf("admitted waiter %d, want %d", got, want)
		}
		want++
	}
	if want != n {
		t.Fatalf("admitted %d waiters, want %d", want, n)
	}
	if b.InFlight() != 0 || b.Waiting() != 0 {
		t.Errorf("after all released: in-flight %d waiting %d", b.InFlight(), b.Waiting())
	}
}

func TestQueueFull(t *testing.T) {
	for _, tc := range []struct {
		capacity, depth int
	}{
		{0, 0},
		{1, 0},
		{0, 3},
		{2, 3},
	} {
		b := mustNew(t, tc.capacity, tc.depth)
		for i := 0; i < tc.capacity; i++ {
			if err := b.Acquire(context.Background()); err != nil {
				t.Fatalf("cap %d depth %d: holder %d: %v", tc.capacity, tc.depth, i, err)
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		var queued []<-chan error
		for i := 0; i < tc.depth; i++ {
			queued = append(queued, enqueue(t, b, ctx))
		}
		if err := b.Acquire(context.Background()); !errors.Is(err, ErrQueueFull) {
			t.Errorf("cap %d depth %d: Acquire on a full queue = %v, want ErrQueueFull", tc.capacity, tc.depth, err)
		}
		if b.Waiting() != tc.depth || b.InFlight() != tc.capacity {
			t.Errorf("cap %d depth %d: rejected caller changed state: waiting %d in-flight %d",
				tc.capacity, tc.depth, b.Waiting(), b.InFlight())
		}
		cancel()
		for _, q := range queued {
			if err := recv(t, q); !errors.Is(err, context.Canceled) {
				t.Errorf("cancelled waiter: %v", err)
			}
		}
	}
}

func TestCancelLeavesQueue(t *testing.T) {
	b := mustNew(t, 1, 3)
	b.TryAcquire()
	ctxs := make([]context.CancelFunc, 3)
	waiters := make([]<-chan error, 3)
	for i := range waiters {
		ctx, cancel := context.WithCancel(context.Background())
		ctxs[i] = cancel
		waiters[i] = enqueue(t, b, ctx)
	}
	if err := b.Acquire(context.Background()); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("Acquire on a full queue = %v", err)
	}

	// Cancelling the middle waiter frees its spot at once...
	ctxs[1]()
	if err := recv(t, waiters[1]); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter returned %v, want context.Canceled", err)
	}
	if b.Waiting() != 2 {
		t.Fatalf("Waiting() = %d after a cancel, want 2", b.Waiting())
	}
	// ...for a newcomer, who queues behind the others.
	waiters = append(waiters, enqueue(t, b, context.Background()))

	// The slot goes to 0, then 2, then the newcomer: the cancelled waiter
	// neither took a slot nor its place in line.
	for _, i := range []int{0, 2, 3} {
		b.Release()
		if err := recv(t, waiters[i]); err != nil {
			t.Fatalf("waiter %d: %v", i, err)
		}
		for _, j := range []int{0, 2, 3} {
			if j > i {
				expectPending(t, waiters[j], "later waiter")
			}
		}
	}
	b.Release()
	if b.InFlight() != 0 || b.Waiting() != 0 {
		t.Fatalf("in-flight %d waiting %d, want 0 and 0", b.InFlight(), b.Waiting())
	}
	for _, c := range ctxs {
		c()
	}
}

func TestAcquireDoneContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b := mustNew(t, 1, 1)
	// A free slot is taken regardless of ctx.
	if err := b.Acquire(ctx); err != nil {
		t.Fatalf("Acquire with a free slot and a done ctx = %v, want nil", err)
	}
	// With no free slot, a done ctx never joins the queue.
	if err := b.Acquire(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire with a done ctx = %v, want context.Canceled", err)
	}
	if b.Waiting() != 0 {
		t.Fatalf("Waiting() = %d, want 0", b.Waiting())
	}
}

// TestGrantCancelRace hands a slot to a waiter whose ctx fires at the same
// moment: under the breaker's own mutex, so the waiter sees both at once.
// Whichever way it resolves, the slot must end up held by exactly one caller.
func TestGrantCancelRace(t *testing.T) {
	sawRace := false
	for i := 0; i < 100; i++ {
		b := mustNew(t, 1, 2)
		b.TryAcquire()
		ctx, cancel := context.WithCancel(context.Background())
		first := enqueue(t, b, ctx)
		second := enqueue(t, b, context.Background())

		b.mu.Lock()
		cancel()
		b.commitLocked(true, -1) // the test's Release, granting first
		b.mu.Unlock()

		switch err := recv(t, first); {
		case err == nil:
			// Admitted before it noticed ctx: it holds the slot.
			expectPending(t, second, "second waiter while first holds the slot")
			b.Release()
		case errors.Is(err, context.Canceled):
			sawRace = true
		default:
			t.Fatalf("first waiter: %v", err)
		}
		if err := recv(t, second); err != nil {
			t.Fatalf("second waiter: %v", err)
		}
		if b.InFlight() != 1 || b.Waiting() != 0 {
			t.Fatalf("in-flight %d waiting %d, want 1 and 0", b.InFlight(), b.Waiting())
		}
	}
	if !sawRace {
		t.Error("no waiter ever saw its grant and its cancellation together")
	}
}

// TestStress runs many goroutines that acquire, hold, release and cancel,
// while capacity changes, and checks the breaker's two promises: never more
// holders than the capacity allows, and nothing leaked at the end.
func TestStress(t *testing.T) {
	for _, tc := range []struct {
		name        string
		capacity    int
		depth       int
		cancelEvery int // every n-th Acquire gets a ctx cancelled concurrently
		resize      bool
	}{
		{"capacity 1", 1, 1000, 0, false},
		{"capacity 4", 4, 1000, 0, false},
		{"cancellations", 2, 1000, 2, false},
		{"shallow queue", 3, 4, 3, false},
		{"resizing", 4, 1000, 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const goroutines, iterations = 32, 300
			b := mustNew(t, tc.capacity, tc.depth)
			var holders, maxHolders, admitted, rejected, cancelled atomic.Int64
			// While resizing, the bound is the largest capacity ever set.
			maxCap := int64(tc.capacity)
			stopResize := make(chan struct{})
			resizeDone := make(chan struct{})
			go func() {
				defer close(resizeDone)
				if !tc.resize {
					return
				}
				caps := []int{0, 1, 8, 2, 4}
				for i := 0; ; i++ {
					select {
					case <-stopResize:
						b.SetCapacity(tc.capacity)
						return
					default:
					}
					b.SetCapacity(caps[i%len(caps)])
					runtime.Gosched()
				}
			}()
			if tc.resize {
				maxCap = 8
			}

			var wg sync.WaitGroup
			for g := 0; g < goroutines; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < iterations; i++ {
						ctx, cancel := context.WithCancel(context.Background())
						if tc.cancelEvery > 0 && (g+i)%tc.cancelEvery == 0 {
							go cancel()
						}
						err := b.Acquire(ctx)
						switch {
						case err == nil:
						case errors.Is(err, ErrQueueFull):
							rejected.Add(1)
							cancel()
							continue
						case errors.Is(err, context.Canceled):
							cancelled.Add(1)
							cancel()
							continue
						default:
							t.Errorf("Acquire: %v", err)
							cancel()
							return
						}
						admitted.Add(1)
						h := holders.Add(1)
						for {
							m := maxHolders.Load()
							if h <= m || maxHolders.CompareAndSwap(m, h) {
								break
							}
						}
						runtime.Gosched()
						holders.Add(-1)
						b.Release()
						cancel()
					}
				}()
			}
			wg.Wait()
			close(stopResize)
			<-resizeDone

			if m := maxHolders.Load(); m > maxCap {
				t.Errorf("%d concurrent holders, capacity at most %d", m, maxCap)
			}
			if b.InFlight() != 0 || b.Waiting() != 0 {
				t.Errorf("leak: in-flight %d waiting %d after all callers left", b.InFlight(), b.Waiting())
			}
			// Every slot is still usable.
			for i := 0; i < tc.capacity; i++ {
				if !b.TryAcquire() {
					t.Fatalf("slot %d of %d lost", i+1, tc.capacity)
				}
			}
			if b.TryAcquire() {
				t.Errorf("more than %d slots", tc.capacity)
			}
			t.Logf("admitted %d, rejected %d, cancelled %d, max holders %d",
				admitted.Load(), rejected.Load(), cancelled.Load(), maxHolders.Load())
		})
	}
}

func TestSetCapacityUp(t *testing.T) {
	b := mustNew(t, 0, 10)
	var w []<-chan error
	for i := 0; i < 4; i++ {
		w = append(w, enqueue(t, b, context.Background()))
	}
	steps := []struct {
		capacity int
		admitted int // waiters admitted so far, in order
	}{
		{0, 0},
		{2, 2},
		{2, 2},
		{3, 3},
		{10, 4},
	}
	got := 0
	for _, s := range steps {
		b.SetCapacity(s.capacity)
		for ; got < s.admitted; got++ {
			if err := recv(t, w[got]); err != nil {
				t.Fatalf("waiter %d: %v", got, err)
			}
		}
		for i := got; i < len(w); i++ {
			expectPending(t, w[i], "waiter beyond capacity")
		}
		if b.InFlight() != s.admitted || b.Waiting() != len(w)-s.admitted || b.Capacity() != s.capacity {
			t.Fatalf("capacity %d: in-flight %d waiting %d capacity %d", s.capacity, b.InFlight(), b.Waiting(), b.Capacity())
		}
	}
	// Idle capacity is usable by the fast path again.
	if !b.TryAcquire() {
		t.Fatal("TryAcquire failed with free slots and no waiters")
	}
}

func TestSetCapacityDown(t *testing.T) {
	b := mustNew(t, 3, 10)
	for i := 0; i < 3; i++ {
		b.TryAcquire()
	}
	b.SetCapacity(1)
	if b.TryAcquire() {
		t.Fatal("TryAcquire succeeded above the lowered capacity")
	}
	w := enqueue(t, b, context.Background())
	// Holders finish one by one; the waiter is admitted only once fewer than
	// one (the new capacity) hold a slot.
	for held := 3; held > 1; held-- {
		b.Release()
		expectPending(t, w, "waiter while holders exceed capacity")
		if b.InFlight() != held-1 {
			t.Fatalf("in-flight %d, want %d", b.InFlight(), held-1)
		}
	}
	b.Release()
	if err := recv(t, w); err != nil {
		t.Fatal(err)
	}
	if b.InFlight() != 1 || b.Waiting() != 0 {
		t.Fatalf("in-flight %d waiting %d, want 1 and 0", b.InFlight(), b.Waiting())
	}
}

func TestSetCapacityClamps(t *testing.T) {
	b := mustNew(t, 1, 0)
	b.SetCapacity(-5)
	if b.Capacity() != 0 {
		t.Errorf("SetCapacity(-5): capacity %d, want 0", b.Capacity())
	}
	b.SetCapacity(MaxCapacity + 10)
	if b.Capacity() != MaxCapacity {
		t.Errorf("SetCapacity(Max+10): capacity %d, want %d", b.Capacity(), MaxCapacity)
	}
}

func TestReleaseWithoutAcquirePanics(t *testing.T) {
	b := mustNew(t, 1, 0)
	defer func() {
		if recover() == nil {
			t.Fatal("Release without a held slot did not panic")
		}
	}()
	b.Release()
}

func BenchmarkAcquireRelease(b *testing.B) {
	br := mustNew(b, 1, 0)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := br.Acquire(ctx); err != nil {
			b.Fatal(err)
		}
		br.Release()
	}
}

func BenchmarkAcquireReleaseParallel(b *testing.B) {
	// Enough slots for every goroutine RunParallel starts: this measures the
	// lock-free path under contention on the state word, not waiting.
	br := mustNew(b, 4*runtime.GOMAXPROCS(0), 0)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := br.Acquire(ctx); err != nil {
				b.Error(err)
				return
			}
			br.Release()
		}
	})
}

func BenchmarkAcquireReleaseContended(b *testing.B) {
	// One slot, 4 goroutines per CPU: most Acquires queue and are woken by a
	// handoff.
	br := mustNew(b, 1, 1<<20)
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := br.Acquire(ctx); err != nil {
				b.Error(err)
				return
			}
			br.Release()
		}
	})
}
