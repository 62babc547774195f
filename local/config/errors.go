package config

import (
	"fmt"

	"github.com/swell-run/swell/pkg/autoscaling"
)

// badValue is a text value and what is wrong with it, named by what holds
// it (a line and field, or a flag):
//
//	"Hello" is not a valid name; accepted: ...
func badValue(value, problem, accepted string) *autoscaling.Error {
	return &autoscaling.Error{Value: value, Problem: problem, Accepted: accepted}
}

// noValue is a problem with nothing written to quote: a missing field, or
// a value that is not text (problem then says what it is: "is a list").
func noValue(problem, accepted string) *autoscaling.Error {
	return &autoscaling.Error{Problem: problem, NoValue: true, Accepted: accepted}
}

// lineError places an error in a file:
//
//	swell.yaml:12: services[0].annotations: autoscaling.swell.run/min-scale: "abc" is not an integer; ...
//
// It unwraps to the error it places, an *autoscaling.Error.
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
func flagError(name string, e *autoscaling.Error) error {
	e.Key, e.Name = name, "--"+name
	return e
}

// splitErrors returns the errors joined in err (errors.Join), or err alone.
func splitErrors(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
