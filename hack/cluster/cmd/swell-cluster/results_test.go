package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// suiteOutput is the shape of `e2e.test -test.v`: parallel tests pause and
// continue, results come at the end, subtests are indented, and a test
// still running when the binary's deadline passes has no result.
const suiteOutput = `=== RUN   TestSerial
--- PASS: TestSerial (12.50s)
=== RUN   TestA
=== PAUSE TestA
=== RUN   TestB
=== PAUSE TestB
=== RUN   TestSkipped
    cluster_test.go:90: KUBECONFIG is not set
--- SKIP: TestSkipped (0.00s)
=== RUN   TestHangs
=== PAUSE TestHangs
=== CONT  TestA
=== CONT  TestB
=== RUN   TestB/sub
=== CONT  TestHangs
    swell_test.go:10: --- FAIL: this line is the test's own log, not a result
--- FAIL: TestA (3.20s)
    swell_test.go:617: GET at the ClusterIP: connect: connection refused
--- PASS: TestB (1.00s)
    --- PASS: TestB/sub (0.40s)
panic: test timed out after 20m0s
`

func readRun(t *testing.T, output string, chunk int) runResult {
	t.Helper()
	r := newSuiteRun()
	// Written in pieces that cut lines, as a pipe delivers them.
	for s := output; s != ""; {
		n := min(chunk, len(s))
		if _, err := r.Write([]byte(s[:n])); err != nil {
			t.Fatal(err)
		}
		s = s[n:]
	}
	r.close()
	return runResult{tests: r.tests, order: r.order}
}

func TestSuiteRunReadsEachTest(t *testing.T) {
	for _, chunk := range []int{1, 7, 4096} {
		r := readRun(t, suiteOutput, chunk)
		want := map[string]testRun{
			"TestSerial":  {passed, 12500 * time.Millisecond},
			"TestA":       {failed, 3200 * time.Millisecond},
			"TestB":       {passed, time.Second},
			"TestB/sub":   {passed, 400 * time.Millisecond},
			"TestSkipped": {skipped, 0},
			"TestHangs":   {noResult, 0},
		}
		if fmt.Sprint(r.tests) != fmt.Sprint(want) {
			t.Errorf("chunks of %d: tests %v, want %v", chunk, r.tests, want)
		}
		if got := strings.Join(r.order, " "); got != "TestSerial TestA TestB TestSkipped TestHangs TestB/sub" {
			t.Errorf("chunks of %d: order %s", chunk, got)
		}
		if got := strings.Join(r.failedTests(), " "); got != "TestA TestHangs" {
			t.Errorf("chunks of %d: failed %s, want TestA TestHangs", chunk, got)
		}
	}
}

func TestTableCountsEveryRun(t *testing.T) {
	ok := "=== RUN   TestA\n--- PASS: TestA (2.00s)\n=== RUN   TestC\n--- SKIP: TestC (0.00s)\n"
	bad := "=== RUN   TestA\n--- FAIL: TestA (5.00s)\n=== RUN   TestC\n--- SKIP: TestC (0.00s)\n"
	runs := []runResult{readRun(t, ok, 4096), readRun(t, bad, 4096), {err: errors.New("the cluster did not start: etcd exited")}}
	runs[0].took, runs[1].took = 3*time.Minute, 4*time.Minute
	runs[1].err = errors.New("exit status 1")
	got := table(runs, true)
	for _, want := range []string{
		"3 runs, each in a fresh cluster, beside a CPU hog",
		"| 1 | pass | 3m0s | 1 | 0 | 1 |  |",
		"| 2 | **fail** | 4m0s | 0 | 1 | 1 | TestA |",
		"| 3 | **fail** | 0s | 0 | 0 | 0 | the cluster did not start: etcd exited |",
		"| TestA | 1 | 1 | 0 | 0 | 5s |",
		"| TestC | 0 | 0 | 2 | 0 | 0s |",
		"\ne2e: 1 passed, 1 failed, 2 skipped\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
}
