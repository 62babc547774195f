// Package axis picks round numbers for the value axis of Swell's SVG
// charts (swell sim's and the soak's).
package axis

import "math"

// NiceCeil returns the axis top and its tick step for values up to m:
// about four ticks, each 1, 2, 2.5 or 5 times a power of ten, and no
// fractional step for values of 1 or more.
func NiceCeil(m float64) (top, step float64) {
	if m <= 0 {
		return 1, 1
	}
	raw := m / 4
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, f := range []float64{1, 2, 2.5, 5, 10} {
		if f*mag >= raw {
			step = f * mag
			break
		}
	}
	if step < 1 && m >= 1 {
		step = 1
	}
	return math.Ceil(m/step) * step, step
}
