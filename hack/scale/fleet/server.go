//go:build linux

package main

import (
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"go.uber.org/zap"

	"github.com/swell-run/swell/pkg/stats"
)

// The pods' stats endpoints: one listening socket takes every pod's
// connections, and a few loops, each one goroutine over one epoll
// instance, serve them. The socket listens on the pods' port on any
// address of the loopback device, and the address a connection was made
// to says which pod it reached. A socket per pod would double the file
// descriptors the fleet needs (one per pod besides one per connection),
// and a goroutine and net/http's buffers per connection would cost tens
// of kilobytes for each of the autoscaler's connections, tens of
// thousands of them: more memory and CPU than the autoscaler under test.
// A loop costs one read and one write system call per scrape, and a few
// bytes per connection.

// listenerTag marks the listening socket's epoll data.
const listenerTag = -1

// listenBacklog is the accept queue: the scraper opens connections to
// thousands of pods at once when it starts.
const listenBacklog = 4096

// epollExclusive (EPOLLEXCLUSIVE) wakes one loop per connection to
// accept, not all.
const epollExclusive = unix.EPOLLEXCLUSIVE

// conn is an accepted connection's state: its pod, and what it could
// not read or write whole (rare on loopback).
type conn struct {
	pod        int32
	in, out    []byte
	closeAfter bool // close once out is written
}

// loop serves the connections it accepts.
type loop struct {
	f    *fleet
	log  *zap.Logger
	epfd int
	lfd  int

	conns  map[int32]*conn
	paused time.Time // the listener rests until then after EMFILE

	events [256]syscall.EpollEvent
	in     [16 << 10]byte
	out    []byte
	resp   responder
	shares [stats.MaxActivatorShares]stats.ActivatorShare

	served, refused, strays, fdExhausted atomic.Uint64
	open                                 atomic.Int64
}

// listen opens the socket every pod's connections arrive at: port on any
// address of the loopback device, so that nothing from outside the
// machine reaches it. With reusePort, the fleet's other processes listen
// on the same port (SO_REUSEPORT) and the kernel spreads the connections
// among them.
func listen(port uint16, reusePort bool) (int, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("listen on port %d: socket: %w", port, err)
	}
	if reusePort {
		err = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	}
	if err == nil {
		err = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
	}
	if err == nil {
		if err = syscall.SetsockoptString(fd, syscall.SOL_SOCKET, syscall.SO_BINDTODEVICE, "lo"); err == nil {
			if err = syscall.Bind(fd, &syscall.SockaddrInet4{Port: int(port)}); err == nil {
				err = syscall.Listen(fd, listenBacklog)
			}
		}
	}
	if err != nil {
		syscall.Close(fd)
		return -1, fmt.Errorf("listen on port %d of the loopback device: %w", port, err)
	}
	return fd, nil
}

// newLoop returns a loop that accepts from the listening socket lfd.
func newLoop(f *fleet, lfd int, log *zap.Logger) (*loop, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	l := &loop{f: f, log: log, epfd: epfd, lfd: lfd, conns: make(map[int32]*conn)}
	if err := l.add(lfd, syscall.EPOLLIN|epollExclusive, listenerTag); err != nil {
		syscall.Close(epfd)
		return nil, err
	}
	return l, nil
}

func (l *loop) add(fd int, events uint32, tag int) error {
	ev := syscall.EpollEvent{Events: events, Fd: int32(fd), Pad: int32(tag)}
	if err := syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return fmt.Errorf("epoll_ctl add: %w", err)
	}
	return nil
}

func (l *loop) modify(fd int, events uint32, tag int) error {
	ev := syscall.EpollEvent{Events: events, Fd: int32(fd), Pad: int32(tag)}
	return syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_MOD, fd, &ev)
}

// run serves until stop is set, checked at least every pollWait, then
// closes every socket it holds.
func (l *loop) run(stop *atomic.Bool) error {
	defer l.close()
	for !stop.Load() {
		n, err := syscall.EpollWait(l.epfd, l.events[:], int(pollWait/time.Millisecond))
		if err != nil {
			if errors.Is(err, syscall.EINTR) {
				continue // the Go runtime's preemption signals
			}
			return fmt.Errorf("epoll_wait: %w", err)
		}
		now := time.Now()
		if !l.paused.IsZero() && !now.Before(l.paused) {
			l.paused = time.Time{}
			if err := l.add(l.lfd, syscall.EPOLLIN|epollExclusive, listenerTag); err != nil {
				return err
			}
		}
		for i := range n {
			ev := &l.events[i]
			fd, tag := int(ev.Fd), int(ev.Pad)
			if tag == listenerTag {
				l.accept(now)
				continue
			}
			if ev.Events&(syscall.EPOLLERR|syscall.EPOLLHUP) != 0 {
				l.drop(fd)
				continue
			}
			if ev.Events&syscall.EPOLLOUT != 0 && !l.flush(fd) {
				continue
			}
			if ev.Events&(syscall.EPOLLIN|syscall.EPOLLRDHUP) != 0 {
				l.read(fd, tag, now)
			}
		}
	}
	return nil
}

// pollWait bounds how long a stop waits for a loop.
const pollWait = 200 * time.Millisecond

func (l *loop) accept(now time.Time) {
	for {
		fd, _, err := syscall.Accept4(l.lfd, syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
		switch {
		case err == nil:
		case errors.Is(err, syscall.EAGAIN):
			return
		case errors.Is(err, syscall.EINTR), errors.Is(err, syscall.ECONNABORTED):
			continue
		case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
			// The connection waits in the backlog; the listener rests a
			// second rather than waking the loop in vain.
			if l.fdExhausted.Add(1) == 1 {
				l.log.Error("out of file descriptors: connections wait in the backlog; the open-file limit is too low for this many pods", zap.Error(err))
			}
			syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_DEL, l.lfd, nil)
			l.paused = now.Add(time.Second)
			return
		default:
			l.log.Warn("accept", zap.Error(err))
			return
		}
		pod, ok := l.podOf(fd)
		if !ok {
			// An address of no pod: as if nothing listened there.
			l.strays.Add(1)
			syscall.Close(fd)
			continue
		}
		// As Go's net does: an answer leaves in one write anyway.
		syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
		if err := l.add(fd, syscall.EPOLLIN|syscall.EPOLLRDHUP, pod); err != nil {
			syscall.Close(fd)
			continue
		}
		l.conns[int32(fd)] = &conn{pod: int32(pod)}
		l.open.Add(1)
	}
}

// podOf is the pod whose address the connection fd was made to.
func (l *loop) podOf(fd int) (int, bool) {
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		return 0, false
	}
	in4, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		return 0, false
	}
	return l.f.pod(netip.AddrPortFrom(netip.AddrFrom4(in4.Addr), uint16(in4.Port)))
}

// read answers every whole request that arrived on fd.
func (l *loop) read(fd, pod int, now time.Time) {
	n, err := syscall.Read(fd, l.in[:])
	switch {
	case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EINTR):
		return // level-triggered: it comes back if there is more
	case err != nil || n == 0:
		l.drop(fd)
		return
	}
	c := l.conns[int32(fd)]
	if c == nil {
		l.drop(fd)
		return
	}
	data := l.in[:n]
	if len(c.in) > 0 {
		c.in = append(c.in, data...)
		data = c.in
	}
	l.out = l.out[:0]
	closeAfter := false
	for len(data) > 0 {
		var r request
		used, err := parseRequest(data, &r)
		if err != nil {
			l.out = l.resp.appendRefusal(l.out, err, now)
			l.refused.Add(1)
			closeAfter = true
			break
		}
		if used == 0 {
			break // the rest of a head is still on its way
		}
		data = data[used:]
		l.out = l.resp.serve(l.out, &r, now, func() stats.Report { return l.f.report(pod, now, &l.shares) })
		l.served.Add(1)
		if r.close {
			closeAfter = true
			break
		}
	}
	if closeAfter || len(data) == 0 {
		c.in = c.in[:0]
	} else {
		c.in = append(c.in[:0], data...) // data may lie in c.in: append moves
	}
	if len(l.out) > 0 || closeAfter {
		l.write(fd, c, l.out, closeAfter)
	}
}

// write sends b on fd, keeping what the socket does not take for when it
// is writable again.
func (l *loop) write(fd int, c *conn, b []byte, closeAfter bool) {
	if len(c.out) > 0 {
		c.out = append(c.out, b...)
		c.closeAfter = c.closeAfter || closeAfter
		return
	}
	for len(b) > 0 {
		n, err := syscall.Write(fd, b)
		switch {
		case err == nil:
			b = b[n:]
			continue
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EAGAIN):
			c.out = append(c.out[:0], b...)
			c.closeAfter = closeAfter
			if err := l.modify(fd, syscall.EPOLLIN|syscall.EPOLLOUT|syscall.EPOLLRDHUP, int(c.pod)); err != nil {
				l.drop(fd)
			}
			return
		}
		l.drop(fd)
		return
	}
	if closeAfter {
		l.drop(fd)
	}
}

// flush writes what waited for fd to be writable. It reports whether the
// connection is still open.
func (l *loop) flush(fd int) bool {
	c := l.conns[int32(fd)]
	if c == nil {
		l.drop(fd)
		return false
	}
	for len(c.out) > 0 {
		n, err := syscall.Write(fd, c.out)
		switch {
		case err == nil:
			c.out = c.out[n:]
			continue
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EAGAIN):
			return true
		}
		l.drop(fd)
		return false
	}
	c.out = nil
	if c.closeAfter {
		l.drop(fd)
		return false
	}
	if err := l.modify(fd, syscall.EPOLLIN|syscall.EPOLLRDHUP, int(c.pod)); err != nil {
		l.drop(fd)
		return false
	}
	return true
}

// drop closes a connection; closing removes it from epoll.
func (l *loop) drop(fd int) {
	if _, ok := l.conns[int32(fd)]; ok {
		delete(l.conns, int32(fd))
		l.open.Add(-1)
	}
	syscall.Close(fd)
}

// close closes every connection the loop holds, and the loop; the
// listening socket is its opener's.
func (l *loop) close() {
	for fd := range l.conns {
		l.drop(int(fd))
	}
	syscall.Close(l.epfd)
}
