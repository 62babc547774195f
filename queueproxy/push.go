package queueproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/zap"
	"golang.org/x/time/rate"
	"k8s.io/utils/clock"

	"github.com/swell-run/swell/pkg/stats"
)

// The push's timing and bounds.
const (
	// pushHandshakeTimeout bounds a dial: the connection and the websocket
	// handshake. An autoscaler that went away must not hold a dial for
	// long (gorilla's default waits 45 s).
	pushHandshakeTimeout = 5 * time.Second
	// pushWriteTimeout bounds the write of one frame: a connection whose
	// writes stall is given up and dialled again.
	pushWriteTimeout = 2 * time.Second
	// pushMinBackoff and pushMaxBackoff bound the wait before a dial after
	// a failure, which doubles from the one to the other.
	pushMinBackoff = 100 * time.Millisecond
	pushMaxBackoff = 5 * time.Second
	// A 503's Retry-After is honoured within these bounds.
	retryAfterMin = time.Second
	retryAfterMax = 30 * time.Second
	// pushMaxRedirects bounds the redirects one dial follows. The replica
	// a pod reaches redirects it at most once, to the one that leads its
	// service; a longer chain means the replicas disagree about who leads,
	// which a later dial settles.
	pushMaxRedirects = 4
	// pushStableAfter is how long a connection must carry frames for the
	// backoff to start over once it ends: an autoscaler that accepts and
	// drops at once must not be dialled at full speed.
	pushStableAfter = 3 * time.Second
	// sharpFollowUp is the time between the two reports a sharp change
	// pushes: the first closes the period the change happened in, which
	// mostly measured the load before it; the second measures the new
	// level alone.
	sharpFollowUp = 100 * time.Millisecond
	// sharpEvery is the least time between two sharp pushes. With the one
	// report a second, a pod pushes at most three frames a second, below
	// the autoscaler's bound (5 a second, 10 at once).
	sharpEvery = time.Second
	// pushPingPeriod and pushPongWait find an autoscaler that vanished
	// without closing (its node died): writes to it still succeed, into
	// the socket's buffer, for many minutes. The pusher pings at most
	// once a pushPingPeriod, with a frame, and gives the connection up
	// when no pong came for pushPongWait.
	pushPingPeriod = 5 * time.Second
	pushPongWait   = 3 * pushPingPeriod
	// pushReadLimit bounds a frame from the autoscaler, which sends only
	// control frames (at most 125 bytes).
	pushReadLimit = 512
)

// mailbox hands the reporter's reports to the pusher: one slot, the
// newest wins, so that the reporter never waits for the network and a
// pusher that fell behind sends only the newest.
type mailbox struct {
	latest atomic.Pointer[snapshot]
	// ready has a value when latest may hold a report not taken yet.
	ready chan struct{}
}

func newMailbox() *mailbox { return &mailbox{ready: make(chan struct{}, 1)} }

// put makes s the report to send. It never blocks.
func (m *mailbox) put(s *snapshot) {
	m.latest.Store(s)
	select {
	case m.ready <- struct{}{}:
	default: // the pusher has yet to look, and will find s
	}
}

// take returns the report put last and empties the slot, or nil.
func (m *mailbox) take() *snapshot { return m.latest.Swap(nil) }

// noThreshold is a disarmed loadWatch's threshold: no count of requests
// reaches it.
const noThreshold = math.MaxInt64

// loadWatch notices a sharp change of the pod's load on the request path:
// it counts the requests in flight, as the tracker does, and fires when
// the count reaches a threshold that the pusher sets from the last closed
// period (sharpThreshold). A request costs it an atomic add at each end
// and one atomic load; only the one that reaches the threshold does more,
// a store and a send that never blocks. It is disarmed while the pusher
// is not connected and for sharpEvery after it fired.
type loadWatch struct {
	inFlight  atomic.Int64
	threshold atomic.Int64
	// capacity is ContainerConcurrency (0: unlimited): past it, requests
	// wait in the breaker's queue.
	capacity int
	// fired has a value when the watch fired and the pusher has yet to
	// see it.
	fired chan struct{}
}

func newLoadWatch(capacity int) *loadWatch {
	w := &loadWatch{capacity: capacity, fired: make(chan struct{}, 1)}
	w.threshold.Store(noThreshold)
	return w
}

// start counts a request that arrived.
func (w *loadWatch) start() {
	if w.inFlight.Add(1) >= w.threshold.Load() {
		w.fire()
	}
}

// end counts a request that left.
func (w *loadWatch) end() { w.inFlight.Add(-1) }

// fire disarms the watch, so that the requests after this one go by at
// the cost of the load alone, and tells the pusher. The pusher arms the
// watch again after any fire: when its sharpEvery has passed, or when it
// next connects.
func (w *loadWatch) fire() {
	w.threshold.Store(noThreshold)
	select {
	case w.fired <- struct{}{}:
	default: // the pusher has yet to see the last one
	}
}

// arm sets the threshold for a last closed period of concurrency c.
func (w *loadWatch) arm(c float64) { w.threshold.Store(sharpThreshold(c, w.capacity)) }

func (w *loadWatch) disarm() { w.threshold.Store(noThreshold) }

// sharpThreshold is the number of requests in flight at which the load
// has changed sharply since a period of average concurrency c, on a pod
// that admits capacity requests at once (0: unlimited):
//   - after an idle period (c is 0), the first request;
//   - else twice c, and at least 2;
//   - sooner, when the period was not saturated (c below capacity), the
//     request that has to wait in the breaker's queue: the one past
//     capacity.
//
// A saturated pod's queue is no news, and only its doubling counts.
func sharpThreshold(c float64, capacity int) int64 {
	if c <= 0 {
		return 1
	}
	t := int64(noThreshold)
	if d := math.Ceil(2 * c); d < 1<<62 {
		t = max(2, int64(d))
	}
	if capacity > 0 && c < float64(capacity) {
		t = min(t, int64(capacity)+1)
	}
	return t
}

// pusher keeps one websocket open to the autoscaler's push endpoint and
// sends the reporter's reports on it, in the binary wire format's version
// 3: the latest at once on each connection, then every report the
// reporter closes, and, on a sharp change of load (loadWatch), two more
// at once and sharpFollowUp later. It follows the autoscaler's redirects
// to the replica that leads the service, and dials again with backoff
// after any failure or close, at the configured URL, so that a service
// whose bucket moved is followed to its new leader. Only run's goroutine
// touches the connection; the request path and the reporter reach the
// pusher through the loadWatch and the mailbox, which never block.
type pusher struct {
	url      string // the push endpoint, with the pod's service and address in its query
	service  string
	reporter *reporter
	watch    *loadWatch
	outbox   *mailbox
	clock    clock.Clock
	dialer   websocket.Dialer
	log      *zap.Logger
	metrics  *metrics
	// logs limits the logs of failed dials and ended connections: a pod
	// refused while it is not ready, or cut off with its autoscaler,
	// would log one every few seconds.
	logs rate.Sometimes

	// Owned by run's goroutine: the last report sent on the current
	// connection, and when it last pinged (real time, as the socket's
	// deadlines are); whether it ever connected, and whether it logged a
	// failure since it last did, which makes it log the next connection.
	sent              *snapshot
	pinged            time.Time
	connected, failed bool
}

// newPusher returns a pusher of rep's reports to target, service's push
// endpoint, and gives rep its mailbox. m must have the push's metrics
// registered.
func newPusher(target, service string, rep *reporter, watch *loadWatch, clk clock.Clock, log *zap.Logger, m *metrics) *pusher {
	p := &pusher{
		url:      target,
		service:  service,
		reporter: rep,
		watch:    watch,
		outbox:   newMailbox(),
		clock:    clk,
		log:      log,
		metrics:  m,
		dialer: websocket.Dialer{
			HandshakeTimeout: pushHandshakeTimeout,
			// The autoscaler writes only control frames; a report and
			// its frame header go out in one write.
			ReadBufferSize:  256,
			WriteBufferSize: stats.MaxBinarySize + 16,
		},
		logs: rate.Sometimes{First: 3, Interval: 30 * time.Second},
	}
	rep.outbox = p.outbox
	return p
}

// run connects and pushes until ctx ends, then closes the connection
// with 1000 (normal closure) and returns once its reader has ended.
func (p *pusher) run(ctx context.Context) {
	failures := 0
	for {
		ws, err := p.dial(ctx)
		if err == nil {
			var stable bool
			stable, err = p.serve(ctx, ws)
			if stable {
				failures = 0
			}
		}
		if ctx.Err() != nil {
			return
		}
		p.logEnd(err)
		failures++
		if !p.wait(ctx, pushBackoff(failures, err)) {
			return
		}
	}
}

// pushBackoff is the wait before the dial after n failures in a row
// (n ≥ 1): pushMinBackoff doubled n-1 times, at most pushMaxBackoff, with
// "equal jitter" (uniform in [d/2, d]) so that the pods cut off together
// do not all come back in the same instant; and at least what a 503's
// Retry-After asked.
func pushBackoff(n int, err error) time.Duration {
	d := pushMinBackoff
	for i := 1; i < n && d < pushMaxBackoff; i++ {
		d *= 2
	}
	d = min(d, pushMaxBackoff)
	d = d/2 + rand.N(d/2+1)
	var ref *pushRefusal
	if errors.As(err, &ref) {
		d = max(d, ref.retryAfter)
	}
	return d
}

func (p *pusher) wait(ctx context.Context, d time.Duration) bool {
	t := p.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

// pushRefusal is an answer to a dial that is neither the upgrade nor a
// redirect.
type pushRefusal struct {
	url    string
	status int
	// retryAfter is a 503's Retry-After, within retryAfterMin and
	// retryAfterMax; 0 without one.
	retryAfter time.Duration
	// body is the start of the answer's body, which says why.
	body string
}

func (e *pushRefusal) Error() string {
	return fmt.Sprintf("dial %s: status %d: %s", e.url, e.status, e.body)
}

// dial opens the websocket at the configured URL, following up to
// pushMaxRedirects redirects to ws:// URLs.
func (p *pusher) dial(ctx context.Context) (*websocket.Conn, error) {
	target := p.url
	for redirects := 0; ; redirects++ {
		ws, resp, err := p.dialer.DialContext(ctx, target, nil)
		if err == nil {
			p.metrics.pushDials[dialConnected].Inc()
			return ws, nil
		}
		if resp == nil {
			p.metrics.pushDials[dialFailed].Inc()
			return nil, fmt.Errorf("dial %s: %w", target, err)
		}
		loc := resp.Header.Get("Location")
		if resp.StatusCode/100 != 3 || loc == "" {
			p.metrics.pushDials[dialRefused].Inc()
			return nil, refusal(target, resp)
		}
		p.metrics.pushDials[dialRedirected].Inc()
		if redirects == pushMaxRedirects {
			return nil, fmt.Errorf("dial %s: more than %d redirects, the last to %s", p.url, pushMaxRedirects, loc)
		}
		if target, err = redirectTarget(target, loc); err != nil {
			return nil, err
		}
	}
}

// redirectTarget resolves a redirect's Location against the URL that
// answered it. Only a ws:// URL with a host is followed: nothing else
// speaks the push protocol. One without a query gets from's, which names
// the pod.
func redirectTarget(from, location string) (string, error) {
	base, err := url.Parse(from)
	if err != nil {
		return "", fmt.Errorf("dial %s: %w", from, err)
	}
	u, err := base.Parse(location)
	if err != nil || u.Scheme != "ws" || u.Host == "" {
		return "", fmt.Errorf("dial %s: redirected to %q: only ws:// URLs with a host are followed", from, location)
	}
	if u.RawQuery == "" {
		u.RawQuery = base.RawQuery
	}
	return u.String(), nil
}

// refusal describes resp, an answer to a dial of target other than the
// upgrade. gorilla keeps up to 1 KiB of its body, and needs no Close.
func refusal(target string, resp *http.Response) *pushRefusal {
	e := &pushRefusal{url: target, status: resp.StatusCode}
	if resp.Body != nil {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		e.body = strings.TrimSpace(string(b))
	}
	if resp.StatusCode == http.StatusServiceUnavailable {
		if n, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get("Retry-After"))); err == nil && n >= 0 {
			d := time.Duration(min(n, int(retryAfterMax/time.Second))) * time.Second
			e.retryAfter = max(d, retryAfterMin)
		}
	}
	return e
}

// logEnd logs why a dial failed or a connection ended, a few times at
// most in a while.
func (p *pusher) logEnd(err error) {
	p.logs.Do(func() {
		p.failed = true
		var ref *pushRefusal
		var ce *websocket.CloseError
		switch {
		case errors.As(err, &ref) && ref.status == http.StatusForbidden:
			// A pod that is not ready yet gets this too, and soon is.
			p.log.Info("the autoscaler takes no pushes from this pod now: it is no ready pod of the service; retrying",
				zap.String("service", p.service), zap.String("answer", ref.body))
		case errors.As(err, &ref) && ref.status == http.StatusServiceUnavailable:
			p.log.Info("no autoscaler takes the service's pushes now; retrying",
				zap.String("service", p.service), zap.String("answer", ref.body), zap.Duration("retryAfter", ref.retryAfter))
		case errors.As(err, &ce):
			p.log.Info("the autoscaler closed the push connection; reconnecting",
				zap.Int("code", ce.Code), zap.String("reason", ce.Text))
		default:
			p.log.Warn("pushing the stats to the autoscaler failed; retrying", zap.String("service", p.service), zap.Error(err))
		}
	})
}

// serve pushes on ws until a write or the reader fails or ctx ends. It
// reports whether the connection carried frames for pushStableAfter.
func (p *pusher) serve(ctx context.Context, ws *websocket.Conn) (stable bool, err error) {
	var closing atomic.Bool
	readErr := make(chan error, 1)
	go p.read(ws, &closing, readErr)
	var follow, cool clock.Timer
	p.metrics.pushConnected.Set(1)
	defer func() {
		p.metrics.pushConnected.Set(0)
		p.watch.disarm()
		for _, t := range []clock.Timer{follow, cool} {
			if t != nil {
				t.Stop()
			}
		}
		ws.Close()
		<-readErr // the reader ends once the socket is closed
	}()
	if !p.connected || p.failed {
		p.log.Info("pushing the stats to the autoscaler", zap.String("url", p.url))
	}
	p.connected, p.failed = true, false

	since := p.clock.Now()
	p.sent, p.pinged = nil, time.Time{}
	// A sharp change seen while disconnected is old news, and the
	// reports put meanwhile are as old as the latest, or older.
	select {
	case <-p.watch.fired:
	default:
	}
	p.outbox.take()
	latest := p.reporter.latest.Load()
	p.watch.arm(latest.report.Concurrency)
	if err := p.send(ws, latest); err != nil {
		return false, err
	}

	// While cooling (until coolUntil) the watch stays disarmed; coolC
	// arms it when cooling ends, and so does the first report after.
	var followC, coolC <-chan time.Time
	var coolUntil time.Time
	cooling := func() bool { return p.clock.Now().Before(coolUntil) }
	for {
		select {
		case <-ctx.Done():
			closing.Store(true)
			deadline := time.Now().Add(pushWriteTimeout)
			ws.WriteControl(websocket.CloseMessage,
				websocket.FormatCloseMessage(websocket.CloseNormalClosure, "queue-proxy stopping"), deadline)
			// The autoscaler answers with its own close frame: wait for it,
			// within the same bound, so that closing the socket does not
			// cut ours off.
			ws.SetReadDeadline(deadline)
			readErr <- <-readErr
			return stable, ctx.Err()
		case err := <-readErr:
			readErr <- err // for the deferred wait
			return stable, err
		case <-p.outbox.ready:
			if snap := p.outbox.take(); snap != nil && snap != p.sent {
				if !cooling() {
					p.watch.arm(snap.report.Concurrency)
				}
				err = p.send(ws, snap)
			}
		case <-p.watch.fired:
			// While cooling, a fire is one that raced the disarm; cooling's
			// end arms the watch again.
			if !cooling() {
				p.watch.disarm()
				coolUntil = p.clock.Now().Add(sharpEvery)
				err = p.sendNow(ws)
				follow, followC = p.after(follow, sharpFollowUp)
				cool, coolC = p.after(cool, sharpEvery)
			}
		case <-followC:
			followC = nil
			err = p.sendNow(ws)
		case <-coolC:
			coolC = nil
			p.watch.arm(p.reporter.latest.Load().report.Concurrency)
		}
		if err != nil {
			return stable, err
		}
		if !stable && p.clock.Since(since) >= pushStableAfter {
			stable = true
		}
	}
}

// after returns a timer of the clock firing in d, and its channel,
// stopping t, the one it replaces.
func (p *pusher) after(t clock.Timer, d time.Duration) (clock.Timer, <-chan time.Time) {
	if t != nil {
		t.Stop()
	}
	t = p.clock.NewTimer(d)
	return t, t.C()
}

// sendNow closes the current period at once and sends its report.
func (p *pusher) sendNow(ws *websocket.Conn) error {
	p.reporter.reportNow()
	snap := p.outbox.take()
	if snap == nil || snap == p.sent {
		return nil
	}
	return p.send(ws, snap)
}

// send writes snap's report as one binary frame, and a ping when one is
// due.
func (p *pusher) send(ws *websocket.Conn, snap *snapshot) error {
	now := time.Now()
	ws.SetWriteDeadline(now.Add(pushWriteTimeout))
	if err := ws.WriteMessage(websocket.BinaryMessage, snap.binaryV3); err != nil {
		return fmt.Errorf("push a report: %w", err)
	}
	p.sent = snap
	p.metrics.pushFrames.Inc()
	if now.Sub(p.pinged) >= pushPingPeriod {
		p.pinged = now
		if err := ws.WriteControl(websocket.PingMessage, nil, now.Add(pushWriteTimeout)); err != nil {
			return fmt.Errorf("ping the autoscaler: %w", err)
		}
	}
	return nil
}

// read reads ws until it fails, discarding what it reads: reading is what
// answers the autoscaler's pings, sees its close frame, and takes the
// pongs that keep the read deadline away. Once closing is set, pongs no
// longer do.
func (p *pusher) read(ws *websocket.Conn, closing *atomic.Bool, done chan<- error) {
	ws.SetReadLimit(pushReadLimit)
	extend := func(string) error {
		if closing.Load() {
			return nil
		}
		return ws.SetReadDeadline(time.Now().Add(pushPongWait))
	}
	extend("")
	ws.SetPongHandler(extend)
	for {
		if _, _, err := ws.NextReader(); err != nil {
			done <- err
			return
		}
	}
}
