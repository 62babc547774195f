// Package envflag declares a binary's settings once each — flag name,
// environment variable, default, help and a validating parser — and reads
// them from the command line and the environment, flags winning.
//
// Every Swell binary runs in a container, where settings usually come from
// the environment, and on a developer's machine, where flags are handier.
// Declaring each setting once keeps the two in step and gives every bad
// value the same kind of message:
//
//	invalid CONTAINER_CONCURRENCY "abc": must be an integer ≥ 0
package envflag

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Set is a group of settings read from flags and environment variables.
// Declare settings with Var, then call Parse once.
type Set struct {
	name     string
	fs       *flag.FlagSet
	settings []*Setting
	parsed   bool
}

// NewSet returns an empty Set for the program called name (used in usage
// text).
func NewSet(name string) *Set {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	// Parse reports errors itself; the flag package would also print its
	// own usage text on every mistake.
	fs.SetOutput(io.Discard)
	return &Set{name: name, fs: fs}
}

// Setting is one declared setting. Its methods tell, after Parse, where the
// value came from.
type Setting struct {
	flagName    string
	envName     string
	usage       string
	defaultText string
	isBool      bool
	assign      func(raw string) error

	// raw is the flag's text when given on the command line.
	raw     string
	flagged bool
	source  string
}

// Var declares a setting stored in *p: read from --flagName, else from the
// environment variable envName, else def. parse turns the text into a value
// or returns an error saying what is accepted ("must be an integer ≥ 0");
// Parse then reports it with the name and the offending text. Either name
// may be empty if the setting has no flag or no environment variable.
func Var[T any](s *Set, p *T, flagName, envName string, def T, usage string, parse func(string) (T, error)) *Setting {
	if flagName == "" && envName == "" {
		panic("envflag: a setting needs a flag name or an environment variable")
	}
	*p = def
	st := &Setting{
		flagName:    flagName,
		envName:     envName,
		usage:       usage,
		defaultText: defaultText(def),
		assign: func(raw string) error {
			v, err := parse(raw)
			if err != nil {
				return err
			}
			*p = v
			return nil
		},
	}
	_, st.isBool = any(def).(bool)
	if flagName != "" {
		s.fs.Var((*flagValue)(st), flagName, usage)
	}
	s.settings = append(s.settings, st)
	return st
}

// DefaultText replaces the default shown in usage text, for defaults that
// depend on other settings ("10×CONTAINER_CONCURRENCY").
func (st *Setting) DefaultText(text string) *Setting {
	st.defaultText = text
	return st
}

// IsSet reports whether the value came from a flag or the environment
// rather than the default.
func (st *Setting) IsSet() bool { return st.source != "" }

// Name is how messages should call the setting: the flag ("--user-port")
// if the value came from one, else the environment variable.
func (st *Setting) Name() string {
	if st.source != "" {
		return st.source
	}
	if st.envName != "" {
		return st.envName
	}
	return "--" + st.flagName
}

// flagValue adapts a Setting to flag.Value. It only records the text:
// Parse validates after all flags are read, so that every message has the
// same shape and flags win over the environment whatever their order.
type flagValue Setting

func (v *flagValue) String() string { return v.raw }

func (v *flagValue) Set(raw string) error {
	v.raw, v.flagged = raw, true
	return nil
}

// IsBoolFlag lets a bool setting be given as a bare --flag.
func (v *flagValue) IsBoolFlag() bool { return v.isBool }

// Parse reads args (without the program name) and then, for each setting
// not given as a flag, the environment through lookupEnv (os.LookupEnv in
// a binary). An empty environment variable counts as unset, since
// Kubernetes manifests often render unset values as "". It returns
// flag.ErrHelp for -h/--help, an error for an unknown flag or a positional
// argument, and one error per invalid value, joined.
func (s *Set) Parse(args []string, lookupEnv func(string) (string, bool)) error {
	if s.parsed {
		return errors.New("envflag: Parse called twice")
	}
	s.parsed = true
	if err := s.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%v (run with --help to list the settings)", err)
	}
	if s.fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: %s takes only flags", s.fs.Arg(0), s.name)
	}
	var errs []error
	for _, st := range s.settings {
		var raw string
		switch {
		case st.flagged:
			raw, st.source = st.raw, "--"+st.flagName
		case st.envName != "":
			if v, ok := lookupEnv(st.envName); ok && v != "" {
				raw, st.source = v, st.envName
			}
		}
		if st.source == "" {
			continue
		}
		if err := st.assign(raw); err != nil {
			errs = append(errs, fmt.Errorf("invalid %s %q: %w", st.source, raw, err))
		}
	}
	return errors.Join(errs...)
}

// PrintUsage writes a table of the settings: flag, environment variable,
// default and help.
func (s *Set) PrintUsage(w io.Writer) {
	fmt.Fprintf(w, "Usage: %s [flags]\n\nEvery flag can also be set by its environment variable; a flag wins.\n\n", s.name)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FLAG\tENVIRONMENT\tDEFAULT\tMEANING")
	for _, st := range s.settings {
		fl, env := "-", "-"
		if st.flagName != "" {
			fl = "--" + st.flagName
		}
		if st.envName != "" {
			env = st.envName
		}
		def := st.defaultText
		if def == "" {
			def = `""`
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", fl, env, def, st.usage)
	}
	tw.Flush()
}

func defaultText(v any) string {
	if d, ok := v.(time.Duration); ok && d == 0 {
		return "0"
	}
	return fmt.Sprint(v)
}

// Parsers for Var. Each returns an error that completes the sentence
// `invalid NAME "text": ...`.

// String accepts any text.
func String(s string) (string, error) { return s, nil }

// Bool accepts true/false and the other spellings strconv.ParseBool knows.
func Bool(s string) (bool, error) {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, errors.New("must be true or false")
	}
	return b, nil
}

// IntAtLeast accepts a decimal integer ≥ min.
func IntAtLeast(min int) func(string) (int, error) {
	return IntBetween(min, math.MaxInt)
}

// IntBetween accepts a decimal integer in [min, max].
func IntBetween(min, max int) func(string) (int, error) {
	want := fmt.Sprintf("must be an integer ≥ %d", min)
	if max != math.MaxInt {
		want = fmt.Sprintf("must be an integer from %d to %d", min, max)
	}
	return func(s string) (int, error) {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < min || n > max {
			return 0, errors.New(want)
		}
		return n, nil
	}
}

// Port accepts a TCP port number, 1 to 65535.
func Port(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 1 || n > 65535 {
		return 0, errors.New("must be a port number from 1 to 65535")
	}
	return n, nil
}

// DurationAtLeast accepts a Go duration ("300ms", "30s", "1m30s", or "0")
// ≥ min.
func DurationAtLeast(min time.Duration) func(string) (time.Duration, error) {
	want := fmt.Sprintf("must be a duration ≥ %s such as 300ms, 30s or 1m30s", defaultText(min))
	if min == 0 {
		want = "must be a duration ≥ 0 such as 300ms, 30s or 1m30s (0 turns it off)"
	}
	return func(s string) (time.Duration, error) {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil || d < min {
			return 0, errors.New(want)
		}
		return d, nil
	}
}

// OneOf accepts exactly one of values.
func OneOf(values ...string) func(string) (string, error) {
	want := "must be one of " + strings.Join(values, ", ")
	return func(s string) (string, error) {
		for _, v := range values {
			if s == v {
				return s, nil
			}
		}
		return "", errors.New(want)
	}
}

// ExitBadConfig is the exit code of a binary told something it cannot
// accept.
const ExitBadConfig = 2

// Refuse writes err to w, each of its lines prefixed with "prog: " (a
// joined error says one problem per line), and returns ExitBadConfig.
func Refuse(w io.Writer, prog string, err error) int {
	for line := range strings.SplitSeq(err.Error(), "\n") {
		fmt.Fprintf(w, "%s: %s\n", prog, line)
	}
	return ExitBadConfig
}
