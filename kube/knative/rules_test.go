package knative

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	ka = knativeAutoscaling
	sa = swellAutoscaling
)

// ruleCase is one line of the mapping: a template's Knative annotations
// (and fields) in, Swell's annotations out, with what is warned of or
// refused.
type ruleCase struct {
	name   string
	in     map[string]string
	fields RevisionSpec
	// want are the Deployment's swell.run/ and autoscaling.swell.run/
	// annotations, all of them.
	want map[string]string
	// warn and fail are texts that must appear in a warning, or the error.
	warn, fail string
}

func int64p(v int64) *int64 { return &v }

var ruleCases = []ruleCase{
	// The class, and what each implies.
	{name: "no class is Knative's KPA", in: nil, want: map[string]string{sa + "class": "kpa"}},
	{name: "kpa", in: map[string]string{ka + "class": classKPA}, want: map[string]string{sa + "class": "kpa"}},
	{name: "hpa: cpu at 80%, one pod, no activator",
		in:   map[string]string{ka + "class": classHPA},
		want: map[string]string{sa + "class": "hpa", sa + "metric": "cpu", sa + "cpu-target": "80%", sa + "min-scale": "1", sa + "target-burst-capacity": "0"}},
	{name: "another class is refused", in: map[string]string{ka + "class": "keda.autoscaling.knative.dev"},
		fail: `autoscaling.knative.dev/class: "keda.autoscaling.knative.dev" is an autoscaler class Swell has no counterpart for`},

	// The metric and target under each class.
	{name: "kpa concurrency target", in: map[string]string{ka + "metric": "concurrency", ka + "target": "10"},
		want: map[string]string{sa + "class": "kpa", sa + "metric": "concurrency", sa + "target": "10"}},
	{name: "kpa rps target", in: map[string]string{ka + "metric": "rps", ka + "target": "150"},
		want: map[string]string{sa + "class": "kpa", sa + "metric": "rps", sa + "target": "150"}},
	{name: "kpa refuses cpu", in: map[string]string{ka + "metric": "cpu"}, fail: `"cpu" is not a metric of Knative's KPA class`},
	{name: "hpa cpu target is a percentage, rounded up", in: map[string]string{ka + "class": classHPA, ka + "metric": "cpu", ka + "target": "70.2"},
		want: map[string]string{sa + "class": "hpa", sa + "metric": "cpu", sa + "cpu-target": "71%", sa + "min-scale": "1", sa + "target-burst-capacity": "0"}},
	{name: "hpa memory target is whole MiB", in: map[string]string{ka + "class": classHPA, ka + "metric": "memory", ka + "target": "100.9"},
		want: map[string]string{sa + "class": "hpa", sa + "metric": "memory", sa + "memory-target": "100Mi", sa + "min-scale": "1", sa + "target-burst-capacity": "0"}},
	{name: "hpa rps aims at the target itself", in: map[string]string{ka + "class": classHPA, ka + "metric": "rps", ka + "target": "50"},
		want: map[string]string{sa + "class": "hpa", sa + "metric": "rps", sa + "target": "50", sa + "target-utilization-percentage": "100", sa + "min-scale": "1", sa + "target-burst-capacity": "0"}},
	{name: "hpa memory without a target scales on cpu", in: map[string]string{ka + "class": classHPA, ka + "metric": "memory"},
		want: map[string]string{sa + "class": "hpa", sa + "metric": "cpu", sa + "cpu-target": "80%", sa + "min-scale": "1", sa + "target-burst-capacity": "0"},
		warn: `annotation autoscaling.knative.dev/metric "memory" without annotation autoscaling.knative.dev/target`},
	{name: "hpa custom metric with a target is refused", in: map[string]string{ka + "class": classHPA, ka + "metric": "queue_depth", ka + "target": "5"},
		fail: `autoscaling.knative.dev/metric: "queue_depth" is a custom metric`},
	{name: "hpa target not a number", in: map[string]string{ka + "class": classHPA, ka + "target": "lots"},
		fail: `autoscaling.knative.dev/target: "lots" is not a number`},

	// The window: the KPA's stable window, the HPA's stabilization.
	{name: "kpa window", in: map[string]string{ka + "window": "2m"}, want: map[string]string{sa + "class": "kpa", sa + "window": "2m"}},
	{name: "hpa window stabilizes both ways", in: map[string]string{ka + "class": classHPA, ka + "window": "2m"},
		want: map[string]string{sa + "class": "hpa", sa + "metric": "cpu", sa + "cpu-target": "80%", sa + "min-scale": "1", sa + "target-burst-capacity": "0",
			sa + "hpa-scale-up-stabilization-window": "2m", sa + "hpa-scale-down-stabilization-window": "2m"}},

	// Scale bounds.
	{name: "bounds", in: map[string]string{ka + "min-scale": "2", ka + "max-scale": "9", ka + "initial-scale": "3", ka + "activation-scale": "2"},
		want: map[string]string{sa + "class": "kpa", sa + "min-scale": "2", sa + "max-scale": "9", sa + "initial-scale": "3", sa + "activation-scale": "2"}},
	{name: "old spellings", in: map[string]string{ka + "minScale": "2", ka + "maxScale": "9", ka + "initialScale": "3"},
		want: map[string]string{sa + "class": "kpa", sa + "min-scale": "2", sa + "max-scale": "9", sa + "initial-scale": "3"}},
	{name: "the new spelling wins", in: map[string]string{ka + "minScale": "2", ka + "min-scale": "1"},
		want: map[string]string{sa + "class": "kpa", sa + "min-scale": "1"}, warn: "the spelling Knative prefers"},
	{name: "hpa min-scale 0 keeps a pod", in: map[string]string{ka + "class": classHPA, ka + "min-scale": "0", ka + "max-scale": "4"},
		want: map[string]string{sa + "class": "hpa", sa + "metric": "cpu", sa + "cpu-target": "80%", sa + "min-scale": "1", sa + "max-scale": "4", sa + "target-burst-capacity": "0"}},
	{name: "hpa min-scale 3", in: map[string]string{ka + "class": classHPA, ka + "minScale": "3"},
		want: map[string]string{sa + "class": "hpa", sa + "metric": "cpu", sa + "cpu-target": "80%", sa + "min-scale": "3", sa + "target-burst-capacity": "0"}},

	// The KPA's own settings, in both spellings.
	{name: "kpa settings", in: map[string]string{
		ka + "target-utilization-percentage": "80", ka + "panic-window-percentage": "20", ka + "panic-threshold-percentage": "150",
		ka + "scale-down-delay": "30s", ka + "scale-to-zero-pod-retention-period": "1m", ka + "target-burst-capacity": "-1"},
		want: map[string]string{sa + "class": "kpa",
			sa + "target-utilization-percentage": "80", sa + "panic-window-percentage": "20", sa + "panic-threshold-percentage": "150",
			sa + "scale-down-delay": "30s", sa + "scale-to-zero-pod-retention-period": "1m", sa + "target-burst-capacity": "-1"}},
	{name: "kpa settings, old spellings", in: map[string]string{
		ka + "targetUtilizationPercentage": "80", ka + "panicWindowPercentage": "20", ka + "panicThresholdPercentage": "150",
		ka + "scaleDownDelay": "30s", ka + "scaleToZeroPodRetentionPeriod": "1m", ka + "targetBurstCapacity": "0"},
		want: map[string]string{sa + "class": "kpa",
			sa + "target-utilization-percentage": "80", sa + "panic-window-percentage": "20", sa + "panic-threshold-percentage": "150",
			sa + "scale-down-delay": "30s", sa + "scale-to-zero-pod-retention-period": "1m", sa + "target-burst-capacity": "0"}},
	{name: "hpa ignores the kpa settings", in: map[string]string{ka + "class": classHPA, ka + "scale-down-delay": "30s"},
		want: map[string]string{sa + "class": "hpa", sa + "metric": "cpu", sa + "cpu-target": "80%", sa + "min-scale": "1", sa + "target-burst-capacity": "0"},
		warn: `annotation autoscaling.knative.dev/scale-down-delay "30s": Knative's HPA class does not read it`},
	{name: "hpa ignores the target burst capacity", in: map[string]string{ka + "class": classHPA, ka + "target-burst-capacity": "300"},
		want: map[string]string{sa + "class": "hpa", sa + "metric": "cpu", sa + "cpu-target": "80%", sa + "min-scale": "1", sa + "target-burst-capacity": "0"},
		warn: "Knative's HPA class does not read it"},

	// Averaging.
	{name: "linear", in: map[string]string{ka + "metric-aggregation-algorithm": "linear"},
		want: map[string]string{sa + "class": "kpa", sa + "window-averaging": "linear"}},
	{name: "weighted exponential", in: map[string]string{ka + "metricAggregationAlgorithm": "weighted-exponential"},
		want: map[string]string{sa + "class": "kpa", sa + "window-averaging": "exponential"}, warn: "reacts to a change more slowly"},
	{name: "unknown algorithm", in: map[string]string{ka + "metric-aggregation-algorithm": "median"},
		fail: `autoscaling.knative.dev/metric-aggregation-algorithm: "median" is not an algorithm Knative knows`},
	{name: "hpa ignores averaging", in: map[string]string{ka + "class": classHPA, ka + "metric-aggregation-algorithm": "linear"},
		want: map[string]string{sa + "class": "hpa", sa + "metric": "cpu", sa + "cpu-target": "80%", sa + "min-scale": "1", sa + "target-burst-capacity": "0"},
		warn: "Knative's HPA class does not read it"},

	// Settings Knative reads cluster-wide only.
	{name: "max-scale-up-rate", in: map[string]string{ka + "max-scale-up-rate": "3"}, want: map[string]string{sa + "class": "kpa"}, warn: "only cluster-wide"},
	{name: "max-scale-down-rate", in: map[string]string{ka + "max-scale-down-rate": "3"}, want: map[string]string{sa + "class": "kpa"}, warn: "only cluster-wide"},
	{name: "scale-to-zero-grace-period", in: map[string]string{ka + "scale-to-zero-grace-period": "1m"}, want: map[string]string{sa + "class": "kpa"}, warn: "only cluster-wide"},
	{name: "a typo", in: map[string]string{ka + "max-scael": "3"}, want: map[string]string{sa + "class": "kpa"}, warn: "did you mean autoscaling.knative.dev/max-scale?"},

	// The revision's own fields, and Knative's other annotations.
	{name: "request limits", fields: RevisionSpec{ContainerConcurrency: int64p(5), TimeoutSeconds: int64p(300), ResponseStartTimeoutSeconds: int64p(10), IdleTimeoutSeconds: int64p(0)},
		want: map[string]string{sa + "class": "kpa", "swell.run/container-concurrency": "5", "swell.run/timeout": "5m", "swell.run/response-start-timeout": "10s", "swell.run/stream-idle-timeout": "0s"}},
	{name: "timeout beyond Swell's", fields: RevisionSpec{TimeoutSeconds: int64p(7200)},
		fail: `from spec.template.spec.timeoutSeconds 7200: swell.run/timeout: "2h" is out of range`},
	{name: "progress deadline", in: map[string]string{"serving.knative.dev/progress-deadline": "1.5s"}, want: map[string]string{sa + "class": "kpa"}},
	{name: "progress deadline not a duration", in: map[string]string{"serving.knative.dev/progress-deadline": "600"},
		fail: `serving.knative.dev/progress-deadline: "600" is not a duration above 0`},
	{name: "rollout duration", in: map[string]string{"serving.knative.dev/rollout-duration": "60s"}, want: map[string]string{sa + "class": "kpa"}, warn: "gradual move of traffic"},
	{name: "Swell's own key wins", in: map[string]string{ka + "target": "10", sa + "target": "12"},
		want: map[string]string{sa + "class": "kpa", sa + "target": "12"}, warn: `annotation autoscaling.swell.run/target "12", Swell's own, is kept over annotation autoscaling.knative.dev/target "10"`},
}

// testService is a Knative Service named web whose template carries
// annotations and fields, its one container with a CPU request so that
// the HPA class's percentage has something to be a share of.
func testService(annotations map[string]string, fields RevisionSpec) *Service {
	svc := &Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", Labels: map[string]string{"networking.knative.dev/visibility": "cluster-local"}}}
	svc.Spec.Template.Annotations = annotations
	svc.Spec.Template.Spec = fields
	svc.Spec.Template.Spec.Containers = []corev1.Container{{Image: "example.com/web:1", Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}}
	return svc
}

func TestRules(t *testing.T) {
	for _, tc := range ruleCases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := Convert(testService(tc.in, tc.fields), Options{})
			if tc.fail != "" {
				if err == nil || !strings.Contains(err.Error(), tc.fail) {
					t.Errorf("error %v; want one containing %q", err, tc.fail)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for k, v := range out.Deployment.Annotations {
				if isSwell(k) {
					got[k] = v
				}
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("annotations %v\nwant %v", got, tc.want)
			}
			warnings := strings.Join(out.Warnings, "\n")
			if tc.warn != "" && !strings.Contains(warnings, tc.warn) {
				t.Errorf("warnings %q; want one containing %q", warnings, tc.warn)
			}
			if tc.warn == "" && len(out.Warnings) > 0 {
				t.Errorf("warnings %q; want none", warnings)
			}
		})
	}
}

func TestProgressDeadline(t *testing.T) {
	out, err := Convert(testService(map[string]string{"serving.knative.dev/progress-deadline": "1.5s"}, RevisionSpec{}), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p := out.Deployment.Spec.ProgressDeadlineSeconds; p == nil || *p != 2 {
		t.Errorf("progressDeadlineSeconds %v; want 2 (1.5s rounded up)", p)
	}
}

// TestEveryRuleIsTested: every spelling of every rule appears in a case
// above or in a testdata manifest, so no line of the mapping goes
// untested.
func TestEveryRuleIsTested(t *testing.T) {
	var corpus strings.Builder
	for _, tc := range ruleCases {
		for _, k := range slices.Sorted(maps.Keys(tc.in)) {
			corpus.WriteString(k + "\n")
		}
		if tc.fields.ContainerConcurrency != nil {
			corpus.WriteString("spec.template.spec.containerConcurrency\n")
		}
		for name, v := range map[string]*int64{"timeoutSeconds": tc.fields.TimeoutSeconds,
			"responseStartTimeoutSeconds": tc.fields.ResponseStartTimeoutSeconds, "idleTimeoutSeconds": tc.fields.IdleTimeoutSeconds} {
			if v != nil {
				corpus.WriteString("spec.template.spec." + name + "\n")
			}
		}
	}
	files, _ := filepath.Glob("testdata/*")
	for _, f := range files {
		if strings.Contains(f, ".golden.") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		corpus.Write(b)
	}
	text := corpus.String()
	for _, r := range rules {
		for _, k := range append([]string{r.Knative}, r.Aliases...) {
			probe := k
			if r.place == onField {
				// Manifests write a field by its last name.
				probe = k[strings.LastIndex(k, ".")+1:] + ":"
				if !strings.Contains(text, probe) && !strings.Contains(text, k) {
					t.Errorf("rule %s is not tested: no case or testdata manifest sets it", k)
				}
				continue
			}
			if !strings.Contains(text, probe) {
				t.Errorf("rule %s is not tested: no case or testdata manifest writes it", k)
			}
		}
	}
}

func TestVisibility(t *testing.T) {
	for _, tc := range []struct {
		labels map[string]string
		warn   string
	}{
		{map[string]string{"networking.knative.dev/visibility": "cluster-local"}, ""},
		{map[string]string{"serving.knative.dev/visibility": "cluster-local"}, ""},
		{nil, "Knative made the Service reachable from outside the cluster (it has no label networking.knative.dev/visibility: cluster-local)"},
		{map[string]string{"networking.knative.dev/visibility": "public"}, `label networking.knative.dev/visibility "public": Knative made the Service reachable from outside`},
	} {
		svc := testService(nil, RevisionSpec{})
		svc.Labels = tc.labels
		out, err := Convert(svc, Options{})
		if err != nil {
			t.Fatal(err)
		}
		warnings := strings.Join(out.Warnings, "\n")
		if tc.warn == "" && warnings != "" || !strings.Contains(warnings, tc.warn) {
			t.Errorf("labels %v: warnings %q; want %q", tc.labels, warnings, tc.warn)
		}
		if out.Service.Labels != nil {
			t.Errorf("labels %v: the Service is labelled %v", tc.labels, out.Service.Labels)
		}
	}
}

// TestContainers: unnamed containers are named, and the serving container
// is the one with a port, which its probes and PORT point at.
func TestContainers(t *testing.T) {
	svc := testService(nil, RevisionSpec{})
	svc.Spec.Template.Spec.Containers = []corev1.Container{
		{Image: "example.com/proxy:1"},
		{Image: "example.com/web:1", Ports: []corev1.ContainerPort{{ContainerPort: 3000}},
			LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz"}}},
			Env:           []corev1.EnvVar{{Name: "PORT", Value: "3000"}, {Name: "K_SERVICE", Value: "mine"}}},
	}
	out, err := Convert(svc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	cs := out.Deployment.Spec.Template.Spec.Containers
	if cs[0].Name != "user-container-0" || cs[1].Name != "user-container-1" {
		t.Errorf("names %s, %s; want user-container-0, user-container-1", cs[0].Name, cs[1].Name)
	}
	if len(cs[0].Env) != 0 || len(cs[0].Ports) != 0 {
		t.Errorf("the sidecar got %v, %v; want it as it was", cs[0].Env, cs[0].Ports)
	}
	want := []corev1.EnvVar{{Name: "PORT", Value: "3000"}, {Name: "K_SERVICE", Value: "mine"}, {Name: "K_CONFIGURATION", Value: "web"}}
	if !slices.Equal(cs[1].Env, want) {
		t.Errorf("env %v; want %v (the container's own kept)", cs[1].Env, want)
	}
	if p := cs[1].LivenessProbe.HTTPGet.Port.IntValue(); p != 3000 {
		t.Errorf("liveness probe port %d; want 3000", p)
	}
	if tp := out.Service.Spec.Ports[0].TargetPort.IntValue(); tp != 3000 {
		t.Errorf("Service targetPort %d; want 3000", tp)
	}
	// Knative serves one port.
	svc.Spec.Template.Spec.Containers[1].Ports = append(svc.Spec.Template.Spec.Containers[1].Ports, corev1.ContainerPort{ContainerPort: 3001})
	if _, err := Convert(svc, Options{}); err == nil || !strings.Contains(err.Error(), "spec.template.spec.containers[1].ports: 2 ports; accepted: one") {
		t.Errorf("two ports: %v", err)
	}
}
