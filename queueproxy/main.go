package queueproxy

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"go.uber.org/zap"

	"github.com/swell-run/swell/pkg/envflag"
	"github.com/swell-run/swell/pkg/logging"
)

// defaultGCPercent replaces Go's default GOGC of 100. A queue-proxy's live
// heap is well under a megabyte, so the collector's 4 MiB minimum goal, not
// the live heap, sets its footprint; halving it saves about 2 MiB of peak RSS
// in every pod for a few percent more CPU (docs/performance.md). GOGC in the
// environment still wins.
const defaultGCPercent = 50

// Main runs a queue-proxy process until it has drained, and returns its
// exit code: 0 after a graceful drain, 1 on a runtime failure, 2 on bad
// configuration. It is the whole of cmd/queue-proxy, and what `swell local`
// runs for each replica (as `swell queue-proxy`). It installs signal
// handlers and sets the process's GC percent: call it only as a process's
// main.
func Main(args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer) int {
	if _, set := lookupEnv("GOGC"); !set {
		debug.SetGCPercent(defaultGCPercent)
	}
	cfg, err := ParseConfig(args, lookupEnv)
	if errors.Is(err, flag.ErrHelp) {
		PrintUsage(stdout)
		return 0
	}
	if err != nil {
		return envflag.Refuse(stderr, "queue-proxy", err)
	}
	log, err := logging.New(cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		fmt.Fprintf(stderr, "queue-proxy: %v\n", err)
		return 2
	}
	defer log.Sync()

	cfg.Logger = log
	qp, err := New(cfg)
	if err != nil {
		log.Error("cannot start", zap.Error(err))
		return 1
	}

	// The first SIGTERM or SIGINT drains; a second one stops at once.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	go func() {
		sig := <-sigs
		log.Info("signal received: draining", zap.Stringer("signal", sig))
		qp.StartDrain()
		sig = <-sigs
		log.Warn("second signal received: stopping without draining", zap.Stringer("signal", sig))
		cancel()
	}()

	if err := qp.Run(ctx); err != nil {
		log.Error("queue-proxy stopped", zap.Error(err))
		return 1
	}
	return 0
}
