package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/swell-run/swell/hack/cluster/build"
	"github.com/swell-run/swell/hack/cluster/netns"
	"github.com/swell-run/swell/hack/cluster/node"
	"github.com/swell-run/swell/hack/cluster/nodeimages"
)

func cmdE2E(ctx context.Context, args []string, log *slog.Logger) error {
	fs := newFlagSet("e2e", "e2e [--keep] [--repeat N] [--stress] [--report FILE] [-- TEST-BINARY-FLAGS...]")
	var o upOptions
	o.register(fs)
	keep := fs.Bool("keep", false, "leave the cluster up after the suite (stop it with swell-cluster down)")
	repeat := fs.Int("repeat", 1, "run the suite this many times, each in a fresh cluster, and print each test's passes and failures")
	stress := fs.Bool("stress", false, "run the clusters and the suite beside a CPU hog that keeps every core busy")
	report := fs.String("report", "", "also write the table of results to this file")
	if err := parse(fs, args); err != nil {
		return err
	}
	named := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { named[f.Name] = true })
	switch {
	case named["name"]:
		return errors.New("e2e always starts a fresh cluster with a random name: --name is not accepted")
	case *repeat < 1:
		return fmt.Errorf("--repeat %d: want a count of runs, at least 1", *repeat)
	case *repeat > 1 && *keep:
		return errors.New("--keep keeps the one cluster of a single run: not with --repeat")
	case *repeat > 1 && named["state"]:
		return errors.New("--state names the one cluster of a single run: not with --repeat")
	}

	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	module, err := build.FindModule(wd)
	if err != nil {
		return err
	}
	// What every run shares is built once, in a directory of its own: the
	// cluster's programs (cached), Swell's images and the overlay that
	// installs them, and the suite.
	o.name = randomName()
	first, err := o.stateDir()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(first), 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp(filepath.Dir(first), "e2e-work-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	bins, images, err := buildAll(ctx, o, module, work, log)
	if err != nil {
		return err
	}
	// Compile the suite now: the module proxy is unreachable inside the
	// cluster's namespace.
	t0 := time.Now()
	suite := filepath.Join(work, "e2e.test")
	gotest := exec.CommandContext(ctx, "go", "test", "-c", "-o", suite, "./e2e")
	gotest.Dir = module
	var out bytes.Buffer
	gotest.Stdout, gotest.Stderr = &out, &out
	if err := gotest.Run(); err != nil {
		return fmt.Errorf("compile the end-to-end suite: %w\n%s", err, out.Bytes())
	}
	log.Info("built", "binary", "e2e.test", "took", since(t0))
	// And the programs the suite runs: Helm, at the version the main
	// module's hack/helm pins, to install Swell from its chart; and
	// Swell's command line.
	main := filepath.Join(module, "..", "..")
	programs := []struct{ dir, pkg, out string }{
		{filepath.Join(main, "hack", "helm"), "helm.sh/helm/v4/cmd/helm", filepath.Join(work, "helm")},
		{main, "./cmd/swell", filepath.Join(work, "swell")},
	}
	for _, p := range programs {
		t0 := time.Now()
		gobuild := exec.CommandContext(ctx, "go", "build", "-o", p.out, p.pkg)
		gobuild.Dir = p.dir
		var out bytes.Buffer
		gobuild.Stdout, gobuild.Stderr = &out, &out
		if err := gobuild.Run(); err != nil {
			return fmt.Errorf("build %s: %w\n%s", p.pkg, err, out.Bytes())
		}
		log.Info("built", "binary", filepath.Base(p.out), "took", since(t0))
	}

	if *stress {
		log.Info("a CPU hog keeps every core busy while the suite runs")
		defer startHog()()
	}
	s := e2eSuite{o: o, module: module, work: work, suite: suite, bins: bins, images: images, args: fs.Args(), keep: *keep, log: log}
	var runs []runResult
	var failures int
	for i := range *repeat {
		if i > 0 {
			s.o.name = randomName()
		}
		if ctx.Err() != nil {
			break
		}
		if *repeat > 1 {
			log.Info("run of the suite", "run", i+1, "of", *repeat, "cluster", s.o.name)
		}
		r := s.run(ctx)
		runs = append(runs, r)
		if r.err != nil {
			failures++
		}
	}
	t := table(runs, *stress)
	fmt.Print("\n" + t)
	if *report != "" {
		if err := os.WriteFile(*report, []byte(t), 0o644); err != nil {
			return err
		}
	}
	if failures > 0 {
		return exitError{1}
	}
	return ctx.Err()
}

// e2eSuite is what every run of the suite needs.
type e2eSuite struct {
	o            upOptions
	module, work string
	suite        string
	bins         build.Binaries
	images       []nodeimages.Layout
	args         []string
	keep         bool
	log          *slog.Logger
}

// run starts a fresh cluster, runs the suite in it and stops it; a failed
// run's cluster state (the logs of its processes, and what its failed
// tests kept under logs/tests) is kept.
func (s e2eSuite) run(ctx context.Context) runResult {
	start := time.Now()
	state, err := s.o.stateDir()
	if err != nil {
		return runResult{err: err}
	}
	c, err := upCluster(ctx, s.o, state, s.bins, s.images, s.log)
	if err != nil {
		return runResult{took: time.Since(start), err: fmt.Errorf("the cluster did not start: %w", err)}
	}
	evidence := filepath.Join(state, "logs", "tests")
	t0 := time.Now()
	results := newSuiteRun()
	cmd := netns.Exec(c.Netns, append([]string{s.suite, "-test.v"}, s.args...)...)
	cmd.Dir = filepath.Join(s.module, "e2e")
	cmd.Env = append(clusterEnv(&c.State), "SWELL_DEPLOY="+deployOverlay(s.work),
		"SWELL_KUBELET_DIR="+node.NewLayout(state, s.o.name).Kubelet,
		"SWELL_E2E_EVIDENCE="+evidence,
		"SWELL_GATEWAY_CRDS="+s.bins.Traefik.GatewayCRDs,
		"SWELL_HELM="+filepath.Join(s.work, "helm"),
		"SWELL_CLI="+filepath.Join(s.work, "swell"))
	cmd.Stdout, cmd.Stderr = io.MultiWriter(os.Stdout, results), io.MultiWriter(os.Stderr, results)
	testErr := cmd.Run()
	results.close()
	s.log.Info("end-to-end suite finished", "took", since(t0), "err", testErr)

	r := runResult{tests: results.tests, order: results.order, err: testErr}
	if s.keep {
		fmt.Printf("cluster %s kept up; use it with\n  swell-cluster exec%s -- kubectl get pods -A\nstop it with\n  swell-cluster down%s\n", s.o.name, s.o.hint(), s.o.hint())
	} else {
		t0 := time.Now()
		if err := stopCluster(context.WithoutCancel(ctx), state, s.o.name, s.log); err != nil {
			s.log.Error("stop the cluster", "err", err)
		}
		s.log.Info("cluster stopped", "took", since(t0))
		if testErr == nil {
			os.RemoveAll(state)
		} else {
			fmt.Fprintf(os.Stderr, "cluster logs kept in %s; the logs of each failed test's pods and of Swell's in %s\n", filepath.Join(state, "logs"), evidence)
		}
	}
	r.took = time.Since(start)
	return r
}

// randomName is a fresh cluster's name, so that runs never collide.
func randomName() string {
	suffix := make([]byte, 4)
	rand.Read(suffix)
	return "e2e" + hex.EncodeToString(suffix)
}
