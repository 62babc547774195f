package collector

import (
	"math"
	"math/rand/v2"
)

// Sampling sizes the sample of pods scraped per service and round: a simple
// random sample without replacement, large enough to estimate the mean load
// per pod within a margin of error at a confidence level (docs/collector.md
// derives it). The zero Sampling scrapes every pod.
type Sampling struct {
	// Z is the two-sided critical value of the standard normal distribution
	// for the confidence level: 1.96 for 95%, 2.576 for 99%.
	Z float64
	// Margin is the margin of error of the estimated mean per pod, in units
	// of the standard deviation of load across the service's pods.
	Margin float64
}

// DefaultSampling estimates the mean load per pod within half a standard
// deviation with 95% confidence. It samples at most 16 pods per service,
// the same sizes as Knative's scraper, so KPA users see the same precision.
var DefaultSampling = Sampling{Z: 1.96, Margin: 0.5}

// Size returns how many of population ready pods to scrape:
//
//	n0 = (Z / Margin)²                 (the sample for an infinite population)
//	n  = ceil(N·n0 / (N + n0 − 1))      (with the finite population correction)
//
// clamped to [1, N] for N ≥ 1, and 0 for N ≤ 0. With DefaultSampling, n0 ≈
// 15.37: every pod up to 4 pods, 7 of 10, 14 of 100, 16 of 1000 and more.
func (s Sampling) Size(population int) int {
	if population <= 0 {
		return 0
	}
	if s.Z <= 0 || s.Margin <= 0 {
		return population
	}
	n0 := (s.Z / s.Margin) * (s.Z / s.Margin)
	N := float64(population)
	// The epsilon keeps an exact integer from rounding up because of the
	// last bit of a floating-point division.
	n := int(math.Ceil(N*n0/(N+n0-1) - 1e-9))
	return min(max(n, 1), population)
}

// drawSample moves a simple random sample without replacement of n of s's
// elements to its front: the first n steps of a Fisher-Yates shuffle.
func drawSample[T any](rng *rand.Rand, s []T, n int) {
	if n >= len(s) {
		return
	}
	for i := range n {
		j := i + rng.IntN(len(s)-i)
		s[i], s[j] = s[j], s[i]
	}
}
