//go:build linux

package main

import (
	"bytes"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/stats"
)

// The pods' pushes (-push): each pod keeps one websocket to the
// autoscaler's pod endpoint and sends every period it closes as one
// binary frame, the version-3 report its stats endpoint serves, as a
// pushing queue-proxy does; on a step, its next two periods close at once
// and 100 ms later (closedAt).
//
// One goroutine over one epoll instance holds every push connection of
// the process, with a websocket client of its own for the little each
// connection carries: the upgrade, masked binary frames out, and in
// nothing but the endpoint's close frame, which ends the connection. A
// connection costs a file descriptor and well under a kilobyte (the
// fleet's resident memory grew by 18 MiB for 12,900 pods pushing). The
// endpoint's end of one, a goroutine and gorilla's buffers, costs about
// 10 KiB (the autoscaler's grew by 121 MiB for the same pods): as much in
// the fleet would be half a GiB at 50,000 pods, on the machine under
// test. A wheel of a second's slots holds the pods by where in the
// second their periods close, so a pod is visited once a second, just
// after its close.
//
// Each pod dials one of -push's addresses, the pods spread over them as a
// Service spreads connections over its endpoints: where they are the
// replicas of a sharded autoscaler, each replica redirects its share of
// the pods whose service it does not lead, not one replica all of them.
//
// A pod pushes once its service has pods: once the autoscaler scraped one
// of them, as it does the ready pods it has no push from (a service at
// zero has no queue-proxy to push; and a round samples 4 of 5 pods, so
// the fifth may never be scraped). It connects from its own address, as a
// pod does, which also gives every pod its own ports. A redirect (307:
// another replica leads its service) is followed at once and remembered
// for the next connection; a refusal (403: not a ready pod of the
// service) waits until one of the service's pods is scraped or pushes
// again, and backs off; any other failure, and a connection the
// autoscaler closes, is retried after 1, 2, 4, 8, then 16 s.

// Settings of the pushes.
const (
	// wheelSlots of slotLen make the wheel's second.
	wheelSlots = 100
	slotLen    = time.Second / wheelSlots
	// upgradeSeconds bounds a connection's dial and upgrade.
	upgradeSeconds = 5
	// maxBackoff is the longest wait before a pod dials again.
	maxBackoff = 16
	// maxHops bounds redirects followed in a row.
	maxHops = 3
	// maxHead bounds an upgrade's answer read.
	maxHead = 4 << 10
	// maxTargets bounds the replicas learned from redirects.
	maxTargets = 256
)

// websocketGUID is RFC 6455's, which the accept key is made with.
const websocketGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// pushState is where a pod's connection is.
type pushState uint8

const (
	pushIdle pushState = iota
	pushConnecting
	pushUpgrading
	pushOpen
)

// pushTarget is an autoscaler replica pods push to.
type pushTarget struct {
	sa   syscall.SockaddrInet4
	host string // "host:port", the Host header
}

// pushPod is one pod's push connection.
type pushPod struct {
	fd     int32
	state  pushState
	target uint8 // of pusher.targets; its first dial's is home
	hops   uint8 // redirects followed in a row
	fails  uint8 // failures in a row
	slot   uint8 // of the wheel
	dials  uint32
	// retry is the second (since the epoch) before which it does not
	// dial; refused the second of its latest 403 (-1: none); since the
	// second its dial started.
	retry, refused, since int32
	// lastTo is the close of the latest period pushed, since the epoch.
	lastTo time.Duration
	// buf holds an upgrade's answer as it arrives, then what the socket
	// did not take of a frame (rare on loopback).
	buf []byte
}

// followUp is a pod's sharp follow-up close due at (since the epoch).
type followUp struct {
	pod int
	at  time.Duration
}

// pusher pushes the reports of the pods [lo, hi).
type pusher struct {
	f      *fleet
	log    *zap.Logger
	epfd   int
	lo, hi int
	path   string
	seed   uint64

	targets []pushTarget // -push's; then those redirects named
	homes   int          // how many are -push's
	pods    []pushPod    // pod lo + i
	wheel   [wheelSlots][]int32
	follow  []followUp
	// stepSeen marks the services [svcLo, svcHi) whose step was seen.
	stepSeen     []bool
	svcLo, svcHi int
	lastSlot     int64 // the latest slot visited, since the epoch

	dialRate, tokens float64
	refilled         time.Time

	events  [256]syscall.EpollEvent
	in      [maxHead]byte
	payload []byte
	frame   []byte
	req     []byte
	shares  [stats.MaxActivatorShares]stats.ActivatorShare
	rng     *rand.Rand

	open                                                                 atomic.Int64
	frames, dialed, redirects, refusedN, unavailable, failures, closedBy atomic.Uint64
	fdExhausted                                                          atomic.Uint64
}

// parsePushURLs reads -push: comma-separated ws://host:port URLs with
// IPv4 hosts and one path (network.PodPushPath when none). Every bad
// element is reported.
func parsePushURLs(s string) ([]netip.AddrPort, string, error) {
	var aps []netip.AddrPort
	var paths []string
	var errs []error
	for e := range strings.SplitSeq(s, ",") {
		e = strings.TrimSpace(e)
		u, err := url.Parse(e)
		if err != nil || u.Scheme != "ws" || u.RawQuery != "" {
			errs = append(errs, fmt.Errorf("-push %q: accepted is ws://IPv4:port, e.g. ws://127.0.0.1:8080", e))
			continue
		}
		ap, err := netip.ParseAddrPort(u.Host)
		if err != nil || !ap.Addr().Is4() || ap.Port() == 0 {
			errs = append(errs, fmt.Errorf("-push %q: the host must be an IPv4 address and a port, e.g. ws://127.0.0.1:8080", e))
			continue
		}
		path := u.Path
		if path == "" || path == "/" {
			path = network.PodPushPath
		}
		if len(paths) > 0 && path != paths[0] {
			errs = append(errs, fmt.Errorf("-push %q: path %s, where the first URL's is %s: accepted is one path for all", e, path, paths[0]))
		}
		aps, paths = append(aps, ap), append(paths, path)
	}
	if len(aps) > maxTargets/2 {
		errs = append(errs, fmt.Errorf("-push: %d URLs: accepted are at most %d", len(aps), maxTargets/2))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, "", err
	}
	return aps, paths[0], nil
}

// newPusher returns a pusher of the pods [lo, hi) of f to the endpoints at
// to (path path), pod i dialing to[i % len(to)] first, and at most
// dialRate connections a second.
func newPusher(f *fleet, lo, hi int, to []netip.AddrPort, path string, dialRate float64, log *zap.Logger) (*pusher, error) {
	if len(to) == 0 || len(to) > maxTargets/2 {
		return nil, fmt.Errorf("push: %d endpoints: accepted are 1 to %d", len(to), maxTargets/2)
	}
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	p := &pusher{
		f: f, log: log, epfd: epfd, lo: lo, hi: hi, path: path, seed: f.seed,
		homes:    len(to),
		pods:     make([]pushPod, hi-lo),
		dialRate: dialRate, tokens: 1,
		payload: make([]byte, 0, stats.MaxBinarySize),
		frame:   make([]byte, 0, stats.MaxBinarySize+14),
		rng:     rand.New(rand.NewPCG(f.seed, uint64(lo))),
	}
	for _, ap := range to {
		p.targets = append(p.targets, newPushTarget(ap))
	}
	if hi > lo {
		p.svcLo, p.svcHi = lo/f.perSvc, (hi-1)/f.perSvc+1
	}
	p.stepSeen = make([]bool, p.svcHi-p.svcLo)
	for i := range p.pods {
		pod := lo + i
		pp := &p.pods[i]
		pp.fd, pp.refused = -1, -1
		pp.target = p.home(pod)
		pp.slot = slotOf(f.phase(pod))
		p.wheel[pp.slot] = append(p.wheel[pp.slot], int32(pod))
	}
	return p, nil
}

// home is the target pod dials first.
func (p *pusher) home(pod int) uint8 { return uint8(pod % p.homes) }

func newPushTarget(ap netip.AddrPort) pushTarget {
	return pushTarget{sa: syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}, host: ap.String()}
}

// slotOf is the wheel's slot visited just after a close at to (since the
// epoch): the first whose start is not before it.
func slotOf(to time.Duration) uint8 {
	r := to % time.Second
	if r < 0 {
		r += time.Second
	}
	return uint8((r + slotLen - 1) / slotLen % wheelSlots)
}

// run pushes until stop is set, checked at least every slot, then closes
// every connection.
func (p *pusher) run(stop *atomic.Bool) error {
	defer p.close()
	p.lastSlot = int64(time.Since(p.f.epoch) / slotLen)
	p.refilled = time.Now()
	for !stop.Load() {
		elapsed := time.Since(p.f.epoch)
		wait := (time.Duration(p.lastSlot)+1)*slotLen - elapsed
		for _, u := range p.follow {
			wait = min(wait, u.at-elapsed)
		}
		ms := max(int((wait+time.Millisecond-1)/time.Millisecond), 0)
		n, err := syscall.EpollWait(p.epfd, p.events[:], ms)
		if err != nil && !errors.Is(err, syscall.EINTR) {
			return fmt.Errorf("epoll_wait: %w", err)
		}
		now := time.Now()
		elapsed = now.Sub(p.f.epoch)
		sec := int32(elapsed / time.Second)
		for i := range max(n, 0) {
			p.event(&p.events[i], sec, elapsed)
		}
		p.refill(now)
		p.steps(elapsed)
		p.followUps(elapsed)
		cur := int64(elapsed / slotLen)
		// A loop that fell behind visits at most a second of slots.
		for s := max(p.lastSlot+1, cur-wheelSlots+1); s <= cur; s++ {
			p.visitSlot(uint8(s%wheelSlots), sec, elapsed)
		}
		p.lastSlot = max(p.lastSlot, cur)
	}
	return nil
}

func (p *pusher) refill(now time.Time) {
	p.tokens = min(p.tokens+p.dialRate*now.Sub(p.refilled).Seconds(), max(p.dialRate/10, 1))
	p.refilled = now
}

// visitSlot visits the pods whose periods close in the slot: an open
// connection pushes the period just closed; a pod without one dials when
// it may.
func (p *pusher) visitSlot(slot uint8, sec int32, elapsed time.Duration) {
	for _, pod := range p.wheel[slot] {
		pp := &p.pods[int(pod)-p.lo]
		if pp.slot != slot {
			continue // moved by a step
		}
		switch pp.state {
		case pushOpen:
			p.pushLatest(int(pod), sec, elapsed)
		case pushIdle:
			if sec < pp.retry || p.tokens < 1 {
				continue
			}
			if seen := p.seen(int(pod)); seen == 0 || seen <= pp.refused {
				continue
			}
			p.tokens--
			p.dial(int(pod), sec)
		default:
			if sec-pp.since >= upgradeSeconds {
				p.fail(int(pod), sec, false)
			}
		}
	}
}

// seen is the latest second a pod of pod's service was scraped or pushed
// (0: never): the service has pods then.
func (p *pusher) seen(pod int) int32 {
	var seen int32
	first := pod - pod%p.f.perSvc
	for i := first; i < first+p.f.perSvc; i++ {
		seen = max(seen, p.f.table.scraped[i].Load())
	}
	return seen
}

// steps sees the steps of the process's services: their pods close a
// period at once and push it, and again sharpFollow later, and close
// their periods a second apart from then on.
func (p *pusher) steps(elapsed time.Duration) {
	sec := int32(elapsed / time.Second)
	for svc := p.svcLo; svc < p.svcHi; svc++ {
		if p.stepSeen[svc-p.svcLo] {
			continue
		}
		s, ok := p.f.table.step(svc)
		if !ok {
			continue
		}
		p.stepSeen[svc-p.svcLo] = true
		follow := s.At + sharpFollow
		for pod := max(svc*p.f.perSvc, p.lo); pod < min((svc+1)*p.f.perSvc, p.hi); pod++ {
			pp := &p.pods[pod-p.lo]
			if pp.state == pushOpen {
				p.pushLatest(pod, sec, elapsed)
			}
			p.follow = append(p.follow, followUp{pod: pod, at: follow})
			if slot := slotOf(follow); slot != pp.slot {
				pp.slot = slot
				p.wheel[slot] = append(p.wheel[slot], int32(pod))
			}
		}
	}
}

// followUps pushes the sharp follow-ups due.
func (p *pusher) followUps(elapsed time.Duration) {
	sec := int32(elapsed / time.Second)
	keep := p.follow[:0]
	for _, u := range p.follow {
		if u.at > elapsed {
			keep = append(keep, u)
			continue
		}
		if p.pods[u.pod-p.lo].state == pushOpen {
			p.pushLatest(u.pod, sec, elapsed)
		}
	}
	p.follow = keep
}

// pushLatest pushes the latest period pod closed, unless it pushed it
// already.
func (p *pusher) pushLatest(pod int, sec int32, elapsed time.Duration) {
	pp := &p.pods[pod-p.lo]
	r := p.f.reportAt(pod, elapsed, &p.shares)
	to := r.End.Sub(p.f.epoch)
	if r.Period <= 0 || to <= pp.lastTo {
		return
	}
	pp.lastTo = to
	p.frame = appendMaskedFrame(p.frame[:0], r.AppendBinaryV3(p.payload[:0]), p.rng.Uint32())
	if p.write(pod, p.frame) {
		p.frames.Add(1)
		// A pod pushing is ready, as one scraped is.
		p.f.table.scraped[pod].Store(sec)
	} else {
		p.drop(pod, sec)
	}
}

// appendMaskedFrame appends a client's binary frame of payload, masked
// with mask (RFC 6455, 5.2, 5.3).
func appendMaskedFrame(b, payload []byte, mask uint32) []byte {
	b = append(b, 0x82) // FIN, binary
	switch n := len(payload); {
	case n < 126:
		b = append(b, 0x80|byte(n))
	case n <= 0xffff:
		b = append(b, 0x80|126)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b = append(b, 0x80|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	var key [4]byte
	binary.BigEndian.PutUint32(key[:], mask)
	b = append(b, key[:]...)
	for i, c := range payload {
		b = append(b, c^key[i&3])
	}
	return b
}

// write writes b on pod's connection, keeping what the socket does not
// take for when it is writable; false when the connection broke.
func (p *pusher) write(pod int, b []byte) bool {
	pp := &p.pods[pod-p.lo]
	if len(pp.buf) > 0 {
		pp.buf = append(pp.buf, b...)
		return true
	}
	for len(b) > 0 {
		n, err := syscall.Write(int(pp.fd), b)
		switch {
		case err == nil:
			b = b[n:]
			continue
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EAGAIN):
			pp.buf = append(pp.buf[:0], b...)
			return p.watch(pod, syscall.EPOLLIN|syscall.EPOLLOUT|syscall.EPOLLRDHUP) == nil
		}
		return false
	}
	return true
}

func (p *pusher) watch(pod int, events uint32) error {
	pp := &p.pods[pod-p.lo]
	ev := syscall.EpollEvent{Events: events, Fd: pp.fd, Pad: int32(pod)}
	return syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_MOD, int(pp.fd), &ev)
}

// dial opens pod's connection to its target, from the pod's address.
func (p *pusher) dial(pod int, sec int32) {
	pp := &p.pods[pod-p.lo]
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
			if p.fdExhausted.Add(1) == 1 {
				p.log.Error("out of file descriptors for the pods' push connections: the open-file limit is too low for this many pods", zap.Error(err))
			}
			p.tokens = 0 // no more dials this slot
		}
		p.fail(pod, sec, false)
		return
	}
	// The port is chosen at connect, within the pod's own address's
	// ports, which no other pod shares.
	syscall.SetsockoptInt(fd, syscall.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1)
	syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
	err = syscall.Bind(fd, &syscall.SockaddrInet4{Addr: p.f.addrs[pod].Addr().As4()})
	if err == nil {
		if err = syscall.Connect(fd, &p.targets[pp.target].sa); errors.Is(err, syscall.EINPROGRESS) {
			err = nil
		}
	}
	if err == nil {
		ev := syscall.EpollEvent{Events: syscall.EPOLLOUT | syscall.EPOLLRDHUP, Fd: int32(fd), Pad: int32(pod)}
		err = syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_ADD, fd, &ev)
	}
	if err != nil {
		syscall.Close(fd)
		p.fail(pod, sec, true)
		return
	}
	pp.fd, pp.state, pp.since = int32(fd), pushConnecting, sec
	pp.dials++
	p.dialed.Add(1)
}

// key is the Sec-WebSocket-Key of pod's current dial, made again, not
// kept, when its answer is checked.
func (p *pusher) key(pod int) []byte {
	var raw [16]byte
	x := p.seed ^ uint64(pod)<<32 ^ uint64(p.pods[pod-p.lo].dials)
	binary.LittleEndian.PutUint64(raw[:8], splitmix(x))
	binary.LittleEndian.PutUint64(raw[8:], splitmix(^x))
	return base64.StdEncoding.AppendEncode(nil, raw[:])
}

// acceptKey is the Sec-WebSocket-Accept an endpoint answers key with.
func acceptKey(key []byte) string {
	h := sha1.Sum(append(key, websocketGUID...))
	return base64.StdEncoding.EncodeToString(h[:])
}

// event handles a readiness event of a pod's socket.
func (p *pusher) event(ev *syscall.EpollEvent, sec int32, elapsed time.Duration) {
	pod := int(ev.Pad)
	if pod < p.lo || pod >= p.hi {
		return
	}
	pp := &p.pods[pod-p.lo]
	if pp.fd != ev.Fd {
		return // an event of a socket closed since
	}
	switch pp.state {
	case pushConnecting:
		if errno, err := syscall.GetsockoptInt(int(pp.fd), syscall.SOL_SOCKET, syscall.SO_ERROR); err != nil || errno != 0 {
			p.fail(pod, sec, true)
			return
		}
		p.req = p.upgradeRequest(p.req[:0], pod)
		if n, err := syscall.Write(int(pp.fd), p.req); err != nil || n != len(p.req) {
			p.fail(pod, sec, true)
			return
		}
		pp.state = pushUpgrading
		if p.watch(pod, syscall.EPOLLIN|syscall.EPOLLRDHUP) != nil {
			p.fail(pod, sec, false)
		}
	case pushUpgrading:
		n, err := syscall.Read(int(pp.fd), p.in[:])
		switch {
		case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EINTR):
			return
		case err != nil || n == 0:
			p.fail(pod, sec, false)
			return
		}
		pp.buf = append(pp.buf, p.in[:n]...)
		p.upgraded(pod, sec, elapsed)
	case pushOpen:
		if ev.Events&syscall.EPOLLOUT != 0 && !p.flush(pod) {
			p.drop(pod, sec)
			return
		}
		if ev.Events&(syscall.EPOLLIN|syscall.EPOLLRDHUP|syscall.EPOLLERR|syscall.EPOLLHUP) != 0 {
			// The endpoint sends nothing but a close frame: whatever
			// arrives, or the end of the stream, ends the connection.
			if _, err := syscall.Read(int(pp.fd), p.in[:]); errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINTR) {
				return
			}
			p.closedBy.Add(1)
			p.drop(pod, sec)
		}
	}
}

// flush writes what waited for pod's socket to be writable.
func (p *pusher) flush(pod int) bool {
	pp := &p.pods[pod-p.lo]
	for len(pp.buf) > 0 {
		n, err := syscall.Write(int(pp.fd), pp.buf)
		switch {
		case err == nil:
			pp.buf = pp.buf[n:]
			continue
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EAGAIN):
			return true
		}
		return false
	}
	pp.buf = nil
	return p.watch(pod, syscall.EPOLLIN|syscall.EPOLLRDHUP) == nil
}

// upgradeRequest appends pod's upgrade request to its target.
func (p *pusher) upgradeRequest(b []byte, pod int) []byte {
	t := &p.targets[p.pods[pod-p.lo].target]
	b = append(b, "GET "...)
	b = append(b, p.path...)
	b = append(b, '?')
	b = append(b, network.PodPushService...)
	b = append(b, '=')
	b = append(b, url.QueryEscape(p.f.keys[pod/p.f.perSvc])...)
	b = append(b, '&')
	b = append(b, network.PodPushAddr...)
	b = append(b, '=')
	b = append(b, url.QueryEscape(p.f.addrs[pod].String())...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, t.host...)
	b = append(b, "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: "...)
	b = append(b, p.key(pod)...)
	return append(b, "\r\n\r\n"...)
}

// upgraded reads the answer to pod's upgrade, once whole: 101 opens the
// connection, a redirect dials the replica it names, 403 waits for a
// scrape, anything else is a failure.
func (p *pusher) upgraded(pod int, sec int32, elapsed time.Duration) {
	pp := &p.pods[pod-p.lo]
	end := bytes.Index(pp.buf, []byte("\r\n\r\n"))
	if end < 0 {
		if len(pp.buf) >= maxHead {
			p.fail(pod, sec, false)
		}
		return
	}
	code, headers := parseAnswer(pp.buf[:end])
	rest := len(pp.buf) - end - 4
	switch {
	case code == 101:
		if headers["sec-websocket-accept"] != acceptKey(p.key(pod)) || rest > 0 {
			p.fail(pod, sec, false)
			return
		}
		pp.buf = nil
		pp.state, pp.fails, pp.hops = pushOpen, 0, 0
		p.open.Add(1)
		// Its latest period at once: the endpoint need not wait a
		// second for its first.
		p.pushLatest(pod, sec, elapsed)
	case code == 301 || code == 302 || code == 307 || code == 308:
		p.redirects.Add(1)
		t, ok := p.targetOf(headers["location"])
		p.closeFD(pod)
		if !ok || pp.hops >= maxHops {
			p.fail(pod, sec, false)
			return
		}
		pp.target, pp.hops = t, pp.hops+1
		p.dial(pod, sec)
	case code == 403:
		p.refusedN.Add(1)
		p.backoff(pod, sec, false)
		pp.refused = sec
	default:
		if code == 503 {
			p.unavailable.Add(1)
		}
		p.fail(pod, sec, false)
	}
}

// targetOf is the target a redirect's location names, added if new.
func (p *pusher) targetOf(location string) (uint8, bool) {
	u, err := url.Parse(location)
	if err != nil {
		return 0, false
	}
	ap, err := netip.ParseAddrPort(u.Host)
	if err != nil || !ap.Addr().Is4() {
		return 0, false
	}
	for i, t := range p.targets {
		if t.host == ap.String() {
			return uint8(i), true
		}
	}
	if len(p.targets) >= maxTargets {
		return 0, false
	}
	p.targets = append(p.targets, newPushTarget(ap))
	return uint8(len(p.targets) - 1), true
}

// parseAnswer reads an answer's head: its status code (0 when it does
// not parse) and its headers, by lower-case name.
func parseAnswer(head []byte) (int, map[string]string) {
	line, rest, _ := bytes.Cut(head, []byte("\r\n"))
	_, status, ok := bytes.Cut(line, []byte(" "))
	if !ok || !bytes.HasPrefix(line, []byte("HTTP/1.")) || len(status) < 3 {
		return 0, nil
	}
	code, err := strconv.Atoi(string(status[:3]))
	if err != nil {
		return 0, nil
	}
	headers := map[string]string{}
	for len(rest) > 0 {
		var h []byte
		h, rest, _ = bytes.Cut(rest, []byte("\r\n"))
		if name, value, ok := bytes.Cut(h, []byte(":")); ok {
			headers[string(bytes.ToLower(bytes.TrimSpace(name)))] = string(bytes.TrimSpace(value))
		}
	}
	return code, headers
}

// closeFD closes pod's socket, if it has one; closing removes it from
// epoll.
func (p *pusher) closeFD(pod int) {
	pp := &p.pods[pod-p.lo]
	if pp.fd >= 0 {
		syscall.Close(int(pp.fd))
	}
	if pp.state == pushOpen {
		p.open.Add(-1)
	}
	pp.fd, pp.state, pp.buf = -1, pushIdle, nil
}

// fail ends a dial or upgrade that failed: the pod dials again after its
// backoff, home when the one it was sent to did not answer
// (unreachable).
func (p *pusher) fail(pod int, sec int32, unreachable bool) {
	p.failures.Add(1)
	p.backoff(pod, sec, unreachable)
}

// backoff closes pod's socket and has it dial again after its backoff.
func (p *pusher) backoff(pod int, sec int32, unreachable bool) {
	pp := &p.pods[pod-p.lo]
	p.closeFD(pod)
	if unreachable {
		pp.target = p.home(pod)
	}
	pp.hops = 0
	pp.fails = min(pp.fails+1, 8)
	pp.retry = sec + int32(min(1<<(pp.fails-1), maxBackoff))
}

// drop ends an open connection that broke or that the endpoint closed:
// the pod dials again the next second, then backs off.
func (p *pusher) drop(pod int, sec int32) {
	pp := &p.pods[pod-p.lo]
	p.closeFD(pod)
	pp.fails = min(pp.fails+1, 8)
	pp.retry = sec + int32(min(1<<(pp.fails-1), maxBackoff))
}

// close closes every connection, with a close frame (1001, going away)
// on those open, and the epoll instance.
func (p *pusher) close() {
	for i := range p.pods {
		pod := p.lo + i
		if p.pods[i].state == pushOpen {
			p.frame = appendMaskedCloseFrame(p.frame[:0], 1001, p.rng.Uint32())
			syscall.Write(int(p.pods[i].fd), p.frame)
		}
		p.closeFD(pod)
	}
	syscall.Close(p.epfd)
}

// appendMaskedCloseFrame appends a client's close frame with code.
func appendMaskedCloseFrame(b []byte, code uint16, mask uint32) []byte {
	var payload [2]byte
	binary.BigEndian.PutUint16(payload[:], code)
	b = appendMaskedFrame(b, payload[:], mask)
	b[0] = 0x88 // FIN, close
	return b
}
