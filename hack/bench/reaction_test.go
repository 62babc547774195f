package main

import (
	"strings"
	"testing"
	"time"

	"github.com/swell-run/swell/local"
)

func TestParseScale(t *testing.T) {
	for _, tt := range []struct {
		text     string
		from, to int
		ok       bool
	}{
		{"hello: scale 1→2 (cpu: panic: wants 2 pods for 1 ready at target 70)", 1, 2, true},
		{"hello: scale 10→4 (stable at target 70)", 10, 4, true},
		{"hello: scale 0→1", 0, 1, true},
		{"hello: route activator→pods (excess burst capacity 35)", 0, 0, false},
		{"hello: scale x→2 (why)", 0, 0, false},
		{"hello: error: scale failed (retry in 1s)", 0, 0, false},
	} {
		from, to, ok := parseScale(tt.text)
		if from != tt.from || to != tt.to || ok != tt.ok {
			t.Errorf("parseScale(%q) = %d, %d, %v; want %d, %d, %v", tt.text, from, to, ok, tt.from, tt.to, tt.ok)
		}
	}
}

func TestFirstScaleUpSkipsEarlierAndOtherEvents(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	ev := func(after time.Duration, text string) local.Event {
		return local.Event{Time: t0.Add(after), Text: text}
	}
	events := []local.Event{
		ev(-time.Second, "hello: scale 1→2 (an earlier step)"),
		ev(time.Second, "hello: route activator→pods (excess burst capacity 35)"),
		ev(2*time.Second, "hello: scale 2→1 (stable at target 70)"),
		ev(3*time.Second, "hello: scale 1→3 (gauge: panic: wants 3 pods for 1 ready at target 70)"),
		ev(4*time.Second, "hello: scale 3→5 (gauge: panic: wants 5 pods for 3 ready at target 70)"),
	}
	got, ok := firstScaleUp(events, t0)
	if !ok || got != events[3] {
		t.Errorf("got %v, %v; want %v", got, ok, events[3])
	}
	if _, ok := firstScaleUp(events[:3], t0); ok {
		t.Error("found a scale up among events without one after t0")
	}
}

func TestReactionTrialObserve(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	st := func(ready, desired int, events ...local.Event) local.ServiceStatus {
		return local.ServiceStatus{Ready: ready, Desired: desired, Events: events}
	}
	up := local.Event{Time: t0.Add(3800 * time.Millisecond), Text: "hello: scale 1→2 (cpu: panic: wants 2 pods for 1 ready at target 70)"}
	var r reactionTrial
	for _, o := range []struct {
		at time.Duration
		st local.ServiceStatus
	}{
		{50 * time.Millisecond, st(1, 1)},
		{3850 * time.Millisecond, st(1, 2, up)},
		{3900 * time.Millisecond, st(2, 2, up)},
		{6 * time.Second, st(3, 7, up)},
		{14 * time.Second, st(4, 4, up)},
		{16 * time.Second, st(10, 10, up)}, // after reactionObserve: not the most
	} {
		r.observe(o.st, o.at, t0)
		if r.complete(o.at) != (o.at >= reactionObserve) {
			t.Errorf("at %s: complete %v", o.at, r.complete(o.at))
		}
	}
	want := reactionTrial{decided: 3850 * time.Millisecond, first: 2, event: 3800 * time.Millisecond, reason: up.Text,
		ready: 3900 * time.Millisecond, three: 6 * time.Second, most: 7}
	if r != want {
		t.Errorf("got %+v\nwant %+v", r, want)
	}
	var never reactionTrial
	never.observe(st(1, 1), 20*time.Second, t0)
	if never.complete(20 * time.Second) {
		t.Error("a trial that never decided is complete")
	}
}

func TestSpreadCountsMissesAsLatest(t *testing.T) {
	s := func(ms ...int) []time.Duration {
		out := make([]time.Duration, len(ms))
		for i, m := range ms {
			out[i] = time.Duration(m) * time.Millisecond
		}
		return out
	}
	for _, tt := range []struct {
		xs          []time.Duration
		lo, mid, hi string
	}{
		{nil, "—", "—", "—"},
		{s(4000, 3500, 5250), "3.50 s", "4.00 s", "5.25 s"},
		{s(4000, 0, 3000), "3.00 s", "4.00 s", "> 60 s"},
		{s(0, 0, 3000), "3.00 s", "> 60 s", "> 60 s"},
	} {
		lo, mid, hi := spread(tt.xs)
		if lo != tt.lo || mid != tt.mid || hi != tt.hi {
			t.Errorf("spread(%v) = %s, %s, %s; want %s, %s, %s", tt.xs, lo, mid, hi, tt.lo, tt.mid, tt.hi)
		}
	}
}

func TestPercentileOfInts(t *testing.T) {
	if got := percentile([]int{9, 4, 7, 4, 5}, 0.5); got != 5 {
		t.Errorf("p50 %d, want 5", got)
	}
}

func TestLocalCommandLineQuotes(t *testing.T) {
	m := reactionMetric{flags: []string{"--state-dir", "", "--gauge", `q{model="a b"}`, "--metric", "cpu"}}
	want := `swell local --port PORT --admin-port ADMIN --state-dir '' --gauge 'q{model="a b"}' --metric cpu -- swell hello`
	if got := localCommandLine(m); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if got := shellQuote("it's"); got != `'it'\''s'` {
		t.Errorf("shellQuote(it's) = %s", got)
	}
}

func TestReactionReport(t *testing.T) {
	trial := func(decided, ready, three time.Duration, most int) reactionTrial {
		return reactionTrial{decided: decided, first: 2, event: decided - 20*time.Millisecond, ready: ready, three: three,
			most: most, reason: "hello: scale 1→2 (cpu: panic: wants 2 pods for 1 ready at target 70)", sent: 60}
	}
	metrics := map[string]reactionMetric{}
	for _, m := range reactionMetrics() {
		metrics[m.name] = m
	}
	runs := []reactionRun{
		{metric: metrics["cpu"], trials: []reactionTrial{
			trial(3800*time.Millisecond, 3900*time.Millisecond, 6*time.Second, 4),
			trial(5100*time.Millisecond, 5200*time.Millisecond, 8*time.Second, 7),
			trial(4400*time.Millisecond, 4500*time.Millisecond, 7*time.Second, 5),
		}},
		{metric: metrics["gauge"], trials: []reactionTrial{trial(0, 0, 0, 1)}},
	}
	runs[0].trials[1].bad = 2
	s := reactionReport(runs, 20*time.Second)
	byFigure := map[string][]string{}
	for _, r := range s.rows {
		if len(r) != len(s.header) {
			t.Fatalf("row %v has %d cells, header %d", r, len(r), len(s.header))
		}
		byFigure[r[0]] = r
	}
	for figure, want := range map[string][3]string{
		"Swell local, cpu: decided (status shows desired > 1)":      {"3.80 s", "4.40 s", "5.10 s"},
		"Swell local, cpu: the scale-up event's own time":           {"3.78 s", "4.38 s", "5.08 s"},
		"Swell local, cpu: 3 replicas ready":                        {"6.00 s", "7.00 s", "8.00 s"},
		"Swell local, cpu: most replicas desired in the first 15 s": {"4", "5", "7"},
		"Swell local, gauge: decided (status shows desired > 1)":    {"> 60 s", "> 60 s", "> 60 s"},
		"Kubernetes HPA, cpu: decided (documented)":                 {"15 s", "—", "30 s"},
		"KEDA, external gauge: decided (documented)":                {"0 s", "—", "30 s"},
	} {
		row := byFigure[figure]
		if row == nil || row[1] != want[0] || row[2] != want[1] || row[3] != want[2] {
			t.Errorf("%s: row %v, want min, p50, max %v", figure, row, want)
		}
	}
	notes := strings.Join(s.notes, "\n")
	for _, want := range []string{
		"`swell local --port PORT --admin-port ADMIN --name hello --min-scale 1 --state-dir '' --metric cpu --cpu-target 100m -- swell hello`",
		"--metric gauge --gauge hello_jobs_waiting --gauge-target 2 -- swell hello",
		"cpu trial 2: 2 of 60",
	} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
	if !strings.Contains(s.text, "idle for 20 s") {
		t.Errorf("text lacks the idle time: %s", s.text)
	}
	if lines := strings.Count(s.code, "\n"); lines != 1+4 {
		t.Errorf("per-trial listing has %d lines, want a header and 4 trials:\n%s", lines, s.code)
	}
}
