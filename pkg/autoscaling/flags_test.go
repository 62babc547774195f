package autoscaling

import (
	"bytes"
	"flag"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"
)

func resolveFlags(t *testing.T, base Defaults, args ...string) (Spec, Defaults, error) {
	t.Helper()
	fs := flag.NewFlagSet("swell sim", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("flag parse %v: %v", args, err)
	}
	return f.Resolve(0, base)
}

func TestFlags(t *testing.T) {
	s, d, err := resolveFlags(t, DefaultDefaults(), "--target", "10", "--window", "30s", "--min-scale=1",
		"--class", "hpa", "--enable-scale-to-zero=false", "--tick-interval", "500ms")
	if err != nil {
		t.Fatal(err)
	}
	if s.Target != 10 || s.StableWindow != 30*time.Second || s.PanicWindow != 3*time.Second || s.MinScale != 1 || s.Class != ClassHPA {
		t.Errorf("spec %+v", s)
	}
	if s.ScaleToZeroEnabled || d.EnableScaleToZero || d.TickInterval != 500*time.Millisecond {
		t.Errorf("cluster flags: spec %v, defaults %+v", s.ScaleToZeroEnabled, d)
	}
	// Per-service flags do not leak into the Defaults returned.
	if d.MinScale != 0 || d.StableWindow != time.Minute || d.Class != ClassAdaptive {
		t.Errorf("defaults took per-service flags: %+v", d)
	}

	// No flags: the base as it is.
	s, d, err = resolveFlags(t, DefaultDefaults())
	if err != nil || !reflect.DeepEqual(s, DefaultSpec()) || !reflect.DeepEqual(d, DefaultDefaults()) {
		t.Errorf("no flags: %+v %+v %v", s, d, err)
	}

	// A bool flag stands alone.
	base := DefaultDefaults()
	base.EnableScaleToZero = false
	if _, d, err := resolveFlags(t, base, "--enable-scale-to-zero"); err != nil || !d.EnableScaleToZero {
		t.Errorf("bare bool flag: %+v %v", d, err)
	}
}

func TestFlagErrors(t *testing.T) {
	_, _, err := resolveFlags(t, DefaultDefaults(), "--window", "5s", "--min-scale", "x", "--max-scale", "2",
		"--initial-scale", "3", "--tick-interval", "1ms")
	want := []string{
		`--window: "5s" is out of range; accepted: a duration from 6s to 1h in whole seconds, e.g. 60s, 1m30s or 90`,
		`--min-scale: "x" is not an integer; accepted: an integer ≥ 0, at most max-scale when that is > 0`,
		`--tick-interval: "1ms" is out of range; accepted: a duration from 100ms to 1m`,
		`--initial-scale: "3" is greater than max-scale 2; accepted: an integer at most max-scale when that is > 0`,
	}
	if got := splitErrors(err); !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestFlagsHelpAndAnnotations(t *testing.T) {
	fs := flag.NewFlagSet("swell sim", flag.ContinueOnError)
	var out bytes.Buffer
	fs.SetOutput(&out)
	f := RegisterFlags(fs)
	fs.PrintDefaults()
	for _, k := range append(Keys(), ClusterKeys()...) {
		if !strings.Contains(out.String(), "-"+k+" ") && !strings.Contains(out.String(), "-"+k+"\n") {
			t.Errorf("help lacks --%s", k)
		}
	}
	if !strings.Contains(out.String(), "the stable window the metric is averaged over (default 1m; accepted: a duration from 6s to 1h") {
		t.Errorf("help for --window:\n%s", out.String())
	}
	if err := fs.Parse([]string{"--min-scale", "2", "--tick-interval", "1s"}); err != nil {
		t.Fatal(err)
	}
	if got := f.Annotations(); !reflect.DeepEqual(got, map[string]string{Prefix + KeyMinScale: "2"}) {
		t.Errorf("Annotations = %v", got)
	}
}
