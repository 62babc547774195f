package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The activator observes every request it admits, from 0.5 ms; a
// queue-proxy only those that waited, from 1 ms.
const exposition = `# TYPE swell_activator_queue_wait_seconds histogram
swell_activator_queue_wait_seconds_bucket{le="0.0005"} 90
swell_activator_queue_wait_seconds_bucket{le="0.001"} 96
swell_activator_queue_wait_seconds_bucket{le="0.002"} 97
swell_activator_queue_wait_seconds_bucket{le="1.024"} 98
swell_activator_queue_wait_seconds_bucket{le="2.048"} 100
swell_activator_queue_wait_seconds_bucket{le="+Inf"} 100
swell_activator_queue_wait_seconds_sum 4
swell_activator_queue_wait_seconds_count 100
# TYPE swell_queue_wait_seconds histogram
swell_queue_wait_seconds_bucket{le="0.001"} 0
swell_queue_wait_seconds_bucket{le="0.002"} 1
swell_queue_wait_seconds_bucket{le="1.024"} 1
swell_queue_wait_seconds_bucket{le="2.048"} 1
swell_queue_wait_seconds_bucket{le="+Inf"} 2
swell_queue_wait_seconds_sum 80
swell_queue_wait_seconds_count 2
# TYPE swell_local_replica_seconds_total counter
swell_local_replica_seconds_total{service="a"} 12.5
swell_local_replica_seconds_total{service="b"} 2.5
`

func TestWaitHistograms(t *testing.T) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(exposition))
	if err != nil {
		t.Fatal(err)
	}
	if got := counterOf(fams, "swell_local_replica_seconds_total"); got != 15 {
		t.Errorf("replica-seconds summed over services: %v, want 15", got)
	}
	act, ok := histogramOf(fams, "swell_activator_queue_wait_seconds")
	if !ok {
		t.Fatal("no activator histogram")
	}
	qp, _ := histogramOf(fams, "swell_queue_wait_seconds")
	if _, ok := histogramOf(fams, "swell_missing"); ok {
		t.Error("a missing histogram reads as present")
	}
	// 4 of the activator's 100 waited more than 1 ms (one ≤ 2 ms, one
	// ≤ 1.024 s, two ≤ 2.048 s), and both of the queue-proxy's (one ≤ 2 ms,
	// one past every bound).
	w := act.add(qp)
	if got := w.above(waitFloor); got != 6 {
		t.Errorf("waited: %d, want 6", got)
	}
	// Ranks 1-2 ≤ 2 ms, 3 ≤ 1.024 s, 4-5 ≤ 2.048 s, 6 past the last bound.
	for _, tt := range []struct{ q, want float64 }{
		{0.3, 0.002}, {0.5, 1.024}, {0.8, 2.048}, {0.99, math.Inf(1)},
	} {
		if got := w.boundAbove(tt.q, waitFloor); got != tt.want {
			t.Errorf("q%v: %v, want %v", tt.q, got, tt.want)
		}
	}
	if got := (histogram{}).boundAbove(0.5, waitFloor); got != 0 {
		t.Errorf("no waits: q50 %v, want 0", got)
	}
	if bound(0) != "—" || bound(math.Inf(1)) != "> 65 s" || bound(1.024) != "≤ 1.024s" {
		t.Errorf("bounds read %q, %q, %q", bound(0), bound(math.Inf(1)), bound(1.024))
	}
}

func TestWriteSlice(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "t.csv")
	os.WriteFile(src, []byte("TIMESTAMP,ContextTokens,GeneratedTokens\n"+
		"2023-11-16 18:00:00.0,10,1\n2023-11-16 18:00:30.5,10,100\n2023-11-16 18:01:00.0,10,1\n"), 0o644)
	dst := filepath.Join(dir, "slice.csv")
	n, err := writeSlice(src, dst, time.Minute)
	if err != nil || n != 2 {
		t.Fatalf("slice: %d rows, %v; want the 2 arrivals before 1m", n, err)
	}
	b, _ := os.ReadFile(dst)
	want := "t,service_time\n0.000000,0.025000\n30.500000,2.005000\n"
	if string(b) != want {
		t.Errorf("slice:\n%s\nwant:\n%s", b, want)
	}
	if _, err := writeSlice(src, dst, 0); err == nil {
		t.Error("an empty slice wrote no error")
	}
}
