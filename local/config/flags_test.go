package config

import (
	"errors"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/swell-run/swell/pkg/autoscaling"
)

func newFlags(t *testing.T, args ...string) (*Flags, []string) {
	t.Helper()
	fs := flag.NewFlagSet("swell local", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	file := fs.String("f", "", "file")
	f := RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	_ = file
	return f, fs.Args()
}

func TestFlagsFile(t *testing.T) {
	f, argv := newFlags(t, "--container-concurrency", "4", "--queue-depth", "40", "--timeout", "30s",
		"--host", "Hello.localhost", "--host", "hi.localhost:8080", "--env", "A=1", "--env", "B=x=y",
		"--dir", "/tmp", "--min-scale", "1", "--window", "30s", "--enable-scale-to-zero=false", "--tick-interval", "1s",
		"--", "./bin/Hello_App", "--port", "0")
	file, err := f.File(argv)
	if err != nil {
		t.Fatalf("File: %v", err)
	}
	if file.Path != "" || len(file.Services) != 1 {
		t.Fatalf("file = %+v", file)
	}
	s := file.Services[0]
	if s.Name != "hello-app" || !slices.Equal(s.Command, []string{"./bin/Hello_App", "--port", "0"}) ||
		s.ContainerConcurrency != 4 || s.QueueDepth != 40 || s.RequestTimeout != 30*time.Second ||
		!slices.Equal(s.Hosts, []string{"hello.localhost", "hi.localhost:8080"}) ||
		!slices.Equal(s.Env, []string{"A=1", "B=x=y"}) || s.Dir != "/tmp" || s.Line != 0 {
		t.Errorf("service = %+v", s)
	}
	wantAnn := map[string]string{"autoscaling.swell.run/min-scale": "1", "autoscaling.swell.run/window": "30s"}
	if len(s.Annotations) != len(wantAnn) {
		t.Errorf("annotations = %v, want %v", s.Annotations, wantAnn)
	}
	for k, v := range wantAnn {
		if s.Annotations[k] != v {
			t.Errorf("annotations = %v, want %v", s.Annotations, wantAnn)
		}
	}
	if s.Spec.MinScale != 1 || s.Spec.StableWindow != 30*time.Second || s.Spec.ScaleToZeroEnabled || s.Spec.ContainerConcurrency != 4 {
		t.Errorf("spec = %+v", s.Spec)
	}
	if file.Defaults.TickInterval != time.Second || file.Defaults.EnableScaleToZero {
		t.Errorf("defaults = %+v", file.Defaults)
	}
	// The flags mean what the same annotations mean.
	spec, err := autoscaling.Parse(s.Annotations, s.ContainerConcurrency, file.Defaults)
	if err != nil || spec.MinScale != s.Spec.MinScale || spec.StableWindow != s.Spec.StableWindow || spec.Target != s.Spec.Target {
		t.Errorf("autoscaling.Parse(annotations) = %+v, %v; want the flags' spec", spec, err)
	}
}

func TestFlagsFileErrors(t *testing.T) {
	tests := []struct {
		args []string
		want []string // one fragment per error, in order
	}{
		{[]string{"--min-scale", "x", "--", "app"}, []string{`--min-scale: "x" is not an integer; accepted: an integer ≥ 0`}},
		{[]string{"--name", "Bad_Name", "--", "app"}, []string{`--name: "Bad_Name" is not a valid name; accepted: lowercase`}},
		{[]string{"--name", "", "--", "app"}, []string{`--name: "" is empty`}},
		{[]string{"--container-concurrency", "-1", "--", "app"}, []string{`--container-concurrency: "-1" is out of range`}},
		{[]string{"--queue-depth", "x", "--", "app"}, []string{`--queue-depth: "x" is not an integer`}},
		{[]string{"--timeout", "2h", "--", "app"}, []string{`--timeout: "2h" is out of range; accepted: a duration from 1s to 1h`}},
		{[]string{"--env", "PORT=1", "--env", "X", "--env", "A=1", "--env", "A=2", "--", "app"}, []string{
			`--env: "PORT=1" sets PORT`, `--env: "X" is not KEY=VALUE`, `--env: "A=2" sets A again`}},
		{[]string{"--host", "http://x", "--host", "a", "--host", "A", "--", "app"}, []string{
			`--host: "http://x" has a scheme`, `--host: "A" is given twice`}},
		{[]string{"--min-scale", "3", "--max-scale", "2"}, []string{
			`no command; accepted: swell local [flags] -- CMD [ARGS...]`, `--min-scale: "3" is greater than max-scale 2`}},
		{[]string{"--", ""}, []string{`the command's program name is empty`}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			f, argv := newFlags(t, tt.args...)
			file, err := f.File(argv)
			if err == nil {
				t.Fatalf("File = %+v, want errors", file)
			}
			errs := splitErrors(err)
			if len(errs) != len(tt.want) {
				t.Fatalf("got %d errors, want %d:\n%v", len(errs), len(tt.want), err)
			}
			for i, frag := range tt.want {
				var ae *autoscaling.Error
				if !errors.As(errs[i], &ae) {
					t.Errorf("error %d = %q is not an *autoscaling.Error", i, errs[i])
				}
				if !strings.Contains(errs[i].Error(), frag) {
					t.Errorf("error %d = %q, want it to contain %q", i, errs[i], frag)
				}
			}
		})
	}
}

func TestFlagsSet(t *testing.T) {
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"-f", "swell.yaml"}, nil},
		{[]string{"-f", "swell.yaml", "--min-scale", "1", "--name", "x", "--env", "A=1", "--host", "h"}, []string{"--env", "--host", "--min-scale", "--name"}},
		{[]string{"--enable-scale-to-zero", "--queue-depth", "1", "--timeout", "1s", "--dir", ".", "--container-concurrency", "1"},
			[]string{"--container-concurrency", "--dir", "--enable-scale-to-zero", "--queue-depth", "--timeout"}},
	}
	for _, tt := range tests {
		f, _ := newFlags(t, tt.args...)
		if got := f.Set(); !slices.Equal(got, tt.want) {
			t.Errorf("%q: Set() = %q, want %q", tt.args, got, tt.want)
		}
	}
}

func TestRegisterFlagsHasEveryKey(t *testing.T) {
	fs := flag.NewFlagSet("swell local", flag.ContinueOnError)
	RegisterFlags(fs)
	want := []string{"name", "container-concurrency", "queue-depth", "timeout", "host", "env", "dir"}
	want = append(want, autoscaling.Keys()...)
	want = append(want, autoscaling.ClusterKeys()...)
	for _, name := range want {
		if fs.Lookup(name) == nil {
			t.Errorf("no flag --%s", name)
		}
	}
}

func TestNameFromCommand(t *testing.T) {
	tests := []struct{ program, want string }{
		{"./bin/Hello_App", "hello-app"},
		{"hello", "hello"},
		{"/usr/bin/python3", "python3"},
		{`C:\tools\My Server.exe`, "my-server-exe"},
		{"__x__", "x"},
		{"...", "service"},
		{"-", "service"},
		{"Ünïcode", "n-code"},
		{strings.Repeat("ab-", 40), strings.TrimRight(strings.Repeat("ab-", 21), "-")},
	}
	for _, tt := range tests {
		got := nameFromCommand(tt.program)
		if got != tt.want {
			t.Errorf("nameFromCommand(%q) = %q, want %q", tt.program, got, tt.want)
		}
		if problem := checkName(got); problem != "" {
			t.Errorf("nameFromCommand(%q) = %q, which %s", tt.program, got, problem)
		}
	}
}
