package queueproxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"
	"k8s.io/utils/clock"
)

// fastProbePeriod is the time between probes while the app is not ready,
// or a probe of a ready app has just failed: a new pod reports ready
// within about two of these after the app starts listening.
const fastProbePeriod = 25 * time.Millisecond

// probeUserAgent is the User-Agent of HTTP probes, so the app can tell
// them from traffic.
const probeUserAgent = "swell-queue-proxy/probe"

// prober tracks whether the user container accepts requests.
//
// While the app is not ready it probes every fastProbePeriod; once a probe
// succeeds the app is ready and the period relaxes. A failed probe of a
// ready app returns to fast probing at once, and the app is marked not
// ready after failureThreshold failures in a row — so a crashed app is
// noticed within about one relaxed period, and one slow answer under load
// does not flap readiness.
type prober struct {
	check     func(context.Context) error
	clock     clock.Clock
	period    time.Duration
	timeout   time.Duration
	threshold int
	log       *zap.Logger

	ready atomic.Bool

	mu       sync.Mutex // guards failures and the transitions of ready
	failures int

	// group merges concurrent probes (the loop and on-demand probes from
	// the serving port) into one.
	group singleflight.Group
}

// newProber returns a prober of the app at 127.0.0.1:port: an HTTP GET of
// path if path is set, else a TCP connect.
func newProber(port int, path string, period, timeout time.Duration, threshold int, clk clock.Clock, log *zap.Logger) *prober {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	check := tcpCheck(addr)
	if path != "" {
		check = httpCheck("http://" + addr + path)
	}
	return &prober{check: check, clock: clk, period: period, timeout: timeout, threshold: threshold, log: log}
}

// tcpCheck succeeds when something accepts a TCP connection at addr.
func tcpCheck(addr string) func(context.Context) error {
	var d net.Dialer
	return func(ctx context.Context) error {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
}

// httpCheck succeeds when a GET of url answers 2xx or 3xx (redirects are
// not followed), as a kubelet HTTP probe would.
func httpCheck(url string) func(context.Context) error {
	client := &http.Client{
		// A fresh connection per probe, as a kubelet probe: a kept-alive
		// connection could hide an app that stopped accepting new ones.
		Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true, DisableCompression: true},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		req.Header.Set("User-Agent", probeUserAgent)
		res, err := client.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, io.LimitReader(res.Body, 4<<10))
		res.Body.Close()
		if res.StatusCode < 200 || res.StatusCode >= 400 {
			return fmt.Errorf("GET %s: status %d", url, res.StatusCode)
		}
		return nil
	}
}

// Ready reports the result of the latest probes.
func (p *prober) Ready() bool { return p.ready.Load() }

// ProbeNow probes the app at once (joining a probe already running) and
// reports whether it is ready, giving up when ctx ends.
func (p *prober) ProbeNow(ctx context.Context) bool {
	select {
	case res := <-p.group.DoChan("probe", p.probeOnce):
		return res.Err == nil
	case <-ctx.Done():
		return p.Ready()
	}
}

// probeOnce runs one check, bounded by the probe timeout, and records its
// result. It is not tied to a caller's context: callers that join it may
// outlast the first one.
func (p *prober) probeOnce() (any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	err := p.check(ctx)
	p.observe(err)
	return nil, err
}

// observe records a probe result.
func (p *prober) observe(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil {
		p.failures = 0
		if !p.ready.Swap(true) {
			p.log.Info("user container is ready")
		}
		return
	}
	p.failures++
	if p.failures >= p.threshold && p.ready.Swap(false) {
		p.log.Warn("user container is not ready", zap.Int("failedProbes", p.failures), zap.Error(err))
	}
}

// nextWait is the time until the next probe, given the results so far.
func (p *prober) nextWait() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ready.Load() && p.failures == 0 {
		return p.period
	}
	return fastProbePeriod
}

// run probes until ctx ends.
func (p *prober) run(ctx context.Context) {
	for {
		<-p.group.DoChan("probe", p.probeOnce)
		t := p.clock.NewTimer(p.nextWait())
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}
