//go:build unix

package collector

import (
	"errors"
	"net"
	"syscall"
)

// peeker tells whether a connection, idle since its last answer, has
// nothing to read and is still open: a pod may have queued bytes after its
// answer (a forged answer to the next scrape) or closed it. It looks
// without reading or waiting (MSG_PEEK, MSG_DONTWAIT).
//
// What a look needs is made once, by setup: the RawConn, and the function
// its Control runs, bound to the peeker, which leaves its answer there. A
// look then allocates nothing. A peeker set up is not to be copied.
type peeker struct {
	raw  syscall.RawConn // nil: not a socket, nothing to look at
	look func(fd uintptr)
	got  error // what the last look found
	b    [1]byte
}

// setup readies p to look at c. An error says c is a socket it cannot
// look at.
func (p *peeker) setup(c net.Conn) error {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	p.raw, p.look = raw, p.peek
	return nil
}

func (p *peeker) peek(fd uintptr) {
	_, _, p.got = syscall.Recvfrom(int(fd), p.b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
}

// quiet says whether the connection has nothing to read and is open.
func (p *peeker) quiet() bool {
	if p.raw == nil {
		return true
	}
	// Control, not Read: Read fails at once once the read deadline has
	// passed, and the last scrape's has by the next round.
	if err := p.raw.Control(p.look); err != nil {
		return false
	}
	// Nothing to read is the one good answer: a byte is one too many, and
	// none without an error is the peer's close.
	return errors.Is(p.got, syscall.EAGAIN) || errors.Is(p.got, syscall.EWOULDBLOCK)
}
