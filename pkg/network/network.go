// Package network defines the headers, paths and default ports through which
// Swell's components and their clients talk to each other, in one place.
package network

import (
	"net/http"
	"net/netip"
	"strings"
	"time"
)

// Headers Swell sets or reads. Canonical MIME form, so map lookups on
// http.Header need no canonicalisation.
const (
	// HeaderPrefix starts the name of every header Swell defines (the
	// kubelet's KubeletProbeHeader is Kubernetes'). They are for the data
	// plane only: the queue-proxy removes every request header with this
	// prefix before the app sees the request.
	HeaderPrefix = "Swell-"

	// ProxyHeader is set by the activator on every request it forwards to a
	// pod (value ProxyActivator). The queue-proxy counts such requests
	// separately, so the autoscaler can subtract what the activator already
	// reported and never count a request twice.
	ProxyHeader = "Swell-Proxy"
	// ActivatorHeader is set by an activator on every request it forwards,
	// with its name, the one it reports to the autoscaler under: a pod
	// counts what each activator sent it apart (stats.Report.ByActivator),
	// so that the autoscaler counts what an activator that does not report
	// sent. Like every Swell-* header, the queue-proxy strips it.
	ActivatorHeader = "Swell-Activator"
	// ProxyActivator is ProxyHeader's value on requests from the activator.
	ProxyActivator = "activator"

	// ProbeHeader marks a request as a probe of the data plane rather than
	// traffic. A request carrying ProbeHeader: ProbeQueue is answered by the
	// queue-proxy itself (after checking the user container) and never
	// reaches the app. The answer carries ProbeHeader: ProbeQueue too, so the
	// prober knows a queue-proxy answered, not something else on the port.
	ProbeHeader = "Swell-Probe"
	// ProbeQueue is ProbeHeader's value for a probe of the queue-proxy.
	ProbeQueue = "queue"

	// KubeletProbeHeader is set by Kubernetes' kubelet on HTTP probes it
	// sends when the probe is configured with it; kubelet's own User-Agent
	// prefix (KubeletProbeUserAgentPrefix) identifies the rest.
	KubeletProbeHeader = "K-Kubelet-Probe"
	// KubeletProbeUserAgentPrefix starts the User-Agent of kubelet probes.
	KubeletProbeUserAgentPrefix = "kube-probe/"

	// ReasonHeader is set on every response Swell itself generates instead of
	// the app (503 queue full, 504 timeout, 502 app unreachable...), with a
	// short machine-readable reason such as "queue-full".
	ReasonHeader = "Swell-Reason"

	// ServiceHeader names the service a request is for, as a service
	// name, at `swell local`'s front door, which is the user's own. The
	// activator never routes by it (a client could route into any
	// namespace with it), and it is stripped, as every Swell-* header a
	// client sends, before a pod sees the request.
	ServiceHeader = "Swell-Service"
)

// Reasons carried in ReasonHeader.
const (
	ReasonQueueFull       = "queue-full"
	ReasonRequestTimeout  = "request-timeout"
	ReasonResponseTimeout = "response-start-timeout"
	ReasonIdleTimeout     = "stream-idle-timeout"
	ReasonAppUnreachable  = "app-unreachable"
	ReasonNotReady        = "not-ready"
	ReasonDraining        = "draining"
)

// ReasonUnknownService is the activator's reason for a 404: the request's
// Host (or, at swell local's front door, ServiceHeader) names no service
// it knows.
const ReasonUnknownService = "unknown-service"

// ReasonServiceGone answers, with 503, a request the activator held for a
// service that left its source and did not come back within the grace
// (the Deployment deleted, opted out): it may be sent again.
const ReasonServiceGone = "service-gone"

// ReasonCallerNotAllowed is the activator's reason for a 403: the caller
// is no pod of a namespace the service admits (on Kubernetes: its own, and
// those its Deployment's swell.run/allowed-callers annotation lists).
const ReasonCallerNotAllowed = "caller-not-allowed"

// ReasonBusy is the Swell-Reason of a 503 from a server that has as many
// requests in hand as it takes at once (the admission webhooks).
const ReasonBusy = "busy"

// Default ports of the queue-proxy (the same numbers as Knative's, so
// dashboards and habits carry over).
const (
	DefaultQueueServingPort = 8012
	DefaultQueueMetricsPort = 9090
	DefaultQueueAdminPort   = 8022
	DefaultUserPort         = 8080
)

// Paths served by the queue-proxy.
const (
	// StatsPath on the metrics port serves the latest stats report (see
	// docs/stats.md) for the autoscaler to scrape.
	StatsPath = "/stats"
	// MetricsPath on the metrics port serves Prometheus metrics.
	MetricsPath = "/metrics"
	// ReadyPath on the admin port answers 200 while the pod should receive
	// traffic; it is what the pod's readinessProbe calls.
	ReadyPath = "/ready"
	// DrainPath on the admin port answers once the queue-proxy has
	// drained; it is what the app's preStop hook calls. Only a caller on
	// loopback (IsFromLoopback) starts a drain with it; any other caller
	// only waits for one that SIGTERM started (docs/queue-proxy.md).
	DrainPath = "/drain"
)

// The autoscaler's endpoint for activator reports and pokes: a websocket
// carrying pkg/stats activator frames, authenticated with a bearer token in
// the Authorization header (docs/collector.md).
const (
	// ActivatorReportPath is where activators open the websocket.
	ActivatorReportPath = "/activator"
	// DefaultAutoscalerPort is the autoscaler's port for it (Knative's too).
	DefaultAutoscalerPort = 8080
)

// The autoscaler's endpoint for the stats pods push: a websocket opened
// with the pod's service and stats address in the query, each binary
// frame one pkg/stats Report; the autoscaler trusts a connection only as
// the ready pod its source address is (docs/collector.md).
const (
	// PodPushPath is where queue-proxies open the websocket.
	PodPushPath = "/pods"
	// PodPushService and PodPushAddr are the query parameters naming the
	// pod's service ("namespace/name") and its stats address.
	PodPushService = "service"
	PodPushAddr    = "addr"
	// DefaultAutoscalerPushPort is the autoscaler's port for it: plain
	// HTTP, as the scrapes it replaces are, and trusted the same way, by
	// the connection's source address.
	DefaultAutoscalerPushPort = 8081
)

// The autoscaler's status: every service's latest decision and its inputs,
// as JSON (docs/autoscaler.md). On Kubernetes each replica serves it on a
// loopback-only port (STATUS_PORT), read through kubectl port-forward;
// `swell local` serves it on its admin port, for `swell status`.
const AutoscalerStatusPath = "/status"

// IsProbe reports whether r is a probe (from the activator, the kubelet or
// another Swell component) rather than traffic.
func IsProbe(r *http.Request) bool {
	if r.Header.Get(ProbeHeader) != "" || r.Header.Get(KubeletProbeHeader) != "" {
		return true
	}
	return strings.HasPrefix(r.Header.Get("User-Agent"), KubeletProbeUserAgentPrefix)
}

// IsFromActivator reports whether r was forwarded by the activator.
func IsFromActivator(r *http.Request) bool {
	return r.Header.Get(ProxyHeader) == ProxyActivator
}

// IsFromLoopback reports whether r arrived from a loopback address
// (127.0.0.0/8 or ::1, IPv4-mapped included): from a process in the same
// network namespace — in Kubernetes a container of the same pod, an exec
// hook, or kubectl port-forward — and not from anywhere on the network.
// It reads only the connection's peer address (r.RemoteAddr, set by the
// server), never a header, so no client can claim it; Linux drops packets
// with a loopback source that arrive on any other interface.
func IsFromLoopback(r *http.Request) bool {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	return err == nil && ap.Addr().Unmap().IsLoopback()
}

// The bounds of a request timeout (the queue-proxy's REQUEST_TIMEOUT, the
// swell.run/timeout annotation, swell local's requestTimeout), and its
// default: a request, queueing included, ends at this bound.
const (
	DefaultRequestTimeout = 5 * time.Minute
	RequestTimeoutMin     = time.Second
	RequestTimeoutMax     = time.Hour
)
