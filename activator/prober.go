package activator

import (
	"context"
	"io"
	"net/http"
	"time"

	"github.com/swell-run/swell/pkg/network"
)

// probeUntilReady probes p through its queue-proxy until it answers as
// ready, then marks it routable. It retries every ProbeInterval during the
// first ProbeFastWindow (a pod starting from zero is usually ready within
// it, and every interval of delay is added to a cold start), then every
// ProbeSlowInterval, until ctx ends (the pod left the source or the
// activator stops).
func (a *Activator) probeUntilReady(ctx context.Context, t *target, p *pod) {
	start := a.clk.Now()
	for {
		release, ok := a.probeTurn(ctx, t)
		if !ok {
			return
		}
		ready := a.probe(ctx, p.addr)
		release()
		if ready {
			t.markRoutable(p)
			return
		}
		d := a.cfg.ProbeInterval
		if a.clk.Since(start) >= a.cfg.ProbeFastWindow {
			d = a.cfg.ProbeSlowInterval
		}
		timer := a.clk.NewTimer(d)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C():
		}
	}
}

// probeTurn waits until a probe of one of t's pods may go, and returns
// what ends its turn: at once while t holds a request, else once fewer
// than MaxProbes probes that waited are in flight, or once t is asked for
// meanwhile. ok is false when ctx ended first.
func (a *Activator) probeTurn(ctx context.Context, t *target) (release func(), ok bool) {
	wanted := t.wantedSignal()
	if t.held() > 0 {
		return noRelease, true
	}
	select {
	case a.probeSlots <- struct{}{}:
		return a.releaseProbeSlot, true
	case <-wanted:
		return noRelease, true
	case <-ctx.Done():
		return nil, false
	}
}

func (a *Activator) releaseProbeSlot() { <-a.probeSlots }

func noRelease() {}

// probe asks the queue-proxy at addr whether its pod is ready: a GET with
// network.ProbeHeader: queue, answered 200 with the same header by a
// queue-proxy whose app is ready. The header in the answer proves that a
// queue-proxy answered, not whatever else might listen on the port.
func (a *Activator) probe(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.ProbeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
	if err != nil {
		return false
	}
	req.Header[network.ProbeHeader] = probeQueue
	req.Header[network.ProxyHeader] = proxyActivator
	res, err := a.probeClient.Do(req)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, io.LimitReader(res.Body, 4<<10))
	res.Body.Close()
	return res.StatusCode == http.StatusOK && res.Header.Get(network.ProbeHeader) == network.ProbeQueue
}

// newProbeClient returns the client probes go through: its own connections,
// so that a probe never waits behind traffic.
func newProbeClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:               nil,
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     30 * time.Second,
	}}
}
