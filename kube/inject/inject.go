// Package inject adds Swell's queue-proxy sidecar to the pod template of an
// opted-in workload: what Swell's mutating webhook and `swell inject` do.
package inject

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/pkg/autoscaling"
	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/service"
	"github.com/swell-run/swell/queueproxy"
)

// DefaultImage is the queue-proxy image used when none is given.
const DefaultImage = "ghcr.io/swell-run/queue-proxy:latest"

// ContainerName is the queue-proxy container's name; no app container may
// take it.
const ContainerName = "queue-proxy"

// The queue-proxy's port names.
const (
	PortNameServing = "swell-http"
	PortNameAdmin   = "swell-admin"
	PortNameMetrics = "swell-metrics"
)

// RunAsUser is the queue-proxy's user: 65532, the nonroot user of
// distroless images. The queue-proxy is a static binary that reads and
// writes no file, so it runs as any user; a number is given because the
// kubelet can check only a numeric user against runAsNonRoot, whatever
// user the image names.
const RunAsUser = 65532

// DrainQuietPeriod is the queue-proxy's quiet period (DRAIN_QUIET_PERIOD),
// counted into the pod's termination grace period.
const DrainQuietPeriod = 5 * time.Second

// drainMargin is the time left after a drain and the longest request for
// the app to exit on SIGTERM.
const drainMargin = 10 * time.Second

// drainTimeout is the queue-proxy's DRAIN_TIMEOUT for a request timeout:
// long enough for a request that began just before the drain, and the
// quiet period after it.
func drainTimeout(requestTimeout time.Duration) time.Duration {
	return requestTimeout + DrainQuietPeriod
}

// defaultGracePeriod is Kubernetes' terminationGracePeriodSeconds default.
const defaultGracePeriod = 30 * time.Second

// Config is how to inject.
type Config struct {
	// Image is the queue-proxy image; required.
	Image string
	// Resources are the queue-proxy's requests and limits; when it sets
	// nothing, DefaultResources.
	Resources corev1.ResourceRequirements
	// Defaults are the cluster's autoscaling defaults, against which the
	// autoscaling annotations are validated.
	Defaults autoscaling.Defaults
	// PushURL, when set, is the autoscaler's push endpoint (see PushURL):
	// the queue-proxy pushes its stats there, as its Deployment's pod.
	// Empty, it pushes nothing and the autoscaler scrapes it.
	PushURL string
}

// PushURL is the push endpoint of the autoscaler installed in
// systemNamespace: the Service kube.AutoscalerService, which the leader
// publishes, and which redirects a pod to the replica that leads its
// service.
func PushURL(systemNamespace string) string {
	return fmt.Sprintf("ws://%s.%s.svc:%d%s", kube.AutoscalerService, systemNamespace, network.DefaultAutoscalerPushPort, network.PodPushPath)
}

// DefaultResources returns the queue-proxy's default resources: requests of
// 25m CPU and 32Mi memory, a limit of 128Mi memory. No CPU limit, so a busy
// proxy is never throttled below what the app can serve.
func DefaultResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("25m"),
			corev1.ResourceMemory: resource.MustParse("32Mi"),
		},
		Limits: corev1.ResourceList{
			corev1.ResourceMemory: resource.MustParse("128Mi"),
		},
	}
}

// Enabled says whether labels opt a workload in: swell.run/enabled is
// "true".
func Enabled(labels map[string]string) bool {
	return labels[kube.LabelEnabled] == "true"
}

// Template injects the queue-proxy into tpl, the pod template of a workload
// whose metadata is workload: its annotations, and, when cfg pushes, its
// name and controller (pushService). It does nothing and returns nil
// unless tpl's labels opt in (Enabled).
//
// Every swell.run/ and autoscaling.swell.run/ annotation is validated and
// every problem returned, joined with errors.Join. The result is built on a
// deep copy and only then stored in *tpl, so the maps and slices tpl held
// are never changed, and on error tpl is left as it was. Injecting an
// injected template gives the same template again.
func Template(workload metav1.ObjectMeta, tpl *corev1.PodTemplateSpec, cfg Config) error {
	if !Enabled(tpl.Labels) {
		return nil
	}
	if cfg.Image == "" {
		return errors.New("no queue-proxy image given")
	}
	if cfg.PushURL != "" {
		// The queue-proxy would refuse to start with it.
		if err := queueproxy.CheckPushURL(cfg.PushURL); err != nil {
			return fmt.Errorf("queue-proxy push URL %q: %w", cfg.PushURL, err)
		}
	}
	s, err := parseSettings(workload.Annotations, cfg.Defaults)
	if err != nil {
		return err
	}

	out := tpl.DeepCopy()
	if err := uninject(out); err != nil {
		return err
	}
	spec := &out.Spec
	app, err := AppContainer(spec, s.container)
	if err != nil {
		return err
	}
	c := &spec.Containers[app]
	metricsEnv, metricsErr := appMetrics(workload.Annotations, s.autoscaling, out, c)
	if err := errors.Join(checkPorts(spec), metricsErr); err != nil {
		return err
	}

	userPort := int32(network.DefaultUserPort)
	if len(c.Ports) > 0 {
		userPort = c.Ports[0].ContainerPort
	}
	if !hasEnv(c.Env, "PORT") {
		c.Env = append(c.Env, corev1.EnvVar{Name: "PORT", Value: strconv.Itoa(int(userPort))})
	}

	var probeEnv []corev1.EnvVar
	if c.ReadinessProbe != nil {
		raw, err := json.Marshal(c.ReadinessProbe)
		if err != nil {
			return fmt.Errorf("container %s: readiness probe: %w", c.Name, err)
		}
		setAnnotation(&out.ObjectMeta, AnnotationUserReadinessProbe, string(raw))
		if env, ok := moveProbe(c, userPort); ok {
			probeEnv = env
			c.ReadinessProbe = nil
		}
	}

	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
		if c.Lifecycle == nil {
			c.Lifecycle = &corev1.Lifecycle{}
		}
		c.Lifecycle.PreStop = drainHook()
	}

	need := drainTimeout(s.timeout) + drainMargin
	grace := defaultGracePeriod
	if spec.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	}
	seconds := int64(max(grace, need) / time.Second)
	spec.TerminationGracePeriodSeconds = &seconds

	spec.Containers = append(spec.Containers, queueProxy(cfg, s, userPort, probeEnv, metricsEnv, pushEnv(cfg, workload)))
	setAnnotation(&out.ObjectMeta, AnnotationInjected, cfg.Image)
	*tpl = *out
	return nil
}

// uninject undoes a previous injection, so that injecting again starts
// from the user's template: the queue-proxy goes, the app's readiness
// probe, when injection moved it, comes back, and so does an unset
// shareProcessNamespace.
func uninject(tpl *corev1.PodTemplateSpec) error {
	if _, ok := tpl.Annotations[AnnotationInjected]; !ok {
		for _, c := range tpl.Spec.Containers {
			if c.Name == ContainerName {
				return fmt.Errorf("container name %s is reserved for Swell's sidecar; rename the container", ContainerName)
			}
		}
		return nil
	}
	var kept []corev1.Container
	for _, c := range tpl.Spec.Containers {
		if c.Name != ContainerName {
			kept = append(kept, c)
		}
	}
	tpl.Spec.Containers = kept
	unshareProcessNamespace(tpl)
	raw, ok := tpl.Annotations[AnnotationUserReadinessProbe]
	if !ok {
		return nil
	}
	var probe corev1.Probe
	if err := json.Unmarshal([]byte(raw), &probe); err != nil {
		return fmt.Errorf("annotation %s: %q is not a probe in JSON: %w", AnnotationUserReadinessProbe, raw, err)
	}
	for i := range tpl.Spec.Containers {
		c := &tpl.Spec.Containers[i]
		// A probe left on the app stays where it is; a moved one comes back
		// to the app without one. With several containers the app is not
		// known yet, so the probe goes back to the first that could have
		// had it moved off: the one whose ports it probes.
		if c.ReadinessProbe == nil && probesContainer(&probe, c) {
			c.ReadinessProbe = &probe
			break
		}
	}
	delete(tpl.Annotations, AnnotationUserReadinessProbe)
	return nil
}

// probesContainer says whether probe targets one of c's ports (or the
// default port when c declares none).
func probesContainer(probe *corev1.Probe, c *corev1.Container) bool {
	port := int32(network.DefaultUserPort)
	if len(c.Ports) > 0 {
		port = c.Ports[0].ContainerPort
	}
	_, ok := moveProbe(&corev1.Container{Ports: c.Ports, ReadinessProbe: probe}, port)
	return ok
}

// AppContainer returns the index in spec.Containers of the app container
// of a pod template, injected or not: the one named (name is the
// swell.run/container annotation, or ""), else the only container besides
// the queue-proxy, else the only one of them declaring a port. Injection,
// routing and the controller all find the app by this one rule.
func AppContainer(spec *corev1.PodSpec, name string) (int, error) {
	var apps []int
	for i, c := range spec.Containers {
		if c.Name != ContainerName {
			apps = append(apps, i)
		}
	}
	names := func() string {
		var b []byte
		for n, i := range apps {
			if n > 0 {
				b = append(b, ", "...)
			}
			b = append(b, spec.Containers[i].Name...)
		}
		return string(b)
	}
	if name != "" {
		for _, i := range apps {
			if spec.Containers[i].Name == name {
				return i, nil
			}
		}
		return -1, &autoscaling.Error{Key: AnnotationContainer, Name: AnnotationContainer, Value: name,
			Problem: "names no container", Accepted: "one of " + names()}
	}
	switch len(apps) {
	case 0:
		return -1, errors.New("the pod template has no app container")
	case 1:
		return apps[0], nil
	}
	app := -1
	for _, i := range apps {
		c := &spec.Containers[i]
		if len(c.Ports) == 0 {
			continue
		}
		if app >= 0 {
			return -1, fmt.Errorf("containers %s and %s both declare ports: set the annotation %s to the app container's name", spec.Containers[app].Name, c.Name, AnnotationContainer)
		}
		app = i
	}
	if app < 0 {
		return -1, fmt.Errorf("none of the containers %s declares a port: set the annotation %s to the app container's name", names(), AnnotationContainer)
	}
	return app, nil
}

// checkPorts fails if a container of the pod, init containers included
// (sidecars share the network), declares one of the queue-proxy's ports.
func checkPorts(spec *corev1.PodSpec) error {
	ours := map[int32]string{
		network.DefaultQueueServingPort: PortNameServing,
		network.DefaultQueueAdminPort:   PortNameAdmin,
		network.DefaultQueueMetricsPort: PortNameMetrics,
	}
	var errs []error
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for _, c := range cs {
			for _, p := range c.Ports {
				if name, ok := ours[p.ContainerPort]; ok {
					errs = append(errs, fmt.Errorf("container %s: port %d is the queue-proxy's %s port; accepted: any port but %d, %d and %d",
						c.Name, p.ContainerPort, name, network.DefaultQueueServingPort, network.DefaultQueueAdminPort, network.DefaultQueueMetricsPort))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// moveProbe returns the queue-proxy's USER_PROBE_* environment for the
// app's readiness probe, and whether the queue-proxy can run it: an HTTP
// GET or a TCP connection to the app's port. Other probes (exec, gRPC,
// HTTPS, custom headers or host, another port) stay on the app.
func moveProbe(c *corev1.Container, userPort int32) ([]corev1.EnvVar, bool) {
	p := c.ReadinessProbe
	var path string
	switch {
	case p.HTTPGet != nil:
		h := p.HTTPGet
		if !isPort(c, h.Port, userPort) || h.Host != "" || len(h.HTTPHeaders) > 0 ||
			(h.Scheme != "" && h.Scheme != corev1.URISchemeHTTP) {
			return nil, false
		}
		path = h.Path
		if path == "" || path[0] != '/' {
			path = "/" + path
		}
	case p.TCPSocket != nil:
		if !isPort(c, p.TCPSocket.Port, userPort) || p.TCPSocket.Host != "" {
			return nil, false
		}
	default:
		return nil, false
	}
	env := []corev1.EnvVar{{Name: "USER_PROBE_PATH", Value: path}}
	if p.PeriodSeconds > 0 {
		env = append(env, corev1.EnvVar{Name: "USER_PROBE_PERIOD", Value: strconv.Itoa(int(p.PeriodSeconds)) + "s"})
	}
	if p.TimeoutSeconds > 0 {
		env = append(env, corev1.EnvVar{Name: "USER_PROBE_TIMEOUT", Value: strconv.Itoa(int(p.TimeoutSeconds)) + "s"})
	}
	if p.FailureThreshold > 0 {
		env = append(env, corev1.EnvVar{Name: "USER_PROBE_FAILURE_THRESHOLD", Value: strconv.Itoa(int(p.FailureThreshold))})
	}
	return env, true
}

// isPort says whether port, a number or a port name of c, is userPort.
func isPort(c *corev1.Container, port intstr.IntOrString, userPort int32) bool {
	if port.Type == intstr.Int {
		return port.IntVal == userPort
	}
	for _, p := range c.Ports {
		if p.Name == port.StrVal {
			return p.ContainerPort == userPort
		}
	}
	return false
}

// drainHook waits until the queue-proxy has drained, so the app gets
// SIGTERM only when no request is left for it. The kubelet calls it from
// the node, not from loopback, so the call does not start a drain: the
// queue-proxy's own SIGTERM, sent at the same moment, does, and the call
// answers once that drain has ended (docs/queue-proxy.md).
func drainHook() *corev1.LifecycleHandler {
	return &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{
		Path: network.DrainPath,
		Port: intstr.FromInt32(network.DefaultQueueAdminPort),
	}}
}

// pushEnv is the queue-proxy's environment for pushing its stats to
// cfg.PushURL as a pod of the Deployment pushService names, or nil when
// it pushes nothing: cfg has no PushURL, or the workload's name cannot be
// a service's (a dot, more than 63 characters, none yet), which the
// autoscaler would not scale either.
//
// The namespace comes from the downward API, never from workload: a
// manifest injected offline often has none, and the pod's namespace is
// its Deployment's. SERVICE refers to it as $(POD_NAMESPACE), which the
// kubelet expands, so the template reads the same in every namespace and
// the queue-proxy has one setting for its service.
func pushEnv(cfg Config, workload metav1.ObjectMeta) []corev1.EnvVar {
	if cfg.PushURL == "" {
		return nil
	}
	// The namespace is a DNS label, as every namespace is: only the name
	// needs checking.
	name := pushService(workload)
	if _, err := service.New("namespace", name); err != nil {
		return nil
	}
	field := func(path string) *corev1.EnvVarSource {
		// The API version is the one the API server would default, so that
		// an injected template, read back, injects to itself.
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}
	}
	return []corev1.EnvVar{
		{Name: "AUTOSCALER_PUSH_URL", Value: cfg.PushURL},
		{Name: "POD_NAMESPACE", ValueFrom: field("metadata.namespace")},
		{Name: "SERVICE", Value: "$(POD_NAMESPACE)/" + name},
		{Name: "POD_IP", ValueFrom: field("status.podIP")},
	}
}

// pushService is the name of the Deployment whose pods workload's template
// makes: workload's own name, or, for a ReplicaSet a Deployment controls,
// that Deployment's. The webhook injects the ReplicaSets a Deployment
// creates too; their templates must come out as the Deployment's did, or
// the Deployment would no longer recognise them as its own.
func pushService(workload metav1.ObjectMeta) string {
	if ref := metav1.GetControllerOfNoCopy(&workload); ref != nil && ref.Kind == "Deployment" && strings.HasPrefix(ref.APIVersion, "apps/") {
		return ref.Name
	}
	return workload.Name
}

func queueProxy(cfg Config, s settings, userPort int32, probeEnv, metricsEnv, pushEnv []corev1.EnvVar) corev1.Container {
	env := []corev1.EnvVar{
		{Name: "QUEUE_SERVING_PORT", Value: strconv.Itoa(network.DefaultQueueServingPort)},
		{Name: "QUEUE_ADMIN_PORT", Value: strconv.Itoa(network.DefaultQueueAdminPort)},
		{Name: "QUEUE_METRICS_PORT", Value: strconv.Itoa(network.DefaultQueueMetricsPort)},
		{Name: "USER_PORT", Value: strconv.Itoa(int(userPort))},
		{Name: "CONTAINER_CONCURRENCY", Value: strconv.Itoa(s.containerConcurrency)},
	}
	if s.queueDepth >= 0 {
		env = append(env, corev1.EnvVar{Name: "QUEUE_DEPTH", Value: strconv.Itoa(s.queueDepth)})
	}
	env = append(env,
		corev1.EnvVar{Name: "REQUEST_TIMEOUT", Value: autoscaling.FormatDuration(s.timeout)},
		corev1.EnvVar{Name: "RESPONSE_START_TIMEOUT", Value: autoscaling.FormatDuration(s.responseStartTimeout)},
		corev1.EnvVar{Name: "STREAM_IDLE_TIMEOUT", Value: autoscaling.FormatDuration(s.streamIdleTimeout)},
	)
	if probeEnv == nil {
		probeEnv = []corev1.EnvVar{{Name: "USER_PROBE_PATH", Value: ""}}
	}
	env = append(env, probeEnv...)
	env = append(env,
		corev1.EnvVar{Name: "DRAIN_QUIET_PERIOD", Value: autoscaling.FormatDuration(DrainQuietPeriod)},
		// The drain outlasts the longest request: one that began just
		// before it, then the quiet period. The preStop hook returns when
		// the drain ends, and the kubelet then stops the app.
		corev1.EnvVar{Name: "DRAIN_TIMEOUT", Value: autoscaling.FormatDuration(drainTimeout(s.timeout))},
	)
	env = append(env, metricsEnv...)
	env = append(env, pushEnv...)

	yes, no, uid := true, false, int64(RunAsUser)
	return corev1.Container{
		Name:  ContainerName,
		Image: cfg.Image,
		Ports: []corev1.ContainerPort{
			{Name: PortNameServing, ContainerPort: network.DefaultQueueServingPort, Protocol: corev1.ProtocolTCP},
			{Name: PortNameAdmin, ContainerPort: network.DefaultQueueAdminPort, Protocol: corev1.ProtocolTCP},
			{Name: PortNameMetrics, ContainerPort: network.DefaultQueueMetricsPort, Protocol: corev1.ProtocolTCP},
		},
		Env:       env,
		Resources: resources(cfg.Resources),
		ReadinessProbe: &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: network.ReadyPath,
				Port: intstr.FromInt32(network.DefaultQueueAdminPort),
			}},
			PeriodSeconds:    1,
			TimeoutSeconds:   1,
			FailureThreshold: 3,
		},
		// Everything the "restricted" Pod Security Standard asks of a
		// container is set on the sidecar itself, so injection never makes
		// a compliant pod non-compliant, whatever the pod-level context.
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot:             &yes,
			RunAsUser:                &uid,
			AllowPrivilegeEscalation: &no,
			ReadOnlyRootFilesystem:   &yes,
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
	}
}

func hasEnv(env []corev1.EnvVar, name string) bool {
	for _, e := range env {
		if e.Name == name {
			return true
		}
	}
	return false
}

func setAnnotation(m *metav1.ObjectMeta, key, value string) {
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[key] = value
}

// resources returns r, or DefaultResources when r sets nothing.
func resources(r corev1.ResourceRequirements) corev1.ResourceRequirements {
	if len(r.Requests) == 0 && len(r.Limits) == 0 && len(r.Claims) == 0 {
		return DefaultResources()
	}
	return *r.DeepCopy()
}
