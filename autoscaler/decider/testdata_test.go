package decider

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/swell-run/swell/pkg/autoscaling"
)

// The decision tables under testdata/*.txt. The format (testdata/README.md
// has it with an example):
//
//	case NAME
//	spec KEY=VALUE ...            keys as in annotations, without the prefix
//	start [ready=N] [t=SEC] [resume]
//	T READY STABLE PANIC [pending=N] [poked] [inpath=false] [nodata] [traffic=SEC] -> DESIRED SCALE EBC PANIC [| REASON]
//
// An expected value "-" is not checked; REASON is a substring of the
// decision's reason.

type step struct {
	line   int
	o      Observation
	want   [4]string // desired, scale, ebc, panic
	reason string
}

type tableCase struct {
	file, name string
	line       int
	spec       autoscaling.Spec
	start      float64
	ready      int
	resume     bool
	steps      []step
}

func TestTables(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	n := 0
	for _, f := range files {
		cases, err := readCases(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cases {
			n++
			t.Run(filepath.Base(f)+"/"+c.name, func(t *testing.T) { runCase(t, c) })
		}
	}
	t.Logf("%d cases from %d files", n, len(files))
}

func runCase(t *testing.T, c tableCase) {
	var d *Decider
	if c.resume {
		d = Resume(c.spec, at(c.start), c.ready)
	} else {
		d = New(c.spec, at(c.start), c.ready)
	}
	for _, s := range c.steps {
		got := d.Decide(s.o)
		have := [4]string{
			strconv.Itoa(got.Desired),
			strconv.Itoa(got.Scale),
			strconv.FormatFloat(got.ExcessBurstCapacity, 'f', -1, 64),
			strconv.FormatBool(got.InPanic),
		}
		names := [4]string{"desired", "scale", "ebc", "panic"}
		for i := range have {
			if s.want[i] != "-" && s.want[i] != have[i] {
				t.Errorf("%s:%d: %s = %s, want %s (decision %+v)", c.file, s.line, names[i], have[i], s.want[i], got)
			}
		}
		if s.reason != "" && !strings.Contains(got.Reason, s.reason) {
			t.Errorf("%s:%d: reason %q, want it to contain %q", c.file, s.line, got.Reason, s.reason)
		}
	}
}

func readCases(file string) ([]tableCase, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var cases []tableCase
	var cur *tableCase
	sc := bufio.NewScanner(f)
	for ln := 1; sc.Scan(); ln++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		bad := func(format string, a ...any) error {
			return fmt.Errorf("%s:%d: %s", file, ln, fmt.Sprintf(format, a...))
		}
		word, rest, _ := strings.Cut(line, " ")
		switch {
		case word == "case":
			cases = append(cases, tableCase{file: file, name: strings.TrimSpace(rest), line: ln, spec: testSpec()})
			cur = &cases[len(cases)-1]
		case cur == nil:
			return nil, bad("%q before the first case", line)
		case word == "spec":
			for _, kv := range strings.Fields(rest) {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					return nil, bad("want KEY=VALUE, got %q", kv)
				}
				if err := setKey(&cur.spec, k, v); err != nil {
					return nil, bad("%v", err)
				}
			}
		case word == "start":
			for _, kv := range strings.Fields(rest) {
				k, v, _ := strings.Cut(kv, "=")
				var err error
				switch k {
				case "ready":
					cur.ready, err = strconv.Atoi(v)
				case "t":
					cur.start, err = strconv.ParseFloat(v, 64)
				case "resume":
					cur.resume = true
				default:
					err = fmt.Errorf("unknown start field %q", k)
				}
				if err != nil {
					return nil, bad("%v", err)
				}
			}
		default:
			s, err := parseStep(line)
			if err != nil {
				return nil, bad("%v", err)
			}
			s.line = ln
			cur.steps = append(cur.steps, s)
		}
	}
	return cases, sc.Err()
}

func parseStep(line string) (step, error) {
	var s step
	in, out, ok := strings.Cut(line, "->")
	if !ok {
		return s, fmt.Errorf("want INPUTS -> OUTPUTS, got %q", line)
	}
	out, s.reason, _ = strings.Cut(out, "|")
	s.reason = strings.TrimSpace(s.reason)
	wants := strings.Fields(out)
	if len(wants) != 4 {
		return s, fmt.Errorf("want DESIRED SCALE EBC PANIC, got %q", out)
	}
	copy(s.want[:], wants)
	f := strings.Fields(in)
	if len(f) < 4 {
		return s, fmt.Errorf("want T READY STABLE PANIC, got %q", in)
	}
	var err error
	var t float64
	if t, err = strconv.ParseFloat(f[0], 64); err != nil {
		return s, err
	}
	s.o = Observation{Now: at(t), ActivatorInPath: true}
	if s.o.Ready, err = strconv.Atoi(f[1]); err != nil {
		return s, err
	}
	if s.o.Stable, err = strconv.ParseFloat(f[2], 64); err != nil {
		return s, err
	}
	if s.o.Panic, err = strconv.ParseFloat(f[3], 64); err != nil {
		return s, err
	}
	for _, kv := range f[4:] {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "pending":
			s.o.ActivatorPending, err = strconv.Atoi(v)
		case "poked":
			s.o.Poked = true
		case "nodata":
			s.o.NoData = true
		case "inpath":
			s.o.ActivatorInPath, err = strconv.ParseBool(v)
		case "traffic":
			var tr float64
			tr, err = strconv.ParseFloat(v, 64)
			s.o.LastTraffic = at(tr)
		default:
			err = fmt.Errorf("unknown field %q", k)
		}
		if err != nil {
			return s, err
		}
	}
	return s, nil
}
