package main

import (
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// scaleDoc holds scale lines as docs/performance.md does: two runs in
// code blocks among prose, a size that failed, one that did not keep up.
const scaleDoc = "Full run:\n\n```\n" +
	"scale services=1000 pods=5000 cpu_cores=0.22 rss_mib=138 scrape_p99_ms=450 decide_p99_ms=5406\n" +
	"scale services=10000 pods=50000 cpu_cores=1.16 rss_mib=715 scrape_p99_ms=998 decide_p99_ms=inf\n" +
	"```\n\nThe scale of it, and a scale-activator line, are no scale lines.\n\n```\n" +
	"scale-activator services=10000 heap_bytes_per_service=9330\n" +
	"scale services=1000 pods=5000 cpu_cores=0.24 rss_mib=138 scrape_p99_ms=248 decide_p99_ms=4983\n" +
	"scale services=3000 pods=15000 cpu_cores=0.65 rss_mib=369 scrape_p99_ms=743 decide_p99_ms=5609\n" +
	`scale services=20000 pods=100000 failed="fleet exited"` + "\n```\n"

func TestParseScaleLines(t *testing.T) {
	pts, err := parseScaleLines(strings.NewReader(scaleDoc))
	if err != nil {
		t.Fatal(err)
	}
	// The last line of each size, in order of size; the failed size left
	// out.
	// Lines of before the modes are pull's.
	want := []scalePoint{
		{mode: "pull", services: 1000, cpu: 0.24, rss: 138, keptUp: true},
		{mode: "pull", services: 3000, cpu: 0.65, rss: 369, keptUp: true},
		{mode: "pull", services: 10000, cpu: 1.16, rss: 715, keptUp: false},
	}
	if len(pts) != len(want) {
		t.Fatalf("points %+v, want %+v", pts, want)
	}
	for i := range want {
		if pts[i] != want[i] {
			t.Errorf("point %d: %+v, want %+v", i, pts[i], want[i])
		}
	}
}

func TestParseScaleLinesErrors(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []string
	}{
		{"no figures here\n", []string{"no `scale [mode=M] services=N"}},
		{"scale mode=poll services=1000 cpu_cores=0.2 rss_mib=1\n", []string{`line 1: mode="poll" (want pull or push)`}},
		// Every problem, by line.
		{"x\nscale services=ten cpu_cores=0.2 rss_mib=-1\nscale services=1000 cpu_cores=Inf rss_mib=3\n",
			[]string{`line 2: services="ten"`, `rss_mib="-1" (want a number, 0 or more)`, `line 3: cpu_cores="Inf"`}},
		{"scale services=1000 rss_mib=3\n", []string{`cpu_cores=""`}},
	} {
		_, err := parseScaleLines(strings.NewReader(tt.in))
		if err == nil {
			t.Errorf("%q: no error", tt.in)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: error %q lacks %q", tt.in, err, w)
			}
		}
	}
}

func TestWriteScaleChart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "scale.svg")
	if err := writeScaleChartFile(path, "the scale lines of a <test>", []byte(scaleDoc)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	svg := string(b)
	// Well-formed XML, the source escaped.
	d := xml.NewDecoder(strings.NewReader(svg))
	for {
		if _, err := d.Token(); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("not well-formed: %v\n%s", err, svg)
			}
			break
		}
	}
	for _, want := range []string{
		"the scale lines of a &lt;test&gt;",
		"autoscaler CPU", "autoscaler resident memory (MiB)",
		"<title>pull, 10,000 services: 1.16; did not keep up</title>", "<title>pull, 3,000 services: 369</title>",
		">10,000</text>", "hollow: did not keep up",
	} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %q", want)
		}
	}
	// Two panels: one line from each size to the next, the one to the
	// size that did not keep up dashed.
	if n := strings.Count(svg, `stroke-width="1.6"/>`) + strings.Count(svg, `stroke-width="1.6" stroke-dasharray="5,3"/>`); n != 4 {
		t.Errorf("%d lines between sizes, want 4", n)
	}
	if n := strings.Count(svg, `stroke-dasharray="5,3"/>`); n != 2 {
		t.Errorf("%d dashed lines, want 2", n)
	}
	if err := writeScaleChartFile(path, "nothing", []byte("no lines")); err == nil || !strings.Contains(err.Error(), "scale chart from nothing") {
		t.Errorf("chart of nothing: %v", err)
	}
}

func TestParseScaleParts(t *testing.T) {
	p, err := parseScaleParts("activator")
	if err != nil || !p[scalePartActivator] || p[scalePartAutoscaler] {
		t.Errorf("activator: %v, %v", p, err)
	}
	p, err = parseScaleParts(" autoscaler, activator")
	if err != nil || len(p) != 2 {
		t.Errorf("both: %v, %v", p, err)
	}
	_, err = parseScaleParts("activator,fleet,x")
	if err == nil || !strings.Contains(err.Error(), `"fleet", "x"`) || !strings.Contains(err.Error(), "autoscaler, activator") {
		t.Errorf("unknown parts: %v; want them named with the accepted ones", err)
	}
}

// A sharded size's replicas are points of their own, at the services each
// leads; the line of all of them, and a failed run, are none.
func TestScaleChartShardedReplicas(t *testing.T) {
	doc := scaleDoc + "```\n" +
		"scale-shard replica=0 buckets=4 services=3997 pods=19985 cpu_cores=0.50 rss_mib=143 scrape_p99_ms=990 decide_p99_ms=9999\n" +
		"scale-shard replica=1 buckets=3 services=3000 pods=15000 cpu_cores=0.15 rss_mib=108 scrape_p99_ms=990 decide_p99_ms=5350\n" +
		"scale-shard replica=0 buckets=4 services=3997 pods=19985 cpu_cores=0.19 rss_mib=143 scrape_p99_ms=990 decide_p99_ms=inf\n" +
		"scale-shard replicas=3 buckets=10 services=10000 pods=50000 cpu_cores=0.53 rss_mib=365 scrape_p99_ms=990 decide_p99_ms=inf cpu_max_min=1.22\n" +
		`scale-shard replicas=3 buckets=10 services=10000 pods=50000 failed="fleet exited"` + "\n```\n"
	pts, err := parseScaleLines(strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	var replicas []scalePoint
	for _, p := range pts {
		if p.shard {
			replicas = append(replicas, p)
		}
	}
	want := []scalePoint{
		{mode: "pull", services: 3997, cpu: 0.19, rss: 143, shard: true, replica: 0},
		{mode: "pull", services: 3000, cpu: 0.15, rss: 108, keptUp: true, shard: true, replica: 1},
	}
	if len(pts) != 5 || len(replicas) != 2 || replicas[0] != want[0] || replicas[1] != want[1] {
		t.Fatalf("points %+v; replicas %+v, want %+v", pts, replicas, want)
	}
	if _, err := parseScaleLines(strings.NewReader("scale services=1 cpu_cores=1 rss_mib=1\nscale-shard replica=x services=3 cpu_cores=1 rss_mib=1\n")); err == nil ||
		!strings.Contains(err.Error(), `line 2: replica="x"`) {
		t.Errorf("a bad replica: %v", err)
	}

	path := filepath.Join(t.TempDir(), "scale.svg")
	if err := writeScaleChartFile(path, "test", []byte(doc)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	svg := string(b)
	for _, want := range []string{
		"each of 2 autoscaler replicas dividing 6,997 services by buckets, at the services it leads",
		"<title>pull, replica 0 of a sharded autoscaler, 3,997 services: 0.19; did not keep up</title>",
		"<title>pull, replica 1 of a sharded autoscaler, 3,000 services: 108</title>",
	} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %q", want)
		}
	}
	// The sizes are still joined by one line each, the replicas by none.
	if n := strings.Count(svg, `stroke-width="1.6"/>`) + strings.Count(svg, `stroke-width="1.6" stroke-dasharray="5,3"/>`); n != 4 {
		t.Errorf("%d lines between points, want 4", n)
	}
}

// Pull and push side by side: a line of sizes and a color for each mode,
// and a legend that says which is which.
func TestScaleChartModes(t *testing.T) {
	doc := "```\n" +
		"scale services=1000 pods=5000 cpu_cores=0.30 rss_mib=50 scrape_p99_ms=246 decide_p99_ms=5166\n" +
		"scale mode=pull services=1000 pods=5000 cpu_cores=0.11 rss_mib=46 unsampled=0.0 step_p50_ms=3260 step_p99_ms=5170\n" +
		"scale mode=push services=1000 pods=5000 cpu_cores=0.05 rss_mib=52 unsampled=0.0 step_p50_ms=160 step_p99_ms=240\n" +
		"scale mode=pull services=10000 pods=50000 cpu_cores=0.75 rss_mib=333 unsampled=6829.0 step_p50_ms=3610 step_p99_ms=3900\n" +
		"scale mode=push services=10000 pods=50000 cpu_cores=0.45 rss_mib=420 unsampled=0.0 step_p50_ms=170 step_p99_ms=300\n" +
		"scale-shard mode=push replica=0 buckets=4 services=3997 pods=19985 cpu_cores=0.20 rss_mib=160 unsampled=0.0 scrape_p99_ms=100 decide_p99_ms=300\n" +
		"```\n"
	pts, err := parseScaleLines(strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	// In order of mode and size; the line without a mode is pull's, and
	// the later pull line of 1,000 services replaces it; a size whose
	// services went without a sample did not keep up.
	want := []scalePoint{
		{mode: "pull", services: 1000, cpu: 0.11, rss: 46, keptUp: true},
		{mode: "pull", services: 10000, cpu: 0.75, rss: 333},
		{mode: "push", services: 1000, cpu: 0.05, rss: 52, keptUp: true},
		{mode: "push", services: 10000, cpu: 0.45, rss: 420, keptUp: true},
		{mode: "push", services: 3997, cpu: 0.20, rss: 160, keptUp: true, shard: true},
	}
	if !slices.Equal(pts, want) {
		t.Fatalf("points\n%+v\nwant\n%+v", pts, want)
	}
	var b strings.Builder
	if err := writeScaleChart(&b, "test", pts); err != nil {
		t.Fatal(err)
	}
	svg := b.String()
	for _, want := range []string{
		"pull: the autoscaler scrapes every pod every second", "push: the pods push their stats to the autoscaler",
		"each of 1 autoscaler replicas dividing 3,997 services by buckets (push), at the services it leads",
		`<title>push, 10,000 services: 0.45</title>`, `<title>pull, 10,000 services: 0.75; did not keep up</title>`,
		`<title>push, replica 0 of a sharded autoscaler, 3,997 services: 0.20</title>`,
	} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %q", want)
		}
	}
	// A line from 1,000 to 10,000 for each mode in each panel, pull's to
	// a size that did not keep up dashed.
	if n := strings.Count(svg, `stroke="#1f77b4" stroke-width="1.6" stroke-dasharray="5,3"/>`); n != 2 {
		t.Errorf("%d dashed pull lines, want 2", n)
	}
	if n := strings.Count(svg, `stroke="#ff7f0e" stroke-width="1.6"/>`); n != 2 {
		t.Errorf("%d push lines, want 2", n)
	}
}
