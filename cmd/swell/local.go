package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/swell-run/swell/demo"
	"github.com/swell-run/swell/local"
	"github.com/swell-run/swell/local/config"
	"github.com/swell-run/swell/pkg/envflag"
	"github.com/swell-run/swell/pkg/logging"
	"github.com/swell-run/swell/queueproxy"
)

const localUsage = `Usage: swell local [flags] -- CMD [ARGS...]
       swell local -f swell.yaml [flags]
       swell local --demo

Run Swell's data plane on this machine: the activator, the autoscaler and,
for each replica of a service, a queue-proxy in front of one process of its
command, which listens on $PORT. Traffic enters at --port through the
activator; replicas start on the first request, scale with the load and
stop after the scale-to-zero grace period without traffic.

  --demo           serve the example app (swell hello), starting at zero,
                   at a target of 10 requests in flight per replica
  -f swell.yaml    run several services (docs/local.md shows the format)
  -- CMD [ARGS]    run one service; the flags after "swell local" tune it

Route a request with Host: <name>.localhost (curl -H 'Host: hello.localhost'),
a host listed for the service, or the Swell-Service: <name> header; with one
service, every request goes to it. The admin port serves a live dashboard
(http://127.0.0.1:8081/), the status 'swell status' shows, and metrics.

Ctrl-C stops gracefully: requests in flight finish, replicas drain; a second
Ctrl-C stops at once. No process is left behind either way.

Examples:
  swell local --demo
  swell local --min-scale 1 --target 10 -- python3 -m http.server
  swell local --container-concurrency 1 --scale-to-zero-grace-period 10s -- ./myapp

Flags:
`

type localFlags struct {
	file      string
	demo      bool
	address   string
	port      int
	adminPort int
	logLevel  string
	logFormat string
	shutdown  time.Duration
	killAfter time.Duration
	drainQ    time.Duration
	stateDir  string
}

func runLocal(ctx context.Context, args []string, s streams) int {
	var f localFlags
	fs := flag.NewFlagSet("swell local", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&f.file, "f", "", "run the services of this YAML `file`")
	fs.BoolVar(&f.demo, "demo", false, "serve the example app (swell hello), starting at zero replicas, at a target of 10 in flight per replica")
	fs.StringVar(&f.address, "address", "127.0.0.1", "`host` the traffic and admin ports bind (0.0.0.0 for every interface)")
	fs.IntVar(&f.port, "port", local.DefaultPort, "traffic `port`: the front door, through the activator")
	fs.IntVar(&f.adminPort, "admin-port", local.DefaultAdminPort, "admin `port`: dashboard, status, metrics")
	fs.StringVar(&f.logLevel, "log-level", "warn", "level of the components' own logs: debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", logging.FormatAuto, "format of the components' logs: json, console or auto")
	fs.DurationVar(&f.shutdown, "shutdown-timeout", local.DefaultShutdownTimeout, "on Ctrl-C, how long requests in flight may take to finish")
	fs.DurationVar(&f.killAfter, "kill-after", 10*time.Second, "a stopping app gets SIGKILL this long after SIGTERM")
	fs.DurationVar(&f.drainQ, "drain-quiet-period", 500*time.Millisecond, "a stopping replica's queue-proxy keeps accepting requests this long")
	fs.StringVar(&f.stateDir, "state-dir", "auto", "`directory` where what the services' policies learn is kept across runs (auto: under $XDG_STATE_HOME or ~/.local/state, one per services file; empty: nothing kept)")
	svc := config.RegisterFlags(fs)

	words, cmd := args, []string(nil)
	for i, a := range args {
		if a == "--" {
			words, cmd = args[:i], args[i+1:]
			break
		}
	}
	if err := fs.Parse(words); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(s.stdout, localUsage)
			printFlags(s.stdout, fs)
			return 0
		}
		fmt.Fprintf(s.stderr, "swell local: %v (see swell local --help)\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(s.stderr, "swell local: unexpected argument %q; put the command after --: swell local [flags] -- CMD [ARGS...]\n", fs.Arg(0))
		return 2
	}

	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(s.stderr, "swell local: cannot find its own executable to run queue-proxies: %v\n", err)
		return 1
	}
	file, err := localFile(f, fs, svc, cmd, self)
	if err != nil {
		return envflag.Refuse(s.stderr, "swell local", err)
	}
	log, err := logging.New(f.logFormat, f.logLevel)
	if err != nil {
		fmt.Fprintf(s.stderr, "swell local: %v\n", err)
		return 2
	}
	defer log.Sync()

	// The first Ctrl-C or SIGTERM (ctx) stops gracefully, the second at
	// once. Registering here keeps the second from killing swell before
	// it has killed its replicas.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	kill := make(chan struct{})
	var once sync.Once
	go func() {
		<-sigs
		<-sigs
		once.Do(func() { close(kill) })
	}()

	out := &lockedWriter{w: s.stdout}
	err = local.Run(ctx, local.Config{
		File:               file,
		Address:            f.address,
		Port:               f.port,
		AdminPort:          f.adminPort,
		QueueProxy:         []string{self, "queue-proxy"},
		Output:             out,
		Log:                log,
		QueueProxyLogLevel: f.logLevel,
		DrainQuiet:         f.drainQ,
		KillAfter:          f.killAfter,
		ShutdownTimeout:    f.shutdown,
		Kill:               kill,
		StateDir:           stateDir(f.stateDir, f.file),
		Listening: func(front, admin net.Addr) {
			fmt.Fprintf(out, "swell local: serving %s at http://%s (dashboard http://%s/)\n", serviceNames(file), front, admin)
		},
	})
	if err != nil {
		fmt.Fprintf(s.stderr, "%v\n", err)
		return 1
	}
	fmt.Fprintln(out, "swell local: stopped")
	return 0
}

// localFile builds the services to run from -f, --demo or the command.
func localFile(f localFlags, fs *flag.FlagSet, svc *config.Flags, cmd []string, self string) (*config.File, error) {
	switch {
	case f.file != "" && f.demo:
		return nil, errors.New("-f and --demo do not go together; accepted: one of -f FILE, --demo, -- CMD")
	case f.file != "" && len(cmd) > 0:
		return nil, errors.New("-f and a command do not go together; accepted: one of -f FILE, --demo, -- CMD")
	case f.demo && len(cmd) > 0:
		return nil, errors.New("--demo and a command do not go together; accepted: one of -f FILE, --demo, -- CMD")
	case f.file != "":
		if set := svc.Set(); len(set) > 0 {
			return nil, fmt.Errorf("%s: one-service flags do not go with -f; accepted: set them in %s (docs/local.md)", strings.Join(set, ", "), f.file)
		}
		return config.Load(f.file)
	case f.demo:
		// The demo starts at zero, so that the first curl shows a cold
		// start, and aims at 10 requests in flight per replica, so that a
		// laptop's load shows it scale; flags given still win.
		given := map[string]bool{}
		fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
		for name, v := range map[string]string{"name": "hello", "initial-scale": "0", "allow-zero-initial-scale": "true", "target": "10"} {
			if !given[name] {
				if err := fs.Set(name, v); err != nil {
					return nil, err
				}
			}
		}
		return svc.File([]string{self, "hello"})
	case len(cmd) == 0:
		return nil, errors.New("nothing to run; accepted: swell local --demo, swell local -f swell.yaml, or swell local [flags] -- CMD [ARGS...]")
	}
	return svc.File(cmd)
}

func serviceNames(f *config.File) string {
	n := make([]string, len(f.Services))
	for i, s := range f.Services {
		n[i] = s.Name
	}
	return strings.Join(n, ", ")
}

// lockedWriter serialises the writes of the replicas' output and the
// scaling events, so lines never interleave.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// runQueueProxy is `swell queue-proxy`: the queue-proxy sidecar, as
// cmd/queue-proxy, for the replicas of `swell local`.
func runQueueProxy(_ context.Context, args []string, s streams) int {
	return queueproxy.Main(args, os.LookupEnv, s.stdout, s.stderr)
}

// runHello is `swell hello`: the example app, as cmd/hello.
func runHello(_ context.Context, args []string, s streams) int {
	return demo.Main(args, os.Getenv, s.stderr)
}

// stateDir resolves --state-dir: "auto" is a directory of the user's
// state, one per services file (by its absolute path; the demo has its
// own), so that two projects' services of the same name learn apart.
func stateDir(flagValue, file string) string {
	if flagValue != "auto" {
		return flagValue
	}
	base := os.Getenv("XDG_STATE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		base = filepath.Join(home, ".local", "state")
	}
	which := "demo"
	if file != "" {
		if abs, err := filepath.Abs(file); err == nil {
			file = abs
		}
		sum := sha256.Sum256([]byte(file))
		which = hex.EncodeToString(sum[:6])
	}
	return filepath.Join(base, "swell", "local", which)
}
