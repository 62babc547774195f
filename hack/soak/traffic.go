package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/swell-run/swell/pkg/loadgen"
)

// Sending the plan: each burst is one `swell load --rate` run, a process of
// its own, like a client that comes and goes: whatever the load generator
// holds (connections, goroutines, memory) ends with it, so the harness
// that measures carries nothing of the load and the front door sees its
// clients leave.

// requestTimeout bounds each request of the soak: a wake from zero, a
// queue at a full replica and the longest sleep fit well inside it.
const requestTimeout = 60 * time.Second

// tally adds up the bursts' results. It is safe for concurrent use.
type tally struct {
	mu       sync.Mutex
	runs     int
	sent     uint64
	answered uint64 // got an HTTP response, whatever its code
	ok       uint64 // 2xx
	codes    map[int]uint64
	errors   map[string]uint64 // by message: a status line or a transport error
	// failedRuns are bursts whose `swell load` did not report.
	failedRuns []string
}

func newTally() *tally {
	return &tally{codes: map[int]uint64{}, errors: map[string]uint64{}}
}

func (t *tally) add(r loadgen.Result) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.runs++
	t.sent += r.Requests
	for code, n := range r.StatusCodes {
		t.codes[code] += n
		switch {
		case code == 0: // no answer
		case code >= 200 && code < 300:
			t.ok += n
			t.answered += n
		default:
			t.answered += n
		}
	}
	for _, e := range r.Errors {
		t.errors[e.Error] += e.Count
	}
}

func (t *tally) fail(msg string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failedRuns = append(t.failedRuns, msg)
}

// totals is a copy of a tally at one moment.
type totals struct {
	runs                int
	sent, answered, ok  uint64
	codes               map[int]uint64
	errors              map[string]uint64
	failedRuns          []string
	lost, notOK, failed uint64 // no answer; answered but not 2xx; sent − 2xx
}

func (t *tally) totals() totals {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := totals{runs: t.runs, sent: t.sent, answered: t.answered, ok: t.ok,
		codes: maps.Clone(t.codes), errors: maps.Clone(t.errors), failedRuns: slices.Clone(t.failedRuns)}
	c.lost = c.codes[0]
	c.notOK = c.answered - c.ok
	c.failed = c.sent - c.ok
	return c
}

// sender runs the plan against the front door at url.
type sender struct {
	bin   string // the swell binary
	url   string // http://127.0.0.1:PORT
	svcs  []service
	clk   clock.Clock
	tally *tally
	logf  func(format string, args ...any)
}

// run sends every burst of plan at its time after began, each service's
// bursts in order, and returns once the last has ended. When ctx ends it
// stops waiting for bursts not started and interrupts those running.
func (s *sender) run(ctx context.Context, plan []burst, began time.Time) {
	by := map[int][]burst{}
	for _, b := range plan {
		by[b.service] = append(by[b.service], b)
	}
	var wg sync.WaitGroup
	for _, bursts := range by {
		wg.Go(func() {
			for _, b := range bursts {
				select {
				case <-ctx.Done():
					return
				case <-s.clk.After(began.Add(b.start).Sub(s.clk.Now())):
				}
				s.send(ctx, b)
			}
		})
	}
	wg.Wait()
}

// send runs one burst with `swell load` and adds its report to the tally.
func (s *sender) send(ctx context.Context, b burst) {
	svc := s.svcs[b.service]
	args := []string{"load",
		"--rate", strconv.FormatFloat(b.rate, 'f', -1, 64),
		"--duration", (b.until - b.start).String(),
		"--timeout", requestTimeout.String(),
		"--output", "json", "--progress=false",
		"-H", "Host: " + svc.name + ".localhost",
		s.url + "/" + b.query()}
	cmd := exec.CommandContext(ctx, s.bin, args...)
	// Interrupted, `swell load` waits for the requests in flight and
	// still reports.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = requestTimeout + 10*time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var r loadgen.Result
	if jerr := json.Unmarshal(stdout.Bytes(), &r); jerr != nil || (err != nil && ctx.Err() == nil) {
		msg := fmt.Sprintf("%s: swell %s: %v %v: %s", svc.name, strings.Join(args, " "), err, jerr, strings.TrimSpace(stderr.String()))
		s.tally.fail(msg)
		s.logf("burst failed: %s", msg)
		return
	}
	s.tally.add(r)
}
