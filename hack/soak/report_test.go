package main

import (
	"encoding/csv"
	"math"
	"strings"
	"testing"
	"time"
)

// minutes returns the sample times 0, 1m, ..., n m.
func minutes(n int) []time.Duration {
	at := make([]time.Duration, n+1)
	for i := range at {
		at[i] = time.Duration(i) * time.Minute
	}
	return at
}

func TestJudge(t *testing.T) {
	const total = 30 * time.Minute
	at := minutes(30)
	series := func(f func(i int) float64) []float64 {
		v := make([]float64, len(at))
		for i := range v {
			v[i] = f(i)
		}
		return v
	}
	wobble := func(i int) float64 { return []float64{-8, 3, 11, -4, 0, 6, -10}[i%7] }
	for _, c := range []struct {
		name      string
		v         []float64
		unit      unit
		flat      bool
		wantKnown bool
	}{
		{"steady with noise", series(func(i int) float64 { return 200 + wobble(i) }), unitCount, true, true},
		{"warms up over the first minutes, then steady", series(func(i int) float64 { return 200 * (1 - math.Exp(-float64(i)/2)) }), unitCount, true, true},
		// A start far below the rest (before any traffic) is no growth:
		// the sample at 0 is in neither half.
		{"low start, steady after", series(func(i int) float64 { return map[bool]float64{true: 40, false: 200}[i == 0] }), unitCount, true, true},
		{"grows a goroutine a minute", series(func(i int) float64 { return 200 + 2*float64(i) + wobble(i) }), unitCount, false, true},
		{"steady, then grows in the second half", series(func(i int) float64 { return 200 + 3*math.Max(0, float64(i-15)) }), unitCount, false, true},
		{"falls", series(func(i int) float64 { return 300 - 3*float64(i) }), unitCount, true, true},
		// A few files more is within the floor, whatever the median.
		{"small counts: +4 is within the floor", series(func(i int) float64 { return map[bool]float64{true: 10, false: 14}[i <= 15] }), unitCount, true, true},
		{"small counts: +6 is not", series(func(i int) float64 { return map[bool]float64{true: 10, false: 16}[i <= 15] }), unitCount, false, true},
		{"memory: +1.5 MiB on 8 MiB is within the 2 MiB floor", series(func(i int) float64 {
			return map[bool]float64{true: 8 << 20, false: 9.5 * (1 << 20)}[i <= 15]
		}), unitBytes, true, true},
		{"memory: +12% of 40 MiB is not", series(func(i int) float64 {
			return map[bool]float64{true: 40 << 20, false: 44.8 * (1 << 20)}[i <= 15]
		}), unitBytes, false, true},
		{"gaps (NaN) are skipped", series(func(i int) float64 {
			if i%2 == 0 {
				return math.NaN()
			}
			return 100
		}), unitCount, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := judge(at, c.v, total, c.unit)
			if j.known != c.wantKnown || j.flat != c.flat {
				t.Errorf("judge = %+v; want known %v, flat %v", j, c.wantKnown, c.flat)
			}
		})
	}
}

func TestJudgeNeedsSamplesInBothHalves(t *testing.T) {
	at := []time.Duration{0, 10 * time.Minute, 20 * time.Minute, 30 * time.Minute}
	j := judge(at, []float64{1, 2, 3, 4}, 30*time.Minute, unitCount)
	if j.known || j.flat {
		t.Errorf("one sample in the first half: judge = %+v, want unknown", j)
	}
}

func TestJudgeSlope(t *testing.T) {
	at := minutes(60)
	v := make([]float64, len(at))
	for i := range v {
		v[i] = 100 + 0.5*float64(i) // 30 an hour
	}
	j := judge(at, v, time.Hour, unitCount)
	if math.Abs(j.slope-30) > 1e-6 {
		t.Errorf("slope = %g per hour, want 30", j.slope)
	}
	if j.first != 107.75 || j.second != 122.75 {
		t.Errorf("medians %g and %g, want 107.75 and 122.75", j.first, j.second)
	}
}

func TestMedianAndSlope(t *testing.T) {
	if m := median([]float64{5, 1, 3}); m != 3 {
		t.Errorf("median odd = %g", m)
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median even = %g", m)
	}
	if !math.IsNaN(median(nil)) || !math.IsNaN(slope([]float64{1}, []float64{1})) || !math.IsNaN(slope([]float64{1, 1}, []float64{1, 2})) {
		t.Error("median or slope of too little is not NaN")
	}
}

func TestStat(t *testing.T) {
	s := &snapshot{
		readings: []reading{
			{pid: 1, kind: kindLocal, rss: 100, goroutines: 50},
			{pid: 2, kind: kindQueue, rss: 10, goroutines: 20},
			{pid: 3, kind: kindQueue, rss: 30, goroutines: math.NaN()}, // its metrics did not answer
			{pid: 4, kind: kindApp, rss: 5, goroutines: math.NaN()},
		},
		longLived: map[int]bool{2: true},
	}
	q := isKind(kindQueue)
	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"queue-proxies", stat(s, q, one, aggCount), 2},
		{"their rss, sum", stat(s, q, rssOf, aggSum), 40},
		{"their rss, max", stat(s, q, rssOf, aggMax), 30},
		{"their rss, mean", stat(s, q, rssOf, aggMean), 20},
		{"their goroutines, sum of those known", stat(s, q, goroutinesOf, aggSum), 20},
		{"long-lived rss", stat(s, isLongLived, rssOf, aggMean), 10},
		{"local goroutines", stat(s, isKind(kindLocal), goroutinesOf, aggMean), 50},
		{"no process of a kind: count", stat(&snapshot{}, q, one, aggCount), 0},
	} {
		if c.got != c.want {
			t.Errorf("%s = %g, want %g", c.name, c.got, c.want)
		}
	}
	if v := stat(s, isKind(kindApp), goroutinesOf, aggMax); !math.IsNaN(v) {
		t.Errorf("goroutines of apps, which serve none = %g, want NaN", v)
	}
}

// fakeResult builds a result of n one-minute samples, every fifth at rest,
// where local goroutines follow f and everything else is steady.
func fakeResult(n int, goroutines func(i int) float64) *result {
	r := &result{duration: time.Duration(n) * time.Minute, interval: time.Minute, round: 5 * time.Minute, quiet: 75 * time.Second,
		services: 30, pinned: 3}
	for i := 0; i <= n; i++ {
		s := &snapshot{
			readings: []reading{
				{pid: 1, kind: kindLocal, rss: 40 << 20, fds: 100, goroutines: goroutines(i), heap: 10 << 20, threads: 20},
				{pid: 2, kind: kindQueue, rss: 20 << 20, fds: 20, goroutines: 30, heap: 3 << 20, threads: 8},
			},
			longLived: map[int]bool{2: true},
			churn:     churn{started: map[kind]int{kindQueue: 10 * i}, stopped: map[kind]int{kindQueue: 10 * i}},
		}
		label := ""
		switch i {
		case 0:
			label = "start"
		case n:
			label = "end"
		}
		r.rows = append(r.rows, makeRow(time.Duration(i)*time.Minute, label, i%5 == 0, s))
	}
	r.totals = totals{sent: 1000, answered: 998, ok: 997, notOK: 1, lost: 2, failed: 3,
		codes: map[int]uint64{200: 997, 503: 1, 0: 2}, errors: map[string]uint64{"503 Service Unavailable": 1, "timeout": 2}}
	r.churn = churn{started: map[kind]int{kindQueue: 10 * n}, stopped: map[kind]int{kindQueue: 10 * n}}
	r.exit = "exited 0 after SIGTERM"
	return r
}

func TestSummary(t *testing.T) {
	var b strings.Builder
	if err := writeSummary(&b, fakeResult(30, func(int) float64 { return 120 })); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	for _, want := range []string{
		"Verdict: **flat**",
		"| **swell local: goroutines** | 120 | 120 | 120 | 120 → 120 | 120 | 120 | +0 | +0 | yes |",
		"31 samples, one every 1m0s and one at the end of each 5m0s round (its last 1m15s without traffic); 6 of those after the start were at rest",
		"| swell local: goroutines | 120 | 120 | +0 |",
		"| **swell local: resident memory** | 40.0 MiB | 40.0 MiB |",
		"| sent | 1000 |",
		"| not answered | 2 |",
		"Status codes: none: 2, 200: 997, 503: 1.",
		"- 2 × timeout\n- 1 × 503 Service Unavailable",
		"300 queue-proxies and 0 apps started",
		"no process left behind",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "requests sent") {
		t.Error("cumulative counters are in the table")
	}

	b.Reset()
	r := fakeResult(30, func(i int) float64 { return 120 + 3*float64(i) })
	r.leftovers = []string{"queue-proxy (pid 7)"}
	if err := writeSummary(&b, r); err != nil {
		t.Fatal(err)
	}
	got = b.String()
	for _, want := range []string{
		"Verdict: **not flat**: swell local: goroutines.",
		// At rest: 5, 10, 15 → 30 | 20, 25, 30; medians 150 and 195.
		"| **swell local: goroutines** | 120 | 210 | 210 | 144 → 189 | 150 | 195 | +45 | +180 | **no** (allowed +15) |",
		"left behind: queue-proxy (pid 7)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary of a growing run lacks %q:\n%s", want, got)
		}
	}
}

func TestCSV(t *testing.T) {
	r := fakeResult(2, func(int) float64 { return 120 })
	r.rows[1].v[col("local_heap_bytes")] = math.NaN()
	var b strings.Builder
	if err := writeCSV(&b, r.rows); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(strings.NewReader(b.String())).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 4 || len(recs[0]) != 3+len(columns) {
		t.Fatalf("%d records of %d fields, want 4 of %d", len(recs), len(recs[0]), 3+len(columns))
	}
	if recs[1][2] != "1" || recs[2][2] != "0" {
		t.Errorf("at_rest column: %q %q, want 1 (the start) and 0", recs[1][2], recs[2][2])
	}
	heap := 3 + col("local_heap_bytes")
	if recs[0][heap] != "local_heap_bytes" || recs[1][heap] != "10485760" || recs[2][heap] != "" {
		t.Errorf("heap column: %q %q %q", recs[0][heap], recs[1][heap], recs[2][heap])
	}
	if recs[3][0] != "120" || recs[3][1] != "end" {
		t.Errorf("last row starts %q, want 120 seconds, end", recs[3][:2])
	}
}

func TestFormat(t *testing.T) {
	for _, c := range []struct {
		v    float64
		u    unit
		want string
	}{
		{3 << 20, unitBytes, "3.0 MiB"},
		{42, unitCount, "42"},
		{16.25, unitCount, "16.2"},
		{math.NaN(), unitCount, "—"},
	} {
		if got := format(c.v, c.u); got != c.want {
			t.Errorf("format(%g) = %q, want %q", c.v, got, c.want)
		}
	}
	if got := signed(roundTo(-0.01, unitCount), unitCount); got != "+0" {
		t.Errorf("a tiny negative slope reads %q, want +0", got)
	}
}
