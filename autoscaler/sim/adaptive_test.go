package sim

import (
	"context"
	"testing"
	"time"
)

// compare runs the same traffic through kpa and adaptive.
func compare(t *testing.T, prof Profile, cc int, startup time.Duration) (kpa, adaptive Summary) {
	t.Helper()
	if err := prof.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, class := range []string{"kpa", "adaptive"} {
		cfg := config(specOf(t, cc, "--class", class))
		cfg.Pods.StartupDelay = startup
		res, _ := run(t, cfg, prof.Source())
		if s := res.Summary; s.Unfinished != 0 || s.Rejected != 0 || s.Completed != s.Requests {
			t.Fatalf("%s: %+v", class, s)
		}
		if class == "kpa" {
			kpa = res.Summary
		} else {
			adaptive = res.Summary
		}
	}
	return kpa, adaptive
}

// Traffic that stops for 100 s between busy half-minutes: kpa keeps the
// pod about a minute and meets every busy phase cold; the adaptive policy
// learns the gaps, lets the pod go at once and starts one before the next
// phase, for fewer pod-seconds.
func TestAdaptiveLearnsRegularGaps(t *testing.T) {
	prof := Profile{Shape: ShapeOnOff, Rate: 2, On: 30 * time.Second, Off: 100 * time.Second,
		Duration: time.Hour, Arrivals: ArrivalsUniform, ServiceTime: 100 * time.Millisecond}
	kpa, ad := compare(t, prof, 0, 2*time.Second)
	if ad.ColdStarts*2 > kpa.ColdStarts || ad.PodSeconds > kpa.PodSeconds {
		t.Errorf("adaptive %d cold starts for %.0f pod-seconds; kpa %d for %.0f: want at most half the cold starts for no more",
			ad.ColdStarts, ad.PodSeconds, kpa.ColdStarts, kpa.PodSeconds)
	}
}

// A flash sale on pods that take 10 s to start: kpa counts the requests
// queued behind the start as load and asks for hundreds of pods; the
// adaptive policy sizes by work: the arrivals, and the backlog drained
// within a start.
func TestAdaptiveDoesNotPileOnSlowStarts(t *testing.T) {
	prof := Profile{Shape: ShapeSpike, Rate: 2, SpikeRate: 50, SpikeAt: 4 * time.Minute, SpikeFor: time.Minute,
		Duration: 10 * time.Minute, ServiceTime: 200 * time.Millisecond, ServiceDist: ServiceExponential, Seed: 3}
	kpa, ad := compare(t, prof, 2, 10*time.Second)
	if ad.MaxPods*3 > kpa.MaxPods || ad.PodSeconds*2 > kpa.PodSeconds {
		t.Errorf("adaptive at most %d pods, %.0f pod-seconds; kpa %d, %.0f: want a third of the pods, half the cost",
			ad.MaxPods, ad.PodSeconds, kpa.MaxPods, kpa.PodSeconds)
	}
	if ad.WaitP99 > kpa.WaitP99*3/2 {
		t.Errorf("adaptive p99 wait %v, kpa %v", ad.WaitP99, kpa.WaitP99)
	}
}

// Steady traffic: sized by work at the same target, the adaptive policy
// asks for the pods kpa's window asks for.
func TestAdaptiveStartsAsKPA(t *testing.T) {
	prof := Profile{Shape: ShapeConstant, Rate: 20, Duration: 10 * time.Minute, ServiceTime: 300 * time.Millisecond}
	kpa, ad := compare(t, prof, 0, 2*time.Second)
	if ad.PodSeconds != kpa.PodSeconds || ad.MaxPods != kpa.MaxPods || ad.Waited != kpa.Waited {
		t.Errorf("adaptive %+v\nkpa %+v", ad, kpa)
	}
}

// Bursts of 12 requests a second after silences, both heavy-tailed, on
// pods that take 10 s to start. kpa reads the queue behind each start as
// concurrency: tens of pods where the clairvoyant bound needs 4, kept a
// stable window. Sized by work, the adaptive policy stays within half
// again the bound's pods and twice its pod-seconds.
func TestAdaptiveSizesBurstsByWork(t *testing.T) {
	prof := Profile{Shape: ShapeBursts, Rate: 12, BurstSize: 150, Off: time.Minute, Duration: time.Hour,
		ServiceTime: 560 * time.Millisecond, ServiceDist: ServiceLognormal, Seed: 1}
	startup := 10 * time.Second
	kpa, ad := compare(t, prof, 4, startup)
	cfg := config(specOf(t, 4))
	cfg.Pods.StartupDelay = startup
	bound, err := RunOracle(context.Background(), cfg, prof.Source())
	if err != nil {
		t.Fatal(err)
	}
	o := bound.Summary
	if 2*ad.MaxPods > 3*o.MaxPods || ad.PodSeconds > 2*o.PodSeconds {
		t.Errorf("adaptive: at most %d pods, %.0f pod-seconds; the bound %d, %.0f: want within 1.5× and 2×",
			ad.MaxPods, ad.PodSeconds, o.MaxPods, o.PodSeconds)
	}
	if kpa.MaxPods < 3*ad.MaxPods {
		t.Errorf("kpa at most %d pods, adaptive %d: the comparison expects kpa's pile-up", kpa.MaxPods, ad.MaxPods)
	}
}
