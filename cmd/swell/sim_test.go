package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func writeTemp(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestSimUsageErrors(t *testing.T) {
	obs := writeTemp(t, "obs.csv", "t,ready,stable,panic\n0,1,1,1\n")
	badObs := writeTemp(t, "bad.csv", "t,ready,stable,panic\n0,1,1,1\n2,one,1,1\n")
	svc := writeTemp(t, "svc.csv", "t,service_time\n0,0.1\n")
	tests := []struct {
		args     string
		contains string
	}{
		{"", "no input given: choose one input: --trace FILE, --profile SHAPE"},
		{"--trace x.csv --profile step", "--trace and --profile cannot be combined"},
		{"--profile wave --duration 1m --rate 1", `--profile "wave": accepted are constant, step, onoff, spike, diurnal`},
		{"--profile constant --rate 1", "--profile needs --duration"},
		{"--profile constant --rate 0 --duration 1m", "--rate 0: accepted is a number of requests per second above 0"},
		{"--profile constant --rate 1 --duration 1m --step-rate 5", "--step-rate applies to --profile step, not constant"},
		{"--profile step --rate 1 --step-rate 5 --step-at 2m --duration 1m", "--step-at 2m0s: accepted is a time from 0 to before --duration 1m0s"},
		{"--profile constant --rate 1 --duration 1m --arrivals bursty", `--arrivals "bursty": accepted are poisson and uniform`},
		{"--profile constant --rate 1 --duration 1m --window 5s", `--window: "5s" is out of range; accepted: a duration from 6s`},
		{"--profile constant --rate 1 --duration 1m --target x", `--target: "x" is not a number`},
		{"--profile constant --rate 1 --duration 1m --tick 1ms", `--tick-interval: "1ms" is out of range; accepted: a duration from 100ms to 1m`},
		{"--profile constant --rate 1 --duration 1m --container-concurrency -1", `--container-concurrency: "-1" is out of range`},
		{"--profile constant --rate 1 --duration 1m --min-scale 3 --max-scale 2", `--min-scale: "3" is greater than max-scale 2`},
		{"--profile constant --rate 1 --duration 1m --policy kpa,foo", `--policy: "foo" is not a class; accepted: a comma-separated list of kpa, hpa, exponential, pid, adaptive, hybrid, default (the default class) or oracle (the clairvoyant bound)`},
		{"--profile constant --rate 1 --duration 1m --policy kpa,hpaa", `--policy: "hpaa" is not a class; accepted: a comma-separated list of kpa, hpa, exponential, pid, adaptive, hybrid, default (the default class) or oracle (the clairvoyant bound); did you mean hpa?`},
		{"--profile constant --rate 1 --duration 1m --policy kpa,kpa", "kpa is listed twice"},
		{"--profile constant --rate 1 --duration 1m --policy kpa --class hpa", "--policy and --class cannot be combined"},
		{"--profile constant --rate 1 --duration 1m --policy kpa,hpa --chart x.svg", "--chart writes one policy's output: with several policies use --out DIR"},
		{"--profile constant --rate 1 --duration 1m --pod-startup -1s", "--pod-startup: \"-1s\" is negative; accepted: a duration of 0 or more"},
		{"--profile constant --rate 1 --duration 1m --queue-limit -2", "--queue-limit: \"-2\" is negative; accepted: 0 (unbounded) or a number of requests"},
		{"--profile constant --rate 1 --duration 1m --sleep-base 1ms", "--sleep-base applies to a token trace only"},
		{"--trace " + svc + " --rate 5", "--rate applies to generated traffic only: add --profile SHAPE"},
		{"--trace " + svc + " --sleep-per-token 2ms", "--sleep-per-token applies to token traces"},
		{"--trace nope.csv", "--trace nope.csv: read trace: open nope.csv"},
		{"--observations " + obs + " --out dir", "--out applies to traffic (--trace or --profile), not to --observations"},
		{"--observations " + obs + " --policy kpa,hpa", "--observations replays one decider; give one class"},
		{"--observations " + obs + " --policy oracle", "--policy oracle: the bound is computed from traffic"},
		{"--observations " + obs + " --sweep target=1,2", "--sweep runs policies on traffic"},
		{"--profile constant --rate 1 --duration 1m --sweep target", `--sweep "target": want KEY=V1,V2,...`},
		{"--profile constant --rate 1 --duration 1m --sweep targte=1,2", `--sweep: "targte" is not an autoscaling key that can be swept; accepted: a key of docs/configuration.md other than class, such as target or scale-to-zero-grace-period; did you mean target?`},
		{"--profile constant --rate 1 --duration 1m --sweep class=kpa,hpa", `--sweep: "class" is not an autoscaling key that can be swept`},
		{"--profile constant --rate 1 --duration 1m --sweep target=1,2 --target 3", "--sweep target and --target cannot be combined"},
		{"--profile constant --rate 1 --duration 1m --sweep target=1,1", "--sweep: target=1 is listed twice"},
		{"--profile constant --rate 1 --duration 1m --sweep target=1,-2", `--target: "-2"`},
		{"--profile constant --rate 1 --duration 1m --sweep target=1,2 --timeline t.csv", "--timeline writes one run's output: with --sweep use --out DIR or --chart FILE"},
		{"--profile constant --rate 1 --duration 1m --sweep target=1,2 --policy oracle,kpa", "--sweep: the oracle has no settings to sweep"},
		{"--observations " + obs + " --initial-ready -1", "--initial-ready: \"-1\" is negative; accepted: a number of pods of 0 or more"},
		{"--observations " + badObs, "--observations " + badObs + `: line 3: ready "one": accepted is a whole number of pods of 0 or more`},
		{"--profile constant --rate 1 --duration 1m --metric cpu", `--pod-capacity: "0" (with no container concurrency either) leaves a pod no full speed`},
		{"--profile constant --rate 1 --duration 1m --container-concurrency 1 --metric concurrency,memory", `--metric: "memory" is not simulated`},
		{"--profile constant --rate 1 --duration 1m --container-concurrency 1 --metrics-resolution 90m", `--metrics-resolution: "1h30m0s" is out of range; accepted: a whole number of seconds from 1s`},
		{"--profile constant --rate 1 --duration 1m --pod-cores 0", "--pod-cores 0: accepted is a number of cores above 0"},
		{"--observations " + obs + " --pod-cores 2", "--pod-cores applies to traffic"},
		{"--observations " + obs + " --metrics-resolution 15s", "--metrics-resolution applies to traffic"},
		{"--profile constant --rate 1 --duration 1m --policy kpa,hpx|tick=15s", `--policy: "hpx" is not a class`},
		{"--profile constant --rate 1 --duration 1m --policy kpa,hpa|windw=1m", `--policy "hpa windw=1m": "windw" is not a setting a policy can carry of its own; accepted: an autoscaling key other than class, metrics-resolution or tick: the traffic and the pods are the same for every policy; did you mean window?`},
		{"--profile constant --rate 1 --duration 1m --policy kpa,hpa|seed=2", `"seed" is not a setting a policy can carry of its own`},
		{"--profile constant --rate 1 --duration 1m --policy kpa,hpa|15s", `--policy "hpa 15s": "15s" is not a setting; want KEY=VALUE`},
		{"--profile constant --rate 1 --duration 1m --policy kpa,oracle|window=1m", `--policy "oracle window=1m": the oracle has no settings`},
		{"--profile constant --rate 1 --duration 1m --policy kpa,kpa|window=5s", `--policy "kpa window=5s": --window: "5s" is out of range`},
		{"--profile constant --rate 1 --duration 1m --policy kpa,kpa|metric=cpu", `--policy "kpa metric=cpu": --pod-capacity: "0"`},
		{"--profile constant --rate 1 --duration 1m --policy kpa,kpa|metrics-resolution=x", `--policy "kpa metrics-resolution=x": metrics-resolution "x" is not a duration`},
		{"--profile constant --rate 1 --duration 1m --policy kpa|window=30s,kpa||window=30s", `kpa window=30s is listed twice`},
		{"--profile constant --rate 1 --duration 1m --policy kpa,hpa|window=30s --sweep target=1,2", `settings of a policy's own cannot be combined with --sweep`},
		{"--observations " + obs + " --policy kpa|window=30s", `with --observations give them as flags`},
		{"--observations " + obs + " extra", `unexpected argument "extra"`},
		{"--observations " + obs + " --no-such-flag", "flag provided but not defined: -no-such-flag"},
	}
	for _, tt := range tests {
		// "|" is a space within an argument: a --policy entry's settings.
		args := []string{"sim"}
		for _, a := range strings.Fields(tt.args) {
			args = append(args, strings.ReplaceAll(a, "|", " "))
		}
		code, out, errs := swell(t, args...)
		if code != 2 || !strings.Contains(errs, tt.contains) || out != "" {
			t.Errorf("swell %s: exit %d, stdout %q, stderr %q; want exit 2, no output, stderr mentioning %q", strings.Join(args, " "), code, out, errs, tt.contains)
		}
	}
}

func TestSimHelp(t *testing.T) {
	code, out, _ := swell(t, "sim", "--help")
	for _, want := range []string{"Usage: swell sim", "--observations file", "--target-burst-capacity", "--pod-startup duration", "(default 2s)",
		"--pod-cores cores", "--metrics-resolution duration", "--cpu-target"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("swell sim --help: exit %d, output lacks %q", code, want)
		}
	}
}

func TestSimObservations(t *testing.T) {
	obs := writeTemp(t, "obs.csv", "t,ready,stable,panic\n0,10,70,70\n2.5,2,14,70\n")
	code, out, errs := swell(t, "sim", "--observations", obs, "--class", "kpa", "--target", "10", "--target-utilization-percentage", "70")
	// 70 at 7 per pod is 10 pods; then the panic window asks for 10 of 2
	// ready pods (500% ≥ 200%): kpa panics, holding 10.
	want := "t,desired,scale,ebc,panic\n0,10,10,-181,false\n2.5,10,10,-261,true\n"
	if code != 0 || out != want || errs != "" {
		t.Errorf("exit %d\nstdout %q\nstderr %q\nwant %q", code, out, errs, want)
	}
}

func TestSimTraffic(t *testing.T) {
	dir := t.TempDir()
	code, out, errs := swell(t, "sim", "--profile", "constant", "--rate", "10", "--duration", "10s", "--arrivals", "uniform",
		"--service-time", "500ms", "--target", "1", "--target-utilization-percentage", "100", "--initial-ready", "5",
		"--out", dir, "--write-trace", filepath.Join(dir, "trace.csv"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"traffic      profile constant for 10s: 10/s; uniform arrivals", "55.0 pod-seconds", "100 arrived, 100 completed"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	for _, f := range []string{"timeline.csv", "summary.txt", "summary.json", "chart.svg"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	var sum struct {
		Traffic    string  `json:"traffic"`
		PodSeconds float64 `json:"pod_seconds"`
		Requests   int     `json:"requests"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil || json.Unmarshal(b, &sum) != nil || sum.PodSeconds != 55 || sum.Requests != 100 || sum.Traffic == "" {
		t.Errorf("summary.json %s: %v %+v", b, err, sum)
	}
	tl, _ := os.ReadFile(filepath.Join(dir, "timeline.csv"))
	if lines := strings.Count(string(tl), "\n"); lines != 12 {
		t.Errorf("timeline has %d lines, want a header and 11 seconds", lines)
	}

	// The trace written replays the same traffic.
	code, out2, errs := swell(t, "sim", "--trace", filepath.Join(dir, "trace.csv"), "--target", "1",
		"--target-utilization-percentage", "100", "--initial-ready", "5")
	_, rest, _ := strings.Cut(out, "\n")
	_, rest2, _ := strings.Cut(out2, "\n")
	if code != 0 || rest != rest2 {
		t.Errorf("replaying the written trace: exit %d %s\n%s\nwant\n%s", code, errs, rest2, rest)
	}
}

func TestSimSweep(t *testing.T) {
	dir := t.TempDir()
	code, out, errs := swell(t, "sim", "--profile", "onoff", "--rate", "2", "--on", "1m", "--off", "2m", "--duration", "6m",
		"--policy", "kpa,hpa", "--sweep", "scale-to-zero-grace-period=10s,2m", "--out", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var rows []string
	for _, l := range lines[3:] {
		rows = append(rows, strings.Join(strings.Fields(l)[:2], " "))
	}
	want := []string{"kpa scale-to-zero-grace-period=10s", "kpa scale-to-zero-grace-period=2m", "hpa 360.0", "oracle 120.9"}
	if !slices.Equal(rows, want) {
		t.Errorf("rows %q, want %q\n%s", rows, want, out)
	}
	// A longer grace period keeps the pod through the 2-minute silences:
	// fewer cold starts for more pod-seconds.
	num := func(line string, i int) float64 {
		v, err := strconv.ParseFloat(strings.Fields(line)[i], 64)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		return v
	}
	if !(num(lines[3], 4) > num(lines[4], 4) && num(lines[3], 2) < num(lines[4], 2)) {
		t.Errorf("the longer grace period should cold-start less and cost more:\n%s", out)
	}
	svg, err := os.ReadFile(filepath.Join(dir, "frontier.svg"))
	if err != nil || !strings.Contains(string(svg), ">oracle</text>") || !strings.Contains(string(svg), ">2m</text>") {
		t.Errorf("frontier.svg: %v\n%.300s", err, svg)
	}
}

func TestSimComparison(t *testing.T) {
	dir := t.TempDir()
	code, out, errs := swell(t, "sim", "--profile", "onoff", "--rate", "2", "--on", "1m", "--off", "2m", "--duration", "6m",
		"--policy", "kpa,hpa,pid,oracle", "--out", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 7 || !strings.HasPrefix(lines[0], "profile onoff") ||
		strings.Join(strings.Fields(lines[2]), " ") != "policy pod-seconds × oracle starting serving idle cold starts waited p50 wait p99 wait rejected max pods × oracle's" {
		t.Fatalf("table:\n%s", out)
	}
	// The bound's row: its own ratio, nothing waits; every policy costs
	// more.
	if f := strings.Fields(lines[6]); f[0] != "oracle" || f[2] != "1.00×" || f[6] != "0" || f[7] != "0" || f[len(f)-1] != "1.00×" {
		t.Errorf("oracle row %q", lines[6])
	}
	// Each row's pod-seconds split into starting, serving and idle.
	for _, l := range lines[3:] {
		f := strings.Fields(l)
		var parts [4]float64
		for i, j := range []int{1, 3, 4, 5} {
			v, err := strconv.ParseFloat(f[j], 64)
			if err != nil {
				t.Fatalf("row %q: column %d: %v", l, j, err)
			}
			parts[i] = v
		}
		if sum := parts[1] + parts[2] + parts[3]; math.Abs(sum-parts[0]) > 0.2 {
			t.Errorf("row %q: starting + serving + idle = %.1f, want the %.1f pod-seconds", l, sum, parts[0])
		}
	}
	for i, class := range []string{"kpa", "hpa", "pid", "oracle"} {
		if !strings.HasPrefix(lines[3+i], class+" ") {
			t.Errorf("row %d: %q, want %s", i, lines[3+i], class)
		}
		if _, err := os.Stat(filepath.Join(dir, class, "chart.svg")); err != nil {
			t.Error(err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "comparison.txt")); err != nil || string(b) != out {
		t.Errorf("comparison.txt %q, %v", b, err)
	}
}

// TestSimCPUComparison: policies carrying settings of their own on one
// step of CPU work, each named as written, with the time from the step to
// the first scale-up and to the pods the new rate needs at the CPU target.
func TestSimCPUComparison(t *testing.T) {
	dir := t.TempDir()
	code, out, errs := swell(t, "sim", "--profile", "step", "--rate", "5", "--step-rate", "35", "--step-at", "2m", "--duration", "6m",
		"--service-time", "200ms", "--container-concurrency", "1", "--metric", "cpu",
		"--policy", "exponential, hpa  metrics-resolution=15s tick-interval=15s window=15s,kpa metric=concurrency,oracle", "--out", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	// 35/s × 200ms is 7 cores of work, 10 pods at 70% of a core.
	if len(lines) != 7 || !strings.HasSuffix(lines[2], "max pods  × oracle's  first up  to 10 ready") {
		t.Fatalf("table:\n%s", out)
	}
	var names []string
	for _, l := range lines[3:] {
		name, _, _ := strings.Cut(l, "  ")
		names = append(names, name)
	}
	want := []string{"exponential", "hpa metrics-resolution=15s tick-interval=15s window=15s", "kpa metric=concurrency", "oracle"}
	if !slices.Equal(names, want) {
		t.Errorf("rows %q, want %q", names, want)
	}
	// The hpa sees the CPU of the step's first 15 seconds when that window
	// closes, and decides on it at the tick then (both every 15s from 0):
	// its 15s stable window reads that window alone, as the Kubernetes
	// HPA reads the latest value.
	if f := strings.Fields(lines[4]); f[len(f)-2] != "15s" {
		t.Errorf("hpa row %q: first scale-up 15s after the step", lines[4])
	}
	if f := strings.Fields(lines[6]); f[len(f)-2] != "-" || f[len(f)-1] != "-" {
		t.Errorf("oracle row %q: it makes no decisions", lines[6])
	}
	hpaDir := "hpa_metrics-resolution=15s_tick-interval=15s_window=15s"
	for _, d := range []string{"exponential", hpaDir, "kpa_metric=concurrency", "oracle"} {
		if _, err := os.Stat(filepath.Join(dir, d, "timeline.csv")); err != nil {
			t.Error(err)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, hpaDir, "summary.txt"))
	if err != nil || !strings.Contains(string(b), "policy       hpa metrics-resolution=15s tick-interval=15s window=15s\n") ||
		!strings.Contains(string(b), "reaction     to the rise at 2m0s: first scale-up after 15s, 10 pods ready after") {
		t.Errorf("summary.txt %v:\n%s", err, b)
	}
}
