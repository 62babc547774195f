package collector

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/stats"
)

// DefaultScrapeTimeout bounds one scrape of one pod: half the one-second
// round, so a hung pod costs at most half a round.
const DefaultScrapeTimeout = 500 * time.Millisecond

// NewHTTPClient returns an http.Client tuned for one small request per
// pod per second to thousands of pods, for Config.Client when the
// collector should scrape through net/http (the collector's own client,
// used when Config.Client is nil, costs a fraction of its CPU):
//   - one idle keep-alive connection per pod, with no cap on their total
//     (a cap would close and reopen connections every round);
//   - idle connections closed after 10 s, so pods of large services, which
//     a random sample revisits only now and then, hold none;
//   - 1 KiB socket buffers instead of 4 KiB, since a stats response is a few
//     hundred bytes;
//   - dial and response-header timeouts of timeout; no compression, no
//     proxy from the environment, no redirects, HTTP/1.1 only (the
//     metrics port speaks it).
func NewHTTPClient(timeout time.Duration) *http.Client {
	if timeout <= 0 {
		timeout = DefaultScrapeTimeout
	}
	return &http.Client{
		Transport: &http.Transport{
			DialContext:           (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:          0,
			MaxIdleConnsPerHost:   1,
			IdleConnTimeout:       podIdleTimeout,
			ResponseHeaderTimeout: timeout,
			DisableCompression:    true,
			ReadBufferSize:        1 << 10,
			WriteBufferSize:       1 << 10,
			ForceAttemptHTTP2:     false,
		},
		// Redirects have no place in a stats scrape.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// acceptValue is every scrape's Accept header: the newest stats version
// first, as the queue-proxy negotiates.
const acceptValue = stats.ContentTypeV3 + ", " + stats.ContentTypeV2 + ";q=0.9, " + stats.ContentType + ";q=0.5"

// acceptStats is every net/http scrape's header. It is shared: a
// RoundTripper must not modify a request's headers.
var acceptStats = http.Header{"Accept": {acceptValue}}

// A scraper fetches pods' stats reports for one worker of a round at a
// time.
type scraper interface {
	// abort ends the scrape in progress, and fails those that follow,
	// with err until reset: a round's context ended before its deadline,
	// which every scrape's deadline already holds (the autoscaler stops).
	abort(err error)
	reset()
	// scrape fetches pod's stats report, in the newest version the pod
	// serves, by deadline (which is never past ctx's), and decodes it
	// into r.
	scrape(ctx context.Context, deadline time.Time, pod podID, r *stats.Report) (scrapeResult, error)
}

// scrapeResult classifies a scrape for the metrics.
type scrapeResult int

const (
	resultOK scrapeResult = iota
	resultTimeout
	resultStatus
	resultMalformed
	resultError
	numResults
)

var resultNames = [numResults]string{"ok", "timeout", "status", "malformed", "error"}

// errRoundOver fails the scrapes a round had no time left to start.
var errRoundOver = errors.New("round deadline passed before the scrape started")

// httpScraper scrapes with a net/http client (Config.Client), whose
// connections are its Transport's, kept by address.
type httpScraper struct {
	client *http.Client
	// buf holds the body, one byte longer than the longest report so that
	// trailing garbage is seen.
	buf [stats.MaxBinarySize + 1]byte
}

// abort and reset do nothing: a request's context carries the round's
// end.
func (s *httpScraper) abort(error) {}
func (s *httpScraper) reset()      {}

func (s *httpScraper) scrape(ctx context.Context, deadline time.Time, pod podID, r *stats.Report) (scrapeResult, error) {
	addr := pod.addr
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+network.StatsPath, nil)
	if err != nil {
		return resultError, fmt.Errorf("scrape %s: %w", addr, err)
	}
	req.Header = acceptStats
	resp, err := s.client.Do(req)
	if err != nil {
		return classify(err), fmt.Errorf("scrape %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// Read a little so that a short error page leaves the connection
		// reusable.
		io.Copy(io.Discard, io.LimitReader(resp.Body, 512))
		return resultStatus, fmt.Errorf("scrape %s: status %s", addr, resp.Status)
	}
	if ct := resp.Header.Get("Content-Type"); !isType(ct, stats.ContentTypeV3) && !isType(ct, stats.ContentTypeV2) && !isType(ct, stats.ContentType) {
		return resultMalformed, fmt.Errorf("scrape %s: content type %q, want %s, %s or %s", addr, ct, stats.ContentTypeV3, stats.ContentTypeV2, stats.ContentType)
	}
	// A whole report ends with EOF before buf is full (ErrUnexpectedEOF),
	// which also leaves the connection ready for reuse.
	n, err := io.ReadFull(resp.Body, s.buf[:])
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return classify(err), fmt.Errorf("scrape %s: read body: %w", addr, err)
	}
	if err := r.UnmarshalBinary(s.buf[:n]); err != nil {
		return resultMalformed, fmt.Errorf("scrape %s: %w", addr, err)
	}
	return resultOK, nil
}

// isType says whether the Content-Type ct is the media type mt, with or
// without parameters.
func isType(ct, mt string) bool {
	return ct == mt || strings.HasPrefix(ct, mt+";")
}

func classify(err error) scrapeResult {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		return resultTimeout
	}
	return resultError
}
