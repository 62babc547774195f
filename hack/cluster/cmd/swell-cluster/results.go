package main

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// What a run of the suite came to, test by test, read from the verbose
// output of its test binary as it streams past.

// outcome is what came of one test in one run.
type outcome int

const (
	// noResult: the test started and never ended (the binary timed out,
	// panicked or was killed).
	noResult outcome = iota
	passed
	failed
	skipped
)

var (
	runLine    = regexp.MustCompile(`^=== RUN\s+(\S+)`)
	resultLine = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S+) \(([0-9.]+)s\)`)
)

// testRun is one test's outcome in one run of the suite.
type testRun struct {
	outcome outcome
	took    time.Duration
}

// suiteRun reads one run's verbose test output, written to it, and keeps
// each test's outcome. It is safe for the test binary's stdout and stderr
// to write to it at once.
type suiteRun struct {
	mu    sync.Mutex
	pw    *io.PipeWriter
	done  chan struct{}
	tests map[string]testRun
	// order is the tests in the order they started.
	order []string
}

func newSuiteRun() *suiteRun {
	pr, pw := io.Pipe()
	r := &suiteRun{pw: pw, done: make(chan struct{}), tests: map[string]testRun{}}
	go func() {
		defer close(r.done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			r.line(sc.Text())
		}
		// A line past the buffer ends the scan: keep draining, so the
		// test binary never blocks on its output.
		io.Copy(io.Discard, pr)
	}()
	return r
}

func (r *suiteRun) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pw.Write(p)
}

// close ends the output and waits until every line is read.
func (r *suiteRun) close() {
	r.pw.Close()
	<-r.done
}

func (r *suiteRun) line(l string) {
	if m := runLine.FindStringSubmatch(l); m != nil {
		if _, ok := r.tests[m[1]]; !ok {
			r.order = append(r.order, m[1])
			r.tests[m[1]] = testRun{}
		}
		return
	}
	m := resultLine.FindStringSubmatch(l)
	if m == nil {
		return
	}
	secs, _ := strconv.ParseFloat(m[3], 64)
	o := map[string]outcome{"PASS": passed, "FAIL": failed, "SKIP": skipped}[m[1]]
	if _, ok := r.tests[m[2]]; !ok {
		r.order = append(r.order, m[2])
	}
	r.tests[m[2]] = testRun{outcome: o, took: time.Duration(secs * float64(time.Second))}
}

// runResult is one run of the suite: its tests, and what ended it.
type runResult struct {
	tests map[string]testRun
	order []string
	took  time.Duration
	// err is why the run failed: the cluster did not start, or the suite
	// exited non-zero.
	err error
}

// count is how many of the run's tests came to o.
func (r runResult) count(o outcome) int {
	n := 0
	for _, t := range r.tests {
		if t.outcome == o {
			n++
		}
	}
	return n
}

// failedTests are the run's tests that failed or never ended.
func (r runResult) failedTests() []string {
	var names []string
	for _, name := range r.order {
		if o := r.tests[name].outcome; o == failed || o == noResult {
			names = append(names, name)
		}
	}
	return names
}

// table is the results of every run as markdown: one line per run, then
// one row per test with its passes, failures, skips and runs without a
// result, and its slowest run; and a closing line counting every test
// run, "e2e: N passed, N failed, N skipped".
func table(runs []runResult, stress bool) string {
	var b strings.Builder
	load := "on a machine left to it"
	if stress {
		load = "beside a CPU hog keeping every core busy"
	}
	count := fmt.Sprintf("%d runs, each", len(runs))
	if len(runs) == 1 {
		count = "1 run"
	}
	fmt.Fprintf(&b, "## The end-to-end suite, %s in a fresh cluster, %s\n\n", count, load)
	b.WriteString("| run | result | took | passed | failed | skipped | what failed |\n|---:|---|---:|---:|---:|---:|---|\n")
	var order []string
	seen := map[string]bool{}
	for i, r := range runs {
		result, what := "pass", ""
		if r.err != nil {
			result, what = "**fail**", strings.Join(r.failedTests(), ", ")
			if what == "" {
				what = r.err.Error()
			}
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %d | %d | %d | %s |\n", i+1, result, r.took.Round(time.Second),
			r.count(passed), r.count(failed)+r.count(noResult), r.count(skipped), what)
		for _, name := range r.order {
			if !seen[name] {
				seen[name] = true
				order = append(order, name)
			}
		}
	}
	b.WriteString("\n| test | passed | failed | skipped | no result | slowest |\n|---|---:|---:|---:|---:|---:|\n")
	var total [4]int
	for _, name := range order {
		var n [4]int
		var slowest time.Duration
		for _, r := range runs {
			t, ok := r.tests[name]
			if !ok {
				continue
			}
			n[t.outcome]++
			total[t.outcome]++
			slowest = max(slowest, t.took)
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %s |\n", name, n[passed], n[failed], n[skipped], n[noResult], slowest.Round(100*time.Millisecond))
	}
	fmt.Fprintf(&b, "\ne2e: %d passed, %d failed, %d skipped\n", total[passed], total[failed]+total[noResult], total[skipped])
	return b.String()
}
