package config

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/swell-run/swell/pkg/spelling"
)

// valueError is one bad value, without the name of what holds it:
//
//	"Hello" is not a valid name; accepted: ...
//
// The file reader prefixes it with the file, line and field, the flags
// with the flag's name.
type valueError struct {
	value string
	// quoted shows value; false for a value that is not text (a list
	// where a string belongs), which problem then describes.
	quoted     bool
	problem    string
	accepted   string
	suggestion string
}

func (e *valueError) Error() string {
	var b strings.Builder
	if e.quoted {
		b.WriteString(strconv.Quote(e.value))
		b.WriteString(" ")
	}
	b.WriteString(e.problem)
	if e.accepted != "" {
		b.WriteString("; accepted: ")
		b.WriteString(e.accepted)
	}
	if e.suggestion != "" {
		b.WriteString("; did you mean ")
		b.WriteString(e.suggestion)
		b.WriteString("?")
	}
	return b.String()
}

// badValue is the common case: a text value and what is wrong with it.
func badValue(value, problem, accepted string) *valueError {
	return &valueError{value: value, quoted: true, problem: problem, accepted: accepted}
}

// lineError places an error in a file:
//
//	swell.yaml:12: services[0].annotations: autoscaling.swell.run/min-scale: "abc" is not an integer; ...
//
// It unwraps to the error it places, which is an *autoscaling.Error for
// problems the autoscaling parser found.
type lineError struct {
	path  string
	line  int
	field string
	err   error
}

func (e *lineError) Error() string {
	if e.field == "" {
		return fmt.Sprintf("%s:%d: %v", e.path, e.line, e.err)
	}
	return fmt.Sprintf("%s:%d: %s: %v", e.path, e.line, e.field, e.err)
}

func (e *lineError) Unwrap() error { return e.err }

// flagError names the flag a bad value came from:
//
//	--queue-depth: "x" is not an integer; accepted: an integer ≥ 0
func flagError(name string, err error) error {
	return fmt.Errorf("--%s: %w", name, err)
}

// splitErrors returns the errors joined in err (errors.Join), or err alone.
func splitErrors(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// suggest returns the candidate s most likely misspells, or "": the same
// name in another case or separator style (containerconcurrency,
// container-concurrency), else the closest within a couple of edits.
func suggest(s string, candidates []string) string {
	fold := func(s string) string {
		return strings.NewReplacer("-", "", "_", "").Replace(strings.ToLower(s))
	}
	for _, c := range candidates {
		if fold(c) == fold(s) {
			return c
		}
	}
	best, bestD := "", min(2, len(s)/3)+1
	for _, c := range candidates {
		if d := spelling.Distance(strings.ToLower(s), strings.ToLower(c)); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}
