package inject

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/yaml"

	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/pkg/autoscaling"
	"github.com/swell-run/swell/queueproxy"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.yaml from the current output")

func testConfig() Config {
	return Config{Image: "example/queue-proxy:test", Resources: DefaultResources(), Defaults: autoscaling.DefaultDefaults()}
}

// pushConfig is testConfig pushing to the autoscaler in swell-system.
func pushConfig() Config {
	cfg := testConfig()
	cfg.PushURL = PushURL(kube.DefaultSystemNamespace)
	return cfg
}

// TestGolden injects each testdata/NAME.yaml Deployment and compares the
// result, or the error, with testdata/NAME.golden.yaml. Injecting the
// result again must give it back byte for byte. The cases whose NAME
// starts with push are injected with a push URL (pushConfig).
func TestGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, in := range inputs {
		if strings.HasSuffix(in, ".golden.yaml") {
			continue
		}
		n++
		name := strings.TrimSuffix(filepath.Base(in), ".yaml")
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			cfg := testConfig()
			if strings.HasPrefix(name, "push") {
				cfg = pushConfig()
			}
			got, injected := injectDeployment(t, raw, cfg)

			golden := strings.TrimSuffix(in, ".yaml") + ".golden.yaml"
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to write it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("injecting %s gave\n%s\nwant (%s)\n%s", in, got, golden, want)
			}
			if !injected {
				return
			}
			again, _ := injectDeployment(t, got, cfg)
			if !bytes.Equal(again, got) {
				t.Errorf("injecting twice differs from once:\n%s\nonce:\n%s", again, got)
			}
		})
	}
	if n < 10 {
		t.Fatalf("found %d cases in testdata; want at least 10", n)
	}
}

// injectDeployment injects a Deployment in YAML and returns it as YAML, or
// "error:" and the error's lines, and whether it injected without error.
func injectDeployment(t *testing.T, raw []byte, cfg Config) ([]byte, bool) {
	t.Helper()
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict(raw, &d); err != nil {
		t.Fatal(err)
	}
	before := d.DeepCopy()
	held := d.Spec.Template // shares the template's maps and slices
	if err := Template(d.ObjectMeta, &d.Spec.Template, cfg); err != nil {
		// A failed injection leaves the template alone.
		if !equalYAML(t, before, &d) {
			t.Errorf("failed injection changed the template")
		}
		return []byte("error: |\n  " + strings.ReplaceAll(err.Error(), "\n", "\n  ") + "\n"), false
	}
	// The webhook compares the result with the template it was given.
	if !equalYAML(t, &before.Spec.Template, &held) {
		t.Errorf("injection changed the maps or slices of the template it was given")
	}
	out, err := yaml.Marshal(&d)
	if err != nil {
		t.Fatal(err)
	}
	return out, true
}

func equalYAML(t *testing.T, a, b any) bool {
	t.Helper()
	ya, err := yaml.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	yb, err := yaml.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(ya, yb)
}

func TestBadAnnotationsNameKeyValueAndAccepted(t *testing.T) {
	tpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{kube.LabelEnabled: "true"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}},
	}
	meta := metav1.ObjectMeta{Annotations: map[string]string{
		"swell.run/timout":                 "30s",
		AnnotationTimeout:                  "2h",
		AnnotationResponseStartTimeout:     "-1s",
		AnnotationQueueDepth:               "5",
		AnnotationContainerConcurrency:     "many",
		"autoscaling.swell.run/min-scale":  "-1",
		"autoscaling.swell.run/max-scalee": "3",
		"Swell.run/queue-depth":            "1",
		"other.example/key":                "ignored",
		kube.LabelEnabled:                  "true",
	}}
	err := Template(meta, &tpl, testConfig())
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		`swell.run/timout: unknown key (value "30s"); accepted: swell.run/container-concurrency, `,
		"did you mean swell.run/timeout?",
		`swell.run/timeout: "2h" is out of range; accepted: a duration from 1s to 1h`,
		`swell.run/response-start-timeout: "-1s" is out of range; accepted: a duration from 0s (none) to the request timeout`,
		`swell.run/container-concurrency: "many" is not an integer`,
		`swell.run/queue-depth: "5" has no effect without a concurrency limit`,
		`autoscaling.swell.run/min-scale: "-1"`,
		"did you mean autoscaling.swell.run/max-scale?",
		`Swell.run/queue-depth: unknown key (value "1"); accepted: swell.run/container-concurrency, `,
		"did you mean swell.run/queue-depth?",
		"swell.run/enabled: is read from the labels",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error\n%v\ndoes not mention %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "other.example") {
		t.Errorf("error mentions a key of another domain:\n%v", err)
	}
	if _, ok := tpl.Annotations[AnnotationInjected]; ok {
		t.Error("template injected despite errors")
	}
}

func TestTimeoutSetsGracePeriod(t *testing.T) {
	for _, tt := range []struct {
		timeout string
		given   *int64
		want    int64
	}{
		{"", nil, 300 + 5 + 10},
		{"5s", nil, 30},
		{"5s", ptr(int64(100)), 100},
		{"1h", ptr(int64(100)), 3600 + 15},
	} {
		tpl := corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{kube.LabelEnabled: "true"}},
			Spec:       corev1.PodSpec{TerminationGracePeriodSeconds: tt.given, Containers: []corev1.Container{{Name: "app"}}},
		}
		meta := metav1.ObjectMeta{Annotations: map[string]string{}}
		if tt.timeout != "" {
			meta.Annotations[AnnotationTimeout] = tt.timeout
		}
		if err := Template(meta, &tpl, testConfig()); err != nil {
			t.Fatal(err)
		}
		if got := *tpl.Spec.TerminationGracePeriodSeconds; got != tt.want {
			t.Errorf("timeout %q, grace %v: grace %d; want %d", tt.timeout, tt.given, got, tt.want)
		}
	}
}

// TestDrainOutlastsTheLongestRequest: the queue-proxy, configured by the
// environment injection gives it, drains for at least the request timeout
// plus the quiet period, so a request that began just before the drain
// ends before the preStop hook returns and the kubelet stops the app; and
// the grace period covers that drain. With the queue-proxy's own 30 s
// default, a 40 s request was cut at scale-down.
func TestDrainOutlastsTheLongestRequest(t *testing.T) {
	for _, timeout := range []string{"", "40s", "5m", "1h"} {
		tpl := corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{kube.LabelEnabled: "true"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}},
		}
		meta := metav1.ObjectMeta{Annotations: map[string]string{}}
		if timeout != "" {
			meta.Annotations[AnnotationTimeout] = timeout
		}
		if err := Template(meta, &tpl, testConfig()); err != nil {
			t.Fatal(err)
		}
		qp := tpl.Spec.Containers[len(tpl.Spec.Containers)-1]
		env := map[string]string{}
		for _, e := range qp.Env {
			env[e.Name] = e.Value
		}
		cfg, err := queueproxy.ParseConfig(nil, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
		if err != nil {
			t.Fatalf("timeout %q: the queue-proxy refuses its injected environment: %v", timeout, err)
		}
		if cfg.DrainTimeout < cfg.RequestTimeout+cfg.DrainQuietPeriod {
			t.Errorf("timeout %q: drain timeout %v < request timeout %v + quiet period %v", timeout, cfg.DrainTimeout, cfg.RequestTimeout, cfg.DrainQuietPeriod)
		}
		if grace := time.Duration(*tpl.Spec.TerminationGracePeriodSeconds) * time.Second; grace < cfg.DrainTimeout+drainMargin {
			t.Errorf("timeout %q: grace period %v < drain timeout %v + %v", timeout, grace, cfg.DrainTimeout, drainMargin)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	tpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{kube.LabelEnabled: "true"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: ContainerName}}},
	}
	if err := Template(metav1.ObjectMeta{}, &tpl, Config{}); err == nil || !strings.Contains(err.Error(), "image") {
		t.Errorf("no image: %v", err)
	}
	err := Template(metav1.ObjectMeta{}, &tpl, testConfig())
	if err == nil || !strings.Contains(err.Error(), "reserved") {
		t.Errorf("app container named queue-proxy: %v", err)
	}
	badPush := testConfig()
	badPush.PushURL = "wss://autoscaler.swell-system.svc:8081/pods"
	err = Template(metav1.ObjectMeta{Name: "web"}, &tpl, badPush)
	if want := `queue-proxy push URL "wss://autoscaler.swell-system.svc:8081/pods": must be a ws:// URL`; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("push URL wss://: %v; want %s...", err, want)
	}
	var ae *autoscaling.Error
	meta := metav1.ObjectMeta{Annotations: map[string]string{AnnotationContainerConcurrency: "-2"}}
	if err := Template(meta, &tpl, testConfig()); !errors.As(err, &ae) {
		t.Errorf("container-concurrency -2: %v; want an *autoscaling.Error", err)
	}
}

func TestEnabled(t *testing.T) {
	for _, tt := range []struct {
		labels map[string]string
		want   bool
	}{
		{map[string]string{kube.LabelEnabled: "true"}, true},
		{map[string]string{kube.LabelEnabled: "True"}, false},
		{map[string]string{kube.LabelEnabled: "false"}, false},
		{map[string]string{"other": "true"}, false},
	} {
		if got := Enabled(tt.labels); got != tt.want {
			t.Errorf("Enabled(%v) = %v; want %v", tt.labels, got, tt.want)
		}
	}
	if Enabled(nil) {
		t.Error("Enabled(nil) = true")
	}
}

func ptr[T any](v T) *T { return &v }

func TestKindOf(t *testing.T) {
	for _, tt := range []struct {
		gvk      metav1.GroupVersionKind
		ok, pod  bool
		resource string
	}{
		{metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, true, false, "deployments"},
		{metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "StatefulSet"}, true, false, "statefulsets"},
		{metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "ReplicaSet"}, true, false, "replicasets"},
		{metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, true, true, "pods"},
		{metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "DaemonSet"}, false, false, ""},
		{metav1.GroupVersionKind{Group: "apps", Version: "v1beta1", Kind: "Deployment"}, false, false, ""},
		{metav1.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"}, false, false, ""},
	} {
		k, ok := KindOf(tt.gvk)
		if ok != tt.ok || k.Pod != tt.pod || k.Resource != tt.resource {
			t.Errorf("KindOf(%v) = %+v, %v", tt.gvk, k, ok)
		}
	}
	if k, _ := KindOf(metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}); k.APIVersion() != "apps/v1" {
		t.Errorf("Deployment's apiVersion %q", k.APIVersion())
	}
	if k, _ := KindOf(metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}); k.APIVersion() != "v1" {
		t.Errorf("Pod's apiVersion %q", k.APIVersion())
	}
}

// TestInjectedPodStaysRestricted: injection into a pod that meets the
// "restricted" Pod Security Standard gives a pod that still meets it, so
// opting in works in a namespace that enforces it. The checks are
// Kubernetes' own (k8s.io/pod-security-admission), at the latest version.
func TestInjectedPodStaysRestricted(t *testing.T) {
	evaluator, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	restricted := api.LevelVersion{Level: api.LevelRestricted, Version: api.LatestVersion()}
	violations := func(tpl *corev1.PodTemplateSpec) []string {
		var out []string
		for _, r := range evaluator.EvaluatePod(restricted, &tpl.ObjectMeta, &tpl.Spec) {
			if !r.Allowed {
				out = append(out, r.ForbiddenReason+": "+r.ForbiddenDetail)
			}
		}
		return out
	}
	yes, no := true, false
	locked := func() *corev1.SecurityContext {
		return &corev1.SecurityContext{
			RunAsNonRoot:             &yes,
			AllowPrivilegeEscalation: &no,
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		}
	}
	for name, tpl := range map[string]corev1.PodTemplateSpec{
		// Everything set on the app's container: nothing at the pod
		// level covers the sidecar.
		"container level": {Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: "example/app:1", Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
			SecurityContext: locked(),
		}}}},
		// Non-root and seccomp at the pod level, the rest per container.
		"pod level": {Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   &yes,
				RunAsUser:      ptr(int64(1000)),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name: "app", Image: "example/app:1",
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: &no,
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		}},
	} {
		t.Run(name, func(t *testing.T) {
			tpl.Labels = map[string]string{kube.LabelEnabled: "true"}
			if v := violations(&tpl); len(v) > 0 {
				t.Fatalf("the app's pod is not restricted to begin with: %v", v)
			}
			// The cpu metric shares the pod's process namespace, which the
			// profile allows.
			for _, workload := range []metav1.ObjectMeta{{}, {Annotations: map[string]string{
				autoscaling.Prefix + autoscaling.KeyMetric:    "concurrency,cpu",
				autoscaling.Prefix + autoscaling.KeyCPUTarget: "500m",
			}}} {
				tpl := *tpl.DeepCopy()
				if err := Template(workload, &tpl, testConfig()); err != nil {
					t.Fatal(err)
				}
				if v := violations(&tpl); len(v) > 0 {
					t.Errorf("annotations %v: the injected pod violates the restricted profile:\n%s", workload.Annotations, strings.Join(v, "\n"))
				}
				qp := tpl.Spec.Containers[len(tpl.Spec.Containers)-1].SecurityContext
				if qp.RunAsUser == nil || *qp.RunAsUser != 65532 {
					t.Errorf("queue-proxy runAsUser %v, want 65532 (distroless nonroot)", qp.RunAsUser)
				}
			}
		})
	}
}

// TestAllowedCallersJudgedAtAdmission: the activator's allowed callers
// are a key injection knows, and a bad value is refused when applied.
func TestAllowedCallersJudgedAtAdmission(t *testing.T) {
	if _, err := parseSettings(map[string]string{kube.AnnotationAllowedCallers: "ingress-nginx,monitoring"}, autoscaling.DefaultDefaults()); err != nil {
		t.Fatalf("a list of namespaces refused: %v", err)
	}
	_, err := parseSettings(map[string]string{kube.AnnotationAllowedCallers: "*,Kube System"}, autoscaling.DefaultDefaults())
	if err == nil || !strings.Contains(err.Error(), kube.AnnotationAllowedCallers) || !strings.Contains(err.Error(), `"Kube System" is not a namespace name`) {
		t.Fatalf("a bad value: %v, want an error naming the key and the problem", err)
	}
}

// TestHostsJudgedAtAdmission: swell.run/hosts is refused when applied if
// it claims a cluster-local name or an address.
func TestHostsJudgedAtAdmission(t *testing.T) {
	if _, err := parseSettings(map[string]string{kube.AnnotationHosts: "shop.example.com,api.example.com"}, autoscaling.DefaultDefaults()); err != nil {
		t.Fatalf("a list of hosts refused: %v", err)
	}
	_, err := parseSettings(map[string]string{kube.AnnotationHosts: "web.payments.svc.cluster.local"}, autoscaling.DefaultDefaults())
	if err == nil || !strings.Contains(err.Error(), kube.AnnotationHosts) || !strings.Contains(err.Error(), "cluster-local") {
		t.Errorf("another namespace's cluster-local name: %v, want refused", err)
	}
}

// TestSharedProcessNamespaceTakenBack: injection takes back the shared
// process namespace it set once the metrics no longer need it, and keeps
// what the user set themselves.
func TestSharedProcessNamespaceTakenBack(t *testing.T) {
	cpu := metav1.ObjectMeta{Annotations: map[string]string{
		autoscaling.Prefix + autoscaling.KeyMetric:    "concurrency,cpu",
		autoscaling.Prefix + autoscaling.KeyCPUTarget: "500m",
	}}
	concurrency := metav1.ObjectMeta{}
	share := func(tpl *corev1.PodTemplateSpec) string {
		if tpl.Spec.ShareProcessNamespace == nil {
			return "unset"
		}
		return strconv.FormatBool(*tpl.Spec.ShareProcessNamespace)
	}
	for _, tt := range []struct {
		name  string
		given *bool
		want  string
	}{
		{"unset", nil, "unset"},
		{"set by the user", ptr(true), "true"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tpl := corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{kube.LabelEnabled: "true"}},
				Spec:       corev1.PodSpec{ShareProcessNamespace: tt.given, Containers: []corev1.Container{{Name: "app"}}},
			}
			if err := Template(cpu, &tpl, testConfig()); err != nil {
				t.Fatal(err)
			}
			if got := share(&tpl); got != "true" {
				t.Fatalf("with the cpu metric: shareProcessNamespace %s, want true", got)
			}
			if err := Template(concurrency, &tpl, testConfig()); err != nil {
				t.Fatal(err)
			}
			if got := share(&tpl); got != tt.want {
				t.Errorf("after cpu left the metric list: shareProcessNamespace %s, want %s", got, tt.want)
			}
			if _, ok := tpl.Annotations[AnnotationSharedProcessNamespace]; ok {
				t.Errorf("%s still set", AnnotationSharedProcessNamespace)
			}
		})
	}

	// A false the user wrote over an injected template is theirs: refused
	// while cpu is listed, not turned back to true.
	tpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{kube.LabelEnabled: "true"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}},
	}
	if err := Template(cpu, &tpl, testConfig()); err != nil {
		t.Fatal(err)
	}
	tpl.Spec.ShareProcessNamespace = ptr(false)
	err := Template(cpu, &tpl, testConfig())
	if err == nil || !strings.Contains(err.Error(), `shareProcessNamespace: "false" is set on the pod template, but autoscaling.swell.run/metric lists cpu`) {
		t.Errorf("the user's false under the cpu metric: %v, want refused", err)
	}
}

// TestQueueProxyReadsTheMetricsEnvironment: the queue-proxy accepts the
// environment injection gives it for cpu, memory and a gauge, and reads
// what the annotations asked for.
func TestQueueProxyReadsTheMetricsEnvironment(t *testing.T) {
	tpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{kube.LabelEnabled: "true"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")},
		}}}},
	}
	meta := metav1.ObjectMeta{Annotations: map[string]string{
		autoscaling.Prefix + autoscaling.KeyMetric:      "concurrency,cpu,memory,gauge",
		autoscaling.Prefix + autoscaling.KeyGauge:       `waiting{ model = "x" }`,
		autoscaling.Prefix + autoscaling.KeyGaugeTarget: "3",
		autoscaling.Prefix + autoscaling.KeyGaugePort:   "9100",
		autoscaling.Prefix + autoscaling.KeyGaugePath:   "/stats",
	}}
	if err := Template(meta, &tpl, testConfig()); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, e := range tpl.Spec.Containers[len(tpl.Spec.Containers)-1].Env {
		env[e.Name] = e.Value
	}
	cfg, err := queueproxy.ParseConfig(nil, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatalf("the queue-proxy refuses its injected environment: %v", err)
	}
	if cfg.AppUsage != queueproxy.AppUsagePod || cfg.GaugeSelector != `waiting{model="x"}` || cfg.GaugePort != 9100 || cfg.GaugePath != "/stats" {
		t.Errorf("queue-proxy app usage %q, gauge %q on port %d at %q; want pod, waiting{model=\"x\"} on 9100 at /stats",
			cfg.AppUsage, cfg.GaugeSelector, cfg.GaugePort, cfg.GaugePath)
	}
}

func TestRequests(t *testing.T) {
	for _, tt := range []struct {
		name        string
		r           corev1.ResourceRequirements
		cpu, memory float64
	}{
		{"none", corev1.ResourceRequirements{}, 0, 0},
		{"requests", corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("512Mi")}}, 0.25, 512 << 20},
		// Kubernetes gives a container with a limit and no request a
		// request equal to the limit.
		{"limits only", corev1.ResourceRequirements{Limits: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1G")}}, 2, 1e9},
		{"request below limit", corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}, 0.1, 0},
	} {
		cpu, memory := Requests(&corev1.Container{Resources: tt.r})
		if cpu != tt.cpu || memory != tt.memory {
			t.Errorf("%s: Requests = %v cores, %v bytes; want %v, %v", tt.name, cpu, memory, tt.cpu, tt.memory)
		}
	}
}

func TestPushURL(t *testing.T) {
	if got, want := PushURL("swell-system"), "ws://autoscaler.swell-system.svc:8081/pods"; got != want {
		t.Errorf("PushURL = %s, want %s", got, want)
	}
}

// TestQueueProxyReadsThePushEnvironment: the queue-proxy accepts the push
// environment injection gives it, once the kubelet has filled in the
// downward API's fields and expanded $(POD_NAMESPACE), and pushes as a
// pod of the Deployment in the pod's namespace.
func TestQueueProxyReadsThePushEnvironment(t *testing.T) {
	tpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{kube.LabelEnabled: "true"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}},
	}
	if err := Template(metav1.ObjectMeta{Name: "web"}, &tpl, pushConfig()); err != nil {
		t.Fatal(err)
	}
	fields := map[string]string{"metadata.namespace": "shop", "status.podIP": "10.1.2.3"}
	env := map[string]string{}
	for _, e := range tpl.Spec.Containers[len(tpl.Spec.Containers)-1].Env {
		v := e.Value
		if e.ValueFrom != nil {
			v = fields[e.ValueFrom.FieldRef.FieldPath]
		}
		env[e.Name] = strings.ReplaceAll(v, "$(POD_NAMESPACE)", env["POD_NAMESPACE"])
	}
	cfg, err := queueproxy.ParseConfig(nil, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatalf("the queue-proxy refuses its injected environment: %v", err)
	}
	if cfg.PushURL != PushURL(kube.DefaultSystemNamespace) || cfg.Service != "shop/web" || cfg.PodIP != "10.1.2.3" {
		t.Errorf("queue-proxy pushes to %q as %q from %q; want %q, shop/web, 10.1.2.3", cfg.PushURL, cfg.Service, cfg.PodIP, PushURL(kube.DefaultSystemNamespace))
	}
}

// TestPushAsTheDeployment: the ReplicaSets a Deployment creates, which the
// webhook injects too, come out as the Deployment's template did; a name
// that cannot be a service's pushes nothing.
func TestPushAsTheDeployment(t *testing.T) {
	tpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{kube.LabelEnabled: "true"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}},
	}
	deployment := tpl.DeepCopy()
	if err := Template(metav1.ObjectMeta{Name: "web", Namespace: "shop"}, deployment, pushConfig()); err != nil {
		t.Fatal(err)
	}
	rs := metav1.ObjectMeta{Name: "web-5d8f9c7b6", Namespace: "shop", OwnerReferences: []metav1.OwnerReference{
		{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", Controller: ptr(true)},
	}}
	fromRS := deployment.DeepCopy()
	if err := Template(rs, fromRS, pushConfig()); err != nil {
		t.Fatal(err)
	}
	if !equalYAML(t, deployment, fromRS) {
		t.Errorf("the ReplicaSet's template injected again differs from its Deployment's:\n%s", toYAML(t, fromRS))
	}
	if env := queueProxyEnv(fromRS); env["SERVICE"] != "$(POD_NAMESPACE)/web" {
		t.Errorf("SERVICE = %q, want $(POD_NAMESPACE)/web", env["SERVICE"])
	}

	for _, name := range []string{"web.v2", strings.Repeat("w", 64), ""} {
		odd := tpl.DeepCopy()
		if err := Template(metav1.ObjectMeta{Name: name, GenerateName: "web-"}, odd, pushConfig()); err != nil {
			t.Fatal(err)
		}
		if env := queueProxyEnv(odd); env["AUTOSCALER_PUSH_URL"] != "" || env["SERVICE"] != "" {
			t.Errorf("name %q: pushes as %q; want no push", name, env["SERVICE"])
		}
	}
}

// queueProxyEnv returns the injected queue-proxy's plain environment.
func queueProxyEnv(tpl *corev1.PodTemplateSpec) map[string]string {
	env := map[string]string{}
	for _, c := range tpl.Spec.Containers {
		if c.Name != ContainerName {
			continue
		}
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
	}
	return env
}

func toYAML(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
