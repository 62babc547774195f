package spelling

import "testing"

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"", "abc", 3},
		{"abc", "", 3},
		{"kpa", "kpa", 0},
		{"kap", "kpa", 1}, // a swap of neighbours is one edit
		{"min-scal", "min-scale", 1},
		{"minscale", "min-scale", 1},
		{"containerconcurency", "containerConcurrency", 2},
		{"kitten", "sitting", 3},
		{"ça", "ca", 1}, // runes, not bytes
	} {
		if got := Distance(tc.a, tc.b); got != tc.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := Distance(tc.b, tc.a); got != tc.want {
			t.Errorf("Distance(%q, %q) = %d, want %d (symmetric)", tc.b, tc.a, got, tc.want)
		}
	}
}
