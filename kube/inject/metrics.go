package inject

import (
	"errors"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/swell-run/swell/pkg/autoscaling"
	"github.com/swell-run/swell/queueproxy"
)

// Requests returns c's CPU request in cores and memory request in bytes,
// 0 for none: what a percentage cpu-target or memory-target is taken of.
// A resource with a limit and no request counts its limit, as Kubernetes
// then gives the pod's container a request equal to the limit.
func Requests(c *corev1.Container) (cpu, memory float64) {
	amount := func(name corev1.ResourceName) float64 {
		if q, ok := c.Resources.Requests[name]; ok {
			return q.AsApproximateFloat64()
		}
		if q, ok := c.Resources.Limits[name]; ok {
			return q.AsApproximateFloat64()
		}
		return 0
	}
	return amount(corev1.ResourceCPU), amount(corev1.ResourceMemory)
}

// appMetrics prepares tpl for the metrics beyond requests that spec
// lists, and returns the queue-proxy's environment for them: the cpu and
// memory metrics need the app's requests when their target is a
// percentage, and a shared process namespace; the gauge metric, where to
// read the gauge. annotations are the workload's, to name the metric key
// in an error. It reports every problem at once.
func appMetrics(annotations map[string]string, spec autoscaling.Spec, tpl *corev1.PodTemplateSpec, app *corev1.Container) ([]corev1.EnvVar, error) {
	var errs []error
	if _, err := spec.WithRequests(Requests(app)); err != nil {
		errs = append(errs, err)
	}

	if queueproxy.MeasuresApp(&spec) {
		switch share := tpl.Spec.ShareProcessNamespace; {
		case share == nil:
			// Recorded, so that injecting again after the metric list
			// changed takes back what only injection asked for.
			yes := true
			tpl.Spec.ShareProcessNamespace = &yes
			setAnnotation(&tpl.ObjectMeta, AnnotationSharedProcessNamespace, "true")
		case !*share:
			// The user's explicit choice is refused, never overridden.
			errs = append(errs, &autoscaling.Error{Key: "shareProcessNamespace", Name: "shareProcessNamespace", Value: "false",
				Problem: "is set on the pod template, but " + metricName(annotations) + " lists " + resourceMetrics(&spec) +
					", which the queue-proxy reads from the app's processes and sees only in a shared process namespace",
				Accepted: "true or unset (injection sets it); or a metric list without cpu and memory"})
		}
	}
	// The pod shares one process namespace: the queue-proxy measures every
	// process of it but the pause process and its own.
	var env []corev1.EnvVar
	for _, kv := range queueproxy.MeterEnv(&spec, queueproxy.AppUsagePod) {
		name, value, _ := strings.Cut(kv, "=")
		env = append(env, corev1.EnvVar{Name: name, Value: value})
	}
	return env, errors.Join(errs...)
}

// unshareProcessNamespace takes back the shared process namespace that
// injection set, unless the user has since set it to false themselves.
func unshareProcessNamespace(tpl *corev1.PodTemplateSpec) {
	if _, ok := tpl.Annotations[AnnotationSharedProcessNamespace]; !ok {
		return
	}
	if share := tpl.Spec.ShareProcessNamespace; share != nil && *share {
		tpl.Spec.ShareProcessNamespace = nil
	}
	delete(tpl.Annotations, AnnotationSharedProcessNamespace)
}

// metricName is the metric key as the user wrote it, or as the cluster
// default it came from.
func metricName(annotations map[string]string) string {
	name := autoscaling.Prefix + autoscaling.KeyMetric
	if _, ok := annotations[name]; ok {
		return name
	}
	return autoscaling.KeyMetric + " (cluster default)"
}

// resourceMetrics names the resource metrics spec lists: "cpu", "memory"
// or "cpu and memory".
func resourceMetrics(spec *autoscaling.Spec) string {
	cpu, memory := spec.VotesWith(autoscaling.MetricCPU), spec.VotesWith(autoscaling.MetricMemory)
	switch {
	case cpu && memory:
		return "cpu and memory"
	case cpu:
		return "cpu"
	}
	return "memory"
}
