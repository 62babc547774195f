package axis

import "testing"

func TestNiceCeil(t *testing.T) {
	for _, tc := range []struct{ m, top, step float64 }{
		{0, 1, 1},
		{-3, 1, 1},
		{1, 1, 1},
		{7, 8, 2},
		{9.5, 10, 2.5},
		{210, 300, 100},
		{0.3, 0.3, 0.1},
		{3, 3, 1},
		{37, 40, 10},
		{260, 300, 100},
		{1852, 2000, 500},
	} {
		top, step := NiceCeil(tc.m)
		if !(abs(top-tc.top) < 1e-9 && abs(step-tc.step) < 1e-9) {
			t.Errorf("NiceCeil(%v) = %v, %v; want %v, %v", tc.m, top, step, tc.top, tc.step)
		}
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
