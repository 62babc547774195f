package main

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/swell-run/swell/hack/scale/pods"
)

func TestScaleLine(t *testing.T) {
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	step := func(kind string, ms int) scaleStep {
		s := scaleStep{service: "scale/x", kind: kind, served: t0}
		if ms >= 0 {
			s.wrote = t0.Add(time.Duration(ms) * time.Millisecond)
		}
		return s
	}
	// Four busy steps and a poke: the line's latencies are the busy
	// steps', the p50 the second of four.
	r := scaleResult{size: scaleSize{services: 10000, buckets: 1, replicas: 1}, mode: scaleModePush, pods: 50000, measured: true, window: time.Minute,
		replicas: []scaleReplica{{cpu: 0.437, mem: memory{RSS: 735 << 20}, roundP99: 0.2487, rounds: 60, missing: 3,
			steps: []scaleStep{step(pods.KindBusy, 180), step(pods.KindBusy, 240), step(pods.KindZero, 3), step(pods.KindBusy, 120), step(pods.KindBusy, 900)}}}}
	if got, want := scaleLine(r), "scale mode=push services=10000 pods=50000 cpu_cores=0.44 rss_mib=735 unsampled=0.1 step_p50_ms=180 step_p99_ms=900"; got != want {
		t.Errorf("line\n%s\nwant\n%s", got, want)
	}
	// A step whose write never came is the longest of all.
	r.replicas[0].steps = append(r.replicas[0].steps, step(pods.KindBusy, -1))
	if got := scaleLine(r); !strings.HasSuffix(got, " step_p50_ms=240 step_p99_ms=inf") {
		t.Errorf("with a step unanswered: %s", got)
	}
	// Only pokes: no busy step.
	r.replicas[0].steps = []scaleStep{step(pods.KindZero, 2)}
	if got := scaleLine(r); !strings.HasSuffix(got, " step_p50_ms=nan step_p99_ms=nan") {
		t.Errorf("without busy steps: %s", got)
	}
	// A size that never measured says why, on its line.
	failed := scaleResult{size: scaleSize{services: 10000, buckets: 1, replicas: 1}, mode: scaleModePull, pods: 50000, err: errors.New("fleet exited")}
	if got, want := scaleLine(failed), `scale mode=pull services=10000 pods=50000 failed="fleet exited"`; got != want {
		t.Errorf("failed size: %s, want %s", got, want)
	}
	// The chart reads the line back: with services a second without a
	// sample, a size that did not keep up.
	pts, err := parseScaleLines(strings.NewReader(scaleLine(r)))
	if want := (scalePoint{mode: scaleModePush, services: 10000, cpu: 0.44, rss: 735}); err != nil || len(pts) != 1 || pts[0] != want {
		t.Errorf("the chart reads %+v, %v; want %+v", pts, err, want)
	}
}

// The one-leader table: a column for each mode, the figures only one mode
// has "—" in the other's.
func TestScaleSection(t *testing.T) {
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	busy := func(ms int) scaleStep {
		return scaleStep{service: "scale/x", kind: pods.KindBusy, served: t0, wrote: t0.Add(time.Duration(ms) * time.Millisecond)}
	}
	rep := func(cpu float64, missing float64, steps ...scaleStep) scaleReplica {
		return scaleReplica{cpu: cpu, missing: missing, readyPods: 44000, scrapes: map[string]float64{"ok": 60000}, writes: map[string]uint64{},
			steps: steps, pushing: 44000, pushApplied: 2.6e6, pushedReads: 2.5e6, pushRejected: map[string]float64{"elsewhere": 60}}
	}
	size := scaleSize{services: 10000, buckets: 1, replicas: 1}
	pull := scaleResult{size: size, mode: scaleModePull, pods: 50000, measured: true, window: time.Minute, replicas: []scaleReplica{rep(0.75, 409800, busy(3600))}}
	push := scaleResult{size: size, mode: scaleModePush, pods: 50000, measured: true, window: time.Minute, replicas: []scaleReplica{rep(0.45, 0, busy(160))}}
	s := scaleSection([]scaleResult{pull, push}, scaleTimings(false))
	if want := []string{"metric", "pull", "push"}; !slices.Equal(s.header, want) {
		t.Errorf("header %q, want %q", s.header, want)
	}
	rows := map[string][]string{}
	for _, row := range s.rows {
		rows[row[0]] = row[1:]
	}
	for name, want := range map[string][]string{
		"**autoscaler CPU, of one core**":                   {"0.75", "0.45"},
		"**services without a sample, a second**":           {"6830.0", "0.0"},
		"pods pushing at the end; frames applied, dropped":  {"—", "44000; 43333/s, 0/s"},
		"push connections refused; closed":                  {"—", "elsewhere 1/s; none"},
		"pod reports a round read: scraped; pushed":         {"1000/s; 41667/s", "1000/s; 41667/s"},
		"services; the fleet's pods; pods ready at the end": {"10000; 50000; 44000", "10000; 50000; 44000"},
	} {
		if got := rows[name]; !slices.Equal(got, want) {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	if got := rows["**busy step → scale write** (scrape or push, window, tick or sharp push)"]; len(got) != 2 || !strings.Contains(got[1], "p50 160.0 ms") {
		t.Errorf("busy steps %q", got)
	}
	// A mode that failed: its column says so, and its notes why.
	push.measured, push.err = false, errors.New("fleet exited")
	s = scaleSection([]scaleResult{pull, push}, scaleTimings(false))
	if s.rows[1][2] != "—" || !strings.Contains(strings.Join(s.notes, "\n"), "push: did not run to the end: fleet exited") {
		t.Errorf("failed push: row %q, notes %q", s.rows[1], s.notes)
	}
}

func TestParseScaleModes(t *testing.T) {
	got, err := parseScaleModes(strings.Join(scaleModes, ","))
	if err != nil || !slices.Equal(got, []string{"pull", "push"}) {
		t.Errorf("the default modes read back as %q, %v", got, err)
	}
	if got, err := parseScaleModes(" push "); err != nil || !slices.Equal(got, []string{"push"}) {
		t.Errorf("push alone: %q, %v", got, err)
	}
	_, err = parseScaleModes("push,poll,push")
	for _, want := range []string{`unknown mode "poll": accepted are pull, push`, "mode push named twice"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}

const scaleExposition = `# TYPE swell_autoscaler_collection_round_duration_seconds histogram
swell_autoscaler_collection_round_duration_seconds_bucket{le="0.1"} %d
swell_autoscaler_collection_round_duration_seconds_bucket{le="0.25"} %d
swell_autoscaler_collection_round_duration_seconds_bucket{le="0.5"} %d
swell_autoscaler_collection_round_duration_seconds_bucket{le="+Inf"} %d
swell_autoscaler_collection_round_duration_seconds_sum %g
swell_autoscaler_collection_round_duration_seconds_count %d
# TYPE swell_autoscaler_scrapes_total counter
swell_autoscaler_scrapes_total{result="ok"} %d
swell_autoscaler_scrapes_total{result="timeout"} 7
`

func TestScaleHistogram(t *testing.T) {
	read := func(b1, b2, b3, inf int, sum float64, ok int) histogram {
		t.Helper()
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(strings.NewReader(fmt.Sprintf(scaleExposition, b1, b2, b3, inf, sum, inf, ok)))
		if err != nil {
			t.Fatal(err)
		}
		if by := counterByLabel(fams, "swell_autoscaler_scrapes_total", "result"); by["ok"] != float64(ok) || by["timeout"] != 7 {
			t.Errorf("scrapes by result %v", by)
		}
		h, _ := histogramOf(fams, "swell_autoscaler_collection_round_duration_seconds")
		return h
	}
	before := read(10, 10, 10, 10, 0.5, 100)
	after := read(10, 60, 108, 110, 30.5, 200)
	// 100 rounds in the window: 50 in (0.1, 0.25], 48 in (0.25, 0.5], 2 beyond.
	d := after.since(before)
	if d.count() != 100 || math.Abs(d.sum-30) > 1e-9 {
		t.Fatalf("window: %d rounds, sum %v", d.count(), d.sum)
	}
	for _, tt := range []struct{ q, want float64 }{
		{0.5, 0.25},
		{0.25, 0.175},
		{0.74, 0.375},
		{0.99, 0.5}, // past the last finite bound: that bound
		{0, 0.1},    // the lower edge of the first bucket holding any
	} {
		if got := d.quantile(tt.q); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("q%v = %v, want %v", tt.q, got, tt.want)
		}
	}
	if missing, ok := histogramOf(nil, "missing"); (histogram{}).quantile(0.99) != 0 || ok || missing.count() != 0 {
		t.Error("an empty histogram has a quantile")
	}
}

func TestScaleTargets(t *testing.T) {
	mk := func(kinds string) []pods.Service {
		var svcs []pods.Service
		for i, k := range strings.Split(kinds, ",") {
			kind := map[string]string{"b": pods.KindBusy, "z": pods.KindZero, "i": pods.KindIdle, "u": pods.KindBursting}[k]
			svcs = append(svcs, pods.Service{Service: fmt.Sprintf("scale/s%02d", i), Kind: kind})
		}
		return svcs
	}
	for _, tt := range []struct {
		kinds string
		steps int
		want  string
	}{
		// Busy s00 s02 s04 s06 s08 s10 s12 s14; zero s01 s05 s09 s13:
		// two busy, one zero, each kind spread over the order.
		{"b,z,b,i,b,z,b,u,b,z,b,i,b,z,b", 6, "s02,s06,s05,s10,s14,s13"},
		// Too few zero services: busy ones make up the steps.
		{"b,b,b,b,z", 6, "s00,s01,s04,s02,s03"},
		{"i,u", 3, ""},
	} {
		var got []string
		for _, s := range scaleTargets(mk(tt.kinds), tt.steps) {
			got = append(got, s.Service[len("scale/"):])
		}
		if strings.Join(got, ",") != tt.want {
			t.Errorf("%s, %d steps: %v, want %s", tt.kinds, tt.steps, got, tt.want)
		}
	}
}

func TestScaleConditions(t *testing.T) {
	ok := scaleResult{window: 10 * time.Second, replicas: []scaleReplica{{openFDs: 5000, maxFD: 20000, scrapes: map[string]float64{"ok": 1e5}}}}
	if n := scaleConditions(ok); len(n) != 0 {
		t.Errorf("nothing limited, yet %q", n)
	}
	worn := scaleResult{window: 10 * time.Second, fleetFDExhausted: 12, replicas: []scaleReplica{{missing: 56000, openFDs: 19904, maxFD: 20000,
		scrapes: map[string]float64{"ok": 1e5, "error": 19000}}}}
	// Pushing, the pods the autoscaler had no room for.
	pushed := scaleResult{mode: scaleModePush, window: 10 * time.Second, replicas: []scaleReplica{{readyPods: 44000, pushing: 18976, maxFD: 20000,
		pushRejected: map[string]float64{"too-many": 25000}}}}
	if got := strings.Join(scaleConditions(pushed), "\n"); !strings.Contains(got, "push connections from 18976 of its 44000 ready pods**: the rest were refused (2500 a second) for want of files: the open-file limit, 20000") {
		t.Errorf("pushing conditions %q", got)
	}
	got := strings.Join(scaleConditions(worn), "\n")
	for _, want := range []string{"The autoscaler's rounds ran out of time**: 5600 services a second had no sample", "The autoscaler ran out of file descriptors**: 19904 open of 20000", "12 times"} {
		if !strings.Contains(got, want) {
			t.Errorf("conditions %q lack %q", got, want)
		}
	}
	// Sharded, each replica's are its own.
	worn.replicas = append([]scaleReplica{{}}, worn.replicas...)
	got = strings.Join(scaleConditions(worn), "\n")
	if !strings.Contains(got, "Replica 1's rounds ran out of time") || strings.Contains(got, "Replica 0") {
		t.Errorf("sharded conditions %q", got)
	}
}

func TestParseScaleSizes(t *testing.T) {
	got, err := parseScaleSizes(scaleSizesFlag(scaleSizes))
	if err != nil || !slices.Equal(got, scaleSizes) {
		t.Errorf("the default sizes read back as %+v, %v", got, err)
	}
	got, err = parseScaleSizes(" 500 ,20000/16/4")
	if want := []scaleSize{{500, 1, 1}, {20000, 16, 4}}; err != nil || !slices.Equal(got, want) {
		t.Errorf("sizes %+v, %v; want %+v", got, err, want)
	}
	// Every bad size, each with what is accepted.
	_, err = parseScaleSizes("0,ten,10000/10,10000/10/1,10000/3/4,10000/65/3,1000")
	for _, bad := range []string{`"0"`, `"ten"`, `"10000/10"`, `"10000/10/1"`, `"10000/3/4"`, `"10000/65/3"`} {
		if err == nil || !strings.Contains(err.Error(), "size "+bad+": accepted is N services") {
			t.Errorf("error %v lacks size %s", err, bad)
		}
	}
	if strings.Contains(err.Error(), `"1000"`) {
		t.Errorf("a good size reported: %v", err)
	}
}

// Pushing, an autoscaler process holds a connection from every pod that
// may be ready: a size past the open-file limit is not run, and says
// what to raise.
func TestScalePushFits(t *testing.T) {
	svcs := func(n int, kind string) []pods.Service {
		out := make([]pods.Service, n)
		for i := range out {
			out[i] = pods.Service{Service: fmt.Sprintf("scale/svc-%05d", i), Kind: kind, Pods: make([]string, 5)}
		}
		return out
	}
	one := scaleSize{services: 10000, buckets: 1, replicas: 1}
	// 9,000 services that may be ready, 45,000 pods; those at zero do
	// not count.
	all := append(svcs(9000, pods.KindBusy), svcs(1000, pods.KindZero)...)
	err := scalePushFits(one, [][]pods.Service{all}, 20000)
	if err == nil || !strings.Contains(err.Error(), "the autoscaler would hold a connection from each of 45000 pods that may be ready and 1024 files more, 46024 in all, past the hard open-file limit of 20000") {
		t.Errorf("one leader of 10,000: %v", err)
	}
	if err := scalePushFits(one, [][]pods.Service{all}, 1<<20); err != nil {
		t.Errorf("with room: %v", err)
	}
	if err := scalePushFits(one, [][]pods.Service{all}, 0); err != nil {
		t.Errorf("limit unknown: %v", err)
	}
	sharded := scaleSize{services: 10000, buckets: 10, replicas: 3}
	byReplica := [][]pods.Service{append(svcs(3600, pods.KindBusy), svcs(400, pods.KindZero)...), svcs(3000, pods.KindIdle), svcs(3900, pods.KindBusy)}
	if err := scalePushFits(sharded, byReplica, 20000); err == nil || !strings.Contains(err.Error(), "replica 2 would hold a connection from each of 19500 pods") {
		t.Errorf("sharded: %v", err)
	}
	if err := scalePushFits(sharded, byReplica[:2], 20000); err != nil {
		t.Errorf("replicas 0 and 1 fit: %v", err)
	}
}
