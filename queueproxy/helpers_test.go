package queueproxy

import (
	"io"
	"net/http"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"k8s.io/utils/clock"
	testclock "k8s.io/utils/clock/testing"
)

// testTime is where the tests' fake clocks start.
var testTime = time.Unix(1_700_000_000, 0)

// notifyClock is the fake clock, telling a test each time the code under
// test waits on it: when it arms a timer (the prober's loop), calls
// AfterFunc (a request's timeouts) or takes a ticker's channel to wait for
// the next tick (the stats reporter, a drain). A loop is thus seen to be
// done with one expiry when it waits for the next, and a step of the clock
// made after that reaches it. Each callback, if set, is called with the
// duration waited for, on the goroutine that waits; set them before the
// clock is in use.
type notifyClock struct {
	*testclock.FakeClock
	onTimer, onAfterFunc, onTick func(time.Duration)
}

func newNotifyClock() *notifyClock {
	return &notifyClock{FakeClock: testclock.NewFakeClock(testTime)}
}

func (c *notifyClock) NewTimer(d time.Duration) clock.Timer {
	t := c.FakeClock.NewTimer(d)
	if c.onTimer != nil {
		c.onTimer(d)
	}
	return t
}

func (c *notifyClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	t := c.FakeClock.AfterFunc(d, f)
	if c.onAfterFunc != nil {
		c.onAfterFunc(d)
	}
	return t
}

func (c *notifyClock) NewTicker(d time.Duration) clock.Ticker {
	return notifyTicker{Ticker: c.FakeClock.NewTicker(d), period: d, c: c}
}

// notifyTicker calls onTick each time its channel is taken: the loops
// that own tickers take it at every wait.
type notifyTicker struct {
	clock.Ticker
	period time.Duration
	c      *notifyClock
}

func (t notifyTicker) C() <-chan time.Time {
	if t.c.onTick != nil {
		t.c.onTick(t.period)
	}
	return t.Ticker.C()
}

// recv receives from ch, failing the test after a generous bound.
func recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

func testLogger(t testing.TB) *zap.Logger {
	return zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
}

// waitFor polls cond until it holds, failing after a generous bound. It is
// used only to observe the state of a server goroutine on the other side of
// a real socket (a request sitting in the breaker's queue), which no
// channel can announce.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// readAll reads a response body and closes it.
func readAll(t testing.TB, res *http.Response) string {
	t.Helper()
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return string(b)
}
