// Command agent runs the node agent for the integration test, inside the
// cluster's network namespace, until SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/swell-run/swell/hack/cluster/nodeagent"
)

type images map[string]string

func (m images) String() string { return fmt.Sprint(map[string]string(m)) }

func (m images) Set(v string) error {
	name, bin, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("%q: want image=binary", v)
	}
	m[name] = bin
	return nil
}

func main() {
	cfg := nodeagent.Config{Images: images{"swell/shell": "/bin/sh"}}
	flag.StringVar(&cfg.Kubeconfig, "kubeconfig", "", "node identity")
	flag.StringVar(&cfg.SchedulerKubeconfig, "scheduler-kubeconfig", "", "scheduler identity")
	flag.StringVar(&cfg.NodeName, "node", "", "node name")
	flag.StringVar(&cfg.ClusterNetns, "netns", "", "cluster network namespace")
	flag.StringVar(&cfg.Bridge, "bridge", "swbr0", "pod bridge")
	flag.StringVar(&cfg.StateDir, "state", "", "state directory")
	flag.Var(images(cfg.Images), "image", "image=binary (repeatable)")
	flag.Parse()
	cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := nodeagent.Run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
