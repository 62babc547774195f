package decider

import (
	"testing"
	"time"
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
	p := planIdle(gapsAt(100*time.Second, 20), 54*time.Second, 2*time.Second, 8*time.Second, 5*time.Second)
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
	p := planIdle(gapsAt(20*time.Second, 20), 54*time.Second, 10*time.Second, 8*time.Second, 13*time.Second)
	if p.cold != 0 || p.prewarm != 0 || p.keep < 20*time.Second || p.keep > 54*time.Second {
		t.Errorf("plan %+v: want a keep-alive covering 20s gaps and no more than the budget", p)
	}
	if p := planIdle(gapsAt(20*time.Second, 20), 54*time.Second, 2*time.Second, 8*time.Second, 5*time.Second); p.cold != 0 || p.prewarm == 0 {
		t.Errorf("plan %+v: with a 2s start, want the pod let go and pre-warmed", p)
	}
}

// Without a measured startup nothing is pre-warmed; with no gaps the plan
// is the budget's keep-alive and not used.
func TestPlanIdleNeedsStartupAndGaps(t *testing.T) {
	if p := planIdle(gapsAt(100*time.Second, 20), 54*time.Second, 0, 8*time.Second, time.Second); p.prewarm != 0 {
		t.Errorf("plan %+v pre-warms without a known startup", p)
	}
	var none [gapBins]uint16
	if p := planIdle(&none, 54*time.Second, 2*time.Second, 8*time.Second, 5*time.Second); p.keep != 54*time.Second || p.n != 0 {
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
