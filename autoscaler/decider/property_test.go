package decider

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/swell-run/swell/pkg/autoscaling"
)

// randomSpec is a valid spec with settings drawn across their ranges.
func randomSpec(rng *rand.Rand) autoscaling.Spec {
	classes := autoscaling.Classes()
	return testSpec(func(s *autoscaling.Spec) {
		s.Class = classes[rng.IntN(len(classes))]
		s.Target = []float64{1, 10, 100, 0.5}[rng.IntN(4)]
		s.TargetUtilization = []float64{0.5, 0.7, 1}[rng.IntN(3)]
		s.StableWindow = time.Duration(6+rng.IntN(120)) * time.Second
		s.PanicWindow = max(time.Second, s.StableWindow/10)
		s.PanicThreshold = []float64{1.1, 2, 10}[rng.IntN(3)]
		s.MaxScaleUpRate = []float64{1.1, 2, 1000}[rng.IntN(3)]
		s.MaxScaleDownRate = []float64{1.5, 2, 10}[rng.IntN(3)]
		if rng.IntN(3) == 0 {
			s.MinScale = rng.IntN(4)
		}
		if rng.IntN(3) == 0 {
			s.MaxScale = s.MinScale + 1 + rng.IntN(20)
		}
		s.InitialScale = rng.IntN(4)
		if s.MaxScale > 0 {
			s.InitialScale = min(s.InitialScale, s.MaxScale)
		}
		s.ActivationScale = 1 + rng.IntN(3)
		if s.MaxScale > 0 {
			s.ActivationScale = min(s.ActivationScale, s.MaxScale)
		}
		if rng.IntN(3) == 0 {
			s.ScaleDownDelay = time.Duration(rng.IntN(30)) * time.Second
		}
		s.ScaleToZeroGracePeriod = time.Duration(1+rng.IntN(40)) * time.Second
		if rng.IntN(3) == 0 {
			s.ScaleToZeroPodRetention = time.Duration(rng.IntN(40)) * time.Second
		}
		s.ScaleToZeroEnabled = rng.IntN(5) != 0
		s.TargetBurstCapacity = []float64{-1, 0, 211}[rng.IntN(3)]
		s.HPA.ScaleDown.StabilizationWindow = time.Duration(rng.IntN(60)) * time.Second
		s.PID.Kd = []float64{0, 0.1, 3}[rng.IntN(3)]
	})
}

// TestProperties drives deciders of every class through random but
// plausible sequences — bursts, silences, pokes, requests at the activator,
// missing data, the activator leaving the path, pods that lag decisions —
// and checks after every decision:
//
//   - min-scale ≤ Scale ≤ max-scale, Scale ≥ 1 when scale to zero is off;
//   - a service under load never has fewer than activation-scale pods;
//   - in a kpa panic episode (without scale-down delay) Desired never goes
//     down;
//   - Scale is 0 only when the windows saw no traffic, nothing is
//     pending or poked at the activator, the activator is in the path, and
//     no traffic was seen within the grace period; and then NeedActivator.
func TestProperties(t *testing.T) {
	const trials, steps = 400, 400
	// How often the interesting states came up, so that the test cannot
	// pass by never reaching them.
	var zeros, panics, wakes, held int
	for trial := 0; trial < trials; trial++ {
		seed := uint64(trial)
		rng := rand.New(rand.NewPCG(seed, 42))
		spec := randomSpec(rng)
		ready := rng.IntN(4)
		var d *Decider
		if rng.IntN(2) == 0 {
			d = New(spec, at(0), ready)
		} else {
			d = Resume(spec, at(0), ready)
		}
		fail := func(step int, format string, a ...any) {
			t.Helper()
			t.Fatalf("trial %d (seed %d) step %d, spec %+v: %s", trial, seed, step, spec, fmt.Sprintf(format, a...))
		}
		// Times in whole milliseconds, so that the test's own bookkeeping
		// is exact.
		var now, lastTraffic int64 = 0, -1e9
		var decided []int
		prevPanic, prevDesired := false, 0
		load := 0.0
		for step := 0; step < steps; step++ {
			now += []int64{0, 100, 1000, 2000, 2000, 2000, 5000, 40000}[rng.IntN(8)]
			switch r := rng.IntN(20); {
			case r == 0:
				load = 0
			case r == 1:
				load = rng.Float64() * 2000 // a burst
			case r < 5:
				load *= 0.5 + rng.Float64()
			}
			o := Observation{
				Now:             t0.Add(time.Duration(now) * time.Millisecond),
				Ready:           ready,
				Stable:          load * (0.5 + rng.Float64()),
				Panic:           load * rng.Float64() * 2,
				ActivatorInPath: rng.IntN(4) != 0,
				NoData:          rng.IntN(15) == 0,
			}
			if rng.IntN(3) == 0 {
				o.Panic = 0
			}
			if rng.IntN(10) == 0 {
				o.ActivatorPending = 1 + rng.IntN(5)
			}
			o.Poked = rng.IntN(25) == 0
			if rng.IntN(8) == 0 {
				o.LastTraffic = t0.Add(time.Duration(now-rng.Int64N(60000)) * time.Millisecond)
			}
			if o.Panic > 0 || o.ActivatorPending > 0 || o.Poked {
				lastTraffic = now
			}
			if !o.LastTraffic.IsZero() {
				lastTraffic = max(lastTraffic, min(now, o.LastTraffic.Sub(t0).Milliseconds()))
			}

			got := d.Decide(o)

			if got.Scale < 0 || got.Desired < 0 {
				fail(step, "negative: %+v", got)
			}
			if got.Scale < spec.MinScale {
				fail(step, "Scale %d below min-scale: %+v", got.Scale, got)
			}
			if spec.MaxScale > 0 && got.Scale > spec.MaxScale {
				fail(step, "Scale %d above max-scale: %+v", got.Scale, got)
			}
			if !spec.ScaleToZeroEnabled && got.Scale == 0 {
				fail(step, "zero with scale to zero disabled: %+v", got)
			}
			// The adaptive policy's learned idle plan replaces three of
			// kpa's rules: a service is idle from its last traffic itself
			// (the newest second with load), so the windows' echo of it
			// and the grace period no longer hold a pod.
			learned := spec.Class == autoscaling.ClassAdaptive || spec.Class == autoscaling.ClassHybrid
			underLoad := ((o.Stable > 0 || o.Panic > 0) && !learned) || o.ActivatorPending > 0 || o.Poked
			if underLoad && got.Scale < spec.ActivationScale {
				fail(step, "under load below activation-scale: %+v", got)
			}
			if got.Scale == 0 {
				switch {
				case (o.Panic > 0 || o.Stable > 0) && !learned:
					fail(step, "zero with traffic in the window: %+v", got)
				case o.ActivatorPending > 0:
					fail(step, "zero with requests at the activator: %+v", got)
				case o.Poked:
					fail(step, "zero when poked: %+v", got)
				case !o.ActivatorInPath:
					fail(step, "zero without the activator in the path: %+v", got)
				case now-lastTraffic < spec.ScaleToZeroGracePeriod.Milliseconds() && !learned:
					fail(step, "zero %dms after traffic, grace %v: %+v", now-lastTraffic, spec.ScaleToZeroGracePeriod, got)
				case !got.NeedActivator:
					fail(step, "zero without NeedActivator: %+v", got)
				}
			}
			if spec.Class == autoscaling.ClassKPA && spec.ScaleDownDelay == 0 &&
				prevPanic && got.InPanic && got.Desired < prevDesired {
				fail(step, "panic decision went down from %d: %+v", prevDesired, got)
			}
			prevPanic, prevDesired = got.InPanic, got.Desired
			switch {
			case got.Scale == 0:
				zeros++
			case got.InPanic:
				panics++
			case got.Desired == 0 && got.Scale > 0 && spec.MinScale == 0 && spec.ScaleToZeroEnabled:
				held++
			}
			if (o.Poked || o.ActivatorPending > 0) && got.Desired == 0 && got.Scale > 0 {
				wakes++
			}

			// Pods follow decisions after a random lag.
			decided = append(decided, got.Scale)
			lag := rng.IntN(4)
			if k := len(decided) - 1 - lag; k >= 0 {
				ready = decided[k]
			}
			if rng.IntN(30) == 0 {
				ready = rng.IntN(5) // a crash, a manual change
			}
		}
	}
	t.Logf("%d decisions: %d at zero, %d in panic, %d held on the way to zero, %d woken", trials*steps, zeros, panics, held, wakes)
	if zeros < 1000 || panics < 1000 || held < 1000 || wakes < 100 {
		t.Fatal("the random sequences no longer reach every state")
	}
}

// TestNoPathToZeroWithRequestsAtTheActivator tries every class and every
// gate state with requests in flight or queued: none decides zero.
func TestNoPathToZeroWithRequestsAtTheActivator(t *testing.T) {
	for _, class := range autoscaling.Classes() {
		for _, resume := range []bool{false, true} {
			for ready := 0; ready <= 2; ready++ {
				for _, noData := range []bool{false, true} {
					for _, inPath := range []bool{false, true} {
						for _, pending := range []int{0, 1} {
							for _, panic := range []float64{0, 0.01} {
								if pending == 0 && panic == 0 {
									continue
								}
								s := testSpec(func(s *autoscaling.Spec) {
									s.Class = class
									s.InitialScale = 0
									s.ScaleToZeroGracePeriod = time.Second
								})
								var d *Decider
								if resume {
									d = Resume(s, at(0), ready)
								} else {
									d = New(s, at(0), ready)
								}
								// Long idle first, so every other gate is open.
								for sec := 0.0; sec < 200; sec += 2 {
									d.Decide(Observation{Now: at(sec), Ready: ready, ActivatorInPath: true})
								}
								o := Observation{Now: at(300), Ready: ready, NoData: noData, ActivatorInPath: inPath,
									ActivatorPending: pending, Panic: panic}
								if got := d.Decide(o); got.Scale == 0 {
									t.Fatalf("%s resume=%v ready=%d %+v: scaled to zero: %+v", class, resume, ready, o, got)
								}
							}
						}
					}
				}
			}
		}
	}
}
