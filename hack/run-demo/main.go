// Command run-demo runs the queue-proxy in front of examples/hello on
// loopback — the smallest Swell data plane a person can poke at with curl.
// `swell local` supersedes it once the activator and autoscaler exist.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
)

func main() {
	appPort := flag.Int("app-port", 8080, "port of the example app")
	servePort := flag.Int("port", 8012, "port of the queue-proxy (send traffic here)")
	cc := flag.Int("container-concurrency", 0, "containerConcurrency enforced by the queue-proxy (0 = unlimited)")
	flag.Parse()
	if err := run(*appPort, *servePort, *cc); err != nil {
		fmt.Fprintln(os.Stderr, "run-demo:", err)
		os.Exit(1)
	}
}

func run(appPort, servePort, cc int) error {
	dir, err := os.MkdirTemp("", "swell-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	for _, pkg := range []string{"./examples/hello", "./cmd/queue-proxy"} {
		build := exec.Command("go", "build", "-o", dir, pkg)
		build.Stdout, build.Stderr = os.Stdout, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("build %s: %w", pkg, err)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var wg sync.WaitGroup
	start := func(name string, env ...string) (*exec.Cmd, error) {
		cmd := exec.Command(filepath.Join(dir, name))
		cmd.Env = append(os.Environ(), env...)
		// Own process group: a Ctrl-C at the terminal reaches run-demo alone,
		// which then stops the children in order.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		cmd.Stderr = cmd.Stdout
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("start %s: %w", name, err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); prefix(name, out) }()
		return cmd, nil
	}
	app, err := start("hello", "PORT="+strconv.Itoa(appPort), "HOST=127.0.0.1")
	if err != nil {
		return err
	}
	qp, err := start("queue-proxy",
		"QUEUE_SERVING_PORT="+strconv.Itoa(servePort),
		"USER_PORT="+strconv.Itoa(appPort),
		"CONTAINER_CONCURRENCY="+strconv.Itoa(cc),
		"DRAIN_QUIET_PERIOD=100ms")
	if err != nil {
		_ = app.Process.Kill()
		return err
	}
	fmt.Printf("swell demo: send requests to http://127.0.0.1:%d/ (Ctrl-C to stop)\n", servePort)

	exited := make(chan string, 2)
	go func() { _ = qp.Wait(); exited <- "queue-proxy" }()
	go func() { _ = app.Wait(); exited <- "hello" }()
	qpRunning := true
	select {
	case <-ctx.Done():
	case name := <-exited:
		fmt.Fprintf(os.Stderr, "run-demo: %s exited\n", name)
		qpRunning = name != "queue-proxy"
	}
	// Stop in the order a pod stops: the proxy drains first, then the app.
	if qpRunning {
		_ = qp.Process.Signal(syscall.SIGTERM)
		for name := range exited {
			if name == "queue-proxy" {
				break
			}
		}
	}
	_ = app.Process.Signal(syscall.SIGTERM)
	wg.Wait()
	return nil
}

func prefix(name string, r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fmt.Printf("%-12s| %s\n", name, sc.Text())
	}
}
