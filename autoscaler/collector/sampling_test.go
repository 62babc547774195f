package collector

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSampleSizeTable pins the sizes docs/collector.md lists.
func TestSampleSizeTable(t *testing.T) {
	for _, c := range []struct{ n, want int }{
		{-1, 0}, {0, 0}, {1, 1}, {2, 2}, {3, 3}, {4, 4}, {5, 4}, {6, 5}, {7, 6}, {8, 6},
		{10, 7}, {16, 9}, {20, 9}, {30, 11}, {50, 12}, {100, 14}, {200, 15}, {500, 15},
		{1000, 16}, {10000, 16}, {1000000, 16},
	} {
		if got := DefaultSampling.Size(c.n); got != c.want {
			t.Errorf("DefaultSampling.Size(%d) = %d, want %d", c.n, got, c.want)
		}
	}
	// Tighter settings sample more; the zero Sampling is a census.
	if got := (Sampling{Z: 2.576, Margin: 0.25}).Size(1000); got != 97 {
		t.Errorf("99%% within a quarter σ, 1000 pods: %d, want 97", got)
	}
	for _, n := range []int{1, 7, 5000} {
		if got := (Sampling{}).Size(n); got != n {
			t.Errorf("Sampling{}.Size(%d) = %d, want a census", n, got)
		}
	}
}

// TestSampleSizeProperties: never more than the population, never fewer as
// the population grows, never above n0 rounded up.
func TestSampleSizeProperties(t *testing.T) {
	n0 := math.Pow(DefaultSampling.Z/DefaultSampling.Margin, 2)
	prev := 0
	for n := 1; n <= 20000; n++ {
		got := DefaultSampling.Size(n)
		if got < 1 || got > n || got < prev || float64(got) > math.Ceil(n0) {
			t.Fatalf("Size(%d) = %d (previous %d, n0 %.2f)", n, got, prev, n0)
		}
		prev = got
	}
}

// TestSampleCoverage checks the formula's promise by simulation: for a
// service of N pods with uneven load, the mean of a DefaultSampling-sized
// random sample lands within Margin·σ of the true mean in about 95% of
// rounds (the normal approximation is slightly generous for small n).
func TestSampleCoverage(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for _, N := range []int{10, 40, 300, 2000} {
		loads := make([]float64, N)
		var mean float64
		for i := range loads {
			// A skewed load: most pods near 10, a tail of hot pods.
			loads[i] = 10 + 5*rng.ExpFloat64()
			mean += loads[i]
		}
		mean /= float64(N)
		var variance float64
		for _, l := range loads {
			variance += (l - mean) * (l - mean)
		}
		sigma := math.Sqrt(variance / float64(N-1))

		n := DefaultSampling.Size(N)
		const trials = 4000
		within := 0
		for range trials {
			drawSample(rng, loads, n)
			var m float64
			for _, l := range loads[:n] {
				m += l
			}
			if math.Abs(m/float64(n)-mean) <= DefaultSampling.Margin*sigma {
				within++
			}
		}
		coverage := float64(within) / trials
		t.Logf("N=%d n=%d: %.1f%% of samples within ±%.2fσ", N, n, 100*coverage, DefaultSampling.Margin)
		if coverage < 0.93 {
			t.Errorf("N=%d n=%d: only %.1f%% of sample means within the margin, want about 95%%", N, n, 100*coverage)
		}
	}
}

// TestDrawSample: the first n elements are n distinct ones of the input.
func TestDrawSample(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	s := make([]int, 50)
	for i := range s {
		s[i] = i
	}
	counts := make([]int, len(s))
	for range 2000 {
		drawSample(rng, s, 5)
		seen := map[int]bool{}
		for _, v := range s[:5] {
			if seen[v] {
				t.Fatalf("duplicate %d in sample %v", v, s[:5])
			}
			seen[v] = true
			counts[v]++
		}
	}
	// Each element is drawn with probability 5/50: 200 of 2000 on average;
	// a uniform draw keeps every count well inside [120, 280].
	for v, c := range counts {
		if c < 120 || c > 280 {
			t.Fatalf("element %d drawn %d times in 2000 draws of 5 of 50, want about 200", v, c)
		}
	}
}
