package config

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/swell-run/swell/pkg/autoscaling"
)

func TestLoadExample(t *testing.T) {
	f, err := Load("example.yaml")
	if err != nil {
		t.Fatalf("Load(example.yaml): %v", err)
	}
	if len(f.Services) != 2 {
		t.Fatalf("got %d services, want 2", len(f.Services))
	}
	if f.Defaults.TickInterval != 2*time.Second || f.Defaults.ScaleToZeroGracePeriod != 30*time.Second {
		t.Errorf("defaults not read: tick %v, grace %v", f.Defaults.TickInterval, f.Defaults.ScaleToZeroGracePeriod)
	}
	hello := f.Services[0]
	want := Service{
		Name:                 "hello",
		Command:              []string{"go", "run", "./cmd/hello"},
		Dir:                  ".",
		Env:                  []string{"GREETING=hi"},
		Hosts:                []string{"hello.localhost"},
		ContainerConcurrency: 10,
		QueueDepth:           100,
		RequestTimeout:       5 * time.Minute,
		Annotations: map[string]string{
			"autoscaling.swell.run/min-scale": "0",
			"autoscaling.swell.run/max-scale": "5",
			"autoscaling.swell.run/target":    "7",
		},
		Line: 13,
	}
	if hello.Name != want.Name || !slices.Equal(hello.Command, want.Command) || hello.Dir != want.Dir ||
		!slices.Equal(hello.Env, want.Env) || !slices.Equal(hello.Hosts, want.Hosts) ||
		hello.ContainerConcurrency != want.ContainerConcurrency || hello.QueueDepth != want.QueueDepth ||
		hello.RequestTimeout != want.RequestTimeout || hello.Line != want.Line ||
		len(hello.Annotations) != len(want.Annotations) {
		t.Errorf("hello = %+v\nwant %+v", hello, want)
	}
	for k, v := range want.Annotations {
		if hello.Annotations[k] != v {
			t.Errorf("annotation %s = %q, want %q", k, hello.Annotations[k], v)
		}
	}
	if hello.Spec.MaxScale != 5 || hello.Spec.Target != 7 || hello.Spec.ContainerConcurrency != 10 {
		t.Errorf("hello spec: max-scale %d, target %v, cc %d", hello.Spec.MaxScale, hello.Spec.Target, hello.Spec.ContainerConcurrency)
	}
	greeter := f.Services[1]
	if !slices.Equal(greeter.Command, []string{"go", "run", "./cmd/hello"}) || greeter.Spec.Class != autoscaling.ClassHPA ||
		greeter.Spec.Metric != autoscaling.MetricRPS || !slices.Equal(greeter.Env, []string{"GREETING=hey"}) {
		t.Errorf("greeter = %+v", greeter)
	}
	for _, s := range f.Services {
		spec, err := autoscaling.Parse(s.Annotations, s.ContainerConcurrency, f.Defaults)
		if err != nil || spec.Target != s.Spec.Target || spec.Class != s.Spec.Class {
			t.Errorf("%s: Spec is not autoscaling.Parse of its annotations: %v", s.Name, err)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte("# "+strings.Repeat("x", MaxFileSize)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(big); err == nil || !strings.Contains(err.Error(), "larger than 1 MiB") {
		t.Errorf("Load(big) = %v, want larger than 1 MiB", err)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want not exist", err)
	}
}

// svc is a valid service to build test files from.
const svc = "services:\n  - name: a\n    command: [run]\n"

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		// want holds one entry per error, in order: fragments of it, the
		// first being its "path:line: field" start.
		want [][]string
	}{
		{"empty", "", [][]string{{"swell.yaml:1: the file is empty", "accepted: a mapping with a services: list"}}},
		{"comments only", "# nothing\n", [][]string{{"swell.yaml:1: the file is empty"}}},
		{"no services", "defaults: {}\n", [][]string{{"swell.yaml:1: services: is missing"}}},
		{"empty services", "services: []\n", [][]string{{"swell.yaml:1: services: is empty"}}},
		{"null services", "services:\n", [][]string{{"swell.yaml:1: services: is empty"}}},
		{"not a mapping", "- a\n", [][]string{{"swell.yaml:1: is a list", "accepted: a mapping"}}},
		{"syntax", "services:\n  - name: a\n   command: [\n", [][]string{{"swell.yaml:", "invalid YAML"}}},
		{"two documents", svc + "---\n" + svc, [][]string{{"swell.yaml:4: a second YAML document"}}},
		{"unknown top field", "servics:\n  - name: a\n", [][]string{
			{"swell.yaml:1: servics: unknown field; accepted: defaults, services; did you mean services?"},
			{"swell.yaml:1: services: is missing"}}},
		{"unknown service field", svc + "    containerconcurrency: 3\n", [][]string{
			{"swell.yaml:4: services[0]: containerconcurrency: unknown field (value \"3\"); accepted: name, command, dir", "did you mean containerConcurrency?"}}},
		{"unknown field far from any", svc + "    zzzzzz: 3\n", [][]string{
			{"swell.yaml:4: services[0]: zzzzzz: unknown field (value \"3\"); accepted: name, command, dir"}}},
		{"duplicate field", svc + "    name: b\n", [][]string{{"swell.yaml:4: services[0]: \"name\" is given twice (first at line 2)"}}},
		{"service not a mapping", "services:\n  - hello\n", [][]string{{"swell.yaml:2: services[0]: is \"hello\"; accepted: a mapping"}}},
		{"missing name and command", "services:\n  - dir: x\n", [][]string{
			{"swell.yaml:2: services[0]: has no name"}, {"swell.yaml:2: services[0]: has no command"}}},
		{"invalid name", "services:\n  - name: Hello_App\n    command: [x]\n", [][]string{
			{"swell.yaml:2: services[0].name: \"Hello_App\" is not a valid name; accepted: lowercase letters"}}},
		{"long name", "services:\n  - name: " + strings.Repeat("a", 64) + "\n    command: [x]\n", [][]string{
			{"swell.yaml:2: services[0].name: ", "is longer than 63 characters"}}},
		{"name wrong type", "services:\n  - name: [a]\n    command: [x]\n", [][]string{
			{"swell.yaml:2: services[0].name: is a list"}}},
		{"duplicate names", svc + "  - name: a\n    command: [run]\n", [][]string{
			{"swell.yaml:4: services[1].name: \"a\" is the name of another service (line 2)"}}},
		{"empty command list", "services:\n  - name: a\n    command: []\n", [][]string{
			{"swell.yaml:3: services[0].command: is empty; accepted: a list of words"}}},
		{"blank command string", "services:\n  - name: a\n    command: \"  \"\n", [][]string{
			{"swell.yaml:3: services[0].command: is empty"}}},
		{"null command", "services:\n  - name: a\n    command:\n", [][]string{
			{"swell.yaml:3: services[0].command: is empty"}}},
		{"command mapping", "services:\n  - name: a\n    command: {a: b}\n", [][]string{
			{"swell.yaml:3: services[0].command: is a mapping"}}},
		{"command nested list", "services:\n  - name: a\n    command:\n      - x\n      - [y]\n", [][]string{
			{"swell.yaml:5: services[0].command: is a list"}}},
		{"env PORT", svc + "    env:\n      PORT: 8080\n", [][]string{
			{"swell.yaml:5: services[0].env: \"PORT=8080\" sets PORT, which swell sets"}}},
		{"env not KEY=VALUE", svc + "    env: [FOO]\n", [][]string{
			{"swell.yaml:4: services[0].env: \"FOO\" is not KEY=VALUE; accepted: KEY=VALUE"}}},
		{"env empty key", svc + "    env: [\"=x\"]\n", [][]string{{"swell.yaml:4: services[0].env: \"=x\" has an empty KEY"}}},
		{"env twice", svc + "    env:\n      - A=1\n      - A=2\n", [][]string{
			{"swell.yaml:6: services[0].env: \"A=2\" sets A again (first at line 5)"}}},
		{"env wrong type", svc + "    env: 3\n", [][]string{{"swell.yaml:4: services[0].env: is \"3\"; accepted: a mapping of KEY: VALUE"}}},
		{"env value list", svc + "    env:\n      A: [1]\n", [][]string{{"swell.yaml:5: services[0].env: A: is a list"}}},
		{"bad host", svc + "    hosts: [\"http://a.localhost\", \"a.localhost/x\", \"a..b\", \"a:99999\"]\n", [][]string{
			{"swell.yaml:4: services[0].hosts: \"http://a.localhost\" has a scheme"},
			{"swell.yaml:4: services[0].hosts: \"a.localhost/x\" has a path"},
			{"swell.yaml:4: services[0].hosts: \"a..b\" is not a valid host name"},
			{"swell.yaml:4: services[0].hosts: \"a:99999\" has an invalid port"}}},
		{"host twice in a service", svc + "    hosts: [a.localhost, A.localhost]\n", [][]string{
			{"swell.yaml:4: services[0].hosts: \"A.localhost\" is given twice"}}},
		{"host of two services", svc + "    hosts: [x.localhost]\n  - name: b\n    command: [run]\n    hosts:\n      - X.localhost\n", [][]string{
			{"swell.yaml:8: services[1].hosts: \"x.localhost\" is also a host of service a (line 4)"}}},
		{"negative containerConcurrency", svc + "    containerConcurrency: -1\n", [][]string{
			{"swell.yaml:4: services[0].containerConcurrency: \"-1\" is out of range; accepted: an integer ≥ 0"}}},
		{"negative queueDepth", svc + "    queueDepth: -5\n", [][]string{
			{"swell.yaml:4: services[0].queueDepth: \"-5\" is out of range"}}},
		{"queueDepth not integer", svc + "    queueDepth: 1.5\n", [][]string{
			{"swell.yaml:4: services[0].queueDepth: \"1.5\" is not an integer"}}},
		{"containerConcurrency wrong type", svc + "    containerConcurrency: [1]\n", [][]string{
			{"swell.yaml:4: services[0].containerConcurrency: is a list; accepted: an integer ≥ 0"}}},
		{"timeout range", svc + "    timeout: 2h\n", [][]string{
			{"swell.yaml:4: services[0].timeout: \"2h\" is out of range; accepted: a duration from 1s to 1h"}}},
		{"timeout no unit", svc + "    timeout: 30\n", [][]string{{"swell.yaml:4: services[0].timeout: \"30\" is not a duration"}}},
		{"annotation value", svc + "    annotations:\n      autoscaling.swell.run/window: 60s\n      autoscaling.swell.run/min-scale: abc\n", [][]string{
			{"swell.yaml:6: services[0].annotations: autoscaling.swell.run/min-scale: \"abc\" is not an integer; accepted: an integer ≥ 0"}}},
		{"annotation unknown key", svc + "    annotations:\n      autoscaling.swell.run/min-scal: 1\n", [][]string{
			{"swell.yaml:5: services[0].annotations: autoscaling.swell.run/min-scal: unknown key", "did you mean autoscaling.swell.run/min-scale?"}}},
		{"annotation misspelt prefix", svc + "    annotations:\n      autoscaling.swel.run/min-scale: 1\n", [][]string{
			{"swell.yaml:5: services[0].annotations: autoscaling.swel.run/min-scale: unknown key", "did you mean autoscaling.swell.run/min-scale?"}}},
		{"annotation foreign", svc + "    annotations:\n      example.com/x: y\n", [][]string{
			{"swell.yaml:5: services[0].annotations: example.com/x: is not an autoscaling annotation (value \"y\"); accepted: autoscaling.swell.run/*"}}},
		{"annotation cluster key", svc + "    annotations:\n      autoscaling.swell.run/tick-interval: 1s\n", [][]string{
			{"swell.yaml:5: services[0].annotations: autoscaling.swell.run/tick-interval: is a cluster-wide setting"}}},
		{"annotation conflict", svc + "    annotations:\n      autoscaling.swell.run/min-scale: 5\n      autoscaling.swell.run/max-scale: 2\n", [][]string{
			{"swell.yaml:5: services[0].annotations: autoscaling.swell.run/min-scale: \"5\" is greater than max-scale 2"}}},
		{"annotation conflict with defaults", "defaults:\n  max-scale: 2\n" + svc + "    annotations:\n      autoscaling.swell.run/min-scale: 5\n", [][]string{
			{"swell.yaml:7: services[0].annotations: autoscaling.swell.run/min-scale: \"5\" is greater than max-scale 2 (cluster default)"}}},
		{"service blamed for a default", "defaults:\n  min-scale: 5\n" + svc + "    annotations:\n      autoscaling.swell.run/max-scale: 2\n", [][]string{
			{"swell.yaml:7: services[0].annotations: autoscaling.swell.run/max-scale: \"2\" is less than min-scale 5"}}},
		{"annotations wrong type", svc + "    annotations: [a]\n", [][]string{{"swell.yaml:4: services[0].annotations: is a list"}}},
		{"annotation value mapping", svc + "    annotations:\n      autoscaling.swell.run/min-scale: {a: 1}\n", [][]string{
			{"swell.yaml:5: services[0].annotations: autoscaling.swell.run/min-scale: is a mapping"}}},
		{"container-concurrency annotation disagrees", svc + "    containerConcurrency: 10\n    annotations:\n      swell.run/container-concurrency: 5\n", [][]string{
			{"swell.yaml:6: services[0].annotations: swell.run/container-concurrency: \"5\" disagrees with containerConcurrency 10 (line 4)"}}},
		{"container-concurrency annotation invalid", svc + "    annotations:\n      swell.run/container-concurrency: x\n", [][]string{
			{"swell.yaml:5: services[0].annotations: swell.run/container-concurrency: \"x\" is not an integer"}}},
		{"defaults bad value", "defaults:\n  tick-interval: 2s\n  scale-to-zero-grace-period: soon\n" + svc, [][]string{
			{"swell.yaml:3: defaults: scale-to-zero-grace-period: \"soon\" is not a duration"}}},
		{"defaults unknown key", "defaults:\n  tick-intervall: 2s\n" + svc, [][]string{
			{"swell.yaml:2: defaults: tick-intervall: unknown key", "did you mean tick-interval?"}}},
		{"defaults per-service key", "defaults:\n  target: 10\n" + svc, [][]string{
			{"swell.yaml:2: defaults: target: is a per-service key"}}},
		{"defaults wrong type", "defaults: [a]\n" + svc, [][]string{{"swell.yaml:1: defaults: is a list"}}},
		{"every problem in file order", "defaults:\n  window: 1s\nservices:\n  - name: A\n    command: []\n    timeout: 0.5s\n  - name: b\n    command: x\n    queueDepth: -1\n", [][]string{
			{"swell.yaml:2: defaults: window: \"1s\" is out of range"},
			{"swell.yaml:4: services[0].name: \"A\" is not a valid name"},
			{"swell.yaml:5: services[0].command: is empty"},
			{"swell.yaml:6: services[0].timeout: \"0.5s\" is out of range"},
			{"swell.yaml:9: services[1].queueDepth: \"-1\" is out of range"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse("swell.yaml", []byte(tt.yaml))
			if err == nil {
				t.Fatalf("Parse = %+v, want errors", f)
			}
			if f != nil {
				t.Errorf("Parse returned a File with its error")
			}
			errs := splitErrors(err)
			if len(errs) != len(tt.want) {
				t.Fatalf("got %d errors, want %d:\n%v", len(errs), len(tt.want), err)
			}
			for i, frags := range tt.want {
				var ae *autoscaling.Error
				if !errors.As(errs[i], &ae) {
					t.Errorf("error %d = %q does not unwrap to an *autoscaling.Error", i, errs[i])
				}
				msg := errs[i].Error()
				if !strings.HasPrefix(msg, frags[0]) {
					t.Errorf("error %d = %q\nwant it to start with %q", i, msg, frags[0])
				}
				for _, frag := range frags[1:] {
					if !strings.Contains(msg, frag) {
						t.Errorf("error %d = %q\nwant it to contain %q", i, msg, frag)
					}
				}
			}
		})
	}
}

func TestParseAutoscalingErrorUnwraps(t *testing.T) {
	_, err := Parse("swell.yaml", []byte(svc+"    annotations:\n      autoscaling.swell.run/min-scale: abc\n"))
	var ae *autoscaling.Error
	if !errors.As(err, &ae) || ae.Key != autoscaling.KeyMinScale || ae.Value != "abc" {
		t.Fatalf("errors.As(%v) = %+v, want the *autoscaling.Error of min-scale", err, ae)
	}
}

func TestParseTooLarge(t *testing.T) {
	data := []byte(svc + "# " + strings.Repeat("x", MaxFileSize))
	if _, err := Parse("swell.yaml", data); err == nil || !strings.Contains(err.Error(), "swell.yaml: file is larger than 1 MiB") {
		t.Errorf("Parse = %v, want larger than 1 MiB", err)
	}
}

func TestParseAccepts(t *testing.T) {
	tests := []struct {
		name  string
		yaml  string
		check func(t *testing.T, f *File)
	}{
		{"minimal", svc, func(t *testing.T, f *File) {
			s := f.Services[0]
			if s.Name != "a" || !slices.Equal(s.Command, []string{"run"}) || s.Line != 2 || s.RequestTimeout != 0 ||
				s.Annotations == nil || len(s.Annotations) != 0 {
				t.Errorf("service = %+v", s)
			}
			if want := autoscaling.DefaultSpec(); s.Spec.Target != want.Target || s.Spec.Class != want.Class {
				t.Errorf("spec = %+v, want the default", s.Spec)
			}
		}},
		{"scalars as text", svc + "    env:\n      DEBUG: true\n      N: 3\n      EMPTY:\n    annotations:\n      autoscaling.swell.run/min-scale: 1\n      autoscaling.swell.run/target-burst-capacity: -1\n", func(t *testing.T, f *File) {
			s := f.Services[0]
			if !slices.Equal(s.Env, []string{"DEBUG=true", "N=3", "EMPTY="}) {
				t.Errorf("env = %q", s.Env)
			}
			if s.Annotations["autoscaling.swell.run/min-scale"] != "1" || s.Spec.MinScale != 1 || s.Spec.TargetBurstCapacity != -1 {
				t.Errorf("annotations %v, spec min-scale %d", s.Annotations, s.Spec.MinScale)
			}
		}},
		{"container-concurrency annotation sets it", svc + "    annotations:\n      swell.run/container-concurrency: 4\n", func(t *testing.T, f *File) {
			s := f.Services[0]
			if s.ContainerConcurrency != 4 || s.Spec.ContainerConcurrency != 4 || len(s.Annotations) != 0 {
				t.Errorf("cc %d, spec cc %d, annotations %v", s.ContainerConcurrency, s.Spec.ContainerConcurrency, s.Annotations)
			}
		}},
		{"container-concurrency annotation agrees", svc + "    containerConcurrency: 4\n    annotations:\n      swell.run/container-concurrency: \"4\"\n", func(t *testing.T, f *File) {
			if f.Services[0].ContainerConcurrency != 4 {
				t.Errorf("cc = %d", f.Services[0].ContainerConcurrency)
			}
		}},
		{"hosts lowercased, one host as a string", svc + "    hosts: Hello.LocalHost:8080\n", func(t *testing.T, f *File) {
			if !slices.Equal(f.Services[0].Hosts, []string{"hello.localhost:8080"}) {
				t.Errorf("hosts = %q", f.Services[0].Hosts)
			}
		}},
		{"timeout zero is the default", svc + "    timeout: 0s\n", func(t *testing.T, f *File) {
			if f.Services[0].RequestTimeout != 0 {
				t.Errorf("timeout = %v", f.Services[0].RequestTimeout)
			}
		}},
		{"anchors within services", "services:\n  - name: a\n    command: &cmd [go, run, .]\n  - name: b\n    command: *cmd\n", func(t *testing.T, f *File) {
			if !slices.Equal(f.Services[1].Command, []string{"go", "run", "."}) {
				t.Errorf("command = %q", f.Services[1].Command)
			}
		}},
		{"defaults reach the spec", "defaults:\n  min-scale: 2\n  enable-scale-to-zero: false\n" + svc, func(t *testing.T, f *File) {
			if f.Defaults.MinScale != 2 || f.Services[0].Spec.MinScale != 2 || f.Services[0].Spec.ScaleToZeroEnabled {
				t.Errorf("defaults %+v, spec %+v", f.Defaults, f.Services[0].Spec)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse("swell.yaml", []byte(tt.yaml))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if f.Path != "swell.yaml" {
				t.Errorf("Path = %q", f.Path)
			}
			tt.check(t, f)
		})
	}
}

func TestParseAliasBudget(t *testing.T) {
	var b strings.Builder
	b.WriteString("services:\n  - name: a\n    command: &c [" + strings.Repeat("x,", 20000) + "x]\n")
	for i := range 100 {
		b.WriteString("  - name: b" + strconv.Itoa(i) + "\n    command: *c\n")
	}
	_, err := Parse("swell.yaml", []byte(b.String()))
	if err == nil || len(splitErrors(err)) != 1 || !strings.Contains(err.Error(), "too many values") {
		t.Fatalf("Parse = %v, want one error: too many values", err)
	}
}
