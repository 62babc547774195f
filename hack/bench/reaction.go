package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/swell-run/swell/local"
)

// The reaction scenario: how soon `swell local` decides to scale out after
// a step in the app's CPU or in its gauge, and how soon the replicas it
// asked for are ready, beside the cadence the Kubernetes HPA and KEDA
// document for the same metrics. Each trial is a fresh `swell local`
// serving `swell hello` with one replica running and idle; at t0 the step
// starts, and the status is read every reactionPoll until the decision
// and its replicas are seen.

// Settings of the reaction scenario.
const (
	// reactionTrials and reactionTrialsQuick are the trials per metric.
	reactionTrials, reactionTrialsQuick = 5, 2
	// reactionPoll is how often the status is read after the step: the
	// resolution of every measured figure.
	reactionPoll = 50 * time.Millisecond
	// reactionIdle (reactionIdleQuick) is how long the one replica stays
	// idle before the step: longer than the panic window (6 s with the
	// default 60 s stable window), so that the window the decision reads
	// holds only idle seconds.
	reactionIdle, reactionIdleQuick = 20 * time.Second, 10 * time.Second
	// reactionObserve is how long after the step the most desired
	// replicas are watched; reactionTimeout bounds a trial's wait for its
	// decision and its replicas.
	reactionObserve, reactionTimeout = 15 * time.Second, 60 * time.Second
	// reactionTick is swell local's default decision tick.
	reactionTick = 2 * time.Second
	// reactionNeed is the fewest replicas each step needs at its target.
	reactionNeed = 3

	// The cpu step: reactionCPURate requests a second, each burning
	// reactionCPUWork of CPU in the app: 0.4 cores, four pods' worth at a
	// target of reactionCPUTarget per pod. swell local's default target,
	// 70% of one core, would need 2.1 cores for three pods: more than the
	// machine has.
	reactionCPURate   = 4
	reactionCPUWork   = 100 * time.Millisecond
	reactionCPUTarget = "100m"
	reactionCPUPods   = 4

	// The concurrency step: an open loop of reactionConcRate requests a
	// second, each held reactionConcSleep by the app: 8 in flight, four
	// pods' worth at a target of reactionConcTarget per pod. The requests
	// hold the app without burning CPU, so the step is what the queue-
	// proxies count, whatever else the machine does.
	reactionConcRate   = 40
	reactionConcSleep  = 200 * time.Millisecond
	reactionConcTarget = "2"
	reactionConcPods   = 4

	// The gauge step: one POST /jobs queues reactionJobs jobs of
	// reactionJobWork, done one at a time, so hello_jobs_waiting jumps to
	// reactionJobs and stays there for the first job's reactionJobWork:
	// four pods' worth at a target of reactionGaugeTarget per pod.
	reactionJobs        = 8
	reactionJobWork     = 10 * time.Second
	reactionGaugeTarget = "2"
	reactionGaugePods   = 4

	// The documented cadence of the Kubernetes autoscalers compared with.
	// hpaResolution: metrics-server's --metric-resolution as its released
	// manifests set it; hpaSync: kube-controller-manager's
	// --horizontal-pod-autoscaler-sync-period, default; kedaPolling: a
	// KEDA ScaledObject's pollingInterval, default.
	hpaResolution = 15 * time.Second
	hpaSync       = 15 * time.Second
	kedaPolling   = 30 * time.Second
)

// reactionMetric is one metric the scenario steps.
type reactionMetric struct {
	name string
	// flags are swell local's settings for it, besides the ports.
	flags []string
	// step says what the step is, for the report.
	step string
	// pods is the pods' worth the step asks for at the target.
	pods int
	// apply starts the step on l and returns its start, t0, and a
	// function that ends it and returns the requests sent and those not
	// answered as expected.
	apply func(l *localRun) (t0 time.Time, finish func() (sent, bad int64), err error)
}

// reactionMetrics are the metrics stepped, in the report's order. Beside
// what the metric needs, the flags set only the one replica kept running
// (min-scale), the name the events carry, and no state kept between runs
// (so that no trial starts knowing another); the rest is swell local's
// defaults.
func reactionMetrics() []reactionMetric {
	common := []string{"--name", "hello", "--min-scale", "1", "--state-dir", ""}
	return []reactionMetric{
		{
			name: "concurrency",
			flags: append(slices.Clone(common), "--target", reactionConcTarget,
				"--target-utilization-percentage", "100"),
			step: fmt.Sprintf("an open loop of %d `GET /?sleep=%s` a second: %.0f requests in flight, %d pods' worth at %s",
				reactionConcRate, reactionConcSleep, reactionConcRate*reactionConcSleep.Seconds(), reactionConcPods, reactionConcTarget),
			pods: reactionConcPods,
			apply: func(l *localRun) (time.Time, func() (int64, int64), error) {
				o, t0 := startOpenLoop(l.url+"/?sleep="+reactionConcSleep.String(), reactionConcRate)
				return t0, o.finish, nil
			},
		},
		{
			name:  "cpu",
			flags: append(slices.Clone(common), "--metric", "cpu", "--cpu-target", reactionCPUTarget),
			step: fmt.Sprintf("an open loop of %d `GET /?cpu=%s` a second: %.1f cores, %d pods' worth at %s",
				reactionCPURate, reactionCPUWork, reactionCPURate*reactionCPUWork.Seconds(), reactionCPUPods, reactionCPUTarget),
			pods: reactionCPUPods,
			apply: func(l *localRun) (time.Time, func() (int64, int64), error) {
				o, t0 := startOpenLoop(l.url+"/?cpu="+reactionCPUWork.String(), reactionCPURate)
				return t0, o.finish, nil
			},
		},
		{
			name: "gauge",
			flags: append(slices.Clone(common), "--metric", "gauge", "--gauge", "hello_jobs_waiting",
				"--gauge-target", reactionGaugeTarget),
			step: fmt.Sprintf("one `POST /jobs?work=%s&count=%d`: hello_jobs_waiting %d, %d pods' worth at %s",
				reactionJobWork, reactionJobs, reactionJobs, reactionGaugePods, reactionGaugeTarget),
			pods:  reactionGaugePods,
			apply: postJobs,
		},
	}
}

// postJobs is the gauge step: one POST /jobs, answered 202.
func postJobs(l *localRun) (time.Time, func() (int64, int64), error) {
	url := fmt.Sprintf("%s/jobs?work=%s&count=%d", l.url, reactionJobWork, reactionJobs)
	client := newConnClient(10 * time.Second)
	t0 := time.Now()
	resp, err := client.Post(url, "", nil)
	if err != nil {
		return t0, nil, fmt.Errorf("POST %s: %w", url, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return t0, nil, fmt.Errorf("POST %s: %d %q, want 202", url, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return t0, func() (int64, int64) { return 1, 0 }, nil
}

// openLoop sends GET url at a fixed rate, each request on its own
// goroutine so that a slow answer does not slow the rate, until finished.
type openLoop struct {
	transport *http.Transport
	stop      chan struct{}
	done      chan struct{}
	sent, bad atomic.Int64
}

// startOpenLoop sends the first request at once and one every 1/rate
// seconds after it; it returns the moment just before the first.
func startOpenLoop(url string, rate float64) (*openLoop, time.Time) {
	o := &openLoop{transport: &http.Transport{}, stop: make(chan struct{}), done: make(chan struct{})}
	client := &http.Client{Timeout: reactionTimeout, Transport: o.transport}
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	t0 := time.Now()
	go func() {
		defer close(o.done)
		defer tick.Stop()
		var wg sync.WaitGroup
		defer wg.Wait()
		for {
			wg.Go(func() {
				o.sent.Add(1)
				code, _, err := get(client, url)
				if err != nil || code != http.StatusOK {
					o.bad.Add(1)
				}
			})
			select {
			case <-o.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return o, t0
}

// finish stops sending, waits for the last answer and returns the
// requests sent and those not answered 200.
func (o *openLoop) finish() (sent, bad int64) {
	close(o.stop)
	<-o.done
	o.transport.CloseIdleConnections()
	return o.sent.Load(), o.bad.Load()
}

// reactionTrial is what one step showed, each moment measured from t0; a
// zero duration is a moment that did not come within reactionTimeout.
type reactionTrial struct {
	// decided is when the status first showed more than one replica
	// desired, and first how many.
	decided time.Duration
	first   int
	// event is the first scale-up event's own timestamp, and reason its
	// text: the decision without the status poll's delay.
	event  time.Duration
	reason string
	// ready is when first replicas were ready; three when reactionNeed
	// were.
	ready, three time.Duration
	// most is the most replicas desired within reactionObserve.
	most int
	// sent and bad count the step's requests and those that failed.
	sent, bad int64
}

// observe takes in one status read at elapsed time at after the step
// began at t0.
func (r *reactionTrial) observe(st local.ServiceStatus, at time.Duration, t0 time.Time) {
	if r.decided == 0 && st.Desired > 1 {
		r.decided, r.first = at, st.Desired
	}
	if r.decided > 0 && r.ready == 0 && st.Ready >= r.first {
		r.ready = at
	}
	if r.three == 0 && st.Ready >= reactionNeed {
		r.three = at
	}
	if at <= reactionObserve {
		r.most = max(r.most, st.Desired)
	}
	if r.reason == "" {
		if ev, ok := firstScaleUp(st.Events, t0); ok {
			r.event, r.reason = ev.Time.Sub(t0), ev.Text
		}
	}
}

// complete says whether the trial has seen all it waits for at at.
func (r *reactionTrial) complete(at time.Duration) bool {
	return at >= reactionObserve && r.ready > 0 && r.three > 0
}

// firstScaleUp is the first event at or after t0 that scales up, as
// `swell local` logs it: "hello: scale 1→2 (reason)".
func firstScaleUp(events []local.Event, t0 time.Time) (local.Event, bool) {
	for _, ev := range events {
		if ev.Time.Before(t0) {
			continue
		}
		if from, to, ok := parseScale(ev.Text); ok && to > from {
			return ev, true
		}
	}
	return local.Event{}, false
}

// parseScale reads the replica counts of a scale event's text.
func parseScale(text string) (from, to int, ok bool) {
	_, rest, found := strings.Cut(text, ": scale ")
	if !found {
		return 0, 0, false
	}
	a, b, found := strings.Cut(rest, "→")
	if !found {
		return 0, 0, false
	}
	b, _, _ = strings.Cut(b, " ")
	from, errA := strconv.Atoi(a)
	to, errB := strconv.Atoi(b)
	if errA != nil || errB != nil {
		return 0, 0, false
	}
	return from, to, true
}

// waitIdle waits until the service runs one ready replica, wants no
// more and is not in panic, then for idle and a random part of a tick
// more, and checks it still is.
func (l *localRun) waitIdle(client *http.Client, idle time.Duration) error {
	isIdle := func(st local.ServiceStatus) bool {
		return st.Ready == 1 && st.Desired == 1 && len(st.Replicas) == 1 && !st.PanicMode
	}
	describe := func(st local.ServiceStatus) string {
		return fmt.Sprintf("ready %d, desired %d, replicas %d, panic %v (%q)", st.Ready, st.Desired, len(st.Replicas), st.PanicMode, st.Reason)
	}
	deadline := time.Now().Add(readyTimeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	last := "no status yet"
	for {
		st, err := l.status(client)
		if err == nil && isIdle(st) {
			break
		}
		if err != nil {
			last = err.Error()
		} else {
			last = describe(st)
		}
		select {
		case <-l.proc.done:
			return fmt.Errorf("%s exited before its replica was ready (%v); see %s", l.proc.name, l.proc.err, l.proc.log)
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: no idle ready replica after %s (last: %s); see %s", l.proc.name, readyTimeout, last, l.proc.log)
		}
	}
	// A random part of a decision tick more, so that the step falls at
	// any phase of the ticks and of the once-a-second measurements.
	time.Sleep(idle + rand.N(reactionTick))
	st, err := l.status(client)
	if err != nil {
		return err
	}
	if !isIdle(st) {
		return fmt.Errorf("%s: not idle after %s without load: %s; see %s", l.proc.name, idle, describe(st), l.proc.log)
	}
	return nil
}

// observeStep reads the status every reactionPoll from t0 until the trial
// is complete or reactionTimeout has passed.
func (l *localRun) observeStep(client *http.Client, t0 time.Time) (reactionTrial, error) {
	var r reactionTrial
	tick := time.NewTicker(reactionPoll)
	defer tick.Stop()
	for {
		st, err := l.status(client)
		at := time.Since(t0)
		if err == nil {
			r.observe(st, at, t0)
		}
		if r.complete(at) || at >= reactionTimeout {
			return r, nil
		}
		select {
		case <-l.proc.done:
			return r, fmt.Errorf("%s exited during the step (%v); see %s", l.proc.name, l.proc.err, l.proc.log)
		case <-tick.C:
		}
	}
}

// runReactionTrial runs one trial of m on a fresh `swell local`.
func runReactionTrial(e *env, swell string, m reactionMetric, idle time.Duration, n int) (t reactionTrial, err error) {
	l, err := startLocalCmd(e, swell, fmt.Sprintf("swell-local-reaction-%s-%d", m.name, n), m.flags, []string{swell, "hello"})
	if err != nil {
		return t, err
	}
	defer func() { err = errors.Join(err, l.stop()) }()
	client := &http.Client{Timeout: time.Second}
	if err := l.waitIdle(client, idle); err != nil {
		return t, err
	}
	t0, finish, err := m.apply(l)
	if err != nil {
		return t, err
	}
	t, err = l.observeStep(client, t0)
	t.sent, t.bad = finish()
	return t, err
}

// reactionRun is one metric's trials.
type reactionRun struct {
	metric reactionMetric
	trials []reactionTrial
}

func reactionScenario(e *env) ([]section, error) {
	bins, err := e.build(swellPkg)
	if err != nil {
		return nil, err
	}
	swell := bins[swellPkg]
	trials, idle := reactionTrials, reactionIdle
	if e.opts.quick {
		trials, idle = reactionTrialsQuick, reactionIdleQuick
	}
	metrics := reactionMetrics()
	runs := make([]reactionRun, len(metrics))
	// The metrics take turns, trial by trial, so that a busy spell of the
	// machine falls on both.
	for i := range trials {
		for mi, m := range metrics {
			runs[mi].metric = m
			t, err := runReactionTrial(e, swell, m, idle, i+1)
			if err != nil {
				return nil, fmt.Errorf("%s trial %d/%d: %w", m.name, i+1, trials, err)
			}
			runs[mi].trials = append(runs[mi].trials, t)
			logf("reaction %-11s %d/%d: decided %s (event %s, %d desired), ready %s, %d ready %s, most desired %d",
				m.name, i+1, trials, seconds(t.decided), seconds(t.event), t.first, seconds(t.ready),
				reactionNeed, seconds(t.three), t.most)
		}
	}
	return []section{reactionReport(runs, idle)}, nil
}

// seconds formats a moment of a trial; 0 is one that did not come.
func seconds(d time.Duration) string {
	if d == 0 {
		return fmt.Sprintf("> %.0f s", reactionTimeout.Seconds())
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// spread is the min, p50 (nearest rank) and max of a moment over trials,
// a trial where it did not come counting as later than any that did.
func spread(xs []time.Duration) (lo, mid, hi string) {
	if len(xs) == 0 {
		return "—", "—", "—"
	}
	never := time.Duration(math.MaxInt64)
	ys := make([]time.Duration, len(xs))
	for i, x := range xs {
		ys[i] = cmp.Or(x, never)
	}
	f := func(d time.Duration) string {
		if d == never {
			return seconds(0)
		}
		return seconds(d)
	}
	return f(slices.Min(ys)), f(percentile(ys, 0.5)), f(slices.Max(ys))
}

// shellQuote quotes an argument for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n'\"\\$`&|;<>()*?[]{}!#~") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// localCommandLine is the command a trial of m runs, the binary shown as
// swell and the free ports chosen per trial as PORT and ADMIN.
func localCommandLine(m reactionMetric) string {
	args := []string{"swell", "local", "--port", "PORT", "--admin-port", "ADMIN"}
	for _, f := range m.flags {
		args = append(args, shellQuote(f))
	}
	return strings.Join(append(args, "--", "swell", "hello"), " ")
}

// reactionReport turns the trials into the scenario's section.
func reactionReport(runs []reactionRun, idle time.Duration) section {
	var rows [][]string
	row := func(figure string, xs []time.Duration, how string) {
		lo, mid, hi := spread(xs)
		rows = append(rows, []string{figure, lo, mid, hi, how})
	}
	pick := func(ts []reactionTrial, f func(reactionTrial) time.Duration) []time.Duration {
		out := make([]time.Duration, len(ts))
		for i, t := range ts {
			out[i] = f(t)
		}
		return out
	}
	var reasons []string
	var failed []string
	var code strings.Builder
	fmt.Fprintf(&code, "%-11s %5s  %9s  %9s  %5s  %9s  %9s  %4s  %s\n",
		"metric", "trial", "decided", "event", "first", "ready", strconv.Itoa(reactionNeed)+" ready", "most", "first scale event")
	for _, run := range runs {
		ts, m := run.trials, run.metric
		n := len(ts)
		row(fmt.Sprintf("Swell local, %s: decided (status shows desired > 1)", m.name),
			pick(ts, func(t reactionTrial) time.Duration { return t.decided }),
			fmt.Sprintf("measured, %d trials; status read every %d ms", n, reactionPoll.Milliseconds()))
		row(fmt.Sprintf("Swell local, %s: the scale-up event's own time", m.name),
			pick(ts, func(t reactionTrial) time.Duration { return t.event }),
			"measured: the autoscaler's timestamp of its first scale up, no poll")
		row(fmt.Sprintf("Swell local, %s: the first decision's replicas ready", m.name),
			pick(ts, func(t reactionTrial) time.Duration { return t.ready }),
			fmt.Sprintf("measured; first decisions asked for %s", intSpread(ts, func(t reactionTrial) int { return t.first })))
		row(fmt.Sprintf("Swell local, %s: %d replicas ready", m.name, reactionNeed),
			pick(ts, func(t reactionTrial) time.Duration { return t.three }),
			fmt.Sprintf("measured; the step needs %d", m.pods))
		most := make([]int, n)
		for i, t := range ts {
			most[i] = t.most
		}
		if n > 0 {
			rows = append(rows, []string{fmt.Sprintf("Swell local, %s: most replicas desired in the first %.0f s", m.name, reactionObserve.Seconds()),
				strconv.Itoa(slices.Min(most)), strconv.Itoa(percentile(most, 0.5)), strconv.Itoa(slices.Max(most)),
				fmt.Sprintf("measured; the step needs %d", m.pods)})
		}
		for i, t := range ts {
			if t.reason != "" && !slices.Contains(reasons, t.reason) {
				reasons = append(reasons, t.reason)
			}
			if t.bad > 0 {
				failed = append(failed, fmt.Sprintf("%s trial %d: %d of %d", m.name, i+1, t.bad, t.sent))
			}
			fmt.Fprintf(&code, "%-11s %5d  %9s  %9s  %5d  %9s  %9s  %4d  %s\n",
				m.name, i+1, seconds(t.decided), seconds(t.event), t.first, seconds(t.ready), seconds(t.three), t.most, t.reason)
		}
	}
	dur := func(d time.Duration) string { return fmt.Sprintf("%.0f s", d.Seconds()) }
	rows = append(rows,
		[]string{"Kubernetes HPA, cpu: decided (documented)", dur(hpaResolution), "—", dur(hpaResolution + hpaSync),
			fmt.Sprintf("bound: metrics-server reads the kubelets every `--metric-resolution` (%s in its released manifests), "+
				"the HPA controller decides every `--horizontal-pod-autoscaler-sync-period` (default %s): "+
				"one resolution to show the step, up to one sync more to act on it", dur(hpaResolution), dur(hpaSync))},
		[]string{"KEDA, external gauge: decided (documented)", "0 s", "—", dur(kedaPolling),
			fmt.Sprintf("bound: KEDA checks each trigger every `pollingInterval` (default %s)", dur(kedaPolling))},
	)

	var commands []string
	for _, run := range runs {
		commands = append(commands, fmt.Sprintf("%s: `%s`; the step: %s.", run.metric.name, localCommandLine(run.metric), run.metric.step))
	}
	notes := append(commands,
		"Every figure is from the step's start, t0: just before the first request of the concurrency and cpu steps, just before the POST of the gauge step. "+
			fmt.Sprintf("Moments read from the status are late by up to one poll (%d ms) plus the status request; "+
				"the event's own time is not.", reactionPoll.Milliseconds()),
		"Percentiles are nearest-rank over the trials; a moment that did not come within "+dur(reactionTimeout)+" counts as later than any.",
		"First scale events seen: "+strings.Join(quoteAll(reasons), "; ")+".",
	)
	if len(failed) > 0 {
		notes = append(notes, "Step requests not answered 200: "+strings.Join(failed, ", ")+".")
	}
	return section{
		title: "Reaction: from a load step to the scale decision",
		text: fmt.Sprintf("Each trial starts a fresh `swell local` serving `swell hello` with one replica "+
			"(`--min-scale 1`), waits until that replica is ready, nothing more is desired and the autoscaler is "+
			"not in panic, leaves it idle for %s and a random 0–%s more (so that the step falls at any phase "+
			"of the decision tick and of the once-a-second measurements), then starts a step that needs at least "+
			"%d replicas at the target and reads the status every %d ms for %s and until the replicas are ready. "+
			"The metrics take turns, trial by trial. Everything not on the command lines below is swell local's "+
			"default: a 60 s stable window and so a 6 s panic window (10%%, whole seconds), a decision every %s, "+
			"the queue-proxy measuring the app once a second and the autoscaler collecting once a second.",
			dur(idle), dur(reactionTick), reactionNeed, reactionPoll.Milliseconds(), dur(reactionObserve), dur(reactionTick)),
		header: []string{"figure", "min", "p50", "max", "how"},
		rows:   rows,
		notes:  notes,
		code:   code.String(),
	}
}

// intSpread formats the min and max of f over the trials as "a–b", or
// "a" when they are equal.
func intSpread(ts []reactionTrial, f func(reactionTrial) int) string {
	if len(ts) == 0 {
		return "—"
	}
	xs := make([]int, len(ts))
	for i, t := range ts {
		xs[i] = f(t)
	}
	lo, hi := slices.Min(xs), slices.Max(xs)
	if lo == hi {
		return strconv.Itoa(lo)
	}
	return fmt.Sprintf("%d–%d", lo, hi)
}

// quoteAll wraps each string in backquotes for markdown.
func quoteAll(xs []string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = "`" + x + "`"
	}
	return out
}
