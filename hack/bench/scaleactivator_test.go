package main

import (
	"math"
	"slices"
	"strings"
	"testing"
)

// scaleBenchOutput is `go test -bench '^BenchmarkScale' ./activator` as it
// prints, with a line of every kind it may hold.
const scaleBenchOutput = `goos: linux
goarch: amd64
pkg: github.com/swell-run/swell/activator
cpu: Oxide Virtual Turin-like Processor
BenchmarkScale/services=10000/memory-2         	1000000000	         0.6079 ns/op	      9330 heap-B/service	     13020 rss-B/service
BenchmarkScale/services=10/lookup-2  	22495041	        60.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkScale/services=10000/lookup-2         	12321367	        90.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkScale/services=10/chain-2   	  243924	      5000 ns/op	    2917 B/op	      25 allocs/op
BenchmarkScale/services=10000/chain-2          	  120940	      8500 ns/op	    2912 B/op	      25 allocs/op
BenchmarkScale/services=10/lookup#01-2  	10781028	       257.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkScale/services=10000/lookup#01-2         	12321367	        97.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkScale/services=10/chain#01-2   	  243924	      4000 ns/op	    2917 B/op	      25 allocs/op
BenchmarkScale/services=10000/chain#01-2          	  120940	      8400 ns/op	    2912 B/op	      25 allocs/op
BenchmarkScale/services=10/lookup#02-2  	10781028	       58.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkScale/services=10000/lookup#02-2         	12321367	        80.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkScale/services=10/chain#02-2   	  243924	      37621 ns/op	    2917 B/op	      25 allocs/op
BenchmarkScale/services=10000/chain#02-2          	  120940	      9000 ns/op	    2912 B/op	      25 allocs/op
BenchmarkScaleRemoval/services=1000-2          	1000000000	         0.7968 ns/op	      4270 left-B/service	    285096 remove-ns/service
BenchmarkScaleRemoval/services=2000-2          	1000000000	         0.5887 ns/op	      3319 left-B/service	   1021701 remove-ns/service
--- BENCH: BenchmarkScaleRemoval/services=2000-2
    scale_bench_test.go:1: a log line 12 ns/op
BenchmarkScaleReport/busy=1000-2               	     631	   1895052 ns/op	         1.000 frames/s	     26018 report-B/s	     26074 wire-B/s
BenchmarkScaleReport/busy=10000-2              	     188	   6288350 ns/op	         2.000 frames/s	    260018 report-B/s	    260530 wire-B/s
BenchmarkScalePorts/services=10000/cost-2         	       1	       130.0 ns/op	         1.000 fds/port	         1.000 goroutines/port	       989.0 heap-B/port	     73506 open-ns/port	      6033 rss-B/port
BenchmarkScalePorts/services=10000/lookup-by-port-2         	13717425	       112.5 ns/op	       0 B/op	       0 allocs/op
BenchmarkBroken-2 	 12 	 x ns/op
PASS
ok  	github.com/swell-run/swell/activator	29.730s
`

func TestParseGoBench(t *testing.T) {
	res := parseGoBench(scaleBenchOutput)
	if len(res) != 11 {
		t.Errorf("%d benchmarks, want 11: %v", len(res), res)
	}
	got := res["BenchmarkScaleReport/busy=10000"]
	want := map[string]float64{"ns/op": 6288350, "frames/s": 2, "report-B/s": 260018, "wire-B/s": 260530}
	if len(got) != len(want) {
		t.Errorf("busy=10000: %v, want %v", got, want)
	}
	for unit, v := range want {
		if len(got[unit]) != 1 || got[unit][0] != v {
			t.Errorf("busy=10000 %s = %v, want [%v]", unit, got[unit], v)
		}
	}
	// The rounds of a benchmark run again, in order.
	if got := res["BenchmarkScale/services=10/lookup"]["ns/op"]; !slices.Equal(got, []float64{60, 257, 58}) {
		t.Errorf("services=10/lookup's rounds: %v, want [60 257 58]", got)
	}
	if _, ok := res["BenchmarkBroken"]; ok {
		t.Error("a line with a value that is no number was read")
	}
	// A name whose last dash is no GOMAXPROCS suffix keeps it.
	if r := parseGoBench("BenchmarkX/a-b 10 5 ns/op\n"); !slices.Equal(r["BenchmarkX/a-b"]["ns/op"], []float64{5}) {
		t.Errorf("name without a suffix: %v", r)
	}
}

// TestScaleActivatorLine: the rounds' medians, and the medians of the
// rounds' ratios (a busy spell slowed the small size's second lookup and
// third chain).
func TestScaleActivatorLine(t *testing.T) {
	a, err := scaleActivatorFrom(parseGoBench(scaleBenchOutput))
	if err != nil {
		t.Fatal(err)
	}
	want := "scale-activator services=10000 pods=50000 heap_bytes_per_service=9330 rss_bytes_per_service=13020 " +
		"lookup_ns=90 lookup_ratio=1.38 chain_ns=8500 chain_ratio=1.70 " +
		"report_bytes_per_s=26018 report_frames_per_s=1 report_bytes_per_s_all=260018 report_frames_per_s_all=2 " +
		"left_bytes_per_service=3319 " +
		"port_fds=1.00 port_goroutines=1.00 port_heap_bytes=989 port_rss_bytes=6033 port_open_ns=73506 port_lookup_ns=112"
	if got := scaleActivatorLine(a); got != want {
		t.Errorf("line\n%s\nwant\n%s", got, want)
	}
	s := scaleActivatorSection(a, "")
	var b strings.Builder
	s.write(&b)
	for _, want := range []string{"9.1 KiB; 12.7 KiB (89 MiB and 124 MiB at 10,000)", "60 → 90 ns (1.38×)", "5.0 → 8.5 µs (1.70×)",
		"25.4 KiB/s (25.5 KiB/s on the socket), 1 frame/s; a period's report 1.9 ms", "285.1 µs; 1021.7 µs",
		"1.00, 1.00", "1.0 KiB; 5.9 KiB (9 MiB and 58 MiB at 10,000)", "74 µs; 112 ns"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("section lacks %q:\n%s", want, b.String())
		}
	}
}

func TestScaleActivatorMissing(t *testing.T) {
	// Without the reports and the removal, every missing figure is named.
	var kept []string
	for line := range strings.Lines(scaleBenchOutput) {
		if !strings.HasPrefix(line, "BenchmarkScaleReport") && !strings.HasPrefix(line, "BenchmarkScaleRemoval") {
			kept = append(kept, line)
		}
	}
	_, err := scaleActivatorFrom(parseGoBench(strings.Join(kept, "")))
	if err == nil {
		t.Fatal("figures missing, yet no error")
	}
	for _, want := range []string{"BenchmarkScaleReport/busy=1000 report-B/s", "BenchmarkScaleReport/busy=10000 frames/s",
		"BenchmarkScaleRemoval/services=2000 left-B/service"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if strings.Contains(err.Error(), "memory") {
		t.Errorf("error %q names a figure that is there", err)
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 10000: "10,000", 1234567: "1,234,567", -2500: "-2,500"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestRoundRatio(t *testing.T) {
	// Round by round, as far as both sizes ran.
	if got := roundRatio([]float64{20, 30, 40, 50}, []float64{10, 10, 10}); got != 3 {
		t.Errorf("ratio %v, want the median of 2, 3, 4", got)
	}
	if got := roundRatio(nil, []float64{1}); !math.IsNaN(got) {
		t.Errorf("ratio without a round: %v, want NaN", got)
	}
}
