package collector

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/stats"
)

// The collector's own HTTP/1.1 client, for its one request: GET /stats
// from a pod, thousands of times a second. net/http's client spends most
// of a scrape's CPU on what this request does not need: two goroutines per
// connection and the hand-offs between them, a header map per response,
// a Request and its URL per scrape (docs/collector.md, "The scraping
// client").
// Here a worker writes a request it encodes itself on a kept-alive
// socket, reads the whole response into its own buffer, parses the few
// header fields a stats response needs, and gives the socket back to the
// pool: no goroutine, and no allocation once the connection is open.
//
// The pod is not trusted, so the response is held to what a queue-proxy
// sends: the head within maxHead bytes, a 200 with a Content-Length (a
// stats report is never sent in chunks; Transfer-Encoding is refused) of
// at most stats.MaxBinarySize bytes, a stats Content-Type, and the whole
// exchange, dial included, within the scrape's deadline. Anything else
// fails the scrape and closes the connection; so does every error.
// Nothing a pod sends is followed: no redirect, no proxy, no upgrade.

// userAgent names the scraper to the pods.
const userAgent = "swell-autoscaler"

// connScraper is one worker's client: its buffers, and the connection in
// use, which abort reaches through mu.
type connScraper struct {
	pool   *connPool
	dialer net.Dialer
	// buf holds one response, the longest a scrape accepts: a head of
	// maxHead bytes and a body of stats.MaxBinarySize.
	buf [maxHead + stats.MaxBinarySize]byte
	req []byte

	mu        sync.Mutex
	cur       net.Conn
	cancelled error // abort's
}

func newConnScraper(pool *connPool, timeout time.Duration) *connScraper {
	return &connScraper{
		pool: pool,
		// No TCP keep-alive probes: an idle connection is closed long
		// before the first would be sent.
		dialer: net.Dialer{Timeout: timeout, KeepAlive: -1},
	}
}

// abort ends the scrape in progress, and fails those that follow, with
// err until reset.
func (s *connScraper) abort(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cancelled = err
	if s.cur != nil {
		s.cur.SetDeadline(aLongTimeAgo)
	}
}

func (s *connScraper) reset() {
	s.mu.Lock()
	s.cancelled = nil
	s.mu.Unlock()
}

// aLongTimeAgo is a deadline that has passed.
var aLongTimeAgo = time.Unix(1, 0)

func (s *connScraper) scrape(ctx context.Context, deadline time.Time, pod podID, r *stats.Report) (scrapeResult, error) {
	res, err := s.get(ctx, deadline, pod, r)
	if err != nil {
		return res, fmt.Errorf("scrape %s: %w", pod.addr, err)
	}
	return resultOK, nil
}

// get fetches pod's report into r, on pod's own connection from the pool
// or a new one. A connection from the pool that turns out closed before it
// answered anything (the pod closed it while it was idle) is replaced by a
// new one once.
func (s *connScraper) get(ctx context.Context, deadline time.Time, pod podID, r *stats.Report) (scrapeResult, error) {
	req, err := appendRequest(s.req[:0], pod.addr)
	if err != nil {
		return resultError, err
	}
	s.req = req
	s.mu.Lock()
	cancelled := s.cancelled
	s.mu.Unlock()
	if cancelled != nil {
		return classify(cancelled), cancelled
	}
	c := s.pool.get(pod, time.Now())
	reused := c != nil
	for {
		if c == nil {
			if c, err = s.dial(ctx, deadline, pod.addr); err != nil {
				return classify(err), err
			}
		}
		res, keep, err := s.exchange(c, deadline, r)
		s.mu.Lock()
		s.cur = nil
		cancelled := s.cancelled
		s.mu.Unlock()
		if !keep || err != nil {
			c.Close()
		} else {
			s.pool.put(pod, c, time.Now())
		}
		switch {
		case err != nil && cancelled != nil:
			return classify(cancelled), cancelled
		case errors.Is(err, errStale) && reused:
			reused, c = false, nil
			continue
		case errors.Is(err, errStale):
			err = fmt.Errorf("connection closed before the response: %w", io.ErrUnexpectedEOF)
		}
		return res, err
	}
}

// dial connects to addr by deadline.
func (s *connScraper) dial(ctx context.Context, deadline time.Time, addr string) (net.Conn, error) {
	d := s.dialer
	d.Deadline = deadline
	// Not Dialer.DialTCP with a parsed address: given no local address
	// it binds to one explicitly, and a bind searches the port range
	// where a connect picks a port at once: milliseconds of system CPU a
	// dial once thousands of ports are in TIME_WAIT.
	return d.DialContext(ctx, "tcp", addr)
}

// errStale says a connection ended before a byte of the response came:
// one from the pool was closed by the pod while it was idle.
var errStale = errors.New("connection closed before the response")

// exchange sends s.req on c and reads the response into r by deadline.
// keep says c may serve another scrape.
func (s *connScraper) exchange(c net.Conn, deadline time.Time, r *stats.Report) (res scrapeResult, keep bool, err error) {
	s.mu.Lock()
	if s.cancelled != nil {
		s.mu.Unlock()
		return resultError, false, s.cancelled
	}
	s.cur = c
	err = c.SetDeadline(deadline)
	s.mu.Unlock()
	if err != nil {
		return resultError, false, err
	}
	if _, err := c.Write(s.req); err != nil {
		if isStale(err) {
			return resultError, false, errStale
		}
		return classify(err), false, err
	}
	n, searched, headLen := 0, 0, 0
	var h responseHead
	for {
		m, rerr := c.Read(s.buf[n:])
		n += m
		if headLen == 0 {
			if headLen = headEnd(s.buf[:n], searched); headLen == 0 {
				searched = n
				switch {
				case n > maxHead:
					return resultMalformed, false, errHeadTooLarge
				case rerr == nil:
					continue
				case n == 0 && isStale(rerr):
					return resultError, false, errStale
				case rerr == io.EOF:
					return resultError, false, fmt.Errorf("connection closed in the response head: %w", io.ErrUnexpectedEOF)
				}
				return classify(rerr), false, rerr
			}
			if h, err = parseHead(s.buf[:headLen]); err != nil {
				return resultMalformed, false, err
			}
			if res, err := checkHead(&h); err != nil {
				return res, false, err
			}
		}
		if n >= headLen+h.contentLength {
			break
		}
		if rerr == io.EOF {
			return resultError, false, fmt.Errorf("connection closed after %d of the body's %d bytes: %w", n-headLen, h.contentLength, io.ErrUnexpectedEOF)
		}
		if rerr != nil {
			return classify(rerr), false, rerr
		}
	}
	if err := r.UnmarshalBinary(s.buf[headLen : headLen+h.contentLength]); err != nil {
		return resultMalformed, false, err
	}
	// Bytes past the body answer no request: the connection cannot be
	// trusted with the next one.
	return resultOK, !h.close && n == headLen+h.contentLength, nil
}

// checkHead holds a response's head to what a stats response is.
func checkHead(h *responseHead) (scrapeResult, error) {
	if h.status != 200 {
		return resultStatus, fmt.Errorf("status %d %q", h.status, clip(h.reason))
	}
	if ct := h.contentType; !isType(string(ct), stats.ContentTypeV3) && !isType(string(ct), stats.ContentTypeV2) && !isType(string(ct), stats.ContentType) {
		return resultMalformed, fmt.Errorf("content type %q, want %s, %s or %s", clip(ct), stats.ContentTypeV3, stats.ContentTypeV2, stats.ContentType)
	}
	switch {
	case h.transferEncoding:
		return resultMalformed, errors.New("a Transfer-Encoding: a stats response is sent whole, with a Content-Length")
	case h.contentLength < 0:
		return resultMalformed, errors.New("no Content-Length")
	case h.contentLength > stats.MaxBinarySize:
		return resultMalformed, fmt.Errorf("a body of %d bytes, longer than any stats report (%d)", h.contentLength, stats.MaxBinarySize)
	}
	return resultOK, nil
}

// isStale says whether err is the end of a connection the peer closed.
func isStale(err error) bool {
	return err == io.EOF || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// appendRequest appends the scrape of addr to b: a GET of the stats in
// the newest version the pod serves (acceptValue), with nothing a pod
// could act on but the Accept header.
func appendRequest(b []byte, addr string) ([]byte, error) {
	// addr goes into the Host header: it must not end it early.
	if addr == "" {
		return b, errors.New(`address "": not host:port`)
	}
	for i := range len(addr) {
		if c := addr[i]; c <= ' ' || c >= 0x7f {
			return b, fmt.Errorf("address %q: not host:port", addr)
		}
	}
	b = append(b, "GET "+network.StatsPath+" HTTP/1.1\r\nHost: "...)
	b = append(b, addr...)
	return append(b, "\r\nUser-Agent: "+userAgent+"\r\nAccept: "+acceptValue+"\r\n\r\n"...), nil
}
