package sim

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/swell-run/swell/pkg/autoscaling"
)

// cpuColumn is a timeline's cpu (or cpu_seen) column as the CSV writes
// it, "-" for a second with none.
func cpuColumn(tl []Second, seen bool) string {
	var out []string
	for _, r := range tl {
		v, has := r.CPU, r.HasCPU
		if seen {
			v, has = r.CPUSeen, r.HasCPUSeen
		}
		if !has {
			out = append(out, "-")
			continue
		}
		out = append(out, string(appendDecimal(nil, v)))
	}
	return strings.Join(out, " ")
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// TestCPUModel: a request at full speed keeps one of its pod's capacity
// slots busy, each slot a capacity-th of the pod's cores; a pod's CPU over
// a second is the time-average of its busy slots, summed over the ready
// pods. Each case is small enough to work out by hand.
func TestCPUModel(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cc, cap  int
		cores    float64
		ready    int
		flags    []string
		reqs     []Request
		duration time.Duration
		want     string // the cpu column, second by second
	}{
		{
			// Busy from 0.25s to 0.75s: half of the first second.
			name: "one request, half a second", cc: 1, ready: 1,
			reqs: []Request{{ms(250), ms(500)}}, duration: 2 * time.Second,
			want: "0.5 0",
		},
		{
			// 0.75s to 1.25s: a quarter in each second.
			name: "across a second's end", cc: 1, ready: 1,
			reqs: []Request{{ms(750), ms(500)}}, duration: 2 * time.Second,
			want: "0.25 0.25",
		},
		{
			// Two slots of a core, one busy the whole first second.
			name: "one slot of two", cap: 2, ready: 1,
			reqs: []Request{{0, time.Second}, {0, ms(500)}}, duration: 2 * time.Second,
			want: "0.75 0",
		},
		{
			// 2 cores in 4 slots: a 1.5s request keeps one slot (0.5 core)
			// busy for a second and a half.
			name: "a slot of a larger pod", cap: 4, cores: 2, ready: 1,
			reqs: []Request{{0, ms(1500)}}, duration: 2 * time.Second,
			want: "0.5 0.25",
		},
		{
			// Capacity 1, three requests sharing the pod (1s, 1s, 2s of
			// work): the pod is fully busy until the last finishes at 4s.
			name: "shared beyond capacity", cap: 1, ready: 1,
			reqs: []Request{{0, time.Second}, {0, time.Second}, {0, 2 * time.Second}}, duration: 5 * time.Second,
			want: "1 1 1 1 0",
		},
		{
			// Two pods, one request each for part of the second: the
			// collector sums them.
			name: "summed over pods", cc: 1, ready: 2, flags: []string{"--min-scale", "2", "--max-scale", "2", "--target-burst-capacity", "0"},
			reqs: []Request{{0, ms(400)}, {0, ms(300)}}, duration: 2 * time.Second,
			want: "0.7 0",
		},
		{
			// From zero: the request at 0.5s pokes for a pod, ready at
			// 2.5s; nobody reports before (no pod is ready), the starting
			// pod uses nothing, and the request runs from 2.5s to 3.5s.
			name: "a starting pod uses none", cc: 1, flags: []string{"--allow-zero-initial-scale", "--initial-scale", "0"},
			reqs: []Request{{ms(500), time.Second}}, duration: 4 * time.Second,
			want: "- - 0.5 0.5",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			flags := tc.flags
			if flags == nil {
				flags = []string{"--min-scale", "1", "--max-scale", "1"}
			}
			cfg := config(specOf(t, tc.cc, flags...))
			cfg.Pods.Capacity, cfg.Pods.Cores = tc.cap, tc.cores
			cfg.InitialReady = tc.ready
			cfg.Duration = tc.duration
			res, _ := run(t, cfg, Requests(tc.reqs))
			n := int(tc.duration / time.Second)
			if got := cpuColumn(res.Timeline[:n], false); got != tc.want {
				t.Errorf("cpu per second %q, want %q", got, tc.want)
			}
			// At a second's resolution the engine is given each second's.
			if got := cpuColumn(res.Timeline[:n], true); got != tc.want {
				t.Errorf("cpu given to the engine %q, want %q", got, tc.want)
			}
		})
	}
}

// TestMetricsResolution: above a second, the engine is given each
// window's average only when the window closes, for each of its seconds.
func TestMetricsResolution(t *testing.T) {
	// One pod busy 1, 0, 0.5, 0.5, 0, 0.25 of seconds 0 to 5.
	reqs := []Request{{0, time.Second}, {ms(2500), time.Second}, {5 * time.Second, ms(250)}}
	for _, tc := range []struct {
		resolution time.Duration
		seen       string
	}{
		{0, "1 0 0.5 0.5 0 0.25"},
		{time.Second, "1 0 0.5 0.5 0 0.25"},
		{2 * time.Second, "- 0.5 - 0.5 - 0.125"},
		{3 * time.Second, "- - 0.5 - - 0.25"},
		// The second window is not whole when the simulation ends.
		{4 * time.Second, "- - - 0.5 - -"},
	} {
		t.Run(tc.resolution.String(), func(t *testing.T) {
			cfg := config(specOf(t, 1, "--min-scale", "1", "--max-scale", "1"))
			cfg.InitialReady = 1
			cfg.Duration = 6 * time.Second
			cfg.MetricsResolution = tc.resolution
			res, _ := run(t, cfg, Requests(reqs))
			if got := cpuColumn(res.Timeline[:6], false); got != "1 0 0.5 0.5 0 0.25" {
				t.Errorf("cpu %q: the resolution changes what the engine sees, not what the pods use", got)
			}
			if got := cpuColumn(res.Timeline[:6], true); got != tc.seen {
				t.Errorf("cpu given to the engine %q, want %q", got, tc.seen)
			}
		})
	}

	// The engine decides on what it was given: one pod kept busy from 0
	// at a 50% target is two pods' worth, which it asks for at the first
	// tick (every 2s) after it is told. At a resolution of 1s that is the
	// tick at 2s (the samples of 1s and 2s); at 3s, the first window
	// closes at 3s and the tick at 4s sees it; at 4s, the tick at 4s
	// itself (the second closes first); at 5s, the tick at 6s.
	for _, tc := range []struct {
		resolution time.Duration
		up         int
	}{{time.Second, 2}, {3 * time.Second, 4}, {4 * time.Second, 4}, {5 * time.Second, 6}} {
		cfg := config(specOf(t, 1, "--metric", "cpu", "--cpu-target", "50%", "--max-scale", "2"))
		cfg.InitialReady = 1
		cfg.MetricsResolution = tc.resolution
		cfg.Duration = 10 * time.Second
		res, _ := run(t, cfg, Requests([]Request{{0, 10 * time.Second}}))
		up := -1
		for _, r := range res.Timeline {
			if r.Scale == 2 {
				up = r.T
				break
			}
		}
		if up != tc.up {
			t.Errorf("resolution %s: first asked for 2 pods in second %d, want %d", tc.resolution, up, tc.up)
		}
	}
}

// TestScalesOnCPU: a step from 0.5 to 2 cores of work (2.5 then 10
// requests a second of 200ms, a core each while served) needs one pod at
// 70%, then three (2 / 0.7 = 2.9); every policy, starting with one pod,
// keeps it until the step and ends with three. (hpa passes four on the
// way, draining the backlog of the minute it took to grow, and keeps them
// for its 5-minute down-stabilization: the run lasts long enough.)
func TestScalesOnCPU(t *testing.T) {
	prof := Profile{Shape: ShapeStep, Rate: 2.5, StepRate: 10, StepAt: 2 * time.Minute, Duration: 10 * time.Minute,
		Arrivals: ArrivalsUniform, ServiceTime: 200 * time.Millisecond}
	if err := prof.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, class := range []string{"kpa", "hpa", "exponential", "pid", "adaptive"} {
		t.Run(class, func(t *testing.T) {
			cfg := config(specOf(t, 1, "--class", class, "--metric", "cpu", "--cpu-target", "70%"))
			if got := cfg.PodsAtTarget(prof.StepRate, prof.ServiceTime); got != 3 {
				t.Fatalf("PodsAtTarget %d, want 3", got)
			}
			if got := cfg.PodsAtTarget(prof.Rate, prof.ServiceTime); got != 1 {
				t.Fatalf("PodsAtTarget before the step %d, want 1", got)
			}
			cfg.InitialReady = 1
			res, _ := run(t, cfg, prof.Source())
			before := res.Timeline[int(prof.StepAt/time.Second)-1]
			last := res.Timeline[int(prof.Duration/time.Second)-1]
			if before.Ready != 1 || last.Ready != 3 || last.Scale != 3 {
				t.Errorf("ready %d before the step, %d (scale %d) at the end; want 1, then 3", before.Ready, last.Ready, last.Scale)
			}
			if !(last.CPU > 1.9 && last.CPU < 2.1) {
				t.Errorf("cpu %v at the end, want 2 cores", last.CPU)
			}
			res.React(prof.StepAt, 3)
			if r := res.Summary.Reaction; r.FirstUp < 0 || r.Reached < r.FirstUp {
				t.Errorf("reaction %+v: want a scale-up, then three pods ready", r)
			}
		})
	}
}

func TestReact(t *testing.T) {
	res := &Result{Timeline: []Second{
		{T: 0, Scale: 2, Ready: 2}, {T: 1, Scale: 2, Ready: 2}, {T: 2, Scale: 2, Ready: 2},
		{T: 3, Scale: 1, Ready: 2}, {T: 4, Scale: 4, Ready: 1}, {T: 5, Scale: 4, Ready: 3}, {T: 6, Scale: 4, Ready: 4},
	}}
	for _, tc := range []struct {
		at               time.Duration
		pods             int
		firstUp, reached time.Duration
	}{
		// Up from the 2 standing before 2s in second 4; 4 ready in 6.
		{2 * time.Second, 4, 2 * time.Second, 4 * time.Second},
		// Ready already at the rise.
		{2 * time.Second, 2, 2 * time.Second, 0},
		{0, 5, 0, -1},
		// Up from the 1 standing before 4s at once.
		{4 * time.Second, 4, 0, 2 * time.Second},
		// Nothing above the 4 standing before 5s.
		{5 * time.Second, 4, -1, time.Second},
	} {
		res.React(tc.at, tc.pods)
		if r := res.Summary.Reaction; r.FirstUp != tc.firstUp || r.Reached != tc.reached {
			t.Errorf("React(%s, %d): first up %s, reached %s; want %s, %s", tc.at, tc.pods, r.FirstUp, r.Reached, tc.firstUp, tc.reached)
		}
	}
}

func TestPodsAtTarget(t *testing.T) {
	for _, tc := range []struct {
		cc, cap int
		cores   float64
		flags   []string
		rate    float64
		work    time.Duration
		want    int
	}{
		// 35/s × 200ms = 7 busy cores at 0.7 a pod.
		{cc: 1, rate: 35, work: ms(200), want: 10},
		// 4 slots of 2 cores: 7 busy slots are 3.5 cores, at 1.4 a pod.
		{cap: 4, cores: 2, rate: 35, work: ms(200), want: 3},
		// A target in cores: 7 cores at 0.5 a pod.
		{cc: 1, flags: []string{"--cpu-target", "500m"}, rate: 35, work: ms(200), want: 14},
		// Unlimited pods: no CPU to tell.
		{rate: 35, work: ms(200), want: 0},
	} {
		cfg := config(specOf(t, tc.cc, tc.flags...))
		cfg.Pods.Capacity, cfg.Pods.Cores = tc.cap, tc.cores
		if got := cfg.PodsAtTarget(tc.rate, tc.work); got != tc.want {
			t.Errorf("%+v: %d pods, want %d", tc, got, tc.want)
		}
	}
}

func TestCPUValidate(t *testing.T) {
	for _, tc := range []struct {
		cc    int
		flags []string
		edit  func(*Config)
		want  []string
	}{
		{flags: []string{"--metric", "cpu"}, want: []string{`pod-capacity: "0" (with no container concurrency either) leaves a pod no full speed`}},
		{cc: 1, flags: []string{"--metric", "concurrency,memory", "--memory-target", "1Gi"},
			want: []string{`metric: "memory" is not simulated`}},
		{cc: 1, edit: func(c *Config) { c.Pods.Cores = -1 }, want: []string{`pod-cores: "-1" is not a number of cores`}},
		{cc: 1, edit: func(c *Config) { c.MetricsResolution = 1500 * time.Millisecond },
			want: []string{`metrics-resolution: "1.5s" is out of range; accepted: a whole number of seconds`}},
		{cc: 1, edit: func(c *Config) { c.MetricsResolution = time.Hour }, want: []string{`metrics-resolution: "1h0m0s" is out of range`}},
	} {
		cfg := config(specOf(t, tc.cc, tc.flags...))
		if tc.edit != nil {
			tc.edit(&cfg)
		}
		err := cfg.Validate()
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%v %v: error %v, want %q", tc.flags, cfg.Pods, err, w)
			}
		}
		var ae *autoscaling.Error
		if err != nil && !errors.As(err, &ae) {
			t.Errorf("%v: not an *autoscaling.Error", err)
		}
		if _, err := Run(context.Background(), cfg, Requests(nil)); err == nil {
			t.Errorf("%v: Run ran", tc.flags)
		}
	}
}
