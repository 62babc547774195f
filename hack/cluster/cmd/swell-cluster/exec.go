package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"

	"github.com/swell-run/swell/hack/cluster/controlplane"
	"github.com/swell-run/swell/hack/cluster/netns"
)

func cmdExec(ctx context.Context, args []string, log *slog.Logger) error {
	fs := newFlagSet("exec", "exec [--name N] [--state DIR] -- CMD [ARGS...]")
	var c clusterFlags
	c.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("exec needs a command: swell-cluster exec [--name N] -- CMD [ARGS...]")
	}
	state, err := c.stateDir()
	if err != nil {
		return err
	}
	s, err := controlplane.Load(state)
	if err != nil {
		return fmt.Errorf("cluster %s: %w (start it with: swell-cluster up%s)", c.name, err, c.hint())
	}
	if !s.Running() {
		return fmt.Errorf("cluster %s is not running (start it with: swell-cluster up%s)", s.Name, c.hint())
	}
	cmd := netns.Exec(s.Netns, fs.Args()...)
	cmd.Env = clusterEnv(s)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	return exitStatus(cmd.Run())
}

// clusterEnv is this process's environment plus what a client of the
// cluster needs: KUBECONFIG and kubectl on PATH.
func clusterEnv(s *controlplane.State) []string {
	return append(os.Environ(),
		"KUBECONFIG="+s.PKI.Admin.Kubeconfig,
		"PATH="+s.BinDir+string(os.PathListSeparator)+os.Getenv("PATH"),
	)
}

// exitStatus turns a child's non-zero exit into this program's.
func exitStatus(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() > 0 {
		return exitError{ee.ExitCode()}
	}
	return err
}
