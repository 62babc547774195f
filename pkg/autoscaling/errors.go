package autoscaling

import (
	"slices"
	"strconv"
	"strings"

	"github.com/swell-run/swell/pkg/spelling"
)

// Error is one problem with one key of a user's input, naming the key as
// written, its value and what is accepted. It is the one error type for
// bad input in Swell: Parse, ParseDefaults, Flags.Resolve and
// Spec.Validate return every problem they find as an *Error, joined with
// errors.Join, and so do the other readers of what users write (injection's
// swell.run/ annotations, swell local's swell.yaml and flags). errors.As,
// or the Unwrap() []error of the joined error, reaches each one.
type Error struct {
	// Key identifies the key for a program: an autoscaling key's bare name
	// ("min-scale"), or else the key as written.
	Key string
	// Name is the key as the user wrote it — "autoscaling.swell.run/min-scale"
	// in annotations, "min-scale" in the cluster defaults, "--min-scale" on
	// a command line — or "min-scale (cluster default)" when the value in
	// question was not written there but came from the defaults. It is
	// empty when what surrounds the message names the key (a line and
	// field of a file).
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
	// KeyProblem says the key itself is wrong — unknown, or in the wrong
	// place — rather than its value; the message then leads with the
	// problem and shows the value after it.
	KeyProblem bool
	// NoValue says there is no text to show: the key is missing, or its
	// value is not text (Problem then says what it is: "is a list").
	NoValue bool
}

// Error reads, for example:
//
//	autoscaling.swell.run/min-scale: "abc" is not an integer; accepted: an integer ≥ 0
//	autoscaling.swell.run/min-scal: unknown key (value "1"); accepted: a key listed in docs/configuration.md; did you mean autoscaling.swell.run/min-scale?
//	services[0]: has no command; accepted: a list of words
func (e *Error) Error() string {
	var b strings.Builder
	if e.Name != "" {
		b.WriteString(e.Name)
		b.WriteString(": ")
	}
	switch {
	case e.NoValue:
		b.WriteString(e.Problem)
	case e.KeyProblem:
		b.WriteString(e.Problem)
		b.WriteString(" (value ")
		b.WriteString(strconv.Quote(e.Value))
		b.WriteString(")")
	default:
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

// knativeNames pairs Knative's names for settings, where they differ from
// Swell's, with Swell's, so that someone bringing a Knative configuration
// along is told the new name.
var knativeNames = []struct{ knative, swell string }{
	{"stable-window", KeyWindow},
	{"container-concurrency-target-percentage", KeyTargetUtilizationPercentage},
	{"pod-autoscaler-class", KeyClass},
	{"metric-aggregation-algorithm", KeyWindowAveraging},
	{"min-non-zero-replicas", KeyActivationScale},
}

// suggest returns the key the user most likely meant by s, or "": what
// spelling.Suggest finds among candidates, or else Swell's name for the
// Knative setting s most likely names.
func suggest(s string, candidates []string) string {
	if sg := spelling.Suggest(s, candidates); sg != "" {
		return sg
	}
	knative := make([]string, len(knativeNames))
	for i, n := range knativeNames {
		knative[i] = n.knative
	}
	if kn := spelling.Suggest(s, knative); kn != "" {
		if k := knativeNames[slices.Index(knative, kn)].swell; slices.Contains(candidates, k) {
			return k
		}
	}
	return ""
}
