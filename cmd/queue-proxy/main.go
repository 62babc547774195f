// Command queue-proxy is the sidecar in front of the user container of
// every Swell pod. It is configured by environment variables or the
// equivalent flags (run with --help, or see docs/queue-proxy.md).
//
// Exit codes: 0 after a graceful drain, 1 on a runtime failure, 2 on bad
// configuration.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/swell-run/swell/pkg/logging"
	"github.com/swell-run/swell/queueproxy"
)

// defaultGCPercent replaces Go's default GOGC of 100. A queue-proxy's live
// heap is well under a megabyte, so the collector's 4 MiB minimum goal, not
// the live heap, sets its footprint; halving it saves about 2 MiB of peak RSS
// in every pod for a few percent more CPU (docs/performance.md). GOGC in the
// environment still wins.
const defaultGCPercent = 50

func main() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(defaultGCPercent)
	}
	os.Exit(run(os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr))
}

func run(args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer) int {
	cfg, err := queueproxy.ParseConfig(args, lookupEnv)
	if errors.Is(err, flag.ErrHelp) {
		queueproxy.PrintUsage(stdout)
		return 0
	}
	if err != nil {
		for line := range strings.SplitSeq(err.Error(), "\n") {
			fmt.Fprintf(stderr, "queue-proxy: %s\n", line)
		}
		return 2
	}
	log, err := logging.New(cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		fmt.Fprintf(stderr, "queue-proxy: %v\n", err)
		return 2
	}
	defer log.Sync()

	qp, err := queueproxy.New(cfg, log, clock.RealClock{})
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
