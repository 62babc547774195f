// Package loadgen sends HTTP load at a target — at a fixed rate, by
// replaying a trace's arrivals, or from a fixed number of closed-loop
// workers — and summarises what came back. It drives vegeta's attacker and
// is what `swell load` and the benchmark harness run.
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/swell-run/swell/pkg/trace"
)

// Mode is how requests are paced.
type Mode string

// Modes, chosen by which of Config.Rate, Config.Trace and Config.Workers
// is set.
const (
	// ModeRate is an open loop at a fixed rate.
	ModeRate Mode = "rate"
	// ModeTrace is an open loop replaying a trace's arrivals.
	ModeTrace Mode = "trace"
	// ModeClosed is a closed loop: each worker sends its next request as
	// soon as its previous one completes.
	ModeClosed Mode = "closed"
)

// SleepParam is the query parameter that carries a request's service time
// when Config.ServiceTime is set; the example app (cmd/hello) sleeps
// for it before answering.
const SleepParam = "sleep"

// Defaults for zero-valued Config fields.
const (
	DefaultTimeout          = 30 * time.Second
	DefaultConnections      = 10000
	DefaultProgressInterval = time.Second
)

// Config describes a load run. Exactly one of Rate, Trace and Workers must
// be set; it picks the Mode. The zero value of every other field is a usable
// default.
type Config struct {
	// URL is the target, http:// or https://.
	URL string
	// Method is the request method; empty means GET.
	Method string
	// Header is sent with every request. A "Host" entry sets the request's
	// Host, which is how a request is routed to a service by name.
	Header http.Header
	// Body is sent with every request.
	Body []byte

	// Rate is the open-loop rate in requests per second (ModeRate).
	Rate float64
	// Trace holds the arrivals to replay (ModeTrace). Records must be in
	// arrival order, as trace.Reader returns them.
	Trace []trace.Record
	// Speed divides the trace's arrival times: 2 replays it twice as fast.
	// Zero means 1. Service times are not scaled.
	Speed float64
	// ServiceTime appends each trace record's service time to the URL as
	// ?sleep=<duration> (SleepParam), so an app that honours it works for
	// as long as the traced request did.
	ServiceTime bool
	// Workers is the number of closed-loop workers (ModeClosed).
	Workers int

	// Duration bounds the run. In the open-loop modes it cuts the schedule:
	// exactly the requests due before Duration are sent (Rate × Duration of
	// them at a fixed rate), however late the sender runs. A closed loop
	// stops starting requests once Duration has passed.
	Duration time.Duration
	// Requests caps the number of requests sent. A fixed rate or a closed
	// loop needs Duration or Requests; a trace ends on its own.
	Requests uint64

	// Timeout bounds each request, response body included. Zero means
	// DefaultTimeout.
	Timeout time.Duration
	// Connections is the number of idle connections kept per host. Zero
	// means DefaultConnections.
	Connections int
	// MaxConnections caps the connections per host, idle or busy; requests
	// beyond it wait for one. Zero means no cap.
	MaxConnections int
	// HTTP2 speaks cleartext HTTP/2 with prior knowledge (h2c) to an http://
	// URL.
	HTTP2 bool
	// DisableKeepAlives opens a new connection for every request.
	DisableKeepAlives bool
	// AllowRemote lets the run target a host that is not a loopback address.
	// Without it Run refuses such targets (see CheckTarget).
	AllowRemote bool

	// Progress, when not nil, receives a progress line every
	// ProgressInterval (zero means DefaultProgressInterval) and once at the
	// end.
	Progress io.Writer
	// ProgressInterval is the time between progress lines.
	ProgressInterval time.Duration
	// ProgressOverwrite rewrites the progress line in place with a carriage
	// return, for a terminal, instead of writing one line after another.
	ProgressOverwrite bool
}

// plan is what a Config asks to send.
type plan struct {
	mode  Mode
	pacer vegeta.Pacer
	// planned is the number of requests the schedule holds; zero for a
	// closed loop bounded by time only.
	planned    uint64
	targetRate float64
	// sleeps holds each hit's service time, when Config.ServiceTime is set.
	sleeps  []time.Duration
	workers uint64
}

// maxRate keeps the interval between hits a sensible number of nanoseconds.
const maxRate = 1e6

// plan validates o and derives what to send.
func (o Config) plan() (plan, error) {
	modes := 0
	if o.Rate != 0 {
		modes++
	}
	if o.Trace != nil {
		modes++
	}
	if o.Workers != 0 {
		modes++
	}
	if modes != 1 {
		return plan{}, errors.New("exactly one of Rate, Trace and Workers must be set")
	}
	if o.Duration < 0 {
		return plan{}, fmt.Errorf("Duration %s: accepted is a positive duration, or zero for no bound", o.Duration)
	}
	if o.Speed != 0 && o.Trace == nil {
		return plan{}, errors.New("Speed applies to a trace replay only")
	}
	if o.ServiceTime && o.Trace == nil {
		return plan{}, errors.New("ServiceTime applies to a trace replay only")
	}
	switch {
	case o.Trace != nil:
		return o.planTrace()
	case o.Workers != 0:
		if o.Workers < 0 {
			return plan{}, fmt.Errorf("Workers %d: accepted is a positive number", o.Workers)
		}
		if o.Duration == 0 && o.Requests == 0 {
			return plan{}, errors.New("a closed loop needs a Duration or a number of Requests")
		}
		return plan{
			mode:    ModeClosed,
			pacer:   boundedPacer{Pacer: vegeta.ConstantPacer{}, max: o.Requests, until: o.Duration},
			planned: o.Requests,
			workers: uint64(o.Workers),
		}, nil
	default:
		if !(o.Rate > 0 && o.Rate <= maxRate) {
			return plan{}, fmt.Errorf("Rate %g: accepted is a number of requests per second above 0 and at most %g", o.Rate, float64(maxRate))
		}
		if o.Duration == 0 && o.Requests == 0 {
			return plan{}, errors.New("a fixed rate needs a Duration or a number of Requests")
		}
		n := o.Requests
		if o.Duration > 0 {
			// The epsilon absorbs float error in products that are whole
			// numbers, such as 0.1/s × 30s.
			byTime := uint64(math.Floor(o.Rate*o.Duration.Seconds() + 1e-9))
			if n == 0 || byTime < n {
				n = byTime
			}
		}
		if n == 0 {
			return plan{}, fmt.Errorf("Rate %g for Duration %s plans no request: at least one must fall due", o.Rate, o.Duration)
		}
		// One hit per interval, starting one interval in: the k-th hit
		// (from 1) is due at k/Rate, so the last of Rate × Duration hits
		// is due at Duration.
		interval := time.Duration(math.Round(float64(time.Second) / o.Rate))
		return plan{
			mode:       ModeRate,
			pacer:      boundedPacer{Pacer: vegeta.ConstantPacer{Freq: 1, Per: interval}, max: n},
			planned:    n,
			targetRate: o.Rate,
		}, nil
	}
}

func (o Config) planTrace() (plan, error) {
	speed := o.Speed
	if speed == 0 {
		speed = 1
	}
	if !(speed > 0 && !math.IsInf(speed, 0)) {
		return plan{}, fmt.Errorf("Speed %g: accepted is a positive factor, such as 0.5 or 10", o.Speed)
	}
	schedule := make([]time.Duration, 0, len(o.Trace))
	var sleeps []time.Duration
	for _, rec := range o.Trace {
		at := time.Duration(float64(rec.Arrival) / speed)
		if o.Duration > 0 && at >= o.Duration {
			break
		}
		if o.Requests > 0 && uint64(len(schedule)) >= o.Requests {
			break
		}
		if n := len(schedule); n > 0 && at < schedule[n-1] {
			return plan{}, fmt.Errorf("trace record on line %d arrives at %s, before the previous one: records must be in arrival order", rec.Line, rec.Arrival)
		}
		schedule = append(schedule, at)
		if o.ServiceTime {
			sleeps = append(sleeps, rec.ServiceTime)
		}
	}
	if len(schedule) == 0 {
		return plan{}, errors.New("the trace replay plans no request: the trace is empty or starts after Duration")
	}
	p := plan{
		mode:    ModeTrace,
		pacer:   schedulePacer(schedule),
		planned: uint64(len(schedule)),
		sleeps:  sleeps,
	}
	if last := schedule[len(schedule)-1]; last > 0 {
		p.targetRate = float64(len(schedule)) / last.Seconds()
	}
	return p, nil
}

// ErrRemoteTarget is returned (wrapped) by CheckTarget and Run for a target
// that is not on this machine.
var ErrRemoteTarget = errors.New("not a loopback address")

// CheckTarget returns an error wrapping ErrRemoteTarget unless rawURL's host
// is a loopback address, "localhost" (or a name under .localhost), or a name
// that resolves to loopback addresses only. It also rejects URLs that are
// not http:// or https:// with a host.
func CheckTarget(ctx context.Context, rawURL string) error {
	u, err := parseURL(rawURL)
	if err != nil {
		return err
	}
	return checkLoopback(ctx, u.Hostname(), net.DefaultResolver.LookupIPAddr)
}

func parseURL(rawURL string) (*url.URL, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("URL %q: %w", rawURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("URL %q: accepted is an absolute http:// or https:// URL, such as http://127.0.0.1:8080/", rawURL)
	}
	return u, nil
}

func checkLoopback(ctx context.Context, host string, lookup func(context.Context, string) ([]net.IPAddr, error)) error {
	if ip := net.ParseIP(host); ip != nil {
		if ip.IsLoopback() {
			return nil
		}
		return fmt.Errorf("host %s: %w", host, ErrRemoteTarget)
	}
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return nil
	}
	addrs, err := lookup(ctx, host)
	if err != nil {
		return fmt.Errorf("host %s (cannot resolve it to check: %v): %w", host, err, ErrRemoteTarget)
	}
	for _, a := range addrs {
		if !a.IP.IsLoopback() {
			return fmt.Errorf("host %s resolves to %s: %w", host, a.IP, ErrRemoteTarget)
		}
	}
	if len(addrs) == 0 {
		return fmt.Errorf("host %s resolves to no address: %w", host, ErrRemoteTarget)
	}
	return nil
}

// newClient builds the HTTP client the attacker uses.
func (o Config) newClient() *http.Client {
	// No dial or handshake timeouts of their own: the client's Timeout
	// covers the whole request, connecting included.
	dialer := &net.Dialer{KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         dialer.DialContext,
		MaxIdleConnsPerHost: o.Connections,
		MaxConnsPerHost:     o.MaxConnections,
		DisableKeepAlives:   o.DisableKeepAlives,
	}
	if o.HTTP2 {
		// Only unencrypted HTTP/2 enabled means prior knowledge: no
		// upgrade dance, HTTP/2 from the first byte.
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	return &http.Client{Transport: tr, Timeout: o.Timeout}
}

// Run sends the load o describes and returns its summary once the schedule
// is done and every request has completed (or timed out). When ctx ends
// first, Run stops sending, waits for the requests in flight and returns
// what it saw with Result.Interrupted set; an error means the options were
// invalid and nothing was sent.
func Run(ctx context.Context, o Config) (Result, error) {
	if o.Method == "" {
		o.Method = http.MethodGet
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Connections == 0 {
		o.Connections = DefaultConnections
	}
	if o.ProgressInterval == 0 {
		o.ProgressInterval = DefaultProgressInterval
	}
	switch {
	case o.Timeout < 0:
		return Result{}, fmt.Errorf("Timeout %s: accepted is a positive duration", o.Timeout)
	case o.Connections < 0:
		return Result{}, fmt.Errorf("Connections %d: accepted is a positive number", o.Connections)
	case o.MaxConnections < 0:
		return Result{}, fmt.Errorf("MaxConnections %d: accepted is 0 (no cap) or more", o.MaxConnections)
	case o.ProgressInterval < 0:
		return Result{}, fmt.Errorf("ProgressInterval %s: accepted is a positive duration", o.ProgressInterval)
	}
	p, err := o.plan()
	if err != nil {
		return Result{}, err
	}
	u, err := parseURL(o.URL)
	if err != nil {
		return Result{}, err
	}
	if o.HTTP2 && u.Scheme != "http" {
		return Result{}, fmt.Errorf("URL %q: HTTP2 is cleartext HTTP/2 (h2c) and needs an http:// URL", o.URL)
	}
	if !o.AllowRemote {
		if err := checkLoopback(ctx, u.Hostname(), net.DefaultResolver.LookupIPAddr); err != nil {
			return Result{}, fmt.Errorf("%w; set AllowRemote to send load to other machines", err)
		}
	}

	g := &generator{opts: o, plan: p, url: o.URL, sep: "?"}
	if u.RawQuery != "" || u.ForceQuery {
		g.sep = "&"
	}
	client := o.newClient()
	attackOpts := []func(*vegeta.Attacker){vegeta.Client(client)}
	if p.workers > 0 {
		attackOpts = append(attackOpts, vegeta.Workers(p.workers), vegeta.MaxWorkers(p.workers))
	}
	atk := vegeta.NewAttacker(attackOpts...)
	res := g.run(ctx, atk)
	// The client is this run's alone: its idle connections would stay
	// open for as long as the caller's process lives, one set per run.
	client.CloseIdleConnections()
	return res, nil
}

// generator is one run in progress.
type generator struct {
	opts Config
	plan plan
	url  string
	// sep joins the sleep parameter to url.
	sep string

	// stopped makes the targeter refuse further hits once the run is
	// interrupted: vegeta may hand out one more tick after Stop.
	stopped atomic.Bool
	// sent counts requests handed to the attacker's workers; done and
	// failed count their results. sent - done is what is in flight.
	sent, done, failed atomic.Uint64
}

// errStopped is the targeter's answer after an interrupt; hits that get it
// never reach the network and are left out of the results.
var errStopped = errors.New("loadgen: run interrupted")

// target is the vegeta.Targeter: it fills in the next request. Concurrent
// workers call it, so hit i gets sleeps[i] in the order workers ask, which
// can swap neighbours that fall due at nearly the same time; the set of
// service times sent is the trace's.
func (g *generator) target(t *vegeta.Target) error {
	if g.stopped.Load() {
		return errStopped
	}
	i := g.sent.Add(1) - 1
	t.Method = g.opts.Method
	t.Header = g.opts.Header
	t.Body = g.opts.Body
	t.URL = g.url
	if i < uint64(len(g.plan.sleeps)) {
		t.URL = g.url + g.sep + SleepParam + "=" + formatSleep(g.plan.sleeps[i])
	}
	return nil
}

// formatSleep writes d as a Go duration in whole milliseconds or
// microseconds: plain ASCII, unlike time.Duration.String's "µs".
func formatSleep(d time.Duration) string {
	d = d.Round(time.Microsecond)
	if d%time.Millisecond == 0 {
		return strconv.FormatInt(int64(d/time.Millisecond), 10) + "ms"
	}
	return strconv.FormatInt(int64(d/time.Microsecond), 10) + "us"
}

func (g *generator) run(ctx context.Context, atk *vegeta.Attacker) Result {
	t := newTally()
	began := time.Now()
	results := atk.Attack(g.target, g.plan.pacer, 0, "")

	var progressDone chan struct{}
	stopProgress := make(chan struct{})
	if g.opts.Progress != nil {
		progressDone = make(chan struct{})
		go func() {
			defer close(progressDone)
			g.progress(began, stopProgress)
		}()
	}

	interrupted := false
	ctxDone := ctx.Done()
	open := true
	for open {
		select {
		case r, ok := <-results:
			if !ok {
				open = false
				break
			}
			if r.Error == errStopped.Error() {
				continue
			}
			if r.Error != "" {
				g.failed.Add(1)
			}
			t.add(r)
			g.done.Add(1)
		case <-ctxDone:
			interrupted = true
			ctxDone = nil
			g.stopped.Store(true)
			atk.Stop()
		}
		if interrupted && g.done.Load() == g.sent.Load() {
			// Nothing is in flight. The attacker may still be asleep
			// until the next arrival before it notices Stop; let it
			// finish on its own.
			if open {
				go func() {
					for range results {
					}
				}()
			}
			break
		}
	}

	close(stopProgress)
	if progressDone != nil {
		<-progressDone
	}
	res := t.result(began)
	res.Mode = g.plan.mode
	res.URL = g.opts.URL
	res.Workers = int(g.plan.workers)
	res.Planned = g.plan.planned
	res.TargetRate = g.plan.targetRate
	res.Interrupted = interrupted
	return res
}
