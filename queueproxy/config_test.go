package queueproxy

import (
	"errors"
	"flag"
	"strings"
	"testing"
	"time"
)

func envMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func TestParseConfigDefaults(t *testing.T) {
	cfg, err := ParseConfig(nil, envMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg != DefaultConfig() {
		t.Errorf("got %+v\nwant %+v", cfg, DefaultConfig())
	}
	if cfg.queueDepth() != 0 {
		t.Errorf("queue depth with CC=0 = %d, want 0", cfg.queueDepth())
	}
}

func TestParseConfigValues(t *testing.T) {
	cfg, err := ParseConfig([]string{"--user-port=9000", "--request-timeout", "1m"}, envMap(map[string]string{
		"USER_PORT":              "7000",
		"CONTAINER_CONCURRENCY":  "4",
		"RESPONSE_START_TIMEOUT": "10s",
		"STREAM_IDLE_TIMEOUT":    "30s",
		"USER_PROBE_PATH":        "/healthz",
		"DRAIN_QUIET_PERIOD":     "100ms",
		"LOG_FORMAT":             "json",
		"QUEUE_LISTEN_ADDRESS":   " 127.0.0.1 ",
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	want.ListenAddress = "127.0.0.1"
	want.UserPort = 9000 // the flag wins
	want.ContainerConcurrency = 4
	want.RequestTimeout = time.Minute
	want.ResponseStartTimeout = 10 * time.Second
	want.StreamIdleTimeout = 30 * time.Second
	want.ProbePath = "/healthz"
	want.DrainQuietPeriod = 100 * time.Millisecond
	want.LogFormat = "json"
	if cfg != want {
		t.Errorf("got  %+v\nwant %+v", cfg, want)
	}
	if cfg.queueDepth() != 40 {
		t.Errorf("default queue depth = %d, want 10×4", cfg.queueDepth())
	}
}

func TestParseConfigQueueDepth(t *testing.T) {
	cfg, err := ParseConfig(nil, envMap(map[string]string{"CONTAINER_CONCURRENCY": "2", "QUEUE_DEPTH": "0"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.queueDepth() != 0 {
		t.Errorf("explicit QUEUE_DEPTH 0 gave depth %d: 0 means no queue", cfg.queueDepth())
	}
}

func TestParseConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{env: map[string]string{"CONTAINER_CONCURRENCY": "abc"}, want: `invalid CONTAINER_CONCURRENCY "abc": must be an integer ≥ 0`},
		{env: map[string]string{"CONTAINER_CONCURRENCY": "-2"}, want: `invalid CONTAINER_CONCURRENCY "-2": must be an integer ≥ 0`},
		{args: []string{"--container-concurrency=x"}, want: `invalid --container-concurrency "x": must be an integer ≥ 0`},
		{env: map[string]string{"QUEUE_LISTEN_ADDRESS": "localhost"}, want: `invalid QUEUE_LISTEN_ADDRESS "localhost": must be an IP address such as 127.0.0.1 or ::1, or empty for every interface`},
		{env: map[string]string{"QUEUE_SERVING_PORT": "0"}, want: `invalid QUEUE_SERVING_PORT "0": must be a port number from 1 to 65535`},
		{env: map[string]string{"USER_PORT": "http"}, want: `invalid USER_PORT "http": must be a port number from 1 to 65535`},
		{env: map[string]string{"REQUEST_TIMEOUT": "300"}, want: `invalid REQUEST_TIMEOUT "300": must be a duration ≥ 0 such as 300ms, 30s or 1m30s (0 turns it off)`},
		{env: map[string]string{"USER_PROBE_PERIOD": "0"}, want: `invalid USER_PROBE_PERIOD "0": must be a duration ≥ 1ms such as 300ms, 30s or 1m30s`},
		{env: map[string]string{"USER_PROBE_FAILURE_THRESHOLD": "0"}, want: `invalid USER_PROBE_FAILURE_THRESHOLD "0": must be an integer ≥ 1`},
		{env: map[string]string{"USER_PROBE_PATH": "healthz"}, want: `invalid USER_PROBE_PATH "healthz": must be an absolute path such as /healthz, or "" for a TCP probe`},
		{env: map[string]string{"APP_USAGE": "cgroup"}, want: `invalid APP_USAGE "cgroup": must be "" (off), pod or listener`},
		{env: map[string]string{"GAUGE": "1abc"}, want: `invalid GAUGE "1abc": selector "1abc": metric name "1abc" does not start with a letter, _ or :; accepted is a metric name, optionally with exact label matches in braces, such as vllm:num_requests_waiting or vllm:num_requests_waiting{model_name="llama"}`},
		{env: map[string]string{"GAUGE": "waiting", "GAUGE_PATH": "metrics"}, want: `invalid GAUGE_PATH "metrics": must be an absolute path such as /metrics`},
		{env: map[string]string{"GAUGE_PORT": "-1"}, want: `invalid GAUGE_PORT "-1": must be a port number from 1 to 65535, or 0 for USER_PORT`},
		{env: map[string]string{"AUTOSCALER_PUSH_URL": "wss://autoscaler/pods", "SERVICE": "ns/web"}, want: `invalid AUTOSCALER_PUSH_URL "wss://autoscaler/pods": must be a ws:// URL with a host and a path, such as ws://autoscaler.swell-system.svc:8081/pods, or "" to push nothing`},
		{env: map[string]string{"AUTOSCALER_PUSH_URL": "ws://autoscaler:8081", "SERVICE": "ns/web"}, want: `invalid AUTOSCALER_PUSH_URL "ws://autoscaler:8081": must be a ws:// URL with a host and a path, such as ws://autoscaler.swell-system.svc:8081/pods, or "" to push nothing`},
		{env: map[string]string{"AUTOSCALER_PUSH_URL": "ws:///pods", "SERVICE": "ns/web"}, want: `invalid AUTOSCALER_PUSH_URL "ws:///pods": must be a ws:// URL with a host and a path, such as ws://autoscaler.swell-system.svc:8081/pods, or "" to push nothing`},
		{env: map[string]string{"AUTOSCALER_PUSH_URL": "ws://autoscaler:8081/pods"}, want: `AUTOSCALER_PUSH_URL is set but SERVICE is not: set SERVICE to the pod's service as namespace/name, or unset AUTOSCALER_PUSH_URL`},
		{env: map[string]string{"SERVICE": "web"}, want: `invalid SERVICE "web": service key "web": no '/'; accepted: namespace/name, each 1 to 63 lower-case letters, digits and '-', starting and ending with a letter or digit`},
		{env: map[string]string{"POD_IP": "pod"}, want: `invalid POD_IP "pod": must be an IP address such as 10.1.2.3 or fd00::3, or "" for 127.0.0.1`},
		{env: map[string]string{"LOG_LEVEL": "verbose"}, want: `invalid LOG_LEVEL "verbose": must be one of debug, info, warn, error`},
		{env: map[string]string{"LOG_FORMAT": "text"}, want: `invalid LOG_FORMAT "text": must be one of auto, json, console`},
		{args: []string{"--bogus"}, want: `flag provided but not defined: -bogus (run with --help to list the settings)`},
		{
			env:  map[string]string{"USER_PORT": "8012"},
			want: `QUEUE_SERVING_PORT and USER_PORT are both 8012: every port must be different`,
		},
		{
			env:  map[string]string{"QUEUE_METRICS_PORT": "8022"},
			want: `QUEUE_ADMIN_PORT and QUEUE_METRICS_PORT are both 8022: every port must be different`,
		},
		{
			env:  map[string]string{"QUEUE_DEPTH": "10"},
			want: `QUEUE_DEPTH 10 has no effect with CONTAINER_CONCURRENCY 0 (unlimited): set CONTAINER_CONCURRENCY > 0 or unset QUEUE_DEPTH`,
		},
		{
			env:  map[string]string{"RESPONSE_START_TIMEOUT": "10m"},
			want: `RESPONSE_START_TIMEOUT 10m0s exceeds REQUEST_TIMEOUT 5m0s: it could never fire; lower it or set it to 0`,
		},
		{
			env:  map[string]string{"REQUEST_TIMEOUT": "1s", "STREAM_IDLE_TIMEOUT": "2s"},
			want: `STREAM_IDLE_TIMEOUT 2s exceeds REQUEST_TIMEOUT 1s: it could never fire; lower it or set it to 0`,
		},
		{
			env:  map[string]string{"DRAIN_QUIET_PERIOD": "1m"},
			want: `DRAIN_QUIET_PERIOD 1m0s exceeds DRAIN_TIMEOUT 30s: a drain would always run to the timeout; lower the quiet period or raise the timeout`,
		},
		{
			// Every bad value is reported, not just the first.
			env:  map[string]string{"CONTAINER_CONCURRENCY": "abc", "DRAIN_TIMEOUT": "soon"},
			want: "invalid CONTAINER_CONCURRENCY \"abc\": must be an integer ≥ 0\ninvalid DRAIN_TIMEOUT \"soon\": must be a duration ≥ 0 such as 300ms, 30s or 1m30s (0 turns it off)",
		},
	} {
		_, err := ParseConfig(tc.args, envMap(tc.env))
		if err == nil || err.Error() != tc.want {
			t.Errorf("env %v args %q:\n got  %v\n want %s", tc.env, tc.args, err, tc.want)
		}
	}
}

func TestParseConfigHelp(t *testing.T) {
	_, err := ParseConfig([]string{"--help"}, envMap(nil))
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err = %v, want flag.ErrHelp", err)
	}
	var b strings.Builder
	PrintUsage(&b)
	for _, name := range []string{"QUEUE_SERVING_PORT", "--container-concurrency", "10×CONTAINER_CONCURRENCY", "DRAIN_QUIET_PERIOD", "AUTOSCALER_PUSH_URL", "--pod-ip"} {
		if !strings.Contains(b.String(), name) {
			t.Errorf("usage lacks %s", name)
		}
	}
}

func TestValidateProgrammatic(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ContainerConcurrency = -1
	cfg.QueueDepth = -5
	err := cfg.Validate()
	want := "invalid CONTAINER_CONCURRENCY -1: must be an integer ≥ 0\ninvalid QUEUE_DEPTH -5: must be an integer ≥ 0"
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}

// TestParseConfigPush: the push settings, and the URL the pusher dials
// from them: the pod's service and stats address in the query.
func TestParseConfigPush(t *testing.T) {
	env := map[string]string{
		"AUTOSCALER_PUSH_URL": "ws://autoscaler.swell-system.svc:8081/pods",
		"SERVICE":             "ns/web",
		"QUEUE_METRICS_PORT":  "9191",
	}
	for _, tc := range []struct {
		podIP, want string
	}{
		{"", "ws://autoscaler.swell-system.svc:8081/pods?addr=127.0.0.1%3A9191&service=ns%2Fweb"},
		{"10.1.2.3", "ws://autoscaler.swell-system.svc:8081/pods?addr=10.1.2.3%3A9191&service=ns%2Fweb"},
		{"fd00::3", "ws://autoscaler.swell-system.svc:8081/pods?addr=%5Bfd00%3A%3A3%5D%3A9191&service=ns%2Fweb"},
	} {
		env["POD_IP"] = tc.podIP
		cfg, err := ParseConfig(nil, envMap(env))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.PushURL != env["AUTOSCALER_PUSH_URL"] || cfg.Service != "ns/web" || cfg.PodIP != tc.podIP {
			t.Errorf("POD_IP %q: push URL %q, service %q, pod IP %q", tc.podIP, cfg.PushURL, cfg.Service, cfg.PodIP)
		}
		if got := cfg.pushTarget(); got != tc.want {
			t.Errorf("POD_IP %q: dials %s, want %s", tc.podIP, got, tc.want)
		}
	}
}

func TestValidatePush(t *testing.T) {
	cfg := DefaultConfig()
	cfg.PushURL = "http://autoscaler/pods"
	cfg.PodIP = "localhost"
	err := cfg.Validate()
	want := `invalid AUTOSCALER_PUSH_URL "http://autoscaler/pods": must be a ws:// URL with a host and a path, such as ws://autoscaler.swell-system.svc:8081/pods, or "" to push nothing
AUTOSCALER_PUSH_URL is set but SERVICE is not: set SERVICE to the pod's service as namespace/name, or unset AUTOSCALER_PUSH_URL
invalid POD_IP "localhost": must be an IP address such as 10.1.2.3 or fd00::3, or "" for 127.0.0.1`
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}
