package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/swell-run/swell/autoscaler"
	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/kube/inject"
	"github.com/swell-run/swell/kube/ports"
	"github.com/swell-run/swell/pkg/envflag"
	"github.com/swell-run/swell/pkg/logging"
	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/shard"
)

// The autoscaler's ports. The status port listens on loopback only, next
// to the admin port.
const (
	defaultWebhookPort = 8443
	defaultAdminPort   = 8022
	defaultStatusPort  = 8023
	defaultMetricsPort = 9090
)

// healthzPath on the admin port answers 200 while the process runs.
const healthzPath = "/healthz"

// config is everything the autoscaler binary can be told.
type config struct {
	Kubeconfig string
	// PodName is this replica's identity in the leader election;
	// Namespace is the system namespace (its own); PodIP is where the
	// activators reach it while it leads.
	PodName, Namespace, PodIP string

	Port, WebhookPort, AdminPort, MetricsPort int
	// PushPort takes the pods' pushed stats, in plain HTTP: a connection
	// is trusted as the ready pod its source address is, as a scrape is.
	PushPort int
	// StatusPort serves the status on loopback only: it names every
	// tenant's services, so only a process in the pod's network namespace
	// (kubectl port-forward, which RBAC governs) may read it.
	StatusPort int

	QueueProxyImage string
	Workers         int
	// APIQPS and APIBurst bound the replica's requests to the API server
	// (client-go's rate limiter).
	APIQPS   float64
	APIBurst int
	// Profile serves Go's profiles on the admin port.
	Profile bool
	// ActivatorAudiences are the audiences an activator's token must be
	// for; none: the API server's own.
	ActivatorAudiences []string
	// TickInterval is 0 when not given: the defaults ConfigMap's, read at
	// start.
	TickInterval time.Duration
	// KeepInterval is how often at most a service's learned memory is
	// written to its Deployment (autoscaler.Config.KeepInterval).
	KeepInterval time.Duration

	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Buckets divides the services among the replicas (package
	// kube/buckets); Peers selects the replicas' Pods.
	Buckets int
	Peers   string
	// ServicePorts are the ports the activators open, one per routed
	// Deployment (package kube/ports).
	ServicePorts ports.Range

	LogLevel, LogFormat string
}

func defaultConfig() config {
	return config{
		Namespace:       kube.DefaultSystemNamespace,
		Port:            network.DefaultAutoscalerPort,
		PushPort:        network.DefaultAutoscalerPushPort,
		WebhookPort:     defaultWebhookPort,
		AdminPort:       defaultAdminPort,
		StatusPort:      defaultStatusPort,
		MetricsPort:     defaultMetricsPort,
		QueueProxyImage: inject.DefaultImage,
		Workers:         4,
		APIQPS:          50,
		APIBurst:        100,
		KeepInterval:    autoscaler.DefaultKeepInterval,
		// client-go's usual leader election timings.
		LeaseDuration: 15 * time.Second,
		RenewDeadline: 10 * time.Second,
		RetryPeriod:   2 * time.Second,
		Buckets:       1,
		ServicePorts:  ports.DefaultRange,
		Peers:         "app.kubernetes.io/name=swell-autoscaler",
		LogLevel:      "info",
		LogFormat:     logging.FormatAuto,
	}
}

// parseConfig reads flags and environment; the error names each bad
// setting, its value and what is accepted, or is flag.ErrHelp.
func parseConfig(args []string, lookupEnv func(string) (string, bool)) (config, error) {
	cfg := defaultConfig()
	if err := bind(&cfg).Parse(args, lookupEnv); err != nil {
		return cfg, err
	}
	if cfg.PodName == "" {
		// In Kubernetes the hostname is the pod's name.
		cfg.PodName, _ = os.Hostname()
	}
	return cfg, cfg.validate()
}

func printUsage(w io.Writer) {
	cfg := defaultConfig()
	bind(&cfg).PrintUsage(w)
}

func bind(cfg *config) *envflag.Set {
	s := envflag.NewSet("autoscaler")
	envflag.Var(s, &cfg.Kubeconfig, "kubeconfig", "KUBECONFIG", "",
		"kubeconfig file; unset: ~/.kube/config if present, else the pod's service account", envflag.String)
	envflag.Var(s, &cfg.PodName, "pod-name", "POD_NAME", "",
		"this replica's identity in the leader election", envflag.String).DefaultText("hostname")
	envflag.Var(s, &cfg.Namespace, "namespace", "POD_NAMESPACE", cfg.Namespace,
		"Swell's namespace: the lease, the defaults ConfigMap, the Secrets, the activator", envflag.String)
	envflag.Var(s, &cfg.PodIP, "pod-ip", "POD_IP", "",
		"this replica's address, published for the activators while it leads", envflag.String)
	envflag.Var(s, &cfg.Port, "port", "AUTOSCALER_PORT", cfg.Port,
		"port serving, over TLS, the activators' websocket ("+network.ActivatorReportPath+")", envflag.Port)
	envflag.Var(s, &cfg.PushPort, "push-port", "PUSH_PORT", cfg.PushPort,
		"port taking the pods' pushed stats ("+network.PodPushPath+", a websocket in plain HTTP, trusted by source address)", envflag.Port)
	envflag.Var(s, &cfg.WebhookPort, "webhook-port", "WEBHOOK_PORT", cfg.WebhookPort,
		"port serving the admission webhooks over TLS", envflag.Port)
	envflag.Var(s, &cfg.AdminPort, "admin-port", "ADMIN_PORT", cfg.AdminPort,
		"port serving "+healthzPath+" and "+network.ReadyPath, envflag.Port)
	envflag.Var(s, &cfg.StatusPort, "status-port", "STATUS_PORT", cfg.StatusPort,
		"port serving this replica's status ("+network.AutoscalerStatusPath+": every service's decisions and load) on 127.0.0.1 and ::1 only; read it through kubectl port-forward", envflag.Port)
	envflag.Var(s, &cfg.MetricsPort, "metrics-port", "METRICS_PORT", cfg.MetricsPort,
		"port serving "+network.MetricsPath, envflag.Port)
	envflag.Var(s, &cfg.QueueProxyImage, "queue-proxy-image", "QUEUE_PROXY_IMAGE", cfg.QueueProxyImage,
		"image of the queue-proxy sidecar the webhook injects", envflag.String)
	envflag.Var(s, &cfg.ActivatorAudiences, "activator-token-audiences", "ACTIVATOR_TOKEN_AUDIENCES", nil,
		"comma-separated audiences an activator's service-account token must be for (a projected token's, with AUTOSCALER_TOKEN_FILE on the activators); unset: the API server's, as for the token every pod mounts",
		audiences)
	envflag.Var(s, &cfg.Workers, "workers", "WORKERS", cfg.Workers,
		"reconcilers working at once, per controller", envflag.IntAtLeast(1))
	envflag.Var(s, &cfg.APIQPS, "kube-api-qps", "KUBE_API_QPS", cfg.APIQPS,
		"requests a second to the API server, on average (client-go's default, 5, took 14 minutes to route a thousand new services)", positiveFloat)
	envflag.Var(s, &cfg.APIBurst, "kube-api-burst", "KUBE_API_BURST", cfg.APIBurst,
		"requests to the API server allowed in a burst above KUBE_API_QPS", envflag.IntAtLeast(1))
	envflag.Var(s, &cfg.TickInterval, "tick-interval", "TICK_INTERVAL", cfg.TickInterval,
		"how often every service is decided; unset: the defaults ConfigMap's tick-interval when the replica starts",
		envflag.DurationAtLeast(100*time.Millisecond)).DefaultText("tick-interval of " + kube.DefaultsConfigMap + ", else 2s")
	envflag.Var(s, &cfg.KeepInterval, "memory-keep-interval", "MEMORY_KEEP_INTERVAL", cfg.KeepInterval,
		"how often at most what a service's policy learned (class adaptive) is written to its Deployment's status annotation",
		envflag.DurationAtLeast(time.Second))
	envflag.Var(s, &cfg.LeaseDuration, "lease-duration", "LEASE_DURATION", cfg.LeaseDuration,
		"how long a leader's lease lasts without renewal", envflag.DurationAtLeast(time.Second))
	envflag.Var(s, &cfg.RenewDeadline, "renew-deadline", "RENEW_DEADLINE", cfg.RenewDeadline,
		"how long the leader keeps trying to renew before it gives up the lead", envflag.DurationAtLeast(time.Second))
	envflag.Var(s, &cfg.RetryPeriod, "retry-period", "RETRY_PERIOD", cfg.RetryPeriod,
		"how often a follower tries to take the lead", envflag.DurationAtLeast(100*time.Millisecond))
	envflag.Var(s, &cfg.ServicePorts, "service-ports", "SERVICE_PORTS", cfg.ServicePorts,
		"the ports, first-last, of which each routed Deployment gets one that every activator opens: its route slices list the activators on it, so that the activators know the service from the port, whatever the Host (keep them below 32768, Linux's ephemeral ports)", ports.ParseRange)
	envflag.Var(s, &cfg.Buckets, "buckets", "BUCKETS", cfg.Buckets,
		"buckets the services are divided into, each led by one replica through its own Lease, spread evenly over the ready replicas (1: one leader for all)",
		bucketCount)
	envflag.Var(s, &cfg.Peers, "peer-selector", "PEER_SELECTOR", cfg.Peers,
		"label selector of the autoscaler's Pods in its namespace, among which the buckets are spread (BUCKETS above 1)", peerSelector)
	envflag.Var(s, &cfg.Profile, "profile", "PROFILE", cfg.Profile,
		"serve Go's CPU and memory profiles at /debug/pprof/ on the admin port, which anyone who reaches the pod can read: for a measurement, not left on", envflag.Bool)
	envflag.Var(s, &cfg.LogLevel, "log-level", "LOG_LEVEL", cfg.LogLevel,
		"debug, info, warn or error", envflag.OneOf("debug", "info", "warn", "error"))
	envflag.Var(s, &cfg.LogFormat, "log-format", "LOG_FORMAT", cfg.LogFormat,
		"auto (console on a terminal, else json), json or console",
		envflag.OneOf(logging.FormatAuto, logging.FormatJSON, logging.FormatConsole))
	return s
}

// positiveFloat accepts a finite number above 0.
func positiveFloat(s string) (float64, error) {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || !(f > 0) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%q is not a number above 0", s)
	}
	return f, nil
}

// bucketCount accepts a number of buckets shard.Check accepts.
func bucketCount(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("%q is not a whole number", s)
	}
	return n, shard.Check(n)
}

// peerSelector accepts a label selector that selects something.
func peerSelector(s string) (string, error) {
	sel, err := labels.Parse(s)
	if err != nil {
		return "", err
	}
	if sel.Empty() {
		return "", errors.New("the selector is empty: it must select the autoscaler's Pods only")
	}
	return s, nil
}

// audiences accepts a comma-separated list of token audiences.
func audiences(s string) ([]string, error) {
	var out []string
	for a := range strings.SplitSeq(s, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if strings.ContainsFunc(a, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
			return nil, fmt.Errorf("audience %q holds a space or control character", a)
		}
		out = append(out, a)
	}
	return out, nil
}

// validate checks settings together.
func (c config) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	ports := []struct {
		name string
		port int
	}{{"AUTOSCALER_PORT", c.Port}, {"PUSH_PORT", c.PushPort}, {"WEBHOOK_PORT", c.WebhookPort}, {"ADMIN_PORT", c.AdminPort}, {"STATUS_PORT", c.StatusPort}, {"METRICS_PORT", c.MetricsPort}}
	for i, p := range ports {
		for _, q := range ports[:i] {
			if p.port == q.port {
				bad("%s and %s are both %d: every port must be different", q.name, p.name, p.port)
			}
		}
	}
	if c.PodName == "" {
		bad("POD_NAME is not set and the hostname is unknown: set it to the pod's name (fieldRef metadata.name)")
	}
	if c.PodIP == "" {
		bad("POD_IP is not set: set it to the pod's address (fieldRef status.podIP); the activators reach the leader there")
	}
	if c.Namespace == "" {
		bad("POD_NAMESPACE is empty: set it to Swell's namespace (fieldRef metadata.namespace)")
	}
	// client-go's own rule, said with our names.
	if c.LeaseDuration <= c.RenewDeadline {
		bad("LEASE_DURATION %s must exceed RENEW_DEADLINE %s", c.LeaseDuration, c.RenewDeadline)
	}
	if c.RenewDeadline <= c.RetryPeriod*6/5 {
		bad("RENEW_DEADLINE %s must exceed 1.2 × RETRY_PERIOD %s", c.RenewDeadline, c.RetryPeriod)
	}
	return errors.Join(errs...)
}
