package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/swell-run/swell/pkg/loadgen"
)

// load is one load run's shape, sent with `swell load` (pkg/loadgen).
type load struct {
	// Rate, when set, is an open loop at this many requests a second;
	// otherwise Workers closed-loop workers, each on its own connection.
	Rate     float64
	Workers  int
	Duration time.Duration
	// Headers are sent with every request, each "Name: value" (swell
	// load -H); "Host: name" sets the Host a proxy routes by.
	Headers []string
}

// loadRun is what a load run saw.
type loadRun struct {
	loadgen.Result
	// CPU is the load generator's own CPU time (user + system).
	CPU time.Duration
}

// sendLoad runs l against url in a `swell load` child process and returns
// its report. A child rather than loadgen.Run in the harness: its
// connections close when it exits, so no run leaves idle connections
// (and their memory) in the process under test for the next one, and
// its CPU time is exactly its own.
func sendLoad(swell, url string, l load) (loadRun, error) {
	args := []string{"load", "--output", "json", "--progress=false", "--duration", l.Duration.String()}
	if l.Rate > 0 {
		args = append(args, "--rate", strconv.FormatFloat(l.Rate, 'f', -1, 64))
	} else {
		w := strconv.Itoa(l.Workers)
		args = append(args, "--workers", w, "--max-connections", w)
	}
	for _, h := range l.Headers {
		args = append(args, "-H", h)
	}
	args = append(args, url)
	cmd := exec.Command(swell, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return loadRun{}, fmt.Errorf("swell %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var r loadRun
	if err := json.Unmarshal(stdout.Bytes(), &r.Result); err != nil {
		return loadRun{}, fmt.Errorf("swell %s: report: %w", strings.Join(args, " "), err)
	}
	r.CPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return r, nil
}

// failed is the number of requests that got no 2xx or 3xx answer.
func (r loadRun) failed() uint64 { return r.Requests - r.Successes }
