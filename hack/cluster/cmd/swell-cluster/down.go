package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/swell-run/swell/hack/cluster/controlplane"
)

func cmdDown(ctx context.Context, args []string, log *slog.Logger) error {
	fset := newFlagSet("down", "down [--name N] [--state DIR]")
	var c clusterFlags
	c.register(fset)
	if err := parse(fset, args); err != nil {
		return err
	}
	if fset.NArg() > 0 {
		return fmt.Errorf("down takes no arguments, got %q", fset.Args())
	}
	if err := controlplane.ValidateName(c.name); err != nil {
		return err
	}
	state, err := c.stateDir()
	if err != nil {
		return err
	}
	// Stopping must finish even when interrupted.
	ctx = context.WithoutCancel(ctx)
	err = stopCluster(ctx, state, c.name, log)
	if errors.Is(err, fs.ErrNotExist) {
		log.Info("no cluster recorded; deleting its network namespace if any", "state", state)
		return controlplane.DeleteNamespaces(ctx, c.name, log)
	}
	return err
}
