package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/swell-run/swell/pkg/loadgen"
)

func TestPercentile(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		out := make([]time.Duration, len(ns))
		for i, n := range ns {
			out[i] = time.Duration(n) * time.Millisecond
		}
		return out
	}
	twenty := ms(20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1)
	for _, tt := range []struct {
		xs   []time.Duration
		p    float64
		want time.Duration
	}{
		{nil, 0.5, 0},
		{ms(7), 0.5, 7 * time.Millisecond},
		{ms(7), 1, 7 * time.Millisecond},
		{ms(3, 1, 2), 0.5, 2 * time.Millisecond},
		{ms(4, 1, 3, 2), 0.5, 2 * time.Millisecond}, // nearest rank: no mean of the middle two
		{twenty, 0.5, 10 * time.Millisecond},
		{twenty, 0.9, 18 * time.Millisecond},
		{twenty, 0.99, 20 * time.Millisecond},
		{twenty, 1, 20 * time.Millisecond},
	} {
		in := slices.Clone(tt.xs)
		if got := percentile(tt.xs, tt.p); got != tt.want {
			t.Errorf("percentile(%v, %v) = %v, want %v", tt.xs, tt.p, got, tt.want)
		}
		if !slices.Equal(in, tt.xs) {
			t.Errorf("percentile reordered its input: %v", tt.xs)
		}
	}
}

func TestColdReportJudgesTheMedianShare(t *testing.T) {
	// Shares of 10, 20 and 40 ms: the median, 20 ms, meets the target
	// although one run does not.
	cold := []time.Duration{60 * time.Millisecond, 50 * time.Millisecond, 70 * time.Millisecond}
	app := []time.Duration{50 * time.Millisecond, 30 * time.Millisecond, 30 * time.Millisecond}
	s := coldReport(cold, app)
	share := s.rows[2]
	if share[1] != "20.0 ms" || share[4] != "40.0 ms" || share[6] != "yes" {
		t.Errorf("share row %v: want p50 20.0 ms, max 40.0 ms, met", share)
	}
	if !strings.Contains(strings.Join(s.notes, "\n"), "median cold − median app): 30.0 ms") {
		t.Errorf("notes %q lack the medians' difference of 30.0 ms", s.notes)
	}
	slow := coldReport([]time.Duration{100 * time.Millisecond}, []time.Duration{40 * time.Millisecond})
	if got := slow.rows[2][6]; got != met(false) {
		t.Errorf("a 60 ms share judged %q, want it missed", got)
	}
}

func TestCodeCounts(t *testing.T) {
	ok, other, lost := codeCounts(map[int]uint64{0: 2, 200: 90, 204: 1, 302: 1, 503: 4, 502: 1})
	if ok != 91 || lost != 2 {
		t.Errorf("2xx %d, lost %d; want 91, 2", ok, lost)
	}
	if got, want := formatCodes(other), "302: 1, 502: 1, 503: 4"; got != want {
		t.Errorf("other codes %q, want %q", got, want)
	}
	if got := formatCodes(nil); got != "none" {
		t.Errorf("no codes formatted %q, want none", got)
	}
}

func TestReplicaChangesKeepsChangesAndTheLast(t *testing.T) {
	s := func(sec, ready, desired, queued int) replicaSample {
		return replicaSample{time.Duration(sec) * time.Second, ready, desired, queued}
	}
	in := []replicaSample{s(1, 0, 1, 3), s(2, 1, 1, 0), s(3, 1, 1, 0), s(4, 1, 2, 0), s(5, 1, 2, 0), s(6, 1, 2, 0)}
	want := []replicaSample{s(1, 0, 1, 3), s(2, 1, 1, 0), s(4, 1, 2, 0), s(6, 1, 2, 0)}
	if got := replicaChanges(in); !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if got := replicaChanges(nil); len(got) != 0 {
		t.Errorf("no samples gave %v", got)
	}
}

func TestReplayReportCountsLost(t *testing.T) {
	r := loadgen.Result{Requests: 10, Planned: 10, StatusCodes: map[int]uint64{200: 7, 503: 1, 0: 2},
		Errors: []loadgen.ErrorCount{{Error: "connection refused", Count: 2}, {Error: "503 Service Unavailable", Count: 1}}}
	samples := []replicaSample{{time.Second, 0, 1, 4}, {2 * time.Second, 2, 3, 0}, {3 * time.Second, 1, 1, 0}}
	s := replayReport("trace.csv", time.Minute, r, samples, nil)
	byMetric := map[string][]string{}
	for _, row := range s.rows {
		byMetric[row[0]] = row
	}
	for metric, want := range map[string][2]string{
		"2xx":                                {"7", ""},
		"Non-2xx answers, by code":           {"503: 1", met(false)},
		"Transport errors (lost: no answer)": {"2", met(false)},
		"Replicas: most ready, most desired": {"2, 3", ""},
		"Replicas when the replay ended":     {"1 desired, 1 ready", ""},
	} {
		row := byMetric[metric]
		if row == nil || row[1] != want[0] || row[3] != want[1] {
			t.Errorf("%s: row %v, want value %q, met %q", metric, row, want[0], want[1])
		}
	}
	if !strings.Contains(strings.Join(s.notes, "\n"), "2 × connection refused") {
		t.Errorf("notes %q lack the transport errors", s.notes)
	}
}

func TestModuleRootWalksUp(t *testing.T) {
	root := t.TempDir()
	deep := filepath.Join(root, "a", "b")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := moduleRoot(deep); err == nil {
		t.Fatalf("found a module root above %s without go.mod", deep)
	}
	if err := os.WriteFile(filepath.Join(root, "go.mod"), []byte("module x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := moduleRoot(deep)
	if err != nil || got != root {
		t.Errorf("moduleRoot(%s) = %q, %v; want %q", deep, got, err, root)
	}
}

func TestTracePathFlagWins(t *testing.T) {
	defer func(old string) { localTrace = old }(localTrace)
	localTrace = ""
	got, err := tracePath()
	if err != nil {
		t.Fatal(err)
	}
	// The tests run in hack/bench, two levels under the module root.
	wd, _ := os.Getwd()
	if want := filepath.Join(wd, "..", "..", defaultTracePath); got != filepath.Clean(want) {
		t.Errorf("default trace %q, want %q", got, filepath.Clean(want))
	}
	localTrace = "/some/trace.csv"
	if got, err := tracePath(); err != nil || got != localTrace {
		t.Errorf("with -trace: %q, %v", got, err)
	}
}

func TestChildPIDsListsAStartedChild(t *testing.T) {
	if _, err := childPIDs(os.Getpid()); err != nil {
		t.Skip(err)
	}
	// The child blocks reading its stdin until the test closes it.
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildBlocks$")
	cmd.Env = append(os.Environ(), "BENCH_CHILD_BLOCKS=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	pids, err := childPIDs(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(pids, cmd.Process.Pid) {
		t.Errorf("children %v lack the started %d", pids, cmd.Process.Pid)
	}
}

// TestChildBlocks is the child of TestChildPIDsListsAStartedChild.
func TestChildBlocks(t *testing.T) {
	if os.Getenv("BENCH_CHILD_BLOCKS") == "" {
		t.Skip("only run as a child process")
	}
	_, _ = os.Stdin.Read(make([]byte, 1))
}
