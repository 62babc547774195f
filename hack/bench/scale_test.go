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
	r := scaleResult{size: scaleSize{services: 1000, buckets: 1, replicas: 1}, pods: 5000, measured: true, replicas: []scaleReplica{{
		cpu: 0.237, mem: memory{RSS: 135 << 20}, roundP99: 0.2487, rounds: 60,
		steps: []scaleStep{step(pods.KindBusy, 1800), step(pods.KindBusy, 2400), step(pods.KindZero, 3)}}}}
	if got, want := scaleLine(r), "scale services=1000 pods=5000 cpu_cores=0.24 rss_mib=135 scrape_p99_ms=249 decide_p99_ms=2400"; got != want {
		t.Errorf("line\n%s\nwant\n%s", got, want)
	}
	// A step whose write never came is the longest of all.
	r.replicas[0].steps = append(r.replicas[0].steps, step(pods.KindBusy, -1))
	if got := scaleLine(r); !strings.HasSuffix(got, " decide_p99_ms=inf") {
		t.Errorf("with a step unanswered: %s", got)
	}
	r.replicas[0].steps = nil
	if got := scaleLine(r); !strings.HasSuffix(got, " decide_p99_ms=nan") {
		t.Errorf("without steps: %s", got)
	}
	// A size that never measured says why, on its line.
	failed := scaleResult{size: scaleSize{services: 10000, buckets: 1, replicas: 1}, pods: 50000, err: errors.New("fleet exited")}
	if got, want := scaleLine(failed), `scale services=10000 pods=50000 failed="fleet exited"`; got != want {
		t.Errorf("failed size: %s, want %s", got, want)
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
