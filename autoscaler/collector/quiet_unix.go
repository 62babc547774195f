//go:build unix

package collector

import (
	"errors"
	"net"
	"syscall"
)

// quiet reports whether c, idle since its last answer, has nothing to read
// and is still open: a pod may have queued bytes after its answer (a
// forged answer to the next scrape, which would be read as that scrape's,
// of whichever pod has the address by then) or closed it. It looks without
// reading or waiting (MSG_PEEK, MSG_DONTWAIT).
func quiet(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var b [1]byte
	var peekErr error
	if err := raw.Read(func(fd uintptr) bool {
		_, _, peekErr = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true
	}); err != nil {
		return false
	}
	// Nothing to read is the one good answer: a byte is one too many, and
	// none without an error is the peer's close.
	return errors.Is(peekErr, syscall.EAGAIN) || errors.Is(peekErr, syscall.EWOULDBLOCK)
}
