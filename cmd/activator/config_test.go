package main

import (
	"strings"
	"testing"
)

func envOf(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestFileMode(t *testing.T) {
	cfg, err := parseConfig(nil, envOf("SERVICES_FILE", "/etc/swell/services.json", "POD_NAME", "act-0"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.kubernetesMode() || cfg.AutoscalerURL != "" || cfg.ClusterDomain != "cluster.local" {
		t.Errorf("got %+v, want file mode, no autoscaler, cluster.local", cfg)
	}
	_, err = parseConfig(nil, envOf("SERVICES_FILE", "/s.json", "AUTOSCALER_URL", "ws://as:8080/activator"))
	if err == nil || !strings.Contains(err.Error(), "needs AUTOSCALER_TOKEN or AUTOSCALER_TOKEN_FILE") {
		t.Errorf("file mode, URL without a token: got %v, want it refused", err)
	}
}

func TestKubernetesModeDefaults(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		env     []string
		ns, url string
	}{
		{"defaults", nil, nil, "swell-system", "wss://autoscaler.swell-system.svc:8080/activator"},
		{"POD_NAMESPACE", nil, []string{"POD_NAMESPACE", "swell"}, "swell", "wss://autoscaler.swell.svc:8080/activator"},
		{"SYSTEM_NAMESPACE wins", nil, []string{"POD_NAMESPACE", "Not_Checked", "SYSTEM_NAMESPACE", "infra"},
			"infra", "wss://autoscaler.infra.svc:8080/activator"},
		{"URL given", nil, []string{"AUTOSCALER_URL", "wss://as.example.com/activator"}, "swell-system", "wss://as.example.com/activator"},
		{"reporting off", []string{"--autoscaler-url="}, nil, "swell-system", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parseConfig(tc.args, envOf(tc.env...))
			if err != nil {
				t.Fatal(err)
			}
			if !cfg.kubernetesMode() || cfg.SystemNamespace != tc.ns || cfg.AutoscalerURL != tc.url || cfg.tokenSet() {
				t.Errorf("got mode %v namespace %q URL %q token set %v, want Kubernetes, %q, %q, no token",
					cfg.kubernetesMode(), cfg.SystemNamespace, cfg.AutoscalerURL, cfg.tokenSet(), tc.ns, tc.url)
			}
		})
	}
}

func TestKubeconfig(t *testing.T) {
	cfg, err := parseConfig([]string{"--kubeconfig", "/a/config"}, envOf("KUBECONFIG", "/b/config"))
	if err != nil || cfg.Kubeconfig != "/a/config" {
		t.Errorf("--kubeconfig: got %q %v, want /a/config", cfg.Kubeconfig, err)
	}
	// client-go reads $KUBECONFIG itself, so that a list of files works.
	cfg, err = parseConfig(nil, envOf("KUBECONFIG", "/b/config:/c/config"))
	if err != nil || cfg.Kubeconfig != "" {
		t.Errorf("KUBECONFIG: got %q %v, want it left to client-go", cfg.Kubeconfig, err)
	}
}

func TestClusterDomain(t *testing.T) {
	cfg, err := parseConfig(nil, envOf("CLUSTER_DOMAIN", "corp.internal."))
	if err != nil || cfg.ClusterDomain != "corp.internal" {
		t.Errorf("got %q %v, want corp.internal", cfg.ClusterDomain, err)
	}
}

func TestBadKubernetesSettings(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"SYSTEM_NAMESPACE", "Swell_System"}, `invalid SYSTEM_NAMESPACE "Swell_System": must be a namespace name`},
		{[]string{"POD_NAMESPACE", "-x"}, `invalid POD_NAMESPACE "-x": must be a namespace name`},
		{[]string{"CLUSTER_DOMAIN", "bad domain"}, `invalid CLUSTER_DOMAIN "bad domain": must be a DNS domain`},
		{[]string{"AUTOSCALER_URL", "http://as:8080"}, `invalid AUTOSCALER_URL "http://as:8080": must be a ws://`},
		{[]string{"AUTOSCALER_URL", "ws://as:8080/activator"}, "the autoscaler serves its activators over TLS only; use wss://"},
		{[]string{"AUTOSCALER_TOKEN", "t", "AUTOSCALER_TOKEN_FILE", "/f"}, "both set: set one"},
	} {
		_, err := parseConfig(nil, envOf(tc.env...))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want %q", tc.env, err, tc.want)
		}
	}
}

func TestUsageListsKubernetesSettings(t *testing.T) {
	var b strings.Builder
	printUsage(&b)
	for _, want := range []string{"KUBECONFIG", "SYSTEM_NAMESPACE", "POD_NAMESPACE, else swell-system", "CLUSTER_DOMAIN",
		"wss://autoscaler.$SYSTEM_NAMESPACE.svc:8080/activator", "swell-ca", "service-account token"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("usage does not mention %q:\n%s", want, b.String())
		}
	}
}

// TestHoldLimits: MAX_HELD_REQUESTS and CALLER_QUEUE_DEPTH have their
// defaults, and a caller's share larger than the queue is refused, naming
// both settings.
func TestHoldLimits(t *testing.T) {
	cfg, err := parseConfig(nil, envOf("SERVICES_FILE", "/s.json"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxHeld != 10000 || cfg.CallerQueueDepth != 0 {
		t.Errorf("defaults: MAX_HELD_REQUESTS %d CALLER_QUEUE_DEPTH %d, want 10000 and 0 (half the queue)", cfg.MaxHeld, cfg.CallerQueueDepth)
	}
	cfg, err = parseConfig(nil, envOf("SERVICES_FILE", "/s.json", "MAX_HELD_REQUESTS", "500", "CALLER_QUEUE_DEPTH", "20"))
	if err != nil || cfg.MaxHeld != 500 || cfg.CallerQueueDepth != 20 {
		t.Errorf("set: %d %d %v, want 500 20", cfg.MaxHeld, cfg.CallerQueueDepth, err)
	}
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"QUEUE_DEPTH", "10", "CALLER_QUEUE_DEPTH", "11"}, "CALLER_QUEUE_DEPTH 11 exceeds QUEUE_DEPTH 10"},
		{[]string{"MAX_HELD_REQUESTS", "0"}, `invalid MAX_HELD_REQUESTS "0"`},
		{[]string{"CALLER_QUEUE_DEPTH", "-1"}, `invalid CALLER_QUEUE_DEPTH "-1"`},
	} {
		_, err := parseConfig(nil, envOf(append([]string{"SERVICES_FILE", "/s.json"}, tc.env...)...))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.env, err, tc.want)
		}
	}
}
