package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/swell-run/swell/activator"
	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/pkg/envflag"
	"github.com/swell-run/swell/pkg/logging"
	"github.com/swell-run/swell/pkg/network"
)

// Default ports: the serving and metrics ports are Knative's activator's, so
// manifests written for it need no change; the admin port matches the
// queue-proxy's.
const (
	defaultServingPort = 8012
	defaultAdminPort   = 8022
	defaultMetricsPort = 9090
)

// healthzPath on the admin port answers 200 while the process runs.
const healthzPath = "/healthz"

// config is everything the activator binary can be told.
type config struct {
	ServingPort, AdminPort, MetricsPort int

	// ServicesFile names the static services file; "" runs the activator
	// in Kubernetes mode.
	ServicesFile string

	// Kubernetes mode.
	Kubeconfig      string
	SystemNamespace string
	ClusterDomain   string

	AutoscalerURL       string
	AutoscalerToken     string
	AutoscalerTokenFile string
	PodName             string

	QueueDepth       int
	CallerQueueDepth int
	MaxHeld          int
	RequestTimeout   time.Duration

	DrainQuietPeriod time.Duration
	DrainTimeout     time.Duration

	LogLevel, LogFormat string
}

func defaultConfig() config {
	return config{
		ServingPort:      defaultServingPort,
		AdminPort:        defaultAdminPort,
		MetricsPort:      defaultMetricsPort,
		SystemNamespace:  kube.DefaultSystemNamespace,
		ClusterDomain:    activator.DefaultClusterDomain,
		QueueDepth:       activator.DefaultQueueDepth,
		MaxHeld:          activator.DefaultMaxHeld,
		RequestTimeout:   activator.DefaultQueueTimeout,
		DrainQuietPeriod: 5 * time.Second,
		DrainTimeout:     30 * time.Second,
		LogLevel:         "info",
		LogFormat:        logging.FormatAuto,
	}
}

// parseConfig reads flags and environment; the error names each bad
// setting, its value and what is accepted, or is flag.ErrHelp.
func parseConfig(args []string, lookupEnv func(string) (string, bool)) (config, error) {
	cfg := defaultConfig()
	set, st := bind(&cfg)
	if err := set.Parse(args, lookupEnv); err != nil {
		return cfg, err
	}
	if ns, ok := lookupEnv("POD_NAMESPACE"); ok && ns != "" && !st.systemNamespace.IsSet() {
		// The Downward API gives the pod's namespace: where Swell is
		// installed, unless SYSTEM_NAMESPACE says otherwise.
		if _, err := namespace(ns); err != nil {
			return cfg, fmt.Errorf("invalid POD_NAMESPACE %q: %w", ns, err)
		}
		cfg.SystemNamespace = ns
	}
	if cfg.PodName == "" {
		// In Kubernetes the hostname is the pod's name.
		cfg.PodName, _ = os.Hostname()
	}
	if st.kubeconfig.IsSet() && st.kubeconfig.Name() == "KUBECONFIG" {
		// client-go reads $KUBECONFIG itself, path lists included, as
		// kubectl does; only --kubeconfig names one file explicitly.
		cfg.Kubeconfig = ""
	}
	if cfg.kubernetesMode() && !st.autoscalerURL.IsSet() {
		cfg.AutoscalerURL = defaultAutoscalerURL(cfg.SystemNamespace)
	}
	return cfg, cfg.validate()
}

// defaultAutoscalerURL is the autoscaler's endpoint for activators in
// Kubernetes mode: its Service in the system namespace, over TLS, which the
// reporter dials at the endpoint the source knows (autoscalerDialer).
func defaultAutoscalerURL(systemNamespace string) string {
	return fmt.Sprintf("wss://%s.%s.svc:%d%s", kube.AutoscalerService, systemNamespace, network.DefaultAutoscalerPort, network.ActivatorReportPath)
}

func printUsage(w io.Writer) {
	cfg := defaultConfig()
	set, _ := bind(&cfg)
	set.PrintUsage(w)
}

// settings are the declared settings parseConfig looks at once parsed.
type settings struct {
	kubeconfig, systemNamespace, autoscalerURL *envflag.Setting
}

func bind(cfg *config) (*envflag.Set, settings) {
	var st settings
	s := envflag.NewSet("activator")
	envflag.Var(s, &cfg.ServingPort, "activator-port", "ACTIVATOR_PORT", cfg.ServingPort,
		"port receiving the proxied traffic", envflag.Port)
	envflag.Var(s, &cfg.AdminPort, "activator-admin-port", "ACTIVATOR_ADMIN_PORT", cfg.AdminPort,
		"port serving "+healthzPath+", "+network.ReadyPath+" and "+network.DrainPath, envflag.Port)
	envflag.Var(s, &cfg.MetricsPort, "activator-metrics-port", "ACTIVATOR_METRICS_PORT", cfg.MetricsPort,
		"port serving "+network.MetricsPath, envflag.Port)
	envflag.Var(s, &cfg.ServicesFile, "services-file", "SERVICES_FILE", "",
		`JSON file listing the services and their pods (reloaded on SIGHUP); "" = Kubernetes mode: the services are the cluster's pods-Services`, envflag.String)
	st.kubeconfig = envflag.Var(s, &cfg.Kubeconfig, "kubeconfig", "KUBECONFIG", "",
		`Kubernetes mode: kubeconfig file (KUBECONFIG may list several, as for kubectl); "" = ~/.kube/config if present, else the pod's service account`, envflag.String)
	st.systemNamespace = envflag.Var(s, &cfg.SystemNamespace, "system-namespace", "SYSTEM_NAMESPACE", cfg.SystemNamespace,
		"Kubernetes mode: namespace of the autoscaler's Service and of the ConfigMap "+kube.CAConfigMap+" of the CAs it is trusted by", namespace).
		DefaultText("POD_NAMESPACE, else " + kube.DefaultSystemNamespace)
	envflag.Var(s, &cfg.ClusterDomain, "cluster-domain", "CLUSTER_DOMAIN", cfg.ClusterDomain,
		"cluster DNS suffix of the routed host names <service>.<namespace>.svc.<domain>", domain)
	st.autoscalerURL = envflag.Var(s, &cfg.AutoscalerURL, "autoscaler-url", "AUTOSCALER_URL", "",
		`autoscaler websocket, ws:// or wss://host:port`+network.ActivatorReportPath+` (Kubernetes mode: wss:// only); "" = do not report`, wsURL).
		DefaultText(`"" (Kubernetes mode: ` + defaultAutoscalerURL("$SYSTEM_NAMESPACE") + `)`)
	envflag.Var(s, &cfg.AutoscalerToken, "autoscaler-token", "AUTOSCALER_TOKEN", "",
		"bearer token for the autoscaler (Kubernetes mode, if neither is set: the pod's service-account token, read again at each connection)", envflag.String)
	envflag.Var(s, &cfg.AutoscalerTokenFile, "autoscaler-token-file", "AUTOSCALER_TOKEN_FILE", "",
		"file holding the bearer token, read again at each connection (a projected service-account token, a rotated secret)", envflag.String)
	envflag.Var(s, &cfg.PodName, "pod-name", "POD_NAME", "",
		"this activator's name towards the autoscaler", envflag.String).DefaultText("hostname")
	envflag.Var(s, &cfg.QueueDepth, "queue-depth", "QUEUE_DEPTH", cfg.QueueDepth,
		"most requests waiting per service", envflag.IntAtLeast(1))
	envflag.Var(s, &cfg.CallerQueueDepth, "caller-queue-depth", "CALLER_QUEUE_DEPTH", 0,
		"most requests waiting per service from one caller (by address); 0 = half of QUEUE_DEPTH", envflag.IntAtLeast(0)).
		DefaultText("0 (half of QUEUE_DEPTH)")
	envflag.Var(s, &cfg.MaxHeld, "max-held-requests", "MAX_HELD_REQUESTS", cfg.MaxHeld,
		"most requests waiting across all services (about 23 KB each)", envflag.IntAtLeast(1))
	envflag.Var(s, &cfg.RequestTimeout, "request-timeout", "REQUEST_TIMEOUT", cfg.RequestTimeout,
		"bound on a request's wait for a pod", envflag.DurationAtLeast(time.Millisecond))
	envflag.Var(s, &cfg.DrainQuietPeriod, "drain-quiet-period", "DRAIN_QUIET_PERIOD", cfg.DrainQuietPeriod,
		"time with nothing in flight after which a drain ends", envflag.DurationAtLeast(0))
	envflag.Var(s, &cfg.DrainTimeout, "drain-timeout", "DRAIN_TIMEOUT", cfg.DrainTimeout,
		"bound on a drain", envflag.DurationAtLeast(0))
	envflag.Var(s, &cfg.LogLevel, "log-level", "LOG_LEVEL", cfg.LogLevel,
		"debug, info, warn or error", envflag.OneOf("debug", "info", "warn", "error"))
	envflag.Var(s, &cfg.LogFormat, "log-format", "LOG_FORMAT", cfg.LogFormat,
		"auto (console on a terminal, else json), json or console",
		envflag.OneOf(logging.FormatAuto, logging.FormatJSON, logging.FormatConsole))
	return s, st
}

// namespace accepts a Kubernetes namespace name.
func namespace(s string) (string, error) {
	if errs := validation.IsDNS1123Label(s); len(errs) > 0 {
		return "", fmt.Errorf("must be a namespace name: %s", strings.Join(errs, "; "))
	}
	return s, nil
}

// domain accepts a DNS domain such as cluster.local.
func domain(s string) (string, error) {
	s = strings.TrimSuffix(s, ".")
	if errs := validation.IsDNS1123Subdomain(s); len(errs) > 0 {
		return "", fmt.Errorf("must be a DNS domain such as cluster.local: %s", strings.Join(errs, "; "))
	}
	return s, nil
}

func wsURL(s string) (string, error) {
	if s != "" && !strings.HasPrefix(s, "ws://") && !strings.HasPrefix(s, "wss://") {
		return "", errors.New(`must be a ws:// or wss:// URL such as ws://autoscaler:8080/activator, or ""`)
	}
	return s, nil
}

// validate checks settings together.
func (c config) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	ports := []struct {
		name string
		port int
	}{{"ACTIVATOR_PORT", c.ServingPort}, {"ACTIVATOR_ADMIN_PORT", c.AdminPort}, {"ACTIVATOR_METRICS_PORT", c.MetricsPort}}
	for i, p := range ports {
		for _, q := range ports[:i] {
			if p.port == q.port {
				bad("%s and %s are both %d: every port must be different", q.name, p.name, p.port)
			}
		}
	}
	if !c.kubernetesMode() && c.AutoscalerURL != "" && !c.tokenSet() {
		bad("AUTOSCALER_URL %q needs AUTOSCALER_TOKEN or AUTOSCALER_TOKEN_FILE: the autoscaler refuses activators without a token", c.AutoscalerURL)
	}
	if c.AutoscalerToken != "" && c.AutoscalerTokenFile != "" {
		bad("AUTOSCALER_TOKEN and AUTOSCALER_TOKEN_FILE are both set: set one")
	}
	if c.kubernetesMode() && strings.HasPrefix(c.AutoscalerURL, "ws://") {
		bad("AUTOSCALER_URL %q: in Kubernetes mode the autoscaler serves its activators over TLS only; use wss://", c.AutoscalerURL)
	}
	if c.CallerQueueDepth > c.QueueDepth {
		bad("CALLER_QUEUE_DEPTH %d exceeds QUEUE_DEPTH %d: one caller's share is at most the whole queue; lower it, or 0 for half", c.CallerQueueDepth, c.QueueDepth)
	}
	if c.DrainQuietPeriod > c.DrainTimeout {
		bad("DRAIN_QUIET_PERIOD %s exceeds DRAIN_TIMEOUT %s: lower the quiet period or raise the timeout", c.DrainQuietPeriod, c.DrainTimeout)
	}
	return errors.Join(errs...)
}

// kubernetesMode reports whether the services come from the cluster
// rather than SERVICES_FILE.
func (c config) kubernetesMode() bool { return c.ServicesFile == "" }

// tokenSet reports whether the token is configured; if not, Kubernetes mode
// presents the pod's service-account token.
func (c config) tokenSet() bool { return c.AutoscalerToken != "" || c.AutoscalerTokenFile != "" }

// credentials returns the configured token, or the file that holds it
// (read again at each connection), which must hold one now.
func (c config) credentials() (token, file string, err error) {
	if c.AutoscalerTokenFile == "" {
		return c.AutoscalerToken, "", nil
	}
	b, err := os.ReadFile(c.AutoscalerTokenFile)
	if err != nil {
		return "", "", fmt.Errorf("invalid AUTOSCALER_TOKEN_FILE %q: %w", c.AutoscalerTokenFile, err)
	}
	if strings.TrimSpace(string(b)) == "" {
		return "", "", fmt.Errorf("invalid AUTOSCALER_TOKEN_FILE %q: the file is empty; it must hold the token", c.AutoscalerTokenFile)
	}
	return "", c.AutoscalerTokenFile, nil
}
