package sim

import (
	"bytes"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/swell-run/swell/pkg/autoscaling"
)

// TestReplayObservationsGolden replays each testdata/observations/NAME.csv
// with the flags in NAME.args (autoscaling keys and --initial-ready) and
// compares the output with NAME.golden. The golden files are worked out
// by hand from the rules in docs/autoscaling.md, not generated.
func TestReplayObservationsGolden(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "observations", "*.csv"))
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(in, ".csv")
		t.Run(filepath.Base(name), func(t *testing.T) {
			args, err := os.ReadFile(name + ".args")
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(name + ".golden")
			if err != nil {
				t.Fatal(err)
			}
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			keys := autoscaling.RegisterFlags(fs)
			initialReady := fs.Int("initial-ready", 0, "")
			if err := fs.Parse(strings.Fields(string(args))); err != nil {
				t.Fatal(err)
			}
			// The golden decisions are Knative's: kpa unless the case says.
			base := autoscaling.DefaultDefaults()
			base.Class = autoscaling.ClassKPA
			spec, _, err := keys.Resolve(0, base)
			if err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(in)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			rows, err := ReadObservations(f)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := ReplayObservations(&out, rows, spec, *initialReady); err != nil {
				t.Fatal(err)
			}
			if out.String() != string(want) {
				t.Errorf("output\n%s\nwant\n%s", out.String(), want)
			}
		})
	}
}

func TestReadObservationsErrors(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{"", `empty input: accepted is a header "t,ready,stable,panic"`},
		{"t,ready,stable\n0,1,2\n", `line 1: header "t,ready,stable": accepted is "t,ready,stable,panic"`},
		{"t,ready,stable,panic\n0,1,2,3\n\n1,x,2,3\n", `line 4: ready "x": accepted is a whole number of pods of 0 or more`},
		{"t,ready,stable,panic\n-1,1,2,3\n", `line 2: t "-1": accepted is a number of seconds of 0 or more`},
		{"t,ready,stable,panic\n1,1,2,3\n0.5,1,2,3\n", `line 3: t 0.5 is before the previous row's 1; rows must be in time order`},
		{"t,ready,stable,panic\n1,1,2\n", `line 2: 3 fields: accepted are 4 (t,ready,stable,panic)`},
		{"t,ready,stable,panic\n1,1,NaN,3\n", `line 2: stable "NaN": accepted is a number of 0 or more`},
		{"t,ready,stable,panic\n1,1,2,-3\n", `line 2: panic "-3": accepted is a number of 0 or more`},
	} {
		_, err := ReadObservations(strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.in, err, tc.want)
		}
	}

	// Spaces around fields, CRLF, a byte-order mark and blank lines are
	// fine; t keeps its text.
	rows, err := ReadObservations(strings.NewReader("\uFEFFt, ready ,stable,panic\r\n\r\n 1.50 ,2, 3 ,4\r\n"))
	if err != nil || len(rows) != 1 || rows[0].T != "1.50" || rows[0].Line != 3 || rows[0].Ready != 2 || rows[0].Panic != 4 {
		t.Errorf("rows %+v, %v", rows, err)
	}
}

func TestReplayObservationsWritesNothingOnError(t *testing.T) {
	var out bytes.Buffer
	bad := autoscaling.DefaultSpec()
	bad.TargetUtilization = 2
	err := ReplayObservations(&out, []Observation{{T: "0", Ready: 1}}, bad, 0)
	if err == nil || out.Len() != 0 {
		t.Errorf("invalid spec: %v, wrote %q", err, out.String())
	}
}

// FuzzObservations: whatever an observations file holds, reading it never
// panics; what it accepts has times of 0 or more in order, and replaying
// it through a decider never panics either.
func FuzzObservations(f *testing.F) {
	f.Add("t,ready,stable,panic\n0,1,35,35\n2,1,140,70\n4.5,2,0,0\n")
	f.Add("t,ready,stable,panic\n9223372036.854775807,1,1e308,1e308\n")
	f.Add("\uFEFFt,ready,stable,panic\r\n\r\n1,2147483647,0,0\r\n")
	f.Add("t,ready,stable,panic\n1,1,NaN,0\n")
	spec := autoscaling.DefaultSpec()
	f.Fuzz(func(t *testing.T, in string) {
		rows, err := ReadObservations(strings.NewReader(in))
		if err != nil {
			return
		}
		var last time.Duration
		for i, r := range rows {
			if r.Offset < 0 || r.Offset < last || r.Ready < 0 || r.Stable < 0 || r.Panic < 0 {
				t.Fatalf("row %d: %+v after %v", i, r, last)
			}
			last = r.Offset
		}
		if err := ReplayObservations(io.Discard, rows, spec, 1); err != nil {
			t.Fatalf("replaying accepted rows: %v", err)
		}
	})
}
