package collector

import (
	"hash/maphash"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// podIdleTimeout is how long a pod's connection is kept without a
// scrape: a random sample revisits a large service's pods only now and
// then, and they should not hold a connection each meanwhile.
const podIdleTimeout = 10 * time.Second

// connPool keeps the pods' idle keep-alive connections between scrapes:
// at most one per address (a round scrapes a pod once), at most max in all,
// and none for longer than idle. A connection in the pool holds no state
// but its socket: every scrape reads exactly its response, and a
// connection handed out again must have nothing waiting to be read and
// still be open (quiet), so that no byte a pod sends past its answer is
// ever read as the answer to another scrape.
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
	// sweeper closes what expired, every half idle while the pool holds
	// anything, so that a collector that stops running rounds (a leader
	// that lost its lease) closes its connections all the same.
	sweeper *time.Timer
	armed   atomic.Bool
}

const poolShards = 64

type poolShard struct {
	mu    sync.Mutex
	conns map[string]idleConn
}

type idleConn struct {
	c     net.Conn
	since time.Time
}

// newConnPool returns a pool of at most max connections, each kept for
// idle.
func newConnPool(max int, idle time.Duration) *connPool {
	p := &connPool{max: int64(max), idle: idle, seed: maphash.MakeSeed()}
	for i := range p.shards {
		p.shards[i].conns = make(map[string]idleConn)
	}
	p.sweeper = time.AfterFunc(idle, p.sweep)
	p.sweeper.Stop()
	return p
}

func (p *connPool) shard(addr string) *poolShard {
	return &p.shards[maphash.String(p.seed, addr)%poolShards]
}

// get takes addr's idle connection out of the pool, or returns nil if it
// holds none that is still fresh at now.
func (p *connPool) get(addr string, now time.Time) net.Conn {
	s := p.shard(addr)
	s.mu.Lock()
	ic, ok := s.conns[addr]
	if ok {
		delete(s.conns, addr)
	}
	s.mu.Unlock()
	if !ok {
		return nil
	}
	p.n.Add(-1)
	if now.Sub(ic.since) >= p.idle || !quiet(ic.c) {
		ic.c.Close()
		return nil
	}
	return ic.c
}

// put keeps c as addr's idle connection from now, or closes it if the
// pool is full or already holds one for addr.
func (p *connPool) put(addr string, c net.Conn, now time.Time) {
	if p.n.Add(1) > p.max {
		p.n.Add(-1)
		c.Close()
		return
	}
	s := p.shard(addr)
	s.mu.Lock()
	_, dup := s.conns[addr]
	if !dup {
		s.conns[addr] = idleConn{c: c, since: now}
	}
	s.mu.Unlock()
	if dup {
		p.n.Add(-1)
		c.Close()
		return
	}
	if p.armed.CompareAndSwap(false, true) {
		p.sweeper.Reset(p.idle / 2)
	}
}

// sweep closes the connections idle for idle or longer, and comes back
// while any is left.
func (p *connPool) sweep() {
	p.closeIdle(time.Now().Add(-p.idle))
	p.armed.Store(false)
	// A put between the two lines above has seen the sweeper armed, and
	// left it to this to arm it again.
	if p.n.Load() > 0 && p.armed.CompareAndSwap(false, true) {
		p.sweeper.Reset(p.idle / 2)
	}
}

// closeIdle closes every connection idle since before cutoff.
func (p *connPool) closeIdle(cutoff time.Time) {
	var expired []net.Conn
	for i := range p.shards {
		s := &p.shards[i]
		s.mu.Lock()
		for addr, ic := range s.conns {
			if ic.since.Before(cutoff) {
				delete(s.conns, addr)
				expired = append(expired, ic.c)
			}
		}
		s.mu.Unlock()
	}
	p.n.Add(-int64(len(expired)))
	// Outside the locks: a close is a system call.
	for _, c := range expired {
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
