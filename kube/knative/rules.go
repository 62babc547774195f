package knative

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/swell-run/swell/kube/inject"
	"github.com/swell-run/swell/pkg/autoscaling"
)

// The prefixes of Knative's autoscaling annotations and of Swell's.
const (
	knativeAutoscaling = "autoscaling.knative.dev/"
	swellAutoscaling   = autoscaling.Prefix
)

// Knative's autoscaler classes and metrics.
const (
	classKPA          = "kpa.autoscaling.knative.dev"
	classHPA          = "hpa.autoscaling.knative.dev"
	metricConcurrency = "concurrency"
	metricRPS         = "rps"
	metricCPU         = "cpu"
	metricMemory      = "memory"
)

// hpaDefaultCPU is the CPU utilization a Kubernetes HorizontalPodAutoscaler
// aims at when it is given no metric, as Knative's HPA class leaves it
// when a Service sets no target.
const hpaDefaultCPU = 80

// Where a rule's setting is written on a Knative Service.
type place int

const (
	// onAnnotation: an annotation of the Service or, the usual place, of
	// its template; the template's wins.
	onAnnotation place = iota
	// onLabel: a label of the Service.
	onLabel
	// onField: a field of spec.template.spec.
	onField
)

// rule maps one Knative setting to what means the same on Swell. The rules
// are applied in their order, so a rule may read what an earlier one
// decided (the class, the metric).
type rule struct {
	// Knative is the setting: an annotation or label key, or a field of the
	// revision template (spec.template.spec.timeoutSeconds).
	Knative string
	// Aliases are older spellings Knative also reads; Knative itself
	// prefers the first spelling, and so does the import.
	Aliases []string
	// Swell is what the setting becomes, as the documentation shows it.
	Swell string
	// How says how the value is carried, for the documentation.
	How string

	place place
	// apply carries a value the Service sets.
	apply func(c *conversion, s setting)
	// absent, when set, runs for a Service that does not set it: what
	// Knative does by default must be written out where Swell's default
	// differs.
	absent func(c *conversion)
}

// rules is the mapping. Every Knative setting the import understands is
// here, each once; docs/knative.md shows this table (TestDocsTable).
var rules = []rule{
	{
		Knative: knativeAutoscaling + "class",
		Swell:   "`" + swellAutoscaling + "class`",
		How: "`kpa.autoscaling.knative.dev`, or none (Knative's default) → `kpa`, Knative's KPA exactly. " +
			"`hpa.autoscaling.knative.dev` → `hpa`, and what Knative's HPA class implies: at least one pod (`min-scale` ≥ 1, an HPA never scales to zero) " +
			"and `target-burst-capacity: 0` (the activator never in the path). Any other class: an error",
		apply: func(c *conversion, s setting) {
			switch s.value {
			case classKPA:
				c.class = classKPA
			case classHPA:
				c.class = classHPA
			default:
				c.fail(s, "is an autoscaler class Swell has no counterpart for", classKPA+" or "+classHPA)
				c.class = classKPA
				return
			}
			c.writeClass(&s)
		},
		absent: func(c *conversion) {
			c.class = classKPA
			c.writeClass(nil)
		},
	},
	{
		Knative: knativeAutoscaling + "metric",
		Swell:   "`" + swellAutoscaling + "metric`",
		How: "kpa: `concurrency` and `rps` as they are; `cpu` or `memory` is an error, as Knative refuses them. " +
			"hpa: `cpu` (or none: Knative's HPA default), `memory`, `concurrency` and `rps` as they are; " +
			"a custom metric, which Knative's HPA reads from Kubernetes' metrics API, is an error (Swell reads an app's own gauge instead, `metric: gauge`)",
		apply: func(c *conversion, s setting) {
			c.metric = s.value
			switch {
			case c.class == classKPA && (s.value == metricConcurrency || s.value == metricRPS):
				c.write(autoscaling.KeyMetric, s.value, &s)
			case c.class == classKPA:
				c.fail(s, "is not a metric of Knative's KPA class, which refuses it",
					"concurrency or rps; cpu and memory with "+knativeAutoscaling+"class: "+classHPA)
			case s.value == metricCPU || s.value == metricMemory || s.value == metricConcurrency || s.value == metricRPS:
				c.write(autoscaling.KeyMetric, s.value, &s)
			}
			// A custom metric is judged with the target, since without a
			// target Knative's HPA does not read it at all.
		},
		absent: func(c *conversion) {
			if c.class == classKPA {
				c.metric = metricConcurrency
				return
			}
			c.metric = metricCPU
			c.write(autoscaling.KeyMetric, metricCPU, nil)
		},
	},
	{
		Knative: knativeAutoscaling + "target",
		Swell:   "`" + swellAutoscaling + "target`, `cpu-target` or `memory-target`",
		How: "kpa: `target` as it is. hpa, as Knative's HPA reads it: cpu → `cpu-target` N% of the CPU request (rounded up); " +
			"memory → `memory-target` N`Mi` per pod (Knative's unit, MiB, whole); concurrency and rps → `target`, with `target-utilization-percentage: 100` (the HPA aims at the target itself). " +
			"hpa without a target: `metric: cpu` and `cpu-target: 80%`, what an HPA given no metric aims at, whatever the metric named (a warning when it named another)",
		apply: func(c *conversion, s setting) {
			if c.class == classKPA {
				c.write(autoscaling.KeyTarget, s.value, &s)
				return
			}
			v, err := strconv.ParseFloat(strings.TrimSpace(s.value), 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
				c.fail(s, "is not a number", "a number ≥ 0.01")
				return
			}
			switch c.metric {
			case metricCPU:
				c.write(autoscaling.KeyCPUTarget, strconv.FormatFloat(math.Ceil(v), 'f', -1, 64)+"%", &s)
			case metricMemory:
				c.write(autoscaling.KeyMemoryTarget, strconv.FormatFloat(math.Trunc(v), 'f', -1, 64)+"Mi", &s)
			case metricConcurrency, metricRPS:
				c.write(autoscaling.KeyTarget, s.value, &s)
				c.write(autoscaling.KeyTargetUtilizationPercentage, "100", &s)
			default:
				metric := c.settings[knativeAutoscaling+"metric"]
				c.fail(metric, "is a custom metric, which Knative's HPA class reads from Kubernetes' metrics API; Swell does not read that API",
					"cpu, memory, concurrency or rps; an app's own Prometheus gauge with "+swellAutoscaling+"metric: gauge (docs/configuration.md)")
			}
		},
		absent: func(c *conversion) {
			if c.class == classKPA {
				return
			}
			metric := c.settings[knativeAutoscaling+"metric"]
			if c.metric != metricCPU {
				c.warnf("%s without annotation %starget: Knative's HPA then gets no metric, and Kubernetes scales it on %d%% of its CPU request; carried over as that (set %starget to scale on %s)",
					metric, knativeAutoscaling, hpaDefaultCPU, knativeAutoscaling, metric.value)
			}
			c.write(autoscaling.KeyMetric, metricCPU, &metric)
			c.write(autoscaling.KeyCPUTarget, strconv.Itoa(hpaDefaultCPU)+"%", nil)
		},
	},
	kpaOnly(autoscaling.KeyTargetUtilizationPercentage, "targetUtilizationPercentage"),
	{
		Knative: knativeAutoscaling + "window",
		Swell:   "`" + swellAutoscaling + "window`; hpa: `hpa-scale-up-stabilization-window` and `hpa-scale-down-stabilization-window`",
		How:     "kpa: the stable window as it is. hpa: both stabilization windows of the HPA, as Knative's HPA class sets them",
		apply: func(c *conversion, s setting) {
			if c.class == classKPA {
				c.write(autoscaling.KeyWindow, s.value, &s)
				return
			}
			c.write(autoscaling.KeyHPAScaleUpStabilizationWindow, s.value, &s)
			c.write(autoscaling.KeyHPAScaleDownStabilizationWindow, s.value, &s)
		},
	},
	kpaOnly(autoscaling.KeyPanicWindowPercentage, "panicWindowPercentage"),
	kpaOnly(autoscaling.KeyPanicThresholdPercentage, "panicThresholdPercentage"),
	{
		Knative: knativeAutoscaling + "min-scale",
		Aliases: []string{knativeAutoscaling + "minScale"},
		Swell:   "`" + swellAutoscaling + "min-scale`",
		How:     "as it is; hpa: at least 1, also when not set, since an HPA keeps one pod",
		apply: func(c *conversion, s setting) {
			v := s.value
			if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n < 1 && c.class == classHPA {
				v = "1"
			}
			c.write(autoscaling.KeyMinScale, v, &s)
		},
		absent: func(c *conversion) {
			if c.class == classHPA {
				c.write(autoscaling.KeyMinScale, "1", nil)
			}
		},
	},
	both(autoscaling.KeyMaxScale, "maxScale"),
	both(autoscaling.KeyInitialScale, "initialScale"),
	kpaOnly(autoscaling.KeyActivationScale, ""),
	kpaOnly(autoscaling.KeyScaleDownDelay, "scaleDownDelay"),
	kpaOnly(autoscaling.KeyScaleToZeroPodRetentionPeriod, "scaleToZeroPodRetentionPeriod"),
	kpaOnly(autoscaling.KeyTargetBurstCapacity, "targetBurstCapacity"),
	{
		Knative: knativeAutoscaling + "metric-aggregation-algorithm",
		Aliases: []string{knativeAutoscaling + "metricAggregationAlgorithm"},
		Swell:   "`" + swellAutoscaling + "window-averaging`",
		How: "kpa: `linear` → `linear`; `weighted-exponential` (or `weightedExponential`) → `exponential`, with a warning: " +
			"Swell's weights each second by 1−2/(N+1) for a window of N seconds, Knative's by at most 0.8, so Swell's reacts more slowly. hpa: ignored by Knative, a warning",
		apply: func(c *conversion, s setting) {
			switch {
			case c.class == classHPA:
				c.ignoredByHPA(s)
			case s.value == "linear":
				c.write(autoscaling.KeyWindowAveraging, string(autoscaling.AveragingLinear), &s)
			case s.value == "weighted-exponential" || s.value == "weightedExponential":
				c.write(autoscaling.KeyWindowAveraging, string(autoscaling.AveragingExponential), &s)
				c.warnf("%s: carried over as %swindow-averaging: exponential, which weighs the seconds of the window less steeply than Knative's (each second by 1−2/(N+1) for a window of N seconds, Knative's by at most 0.8), so it reacts to a change more slowly; shorten %swindow for the same reaction",
					s, swellAutoscaling, swellAutoscaling)
			default:
				c.fail(s, "is not an algorithm Knative knows", "linear, weighted-exponential or weightedExponential")
			}
		},
	},
	clusterWide(autoscaling.KeyMaxScaleUpRate),
	clusterWide(autoscaling.KeyMaxScaleDownRate),
	clusterWide(autoscaling.KeyScaleToZeroGracePeriod),
	field("containerConcurrency", inject.AnnotationContainerConcurrency, "as it is; 0 is no limit in both",
		func(n int64) string { return strconv.FormatInt(n, 10) }),
	field("timeoutSeconds", inject.AnnotationTimeout, "seconds as a duration, `300` → `5m`", formatSeconds),
	field("responseStartTimeoutSeconds", inject.AnnotationResponseStartTimeout, "seconds as a duration", formatSeconds),
	field("idleTimeoutSeconds", inject.AnnotationStreamIdleTimeout, "seconds as a duration (both bound the time the response sends nothing)", formatSeconds),
	{
		Knative: Group + "/progress-deadline",
		Swell:   "the Deployment's `spec.progressDeadlineSeconds`",
		How:     "the duration in whole seconds, rounded up",
		apply: func(c *conversion, s setting) {
			d, err := time.ParseDuration(strings.TrimSpace(s.value))
			if err != nil || d <= 0 {
				c.fail(s, "is not a duration above 0", "a duration such as 10m or 90s")
				return
			}
			secs := int32(min(math.Ceil(d.Seconds()), math.MaxInt32))
			c.progressDeadline = &secs
		},
	},
	none(Group+"/rollout-duration",
		"Knative's gradual move of traffic to a new revision; a Deployment replaces its pods by its rollout strategy (maxSurge, maxUnavailable) instead"),
	{
		Knative: "networking.knative.dev/visibility",
		Aliases: []string{Group + "/visibility"},
		Swell:   "(none)",
		How: "`cluster-local`: nothing to do, a Swell Service is reachable inside the cluster only. " +
			"Not set (Knative then exposes the Service outside the cluster): a warning, since exposing it takes an Ingress or a Gateway API HTTPRoute",
		place: onLabel,
		apply: func(c *conversion, s setting) {
			if s.value != "cluster-local" {
				c.warnf("%s: Knative made the Service reachable from outside the cluster; the Swell Service is reachable inside it only: %s", s, exposeAdvice(c))
			}
		},
		absent: func(c *conversion) {
			c.warnf("Knative made the Service reachable from outside the cluster (it has no label networking.knative.dev/visibility: cluster-local); the Swell Service is reachable inside it only: %s", exposeAdvice(c))
		},
	},
}

// exposeAdvice says how to reach c's Service from outside the cluster.
func exposeAdvice(c *conversion) string {
	return "route to Service " + c.svc.Name + " port 80 with an Ingress or a Gateway API HTTPRoute (docs/knative.md)"
}

// both is a key Knative's KPA and HPA classes both read, carried as it is
// to Swell's key of the same name.
func both(key, alias string) rule {
	r := rule{
		Knative: knativeAutoscaling + key,
		Swell:   "`" + swellAutoscaling + key + "`",
		How:     "as it is",
		apply:   func(c *conversion, s setting) { c.write(key, s.value, &s) },
	}
	if alias != "" {
		r.Aliases = []string{knativeAutoscaling + alias}
	}
	return r
}

// kpaOnly is a key only Knative's KPA class reads: carried as it is, or
// left out with a warning under the HPA class, which ignores it.
func kpaOnly(key, alias string) rule {
	r := both(key, alias)
	r.How = "kpa: as it is. hpa: ignored by Knative, so left out, with a warning"
	r.apply = func(c *conversion, s setting) {
		if c.class == classHPA {
			c.ignoredByHPA(s)
			return
		}
		c.write(key, s.value, &s)
	}
	return r
}

// clusterWide is a setting Knative reads only from its cluster-wide
// ConfigMap, so an annotation of it has no effect; Swell reads it per
// service too.
func clusterWide(key string) rule {
	return rule{
		Knative: knativeAutoscaling + key,
		Swell:   "(none)",
		How:     "Knative reads it only cluster-wide (config-autoscaler), so it had no effect: left out, with a warning (Swell reads `" + swellAutoscaling + key + "` per service)",
		apply: func(c *conversion, s setting) {
			c.warnf("%s: Knative reads %s only cluster-wide, in config-autoscaler, so it had no effect on this Service; left out (Swell reads %s%s per service, should you want it)",
				s, key, swellAutoscaling, key)
		},
	}
}

// none is a Knative setting without a counterpart: left out, with a
// warning saying what it did.
func none(key, what string) rule {
	return rule{
		Knative: key,
		Swell:   "(none)",
		How:     what + ": left out, with a warning",
		apply: func(c *conversion, s setting) {
			c.warnf("%s: no counterpart in Swell (%s); left out", s, what)
		},
	}
}

// field is a field of the revision template carried to an annotation of
// Swell's queue-proxy, the integer written by format.
func field(name, annotation, how string, format func(int64) string) rule {
	return rule{
		Knative: "spec.template.spec." + name,
		Swell:   "`" + annotation + "`",
		How:     how,
		place:   onField,
		apply: func(c *conversion, s setting) {
			n, _ := strconv.ParseInt(s.value, 10, 64)
			c.write(annotation, format(n), &s)
		},
	}
}

func formatSeconds(n int64) string {
	if n > math.MaxInt64/int64(time.Second) || n < math.MinInt64/int64(time.Second) {
		return strconv.FormatInt(n, 10) + "s"
	}
	return autoscaling.FormatDuration(time.Duration(n) * time.Second)
}
