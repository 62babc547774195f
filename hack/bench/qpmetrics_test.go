package main

import (
	"strings"
	"testing"
	"time"

	"github.com/swell-run/swell/pkg/loadgen"
)

func TestPerSecondAndRatio(t *testing.T) {
	if got := perSecond(30*time.Millisecond, 20*time.Second); got != 1.5 {
		t.Errorf("30 ms over 20 s: %v ms/s, want 1.5", got)
	}
	if got := perSecond(time.Second, 0); got != 0 {
		t.Errorf("no window: %v, want 0", got)
	}
	for _, tt := range []struct {
		with, without float64
		want          string
	}{
		{3, 2, "1.50×"},
		{1, 0, "—"},
		{0, 0, "—"},
	} {
		if got := ratioText(tt.with, tt.without); got != tt.want {
			t.Errorf("ratioText(%v, %v) = %s, want %s", tt.with, tt.without, got, tt.want)
		}
	}
}

func TestMeterReport(t *testing.T) {
	s := func(requests uint64, qp, app time.Duration, p50 time.Duration) sample {
		var r loadgen.Result
		r.Requests, r.Successes, r.Rate = requests, requests, 2000
		r.Latency.P50, r.Latency.P99 = p50, 4*p50
		return sample{loadRun: loadRun{Result: r}, qpCPU: qp, appCPU: app}
	}
	// Two rounds: the meter's queue-proxy spends 10% more per request in
	// the first and 20% more in the second.
	rate := pair{
		direct: []sample{s(20000, 5*time.Second, 2*time.Second, time.Millisecond), s(20000, 6*time.Second, 2*time.Second, time.Millisecond)},
		via:    []sample{s(20000, 5500*time.Millisecond, 2*time.Second, time.Millisecond), s(20000, 7200*time.Millisecond, 2*time.Second, 2*time.Millisecond)},
	}
	idle := idleCPU{window: 20 * time.Second, qp: [2]time.Duration{20 * time.Millisecond, 40 * time.Millisecond}}
	idleMem := [2]memory{{RSS: 10 << 20}, {RSS: 12 << 20}}
	peakMem := [2]memory{{Peak: 14 << 20}, {Peak: 14 << 20}}
	sec := meterReport(options{reps: 2, duration: 10 * time.Second}, idle, rate, idleMem, peakMem, meterCheck{cpu: 0.25})
	byMetric := map[string][]string{}
	for _, r := range sec.rows {
		if len(r) != len(sec.header) {
			t.Fatalf("row %v has %d cells, header %d", r, len(r), len(sec.header))
		}
		byMetric[r[0]] = r
	}
	for metric, want := range map[string][]string{
		"Queue-proxy CPU per 1,000 requests at 2000 req/s": {"275.0 ms", "317.5 ms", "1.15×", "+42.500 ms"},
		"Latency at 2000 req/s, p50":                       {"1.000 ms", "1.500 ms", "", "+0.500 ms"},
		"Queue-proxy CPU idle, per second":                 {"1.00 ms/s", "2.00 ms/s", "2.00×", "+1.00 ms/s"},
		"App CPU idle, per second":                         {"0.00 ms/s", "0.00 ms/s", "—", "+0.00 ms/s"},
		"Queue-proxy RSS after the idle window":            {"10.0 MiB", "12.0 MiB", "1.20×", "+2.0 MiB"},
		"Queue-proxy peak RSS (VmHWM) after all runs":      {"14.0 MiB", "14.0 MiB", "1.00×", "+0.0 MiB"},
	} {
		row := byMetric[metric]
		if row == nil || strings.Join(row[1:], "|") != strings.Join(want, "|") {
			t.Errorf("%s: row %v, want %v", metric, row, want)
		}
	}
	if !strings.Contains(strings.Join(sec.notes, "\n"), "app CPU 0.250 cores") {
		t.Errorf("notes lack the meter's reading: %v", sec.notes)
	}
}
