package demo

import "sync/atomic"

// inflight counts requests in flight, the highest count seen and the requests
// begun, exactly under concurrency and without a lock, so tests can prove a
// concurrency limit held at the app.
type inflight struct {
	current  atomic.Int64
	max      atomic.Int64
	requests atomic.Int64
}

// begin counts a request in.
func (c *inflight) begin() {
	c.requests.Add(1)
	c.raiseMax(c.current.Add(1))
}

// end counts a request out.
func (c *inflight) end() {
	c.current.Add(-1)
}

// raiseMax lifts max to n unless it is already at least n.
func (c *inflight) raiseMax(n int64) {
	for {
		m := c.max.Load()
		if n <= m || c.max.CompareAndSwap(m, n) {
			return
		}
	}
}

// snapshot returns the counters.
func (c *inflight) snapshot() statsSnapshot {
	return statsSnapshot{
		InFlight:    c.current.Load(),
		MaxInFlight: c.max.Load(),
		Requests:    c.requests.Load(),
	}
}

// reset zeroes the request count and restarts the maximum from the requests
// still in flight, and returns the counters as they were before.
func (c *inflight) reset() statsSnapshot {
	before := statsSnapshot{
		MaxInFlight: c.max.Swap(0),
		Requests:    c.requests.Swap(0),
	}
	// Swap first, then fold in the current count: a request that raised
	// the old maximum just before the swap is still counted in current, and
	// one that begins after it raises the new maximum itself.
	before.InFlight = c.current.Load()
	c.raiseMax(before.InFlight)
	return before
}
