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

// NewHTTPClient returns the http.Client the collector scrapes with when
// Config.Client is nil, tuned for one small request per pod per second to
// thousands of pods:
//   - one idle keep-alive connection per pod, with no cap on their total
//     (a cap would close and reopen connections every round);
//   - idle connections closed after 10 s, so pods of large services, which
//     a random sample revisits only now and then, hold none;
//   - 1 KiB socket buffers instead of 4 KiB, since a stats response is a few
//     hundred bytes;
//   - dial and response-header timeouts of timeout; no compression, no
//     proxy from the environment, HTTP/1.1 only (the metrics port speaks it).
func NewHTTPClient(timeout time.Duration) *http.Client {
	if timeout <= 0 {
		timeout = DefaultScrapeTimeout
	}
	return &http.Client{
		Transport: &http.Transport{
			DialContext:           (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:          0,
			MaxIdleConnsPerHost:   1,
			IdleConnTimeout:       10 * time.Second,
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

// acceptStats is every scrape's header. It is shared: a RoundTripper must
// not modify a request's headers.
var acceptStats = http.Header{"Accept": {stats.ContentTypeV3 + ", " + stats.ContentTypeV2 + ";q=0.9, " + stats.ContentType + ";q=0.5"}}

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

// scrape fetches addr's stats report, in the newest version the pod
// serves, and decodes it into r. buf holds the body, one
// byte longer than the longest report so that trailing garbage is seen.
func scrape(ctx context.Context, client *http.Client, addr string, buf *[stats.MaxBinarySize + 1]byte, r *stats.Report) (scrapeResult, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+network.StatsPath, nil)
	if err != nil {
		return resultError, fmt.Errorf("scrape %s: %w", addr, err)
	}
	req.Header = acceptStats
	resp, err := client.Do(req)
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
	n, err := io.ReadFull(resp.Body, buf[:])
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return classify(err), fmt.Errorf("scrape %s: read body: %w", addr, err)
	}
	if err := r.UnmarshalBinary(buf[:n]); err != nil {
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
