package plan

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/swell-run/swell/autoscaler/decider"
)

// The rule tables under testdata/*.txt. The format:
//
//	case NAME
//	spec KEY=DURATION|N ...      change-interval, change-burst, down-hold, route-poll
//	T DESIRED READY ROUTE/REQUESTED  scale=N ebc=F [activator] [reason=WORDS] [newer] [fail]  => ACTIONS | AFTER [held=KIND]
//
// ROUTE and REQUESTED are activator, pods or unknown. ebc < 0 or
// `activator` sets the decision's NeedActivator; reason's underscores are
// spaces. ACTIONS are "-" or actions separated by "; ", each as
// Action.String prints it, the reason in parentheses optional (and then a
// substring). AFTER is a Go duration or 0; held is activator, rules or
// newer. Each step's actions are reported made, unless it says `fail`.

type step struct {
	line   int
	t      float64
	st     Status
	d      decider.Decision
	newer  bool
	fail   bool
	want   []string
	after  time.Duration
	held   Held
	source string
}

type tableCase struct {
	file, name string
	rules      Rules
	steps      []step
}

var epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func at(sec float64) time.Time { return epoch.Add(time.Duration(sec * float64(time.Second))) }

func TestTables(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	for _, f := range files {
		cases, err := readCases(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cases {
			t.Run(filepath.Base(f)+"/"+c.name, func(t *testing.T) { runCase(t, c) })
		}
	}
}

func runCase(t *testing.T, c tableCase) {
	rules := c.rules.WithDefaults()
	var m Memory
	var buf [2]Action
	for _, s := range c.steps {
		now := at(s.t)
		got := rules.Next(&m, s.st, s.d, now, s.newer, buf[:0])
		if len(got.Actions) != len(s.want) {
			t.Errorf("%s:%d: actions %v, want %v", c.file, s.line, got.Actions, s.want)
		} else {
			for i, a := range got.Actions {
				if !matches(a.String(), s.want[i]) {
					t.Errorf("%s:%d: action %d is %q, want %q", c.file, s.line, i, a, s.want[i])
				}
			}
		}
		if got.After != s.after {
			t.Errorf("%s:%d: after %v, want %v", c.file, s.line, got.After, s.after)
		}
		if got.Held != s.held {
			t.Errorf("%s:%d: held %v, want %v", c.file, s.line, got.Held, s.held)
		}
		if !s.fail {
			for _, a := range got.Actions {
				m.Done(a, now)
			}
		}
	}
}

// matches reports whether an action's text is what a table expects: the
// same change, and the reason containing the expected one if given.
func matches(got, want string) bool {
	wantChange, wantReason, hasReason := strings.Cut(want, " (")
	gotChange, gotReason, _ := strings.Cut(got, " (")
	if gotChange != wantChange {
		return false
	}
	return !hasReason || strings.Contains(gotReason, strings.TrimSuffix(wantReason, ")"))
}

func readCases(file string) ([]tableCase, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var cases []tableCase
	sc := bufio.NewScanner(f)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fail := func(format string, args ...any) error {
			return fmt.Errorf("%s:%d: %s", file, line, fmt.Sprintf(format, args...))
		}
		if name, ok := strings.CutPrefix(text, "case "); ok {
			cases = append(cases, tableCase{file: filepath.Base(file), name: name})
			continue
		}
		if len(cases) == 0 {
			return nil, fail("a step before the first case")
		}
		c := &cases[len(cases)-1]
		if kvs, ok := strings.CutPrefix(text, "spec "); ok {
			for _, kv := range strings.Fields(kvs) {
				k, v, _ := strings.Cut(kv, "=")
				var err error
				switch k {
				case "change-interval":
					c.rules.ChangeInterval, err = time.ParseDuration(v)
				case "change-burst":
					c.rules.ChangeBurst, err = strconv.Atoi(v)
				case "down-hold":
					c.rules.DownHold, err = time.ParseDuration(v)
				case "route-poll":
					c.rules.RoutePoll, err = time.ParseDuration(v)
				default:
					err = fmt.Errorf("unknown key")
				}
				if err != nil {
					return nil, fail("spec %s: %v", kv, err)
				}
			}
			continue
		}
		s, err := parseStep(text)
		if err != nil {
			return nil, fail("%v", err)
		}
		s.line = line
		c.steps = append(c.steps, s)
	}
	return cases, sc.Err()
}

func parseStep(text string) (step, error) {
	s := step{source: text}
	lhs, rhs, ok := strings.Cut(text, "=>")
	if !ok {
		return s, fmt.Errorf("no =>")
	}
	actions, after, ok := strings.Cut(rhs, "|")
	if !ok {
		return s, fmt.Errorf("no | before the wait")
	}
	f := strings.Fields(lhs)
	if len(f) < 4 {
		return s, fmt.Errorf("want T DESIRED READY ROUTE/REQUESTED, then the decision")
	}
	var err error
	if s.t, err = strconv.ParseFloat(f[0], 64); err != nil {
		return s, err
	}
	if s.st.Desired, err = strconv.Atoi(f[1]); err != nil {
		return s, err
	}
	if s.st.Ready, err = strconv.Atoi(f[2]); err != nil {
		return s, err
	}
	eff, req, _ := strings.Cut(f[3], "/")
	if s.st.Route, err = parseRoute(eff); err != nil {
		return s, err
	}
	if s.st.Requested, err = parseRoute(req); err != nil {
		return s, err
	}
	for _, tok := range f[4:] {
		k, v, _ := strings.Cut(tok, "=")
		switch k {
		case "scale":
			s.d.Scale, err = strconv.Atoi(v)
		case "ebc":
			s.d.ExcessBurstCapacity, err = strconv.ParseFloat(v, 64)
			s.d.NeedActivator = s.d.NeedActivator || s.d.ExcessBurstCapacity < 0
		case "activator":
			s.d.NeedActivator = true
		case "reason":
			s.d.Reason = strings.ReplaceAll(v, "_", " ")
		case "newer":
			s.newer = true
		case "fail":
			s.fail = true
		default:
			err = fmt.Errorf("unknown decision field %q", tok)
		}
		if err != nil {
			return s, err
		}
	}
	if a := strings.TrimSpace(actions); a != "-" {
		for _, one := range strings.Split(a, ";") {
			s.want = append(s.want, strings.TrimSpace(one))
		}
	}
	af := strings.Fields(after)
	if len(af) == 0 {
		return s, fmt.Errorf("no wait after |")
	}
	if af[0] != "0" {
		if s.after, err = time.ParseDuration(af[0]); err != nil {
			return s, err
		}
	}
	for _, tok := range af[1:] {
		switch tok {
		case "held=activator":
			s.held = HeldForActivator
		case "held=rules":
			s.held = HeldByRules
		case "held=newer":
			s.held = HeldForNewer
		default:
			return s, fmt.Errorf("unknown field %q after the wait", tok)
		}
	}
	return s, nil
}

func parseRoute(s string) (Route, error) {
	for _, r := range []Route{RouteUnknown, RouteActivator, RoutePods} {
		if r.String() == s {
			return r, nil
		}
	}
	return 0, fmt.Errorf("route %q: want activator, pods or unknown", s)
}

func TestWithDefaults(t *testing.T) {
	r := Rules{}.WithDefaults()
	if r != (Rules{ChangeInterval: DefaultChangeInterval, ChangeBurst: DefaultChangeBurst, DownHold: DefaultDownHold, RoutePoll: DefaultRoutePoll}) {
		t.Fatalf("defaults %+v", r)
	}
	off := Rules{ChangeInterval: -1, DownHold: -1}.WithDefaults()
	if off.ChangeInterval >= 0 || off.DownHold >= 0 {
		t.Fatalf("a negative value must turn the rule off: %+v", off)
	}
}

func TestNextDoesNotAllocate(t *testing.T) {
	rules := Rules{}.WithDefaults()
	var m Memory
	var buf [2]Action
	st := Status{Desired: 3, Ready: 3, Route: RoutePods, Requested: RoutePods}
	d := decider.Decision{Scale: 3, ExcessBurstCapacity: 50, Reason: "stable at target 70"}
	if n := testing.AllocsPerRun(100, func() { rules.Next(&m, st, d, epoch, false, buf[:0]) }); n != 0 {
		t.Fatalf("a steady step allocates %v times", n)
	}
}
