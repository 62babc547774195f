package autoscaling

import (
	"strconv"
	"strings"
	"unicode"

	"github.com/swell-run/swell/pkg/spelling"
)

// Error is one problem with one key. Parse, ParseDefaults, Flags.Resolve
// and Spec.Validate return every problem they find as an *Error, joined
// with errors.Join; errors.As, or the Unwrap() []error of the joined error,
// reaches each one.
type Error struct {
	// Key is the key's bare name ("min-scale"), or the whole key as written
	// when it is not a known one.
	Key string
	// Name is the key as the user wrote it — "autoscaling.swell.run/min-scale"
	// in annotations, "min-scale" in the cluster defaults, "--min-scale" on
	// a command line — or "min-scale (cluster default)" when the value in
	// question was not written there but came from the defaults.
	Name string
	// Value is the offending text, or the value in its canonical form when
	// it was not written as text (a default, a Spec being validated).
	Value string
	// Problem says what is wrong: "is not an integer", "is out of range",
	// "is greater than max-scale 3".
	Problem string
	// Accepted says what would be right.
	Accepted string
	// Suggestion, when set, is a likely intended key or value, written as
	// the user would write it.
	Suggestion string

	unknownKey bool
}

// Error reads, for example:
//
//	autoscaling.swell.run/min-scale: "abc" is not an integer; accepted: an integer ≥ 0
//	autoscaling.swell.run/min-scal: unknown key (value "1"); did you mean autoscaling.swell.run/min-scale?
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Name)
	b.WriteString(": ")
	if e.unknownKey {
		b.WriteString(e.Problem)
		b.WriteString(" (value ")
		b.WriteString(strconv.Quote(e.Value))
		b.WriteString(")")
	} else {
		b.WriteString(strconv.Quote(e.Value))
		b.WriteString(" ")
		b.WriteString(e.Problem)
	}
	if e.Accepted != "" {
		b.WriteString("; accepted: ")
		b.WriteString(e.Accepted)
	}
	if e.Suggestion != "" {
		b.WriteString("; did you mean ")
		b.WriteString(e.Suggestion)
		b.WriteString("?")
	}
	return b.String()
}

// knativeNames maps Knative's names for settings, where they differ from
// Swell's, to Swell's, so that someone bringing a Knative configuration
// along is told the new name.
var knativeNames = map[string]string{
	"stable-window": KeyWindow,
	"container-concurrency-target-percentage": KeyTargetUtilizationPercentage,
	"pod-autoscaler-class":                    KeyClass,
	"metric-aggregation-algorithm":            KeyWindowAveraging,
	"min-non-zero-replicas":                   KeyActivationScale,
}

// suggest returns the candidate the user most likely meant by s, or "".
// It tries, in order: the same name in another spelling (minScale,
// MIN_SCALE), Knative's name for a setting, a unique candidate that starts
// with s, and the closest candidate within a small edit distance.
func suggest(s string, candidates []string) string {
	n := normalizeName(s)
	for _, c := range candidates {
		if c == n {
			return c
		}
	}
	if k, ok := knativeNames[n]; ok && contains(candidates, k) {
		return k
	}
	if len(n) >= 4 {
		var found string
		for _, c := range candidates {
			if strings.HasPrefix(c, n) {
				if found != "" {
					found = ""
					break
				}
				found = c
			}
		}
		if found != "" {
			return found
		}
	}
	best, bestD := "", max(1, min(3, len(n)/4))+1
	for _, c := range candidates {
		if d := spelling.Distance(n, strings.ToLower(c)); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

func contains(list []string, s string) bool {
	for _, c := range list {
		if c == s {
			return true
		}
	}
	return false
}

// normalizeName turns minScale, MIN_SCALE and min.scale into min-scale.
func normalizeName(s string) string {
	var b strings.Builder
	prevLower := false
	for _, r := range strings.TrimSpace(s) {
		switch {
		case r == '_' || r == '.' || r == ' ':
			b.WriteByte('-')
			prevLower = false
		case unicode.IsUpper(r):
			if prevLower {
				b.WriteByte('-')
			}
			b.WriteRune(unicode.ToLower(r))
			prevLower = false
		default:
			b.WriteRune(r)
			prevLower = unicode.IsLower(r) || unicode.IsDigit(r)
		}
	}
	return b.String()
}
