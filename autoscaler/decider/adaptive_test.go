package decider

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/swell-run/swell/pkg/autoscaling"
)

// gapsAt is a histogram holding n gaps of length g.
func gapsAt(g time.Duration, n uint16) *[gapBins]uint16 {
	var h [gapBins]uint16
	h[gapBin(g)] = n
	return &h
}

func TestGapBins(t *testing.T) {
	for _, c := range []struct {
		g   time.Duration
		bin int
	}{
		{0, 0}, {500 * time.Millisecond, 0}, {time.Second, 0}, {2 * time.Second, 4}, {4 * time.Second, 8},
		{100 * time.Second, 26}, {1000 * time.Hour, gapBins - 1},
	} {
		if got := gapBin(c.g); got != c.bin {
			t.Errorf("gapBin(%v) = %d, want %d", c.g, got, c.bin)
		}
		if c.bin > 0 && c.bin < gapBins-1 && (c.g < gapEdge(c.bin) || c.g >= gapEdge(c.bin+1)) {
			t.Errorf("%v is not in [%v, %v)", c.g, gapEdge(c.bin), gapEdge(c.bin+1))
		}
	}
}

// Gaps of about 100 s, a 2 s start: keeping the pod 54 s (kpa's budget)
// makes every gap cold; letting it go at 8 s and starting one again just
// before 100 s makes none cold, for less.
func TestPlanIdlePrewarmsRegularGaps(t *testing.T) {
	p := planIdle(gapsAt(100*time.Second, 20), 54*time.Second, 1, 2*time.Second, 8*time.Second, 5*time.Second)
	if p.n != 20 || p.cold != 0 {
		t.Fatalf("plan %+v: want every gap warm", p)
	}
	if p.keep != 8*time.Second || p.prewarm == 0 || p.prewarm > 100*time.Second || p.until < 100*time.Second {
		t.Errorf("plan %+v: want the pod let go at 8s and ready again by 100s", p)
	}
	// Its cost within the budget: 8 s, then from prewarm − 5 s to the
	// bin's end, against (54 s + a 2 s restart) × 0.9.
	if cost := (p.keep + p.until - (p.prewarm - 5*time.Second)).Seconds(); cost > 0.9*56 {
		t.Errorf("plan %+v costs %vs a gap, over the budget", p, cost)
	}
}

// Gaps too short to let a pod go and start another in time (20 s, with a
// 10 s start): a keep-alive past them. (With a 2 s start, letting go and
// pre-warming is cheaper, and chosen.)
func TestPlanIdleKeepsThroughShortGaps(t *testing.T) {
	p := planIdle(gapsAt(20*time.Second, 20), 54*time.Second, 1, 10*time.Second, 8*time.Second, 13*time.Second)
	if p.cold != 0 || p.prewarm != 0 || p.keep < 20*time.Second || p.keep > 54*time.Second {
		t.Errorf("plan %+v: want a keep-alive covering 20s gaps and no more than the budget", p)
	}
	if p := planIdle(gapsAt(20*time.Second, 20), 54*time.Second, 1, 2*time.Second, 8*time.Second, 5*time.Second); p.cold != 0 || p.prewarm == 0 {
		t.Errorf("plan %+v: with a 2s start, want the pod let go and pre-warmed", p)
	}
}

// Without a measured startup nothing is pre-warmed; with no gaps the plan
// is the budget's keep-alive and not used.
func TestPlanIdleNeedsStartupAndGaps(t *testing.T) {
	if p := planIdle(gapsAt(100*time.Second, 20), 54*time.Second, 1, 0, 8*time.Second, time.Second); p.prewarm != 0 {
		t.Errorf("plan %+v pre-warms without a known startup", p)
	}
	var none [gapBins]uint16
	if p := planIdle(&none, 54*time.Second, 1, 2*time.Second, 8*time.Second, 5*time.Second); p.keep != 54*time.Second || p.n != 0 {
		t.Errorf("plan %+v for no gaps", p)
	}
}

// The histogram halves its counts when full, so recent gaps weigh more.
func TestGapHistogramForgets(t *testing.T) {
	a := newAdaptive(time.Time{}, 0, false)
	for range maxGapCount {
		a.record(10 * time.Second)
	}
	a.record(10 * time.Second)
	if c := a.gaps[gapBin(10*time.Second)]; c != maxGapCount/2+1 {
		t.Errorf("count %d after %d gaps, want %d", c, maxGapCount+1, maxGapCount/2+1)
	}
}

// What the adaptive policy learned goes into a memory and comes back
// from it; the memory stays small.
func TestAdaptiveMemory(t *testing.T) {
	spec := autoscalingSpec(t, "adaptive")
	d := New(spec, time.Unix(0, 0), 0)
	if d.Memory() != nil {
		t.Errorf("memory %x before learning anything", d.Memory())
	}
	a := d.policy.(*adaptive)
	a.startup, a.startupDev, a.service, a.burst, a.busyPods = 2340*time.Millisecond, 420*time.Millisecond, 203*time.Millisecond, 12.345, 3.46
	for i := range gapBins {
		a.gaps[i] = uint16(1000 + i)
	}
	mem := d.Memory()
	if len(mem) > 300 {
		t.Errorf("a full memory takes %d bytes", len(mem))
	}
	d2 := New(spec, time.Unix(0, 0), 0)
	if err := d2.Remember(mem); err != nil {
		t.Fatal(err)
	}
	b := d2.policy.(*adaptive)
	if b.startup != 2300*time.Millisecond || b.startupDev != 400*time.Millisecond || b.service != 203*time.Millisecond || b.burst != 12.35 && b.burst != 12.34 || b.busyPods != 3.5 || b.gaps != a.gaps {
		t.Errorf("remembered %+v from %+v", b.learned, a.learned)
	}
	// A memory of version 1 (no startup deviation) is still read.
	v1 := binary.AppendUvarint([]byte{1, 23}, 203)
	v1 = append(v1, 0, 1, 26, 20)
	d3 := New(spec, time.Unix(0, 0), 0)
	if err := d3.Remember(v1); err != nil {
		t.Fatalf("version 1: %v", err)
	}
	if c := d3.policy.(*adaptive); c.startup != 2300*time.Millisecond || c.startupDev != 0 || c.service != 203*time.Millisecond || c.gaps[26] != 20 {
		t.Errorf("version 1 remembered as %+v", c.learned)
	}
	// And one of version 2 (no busy periods' pods).
	v2 := binary.AppendUvarint([]byte{2, 23, 4}, 203)
	v2 = append(v2, 0, 1, 26, 20)
	if err := d3.Remember(v2); err != nil {
		t.Fatalf("version 2: %v", err)
	}
	if c := d3.policy.(*adaptive); c.startupDev != 400*time.Millisecond || c.busyPods != 0 || c.gaps[26] != 20 {
		t.Errorf("version 2 remembered as %+v", c.learned)
	}
	// Another policy keeps nothing and ignores a memory.
	k := New(autoscalingSpec(t, "kpa"), time.Unix(0, 0), 0)
	if k.Memory() != nil || k.Remember(mem) != nil {
		t.Error("kpa keeps a memory")
	}
	// Bad memories change nothing.
	for _, bad := range [][]byte{{9}, {memoryVersion}, append(mem[:len(mem):len(mem)], 0), make([]byte, maxMemory+1), {memoryVersion, 1, 1, 1, 1, 64, 1}} {
		if err := d2.Remember(bad); err == nil {
			t.Errorf("Remember(%x) accepted", bad)
		}
	}
	if b.gaps != a.gaps {
		t.Error("a refused memory changed what was learned")
	}
}

func FuzzAdaptiveRemember(f *testing.F) {
	spec := autoscalingSpec(f, "adaptive")
	d := New(spec, time.Unix(0, 0), 0)
	a := d.policy.(*adaptive)
	a.startup, a.gaps[10] = time.Second, 3
	f.Add(d.Memory())
	f.Add([]byte{memoryVersion, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, mem []byte) {
		d := New(spec, time.Unix(0, 0), 0)
		if err := d.Remember(mem); err != nil {
			return
		}
		// What was accepted encodes back and decides.
		again := d.Memory()
		d2 := New(spec, time.Unix(0, 0), 0)
		if err := d2.Remember(again); err != nil && again != nil {
			t.Fatalf("%x re-encoded as %x: %v", mem, again, err)
		}
		d.Decide(Observation{Now: time.Unix(10, 0), Stable: 1, Panic: 1, Ready: 1})
	})
}

// autoscalingSpec is the default spec of class.
func autoscalingSpec(tb testing.TB, class string) autoscaling.Spec {
	tb.Helper()
	sp := autoscaling.DefaultSpec()
	sp.Class = autoscaling.Class(class)
	if err := sp.Validate(); err != nil {
		tb.Fatal(err)
	}
	return sp
}

// BenchmarkPlanIdle plans over a histogram with every bin full, the
// slowest case: once per idle gap a service has.
func BenchmarkPlanIdle(b *testing.B) {
	var h [gapBins]uint16
	for i := range h {
		h[i] = uint16(1 + i%7)
	}
	for b.Loop() {
		planIdle(&h, time.Minute, 1, 2*time.Second, 4*time.Second, 5*time.Second)
	}
}

// The hybrid policy's plan is the published percentiles: regular gaps of
// about 100 s pre-warm just before them and keep a little past them.
func TestPlanPercentiles(t *testing.T) {
	var h [gapBins]uint16
	h[gapBin(100*time.Second)] = 95
	h[gapBin(300*time.Second)] = 5
	p := planPercentiles(&h, 5*time.Second, 4*time.Second)
	lo, hi := gapEdge(gapBin(100*time.Second)), gapEdge(gapBin(300*time.Second)+1)
	if p.prewarm != lo*9/10 || p.until != hi*11/10 || p.keep != 4*time.Second || p.n != 100 {
		t.Errorf("plan %+v, want pre-warm at %v and keep to %v", p, lo*9/10, hi*11/10)
	}
	// Gaps too short to stop and restart a pod in: keep it to the tail.
	var short [gapBins]uint16
	short[gapBin(6*time.Second)] = 50
	if p := planPercentiles(&short, 5*time.Second, 4*time.Second); p.prewarm != 0 || p.keep < 6*time.Second {
		t.Errorf("plan %+v, want a keep-alive past 6s", p)
	}
}
