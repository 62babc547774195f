package collector

import (
	"hash/maphash"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// podIdleTimeout is how long a pod's connection is kept without a
// scrape: a random sample revisits a large service's pods only now and
// then, and they should not hold a connection each meanwhile.
const podIdleTimeout = 10 * time.Second

// podID is a pod as the collector tells it from every other: the service
// whose target lists it, and its address (targets name pods by address,
// not by UID). The service draws the line that matters: a pod's answers
// count in its own service's sample, whose pods are one owner's, and a
// forged answer must not count for another owner's pod. So a connection
// opened to one service's pod never serves another service's, whatever
// address that pod has; and a pod's connection is closed once the round's
// targets no longer list it (Collector.dropLeft): a pod leaves its
// service's ready pods as it starts to stop, before its address can be
// given to another.
type podID struct {
	// service is the Target's Name; "" where a scrape knows only the
	// address, which is then the whole identity.
	service string
	addr    string
}

// connPool keeps the pods' idle keep-alive connections between scrapes:
// at most one per pod (a round scrapes a pod once), at most max in all,
// none for longer than idle, and none for a pod once it has left the
// targets. A connection in the pool holds no state but its socket: every
// scrape reads exactly its response, and a connection handed out again
// must have nothing waiting to be read and still be open (quiet), so that
// no byte a pod sends past its answer is read as the answer to a later
// scrape.
//
// A full pool closes the connection it is handed rather than one it
// holds: the connections kept then stay warm, where evicting the oldest
// would have every pod past the limit close another's connection, each
// round, and all of them dial again.
type connPool struct {
	max  int64
	idle time.Duration
	n    atomic.Int64 // connections held
	seed maphash.Seed
	// Shards keep the workers of a round, who each take and give back a
	// connection per scrape, off one another's lock.
	shards [poolShards]poolShard
	// A sweep closes what expired, every half idle while the pool holds
	// anything (armed), so that a collector that stops running rounds (a
	// leader that lost its lease) closes its connections all the same.
	armed atomic.Bool
	clk   clock.WithDelayedExecution
	// swept, when set (by tests), is called after each sweep.
	swept func()
}

const poolShards = 64

type poolShard struct {
	mu    sync.Mutex
	conns map[podID]idleConn
}

type idleConn struct {
	c     *poolConn
	since time.Time
}

// poolConn is a connection as the pool keeps it: with what quiet needs to
// look at it, set up the first time it is kept and reused every time after,
// so that a scrape on a kept connection allocates nothing.
type poolConn struct {
	net.Conn
	peek peeker
}

// newConnPool returns a pool of at most max connections, each kept for
// idle, swept on clk.
func newConnPool(max int, idle time.Duration, clk clock.WithDelayedExecution) *connPool {
	p := &connPool{max: int64(max), idle: idle, seed: maphash.MakeSeed(), clk: clk}
	for i := range p.shards {
		p.shards[i].conns = make(map[podID]idleConn)
	}
	return p
}

// arm has a sweep run in half the idle time. On a goroutine of its own:
// the sweep reads the clock and arms the next, which a fake clock's
// AfterFunc, running the function while it holds its lock, would not
// allow.
func (p *connPool) arm() {
	p.clk.AfterFunc(p.idle/2, func() { go p.sweep() })
}

// shard is where pod's connection is kept. The address alone picks it:
// it tells pods apart well enough to spread them.
func (p *connPool) shard(pod podID) *poolShard {
	return &p.shards[maphash.String(p.seed, pod.addr)%poolShards]
}

// get takes pod's idle connection out of the pool, or returns nil if it
// holds none that is still fresh at now and quiet.
func (p *connPool) get(pod podID, now time.Time) net.Conn {
	s := p.shard(pod)
	s.mu.Lock()
	ic, ok := s.conns[pod]
	if ok {
		delete(s.conns, pod)
	}
	s.mu.Unlock()
	if !ok {
		return nil
	}
	p.n.Add(-1)
	if now.Sub(ic.since) >= p.idle || !ic.c.peek.quiet() {
		ic.c.Close()
		return nil
	}
	return ic.c
}

// put keeps c as pod's idle connection from now, or closes it if the pool
// is full or already holds one for pod, or c cannot be looked at.
func (p *connPool) put(pod podID, c net.Conn, now time.Time) {
	if p.n.Add(1) > p.max {
		p.n.Add(-1)
		c.Close()
		return
	}
	pc, kept := c.(*poolConn)
	if !kept {
		pc = &poolConn{Conn: c}
		if err := pc.peek.setup(c); err != nil {
			p.n.Add(-1)
			c.Close()
			return
		}
	}
	s := p.shard(pod)
	s.mu.Lock()
	_, dup := s.conns[pod]
	if !dup {
		s.conns[pod] = idleConn{c: pc, since: now}
	}
	s.mu.Unlock()
	if dup {
		p.n.Add(-1)
		c.Close()
		return
	}
	if p.armed.CompareAndSwap(false, true) {
		p.arm()
	}
}

// sweep closes the connections idle for idle or longer, and comes back
// while any is left.
func (p *connPool) sweep() {
	p.closeIdle(p.clk.Now().Add(-p.idle))
	p.armed.Store(false)
	// A put between the two lines above has seen the pool armed, and
	// left it to this to arm it again.
	if p.n.Load() > 0 && p.armed.CompareAndSwap(false, true) {
		p.arm()
	}
	if p.swept != nil {
		p.swept()
	}
}

// closeIdle closes every connection idle since before cutoff.
func (p *connPool) closeIdle(cutoff time.Time) {
	p.closeWhere(func(_ podID, ic idleConn) bool { return ic.since.Before(cutoff) })
}

// closeUnlisted closes the connection of every pod listed does not hold:
// the pods that left.
func (p *connPool) closeUnlisted(listed map[podID]struct{}) {
	p.closeWhere(func(pod podID, _ idleConn) bool {
		_, ok := listed[pod]
		return !ok
	})
}

// closeWhere closes every connection for which gone is true.
func (p *connPool) closeWhere(gone func(podID, idleConn) bool) {
	var closing []net.Conn
	for i := range p.shards {
		s := &p.shards[i]
		s.mu.Lock()
		for pod, ic := range s.conns {
			if gone(pod, ic) {
				delete(s.conns, pod)
				closing = append(closing, ic.c)
			}
		}
		s.mu.Unlock()
	}
	p.n.Add(-int64(len(closing)))
	// Outside the locks: a close is a system call.
	for _, c := range closing {
		c.Close()
	}
}

// len returns how many connections the pool holds.
func (p *connPool) len() int { return int(p.n.Load()) }

// maxIdleConns is how many idle connections a collector with workers
// workers keeps: all the open-file limit allows but a reserve for the
// workers' dials, the activators' websockets and the rest of the process,
// 2,048 files (or workers, if more) and at most half the limit. Past it, a
// pod's connection is closed after its scrape and dialled again at the
// next; at the limit itself, dials would fail instead.
func maxIdleConns(workers int) int {
	limit, ok := openFileLimit()
	if !ok {
		return math.MaxInt32
	}
	return max(limit-max(2048, workers), limit/2)
}
