package envflag

import (
	"errors"
	"flag"
	"strings"
	"testing"
	"time"
)

type settings struct {
	port    int
	cc      int
	timeout time.Duration
	format  string
	verbose bool
	name    string

	ccSetting *Setting
}

func declare() (*Set, *settings) {
	s := NewSet("prog")
	v := &settings{}
	Var(s, &v.port, "port", "PORT", 8012, "serving port", Port)
	v.ccSetting = Var(s, &v.cc, "concurrency", "CONCURRENCY", 0, "limit", IntAtLeast(0))
	Var(s, &v.timeout, "timeout", "TIMEOUT", 300*time.Second, "timeout", DurationAtLeast(0))
	Var(s, &v.format, "format", "FORMAT", "auto", "log format", OneOf("auto", "json", "console"))
	Var(s, &v.verbose, "verbose", "VERBOSE", false, "verbose", Bool)
	Var(s, &v.name, "", "NAME_ONLY_ENV", "x", "env only", String)
	return s, v
}

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func TestDefaults(t *testing.T) {
	s, v := declare()
	if err := s.Parse(nil, env(nil)); err != nil {
		t.Fatal(err)
	}
	if v.port != 8012 || v.cc != 0 || v.timeout != 300*time.Second || v.format != "auto" || v.verbose || v.name != "x" {
		t.Errorf("defaults not applied: %+v", v)
	}
	if v.ccSetting.IsSet() || v.ccSetting.Name() != "CONCURRENCY" {
		t.Errorf("IsSet=%v Name=%q for a default", v.ccSetting.IsSet(), v.ccSetting.Name())
	}
}

func TestEnvAndFlagPrecedence(t *testing.T) {
	s, v := declare()
	err := s.Parse([]string{"--port=9000", "-verbose", "--timeout", "5s"}, env(map[string]string{
		"PORT":          "7000",
		"CONCURRENCY":   "4",
		"FORMAT":        "json",
		"NAME_ONLY_ENV": "svc",
		"TIMEOUT":       "not a duration", // flag wins, so never parsed
	}))
	if err != nil {
		t.Fatal(err)
	}
	if v.port != 9000 {
		t.Errorf("port = %d, want flag value 9000", v.port)
	}
	if v.cc != 4 || v.format != "json" || !v.verbose || v.timeout != 5*time.Second || v.name != "svc" {
		t.Errorf("got %+v", v)
	}
	if !v.ccSetting.IsSet() || v.ccSetting.Name() != "CONCURRENCY" {
		t.Errorf("IsSet=%v Name=%q", v.ccSetting.IsSet(), v.ccSetting.Name())
	}
}

func TestEmptyEnvIsUnset(t *testing.T) {
	s, v := declare()
	if err := s.Parse(nil, env(map[string]string{"CONCURRENCY": ""})); err != nil {
		t.Fatal(err)
	}
	if v.ccSetting.IsSet() || v.cc != 0 {
		t.Errorf("empty variable should count as unset; cc=%d set=%v", v.cc, v.ccSetting.IsSet())
	}
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{env: map[string]string{"CONCURRENCY": "abc"}, want: `invalid CONCURRENCY "abc": must be an integer ≥ 0`},
		{env: map[string]string{"CONCURRENCY": "-1"}, want: `invalid CONCURRENCY "-1": must be an integer ≥ 0`},
		{args: []string{"--concurrency=1.5"}, want: `invalid --concurrency "1.5": must be an integer ≥ 0`},
		{env: map[string]string{"PORT": "70000"}, want: `invalid PORT "70000": must be a port number from 1 to 65535`},
		{env: map[string]string{"PORT": "0"}, want: `invalid PORT "0": must be a port number from 1 to 65535`},
		{env: map[string]string{"TIMEOUT": "300"}, want: `invalid TIMEOUT "300": must be a duration ≥ 0 such as 300ms, 30s or 1m30s (0 turns it off)`},
		{env: map[string]string{"TIMEOUT": "-1s"}, want: `invalid TIMEOUT "-1s": must be a duration ≥ 0 such as 300ms, 30s or 1m30s (0 turns it off)`},
		{env: map[string]string{"FORMAT": "xml"}, want: `invalid FORMAT "xml": must be one of auto, json, console`},
		{env: map[string]string{"VERBOSE": "yes"}, want: `invalid VERBOSE "yes": must be true or false`},
		{args: []string{"--nope"}, want: "flag provided but not defined: -nope (run with --help to list the settings)"},
		{args: []string{"extra"}, want: `unexpected argument "extra": prog takes only flags`},
		{
			env:  map[string]string{"PORT": "x", "FORMAT": "xml"},
			want: "invalid PORT \"x\": must be a port number from 1 to 65535\ninvalid FORMAT \"xml\": must be one of auto, json, console",
		},
	} {
		s, _ := declare()
		err := s.Parse(tc.args, env(tc.env))
		if err == nil || err.Error() != tc.want {
			t.Errorf("args %q env %v:\n got  %v\n want %s", tc.args, tc.env, err, tc.want)
		}
	}
}

func TestHelp(t *testing.T) {
	s, _ := declare()
	if err := s.Parse([]string{"-h"}, env(nil)); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err = %v, want flag.ErrHelp", err)
	}
	var b strings.Builder
	s.PrintUsage(&b)
	for _, want := range []string{"--port", "PORT", "8012", "serving port", "NAME_ONLY_ENV", "5m0s"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, b.String())
		}
	}
}

func TestDefaultText(t *testing.T) {
	s := NewSet("prog")
	var depth int
	Var(s, &depth, "depth", "DEPTH", 0, "queue depth", IntAtLeast(0)).DefaultText("10×CONCURRENCY")
	var b strings.Builder
	s.PrintUsage(&b)
	if !strings.Contains(b.String(), "10×CONCURRENCY") {
		t.Errorf("usage lacks the default text:\n%s", b.String())
	}
}

func TestRefuse(t *testing.T) {
	var b strings.Builder
	code := Refuse(&b, "prog", errors.Join(errors.New("A is bad"), errors.New("B is worse")))
	if code != ExitBadConfig || b.String() != "prog: A is bad\nprog: B is worse\n" {
		t.Errorf("Refuse wrote %q and returned %d", b.String(), code)
	}
}
