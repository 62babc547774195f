package autoscaling

import (
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"
)

// This file turns a key's text into a typed value and back. Parsing is
// lenient about form — surrounding space, "70%", "3.0" for an integer, a
// plain number of seconds for a duration, any letter case in a name — and
// strict about meaning: NaN, infinities and fractions of an integer are
// refused. Formatting writes the canonical form and always parses back to
// the same value.

// percentMode says what a trailing "%" means for a number.
type percentMode int

const (
	// noPercent: a "%" is not accepted.
	noPercent percentMode = iota
	// percentKey: the key is already a percentage; "70%" is 70.
	percentKey
	// percentOfOne: the key is a fraction; "10%" is 0.1.
	percentOfOne
)

// parseNumber reads a finite float. ok is false when text is not one.
func parseNumber(text string, pm percentMode) (v float64, ok bool) {
	v, _, ok = parseNumberText(text, pm)
	return v, ok
}

// parseNumberText is parseNumber, also returning the number's text
// without space or "%".
func parseNumberText(text string, pm percentMode) (v float64, clean string, ok bool) {
	t := strings.TrimSpace(text)
	div := 1.0
	if pm != noPercent {
		if rest, found := strings.CutSuffix(t, "%"); found {
			t = strings.TrimSpace(rest)
			if pm == percentOfOne {
				div = 100
			}
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	// ParseFloat reads "NaN" and "Inf" and returns ±Inf with ErrRange for
	// "1e400": none is a value any key accepts.
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, "", false
	}
	return v / div, t, true
}

// divide returns the number written as text (whose float value is v)
// divided by unit, rounded once from the exact quotient. Dividing the
// float instead would round twice, and some fractions — a hand-set
// utilization such as 0.7000000000000001 — would then be the quotient of
// no percentage at all, and could not be written as a key.
func divide(text string, v, unit float64) float64 {
	// Only plain decimals of sensible length go through big.Rat: an
	// exponent such as 1e-999999 would make it build a huge power of ten,
	// and nobody writes a percentage that way. formatScaled never does.
	if unit == 1 || len(text) > 100 || strings.ContainsAny(text, "eEpPxX_") {
		return v / unit
	}
	r, ok := new(big.Rat).SetString(text)
	if !ok {
		return v / unit
	}
	f, _ := r.Quo(r, new(big.Rat).SetFloat64(unit)).Float64()
	return f
}

// parseInt reads an integer; "3.0" and "1e3" are integers too, "3.5" is
// not. inRange is false for integers beyond ±2³¹−1, which no key accepts
// (pod counts are int32 in Kubernetes).
func parseInt(text string) (v int, isInt, inRange bool) {
	t := strings.TrimSpace(text)
	if i, err := strconv.ParseInt(t, 10, 64); err == nil {
		return clampInt32(i)
	} else if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
		return 0, true, false
	}
	f, ok := parseNumber(t, noPercent)
	if !ok || f != math.Trunc(f) {
		return 0, false, false
	}
	if math.Abs(f) > math.MaxInt32 {
		return 0, true, false
	}
	return int(f), true, true
}

func clampInt32(i int64) (int, bool, bool) {
	if i > math.MaxInt32 || i < -math.MaxInt32 {
		return 0, true, false
	}
	return int(i), true, true
}

// parseDuration reads a Go duration ("30s", "1m30s", "500ms") or a plain
// number of seconds ("60", "1.5"), the unit Kubernetes uses for its own
// *Seconds fields.
func parseDuration(text string) (time.Duration, bool) {
	t := strings.TrimSpace(text)
	if d, err := time.ParseDuration(t); err == nil {
		return d, true
	}
	f, ok := parseNumber(t, noPercent)
	if !ok || math.Abs(f) >= math.MaxInt64/float64(time.Second) {
		return 0, false
	}
	return time.Duration(math.Round(f * float64(time.Second))), true
}

// parseBool reads true/false and the other usual spellings.
func parseBool(text string) (v, ok bool) {
	switch strings.ToLower(strings.TrimSpace(text)) {
	case "true", "t", "1", "yes", "y", "on":
		return true, true
	case "false", "f", "0", "no", "n", "off":
		return false, true
	}
	return false, false
}

// formatNumber writes v in the shortest form that parses back to v,
// without an exponent for everyday magnitudes.
func formatNumber(v float64) string {
	if a := math.Abs(v); a == 0 || (a >= 1e-4 && a < 1e15) {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// formatScaled writes the key text for a value stored divided by unit (a
// percentage key stored as a fraction): the shortest text that divide
// turns back into v. That is usually v×unit in its shortest form; failing
// that, a neighbour; failing that, v×unit written out exactly, which
// always works (v is a binary fraction, so v×unit is a finite decimal).
func formatScaled(v, unit float64) string {
	if unit == 1 || math.IsNaN(v) || math.IsInf(v, 0) {
		return formatNumber(v * unit)
	}
	p := v * unit
	up, down := math.Nextafter(p, math.Inf(1)), math.Nextafter(p, math.Inf(-1))
	for _, c := range []float64{p, up, down} {
		t := formatNumber(c)
		if divide(t, c, unit) == v {
			return t
		}
	}
	exact := new(big.Rat).SetFloat64(v)
	exact.Mul(exact, new(big.Rat).SetFloat64(unit))
	// A binary fraction with denominator 2^k has at most k decimals.
	t := exact.FloatString(exact.Denom().BitLen())
	if strings.Contains(t, ".") {
		t = strings.TrimRight(strings.TrimRight(t, "0"), ".")
	}
	return t
}

// FormatDuration writes d as time.Duration.String does, without the zero
// units it ends with: "5m" and "1h30m", not "5m0s" and "1h30m0s"; "1.5s",
// "250ms" and "0s" as they are. time.ParseDuration, and every duration
// key, read it back as d.
func FormatDuration(d time.Duration) string {
	s := d.String()
	if t, ok := strings.CutSuffix(s, "m0s"); ok {
		s = t + "m"
	}
	if t, ok := strings.CutSuffix(s, "h0m"); ok {
		s = t + "h"
	}
	return s
}

// panicWindow is the panic window for a stable window and a percentage: at
// least one 1-second bucket.
func panicWindow(stable time.Duration, pct float64) time.Duration {
	return max(time.Second, time.Duration(math.Round(float64(stable)*pct/100)))
}

// panicWindowPercentage inverts panicWindow: the percentage that gives pw
// for stable. It is exact enough that panicWindow gives pw back to the
// nanosecond for every window up to an hour.
func panicWindowPercentage(stable, pw time.Duration) float64 {
	return float64(pw) * 100 / float64(stable)
}
