package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/swell-run/swell/pkg/loadgen"
)

// swell runs the command line args and returns its exit code and output.
func swell(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = dispatch(context.Background(), args, streams{stdout: &out, stderr: &errb})
	return code, out.String(), errb.String()
}

func TestDispatch(t *testing.T) {
	tests := []struct {
		args     []string
		code     int
		contains string
	}{
		{nil, 2, "Commands:"},
		{[]string{"help"}, 0, "local        run the data plane"},
		{[]string{"help", "local"}, 0, "Usage: swell local"},
		{[]string{"status", "--help"}, 0, "Usage: swell status"},
		{[]string{"local", "--bogus"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"local"}, 2, "nothing to run"},
		{[]string{"local", "--demo", "--", "x"}, 2, "--demo and a command do not go together"},
		{[]string{"local", "--min-scale", "x", "--", "app"}, 2, "--min-scale: \"x\" is not an integer"},
		{[]string{"status", "-o", "xml"}, 2, "accepted: table, json or yaml"},
		{[]string{"--help"}, 0, "Commands:"},
		{[]string{"help", "load"}, 0, "Usage: swell load"},
		{[]string{"load", "--help"}, 0, "--sleep-per-token duration"},
		{[]string{"help", "nope"}, 2, `unknown command "nope"; commands are local, status`},
		{[]string{"nope"}, 2, `unknown command "nope"`},
	}
	for _, tt := range tests {
		code, out, errs := swell(t, tt.args...)
		if code != tt.code || !strings.Contains(out+errs, tt.contains) {
			t.Errorf("swell %v: exit %d, output %q%q; want exit %d mentioning %q", tt.args, code, out, errs, tt.code, tt.contains)
		}
	}
}

func TestLoadUsageErrors(t *testing.T) {
	dir := t.TempDir()
	serviceTrace := filepath.Join(dir, "svc.csv")
	if err := os.WriteFile(serviceTrace, []byte("t,service_time\n0,0.001\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	lateTrace := filepath.Join(dir, "late.csv")
	if err := os.WriteFile(lateTrace, []byte("t,service_time\n1,0.001\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	badTrace := filepath.Join(dir, "bad.csv")
	if err := os.WriteFile(badTrace, []byte("t,service_time\n0,0.001\n1,x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const u = "http://127.0.0.1:1/"
	tests := []struct {
		args     string
		contains string
	}{
		{"--rate 10 --duration 1s", "missing the target URL"},
		{"--rate 10 --duration 1s " + u + " " + u, "2 target URLs"},
		{"--rate 10 --duration 1s ftp://127.0.0.1/", "http:// or https://"},
		{"--rate 10 --duration 1s http://192.0.2.1/", "--allow-remote"},
		{"--duration 1s " + u, "no mode given: choose one mode"},
		{"--rate 1 --trace x.csv " + u, "--rate and --trace cannot be combined"},
		{"--rate 0 --duration 1s " + u, "--rate 0: accepted is"},
		{"--rate 10 " + u, "--rate needs a bound"},
		{"--rate 0.5 --duration 1s " + u, "plans no request"},
		{"--workers 0 --requests 1 " + u, "--workers 0: accepted"},
		{"--workers 2 " + u, "--workers needs a bound"},
		{"--workers 2 --duration 0s " + u, "--duration 0s: accepted"},
		{"--workers 2 --requests 0 " + u, "--requests 0: accepted"},
		{"--workers 2 --requests 1 --service-time " + u, "--service-time applies to a trace replay only"},
		{"--trace " + serviceTrace + " --speed 0 " + u, "--speed 0: accepted"},
		{"--trace " + serviceTrace + " --sleep-base 1ms --service-time " + u, "--sleep-base applies to token traces"},
		{"--trace " + serviceTrace + " --sleep-per-token 1ms " + u, "has no effect without --service-time"},
		{"--trace " + lateTrace + " --duration 1s --speed 0.5 " + u, "ends before the trace's first arrival"},
		{"--trace " + badTrace + " " + u, "line 3: service_time \"x\""},
		{"--trace " + filepath.Join(dir, "none.csv") + " " + u, "none.csv"},
		{"--workers 1 --requests 1 -H nocolon " + u, `invalid value "nocolon" for flag -H`},
		{"--workers 1 --requests 1 --method G(T " + u, `--method "G(T"`},
		{"--workers 1 --requests 1 --timeout 0s " + u, "--timeout 0s"},
		{"--workers 1 --requests 1 --connections 0 " + u, "--connections 0"},
		{"--workers 1 --requests 1 --max-connections -1 " + u, "--max-connections -1"},
		{"--workers 1 --requests 1 --http2 https://127.0.0.1/", "--http2 speaks cleartext"},
		{"--workers 1 --requests 1 --output yaml " + u, `--output "yaml": accepted are text and json`},
		{"--workers 1 --requests 1 --body @" + filepath.Join(dir, "nobody") + " " + u, "--body @"},
		{"--nope " + u, "not defined: -nope"},
	}
	for _, tt := range tests {
		code, out, errs := swell(t, append([]string{"load"}, strings.Fields(tt.args)...)...)
		if code != 2 || out != "" || !strings.Contains(errs, tt.contains) {
			t.Errorf("swell load %s: exit %d, stdout %q, stderr %q; want exit 2 and stderr mentioning %q", tt.args, code, out, errs, tt.contains)
		}
	}
}

func TestLoadRunsAndReportsJSON(t *testing.T) {
	var mu sync.Mutex
	var hosts, sleeps []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		hosts = append(hosts, r.Host)
		sleeps = append(sleeps, r.URL.Query().Get(loadgen.SleepParam))
	}))
	defer srv.Close()

	// Flags after the URL work too.
	code, out, errs := swell(t, "load", "--workers", "2", srv.URL, "--requests", "6", "-H", "Host: hello.default", "--output", "json", "--progress=false")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var res loadgen.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("stdout is not a JSON result: %v\n%s", err, out)
	}
	if res.Requests != 6 || res.StatusCodes[200] != 6 || res.Mode != loadgen.ModeClosed {
		t.Errorf("result %+v, want 6 closed-loop requests answered 200", res)
	}
	mu.Lock()
	for _, h := range hosts {
		if h != "hello.default" {
			t.Errorf("server saw Host %q, want hello.default", h)
		}
	}
	hosts, sleeps = nil, nil
	mu.Unlock()

	// A trace replay carrying service times, with a text report and
	// progress on stderr.
	tracePath := filepath.Join(t.TempDir(), "trace.csv")
	trace := "TIMESTAMP,ContextTokens,GeneratedTokens\n" +
		"2023-11-16 18:15:46.000,10,3\n" +
		"2023-11-16 18:15:46.010,10,0\n" +
		"2023-11-16 18:15:46.020,10,7\n"
	if err := os.WriteFile(tracePath, []byte(trace), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs = swell(t, "load", "--trace", tracePath, "--service-time", "--sleep-base", "2ms", "--sleep-per-token", "1ms", srv.URL)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, "3 sent of 3 planned, 3 succeeded") || !strings.Contains(out, "trace replay") {
		t.Errorf("report:\n%s", out)
	}
	if !strings.Contains(errs, "sent 3/3") {
		t.Errorf("progress on stderr: %q", errs)
	}
	mu.Lock()
	defer mu.Unlock()
	sort.Strings(sleeps)
	if got := strings.Join(sleeps, " "); got != "2ms 5ms 9ms" {
		t.Errorf("server saw sleeps %s, want 2ms 5ms 9ms (2ms + 1ms per generated token)", got)
	}
}
