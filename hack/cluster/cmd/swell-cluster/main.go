// Command swell-cluster builds, starts and stops the Kubernetes test
// cluster Swell's end-to-end tests run against, and runs commands in it.
//
//	swell-cluster build                    build the binaries, print their paths
//	swell-cluster up [flags]               start a cluster: control plane and node
//	swell-cluster down [flags]             stop it; nothing is left running
//	swell-cluster exec [flags] -- CMD...   run CMD in the cluster's namespace
//	swell-cluster e2e [--keep] [-- ARGS]   run the end-to-end suite in a fresh cluster
//
// Network namespaces, containers and cgroups need root.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
)

const usage = `usage: swell-cluster <command> [flags]

commands:
  build   build etcd, Kubernetes, containerd, the CNI plugins and Traefik (cached)
  up      start a cluster (control plane and node) and wait until it is ready
  down    stop a cluster, its node and pods, and undo what they changed
  exec    run a command inside a cluster's network namespace, with kubectl on PATH
  e2e     build, start a fresh cluster, run the end-to-end suite in it, stop it

Run 'swell-cluster <command> -h' for a command's flags.
`

// exitError carries a child's exit status out of a command.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	err := run(ctx, os.Args[1:], log)
	var exit exitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		os.Exit(exit.code)
	case errors.Is(err, flag.ErrHelp):
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "swell-cluster:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, log *slog.Logger) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return flag.ErrHelp
	}
	cmds := map[string]func(context.Context, []string, *slog.Logger) error{
		"build": cmdBuild,
		"up":    cmdUp,
		"down":  cmdDown,
		"exec":  cmdExec,
		"e2e":   cmdE2E,
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
			fmt.Fprint(os.Stdout, usage)
			return nil
		}
		fmt.Fprint(os.Stderr, usage)
		return fmt.Errorf("unknown command %q: want build, up, down, exec or e2e", args[0])
	}
	return cmd(ctx, args[1:], log)
}

// clusterFlags are the flags that say which cluster a command is about.
type clusterFlags struct {
	name  string
	state string
}

func (c *clusterFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.name, "name", "dev", "cluster name: a lowercase letter and up to 19 lowercase letters or digits")
	fs.StringVar(&c.state, "state", "", "state directory (default: <user cache dir>/swell-cluster/clusters/<name>)")
}

// stateDir returns the cluster's state directory.
func (c *clusterFlags) stateDir() (string, error) {
	if c.state != "" {
		return filepath.Abs(c.state)
	}
	return defaultStateDir(c.name)
}

func defaultStateDir(name string) (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory for the cluster's state (set XDG_CACHE_HOME or HOME, or pass --state): %w", err)
	}
	return filepath.Join(dir, "swell-cluster", "clusters", name), nil
}

func newFlagSet(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: swell-cluster %s\n\nflags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	return nil
}
