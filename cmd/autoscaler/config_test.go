package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func TestConfigFromEnvironment(t *testing.T) {
	cfg, err := parseConfig(nil, env("POD_NAME", "autoscaler-0", "POD_NAMESPACE", "swell", "POD_IP", "10.0.0.7",
		"QUEUE_PROXY_IMAGE", "example/qp:1", "TICK_INTERVAL", "1s", "WORKERS", "2", "BUCKETS", "10", "KUBE_API_QPS", "20.5", "KUBE_API_BURST", "40"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.PodName != "autoscaler-0" || cfg.Namespace != "swell" || cfg.PodIP != "10.0.0.7" ||
		cfg.QueueProxyImage != "example/qp:1" || cfg.TickInterval != time.Second || cfg.Workers != 2 ||
		cfg.Buckets != 10 || cfg.APIQPS != 20.5 || cfg.APIBurst != 40 {
		t.Errorf("config %+v", cfg)
	}
	if cfg.Port != 8080 || cfg.WebhookPort != 8443 || cfg.AdminPort != 8022 || cfg.StatusPort != 8023 || cfg.MetricsPort != 9090 {
		t.Errorf("ports %d %d %d %d %d, want the defaults 8080 8443 8022 8023 9090", cfg.Port, cfg.WebhookPort, cfg.AdminPort, cfg.StatusPort, cfg.MetricsPort)
	}
}

func TestConfigErrorsNameTheSetting(t *testing.T) {
	cases := []struct {
		name string
		env  []string
		want []string
	}{
		{"no pod IP", []string{"POD_NAME", "a"}, []string{"POD_IP is not set"}},
		{"same ports", []string{"POD_NAME", "a", "POD_IP", "10.0.0.1", "WEBHOOK_PORT", "8080"},
			[]string{"AUTOSCALER_PORT and WEBHOOK_PORT are both 8080"}},
		{"status on the admin port", []string{"POD_NAME", "a", "POD_IP", "10.0.0.1", "STATUS_PORT", "8022"},
			[]string{"ADMIN_PORT and STATUS_PORT are both 8022"}},
		{"lease timings", []string{"POD_NAME", "a", "POD_IP", "10.0.0.1", "LEASE_DURATION", "5s", "RENEW_DEADLINE", "10s"},
			[]string{"LEASE_DURATION 5s must exceed RENEW_DEADLINE 10s"}},
		{"renew against retry", []string{"POD_NAME", "a", "POD_IP", "10.0.0.1", "RETRY_PERIOD", "9s"},
			[]string{"RENEW_DEADLINE 10s must exceed 1.2 × RETRY_PERIOD 9s"}},
		{"bad tick", []string{"POD_NAME", "a", "POD_IP", "10.0.0.1", "TICK_INTERVAL", "10ms"}, []string{"TICK_INTERVAL", "10ms"}},
		{"bad workers", []string{"POD_NAME", "a", "POD_IP", "10.0.0.1", "WORKERS", "0"}, []string{"WORKERS", "0"}},
		{"no buckets", []string{"POD_NAME", "a", "POD_IP", "10.0.0.1", "BUCKETS", "0"}, []string{"BUCKETS", "1 to 64"}},
		{"too many buckets", []string{"POD_NAME", "a", "POD_IP", "10.0.0.1", "BUCKETS", "65"}, []string{"BUCKETS", "65"}},
		{"bad peer selector", []string{"POD_NAME", "a", "POD_IP", "10.0.0.1", "PEER_SELECTOR", "app in ("}, []string{"PEER_SELECTOR"}},
		{"bad QPS", []string{"POD_NAME", "a", "POD_IP", "10.0.0.1", "KUBE_API_QPS", "0"}, []string{"KUBE_API_QPS", "above 0"}},
		{"bad burst", []string{"POD_NAME", "a", "POD_IP", "10.0.0.1", "KUBE_API_BURST", "0"}, []string{"KUBE_API_BURST"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseConfig(nil, env(tc.env...))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestRunWithoutAPIServerExits2: with no kubeconfig and outside a pod, the
// autoscaler says it cannot find the API server and exits 2.
func TestRunWithoutAPIServerExits2(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	var stdout, stderr bytes.Buffer
	code := run(nil, env("POD_NAME", "a", "POD_IP", "10.0.0.1", "KUBECONFIG", ""), &stdout, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "find the Kubernetes API server") {
		t.Errorf("exit %d, stderr %q; want 2 and a message about the API server", code, stderr.String())
	}
}

func TestHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--help"}, env(), &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, w := range []string{"QUEUE_PROXY_IMAGE", "POD_IP", "LEASE_DURATION"} {
		if !strings.Contains(stdout.String(), w) {
			t.Errorf("usage lacks %s:\n%s", w, stdout.String())
		}
	}
}
