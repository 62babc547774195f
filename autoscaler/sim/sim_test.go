package sim

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"flag"
	"io"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/swell-run/swell/pkg/autoscaling"
)

// specOf resolves autoscaling flags as `swell sim` does.
func specOf(t *testing.T, cc int, args ...string) autoscaling.Spec {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := autoscaling.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("flags %v: %v", args, err)
	}
	spec, _, err := f.Resolve(cc, autoscaling.DefaultDefaults())
	if err != nil {
		t.Fatalf("flags %v: %v", args, err)
	}
	return spec
}

func config(spec autoscaling.Spec) Config {
	return Config{Spec: spec, Tick: 2 * time.Second, Pods: PodModel{StartupDelay: 2 * time.Second}}
}

// run simulates and also returns the simulation's internals.
func run(t *testing.T, cfg Config, src Source) (*Result, *sim) {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	s := newSim(cfg, src)
	if err := s.run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s.zeroWithRequests > 0 {
		t.Errorf("scaled to zero %d times with requests in the system", s.zeroWithRequests)
	}
	return s.result(), s
}

func TestColdStartFromZeroWaitsStartupDelay(t *testing.T) {
	// A service at zero (initial-scale 0): a request at 5.3s pokes the
	// engine, which asks for a pod at once; the request waits exactly the
	// pod's startup.
	spec := specOf(t, 0, "--allow-zero-initial-scale", "--initial-scale", "0")
	res, _ := run(t, config(spec), Requests([]Request{{Arrival: 5300 * time.Millisecond, Work: 100 * time.Millisecond}}))
	s := res.Summary
	if s.Requests != 1 || s.Completed != 1 || s.ColdStarts != 1 || s.Pokes != 1 || s.Waited != 1 {
		t.Fatalf("summary %+v", s)
	}
	if s.WaitP50 != 2*time.Second || s.WaitP99 != 2*time.Second || s.WaitMax != 2*time.Second {
		t.Errorf("waits p50 %s p99 %s max %s, want 2s each", s.WaitP50, s.WaitP99, s.WaitMax)
	}
	if s.LatencyMax != 2100*time.Millisecond || s.LatencyMean != 2100*time.Millisecond {
		t.Errorf("latency mean %s max %s, want 2.1s", s.LatencyMean, s.LatencyMax)
	}
	// No pod before the request; one from it on.
	for _, r := range res.Timeline[:5] {
		if r.Pods != 0 {
			t.Errorf("second %d: %d pods before any request", r.T, r.Pods)
		}
	}
	if r := res.Timeline[5]; r.Pods != 1 || r.Ready != 0 || r.ActivatorQueue != 1 || !r.ActivatorInPath {
		t.Errorf("second 5: %+v, want a starting pod and the request queued at the activator", r)
	}
	if r := res.Timeline[7]; r.Ready != 1 || r.ActivatorQueue != 0 {
		t.Errorf("second 7: %+v, want the pod ready and nothing queued", r)
	}
}

func TestContainerConcurrencyHolds(t *testing.T) {
	// One pod admitting one request at a time; three requests of 1s at 0.
	// They are served one after the other, wherever they wait: at the
	// activator (target-burst-capacity keeps it in the path) or at the
	// pod's queue-proxy (target-burst-capacity 0 takes it out).
	for _, tc := range []struct {
		tbc                string
		activator, podWait int
	}{
		{"211", 2, 0},
		{"0", 0, 2},
	} {
		t.Run("tbc="+tc.tbc, func(t *testing.T) {
			spec := specOf(t, 1, "--min-scale", "1", "--max-scale", "1", "--target-burst-capacity", tc.tbc)
			cfg := config(spec)
			cfg.InitialReady = 1
			reqs := []Request{{0, time.Second}, {0, time.Second}, {0, time.Second}}
			res, _ := run(t, cfg, Requests(reqs))
			s := res.Summary
			if s.Completed != 3 || s.Waited != 2 || s.WaitP50 != time.Second || s.WaitMax != 2*time.Second || s.LatencyMax != 3*time.Second {
				t.Errorf("summary %+v", s)
			}
			r := res.Timeline[0]
			if r.InService != 1 || r.ActivatorQueue != tc.activator || r.PodQueue != tc.podWait {
				t.Errorf("second 0: %d in service, %d at the activator, %d at the pod; want 1, %d, %d",
					r.InService, r.ActivatorQueue, r.PodQueue, tc.activator, tc.podWait)
			}
			for _, r := range res.Timeline {
				if r.InService > 1 {
					t.Errorf("second %d: %d in service at one pod with containerConcurrency 1", r.T, r.InService)
				}
			}
		})
	}
}

func TestQueueLimitRejects(t *testing.T) {
	spec := specOf(t, 1, "--min-scale", "1", "--max-scale", "1")
	cfg := config(spec)
	cfg.InitialReady = 1
	cfg.QueueLimit = 1
	res, _ := run(t, cfg, Requests([]Request{{0, time.Second}, {0, time.Second}, {0, time.Second}}))
	if s := res.Summary; s.Requests != 3 || s.Completed != 2 || s.Rejected != 1 || res.Timeline[0].Rejected != 1 {
		t.Errorf("summary %+v, row %+v", s, res.Timeline[0])
	}
}

func TestProcessorSharing(t *testing.T) {
	// Capacity 1, no hard limit: three requests share the pod. The two of
	// 1s finish together after 3s (each got a third of the pod), the one
	// of 2s has its last second alone.
	spec := specOf(t, 0, "--min-scale", "1", "--max-scale", "1", "--target-burst-capacity", "0")
	cfg := config(spec)
	cfg.InitialReady = 1
	cfg.Pods.Capacity = 1
	res, s := run(t, cfg, Requests([]Request{{0, time.Second}, {0, time.Second}, {0, 2 * time.Second}}))
	want := []time.Duration{3 * time.Second, 3 * time.Second, 4 * time.Second}
	if !reflect.DeepEqual(s.latencies, want) {
		t.Errorf("latencies %v, want %v", s.latencies, want)
	}
	if res.Summary.Waited != 0 {
		t.Errorf("%d waited: sharing is not waiting", res.Summary.Waited)
	}
}

func TestConstantLoadExact(t *testing.T) {
	// 10 requests a second, evenly spaced, of 0.5s each: 5 in the system
	// once the first half second has passed. Five pods at target 1 carry
	// exactly that, so the count never moves and pod-seconds are 5 per
	// simulated second.
	spec := specOf(t, 0, "--target", "1", "--target-utilization-percentage", "100")
	cfg := config(spec)
	cfg.InitialReady = 5
	prof := Profile{Shape: ShapeConstant, Rate: 10, Duration: 10 * time.Second, Arrivals: ArrivalsUniform, ServiceTime: 500 * time.Millisecond}
	if err := prof.Validate(); err != nil {
		t.Fatal(err)
	}
	res, _ := run(t, cfg, prof.Source())
	s := res.Summary
	// The last request arrives at 9.9s and finishes at 10.4s: 11 seconds.
	if s.Duration != 11*time.Second || s.Requests != 100 || s.Completed != 100 || s.Waited != 0 || s.ColdStarts != 0 {
		t.Fatalf("summary %+v", s)
	}
	if s.PodSeconds != 55 || s.ReadyPodSeconds != 55 || s.MaxPods != 5 || s.PodStarts != 5 {
		t.Errorf("pod-seconds %v (ready %v), max %d, started %d; want 55, 55, 5, 5", s.PodSeconds, s.ReadyPodSeconds, s.MaxPods, s.PodStarts)
	}
	// Time-weighted: second 0 ramps 1,2,3,4 over 0.1s each then 5 for
	// 0.6s (4.0); the last second drains 4,3,2,1 over 0.1s each (1.0).
	var conc []float64
	for _, r := range res.Timeline {
		conc = append(conc, r.Concurrency)
		if r.Ready != 5 || r.Scale != 5 {
			t.Errorf("second %d: ready %d scale %d, want 5", r.T, r.Ready, r.Scale)
		}
		if r.T < 10 && r.Arrivals != 10 {
			t.Errorf("second %d: %d arrivals, want 10", r.T, r.Arrivals)
		}
	}
	want := []float64{4, 5, 5, 5, 5, 5, 5, 5, 5, 5, 1}
	if !reflect.DeepEqual(conc, want) {
		t.Errorf("concurrency per second %v, want %v", conc, want)
	}
}

func TestOnOffScalesToZeroAndColdStartsAgain(t *testing.T) {
	// One request a second for a minute, two minutes of silence, another
	// minute. Default kpa: the last request (59s) is in the sample of the
	// second ending at 60s; the 60s stable window is empty of it from the
	// tick at 120s on, long after the 30s grace period, and the activator
	// is already in the path (one pod's burst capacity is short of 211),
	// so the service goes to zero at 120s. The first request of the next
	// phase (180s) finds no pod, pokes, and it and the next wait for the
	// new pod. (Knative's timing: class kpa.)
	spec := specOf(t, 0, "--class", "kpa")
	prof := Profile{Shape: ShapeOnOff, Rate: 1, On: time.Minute, Off: 2 * time.Minute, Duration: 4 * time.Minute,
		Arrivals: ArrivalsUniform, ServiceTime: 100 * time.Millisecond}
	res, _ := run(t, config(spec), prof.Source())
	s := res.Summary
	if s.Requests != 120 || s.Completed != 120 {
		t.Fatalf("summary %+v", s)
	}
	// 0s and 1s wait for the first pod (asked for at the first tick, ready
	// at 2s); 180s and 181s for the pod the poke asks for.
	if s.ColdStarts != 4 || s.Pokes != 1 || s.Waited != 4 {
		t.Errorf("cold starts %d, pokes %d, waited %d; want 4, 1, 4", s.ColdStarts, s.Pokes, s.Waited)
	}
	if s.WaitMax != 2*time.Second || s.WaitP50 != time.Second {
		t.Errorf("waits p50 %s max %s, want 1s and 2s", s.WaitP50, s.WaitMax)
	}
	zero := -1
	for _, r := range res.Timeline {
		if r.T >= 60 && r.Pods == 0 {
			zero = r.T
			break
		}
	}
	if zero != 120 {
		t.Errorf("went to zero in second %d, want 120", zero)
	}
	for _, r := range res.Timeline[120:180] {
		if r.Pods != 0 {
			t.Errorf("second %d: %d pods during the silence", r.T, r.Pods)
		}
	}
	if r := res.Timeline[182]; r.Ready != 1 {
		t.Errorf("second 182: %d ready, want the woken pod", r.Ready)
	}
	// The pod existed from 0 to 120 and from 180 to the end (240).
	if s.PodSeconds != 120+60 {
		t.Errorf("pod-seconds %v, want 180", s.PodSeconds)
	}
}

func TestRouteDelay(t *testing.T) {
	// target-burst-capacity 0 takes the activator out of the path once a
	// pod is up. The service starts with no pod, so through the activator;
	// the first tick (0s) asks for a pod (ready at 2s). As the executor
	// does, the route to the pods is asked for only once the pod is ready,
	// and a route delay of 3s makes it take effect at 5s.
	spec := specOf(t, 0, "--min-scale", "1", "--target-burst-capacity", "0")
	cfg := config(spec)
	cfg.RouteDelay = 3 * time.Second
	cfg.Duration = 6 * time.Second
	res, _ := run(t, cfg, Requests([]Request{{5 * time.Second, time.Millisecond}}))
	var path []bool
	for _, r := range res.Timeline {
		path = append(path, r.ActivatorInPath)
	}
	// Each row is the state at the second's end; a change at an instant
	// counts from that instant on, so the row ending at 5s still has the
	// activator.
	want := []bool{true, true, true, true, true, false}
	if !reflect.DeepEqual(path, want) {
		t.Errorf("activator in the path per second %v, want %v", path, want)
	}
}

// TestExecutorRulesApply: the simulator applies decisions by the
// executor's rules, as the autoscaler does. A burst at 30s scales up; the
// scale-down after it waits out the down-hold from the last scale-up; the
// activator goes in before zero, and zero waits for the switch to take
// effect.
func TestExecutorRulesApply(t *testing.T) {
	spec := specOf(t, 0, "--target", "1", "--target-utilization-percentage", "100", "--target-burst-capacity", "0",
		"--window", "6s", "--panic-window-percentage", "50", "--scale-to-zero-grace-period", "2s")
	cfg := config(spec)
	cfg.RouteDelay = 5 * time.Second
	cfg.Rules.DownHold = 20 * time.Second
	cfg.Duration = 90 * time.Second
	// Four five-second requests at once at 30s: four pods wanted.
	var reqs []Request
	for range 4 {
		reqs = append(reqs, Request{Arrival: 30 * time.Second, Work: 5 * time.Second})
	}
	res, _ := run(t, cfg, Requests(reqs))
	up, down, idle, zero := -1, -1, -1, -1
	for _, r := range res.Timeline[31:] {
		prev := res.Timeline[r.T-1]
		switch {
		case down < 0 && r.Pods > prev.Pods:
			up = r.T
		case up >= 0 && down < 0 && r.Pods < prev.Pods:
			down = r.T
		}
		if down >= 0 && idle < 0 && r.Desired == 0 {
			idle = r.T
		}
		if idle >= 0 && zero < 0 && r.Pods == 0 {
			zero = r.T
		}
	}
	if up < 0 || down < 0 || idle < 0 || zero < 0 {
		t.Fatalf("no burst, scale-down and zero in the timeline: up %d, down %d, idle %d, zero %d", up, down, idle, zero)
	}
	if down-up != 20 {
		t.Errorf("last scaled up in second %d and first down in second %d; want the 20s down-hold", up, down)
	}
	if res.Timeline[idle].ActivatorInPath || zero-idle < 5 {
		t.Errorf("idle from second %d (activator in path: %v), zero in second %d: zero must wait for the 5s switch to the activator",
			idle, res.Timeline[idle].ActivatorInPath, zero)
	}
}

func TestDeterministic(t *testing.T) {
	spec := specOf(t, 4)
	cfg := config(spec)
	cfg.Pods.StartupJitter = time.Second
	cfg.Seed = 7
	prof := Profile{Shape: ShapeSpike, Rate: 5, SpikeRate: 80, SpikeAt: 30 * time.Second, SpikeFor: 20 * time.Second,
		Duration: 2 * time.Minute, ServiceTime: 300 * time.Millisecond, ServiceDist: ServiceExponential, Seed: 3}
	a, _ := run(t, cfg, prof.Source())
	b, _ := run(t, cfg, prof.Source())
	if !reflect.DeepEqual(a, b) {
		t.Error("two runs of the same configuration differ")
	}
	if a.Summary.MaxPods < 3 {
		t.Errorf("a spike of 80/s × 0.3s at 2.8 per pod should scale out: %+v", a.Summary)
	}
}

func TestNoScaleToZeroWithRequestsInSystem(t *testing.T) {
	// Long requests in a sparse on/off load, with short grace periods and
	// windows that make scale to zero eager: run checks on every scale
	// that none goes to zero with a request queued or in service.
	for _, class := range []string{"kpa", "hpa", "exponential", "pid"} {
		t.Run(class, func(t *testing.T) {
			spec := specOf(t, 2, "--class", class, "--window", "6s", "--scale-to-zero-grace-period", "1s",
				"--hpa-scale-down-stabilization-window", "0s")
			cfg := config(spec)
			cfg.Pods.StartupJitter = 3 * time.Second
			prof := Profile{Shape: ShapeOnOff, Rate: 0.5, On: 20 * time.Second, Off: 40 * time.Second, Duration: 5 * time.Minute,
				ServiceTime: 10 * time.Second, ServiceDist: ServiceExponential, Seed: 11}
			res, _ := run(t, cfg, prof.Source())
			if res.Summary.Unfinished != 0 || res.Summary.Completed != res.Summary.Requests {
				t.Errorf("summary %+v", res.Summary)
			}
			// The check means something only if the service does go to
			// zero between the phases.
			zeros := 0
			for _, r := range res.Timeline[20:] {
				if r.Pods == 0 {
					zeros++
				}
			}
			if zeros == 0 || res.Summary.Pokes == 0 {
				t.Errorf("never at zero (%d seconds) or never poked (%d)", zeros, res.Summary.Pokes)
			}
		})
	}
}

func TestRunValidates(t *testing.T) {
	cfg := config(specOf(t, 0))
	cfg.Tick = 0
	cfg.Pods.StartupDelay = -time.Second
	cfg.QueueLimit = -1
	_, err := Run(context.Background(), cfg, Requests(nil))
	// Every problem at once, each as the one error type, naming the
	// setting, its value and what is accepted.
	var keys []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var ae *autoscaling.Error
		if !errors.As(e, &ae) || ae.Accepted == "" {
			t.Errorf("problem %v is not an *autoscaling.Error saying what is accepted", e)
			continue
		}
		keys = append(keys, ae.Key)
	}
	if want := []string{KeyTick, KeyPodStartup, KeyQueueLimit}; !reflect.DeepEqual(keys, want) {
		t.Errorf("Run with three bad settings: problems with %v, want %v (%v)", keys, want, err)
	}
	if !strings.Contains(err.Error(), `tick-interval: "0s" is not positive; accepted: a positive duration`) {
		t.Errorf("error text: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cfg = config(specOf(t, 0))
	prof := Profile{Shape: ShapeConstant, Rate: 1, Duration: time.Hour}
	if _, err := Run(ctx, cfg, prof.Source()); err != context.Canceled {
		t.Errorf("Run with a cancelled context: %v", err)
	}
}

func TestWriteComparison(t *testing.T) {
	var b bytes.Buffer
	err := WriteComparison(&b, []Summary{
		{Class: "kpa", PodSeconds: 1234.56, OraclePodSeconds: 600, StartingPodSeconds: 100.04, ServingPodSeconds: 834.5, IdlePodSeconds: 300.02,
			ColdStarts: 3, Waited: 12, WaitP50: 20 * time.Millisecond, WaitP99: 1234567 * time.Microsecond, MaxPods: 7, OracleMaxPods: 4},
		{Class: "exponential", PodSeconds: 99, ServingPodSeconds: 99, Rejected: 4, MaxPods: 12},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "" +
		"policy       pod-seconds  × oracle  starting  serving   idle  cold starts  waited  p50 wait  p99 wait  rejected  max pods  × oracle's\n" +
		"kpa               1234.6     2.06×     100.0    834.5  300.0            3      12      20ms    1.235s         0         7       1.75×\n" +
		"exponential         99.0         -       0.0     99.0    0.0            0       0        0s        0s         4        12           -\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestWriteTimelineAndChart(t *testing.T) {
	tl := []Second{
		{T: 0, Arrivals: 3, Concurrency: 1.23456, Stable: 1, PanicLoad: 2.5, Desired: 1, Scale: 1, EBC: -210, Panic: true, Ready: 0, Pods: 1, ActivatorInPath: true, ActivatorQueue: 2},
		{T: 1, Arrivals: 0, Concurrency: 0.5, CPU: 0.25, HasCPU: true, CPUSeen: 0.125, HasCPUSeen: true, Stable: 1, Desired: 1, Scale: 1, EBC: -211, Ready: 1, Pods: 1, InService: 1, Serving: 1},
	}
	var b bytes.Buffer
	if err := WriteTimeline(&b, tl); err != nil {
		t.Fatal(err)
	}
	want := TimelineHeader + "\n" +
		"0,3,0,1.2346,,,1,2.5,1,1,-210,true,0,1,true,2,0,0,0\n" +
		"1,0,0,0.5,0.25,0.125,1,0,1,1,-211,false,1,1,false,0,0,1,1\n"
	if b.String() != want {
		t.Errorf("timeline\n%s\nwant\n%s", b.String(), want)
	}

	b.Reset()
	if err := WriteChart(&b, tl, autoscaling.MetricConcurrency, "a <title> & more"); err != nil {
		t.Fatal(err)
	}
	// Well-formed XML, with the panic second shaded and three pod lines.
	var doc struct {
		XMLName xml.Name `xml:"svg"`
		Rects   []struct {
			Fill string `xml:"fill,attr"`
		} `xml:"rect"`
		Polylines []struct {
			Points string `xml:"points,attr"`
		} `xml:"polyline"`
		Texts []string `xml:"text"`
	}
	if err := xml.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatalf("chart is not well-formed: %v\n%s", err, b.String())
	}
	panicRects := 0
	for _, r := range doc.Rects {
		if r.Fill == colorPanic {
			panicRects++
		}
	}
	if panicRects != 3 || len(doc.Polylines) != 6 || doc.Texts[0] != "a <title> & more" {
		t.Errorf("chart: %d panic rects (want 2 and the legend's), %d lines (want 6: load, stable, pods, ready, serving, scale), title %q", panicRects, len(doc.Polylines), doc.Texts[0])
	}
}

func TestProfileSource(t *testing.T) {
	count := func(p Profile) []time.Duration {
		t.Helper()
		if err := p.Validate(); err != nil {
			t.Fatal(err)
		}
		var at []time.Duration
		src := p.Source()
		for {
			r, ok := src.Next()
			if !ok {
				return at
			}
			if n := len(at); n > 0 && r.Arrival < at[n-1] {
				t.Fatalf("arrival %s after %s", r.Arrival, at[n-1])
			}
			if r.Arrival >= p.Duration {
				t.Fatalf("arrival %s beyond the duration %s", r.Arrival, p.Duration)
			}
			at = append(at, r.Arrival)
		}
	}
	step := count(Profile{Shape: ShapeStep, Rate: 2, StepRate: 4, StepAt: 5 * time.Second, Duration: 10 * time.Second, Arrivals: ArrivalsUniform})
	if len(step) != 30 || step[9] != 4500*time.Millisecond || step[10] != 5*time.Second || step[11] != 5250*time.Millisecond {
		t.Errorf("step: %d arrivals %v", len(step), step)
	}
	onoff := count(Profile{Shape: ShapeOnOff, Rate: 1, On: 2 * time.Second, Off: 3 * time.Second, Duration: 11 * time.Second, Arrivals: ArrivalsUniform})
	want := []time.Duration{0, time.Second, 5 * time.Second, 6 * time.Second, 10 * time.Second}
	if !reflect.DeepEqual(onoff, want) {
		t.Errorf("onoff: %v, want %v", onoff, want)
	}
	spike := count(Profile{Shape: ShapeSpike, Rate: 0, SpikeRate: 10, SpikeAt: 2 * time.Second, SpikeFor: time.Second, Duration: 5 * time.Second, Arrivals: ArrivalsUniform})
	if len(spike) != 10 || spike[0] != 2*time.Second {
		t.Errorf("spike: %v", spike)
	}
	// Poisson: the count of a long run is near rate × duration (for this
	// seed; a different seed gives different, equally valid arrivals).
	p := count(Profile{Shape: ShapeConstant, Rate: 100, Duration: 100 * time.Second, Seed: 1})
	if len(p) < 9500 || len(p) > 10500 {
		t.Errorf("poisson at 100/s for 100s: %d arrivals", len(p))
	}
	if again := count(Profile{Shape: ShapeConstant, Rate: 100, Duration: 100 * time.Second, Seed: 1}); !reflect.DeepEqual(p, again) {
		t.Error("the same seed gave different arrivals")
	}
	// Exponential service times average their mean.
	src := Profile{Shape: ShapeConstant, Rate: 1000, Duration: 20 * time.Second, ServiceTime: 100 * time.Millisecond, ServiceDist: ServiceExponential}.Source()
	var sum time.Duration
	n := 0
	for r, ok := src.Next(); ok; r, ok = src.Next() {
		sum += r.Work
		n++
	}
	if mean := sum / time.Duration(n); mean < 95*time.Millisecond || mean > 105*time.Millisecond {
		t.Errorf("exponential service time mean %s over %d requests, want about 100ms", mean, n)
	}
}

func TestProfileValidate(t *testing.T) {
	for _, tc := range []struct {
		p    Profile
		want string
	}{
		{Profile{Shape: "wave", Rate: 1, Duration: time.Second}, `--profile "wave": accepted are constant, step, onoff, spike`},
		{Profile{Shape: ShapeConstant, Rate: 0, Duration: time.Second}, "--rate 0: accepted is a number of requests per second above 0"},
		{Profile{Shape: ShapeConstant, Rate: 1}, "--duration 0s: accepted is a positive duration"},
		{Profile{Shape: ShapeStep, Rate: 1, StepRate: 2, StepAt: time.Minute, Duration: time.Second}, "--step-at 1m0s: accepted is a time from 0 to before --duration 1s"},
		{Profile{Shape: ShapeOnOff, Rate: 1, On: 0, Off: time.Second, Duration: time.Second}, "--on 0s: accepted is a positive duration"},
		{Profile{Shape: ShapeConstant, Rate: 1, Duration: time.Second, Arrivals: "bursty"}, `--arrivals "bursty": accepted are poisson and uniform`},
		{Profile{Shape: ShapeConstant, Rate: 1, Duration: time.Second, ServiceDist: "normal"}, `--service-dist "normal": accepted are fixed, exponential and lognormal`},
		{Profile{Shape: ShapeBursts, Rate: 1, Off: time.Minute, BurstSize: 0.5, Duration: time.Hour}, "--burst-size 0.5: accepted is a mean number of requests of 1 or more"},
		{Profile{Shape: ShapeBursts, Rate: 1, BurstSize: 10, Duration: time.Hour}, "--off 0s: accepted is a positive duration"},
	} {
		err := tc.p.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.p, err, tc.want)
		}
	}
}

// BenchmarkSpike simulates half an hour with a flash sale: 100/s, then
// 2000/s for 5 minutes, about 780,000 requests, with hundreds of pods.
func BenchmarkSpike(b *testing.B) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	keys := autoscaling.RegisterFlags(fs)
	spec, _, err := keys.Resolve(10, autoscaling.DefaultDefaults())
	if err != nil {
		b.Fatal(err)
	}
	cfg := Config{Spec: spec, Tick: 2 * time.Second, Pods: PodModel{StartupDelay: 2 * time.Second}}
	prof := Profile{Shape: ShapeSpike, Rate: 100, SpikeRate: 2000, SpikeAt: 10 * time.Minute, SpikeFor: 5 * time.Minute,
		Duration: 30 * time.Minute, ServiceTime: 200 * time.Millisecond, ServiceDist: ServiceExponential, Seed: 1}
	b.ReportAllocs()
	for b.Loop() {
		res, err := Run(context.Background(), cfg, prof.Source())
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(res.Summary.Requests), "requests/op")
	}
}

// TestPodSecondsSplit: bursts after silences, from zero, through kpa: the
// pod-seconds split into starting, serving and idle sums to the whole,
// none negative; pods start (so starting is above zero and at most a
// start's worth per start), and serving covers at least the work over the
// slots; the counters end where they began.
func TestPodSecondsSplit(t *testing.T) {
	const cc = 2
	var reqs []Request
	var work time.Duration
	for burst := range 4 {
		at := time.Duration(burst) * 3 * time.Minute
		for i := range 40 {
			w := time.Duration(100+37*i%900) * time.Millisecond
			reqs = append(reqs, Request{Arrival: at + time.Duration(i)*50*time.Millisecond, Work: w})
			work += w
		}
	}
	cfg := config(specOf(t, cc))
	res, s := run(t, cfg, Requests(reqs))
	sum := res.Summary
	split := sum.StartingPodSeconds + sum.ServingPodSeconds + sum.IdlePodSeconds
	if math.Abs(split-sum.PodSeconds) > 1e-6*sum.PodSeconds || sum.StartingPodSeconds < 0 || sum.ServingPodSeconds < 0 || sum.IdlePodSeconds < -1e-6 {
		t.Errorf("starting %v + serving %v + idle %v = %v, want the %v pod-seconds, none negative",
			sum.StartingPodSeconds, sum.ServingPodSeconds, sum.IdlePodSeconds, split, sum.PodSeconds)
	}
	if sum.PodStarts == 0 || sum.StartingPodSeconds <= 0 || sum.StartingPodSeconds > float64(sum.PodStarts)*cfg.Pods.StartupDelay.Seconds()+1e-9 {
		t.Errorf("%d starts, %v pod-seconds starting; want above 0 and at most %v a start", sum.PodStarts, sum.StartingPodSeconds, cfg.Pods.StartupDelay)
	}
	if floor := work.Seconds() / cc; sum.ServingPodSeconds < floor {
		t.Errorf("serving %v pod-seconds, under the %v the work needs on %d slots a pod", sum.ServingPodSeconds, floor, cc)
	}
	if s.serving != 0 || s.stopping != 0 {
		t.Errorf("at the end: %d pods serving, %d stopping; want none", s.serving, s.stopping)
	}
}

// TestBurstsProfile: bursts of BurstSize requests on average after
// silences of Off on average, both heavy-tailed: over many bursts the
// means come out near the settings, most bursts and silences are below
// their mean and a few far above it, and the service is silent most of
// the time; lognormal service times keep their mean, with the median
// under half of it and a long tail.
func TestBurstsProfile(t *testing.T) {
	p := Profile{Shape: ShapeBursts, Rate: 10, BurstSize: 100, Off: time.Minute, Duration: 200 * time.Hour,
		ServiceTime: 500 * time.Millisecond, ServiceDist: ServiceLognormal, Seed: 3}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	var sizes []float64
	var silences []time.Duration
	var busy time.Duration
	for _, sg := range p.segments() {
		if sg.rate > 0 {
			sizes = append(sizes, (sg.end-sg.start).Seconds()*sg.rate)
			busy += sg.end - sg.start
		} else {
			silences = append(silences, sg.end-sg.start)
		}
	}
	meanSize := 0.0
	for _, n := range sizes {
		meanSize += n / float64(len(sizes))
	}
	var meanOff time.Duration
	for _, d := range silences {
		meanOff += d / time.Duration(len(silences))
	}
	// Shape 1.5 has an infinite variance: the sample mean converges
	// slowly, so the bounds are loose.
	if len(sizes) < 1000 || meanSize < 70 || meanSize > 140 || meanOff < 40*time.Second || meanOff > 90*time.Second {
		t.Errorf("%d bursts of %.1f requests on average after %s silences; want about 100 and 1m", len(sizes), meanSize, meanOff)
	}
	slices.Sort(sizes)
	slices.Sort(silences)
	if med := sizes[len(sizes)/2]; med >= 100 || sizes[len(sizes)*99/100] < 300 {
		t.Errorf("burst sizes: median %.1f, p99 %.1f; want a median under the mean and a p99 above 3 times it", med, sizes[len(sizes)*99/100])
	}
	if med := silences[len(silences)/2]; med >= time.Minute || silences[len(silences)*99/100] < 3*time.Minute {
		t.Errorf("silences: median %s, p99 %s; want a median under the mean and a p99 above 3 times it", med, silences[len(silences)*99/100])
	}
	if share := busy.Seconds() / p.Duration.Seconds(); share > 0.3 {
		t.Errorf("requests arrive %.0f%% of the time; want the service silent most of it", 100*share)
	}

	var works []time.Duration
	var sum time.Duration
	src := p.Source()
	for r, ok := src.Next(); ok && len(works) < 200000; r, ok = src.Next() {
		works = append(works, r.Work)
		sum += r.Work
	}
	slices.Sort(works)
	mean := sum / time.Duration(len(works))
	med, p99 := works[len(works)/2], works[len(works)*99/100]
	if mean < 450*time.Millisecond || mean > 550*time.Millisecond || med > 250*time.Millisecond || p99 < 3*time.Second {
		t.Errorf("lognormal service times: mean %s, median %s, p99 %s; want about 500ms, under 250ms, above 3s", mean, med, p99)
	}
}
