package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/swell-run/swell/hack/scale/pods"
	"github.com/swell-run/swell/pkg/shard"
)

// Three replicas and ten buckets: 4, 3 and 3 buckets, as the Leases
// settle; every service's replica leads its bucket.
func TestScaleSizeLead(t *testing.T) {
	size := scaleSize{services: 10000, buckets: 10, replicas: 3}
	want := [][]int{{0, 3, 6, 9}, {1, 4, 7}, {2, 5, 8}}
	for i, w := range want {
		if got := size.lead(i); !slices.Equal(got, w) {
			t.Errorf("replica %d leads %v, want %v", i, got, w)
		}
	}
	for i := range 100 {
		key := fmt.Sprintf("scale/svc-%05d", i)
		if b := shard.Of(key, 10); !slices.Contains(size.lead(size.replicaOf(key)), b) {
			t.Errorf("%s (bucket %d) goes to replica %d, leading %v", key, b, size.replicaOf(key), size.lead(size.replicaOf(key)))
		}
	}
	one := scaleSize{services: 1000, buckets: 1, replicas: 1}
	if !slices.Equal(one.lead(0), []int{0}) || one.replicaOf("scale/svc-00007") != 0 || one.sharded() || !size.sharded() {
		t.Errorf("one leader: leads %v", one.lead(0))
	}
	if one.name() != "1000" || size.name() != "10000-shard" {
		t.Errorf("names %q, %q", one.name(), size.name())
	}
}

func TestScaleFleetProcesses(t *testing.T) {
	for _, tt := range []struct {
		pods  int
		limit uint64
		want  int
	}{
		{5000, 20000, 1},
		{15000, 20000, 1},
		{18976, 20000, 1},
		{18977, 20000, 2},
		{50000, 20000, 3},  // this machine's 10,000 services, pulling
		{100000, 20000, 6}, // and pushing
		{50000, 1 << 20, 1},
		{50000, 0, 1}, // unknown
		{50000, 1000, 1},
	} {
		if got := scaleFleetProcesses(tt.pods, tt.limit); got != tt.want {
			t.Errorf("%d connections, limit %d: %d processes, want %d", tt.pods, tt.limit, got, tt.want)
		}
	}
	if scaleFleetConns(50000, scaleModePull) != 50000 || scaleFleetConns(50000, scaleModePush) != 100000 {
		t.Errorf("50,000 pods hold %d connections pulled, %d pushing", scaleFleetConns(50000, scaleModePull), scaleFleetConns(50000, scaleModePush))
	}
}

func TestInterleave(t *testing.T) {
	got := interleave([][]string{{"a1", "a2", "a3"}, {"b1"}, nil, {"c1", "c2"}})
	if want := []string{"a1", "b1", "c1", "a2", "c2", "a3"}; !slices.Equal(got, want) {
		t.Errorf("%v, want %v", got, want)
	}
	if got := interleave[int](nil); len(got) != 0 {
		t.Errorf("nothing interleaved: %v", got)
	}
}

// shardResult is a sharded size measured: replica 1 the most loaded.
func shardResult() scaleResult {
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	step := func(kind string, ms int) scaleStep {
		s := scaleStep{service: "scale/x", kind: kind, served: t0}
		if ms >= 0 {
			s.wrote = t0.Add(time.Duration(ms) * time.Millisecond)
		}
		return s
	}
	rep := func(lead []int, services int, cpu float64, rss int64, round float64, steps ...scaleStep) scaleReplica {
		return scaleReplica{lead: lead, services: services, pods: 5 * services, readyPods: 4 * services, cpu: cpu, mem: memory{RSS: rss << 20},
			roundP99: round, rounds: 60, scrapes: map[string]float64{"ok": float64(services) * 240}, activators: 3,
			writes: map[string]uint64{"scale": uint64(services / 10)}, steps: steps}
	}
	r := scaleResult{size: scaleSize{services: 10000, buckets: 10, replicas: 3}, mode: scaleModePull, pods: 50000, measured: true, window: time.Minute,
		fleetProcs: 3, fleetCPU: 0.3,
		replicas: []scaleReplica{
			rep([]int{0, 3, 6, 9}, 3990, 0.40, 300, 0.25, step(pods.KindBusy, 2000), step(pods.KindZero, 2)),
			rep([]int{1, 4, 7}, 3020, 0.50, 250, 0.30, step(pods.KindBusy, 3500)),
			rep([]int{2, 5, 8}, 2990, 0.25, 240, 0.20, step(pods.KindBusy, -1)),
		}}
	r.replicas[1].missing = 120 // 2 services a second
	return r
}

func TestScaleShardLines(t *testing.T) {
	got := scaleShardLines(shardResult())
	want := []string{
		"scale-shard mode=pull replica=0 buckets=4 services=3990 pods=19950 cpu_cores=0.40 rss_mib=300 unsampled=0.0 scrape_p99_ms=250 decide_p99_ms=2000",
		"scale-shard mode=pull replica=1 buckets=3 services=3020 pods=15100 cpu_cores=0.50 rss_mib=250 unsampled=2.0 scrape_p99_ms=300 decide_p99_ms=3500",
		"scale-shard mode=pull replica=2 buckets=3 services=2990 pods=14950 cpu_cores=0.25 rss_mib=240 unsampled=0.0 scrape_p99_ms=200 decide_p99_ms=inf",
		// CPU, memory and services without a sample summed, the slowest
		// round, every step, 0.50 ÷ 0.25.
		"scale-shard mode=pull replicas=3 buckets=10 services=10000 pods=50000 cpu_cores=1.15 rss_mib=790 unsampled=2.0 scrape_p99_ms=300 decide_p99_ms=inf cpu_max_min=2.00",
	}
	if !slices.Equal(got, want) {
		t.Errorf("lines\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// None of them is a one-leader size's line, which the chart reads.
	if pts, err := parseScaleLines(strings.NewReader(strings.Join(got, "\n"))); err == nil {
		t.Errorf("the chart read sharded lines: %v", pts)
	}
	failed := scaleResult{size: scaleSize{services: 10000, buckets: 10, replicas: 3}, mode: scaleModePush, pods: 50000, err: errors.New("fleet exited")}
	if got, want := scaleShardLines(failed), []string{`scale-shard mode=push replicas=3 buckets=10 services=10000 pods=50000 failed="fleet exited"`}; !slices.Equal(got, want) {
		t.Errorf("failed: %q, want %q", got, want)
	}
}

func TestScaleShardSection(t *testing.T) {
	r := shardResult()
	single := scaleResult{size: scaleSize{services: 10000, buckets: 1, replicas: 1}, pods: 50000, measured: true, window: time.Minute,
		replicas: []scaleReplica{{cpu: 1.16, mem: memory{RSS: 715 << 20}, scrapes: map[string]float64{"ok": 9e5}, writes: map[string]uint64{"scale": 600}}}}
	s := scaleShardSection(r, &single, scaleTimings(false))
	wantHeader := []string{"metric", "replica 0 (buckets 0,3,6,9)", "replica 1 (buckets 1,4,7)", "replica 2 (buckets 2,5,8)", "all", "max ÷ min", "one leader, same run"}
	if !slices.Equal(s.header, wantHeader) {
		t.Errorf("header %q, want %q", s.header, wantHeader)
	}
	rows := map[string][]string{}
	for _, row := range s.rows {
		if len(row) != len(wantHeader) {
			t.Errorf("row %q has %d cells, want %d", row[0], len(row), len(wantHeader))
		}
		rows[row[0]] = row[1:]
	}
	for name, want := range map[string][]string{
		"**CPU, of one core**":                              {"0.40", "0.50", "0.25", "1.15", "2.00×", "1.16"},
		"RSS at the end":                                    {"300.0 MiB", "250.0 MiB", "240.0 MiB", "790.0 MiB", "1.25×", "715.0 MiB"},
		"scale writes; most in one second":                  {"7/s; 0", "5/s; 0", "5/s; 0", "17/s", "1.33×", "10/s; 0"},
		"services; the fleet's pods; pods ready at the end": {"3990; 19950; 15960", "3020; 15100; 12080", "2990; 14950; 11960", "10000; 50000; 40000", "1.33×", "0; 0; 0"},
	} {
		if got := rows[name]; !slices.Equal(got, want) {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	if got := rows["busy step → scale write"][3]; !strings.Contains(got, "(2 steps); **1 without a write**") {
		t.Errorf("every busy step: %q", got)
	}
	notes := strings.Join(s.notes, "\n")
	if !strings.Contains(notes, "CPU 1.15 of 1.16 cores in all (0.99×), the most loaded replica 0.43× the one leader's") {
		t.Errorf("notes %q", notes)
	}

	// Without the one leader, no column for it.
	if s := scaleShardSection(r, nil, scaleTimings(false)); len(s.header) != len(wantHeader)-1 {
		t.Errorf("without the one leader: header %q", s.header)
	}
	if got := rows["**services without a sample, a second**"]; !slices.Equal(got, []string{"0.0", "2.0", "0.0", "2.0", "", "0.0"}) {
		t.Errorf("services without a sample: %q", got)
	}

	// Pushing, the pushes have rows of their own, and the title says so.
	r.mode = scaleModePush
	for i := range r.replicas {
		r.replicas[i].pushing = float64(r.replicas[i].readyPods)
	}
	s = scaleShardSection(r, nil, scaleTimings(false))
	if !strings.HasSuffix(s.title, "led by 3 autoscalers, push") || !strings.Contains(s.text, "redirects (307)") {
		t.Errorf("pushing: title %q, text %q", s.title, s.text)
	}
	for _, row := range s.rows {
		if row[0] == "pods pushing at the end; frames applied" {
			if want := []string{row[0], "15960; 0/s", "12080; 0/s", "11960; 0/s", "40000", "1.33×"}; !slices.Equal(row, want) {
				t.Errorf("pods pushing: %q, want %q", row, want)
			}
			return
		}
	}
	t.Errorf("pushing, no row of the pods pushing: %q", s.rows)
}
