//go:build linux

// Command fleet is a fake fleet of pods for measuring the autoscaler at
// scale: one process (or a few, below) that serves the queue-proxy's
// stats endpoint (GET /stats, binary stats.Report version 3, 2 or 1 or
// JSON by Accept, as queueproxy/stats.go serves it) for tens of thousands
// of pods, each at its own loopback address (127.1.0.1:9090, 127.1.0.2:9090,
// …), and opens the report streams of a few activators to the autoscaler
// with the activators' own reporter (activator/reporter).
//
// Each service's load follows a pattern drawn from -seed: busy (steady),
// bursting (periodic bursts through the activators), idle (warm pods, no
// load) or zero (no pods; the activators report it). The fleet writes
// every service's kind and pod addresses to -out (JSON lines, package
// hack/scale/pods) once its socket listens, and serves a control API on
// -control: GET /ready, POST /step?service=ns/name[&factor=F] to change a
// service's load (the answer says when the change is first served), GET
// /stats for its counters. It stops on SIGTERM or SIGINT.
//
//	fleet -services 10000 -out pods.jsonl -control 127.0.0.1:7070 \
//	      -autoscaler ws://127.0.0.1:8080/activator -token-file token
//
// With -leaders, the autoscaler is sharded (package shard): each
// activator reports each service, and pokes for it, to the autoscaler
// replica that leads its bucket (reporter.Pool), -leaders naming the
// replica of each bucket; -autoscaler then gives the path (and Host) of
// the websocket. The leaders are fixed: electing them is Kubernetes'
// part.
//
//	fleet ... -autoscaler ws://127.0.0.1:8081/activator \
//	      -leaders 127.0.0.1:8081,127.0.0.1:8082,127.0.0.1:8083,127.0.0.1:8081,...
//
// With -push, the pods push their reports too, as queue-proxies do: each
// pod the autoscaler has scraped (so, it is ready: a pod of a service at
// zero has no queue-proxy) keeps a websocket to the autoscaler's pod
// endpoint and sends it each period it closes; a step closes a period of
// the service's pods at once and another 100 ms later, each pushed (see
// push.go). Given several addresses, the pods spread over them, as over
// the endpoints of a Service; a sharded autoscaler's replica redirects a
// pod to the replica that leads its service, which the pod follows.
//
//	fleet ... -push ws://127.0.0.1:8080
//	fleet ... -push ws://127.0.0.1:8081,ws://127.0.0.1:8082,ws://127.0.0.1:8083
//
// One socket listens for every pod (the port on any address of the
// loopback device; a connection's local address names its pod), so the
// fleet needs a file descriptor per connection and no more. Where a
// process's open-file limit is below the connections the autoscalers
// keep, several processes serve one fleet: each started with the same
// flags, the same -epoch and -share (the file of the steps and scrapes
// they share, see table), and its own -control and -out; they share the
// pods' port, and the kernel spreads the connections among them. Pushing,
// each process pushes for a slice of the pods (-push-slice i/n), a file
// for each beside the scrapes' (and the autoscaler one for each too), and
// learns of the steps and scrapes of all from the shared file. Only the
// process given -autoscaler runs the activators; step services through
// its control API. Serving costs one read and one write system call per
// scrape on a few epoll loops, so that the machine's CPU goes to the
// autoscaler under test; a report is computed when it is asked for, from
// the clock.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/zap"

	"github.com/swell-run/swell/activator/reporter"
	"github.com/swell-run/swell/hack/scale/fdlimit"
	"github.com/swell-run/swell/hack/scale/pods"
	"github.com/swell-run/swell/pkg/logging"
	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/shard"
)

type options struct {
	services, perSvc int
	seed             uint64
	mix              Mix
	targetPerPod     float64
	first            netip.Addr
	port             uint
	loops            int
	out, control     string
	autoscaler       string
	leaders          reporter.Leaders
	token, tokenFile string
	activators       int
	// epoch is when every pod's clock starts; share, the file of the
	// table shared by the fleet's processes ("" for a fleet of one).
	epoch    time.Time
	share    string
	logLevel string
	// push are the autoscaler's pod endpoints the pods push to (-push),
	// none for none; pushPath their path. This process pushes for the
	// pods of its slice, pushSlice of pushSlices, dialing at most
	// pushDials a second.
	push                  []netip.AddrPort
	pushPath              string
	pushSlice, pushSlices int
	pushDials             float64
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	o, err := parseFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "fleet: %v\n", err)
		return 2
	}
	log, err := logging.New(logging.FormatJSON, o.logLevel)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fleet: %v\n", err)
		return 2
	}
	defer log.Sync()
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	if err := serve(ctx, o, log); err != nil {
		log.Error("fleet stopped", zap.Error(err))
		return 1
	}
	return 0
}

func parseFlags(args []string) (options, error) {
	fs := flag.NewFlagSet("fleet", flag.ContinueOnError)
	var o options
	var mix, first, leaders, epoch, push, slice string
	fs.IntVar(&o.services, "services", 1000, "services in the fleet")
	fs.IntVar(&o.perSvc, "pods-per-service", 5, "pods of each service")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the services' kinds and loads")
	fs.StringVar(&mix, "mix", DefaultMix.String(), "share of services of each kind: busy, bursting, idle, zero")
	fs.Float64Var(&o.targetPerPod, "target", 70, "the services' target concurrency per pod, which the loads are set against (Knative's default: 100 at 70%)")
	fs.StringVar(&first, "first", "127.1.0.1", "address of the first pod; the others follow it in 127.0.0.0/8")
	fs.UintVar(&o.port, "port", network.DefaultQueueMetricsPort, "every pod's stats port")
	fs.IntVar(&o.loops, "loops", 1, "epoll loops (goroutines, at most a CPU each) serving the pods")
	fs.StringVar(&o.out, "out", "-", "`file` the pods' addresses are written to, JSON lines; - for stdout")
	fs.StringVar(&o.control, "control", "127.0.0.1:7070", "`address` of the control API")
	fs.StringVar(&o.autoscaler, "autoscaler", "", "`URL` of the autoscaler's activator endpoint, e.g. ws://127.0.0.1:8080"+network.ActivatorReportPath+"; none: no activator reports")
	fs.StringVar(&o.token, "token", "", "bearer token the activators present")
	fs.StringVar(&o.tokenFile, "token-file", "", "`file` holding the bearer token, instead of -token")
	fs.StringVar(&leaders, "leaders", "", "comma-separated `addresses` (host:port) of the autoscaler replica leading each bucket of services, in bucket order; none: one autoscaler, -autoscaler's")
	fs.IntVar(&o.activators, "activators", 3, "fake activators reporting to the autoscaler (without -autoscaler, with -share: those of the fleet's process that runs them)")
	fs.StringVar(&epoch, "epoch", "", "RFC 3339 `time` the pods' clocks start at, the same for every process of a fleet (default: now, to the second)")
	fs.StringVar(&o.share, "share", "", "`file` of the steps and scrapes shared by the fleet's processes, new for each run; none: one process")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&push, "push", "", "comma-separated `URLs` of the autoscaler's pod endpoint, e.g. ws://127.0.0.1:8080: every pod of a service the autoscaler scraped keeps a websocket to one (the pods spread over them, as over a Service's endpoints) and pushes its reports; none: the pods are scraped only")
	fs.StringVar(&slice, "push-slice", "0/1", "`i/n`: this process pushes for the i-th of n equal slices of the pods (the fleet's processes, 0 to n-1)")
	fs.Float64Var(&o.pushDials, "push-dials", 2000, "push connections this process opens a second at most")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if o.services < 1 {
		errs = append(errs, fmt.Errorf("-services %d: accepted is at least 1", o.services))
	}
	if o.perSvc < 1 {
		errs = append(errs, fmt.Errorf("-pods-per-service %d: accepted is at least 1", o.perSvc))
	}
	if o.loops < 1 {
		errs = append(errs, fmt.Errorf("-loops %d: accepted is at least 1", o.loops))
	}
	if o.port < 1 || o.port > 65535 {
		errs = append(errs, fmt.Errorf("-port %d: accepted is 1 to 65535", o.port))
	}
	if !(o.targetPerPod > 0) {
		errs = append(errs, fmt.Errorf("-target %g: accepted is a number above 0", o.targetPerPod))
	}
	var err error
	if o.mix, err = ParseMix(mix); err != nil {
		errs = append(errs, fmt.Errorf("-mix: %w", err))
	}
	if o.first, err = netip.ParseAddr(first); err != nil || !o.first.Is4() || !o.first.IsLoopback() {
		errs = append(errs, fmt.Errorf("-first %q: accepted is an IPv4 loopback address, 127.0.0.0/8", first))
	}
	o.epoch = time.Now().Truncate(time.Second)
	if epoch != "" {
		if o.epoch, err = time.Parse(time.RFC3339Nano, epoch); err != nil {
			errs = append(errs, fmt.Errorf("-epoch %q: accepted is an RFC 3339 time, e.g. 2030-01-02T03:04:05Z", epoch))
		}
	}
	if push != "" {
		if o.push, o.pushPath, err = parsePushURLs(push); err != nil {
			errs = append(errs, err)
		}
	}
	if o.pushSlice, o.pushSlices, err = parseSlice(slice); err != nil {
		errs = append(errs, err)
	}
	if !(o.pushDials >= 1) {
		errs = append(errs, fmt.Errorf("-push-dials %g: accepted is a number from 1 up", o.pushDials))
	}
	if leaders != "" {
		if o.leaders, err = parseLeaders(leaders); err != nil {
			errs = append(errs, err)
		}
		if o.autoscaler == "" {
			errs = append(errs, errors.New("-leaders needs -autoscaler, the websocket's URL"))
		}
	}
	switch {
	case o.autoscaler != "" || o.share != "":
		if o.activators < 1 || o.activators > 8 {
			errs = append(errs, fmt.Errorf("-activators %d: accepted is 1 to 8 (a pod splits its proxied load among at most 8)", o.activators))
		}
		if o.autoscaler != "" && (o.token == "") == (o.tokenFile == "") {
			errs = append(errs, errors.New("-autoscaler needs one of -token and -token-file"))
		}
	default:
		o.activators = 0
	}
	return o, errors.Join(errs...)
}

// parseLeaders reads -leaders: a host:port per bucket, each bucket's
// leader. Every bad element is reported.
func parseLeaders(s string) (reporter.Leaders, error) {
	var l reporter.Leaders
	var errs []error
	for a := range strings.SplitSeq(s, ",") {
		a = strings.TrimSpace(a)
		if host, port, err := net.SplitHostPort(a); err != nil || host == "" || port == "" {
			errs = append(errs, fmt.Errorf("-leaders: bucket %d's leader %q: accepted is host:port", len(l), a))
		}
		l = append(l, a)
	}
	if err := shard.Check(len(l)); err != nil {
		errs = append(errs, fmt.Errorf("-leaders: %w", err))
	}
	return l, errors.Join(errs...)
}

// parseSlice reads -push-slice: i/n, 0 ≤ i < n.
func parseSlice(s string) (int, int, error) {
	a, b, ok := strings.Cut(s, "/")
	i, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || n < 1 || i < 0 || i >= n {
		return 0, 0, fmt.Errorf("-push-slice %q: accepted is i/n, 0 ≤ i < n, e.g. 0/3", s)
	}
	return i, n, nil
}

// slice is the pods [lo, hi) of the i-th of n equal slices of npods.
func slice(npods, i, n int) (lo, hi int) {
	return npods * i / n, npods * (i + 1) / n
}

func serve(ctx context.Context, o options, log *zap.Logger) error {
	npods := o.services * o.perSvc
	pushLo, pushHi := 0, 0
	if len(o.push) > 0 {
		pushLo, pushHi = slice(npods, o.pushSlice, o.pushSlices)
	}
	// A connection from the scraper to each pod, one to the autoscaler
	// for each pod of the slice this process pushes for, and some room.
	// Short of it, the fleet runs: the scraper, which needs as many, is
	// what runs out first, and that is what a measurement shows.
	before, after, err := fdlimit.Raise(uint64(npods + pushHi - pushLo + 1024))
	if err != nil {
		log.Warn("the open-file limit is too low for a connection to every pod", zap.Error(err))
	}
	log.Info("open-file limit", zap.Uint64("soft", before.Cur), zap.Uint64("hard", before.Max),
		zap.Uint64("raisedSoft", after.Cur), zap.Uint64("raisedHard", after.Max))

	var t *table
	if o.share != "" {
		if t, err = mapTable(o.share, o.services, npods); err != nil {
			return err
		}
	}
	f, err := newFleet(Patterns(o.services, o.mix, o.targetPerPod, o.seed), o.perSvc, o.first, uint16(o.port), o.activators, o.seed, o.epoch, t)
	if err != nil {
		return err
	}
	f.push = len(o.push) > 0
	lfd, err := listen(uint16(o.port), o.share != "")
	if err != nil {
		return err
	}
	defer syscall.Close(lfd)
	loops := make([]*loop, o.loops)
	for i := range loops {
		if loops[i], err = newLoop(f, lfd, log.Named(fmt.Sprintf("loop-%d", i))); err != nil {
			for _, l := range loops[:i] {
				l.close()
			}
			return err
		}
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	errc := make(chan error, len(loops)+2) // the loops', the pushes', the control API's
	defer func() {
		stop.Store(true)
		wg.Wait()
	}()
	log.Info("pods listening", zap.Int("services", o.services), zap.Int("pods", npods),
		zap.String("first", f.addrs[0].String()), zap.String("last", f.addrs[len(f.addrs)-1].String()),
		zap.Stringer("mix", o.mix))
	for _, l := range loops {
		wg.Go(func() {
			if err := l.run(&stop); err != nil {
				errc <- err
			}
		})
	}

	var pokers []poker
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	for i := range o.activators {
		if o.autoscaler == "" {
			break // another process of the fleet runs them
		}
		cfg := reporter.Config{
			URL: o.autoscaler, Token: o.token, TokenFile: o.tokenFile, Name: f.actNames[i],
			Source: activatorSource{f: f, period: reporter.DefaultPeriod},
			// The autoscaler may start after the fleet.
			MaxBackoff: time.Second,
			Logger:     log.Named(f.actNames[i]),
		}
		if o.leaders == nil {
			rep, err := reporter.New(cfg)
			if err != nil {
				return err
			}
			pokers = append(pokers, rep)
			wg.Go(func() { rep.Run(rctx) })
			continue
		}
		// As cmd/activator's pool, with the leaders fixed.
		pool, err := reporter.NewPool(reporter.PoolConfig{Config: cfg, DialerFor: dialerTo})
		if err != nil {
			return err
		}
		pool.SetLeaders(o.leaders)
		pokers = append(pokers, pool)
		wg.Go(func() { pool.Run(rctx) })
	}
	wg.Go(func() { f.pokeBursts(rctx, pokers) })

	var push *pusher
	if f.push {
		if push, err = newPusher(f, pushLo, pushHi, o.push, o.pushPath, o.pushDials, log.Named("push")); err != nil {
			return err
		}
		wg.Go(func() {
			if err := push.run(&stop); err != nil {
				errc <- err
			}
		})
	}

	ctl := newController(f, loops, pokers, push)
	ctl.elsewhere = o.share != "" && o.autoscaler == ""
	ln, err := net.Listen("tcp", o.control)
	if err != nil {
		return fmt.Errorf("control API: %w", err)
	}
	srv := &http.Server{Handler: ctl.handler(), ReadHeaderTimeout: 5 * time.Second}
	wg.Go(func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("control API: %w", err)
		}
	})
	defer srv.Close()

	if err := writeOut(o.out, f.services()); err != nil {
		return err
	}
	ctl.ready.Store(true)
	log.Info("fleet ready", zap.String("control", ln.Addr().String()), zap.String("out", o.out),
		zap.Int("activators", len(pokers)), zap.String("autoscaler", o.autoscaler), zap.Strings("leaders", o.leaders),
		zap.Time("epoch", o.epoch), zap.String("share", o.share), zap.Stringers("push", o.push), zap.Int("pushFrom", pushLo), zap.Int("pushTo", pushHi))

	select {
	case <-ctx.Done():
		log.Info("signal received: stopping")
	case err := <-errc:
		return err
	}
	// The activators close their streams with 1000, the loops their
	// sockets.
	rcancel()
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	srv.Shutdown(sctx)
	return nil
}

// dialerTo is the websocket dialer that reaches the autoscaler replica at
// addr whatever the URL's host.
func dialerTo(addr string) *websocket.Dialer {
	d := *websocket.DefaultDialer
	d.Proxy = nil
	d.NetDialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	return &d
}

func writeOut(path string, svcs []pods.Service) error {
	if path == "-" || path == "" {
		return pods.Write(os.Stdout, svcs)
	}
	if err := pods.WriteFile(path, svcs); err != nil {
		return fmt.Errorf("-out %s: %w", path, err)
	}
	return nil
}
