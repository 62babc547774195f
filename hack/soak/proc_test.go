package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const statusText = `Name:	swell
Umask:	0022
State:	S (sleeping)
VmPeak:	 1934520 kB
VmHWM:	   23456 kB
VmRSS:	   21380 kB
RssAnon:	    9876 kB
Threads:	12
`

func TestParseVmRSS(t *testing.T) {
	got, err := parseVmRSS(strings.NewReader(statusText))
	if err != nil || got != 21380<<10 {
		t.Fatalf("parseVmRSS = %d, %v; want %d", got, err, 21380<<10)
	}
	for name, text := range map[string]string{
		"zombie, no VmRSS": "Name:\tswell\nState:\tZ (zombie)\n",
		"unit not kB":      "VmRSS:\t 21380 MB\n",
		"not a number":     "VmRSS:\t lots kB\n",
	} {
		if n, err := parseVmRSS(strings.NewReader(text)); err == nil {
			t.Errorf("%s: parseVmRSS = %d, want an error", name, n)
		}
	}
}

func TestGauges(t *testing.T) {
	text := `# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines 38
go_gc_duration_seconds{quantile="0.5"} 0.0001
go_memstats_heap_inuse_bytes 2.940928e+06
go_memstats_heap_inuse_bytes_total 7
go_threads 10 1700000000000
`
	got, err := gauges(strings.NewReader(text), metricGoroutines, metricHeap, metricThreads, "absent_metric")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{metricGoroutines: 38, metricHeap: 2940928, metricThreads: 10}
	if len(got) != len(want) {
		t.Fatalf("gauges = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if _, err := gauges(strings.NewReader("go_goroutines many\n"), metricGoroutines); err == nil {
		t.Error("a value that is no number: no error")
	}
}

func TestClassify(t *testing.T) {
	const bin = "/soak/bin/swell"
	for _, c := range []struct {
		argv []string
		want kind
	}{
		{[]string{bin, "local", "-f", "swell.yaml"}, kindLocal},
		{[]string{bin, "queue-proxy"}, kindQueue},
		{[]string{bin, "hello"}, kindApp},
		{[]string{bin, "load", "--rate", "5"}, ""},
		{[]string{"/other/swell", "queue-proxy"}, ""},
		{[]string{bin}, ""},
		{nil, ""},
	} {
		if got := classify(c.argv, bin); got != c.want {
			t.Errorf("classify(%q) = %q, want %q", c.argv, got, c.want)
		}
	}
}

func TestEnvPort(t *testing.T) {
	env := []string{"PATH=/bin", "QUEUE_METRICS_PORT=1234", "QUEUE_METRICS_PORT_X=9", "QUEUE_METRICS_PORT=4321"}
	if got := envPort(env, "QUEUE_METRICS_PORT"); got != 4321 {
		t.Errorf("envPort = %d, want the last entry's 4321", got)
	}
	for _, env := range [][]string{nil, {"QUEUE_METRICS_PORT=http"}, {"QUEUE_METRICS_PORT=70000"}, {"QUEUE_METRICS_PORT=1", "QUEUE_METRICS_PORT="}} {
		if got := envPort(env, "QUEUE_METRICS_PORT"); got != 0 {
			t.Errorf("envPort(%q) = %d, want 0", env, got)
		}
	}
}

// fakeProc is a /proc tree under a temporary directory.
type fakeProc struct {
	t    *testing.T
	root string
}

func newFakeProc(t *testing.T) *fakeProc { return &fakeProc{t: t, root: t.TempDir()} }

func (f *fakeProc) fs() procFS { return procFS{root: f.root} }

func (f *fakeProc) write(pid int, name, content string) {
	f.t.Helper()
	p := filepath.Join(f.root, strconv.Itoa(pid), name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// process adds pid running argv with env, rssKB resident and fds open files.
func (f *fakeProc) process(pid int, argv, env []string, rssKB, fds int) {
	f.t.Helper()
	f.write(pid, "cmdline", strings.Join(argv, "\x00")+"\x00")
	f.write(pid, "environ", strings.Join(env, "\x00")+"\x00")
	f.write(pid, "status", "Name:\tswell\nVmRSS:\t"+strconv.Itoa(rssKB)+" kB\n")
	for i := range fds {
		f.write(pid, filepath.Join("fd", strconv.Itoa(i)), "")
	}
}

// children sets pid's children, spread over two threads as a Go program's
// are.
func (f *fakeProc) children(pid int, kids ...int) {
	f.t.Helper()
	var a, b []string
	for i, k := range kids {
		if i%2 == 0 {
			a = append(a, strconv.Itoa(k))
		} else {
			b = append(b, strconv.Itoa(k))
		}
	}
	f.write(pid, "task/"+strconv.Itoa(pid)+"/children", strings.Join(a, " ")+" ")
	f.write(pid, "task/"+strconv.Itoa(pid+1000)+"/children", strings.Join(b, " ")+" ")
}

func (f *fakeProc) remove(pid int) {
	if err := os.RemoveAll(filepath.Join(f.root, strconv.Itoa(pid))); err != nil {
		f.t.Fatal(err)
	}
}

func TestProcFS(t *testing.T) {
	const bin = "/soak/bin/swell"
	f := newFakeProc(t)
	f.process(10, []string{bin, "local"}, nil, 30000, 25)
	f.process(11, []string{bin, "queue-proxy"}, []string{"QUEUE_METRICS_PORT=9091"}, 20000, 12)
	f.process(12, []string{bin, "hello"}, nil, 10000, 8)
	f.children(10, 12, 11)
	fs := f.fs()

	kids, err := fs.children(10)
	if err != nil || len(kids) != 2 || kids[0] != 11 || kids[1] != 12 {
		t.Fatalf("children = %v, %v; want [11 12]", kids, err)
	}
	if _, err := fs.children(99); err == nil {
		t.Error("children of a pid that does not exist: no error")
	}
	if rss, err := fs.rss(11); err != nil || rss != 20000<<10 {
		t.Errorf("rss = %d, %v", rss, err)
	}
	if n, err := fs.fds(10); err != nil || n != 25 {
		t.Errorf("fds = %d, %v; want 25", n, err)
	}
	if argv, err := fs.cmdline(11); err != nil || len(argv) != 2 || argv[1] != "queue-proxy" {
		t.Errorf("cmdline = %q, %v", argv, err)
	}
	if got := leftovers(fs, bin); len(got) != 3 {
		t.Errorf("leftovers = %q, want the three processes", got)
	}
}

func TestWatcherCountsStartsAndStops(t *testing.T) {
	const bin = "/soak/bin/swell"
	f := newFakeProc(t)
	f.process(10, []string{bin, "local"}, nil, 30000, 25)
	f.process(11, []string{bin, "queue-proxy"}, []string{"QUEUE_METRICS_PORT=9091"}, 20000, 12)
	f.process(12, []string{bin, "hello"}, nil, 10000, 8)
	// Forked, not exec'd yet: it still reads as its parent.
	f.process(13, []string{bin, "local"}, nil, 30000, 25)
	f.children(10, 11, 12, 13)
	w := newWatcher(f.fs(), bin, 10)

	if err := w.scan(); err != nil {
		t.Fatal(err)
	}
	c := w.churn()
	if c.started[kindQueue] != 1 || c.started[kindApp] != 1 || c.started[kindLocal] != 0 {
		t.Fatalf("after the first scan started = %v, want one queue-proxy and one app", c.started)
	}
	procs := w.procs()
	if len(procs) != 2 {
		t.Fatalf("procs = %+v, want 2", procs)
	}
	for _, p := range procs {
		if p.kind == kindQueue && p.metricsPort != 9091 {
			t.Errorf("queue-proxy's metrics port = %d, want 9091", p.metricsPort)
		}
	}

	// 13 execs a queue-proxy; 11 and 12 (a replica) go.
	f.process(13, []string{bin, "queue-proxy"}, []string{"QUEUE_METRICS_PORT=9092"}, 20000, 12)
	f.remove(11)
	f.remove(12)
	f.children(10, 13)
	if err := w.scan(); err != nil {
		t.Fatal(err)
	}
	c = w.churn()
	if c.started[kindQueue] != 2 || c.stopped[kindQueue] != 1 || c.stopped[kindApp] != 1 {
		t.Errorf("after the second scan started %v stopped %v; want 2 queue-proxies started, one of each stopped", c.started, c.stopped)
	}
	if procs := w.procs(); len(procs) != 1 || procs[0].pid != 13 {
		t.Errorf("procs = %+v, want only 13", procs)
	}

	// A scan that cannot read the children counts as failed and changes
	// nothing.
	f.remove(10)
	if err := w.scan(); err == nil {
		t.Error("scan of a gone parent: no error")
	}
	if w.failedScans() != 1 || len(w.procs()) != 1 {
		t.Errorf("failed scans %d, procs %d; want 1 and 1", w.failedScans(), len(w.procs()))
	}
}
