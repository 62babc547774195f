package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/swell-run/swell/local"
	"github.com/swell-run/swell/pkg/loadgen"
)

// The local scenario: `swell local --demo` (the activator and autoscaler in
// one process, each replica a queue-proxy in front of one `swell hello`),
// measured from outside as a user sees it. Its cold start is compared with
// the same app started directly, run by run, so that what remains is the
// data plane's share; a trace replay from zero counts what is lost while
// replicas come and go.

// localTrace is the harness's -trace flag: the trace the replay sends.
// Empty means defaultTracePath under the module root.
var localTrace string

// defaultTracePath is where the trace is looked for, relative to the
// module root, when -trace is not given.
var defaultTracePath = filepath.Join("..", "shared", "traces", "azure-llm-2023-conv.csv")

// Targets and settings of the local scenario.
const (
	// targetColdShare: at most this much of a cold start's median is the
	// data plane's (the activator holding the request, the autoscaler's
	// decision, a replica's queue-proxy starting and probing the app).
	targetColdShare = 30 * time.Millisecond
	// coldRuns and coldRunsQuick are how many cold starts are measured.
	coldRuns, coldRunsQuick = 20, 5
	// replayDuration and replayDurationQuick bound the trace replay.
	replayDuration, replayDurationQuick = 60 * time.Second, 15 * time.Second
	// firstResponsePoll is how often the direct app is tried while it
	// starts: the baseline's resolution.
	firstResponsePoll = time.Millisecond
	// zeroPoll is how often the status is read while waiting for zero;
	// zeroTimeout bounds that wait (a stable window, the grace period and
	// a replica's drain take about 10 s with the settings used).
	zeroPoll, zeroTimeout = 100 * time.Millisecond, 60 * time.Second
	// localStopGrace is how long `swell local` may take to drain its
	// replicas and exit after SIGTERM before it counts as hung.
	localStopGrace = 30 * time.Second
)

// coldFlags are the settings of the cold-start series: back to zero soon
// after each request (the stable window's minimum and a short grace).
var coldFlags = []string{"--scale-to-zero-grace-period", "1s", "--window", "6s"}

func localScenario(e *env) ([]section, error) {
	bins, err := e.build(swellPkg)
	if err != nil {
		return nil, err
	}
	swell := bins[swellPkg]
	// The replay runs even when the cold starts failed: what it sees
	// helps explain the failure.
	cold, coldErr := coldStartSection(e, swell)
	var secs []section
	if coldErr == nil {
		secs = append(secs, cold)
	}
	replay, replayErr := replaySection(e, swell)
	if replayErr == nil {
		secs = append(secs, replay)
	}
	return secs, errors.Join(coldErr, replayErr)
}

// localRun is a running `swell local` and its two ports.
type localRun struct {
	proc       *process
	url, admin string // traffic and admin base URLs
}

// startLocal runs `swell local --demo` with flags on free ports and waits
// for its status to answer.
func startLocal(e *env, swell, name string, flags ...string) (*localRun, error) {
	return startLocalCmd(e, swell, name, append([]string{"--demo"}, flags...), nil)
}

// startLocalCmd runs `swell local` with flags on free ports, serving the
// command cmd (after "--") when it is not empty, and waits for its status
// to answer.
func startLocalCmd(e *env, swell, name string, flags, cmd []string) (*localRun, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	adminPort, err := freePort()
	if err != nil {
		return nil, err
	}
	args := append([]string{"local", "--port", strconv.Itoa(port), "--admin-port", strconv.Itoa(adminPort)}, flags...)
	if len(cmd) > 0 {
		args = append(append(args, "--"), cmd...)
	}
	p, _, err := startArgs(name, swell, e.work, args)
	if err != nil {
		return nil, err
	}
	l := &localRun{proc: p, url: "http://127.0.0.1:" + strconv.Itoa(port), admin: "http://127.0.0.1:" + strconv.Itoa(adminPort)}
	if err := p.waitHTTP(l.admin + local.StatusPath); err != nil {
		l.stop()
		return nil, err
	}
	return l, nil
}

// stop sends SIGTERM and waits for a graceful exit; it returns an error
// when `swell local` had to be killed or exited with a failure.
func (l *localRun) stop() error {
	_ = l.proc.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-l.proc.done:
	case <-time.After(localStopGrace):
		_ = l.proc.cmd.Process.Kill()
		<-l.proc.done
		return fmt.Errorf("%s did not exit within %s of SIGTERM and was killed; see %s", l.proc.name, localStopGrace, l.proc.log)
	}
	if l.proc.err != nil {
		return fmt.Errorf("%s exited after SIGTERM: %w; see %s", l.proc.name, l.proc.err, l.proc.log)
	}
	return nil
}

// status returns the one service's status from the admin port.
func (l *localRun) status(client *http.Client) (local.ServiceStatus, error) {
	resp, err := client.Get(l.admin + local.StatusPath)
	if err != nil {
		return local.ServiceStatus{}, fmt.Errorf("status: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return local.ServiceStatus{}, fmt.Errorf("status: %s", resp.Status)
	}
	var st local.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return local.ServiceStatus{}, fmt.Errorf("status: %w", err)
	}
	if len(st.Services) != 1 {
		return local.ServiceStatus{}, fmt.Errorf("status: %d services, want one", len(st.Services))
	}
	return st.Services[0], nil
}

// waitZero polls the status until no replica is desired or listed and
// `swell local` has no child process left, so that the previous replica's
// queue-proxy and app have exited too.
func (l *localRun) waitZero() error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(zeroTimeout)
	tick := time.NewTicker(zeroPoll)
	defer tick.Stop()
	last := "no status yet"
	for {
		st, err := l.status(client)
		if err == nil {
			children, cerr := childPIDs(l.proc.pid())
			if st.Desired == 0 && len(st.Replicas) == 0 && (cerr != nil || len(children) == 0) {
				return nil
			}
			last = fmt.Sprintf("desired %d, ready %d, replicas %d, child processes %v (%q)",
				st.Desired, st.Ready, len(st.Replicas), children, st.Reason)
		} else {
			last = err.Error()
		}
		select {
		case <-l.proc.done:
			return fmt.Errorf("%s exited while waiting for zero replicas (%v); see %s", l.proc.name, l.proc.err, l.proc.log)
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not at zero after %s (last: %s); see %s", l.proc.name, zeroTimeout, last, l.proc.log)
		}
	}
}

// childPIDs lists pid's children. A Go program forks from any of its
// threads, so every thread's list counts.
func childPIDs(pid int) ([]int, error) {
	lists, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	if err != nil || len(lists) == 0 {
		return nil, fmt.Errorf("children of %d: not available", pid)
	}
	var pids []int
	for _, f := range lists {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended
		}
		for _, s := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(s); err == nil {
				pids = append(pids, n)
			}
		}
	}
	return pids, nil
}

// get sends one GET on a new connection and reads the whole response.
func get(client *http.Client, url string) (int, []byte, error) {
	resp, err := client.Get(url)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// newConnClient is a client that opens a new connection per request, as a
// first visitor does, and keeps none to a process that is about to go.
func newConnClient(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
}

// appStartup runs `swell hello` directly and returns the time from just
// before its exec to its first 200 for GET /, trying every
// firstResponsePoll.
func appStartup(e *env, swell string) (time.Duration, error) {
	port, err := freePort()
	if err != nil {
		return 0, err
	}
	url := "http://127.0.0.1:" + strconv.Itoa(port) + "/"
	client := newConnClient(time.Second)
	p, began, err := startArgs("hello-direct", swell, e.work, []string{"hello"}, "PORT="+strconv.Itoa(port), "HOST=127.0.0.1")
	if err != nil {
		return 0, err
	}
	defer p.stop()
	tick := time.NewTicker(firstResponsePoll)
	defer tick.Stop()
	deadline := began.Add(readyTimeout)
	var last error
	for {
		code, _, err := get(client, url)
		if err == nil && code == http.StatusOK {
			return time.Since(began), nil
		}
		if err == nil {
			err = fmt.Errorf("status %d", code)
		}
		last = err
		select {
		case <-p.done:
			return 0, fmt.Errorf("%s exited before answering (%v); see %s", p.name, p.err, p.log)
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%s: %s not answering after %s (last: %v); see %s", p.name, url, readyTimeout, last, p.log)
		}
	}
}

// coldStart times one GET / through l's traffic port; l must be at zero.
func (l *localRun) coldStart() (time.Duration, error) {
	client := newConnClient(readyTimeout)
	began := time.Now()
	code, body, err := get(client, l.url+"/")
	took := time.Since(began)
	if err != nil {
		return 0, fmt.Errorf("cold start: GET %s/ after %s: %w; see %s", l.url, took.Round(time.Millisecond), err, l.proc.log)
	}
	if code != http.StatusOK {
		return 0, fmt.Errorf("cold start: GET %s/ answered %d after %s: %q; see %s",
			l.url, code, took.Round(time.Millisecond), strings.TrimSpace(string(body)), l.proc.log)
	}
	return took, nil
}

func coldStartSection(e *env, swell string) (s section, err error) {
	runs := coldRuns
	if e.opts.quick {
		runs = coldRunsQuick
	}
	l, err := startLocal(e, swell, "swell-local-cold", coldFlags...)
	if err != nil {
		return section{}, err
	}
	defer func() { err = errors.Join(err, l.stop()) }()

	var cold, app []time.Duration
	for i := range runs {
		if err := l.waitZero(); err != nil {
			return section{}, fmt.Errorf("run %d/%d: %w", i+1, runs, err)
		}
		a, err := appStartup(e, swell)
		if err != nil {
			return section{}, fmt.Errorf("run %d/%d: %w", i+1, runs, err)
		}
		c, err := l.coldStart()
		if err != nil {
			return section{}, fmt.Errorf("run %d/%d: %w", i+1, runs, err)
		}
		app, cold = append(app, a), append(cold, c)
		logf("cold start %d/%d: total %-9s app alone %-9s data plane %s", i+1, runs,
			c.Round(10*time.Microsecond), a.Round(10*time.Microsecond), (c - a).Round(10*time.Microsecond))
	}
	return coldReport(cold, app), nil
}

// coldReport turns the paired runs (cold[i] and app[i] taken side by side)
// into the cold-start section.
func coldReport(cold, app []time.Duration) section {
	share := make([]time.Duration, len(cold))
	for i := range cold {
		share[i] = cold[i] - app[i]
	}
	row := func(metric string, xs []time.Duration, target, ok string) []string {
		r := []string{metric}
		for _, p := range []float64{0.5, 0.9, 0.99, 1} {
			r = append(r, ms(percentile(xs, p)))
		}
		return append(r, target, ok)
	}
	p50 := percentile(share, 0.5)
	rows := [][]string{
		row("Cold start through `swell local`, total", cold, "—", ""),
		row("The app's own start-up, started directly", app, "—", ""),
		row("Data plane's share (per run: cold − app)", share,
			fmt.Sprintf("p50 < %s", ms(targetColdShare)), met(p50 < targetColdShare)),
	}
	notes := []string{
		fmt.Sprintf("Medians' difference (median cold − median app): %s.", ms(percentile(cold, 0.5)-percentile(app, 0.5))),
		fmt.Sprintf("%d runs, every cold-start response 200. Percentiles are nearest-rank over the runs, "+
			"so with fewer than 100 runs p99 is the maximum.", len(cold)),
		fmt.Sprintf("The baseline polls every %s, so it reads up to that much late (half on average), "+
			"which the data plane's share loses.", firstResponsePoll),
	}
	return section{
		title: "swell local: cold start, the data plane's share",
		text: "`swell local --demo " + strings.Join(coldFlags, " ") + "` runs for the whole series. Each run, " +
			"interleaved: wait (status read every 100 ms) until no replica is desired or listed and `swell local` " +
			"has no child process left; then (a) start `swell hello` directly with `PORT` set and time from just " +
			"before its exec to its first 200 for `GET /` (connect and GET tried every 1 ms), then stop it; " +
			"(b) time one `GET /` through the traffic port, on a new connection, from sending to the end of the " +
			"response: the activator holds it while the autoscaler scales 0→1 and the replica (a `swell " +
			"queue-proxy` and a `swell hello`) starts. The data plane's share is each run's (b) − (a).",
		header: []string{"metric", "p50", "p90", "p99", "max", "target", "met?"},
		rows:   rows,
		notes:  notes,
	}
}

// percentile is the nearest-rank p-quantile of xs (0 < p ≤ 1); the zero
// value when xs is empty. xs is not modified.
func percentile[T cmp.Ordered](xs []T, p float64) T {
	if len(xs) == 0 {
		var zero T
		return zero
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// ms formats d in milliseconds.
func ms(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

// replicaSample is the demo service's replicas at one second of a replay.
type replicaSample struct {
	at                     time.Duration // since the replay started
	ready, desired, queued int
}

func replaySection(e *env, swell string) (s section, err error) {
	title := "swell local: trace replay from zero, requests lost"
	trace, err := tracePath()
	if err != nil {
		return section{title: title, text: fmt.Sprintf("Skipped: %v.", err)}, nil
	}
	if _, err := os.Stat(trace); err != nil {
		return section{title: title, text: fmt.Sprintf("Skipped: no trace at %s (%v); pass -trace FILE.", trace, err)}, nil
	}
	d := replayDuration
	if e.opts.quick {
		d = replayDurationQuick
	}
	l, err := startLocal(e, swell, "swell-local-replay")
	if err != nil {
		return section{}, err
	}
	defer func() { err = errors.Join(err, l.stop()) }()
	if err := l.waitZero(); err != nil {
		return section{}, err
	}

	args := []string{"load", "--trace", trace, "--duration", d.String(), "--service-time",
		"--output", "json", "--progress=false", l.url + "/"}
	logf("replaying %s for %s", trace, d)
	// A replay ends with its last response, at most a request timeout
	// after the last arrival; anything longer is a hang.
	ctx, cancel := context.WithTimeout(context.Background(), d+loadgen.DefaultTimeout+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, swell, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		return section{}, fmt.Errorf("swell %s: %w", strings.Join(args, " "), err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	client := &http.Client{Timeout: time.Second}
	began := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var samples []replicaSample
	var statusErrs []string
	sample := func() {
		st, err := l.status(client)
		if err != nil {
			statusErrs = append(statusErrs, err.Error())
			return
		}
		samples = append(samples, replicaSample{time.Since(began), st.Ready, st.Desired, st.Queued})
	}
	var runErr error
wait:
	for {
		select {
		case runErr = <-done:
			break wait
		case <-tick.C:
			sample()
		}
	}
	sample() // the replicas when the replay ended
	if runErr != nil {
		return section{}, fmt.Errorf("swell %s: %w\n%s%s", strings.Join(args, " "), runErr, stderr.String(), stdout.String())
	}
	var r loadgen.Result
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		return section{}, fmt.Errorf("swell %s: report: %w", strings.Join(args, " "), err)
	}
	return replayReport(trace, d, r, samples, statusErrs), nil
}

// tracePath is -trace, or defaultTracePath under the module root.
func tracePath() (string, error) {
	if localTrace != "" {
		return localTrace, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("no -trace and no working directory: %w", err)
	}
	root, err := moduleRoot(wd)
	if err != nil {
		return "", fmt.Errorf("no -trace, and %w", err)
	}
	return filepath.Join(root, defaultTracePath), nil
}

// moduleRoot is the nearest directory from dir upwards that holds go.mod.
func moduleRoot(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod in %s or above it", dir)
		}
	}
}

// codeCounts splits a load run's status codes into 2xx, the other codes
// answered, and requests that got no answer at all (code 0).
func codeCounts(codes map[int]uint64) (ok uint64, other map[int]uint64, lost uint64) {
	other = map[int]uint64{}
	for code, n := range codes {
		switch {
		case code == 0:
			lost += n
		case code >= 200 && code < 300:
			ok += n
		default:
			other[code] += n
		}
	}
	return ok, other, lost
}

// formatCodes writes codes as "503: 2, 504: 1", by code; "none" when empty.
func formatCodes(codes map[int]uint64) string {
	if len(codes) == 0 {
		return "none"
	}
	keys := make([]int, 0, len(codes))
	for c := range codes {
		keys = append(keys, c)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, c := range keys {
		parts[i] = fmt.Sprintf("%d: %d", c, codes[c])
	}
	return strings.Join(parts, ", ")
}

// replicaChanges keeps the samples whose ready, desired or queued differ
// from the previous one's, and the last: the replicas over time, short.
func replicaChanges(samples []replicaSample) []replicaSample {
	var out []replicaSample
	for i, s := range samples {
		if i == 0 || i == len(samples)-1 {
			out = append(out, s)
			continue
		}
		prev := samples[i-1]
		if s.ready != prev.ready || s.desired != prev.desired || s.queued != prev.queued {
			out = append(out, s)
		}
	}
	return out
}

func replayReport(trace string, d time.Duration, r loadgen.Result, samples []replicaSample, statusErrs []string) section {
	ok, other, lost := codeCounts(r.StatusCodes)
	var nonOK uint64
	for _, n := range other {
		nonOK += n
	}
	maxReady, maxDesired := 0, 0
	for _, s := range samples {
		maxReady, maxDesired = max(maxReady, s.ready), max(maxDesired, s.desired)
	}
	final := "—"
	if len(samples) > 0 {
		last := samples[len(samples)-1]
		final = fmt.Sprintf("%d desired, %d ready", last.desired, last.ready)
	}
	rows := [][]string{
		{"Requests sent", fmt.Sprintf("%d of %d planned", r.Requests, r.Planned), "—", ""},
		{"2xx", strconv.FormatUint(ok, 10), "—", ""},
		{"Non-2xx answers, by code", formatCodes(other), "none", met(nonOK == 0)},
		{"Transport errors (lost: no answer)", strconv.FormatUint(lost, 10), "0", met(lost == 0)},
		{"Latency p50 / p99 / max", fmt.Sprintf("%s / %s / %s", ms(r.Latency.P50), ms(r.Latency.P99), ms(r.Latency.Max)), "—", ""},
		{"Replicas: most ready, most desired", fmt.Sprintf("%d, %d", maxReady, maxDesired), "—", ""},
		{"Replicas when the replay ended", final, "—", ""},
	}
	notes := []string{
		fmt.Sprintf("Achieved rate %.2f/s (the trace's %.2f/s); sending took %s, the last response %s more.",
			r.Rate, r.TargetRate, r.Duration.Round(time.Millisecond), r.Wait.Round(time.Millisecond)),
	}
	for _, e := range r.Errors {
		notes = append(notes, fmt.Sprintf("%d × %s", e.Count, e.Error))
	}
	if len(statusErrs) > 0 {
		notes = append(notes, fmt.Sprintf("%d status reads failed, first: %s", len(statusErrs), statusErrs[0]))
	}
	var code strings.Builder
	fmt.Fprintln(&code, "  time  ready  desired  queued")
	for _, s := range replicaChanges(samples) {
		fmt.Fprintf(&code, "%5.0fs  %5d  %7d  %6d\n", s.at.Seconds(), s.ready, s.desired, s.queued)
	}
	return section{
		title: "swell local: trace replay from zero, requests lost",
		text: fmt.Sprintf("A fresh `swell local --demo` (default settings, at zero replicas) gets "+
			"`swell load --trace %s --duration %s --service-time` at its traffic port: the trace's arrivals, "+
			"each request asking the app to work its service time (5 ms + 1 ms per generated token). "+
			"The status is read every second meanwhile; the listing below shows the seconds where the "+
			"replicas or the activator's queue changed.", filepath.Base(trace), d),
		header: []string{"metric", "value", "target", "met?"},
		rows:   rows,
		notes:  notes,
		code:   code.String(),
	}
}
