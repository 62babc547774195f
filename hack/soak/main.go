// Command soak runs `swell local` for a long while with many services
// scaling up, down, to zero and back, and shows whether Swell's processes
// keep what they should let go: it samples every Swell process once a
// minute (resident memory, Go heap, goroutines, open files), counts every
// request, and writes the samples as CSV, a chart as SVG and a Markdown
// summary with a verdict. docs/reliability.md explains the run and holds
// the latest results.
//
//	go run ./hack/soak                               # 30 minutes (make soak)
//	go run ./hack/soak -duration 20s -interval 2s    # a smoke run
//
// The traffic is `swell load` runs on loopback, a few hundred requests a
// second at most, in rounds that each end quiet so that the processes are
// sampled at rest too; the second half of the run sends the first half's
// bursts again, so that the two halves can be compared.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/utils/clock"

	"github.com/swell-run/swell/local"
)

// swellPkg is built once and runs everything: `swell local`, its
// queue-proxies and apps (`swell queue-proxy`, `swell hello`) and the load
// (`swell load`).
const swellPkg = "github.com/swell-run/swell/cmd/swell"

// Bounds of the waits around the run.
const (
	startTimeout = time.Minute // `swell local` up, pinned replicas ready
	stopTimeout  = time.Minute // `swell local` gone after SIGTERM
	poll         = 200 * time.Millisecond
	scanEvery    = time.Second // the watcher's scan of the children
)

type options struct {
	duration, interval time.Duration
	services, pinned   int
	maxRate            float64
	seed               uint64
	out                string
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	var o options
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.DurationVar(&o.duration, "duration", 30*time.Minute, "how long the traffic runs")
	fs.DurationVar(&o.interval, "interval", time.Minute, "time between samples")
	fs.IntVar(&o.services, "services", 30, "services `swell local` runs")
	fs.IntVar(&o.pinned, "pinned", 3, "of them, services kept at exactly one replica, whose queue-proxy lives the whole run")
	fs.Float64Var(&o.maxRate, "max-rate", 200, "the most requests a second the bursts add up to at any moment")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the traffic plan")
	fs.StringVar(&o.out, "out", filepath.Join("bin", "soak"), "`directory` for the samples, chart, summary and logs")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(os.Stderr, "soak: %v\n", err)
		return 2
	}
	if err := o.check(); err != nil {
		fmt.Fprintf(os.Stderr, "soak: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ok, err := soak(ctx, o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "soak: %v\n", err)
		return 1
	}
	if !ok {
		return 1
	}
	return 0
}

func (o options) check() error {
	var errs []error
	if o.duration < 10*time.Second {
		errs = append(errs, fmt.Errorf("-duration %s: accepted is 10s or more", o.duration))
	}
	if o.interval <= 0 || o.interval > o.duration/2 {
		errs = append(errs, fmt.Errorf("-interval %s: accepted is a positive duration at most half of -duration, so that each half holds samples", o.interval))
	}
	if o.services < 1 || o.services > 200 {
		errs = append(errs, fmt.Errorf("-services %d: accepted is 1 to 200", o.services))
	}
	if o.pinned < 0 || o.pinned > o.services {
		errs = append(errs, fmt.Errorf("-pinned %d: accepted is 0 to -services (%d)", o.pinned, o.services))
	}
	if !(o.maxRate >= 1 && o.maxRate <= 1000) {
		errs = append(errs, fmt.Errorf("-max-rate %g: accepted is 1 to 1000 requests a second", o.maxRate))
	}
	return errors.Join(errs...)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "soak: %s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// soak runs the whole soak and writes its report; ok is the verdict: flat,
// every request answered 2xx, a clean stop.
func soak(ctx context.Context, o options) (ok bool, err error) {
	out, err := filepath.Abs(o.out)
	if err != nil {
		return false, err
	}
	if err := os.MkdirAll(filepath.Join(out, "bin"), 0o755); err != nil {
		return false, err
	}
	bin := filepath.Join(out, "bin", "swell")
	logf("building %s into %s", swellPkg, bin)
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, swellPkg)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		return false, fmt.Errorf("go build %s: %w\n%s", swellPkg, err, b)
	}

	svcs := makeServices(o.services, o.pinned)
	plan := makePlan(svcs, o.duration, o.seed, o.maxRate)
	cfgPath := filepath.Join(out, "swell.yaml")
	if err := writeFile(cfgPath, func(w io.Writer) error { return writeConfig(w, svcs, bin) }); err != nil {
		return false, err
	}
	if err := writeFile(filepath.Join(out, "plan.csv"), func(w io.Writer) error { return writePlan(w, svcs, plan) }); err != nil {
		return false, err
	}
	ps := statsOf(plan, o.duration)
	round, quiet := rounds(o.duration)
	logf("%d services (%d pinned), %d bursts in rounds of %s ending %s quiet, %.0f requests planned, %.1f/s on average, %.0f/s at most",
		len(svcs), o.pinned, ps.bursts, round, quiet, ps.requests, ps.mean, ps.peak)

	l, err := startLocal(bin, cfgPath, filepath.Join(out, "swell-local.log"))
	if err != nil {
		return false, err
	}
	defer l.kill()
	client := &http.Client{Timeout: 5 * time.Second}
	if err := l.waitStarted(client, svcs); err != nil {
		return false, err
	}
	logf("swell local (pid %d) serving at %s, admin %s", l.pid(), l.url, l.admin)

	fsys := procFS{root: "/proc"}
	w := newWatcher(fsys, bin, l.pid())
	_ = w.scan()
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	go w.run(watchCtx, scanEvery)

	m := measurer{fs: fsys, client: client}
	tl := newTally()
	snap := func(longLived map[int]bool) *snapshot {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return &snapshot{readings: m.readAll(sctx, l.pid(), l.admin+"/metrics", w.procs()),
			longLived: longLived, churn: w.churn(), totals: tl.totals()}
	}
	// rested says whether the services are as at the start: the pinned
	// ones' replicas alone, nothing else left running.
	rested := func() bool {
		st, err := l.status(client)
		return err == nil && atRest(st, svcs) && w.waitChildren(2*o.pinned, 0)
	}
	first := snap(nil)
	longLived := map[int]bool{}
	for _, r := range first.readings {
		if r.kind == kindQueue {
			longLived[r.pid] = true
		}
	}
	first.longLived = longLived
	res := &result{duration: o.duration, interval: o.interval, round: round, quiet: quiet,
		services: len(svcs), pinned: o.pinned, plan: ps}
	res.rows = append(res.rows, makeRow(0, "start", rested(), first))
	dumpGoroutines(client, out, "start", w.procs(), longLived)
	logSample(res.rows[0])

	clk := clock.RealClock{}
	began := clk.Now()
	trafficCtx, stopTraffic := context.WithCancel(ctx)
	defer stopTraffic()
	sent := make(chan struct{})
	s := &sender{bin: bin, url: l.url, svcs: svcs, clk: clk, tally: tl, logf: logf}
	go func() {
		defer close(sent)
		s.run(trafficCtx, plan, began)
	}()

	// A sample every interval and at the end of every round, when the
	// services should be at rest.
	interrupted := false
	for _, due := range sampleTimes(o.duration, o.interval) {
		at := due.at
		select {
		case <-ctx.Done():
			interrupted = true
		case <-clk.After(began.Add(at).Sub(clk.Now())):
		}
		if interrupted {
			logf("interrupted: stopping the traffic and reporting what was seen")
			break
		}
		label, rest := "", false
		if at == o.duration {
			label = "end"
		}
		if due.roundEnd {
			if rest = rested(); !rest {
				logf("%s: the services are not at rest at the end of a round", at)
			}
		}
		r := makeRow(at, label, rest, snap(longLived))
		res.rows = append(res.rows, r)
		logSample(r)
	}
	if interrupted {
		stopTraffic()
		res.duration = clk.Since(began)
		r := makeRow(res.duration, "end", false, snap(longLived))
		res.rows = append(res.rows, r)
		res.notes = append(res.notes, fmt.Sprintf("The run was interrupted after %s.", res.duration.Round(time.Second)))
	}
	logf("waiting for the last bursts' responses")
	<-sent
	dumpGoroutines(client, out, "end", w.procs(), longLived)
	stopWatch()
	_ = w.scan()
	res.totals, res.churn = tl.totals(), w.churn()

	res.exit = l.stop()
	res.leftovers = leftovers(fsys, bin)
	if f, err := os.Open(l.log); err == nil {
		res.events, _ = countEvents(f)
		f.Close()
	}
	if n := w.failedScans(); n > 0 {
		res.notes = append(res.notes, fmt.Sprintf("%d scans of the children failed.", n))
	}

	flat, err := writeReport(out, res)
	if err != nil {
		return false, err
	}
	t := res.totals
	return flat && !interrupted && t.failed == 0 && len(t.failedRuns) == 0 && len(res.leftovers) == 0 &&
		strings.HasPrefix(res.exit, "exited 0"), nil
}

// writeReport writes the samples, the chart and the summary under out,
// prints the summary, and returns the verdict.
func writeReport(out string, res *result) (flat bool, err error) {
	if err := writeFile(filepath.Join(out, "samples.csv"), func(wr io.Writer) error {
		return writeCSV(wr, res.rows)
	}); err != nil {
		return false, err
	}
	title := fmt.Sprintf("swell local, %d services scaling to zero and back: %s", res.services, res.duration.Round(time.Second))
	if err := writeFile(filepath.Join(out, "soak.svg"), func(wr io.Writer) error {
		return writeChart(wr, title, res.rows, res.duration/2)
	}); err != nil {
		return false, err
	}
	var summary bytes.Buffer
	if err := writeSummary(&summary, res); err != nil {
		return false, err
	}
	if err := os.WriteFile(filepath.Join(out, "summary.md"), summary.Bytes(), 0o644); err != nil {
		return false, err
	}
	fmt.Print(summary.String())
	logf("wrote %s/{samples.csv,soak.svg,summary.md}", out)
	_, flat = res.verdicts()
	return flat, nil
}

// logSample prints a sample's main figures.
func logSample(r row) {
	v := func(key string) string { c := columns[col(key)]; return format(r.v[col(key)], c.unit) }
	label := r.label
	if r.rest {
		label = strings.TrimPrefix(label+", at rest", ", ")
	}
	if label != "" {
		label = " (" + label + ")"
	}
	logf("%s%s: local rss %s heap %s goroutines %s fds %s | long-lived queue-proxy rss %s goroutines %s fds %s | "+
		"queue-proxies %s (started %s) | sent %s failed %s",
		r.at.Round(time.Second), label, v("local_rss_bytes"), v("local_heap_bytes"), v("local_goroutines"), v("local_fds"),
		v("qp_long_rss_bytes"), v("qp_long_goroutines"), v("qp_long_fds"), v("qp_count"), v("qp_started"),
		v("requests_sent"), v("requests_failed"))
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

// writePlan writes the bursts as CSV, for reading a run afterwards.
func writePlan(w io.Writer, svcs []service, plan []burst) error {
	fmt.Fprintln(w, "start_s,end_s,service,rate,query")
	for _, b := range plan {
		if _, err := fmt.Fprintf(w, "%.0f,%.0f,%s,%g,%s\n", b.start.Seconds(), b.until.Seconds(), svcs[b.service].name, b.rate, b.query()); err != nil {
			return err
		}
	}
	return nil
}

// localRun is the running `swell local`.
type localRun struct {
	cmd        *exec.Cmd
	log        string
	url, admin string
	done       chan struct{}
	err        error // once done is closed
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startLocal starts `swell local -f cfg` on free loopback ports, its output
// to logPath. Its queue-proxies inherit ENABLE_PROFILING, so that their
// goroutines can be dumped.
func startLocal(bin, cfg, logPath string) (*localRun, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	admin, err := freePort()
	if err != nil {
		return nil, err
	}
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child has its own copy
	cmd := exec.Command(bin, "local", "-f", cfg, "--address", "127.0.0.1",
		"--port", strconv.Itoa(port), "--admin-port", strconv.Itoa(admin), "--log-format", "console")
	cmd.Env = append(os.Environ(), "ENABLE_PROFILING=true")
	cmd.Stdout, cmd.Stderr = f, f
	// If the harness dies, so does `swell local`, and with it its replicas.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start swell local: %w", err)
	}
	l := &localRun{cmd: cmd, log: logPath, done: make(chan struct{}),
		url: "http://127.0.0.1:" + strconv.Itoa(port), admin: "http://127.0.0.1:" + strconv.Itoa(admin)}
	go func() {
		l.err = cmd.Wait()
		close(l.done)
	}()
	return l, nil
}

func (l *localRun) pid() int { return l.cmd.Process.Pid }

// status reads `swell local`'s status.
func (l *localRun) status(client *http.Client) (local.Status, error) {
	var st local.Status
	resp, err := client.Get(l.admin + local.StatusPath)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("status: %s", resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// waitFor polls the status until cond holds, `swell local` exits or
// timeout passes.
func (l *localRun) waitFor(client *http.Client, timeout time.Duration, what string, cond func(local.Status) bool) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		st, err := l.status(client)
		if err == nil && cond(st) {
			return nil
		}
		last = err
		select {
		case <-l.done:
			return fmt.Errorf("swell local exited while waiting for %s (%v); see %s", what, l.err, l.log)
		case <-time.After(poll):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("swell local: no %s after %s (last error: %v); see %s", what, timeout, last, l.log)
		}
	}
}

// waitStarted waits for the status to answer with every pinned service
// ready.
func (l *localRun) waitStarted(client *http.Client, svcs []service) error {
	return l.waitFor(client, startTimeout, "pinned replicas ready", func(st local.Status) bool {
		return atRest(st, svcs)
	})
}

// atRest reports whether every pinned service has its one replica ready
// and every other none.
func atRest(st local.Status, svcs []service) bool {
	pinned := map[string]bool{}
	for _, s := range svcs {
		pinned[s.name] = s.pinned
	}
	if len(st.Services) != len(svcs) {
		return false
	}
	for _, s := range st.Services {
		want := 0
		if pinned[s.Name] {
			want = 1
		}
		if s.Desired != want || s.Ready != want || len(s.Replicas) != want {
			return false
		}
	}
	return true
}

// stop sends SIGTERM and waits for `swell local` to drain and exit; it
// returns how it ended.
func (l *localRun) stop() string {
	_ = l.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-l.done:
	case <-time.After(stopTimeout):
		_ = l.cmd.Process.Kill()
		<-l.done
		return fmt.Sprintf("did not exit within %s of SIGTERM and was killed", stopTimeout)
	}
	if l.err != nil {
		return fmt.Sprintf("exited after SIGTERM with %v", l.err)
	}
	return "exited 0 after SIGTERM"
}

// kill is the last resort when the soak fails.
func (l *localRun) kill() {
	select {
	case <-l.done:
	default:
		_ = l.cmd.Process.Kill()
		<-l.done
	}
}

// leftovers lists the processes of the soak's binary that `swell local`
// should have ended with itself.
func leftovers(fs procFS, bin string) []string {
	dirs, _ := filepath.Glob(filepath.Join(fs.root, "[0-9]*"))
	var out []string
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		argv, err := fs.cmdline(pid)
		if err != nil {
			continue
		}
		if k := classify(argv, bin); k != "" {
			out = append(out, fmt.Sprintf("%s (pid %d)", k, pid))
		}
	}
	return out
}

// dumpGoroutines keeps the goroutine profile of every long-lived
// queue-proxy, as name-pid.txt under out/goroutines.
func dumpGoroutines(client *http.Client, out, name string, procs []proc, longLived map[int]bool) {
	dir := filepath.Join(out, "goroutines")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		logf("goroutine dumps: %v", err)
		return
	}
	for _, p := range procs {
		if !longLived[p.pid] || p.metricsPort == 0 {
			continue
		}
		url := fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/goroutine?debug=1", p.metricsPort)
		resp, err := client.Get(url)
		if err != nil {
			logf("goroutine dump of queue-proxy %d: %v", p.pid, err)
			continue
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			logf("goroutine dump of queue-proxy %d: %s %v", p.pid, resp.Status, err)
			continue
		}
		_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-queue-proxy-%d.txt", name, p.pid)), b, 0o644)
	}
}
