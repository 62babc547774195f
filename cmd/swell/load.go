package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/swell-run/swell/pkg/loadgen"
	"github.com/swell-run/swell/pkg/trace"
)

const loadUsage = `Usage: swell load [flags] URL

Send HTTP load at URL, then report latency, throughput and status codes.
Choose one mode:
  --rate N       open loop: N requests per second, however fast the target answers
  --trace FILE   open loop: replay the arrivals of a trace (CSV, see docs/load.md)
  --workers N    closed loop: N workers, each sending its next request as soon as
                 its previous one completes
A fixed rate or a closed loop needs --duration or --requests; a trace ends on
its own. Load goes only to this machine unless --allow-remote is given.

Examples:
  swell load --rate 2000 --duration 30s http://127.0.0.1:8080/
  swell load --workers 16 --requests 10000 -H 'Host: hello.default' http://127.0.0.1:8012/
  swell load --trace azure.csv --speed 4 --duration 60s --service-time http://127.0.0.1:8080/

Interrupting (Ctrl-C) stops sending, waits for the requests in flight and
prints the report so far (exit code 130); a second interrupt quits at once.

Flags:
`

// loadFlags are the raw flag values of `swell load`.
type loadFlags struct {
	rate          float64
	traceFile     string
	workers       int
	duration      time.Duration
	requests      uint64
	speed         float64
	serviceTime   bool
	sleepBase     time.Duration
	sleepPerToken time.Duration
	method        string
	header        headerFlag
	body          string
	timeout       time.Duration
	connections   int
	maxConns      int
	http2         bool
	keepalive     bool
	output        string
	progress      bool
	allowRemote   bool
}

func newLoadFlagSet(f *loadFlags) *flag.FlagSet {
	f.header = headerFlag{h: http.Header{}}
	fs := flag.NewFlagSet("swell load", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Float64Var(&f.rate, "rate", 0, "open loop at `N` requests per second, such as 2000 or 0.5")
	fs.StringVar(&f.traceFile, "trace", "", "open loop replaying the arrivals in this CSV `file` (TIMESTAMP,ContextTokens,GeneratedTokens or t,service_time)")
	fs.IntVar(&f.workers, "workers", 0, "closed loop with `N` workers")
	fs.DurationVar(&f.duration, "duration", 0, "send for this long: requests due later are not sent")
	fs.Uint64Var(&f.requests, "requests", 0, "send at most `N` requests")
	fs.Float64Var(&f.speed, "speed", 1, "replay the trace `factor` times faster (0.5 is half speed); service times are not scaled")
	fs.BoolVar(&f.serviceTime, "service-time", false, "append each trace request's service time to the URL as ?sleep=<duration>, which cmd/hello honours")
	fs.DurationVar(&f.sleepBase, "sleep-base", 5*time.Millisecond, "service time of a token-trace request: this fixed part...")
	fs.DurationVar(&f.sleepPerToken, "sleep-per-token", time.Millisecond, "...plus this much per generated token")
	fs.StringVar(&f.method, "method", http.MethodGet, "request `method`")
	fs.Var(&f.header, "H", "request `header` 'Name: value', repeatable; 'Host: name' sets the Host the target routes by")
	fs.Var(&f.header, "header", "same as -H: a request `header` 'Name: value', repeatable")
	fs.StringVar(&f.body, "body", "", "request `body`, or @file to send a file's contents")
	fs.DurationVar(&f.timeout, "timeout", loadgen.DefaultTimeout, "give up on a request after this long, response body included")
	fs.IntVar(&f.connections, "connections", loadgen.DefaultConnections, "`N` idle connections kept open per host")
	fs.IntVar(&f.maxConns, "max-connections", 0, "at most `N` connections per host, idle or busy (0: no cap)")
	fs.BoolVar(&f.http2, "http2", false, "speak cleartext HTTP/2 with prior knowledge (h2c)")
	fs.BoolVar(&f.keepalive, "keepalive", true, "reuse connections; --keepalive=false opens one per request")
	fs.StringVar(&f.output, "output", "text", "report `format`: text or json")
	fs.BoolVar(&f.progress, "progress", true, "write a progress line to stderr every second")
	fs.BoolVar(&f.allowRemote, "allow-remote", false, "allow a target that is not a loopback address")
	return fs
}

// headerFlag collects repeated -H values.
type headerFlag struct{ h http.Header }

func (f *headerFlag) String() string {
	if f == nil || f.h == nil {
		return ""
	}
	var lines []string
	for name, vs := range f.h {
		for _, v := range vs {
			lines = append(lines, name+": "+v)
		}
	}
	return strings.Join(lines, ", ")
}

func (f *headerFlag) Set(s string) error {
	name, value, ok := strings.Cut(s, ":")
	name = strings.TrimSpace(name)
	if !ok || !isToken(name) {
		return errors.New("accepted is 'Name: value', such as 'Host: hello.default'")
	}
	f.h.Add(name, strings.TrimSpace(value))
	return nil
}

// isToken reports whether s is an HTTP token (RFC 9110): what header names
// and methods are made of.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.ContainsRune("!#$%&'*+-.^_`|~", c):
		default:
			return false
		}
	}
	return true
}

// parsedLoad is what parseLoad makes of the command line.
type parsedLoad struct {
	opts     loadgen.Config
	output   string
	progress bool
}

// usageError is a mistake on the command line: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

func runLoad(ctx context.Context, args []string, s streams) int {
	p, err := parseLoad(ctx, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(s.stdout, loadUsage)
		var f loadFlags
		printFlags(s.stdout, newLoadFlagSet(&f))
		return 0
	}
	if err != nil {
		fmt.Fprintf(s.stderr, "swell load: %v\nRun 'swell load --help' for usage.\n", err)
		return 2
	}
	if p.progress {
		p.opts.Progress = s.stderr
		p.opts.ProgressOverwrite = s.stderrTTY
	}
	res, err := loadgen.Run(ctx, p.opts)
	if err != nil {
		// Run fails only on options it cannot use, before sending
		// anything: a usage error that parseLoad did not catch.
		fmt.Fprintf(s.stderr, "swell load: %v\n", err)
		return 2
	}
	if p.output == "json" {
		enc := json.NewEncoder(s.stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(res)
	} else {
		err = res.Print(s.stdout)
	}
	if err != nil {
		fmt.Fprintf(s.stderr, "swell load: write report: %v\n", err)
		return 1
	}
	if res.Interrupted {
		return 130
	}
	return 0
}

// parseLoad turns the command line into Options, checking every flag and
// combination so that mistakes are reported by flag name.
func parseLoad(ctx context.Context, args []string) (parsedLoad, error) {
	var f loadFlags
	fs := newLoadFlagSet(&f)
	// Flags may come before or after the URL: the flag package stops at
	// the first argument, so parse again after each one.
	var urls []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return parsedLoad{}, err
			}
			return parsedLoad{}, &usageError{msg: err.Error()}
		}
		if fs.NArg() == 0 {
			break
		}
		urls = append(urls, fs.Arg(0))
		args = fs.Args()[1:]
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })

	switch len(urls) {
	case 0:
		return parsedLoad{}, usagef("missing the target URL: swell load [flags] URL")
	case 1:
	default:
		return parsedLoad{}, usagef("%d target URLs (%s): give one", len(urls), strings.Join(urls, " "))
	}
	target := urls[0]
	if err := loadgen.CheckTarget(ctx, target); err != nil {
		if !errors.Is(err, loadgen.ErrRemoteTarget) {
			return parsedLoad{}, &usageError{msg: err.Error()}
		}
		if !f.allowRemote {
			return parsedLoad{}, usagef("URL %s: %v; load goes only to this machine unless --allow-remote is given", target, err)
		}
	}

	var modes []string
	for _, m := range []string{"rate", "trace", "workers"} {
		if set[m] {
			modes = append(modes, "--"+m)
		}
	}
	const choose = "choose one mode: --rate N (open loop at a fixed rate), --trace FILE (open loop replaying a trace) or --workers N (closed loop)"
	switch len(modes) {
	case 0:
		return parsedLoad{}, usagef("no mode given: %s", choose)
	case 1:
	default:
		return parsedLoad{}, usagef("%s cannot be combined: %s", strings.Join(modes, " and "), choose)
	}

	if set["duration"] && f.duration <= 0 {
		return parsedLoad{}, usagef("--duration %s: accepted is a positive duration, such as 30s or 5m", f.duration)
	}
	if set["requests"] && f.requests == 0 {
		return parsedLoad{}, usagef("--requests 0: accepted is a positive number of requests")
	}
	if !set["trace"] {
		for _, name := range []string{"speed", "service-time", "sleep-base", "sleep-per-token"} {
			if set[name] {
				return parsedLoad{}, usagef("--%s applies to a trace replay only: add --trace FILE", name)
			}
		}
	}
	o := loadgen.Config{
		URL:               target,
		Duration:          f.duration,
		Requests:          f.requests,
		Timeout:           f.timeout,
		Connections:       f.connections,
		MaxConnections:    f.maxConns,
		HTTP2:             f.http2,
		DisableKeepAlives: !f.keepalive,
		AllowRemote:       f.allowRemote,
	}
	bounded := f.duration > 0 || f.requests > 0
	switch modes[0] {
	case "--rate":
		if !(f.rate > 0 && f.rate <= 1e6) {
			return parsedLoad{}, usagef("--rate %g: accepted is a number of requests per second above 0 and at most 1000000, such as 2000 or 0.5", f.rate)
		}
		if !bounded {
			return parsedLoad{}, usagef("--rate needs a bound: add --duration (such as 30s) or --requests (such as 10000)")
		}
		if f.duration > 0 && f.rate*f.duration.Seconds() < 1-1e-9 {
			return parsedLoad{}, usagef("--rate %g with --duration %s plans no request: raise one so that rate × duration is at least 1", f.rate, f.duration)
		}
		o.Rate = f.rate
	case "--workers":
		if f.workers <= 0 {
			return parsedLoad{}, usagef("--workers %d: accepted is a positive number of workers", f.workers)
		}
		if !bounded {
			return parsedLoad{}, usagef("--workers needs a bound: add --duration (such as 30s) or --requests (such as 10000)")
		}
		o.Workers = f.workers
	case "--trace":
		if !(f.speed > 0 && !math.IsInf(f.speed, 0)) {
			return parsedLoad{}, usagef("--speed %g: accepted is a positive factor, such as 0.5 or 10", f.speed)
		}
		for name, d := range map[string]time.Duration{"sleep-base": f.sleepBase, "sleep-per-token": f.sleepPerToken} {
			if d < 0 {
				return parsedLoad{}, usagef("--%s %s: accepted is a duration of 0 or more, such as 5ms", name, d)
			}
			if set[name] && !f.serviceTime {
				return parsedLoad{}, usagef("--%s %s has no effect without --service-time: add it", name, d)
			}
		}
		tr, err := trace.ReadFile(f.traceFile, trace.Model{Base: f.sleepBase, PerToken: f.sleepPerToken})
		if err != nil {
			return parsedLoad{}, usagef("--trace %s: %v", f.traceFile, err)
		}
		if len(tr.Records) == 0 {
			return parsedLoad{}, usagef("--trace %s: the trace has no rows", f.traceFile)
		}
		if tr.Format == trace.FormatService {
			for _, name := range []string{"sleep-base", "sleep-per-token"} {
				if set[name] {
					return parsedLoad{}, usagef("--%s applies to token traces; %s gives each request's service time itself", name, f.traceFile)
				}
			}
		}
		if f.duration > 0 && time.Duration(float64(tr.Records[0].Arrival)/f.speed) >= f.duration {
			return parsedLoad{}, usagef("--duration %s ends before the trace's first arrival (%s at --speed %g)", f.duration, tr.Records[0].Arrival, f.speed)
		}
		o.Trace = tr.Records
		o.Speed = f.speed
		o.ServiceTime = f.serviceTime
	}

	if !isToken(f.method) {
		return parsedLoad{}, usagef("--method %q: accepted is an HTTP method such as GET or POST", f.method)
	}
	o.Method = f.method
	if len(f.header.h) > 0 {
		o.Header = f.header.h
	}
	if path, ok := strings.CutPrefix(f.body, "@"); ok {
		b, err := os.ReadFile(path)
		if err != nil {
			return parsedLoad{}, usagef("--body %s: %v", f.body, err)
		}
		o.Body = b
	} else if f.body != "" {
		o.Body = []byte(f.body)
	}
	switch {
	case f.timeout <= 0:
		return parsedLoad{}, usagef("--timeout %s: accepted is a positive duration, such as 30s", f.timeout)
	case f.connections <= 0:
		return parsedLoad{}, usagef("--connections %d: accepted is a positive number", f.connections)
	case f.maxConns < 0:
		return parsedLoad{}, usagef("--max-connections %d: accepted is 0 (no cap) or a positive number", f.maxConns)
	case f.http2 && !strings.HasPrefix(strings.ToLower(target), "http://"):
		return parsedLoad{}, usagef("--http2 speaks cleartext HTTP/2 (h2c) and needs an http:// URL, not %s", target)
	case f.output != "text" && f.output != "json":
		return parsedLoad{}, usagef("--output %q: accepted are text and json", f.output)
	}
	return parsedLoad{opts: o, output: f.output, progress: f.progress}, nil
}
