package drain

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/utils/clock"
	testclock "k8s.io/utils/clock/testing"
)

// waitFor bounds every wait on the drain's goroutine, so a broken test fails
// instead of hanging.
const waitFor = 10 * time.Second

// notifyClock is the fake clock, signalling on waits each time the drain
// takes its ticker's channel to wait for the next tick: the drain has
// started or finished a look at the counters, and the next step of the
// clock reaches it.
type notifyClock struct {
	*testclock.FakeClock
	waits chan struct{}
}

func newNotifyClock() *notifyClock {
	return &notifyClock{FakeClock: testclock.NewFakeClock(time.Unix(1_700_000_000, 0)), waits: make(chan struct{})}
}

func (c *notifyClock) NewTicker(d time.Duration) clock.Ticker {
	return notifyTicker{Ticker: c.FakeClock.NewTicker(d), waits: c.waits}
}

type notifyTicker struct {
	clock.Ticker
	waits chan<- struct{}
}

func (t notifyTicker) C() <-chan time.Time {
	t.waits <- struct{}{}
	return t.Ticker.C()
}

// look steps the clock by by and waits until d has looked at the counters;
// it reports whether the drain ended there rather than waiting for its
// next look.
func look(t *testing.T, c *notifyClock, d *Drainer, by time.Duration) (ended bool) {
	t.Helper()
	c.Step(by)
	select {
	case <-c.waits:
		return false
	case <-d.Done():
		return true
	case <-time.After(waitFor):
		t.Fatal("the drain neither looked again nor ended")
		return false
	}
}

// started waits until the drain started by Start waits for its first look.
func started(t *testing.T, c *notifyClock) {
	t.Helper()
	select {
	case <-c.waits:
	case <-time.After(waitFor):
		t.Fatal("the drain never waited for its first look")
	}
}

func TestDrainState(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	type obs struct {
		at       time.Duration
		inFlight int64
		arrivals uint64
		end      bool
		timedOut bool
	}
	for _, tc := range []struct {
		name         string
		quiet, limit time.Duration
		obs          []obs
	}{
		{"idle pod waits the quiet period", 5 * time.Second, 30 * time.Second, []obs{
			{at: 4900 * time.Millisecond},
			{at: 5 * time.Second, end: true},
		}},
		{"in-flight request holds the drain", 5 * time.Second, 30 * time.Second, []obs{
			{at: 5 * time.Second, inFlight: 1},
			{at: 9 * time.Second, inFlight: 1},
			{at: 10 * time.Second},            // ended between looks: quiet from the last busy look
			{at: 13900 * time.Millisecond},    // 4.9s quiet
			{at: 14 * time.Second, end: true}, // 5s quiet
		}},
		{"a request that came and went restarts the quiet period", 5 * time.Second, 30 * time.Second, []obs{
			{at: 3 * time.Second, arrivals: 1},
			{at: 7 * time.Second, arrivals: 1},
			{at: 8 * time.Second, arrivals: 1, end: true},
		}},
		{"steady traffic runs to the timeout", 5 * time.Second, 30 * time.Second, []obs{
			{at: 10 * time.Second, inFlight: 3, arrivals: 100},
			{at: 29 * time.Second, inFlight: 2, arrivals: 200},
			{at: 30 * time.Second, inFlight: 2, arrivals: 300, end: true, timedOut: true},
		}},
		{"zero quiet period ends once nothing is in flight", 0, 30 * time.Second, []obs{
			{at: 0, inFlight: 1},
			{at: time.Millisecond, arrivals: 1, end: true},
		}},
	} {
		s := newDrainState(t0, tc.quiet, tc.limit, 0)
		for _, o := range tc.obs {
			end, timedOut := s.observe(at(o.at), o.inFlight, o.arrivals)
			if end != o.end || timedOut != o.timedOut {
				t.Errorf("%s: at %v: end=%v timedOut=%v, want %v %v", tc.name, o.at, end, timedOut, o.end, o.timedOut)
			}
			if end {
				break
			}
		}
	}
}

func TestDrainer(t *testing.T) {
	const quiet = time.Second
	clk := newNotifyClock()
	d := New(clk, quiet, 10*time.Second)
	entered := make(chan struct{})
	release := make(chan struct{})
	h := &tracked{d: d, next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
	})}
	serve := func() chan struct{} {
		ended := make(chan struct{})
		go func() {
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
			close(ended)
		}()
		<-entered
		return ended
	}

	if d.Draining() {
		t.Fatal("draining before Start")
	}
	inFlight := serve()
	d.Start()
	d.Start() // idempotent
	if !d.Draining() {
		t.Fatal("not draining after Start")
	}
	started(t, clk)
	poll := PollPeriod(quiet)
	for elapsed := time.Duration(0); elapsed < 3*quiet; elapsed += poll {
		if look(t, clk, d, poll) {
			t.Fatal("drain ended with a request in flight")
		}
	}
	release <- struct{}{}
	<-inFlight

	// A request arriving during the drain is served and restarts the quiet period.
	if look(t, clk, d, quiet/2) {
		t.Fatal("drain ended half a quiet period after the last request")
	}
	late := serve()
	release <- struct{}{}
	<-late
	if look(t, clk, d, poll) { // the drain sees it here
		t.Fatal("drain ended at the look that saw a request")
	}
	for quietFor := poll; quietFor < quiet; quietFor += poll {
		if look(t, clk, d, poll) {
			t.Fatalf("drain ended %v after it last saw a request, before the quiet period", quietFor)
		}
	}
	if !look(t, clk, d, poll) {
		t.Fatal("drain still running a quiet period after the last request")
	}
	if d.TimedOut() {
		t.Error("drain reported a timeout, want a quiet end")
	}
}

func TestDrainerTimeout(t *testing.T) {
	clk := newNotifyClock()
	d := New(clk, time.Second, 5*time.Second)
	d.inFlight.Add(1) // a request that never ends
	d.Start()
	started(t, clk)
	for range 49 {
		if look(t, clk, d, 100*time.Millisecond) {
			t.Fatal("ended before the timeout")
		}
	}
	if !look(t, clk, d, 100*time.Millisecond) {
		t.Fatal("still draining at the timeout")
	}
	if !d.TimedOut() {
		t.Error("TimedOut = false at the drain timeout")
	}
}

func TestDrainerIdleWithZeroQuiet(t *testing.T) {
	d := New(testclock.NewFakeClock(time.Unix(0, 0)), 0, time.Second)
	d.Start()
	select {
	case <-d.Done():
	default:
		t.Fatal("nothing in flight and no quiet period: the drain should end at once")
	}
}
