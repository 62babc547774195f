package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/swell-run/swell/hack/cluster/build"
	"github.com/swell-run/swell/hack/cluster/netns"
	"github.com/swell-run/swell/hack/cluster/node"
)

func cmdE2E(ctx context.Context, args []string, log *slog.Logger) error {
	fs := newFlagSet("e2e", "e2e [--keep] [-- TEST-BINARY-FLAGS...]")
	var o upOptions
	o.register(fs)
	keep := fs.Bool("keep", false, "leave the cluster up after the suite (stop it with swell-cluster down)")
	if err := parse(fs, args); err != nil {
		return err
	}
	var named bool
	fs.Visit(func(f *flag.Flag) { named = named || f.Name == "name" })
	if named {
		return errors.New("e2e always starts a fresh cluster with a random name: --name is not accepted")
	}
	// A fresh cluster with a random name, so runs never collide.
	suffix := make([]byte, 4)
	rand.Read(suffix)
	o.name = "e2e" + hex.EncodeToString(suffix)
	state, err := o.stateDir()
	if err != nil {
		return err
	}

	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	module, err := build.FindModule(wd)
	if err != nil {
		return err
	}
	bins, images, err := buildAll(ctx, o, module, state, log)
	if err != nil {
		return err
	}
	// Compile the suite now: the module proxy is unreachable inside the
	// cluster's namespace.
	t0 := time.Now()
	suite := filepath.Join(state, "e2e.test")
	gotest := exec.CommandContext(ctx, "go", "test", "-c", "-o", suite, "./e2e")
	gotest.Dir = module
	var out bytes.Buffer
	gotest.Stdout, gotest.Stderr = &out, &out
	if err := gotest.Run(); err != nil {
		return fmt.Errorf("compile the end-to-end suite: %w\n%s", err, out.Bytes())
	}
	log.Info("built", "binary", "e2e.test", "took", since(t0))

	c, err := upCluster(ctx, o, state, bins, images, log)
	if err != nil {
		return err
	}
	down := func() {
		t0 := time.Now()
		if err := stopCluster(context.WithoutCancel(ctx), state, o.name, log); err != nil {
			log.Error("stop the cluster", "err", err)
		}
		log.Info("cluster stopped", "took", since(t0))
	}

	t0 = time.Now()
	cmd := netns.Exec(c.Netns, append([]string{suite, "-test.v"}, fs.Args()...)...)
	cmd.Dir = filepath.Join(module, "e2e")
	cmd.Env = append(clusterEnv(&c.State), "SWELL_DEPLOY="+deployOverlay(state),
		"SWELL_KUBELET_DIR="+node.NewLayout(state, o.name).Kubelet)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	testErr := cmd.Run()
	log.Info("end-to-end suite finished", "took", since(t0), "err", testErr)

	if *keep {
		fmt.Printf("cluster %s kept up; use it with\n  swell-cluster exec%s -- kubectl get pods -A\nstop it with\n  swell-cluster down%s\n", o.name, o.hint(), o.hint())
	} else {
		down()
		if testErr == nil {
			os.RemoveAll(state)
		} else {
			fmt.Fprintf(os.Stderr, "cluster logs kept in %s\n", filepath.Join(state, "logs"))
		}
	}
	return exitStatus(testErr)
}
