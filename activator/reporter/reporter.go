// Package reporter is the activator's websocket client to the autoscaler: it
// sends each service's figures once a period and a poke the moment a request
// arrives for a service with no pods, and keeps reconnecting with backoff.
package reporter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/swell-run/swell/pkg/service"
	"github.com/swell-run/swell/pkg/stats"
)

// Source gives the reporter each service's figures for the period that ends
// at now. The activator implements it over its per-service stats.Trackers:
// Report calls emit once per service that held a request or saw one arrive
// in the period (more is harmless) and resets the period. The key is in its
// wire form, service.Key.String(), which the activator makes once per
// service, so that a period allocates nothing. Report runs on the
// reporter's goroutine; emit must not be kept after Report returns.
type Source interface {
	Report(now time.Time, emit func(key string, f stats.ActivatorFigures))
}

// PartSource is a Source that can also report only the services keep
// accepts, leaving the others' periods running: with several autoscaler
// replicas, each reporter reads the services of the buckets its replica
// leads, and a service's period runs from one read to the next whichever
// reporter made them. keep is called with the key in its wire form.
type PartSource interface {
	Source
	ReportPart(now time.Time, keep func(key string) bool, emit func(key string, f stats.ActivatorFigures))
}

// Defaults of Config.
const (
	DefaultPeriod       = time.Second
	DefaultWriteTimeout = 5 * time.Second
	// DefaultReadTimeout closes a connection on which the autoscaler sent
	// nothing, not even a ping, for this long; the endpoint pings every
	// few seconds.
	DefaultReadTimeout = 30 * time.Second
	DefaultMinBackoff  = 100 * time.Millisecond
	DefaultMaxBackoff  = 10 * time.Second
	// DefaultMaxPendingPokes bounds the services remembered for a poke.
	DefaultMaxPendingPokes = 4096
	// DefaultDialTimeout bounds a dial, connection and websocket handshake
	// together. An autoscaler that died leaves its address behind until a
	// new leader publishes its own; a dial to it must fail fast so the
	// reporter moves on (websocket.DefaultDialer would wait 45 s).
	DefaultDialTimeout = 5 * time.Second
)

// Config configures a Reporter. URL, Name, Source and one of Token and
// TokenFile are required.
type Config struct {
	// URL is the autoscaler's activator endpoint, e.g.
	// "ws://autoscaler:8080/activator" (network.ActivatorReportPath).
	URL string
	// Token is sent as "Authorization: Bearer <Token>".
	Token string
	// TokenFile, instead, holds the token and is read again before each
	// connection, so a token replaced in the file (a service-account token
	// the kubelet renews, a rotated secret) is the one presented next; a
	// refusal (401) is followed by a new connection, hence a new read.
	TokenFile string
	// Name is the activator's name (its pod name), sent in the hello.
	Name string
	// Source gives the per-service figures each period.
	Source Source
	// Keep, if set, limits the reports to the services it accepts (by key,
	// in its wire form); Source must then be a PartSource. Pool sets it,
	// and routes each poke to the reporter that keeps its service. nil
	// reports every service.
	Keep func(key string) bool
	// Clock drives the period ticker and the backoff (default the real
	// clock). Socket deadlines always use real time.
	Clock clock.WithTicker
	// Period between reports (default DefaultPeriod).
	Period time.Duration
	// WriteTimeout bounds each frame's write (default DefaultWriteTimeout).
	WriteTimeout time.Duration
	// ReadTimeout: see DefaultReadTimeout.
	ReadTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait before a reconnect.
	MinBackoff, MaxBackoff time.Duration
	// MaxPendingPokes bounds the set of services waiting for a poke to be
	// sent (default DefaultMaxPendingPokes); beyond it pokes are dropped.
	MaxPendingPokes int
	// Dialer dials the websocket (default a copy of websocket.DefaultDialer).
	Dialer *websocket.Dialer
	// Logger logs connections and failures (default none).
	Logger *zap.Logger
	// Registerer, if set, gets the reporter's metrics.
	Registerer prometheus.Registerer
}

// Reporter keeps one websocket to the autoscaler and sends the activator's
// frames over it: a Hello on each connection, then a Report each period and
// Pokes as they come. Run drives it; Poke may be called from any goroutine
// and never blocks on the network.
type Reporter struct {
	url, name  string
	token      string // static; "" when read from tokenFile
	tokenFile  string
	src        Source
	keep       func(string) bool
	clock      clock.WithTicker
	period     time.Duration
	writeTO    time.Duration
	readTO     time.Duration
	minB, maxB time.Duration
	maxPokes   int
	dialer     *websocket.Dialer
	log        *zap.Logger
	metrics    *metrics
	emit       func(string, stats.ActivatorFigures)
	pokeWake   chan struct{}
	// redial cuts a backoff short (Redial).
	redial chan struct{}
	// pokeMu guards pokes, the services waiting for a poke. Only requests
	// for services at zero take it, for one map insert.
	pokeMu sync.Mutex
	pokes  map[string]struct{}

	// Owned by Run's goroutine.
	pokeScratch []string
	buf         []byte
	cuts        []int // ends of the Report frames in buf
	lastEnd     time.Time
	reported    map[string]struct{} // services with non-zero figures last period
	current     map[string]struct{} // ... and this period; the two swap each period
	end         time.Time           // end of the report being built
}

// New returns a Reporter, or an error naming the missing or invalid setting.
func New(cfg Config) (*Reporter, error) {
	switch {
	case cfg.URL == "":
		return nil, errors.New("activator reporter: Config.URL is required")
	case cfg.Token == "" && cfg.TokenFile == "":
		return nil, errors.New("activator reporter: Config.Token or Config.TokenFile is required")
	case cfg.Token != "" && cfg.TokenFile != "":
		return nil, errors.New("activator reporter: Config.Token and Config.TokenFile are exclusive")
	case cfg.Source == nil:
		return nil, errors.New("activator reporter: Config.Source is required")
	}
	if _, ok := cfg.Source.(PartSource); cfg.Keep != nil && !ok {
		return nil, errors.New("activator reporter: Config.Keep needs a Config.Source that is a PartSource")
	}
	if err := stats.ValidateActivatorName(cfg.Name); err != nil {
		return nil, fmt.Errorf("activator reporter: name %q: %w", cfg.Name, err)
	}
	r := &Reporter{
		url:       cfg.URL,
		name:      cfg.Name,
		token:     cfg.Token,
		tokenFile: cfg.TokenFile,
		src:       cfg.Source,
		keep:      cfg.Keep,
		clock:     cfg.Clock,
		period:    cmpOr(cfg.Period, DefaultPeriod),
		writeTO:   cmpOr(cfg.WriteTimeout, DefaultWriteTimeout),
		readTO:    cmpOr(cfg.ReadTimeout, DefaultReadTimeout),
		minB:      cmpOr(cfg.MinBackoff, DefaultMinBackoff),
		maxB:      cmpOr(cfg.MaxBackoff, DefaultMaxBackoff),
		maxPokes:  cmpOr(cfg.MaxPendingPokes, DefaultMaxPendingPokes),
		dialer:    cfg.Dialer,
		log:       cfg.Logger,
		pokeWake:  make(chan struct{}, 1),
		redial:    make(chan struct{}, 1),
		pokes:     make(map[string]struct{}),
		reported:  make(map[string]struct{}),
		current:   make(map[string]struct{}),
	}
	if r.maxB < r.minB {
		return nil, fmt.Errorf("activator reporter: MaxBackoff %v is below MinBackoff %v", r.maxB, r.minB)
	}
	if r.clock == nil {
		r.clock = clock.RealClock{}
	}
	if r.dialer == nil {
		d := *websocket.DefaultDialer
		r.dialer = &d
	}
	if r.log == nil {
		r.log = zap.NewNop()
	}
	r.emit = r.add // one method value for the reporter's life: no allocation per period
	var err error
	if r.metrics, err = newMetrics(cfg.Registerer); err != nil {
		return nil, err
	}
	return r, nil
}

// newShared is New for a reporter of a Pool, which shares the pool's
// metrics instead of registering its own.
func newShared(cfg Config, m *metrics) (*Reporter, error) {
	cfg.Registerer = nil
	r, err := New(cfg)
	if err != nil {
		return nil, err
	}
	r.metrics = m
	return r, nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Poke asks for a Poke frame naming the service whose key is key (in its
// wire form, service.Key.String()) to be sent at once. It never blocks on
// the network: the service joins a set that the reporter's goroutine
// drains into one frame. Pokes for a service already waiting coalesce;
// while disconnected they wait for the next connection. When
// MaxPendingPokes services are already waiting, the poke is dropped (and
// counted): the activator's next report still shows the held request.
func (r *Reporter) Poke(key string) {
	if err := service.Check(key); err != nil {
		// Sent, it would make the autoscaler close the connection.
		r.metrics.invalid.Inc()
		r.log.Error("activator reporter: not poking an invalid service key", zap.Error(err))
		return
	}
	r.pokeMu.Lock()
	_, dup := r.pokes[key]
	full := !dup && len(r.pokes) >= r.maxPokes
	if !dup && !full {
		r.pokes[key] = struct{}{}
	}
	r.pokeMu.Unlock()
	if full {
		r.metrics.pokesDropped.Inc()
		return
	}
	select {
	case r.pokeWake <- struct{}{}:
	default: // a wake-up is already pending; it will take this service too
	}
}

// Run connects and reports until ctx ends, then closes the connection with
// 1000 and returns ctx's error once every goroutine it started has ended.
// Call it once.
func (r *Reporter) Run(ctx context.Context) error {
	r.lastEnd = r.clock.Now()
	failures := 0
	for {
		ws, err := r.dial(ctx)
		if err == nil {
			// A change of address before this connection is old news.
			select {
			case <-r.redial:
			default:
			}
			var healthy bool
			healthy, err = r.serve(ctx, ws)
			// And so is one made while it lasted: a connected reporter
			// ignores Redial, and the backoff after it runs its course
			// unless the address changes again.
			select {
			case <-r.redial:
			default:
			}
			// Reset the backoff only after a connection that lasted a
			// period: two processes under one name, replacing each other,
			// or an autoscaler that accepts and drops at once, must not
			// make the reporter reconnect at full speed.
			if healthy {
				failures = 0
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.logFailure(err)
		failures++
		if !r.wait(ctx, r.backoff(failures)) {
			return ctx.Err()
		}
	}
}

// backoff is the wait before the n-th reconnect in a row (n ≥ 1):
// exponential from MinBackoff, capped at MaxBackoff, with "equal jitter"
// (uniform in [d/2, d]) so that activators cut off together do not all
// come back in the same instant.
func (r *Reporter) backoff(n int) time.Duration {
	d := r.minB
	for i := 1; i < n && d < r.maxB; i++ {
		d *= 2
	}
	d = min(d, r.maxB)
	return d/2 + rand.N(d/2+1)
}

func (r *Reporter) wait(ctx context.Context, d time.Duration) bool {
	t := r.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	case <-r.redial:
		r.log.Debug("the autoscaler's address changed: reconnecting now")
		return true
	}
}

// Redial says the autoscaler's address changed (a new leader published
// itself): a reporter waiting to reconnect dials at once instead of
// sitting out its backoff. It never blocks; a connected reporter ignores
// it.
func (r *Reporter) Redial() {
	select {
	case r.redial <- struct{}{}:
	default:
	}
}

// dialError is a failed dial, with the HTTP status when the autoscaler
// answered.
type dialError struct {
	status int
	err    error
}

func (e *dialError) Error() string {
	if e.status != 0 {
		return fmt.Sprintf("dial autoscaler: status %d: %v", e.status, e.err)
	}
	return "dial autoscaler: " + e.err.Error()
}

func (e *dialError) Unwrap() error { return e.err }

// maxTokenFile bounds a token file's size: a service-account token is a
// few KiB at most.
const maxTokenFile = 64 << 10

// bearer returns the token to present now: the static one, or the token
// file's content, read now and trimmed.
func (r *Reporter) bearer() (string, error) {
	if r.tokenFile == "" {
		return r.token, nil
	}
	f, err := os.Open(r.tokenFile)
	if err != nil {
		return "", fmt.Errorf("read the token file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	switch t := strings.TrimSpace(string(b)); {
	case err != nil:
		return "", fmt.Errorf("read the token file %s: %w", r.tokenFile, err)
	case len(b) > maxTokenFile:
		return "", fmt.Errorf("token file %s is larger than %d bytes", r.tokenFile, maxTokenFile)
	case t == "":
		return "", fmt.Errorf("token file %s is empty", r.tokenFile)
	default:
		return t, nil
	}
}

func (r *Reporter) dial(ctx context.Context) (*websocket.Conn, error) {
	token, err := r.bearer()
	if err != nil {
		r.metrics.dials.WithLabelValues("no-token").Inc()
		return nil, &dialError{err: err}
	}
	dctx, cancel := context.WithTimeout(ctx, DefaultDialTimeout)
	defer cancel()
	ws, resp, err := r.dialer.DialContext(dctx, r.url, http.Header{"Authorization": {"Bearer " + token}})
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		de := &dialError{err: err}
		if resp != nil {
			de.status = resp.StatusCode
		}
		r.metrics.dials.WithLabelValues(dialResult(de.status)).Inc()
		return nil, de
	}
	r.metrics.dials.WithLabelValues("ok").Inc()
	return ws, nil
}

func dialResult(status int) string {
	switch {
	case status == 0:
		return "error"
	case status == http.StatusUnauthorized:
		return "unauthorized"
	}
	return "status"
}

func (r *Reporter) logFailure(err error) {
	var de *dialError
	var ce *websocket.CloseError
	switch {
	case errors.As(err, &de) && de.status == http.StatusUnauthorized:
		r.log.Error("the autoscaler refused the activator's bearer token (401); the token is read again for the next connection",
			zap.String("url", r.url), zap.String("tokenFile", r.tokenFile))
	case errors.As(err, &ce):
		r.log.Warn("the autoscaler closed the connection", zap.Int("code", ce.Code), zap.String("reason", ce.Text))
	default:
		r.log.Warn("connection to the autoscaler failed", zap.String("url", r.url), zap.Error(err))
	}
}

// serve runs one connection: hello, pending pokes and the report of
// everything since the last one, then a report each period and pokes as
// they come, until a write or the reader fails or ctx ends.
// It reports whether a periodic report went out, i.e. the connection was
// healthy for at least a period.
func (r *Reporter) serve(ctx context.Context, ws *websocket.Conn) (healthy bool, err error) {
	readErr := make(chan error, 1)
	go r.read(ws, readErr)
	r.metrics.connected.Inc()
	defer func() {
		r.metrics.connected.Dec()
		ws.Close()
		<-readErr // the reader ends once the socket is closed
	}()

	r.log.Info("connected to the autoscaler", zap.String("url", r.url), zap.String("activator", r.name))
	r.buf = stats.AppendActivatorHello(r.buf[:0], r.name)
	if err := r.write(ws, r.buf, "hello"); err != nil {
		return false, err
	}
	// The ticker starts before the first report so that its period lines
	// up with the report's end.
	t := r.clock.NewTicker(r.period)
	defer t.Stop()
	if err := r.sendPokes(ws); err != nil {
		return false, err
	}
	if err := r.sendReport(ws, r.clock.Now()); err != nil {
		return false, err
	}
	for {
		select {
		case <-ctx.Done():
			ws.WriteControl(websocket.CloseMessage,
				websocket.FormatCloseMessage(websocket.CloseNormalClosure, "activator stopping"),
				time.Now().Add(r.writeTO))
			return healthy, ctx.Err()
		case err := <-readErr:
			readErr <- err // for the deferred wait
			return healthy, err
		case <-r.pokeWake:
			if err := r.sendPokes(ws); err != nil {
				return healthy, err
			}
		case now := <-t.C():
			if err := r.sendReport(ws, now); err != nil {
				return healthy, err
			}
			healthy = true
		}
	}
}

// read reads until the connection fails, so that gorilla answers the
// autoscaler's pings and sees its close frame. Every frame or ping pushes
// the read deadline forward.
func (r *Reporter) read(ws *websocket.Conn, done chan<- error) {
	extend := func() { ws.SetReadDeadline(time.Now().Add(r.readTO)) }
	ws.SetPingHandler(func(data string) error {
		extend()
		err := ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(r.writeTO))
		if errors.Is(err, websocket.ErrCloseSent) {
			return nil
		}
		return err
	})
	extend()
	for {
		if _, _, err := ws.NextReader(); err != nil {
			done <- err
			return
		}
		extend()
	}
}

func (r *Reporter) write(ws *websocket.Conn, frame []byte, kind string) error {
	ws.SetWriteDeadline(time.Now().Add(r.writeTO))
	if err := ws.WriteMessage(websocket.BinaryMessage, frame); err != nil {
		r.metrics.writeErrors.Inc()
		return fmt.Errorf("write %s frame: %w", kind, err)
	}
	r.metrics.frames.WithLabelValues(kind).Inc()
	return nil
}

// sendPokes sends every waiting poke, in frames of at most
// stats.ActivatorMaxFrameSize. Services whose frame failed go back in the
// set for the next connection.
func (r *Reporter) sendPokes(ws *websocket.Conn) error {
	r.pokeMu.Lock()
	svcs := r.pokeScratch[:0]
	for s := range r.pokes {
		svcs = append(svcs, s)
	}
	clear(r.pokes)
	r.pokeMu.Unlock()
	r.pokeScratch = svcs

	for i := 0; i < len(svcs); {
		b := stats.AppendActivatorPoke(r.buf[:0])
		j := i
		for ; j < len(svcs) && len(b)+1+len(svcs[j]) <= stats.ActivatorMaxFrameSize; j++ {
			b = append(b, byte(len(svcs[j])))
			b = append(b, svcs[j]...)
		}
		r.buf = b
		if err := r.write(ws, b, "poke"); err != nil {
			r.pokeMu.Lock()
			for _, s := range svcs[i:] {
				if len(r.pokes) < r.maxPokes {
					r.pokes[s] = struct{}{}
				}
			}
			r.pokeMu.Unlock()
			return err
		}
		i = j
	}
	clear(svcs) // drop the references to the strings
	return nil
}

// sendReport asks the source for the period since the last report and
// sends it, split into frames of at most stats.ActivatorMaxFrameSize. A
// service that had non-zero figures in the previous report and none now
// gets an explicit zero entry, so the end of its load is reported rather
// than left to expire.
func (r *Reporter) sendReport(ws *websocket.Conn, now time.Time) error {
	r.buildReport(now)
	start := 0
	for _, end := range r.cuts {
		if err := r.write(ws, r.buf[start:end], "report"); err != nil {
			return err
		}
		start = end
	}
	return nil
}

// buildReport encodes the report for the period ending at now into r.buf,
// its frames ending at r.cuts. It allocates nothing once the buffers and
// maps have grown to the number of services.
func (r *Reporter) buildReport(now time.Time) {
	r.end = now
	r.cuts = r.cuts[:0]
	r.buf = stats.AppendActivatorReportHeader(r.buf[:0], now, now.Sub(r.lastEnd))
	if r.keep != nil {
		r.src.(PartSource).ReportPart(now, r.keep, r.emit)
	} else {
		r.src.Report(now, r.emit)
	}
	for s := range r.reported { // had load last period, not mentioned now (or moved to another reporter)
		r.add(s, stats.ActivatorFigures{})
	}
	clear(r.reported)
	r.reported, r.current = r.current, r.reported
	r.cuts = append(r.cuts, len(r.buf))
	r.lastEnd = now
}

// add appends one entry to the report being built, starting a new frame
// when this one would exceed stats.ActivatorMaxFrameSize.
func (r *Reporter) add(key string, f stats.ActivatorFigures) {
	// One bad key would make the autoscaler refuse the whole frame and
	// close the connection, every period: skip it and count it instead.
	if service.Check(key) != nil || !validFigures(f) {
		r.metrics.invalid.Inc()
		return
	}
	delete(r.reported, key)
	if f != (stats.ActivatorFigures{}) {
		r.current[key] = struct{}{}
	}
	frameStart := 0
	if n := len(r.cuts); n > 0 {
		frameStart = r.cuts[n-1]
	}
	if len(r.buf)-frameStart+stats.ActivatorMaxEntrySize > stats.ActivatorMaxFrameSize {
		r.cuts = append(r.cuts, len(r.buf))
		r.buf = stats.AppendActivatorReportHeader(r.buf, r.end, r.end.Sub(r.lastEnd))
	}
	r.buf = stats.AppendActivatorEntry(r.buf, key, f)
}

// validFigures reports whether the autoscaler accepts f's concurrency: a
// finite number ≥ 0.
func validFigures(f stats.ActivatorFigures) bool {
	return f.Concurrency >= 0 && !math.IsInf(f.Concurrency, 1)
}
