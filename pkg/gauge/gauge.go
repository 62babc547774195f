// Package gauge reads one gauge from an app's Prometheus metrics endpoint,
// bounded in time and size.
//
// The queue-proxy reads it every second, such as an LLM server's
// vllm:num_requests_waiting, and sends it to the autoscaler with its stats.
// The app is not trusted: its endpoint may hang, answer 100 MB or garbage,
// leave the metric out or report NaN or a negative number. Each of these
// ends the scrape within its Timeout with an error that wraps one of this
// package's sentinels (or context.DeadlineExceeded), so the caller can tell
// them apart with errors.Is.
package gauge

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/swell-run/swell/pkg/series"
)

// The errors a scrape wraps, for errors.Is. A scrape that takes longer than
// its Timeout wraps context.DeadlineExceeded.
var (
	// ErrMissing: no series of the page matched the selector.
	ErrMissing = errors.New("no series matched")
	// ErrNotNumber: the page (or the part of it with the selected
	// family) does not parse as the Prometheus text format.
	ErrNotNumber = errors.New("the page does not parse as the Prometheus text format")
	// ErrType: the selected family is a histogram or a summary, which
	// have no one value.
	ErrType = errors.New("not a gauge")
	// ErrNotFinite: a matched series is NaN or ±Inf, or their sum
	// overflows.
	ErrNotFinite = errors.New("not a finite number")
	// ErrNegative: a matched series is below zero.
	ErrNegative = errors.New("negative")
	// ErrTooLarge: the body is longer than MaxBytes.
	ErrTooLarge = errors.New("too large")
	// ErrStatus: the app answered with a status other than 2xx.
	ErrStatus = errors.New("not a 2xx answer")
)

// DefaultTimeout is the Timeout of a Config that sets none. The queue-proxy
// scrapes every second, so a scrape must be over well before the next.
const DefaultTimeout = 500 * time.Millisecond

// DefaultMaxBytes is the MaxBytes of a Config that sets none: ten times a
// vLLM metrics page (about 100 KB), which bounds what a runaway app costs
// the queue-proxy per scrape to reading and scanning 1 MiB.
const DefaultMaxBytes = 1 << 20

// Config configures a Scraper.
type Config struct {
	// URL is the app's metrics endpoint, http://HOST:PORT/PATH, where HOST
	// is a loopback address (127.0.0.0/8 or ::1) or localhost. Other hosts
	// are refused: the queue-proxy must not become a client of other
	// hosts for whoever writes a service's annotations.
	URL string
	// Selector names the series to read.
	Selector series.Selector
	// Timeout bounds a whole scrape, from connecting to the last byte
	// read. Zero means DefaultTimeout.
	Timeout time.Duration
	// MaxBytes bounds the body: a longer one is an error, and no more
	// than MaxBytes+1 bytes of it are read. Zero means DefaultMaxBytes.
	MaxBytes int64
	// Client, when set, sends the requests, under its own policy for
	// proxies and redirects. Nil means a client of the Scraper's own that
	// keeps a connection to the app alive between scrapes, uses no proxy
	// (whatever HTTP_PROXY says), follows redirects only on URL's host
	// and connects to loopback addresses only.
	Client *http.Client
}

// accept asks for the classic text format, the one format the Scraper
// parses: an app that can also write OpenMetrics or protobuf picks text.
const accept = "text/plain;version=0.0.4"

// maxRedirects bounds the redirects a Scraper's own client follows. One
// is common (a /metrics mount that redirects to /metrics/); a chain is not.
const maxRedirects = 3

// Scraper reads one gauge from one endpoint. It is safe for concurrent
// use. The zero value is not usable; call New.
type Scraper struct {
	url      string
	sel      series.Selector
	timeout  time.Duration
	maxBytes int64
	client   *http.Client
	// scratch holds *scratch values, so that a scrape reuses the
	// buffers of the last.
	scratch sync.Pool
	// missing remembers why the selected family was last missing, so
	// that a wrong selector costs each scrape a scan of the page.
	missing explainer
}

// New checks cfg and returns a Scraper for it. It reports every problem of
// cfg at once.
func New(cfg Config) (*Scraper, error) {
	var errs []error
	u, err := checkURL(cfg.URL)
	if err != nil {
		errs = append(errs, err)
	}
	if err := cfg.Selector.Validate(); err != nil {
		errs = append(errs, err)
	}
	if cfg.Timeout < 0 {
		errs = append(errs, fmt.Errorf("Timeout %v: accepted is a positive duration, or 0 for %v", cfg.Timeout, DefaultTimeout))
	}
	if cfg.MaxBytes < 0 {
		errs = append(errs, fmt.Errorf("MaxBytes %d: accepted is a positive number of bytes, or 0 for %d", cfg.MaxBytes, DefaultMaxBytes))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("gauge: %w", errors.Join(errs...))
	}
	s := &Scraper{
		url:      cfg.URL,
		sel:      cfg.Selector,
		timeout:  cmp.Or(cfg.Timeout, DefaultTimeout),
		maxBytes: cmp.Or(cfg.MaxBytes, DefaultMaxBytes),
		client:   cfg.Client,
		scratch:  sync.Pool{New: func() any { return newScratch() }},
	}
	if s.client == nil {
		s.client = newClient(u)
	}
	return s, nil
}

// checkURL parses raw and checks it is an http:// URL of a loopback host.
func checkURL(raw string) (*url.URL, error) {
	const want = "accepted is http://HOST:PORT/PATH where HOST is 127.0.0.1 (or another 127.x.y.z), [::1] or localhost"
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("URL %q does not parse (%v); %s", raw, err, want)
	}
	if u.Scheme != "http" {
		return nil, fmt.Errorf("URL %q: scheme %q; %s", raw, u.Scheme, want)
	}
	host := u.Hostname()
	if host == "" {
		return nil, fmt.Errorf("URL %q has no host; %s", raw, want)
	}
	if !isLoopback(host) {
		return nil, fmt.Errorf("URL %q: host %s is not this machine's loopback; %s", raw, host, want)
	}
	return u, nil
}

// isLoopback reports whether host is a loopback IP address or localhost.
// Other names are refused even when they resolve to loopback: what they
// resolve to may change.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// newClient returns the Scraper's own client for u.
func newClient(u *url.URL) *http.Client {
	// Whatever a name resolves to and wherever a redirect points, the
	// connection goes to this machine or nowhere.
	dialer := &net.Dialer{Control: loopbackOnly}
	transport := &http.Transport{
		Proxy:       nil, // never HTTP_PROXY: the app is on loopback
		DialContext: dialer.DialContext,
		// One app, one scrape a second: one connection kept alive.
		MaxIdleConns:        1,
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     30 * time.Second,
		// Compressing on loopback only costs the app CPU, and a
		// compressed body would hide its size from MaxBytes until read.
		DisableCompression:     true,
		MaxResponseHeaderBytes: 64 << 10,
	}
	return &http.Client{
		Transport: transport,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if req.URL.Scheme != u.Scheme || req.URL.Host != u.Host {
				return fmt.Errorf("redirect to %s refused: redirects are followed on %s only", req.URL.Redacted(), u.Host)
			}
			if len(via) >= maxRedirects {
				return fmt.Errorf("redirect to %s refused: %d redirects already", req.URL.Redacted(), len(via))
			}
			return nil
		},
	}
}

// loopbackOnly is a net.Dialer's Control that refuses to connect to an
// address other than a loopback one.
func loopbackOnly(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil || !ap.Addr().Unmap().IsLoopback() {
		return fmt.Errorf("connecting to %s refused: the gauge is read from loopback addresses only", address)
	}
	return nil
}

// Scrape reads the endpoint once and returns the value: the sum over every
// series matching the selector of a gauge, counter or untyped family. It
// returns an error wrapping one of the package's sentinel errors, or
// context.DeadlineExceeded when the scrape took longer than the Timeout,
// or ctx's error when ctx ended first.
//
// Only the lines of the page that belong to the selected family are
// parsed; a malformed line elsewhere does not stop the gauge from being
// read.
func (s *Scraper) Scrape(ctx context.Context) (float64, error) {
	v, err := s.scrape(ctx)
	if err != nil {
		return 0, fmt.Errorf("gauge: scrape %s for %s: %w", s.url, s.sel, err)
	}
	return v, nil
}

func (s *Scraper) scrape(parent context.Context) (float64, error) {
	ctx, cancel := context.WithTimeout(parent, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", accept)
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, s.ioError(parent, ctx, err)
	}
	defer resp.Body.Close()

	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// A few bytes of the body usually say why (404 page not found).
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 100))
		return 0, fmt.Errorf("%w: the app answered %s: %q", ErrStatus, resp.Status, b)
	}
	ct := resp.Header.Get("Content-Type")
	if strings.HasPrefix(strings.ToLower(ct), expfmt.ProtoType) {
		return 0, fmt.Errorf("%w: the app answered in protobuf (Content-Type %s), though asked for %s",
			ErrNotNumber, ct, accept)
	}
	if resp.ContentLength > s.maxBytes {
		return 0, fmt.Errorf("%w: the body is %d bytes (Content-Length); MaxBytes is %d",
			ErrTooLarge, resp.ContentLength, s.maxBytes)
	}

	sc := s.scratch.Get().(*scratch)
	defer s.scratch.Put(sc)
	sc.body.Reset()
	if _, err := sc.body.ReadFrom(io.LimitReader(resp.Body, s.maxBytes+1)); err != nil {
		return 0, fmt.Errorf("reading the body: %w", s.ioError(parent, ctx, err))
	}
	if int64(sc.body.Len()) > s.maxBytes {
		return 0, fmt.Errorf("%w: the body is longer than MaxBytes (%d bytes); stopped reading there",
			ErrTooLarge, s.maxBytes)
	}
	v, err := sc.value(sc.body.Bytes(), s.sel, &s.missing)
	if errors.Is(err, ErrNotNumber) && ct != "" && !strings.HasPrefix(ct, "text/plain") {
		err = fmt.Errorf("%w (Content-Type %s)", err, ct)
	}
	return v, err
}

// ioError turns err, from sending the request or reading the answer, into
// the error a scrape returns: a timeout wraps context.DeadlineExceeded
// whatever layer noticed it first.
func (s *Scraper) ioError(parent, ctx context.Context, err error) error {
	switch {
	case parent.Err() != nil:
		return fmt.Errorf("scrape ended: %w", context.Cause(parent))
	case ctx.Err() != nil:
		return fmt.Errorf("no complete answer within %v: %w", s.timeout, context.DeadlineExceeded)
	}
	// The URL is already in the scrape's error.
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
