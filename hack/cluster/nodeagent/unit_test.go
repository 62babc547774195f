package nodeagent

import (
	"context"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/clock"
	testclock "k8s.io/utils/clock/testing"
)

func TestIPAM(t *testing.T) {
	a, err := newIPAM("198.18.0.0/16", "198.18.0.1")
	if err != nil {
		t.Fatal(err)
	}
	first, _ := a.allocate("a", netip.Addr{})
	second, _ := a.allocate("b", netip.Addr{})
	if first.String() != "198.18.1.0" || second.String() != "198.18.1.1" {
		t.Fatalf("got %s, %s; want 198.18.1.0, 198.18.1.1 (the gateway's /24 is reserved)", first, second)
	}
	if again, _ := a.allocate("a", netip.Addr{}); again != first {
		t.Errorf("same pod got %s, then %s", first, again)
	}
	a.release("a")
	if reused, _ := a.allocate("c", netip.Addr{}); reused != first {
		t.Errorf("after release got %s, want %s back", reused, first)
	}
	want := netip.MustParseAddr("198.18.7.9")
	if got, _ := a.allocate("d", want); got != want {
		t.Errorf("preferred address: got %s, want %s", got, want)
	}
	if got, _ := a.allocate("e", netip.MustParseAddr("198.18.0.5")); got.String() != "198.18.1.2" {
		t.Errorf("a preferred address in the reserved /24 must be ignored, got %s", got)
	}
	for _, bad := range [][2]string{{"198.18.0.0/24", "198.18.0.1"}, {"nonsense", "198.18.0.1"}, {"198.18.0.0/16", "10.0.0.1"}} {
		if _, err := newIPAM(bad[0], bad[1]); err == nil {
			t.Errorf("newIPAM(%q, %q) accepted", bad[0], bad[1])
		}
	}
}

func TestPodMAC(t *testing.T) {
	for ip, want := range map[string]string{"198.18.1.0": "0a:58:c6:12:01:00", "198.18.255.254": "0a:58:c6:12:ff:fe"} {
		if got := podMAC(netip.MustParseAddr(ip)); got != want {
			t.Errorf("podMAC(%s) = %s, want %s", ip, got, want)
		}
	}
}

func TestIPAMExhausted(t *testing.T) {
	a, err := newIPAM("10.0.0.0/23", "10.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ; ; n++ {
		if _, err := a.allocate(strings.Repeat("x", n+1), netip.Addr{}); err != nil {
			break
		}
	}
	if n != 255 { // 10.0.1.0 - 10.0.1.254, broadcast excluded
		t.Errorf("allocated %d addresses from a /23 with its first /24 reserved, want 255", n)
	}
}

func TestCrashBackoff(t *testing.T) {
	clk := testclock.NewFakeClock(time.Unix(1000, 0))
	var b crashBackoff
	var got []time.Duration
	for range 8 {
		start := clk.Now()
		clk.Step(100 * time.Millisecond) // a quick crash
		d := b.delay(start, clk.Now())
		got = append(got, d)
		clk.Step(d)
	}
	want := []time.Duration{1, 2, 4, 8, 16, 30, 30, 30}
	for i := range want {
		want[i] *= time.Second
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("delays %v, want %v", got, want)
	}
	start := clk.Now()
	clk.Step(backoffReset)
	if d := b.delay(start, clk.Now()); d != time.Second {
		t.Errorf("after running %s the backoff restarts at 1s, got %s", backoffReset, d)
	}
}

func TestProbeTracker(t *testing.T) {
	clk := testclock.NewFakeClock(time.Unix(1000, 0))
	start := clk.Now()
	p := &corev1.Probe{InitialDelaySeconds: 5, PeriodSeconds: 2, SuccessThreshold: 2, FailureThreshold: 3}
	tr := newProbeTracker(p, start, false)
	if got := tr.due().Sub(start); got != 5*time.Second {
		t.Fatalf("first probe due after %s, want initialDelaySeconds 5s", got)
	}
	steps := []struct {
		success     bool
		ok, changed bool
	}{
		{true, false, false}, // one success of two
		{true, true, true},   // ready
		{false, true, false},
		{false, true, false},
		{true, true, false}, // resets the failures
		{false, true, false},
		{false, true, false},
		{false, false, true}, // third failure in a row
		{false, false, false},
	}
	clk.SetTime(tr.due())
	for i, s := range steps {
		ok, changed := tr.observe(clk.Now(), s.success)
		if ok != s.ok || changed != s.changed {
			t.Fatalf("step %d (success=%v): got ok=%v changed=%v, want ok=%v changed=%v", i, s.success, ok, changed, s.ok, s.changed)
		}
		if next := tr.due().Sub(clk.Now()); next != 2*time.Second {
			t.Fatalf("step %d: next probe in %s, want periodSeconds 2s", i, next)
		}
		clk.SetTime(tr.due())
	}
	if !tr.failedOut() {
		t.Error("failedOut after 4 failures with failureThreshold 3 = false")
	}

	live := newProbeTracker(&corev1.Probe{}, start, true)
	if live.period != 10*time.Second || live.timeout != time.Second || live.failureThreshold != 3 {
		t.Errorf("defaults: period %s timeout %s failureThreshold %d; want 10s, 1s, 3", live.period, live.timeout, live.failureThreshold)
	}
	if ok, _ := live.observe(start, false); !ok {
		t.Error("a liveness probe must stay healthy until failureThreshold failures")
	}
}

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "1", "B": "two"}
	lookup := func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	for in, want := range map[string]string{
		"$(A)":          "1",
		"x$(A)y$(B)z":   "x1ytwoz",
		"$(C)":          "$(C)",
		"$$(A)":         "$(A)",
		"$$":            "$",
		"$A":            "$A",
		"$(A":           "$(A",
		"a $ b":         "a $ b",
		"$":             "$",
		"no references": "no references",
	} {
		if got := expand(in, lookup); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}

func fieldEnv(name, path string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
}

func TestContainerEnvAndArgv(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u-1",
			Labels: map[string]string{"app": "hello"}, Annotations: map[string]string{"swell.run/enabled": "true"}},
		Spec: corev1.PodSpec{NodeName: "n1"},
	}
	c := &corev1.Container{
		Name:  "c",
		Image: "swell/hello:v1",
		Env: []corev1.EnvVar{
			fieldEnv("NAME", "metadata.name"),
			fieldEnv("IP", "status.podIP"),
			{Name: "GREETING", Value: "hi $(NAME) at $(IP) $(LATER)"},
			{Name: "LATER", Value: "x"},
			fieldEnv("HOST_IP", "status.hostIP"),
			fieldEnv("APP", "metadata.labels['app']"),
			fieldEnv("ENABLED", "metadata.annotations['swell.run/enabled']"),
			fieldEnv("ABSENT", "metadata.labels['absent']"),
			{Name: "KUBERNETES_SERVICE_PORT", Value: "443"},
			{Name: "API", Value: "$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"},
		},
		Args: []string{"--msg=$(GREETING)", "$(NODE)"},
	}
	in := envInputs{podIP: "198.18.1.5", hostIP: "198.18.0.1", refs: newFakeAPI(clock.RealClock{}),
		pod: []envVar{{"KUBERNETES_SERVICE_HOST", "198.18.0.1"}, {"KUBERNETES_SERVICE_PORT", "6443"}}}
	env, err := containerEnv(context.Background(), pod, c, in)
	if err != nil {
		t.Fatal(err)
	}
	lookup := lookupIn(env)
	for name, want := range map[string]string{
		"GREETING": "hi p at 198.18.1.5 $(LATER)",
		"HOST_IP":  "198.18.0.1",
		"APP":      "hello",
		"ENABLED":  "true",
		"ABSENT":   "",
		// The pod's variables come first: the container's own win, and
		// its values may refer to them.
		"KUBERNETES_SERVICE_PORT": "443",
		"API":                     "198.18.0.1:443",
	} {
		if v, ok := lookup(name); !ok || v != want {
			t.Errorf("%s = %q (set %v), want %q", name, v, ok, want)
		}
	}
	im := images{binaries: map[string]string{"swell/hello": "/bin/hello", "swell/shell": "/bin/sh"}}
	argv, err := containerArgv(im, c, env)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/bin/hello", "--msg=hi p at 198.18.1.5 $(LATER)", "$(NODE)"}; !reflect.DeepEqual(argv, want) {
		t.Errorf("argv %q, want %q", argv, want)
	}

	c.Image = "swell/shell"
	c.Command = []string{"sh", "-c"}
	c.Args = []string{"echo $(NAME)"}
	if argv, err = containerArgv(im, c, env); err != nil || !reflect.DeepEqual(argv, []string{"/bin/sh", "-c", "echo p"}) {
		t.Errorf("command override: argv %q, err %v", argv, err)
	}

	c.Image = "nginx:1.27"
	if _, err := containerArgv(im, c, env); err == nil || !strings.Contains(err.Error(), "image table") || !strings.Contains(err.Error(), "swell/hello") {
		t.Errorf("unknown image: err %v, want one naming the image table and its images", err)
	}
	for _, path := range []string{"metadata.labels", "status.phase", "metadata.labels['a'"} {
		bad := &corev1.Container{Name: "c", Env: []corev1.EnvVar{fieldEnv("X", path)}}
		if _, err := containerEnv(context.Background(), pod, bad, in); err == nil || !strings.Contains(err.Error(), "metadata.labels['KEY']") {
			t.Errorf("unsupported fieldRef %s: err %v, want one listing the supported paths", path, err)
		}
	}
	bad := &corev1.Container{Name: "c", Env: []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{
		ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu"}}}}}
	if _, err := containerEnv(context.Background(), pod, bad, in); err == nil || !strings.Contains(err.Error(), "secretKeyRef") {
		t.Errorf("resourceFieldRef: err %v, want one naming what is supported", err)
	}
}

func TestImages(t *testing.T) {
	im := images{
		binaries: map[string]string{"swell/activator": "/bin/activator", "swell/shell": "/bin/sh"},
		unbuilt:  map[string]string{"swell/autoscaler": "./cmd/autoscaler"},
	}
	for image, want := range map[string]string{
		"swell/activator":                            "/bin/activator",
		"swell/activator:v1":                         "/bin/activator",
		"swell/activator@sha256:0123":                "/bin/activator",
		"ghcr.io/swell-run/activator:v1":             "/bin/activator",
		"localhost:5000/activator":                   "/bin/activator",
		"registry.example/a/b/activator:v2@sha256:0": "/bin/activator",
	} {
		if got, err := im.binary(image); err != nil || got != want {
			t.Errorf("binary(%q) = %q, %v; want %s", image, got, err, want)
		}
	}
	for _, image := range []string{"swell/autoscaler", "ghcr.io/swell-run/autoscaler:v1"} {
		_, err := im.binary(image)
		if err == nil || !strings.Contains(err.Error(), "./cmd/autoscaler") || !strings.Contains(err.Error(), "has no binary") {
			t.Errorf("binary(%q): %v, want an error naming the package not yet built", image, err)
		}
	}
	if _, err := im.binary("ghcr.io/swell-run/nginx:1"); err == nil || !strings.Contains(err.Error(), "swell/activator, swell/shell") {
		t.Errorf("unknown image: %v, want an error listing the known images", err)
	}
}

func TestContainerEnvReferences(t *testing.T) {
	api := newFakeAPI(clock.RealClock{})
	api.secrets["ns/creds"] = &corev1.Secret{Data: map[string][]byte{"password": []byte("s3cret"), "user": []byte("ann")}}
	api.configMaps["ns/settings"] = &corev1.ConfigMap{Data: map[string]string{"level": "debug", "log.format": "json"},
		BinaryData: map[string][]byte{"blob": []byte("b")}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
	yes := true
	secretKey := func(name, key string, opt *bool) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key, Optional: opt}}
	}
	configKey := func(name, key string, opt *bool) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key, Optional: opt}}
	}
	c := &corev1.Container{
		Name: "c",
		EnvFrom: []corev1.EnvFromSource{
			{Prefix: "CFG_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}},
			{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}}},
			{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "absent"}, Optional: &yes}},
		},
		Env: []corev1.EnvVar{
			{Name: "PASSWORD", ValueFrom: secretKey("creds", "password", nil)},
			{Name: "LEVEL", ValueFrom: configKey("settings", "level", nil)},
			{Name: "MAYBE", ValueFrom: secretKey("absent", "x", &yes)},
			{Name: "MAYBE_KEY", ValueFrom: configKey("settings", "absent", &yes)},
			{Name: "user", Value: "overrides envFrom"},
		},
	}
	env, err := containerEnv(context.Background(), pod, c, envInputs{refs: api})
	if err != nil {
		t.Fatal(err)
	}
	lookup := lookupIn(env)
	for name, want := range map[string]string{
		"CFG_level": "debug", "CFG_log.format": "json", "password": "s3cret", "user": "overrides envFrom",
		"PASSWORD": "s3cret", "LEVEL": "debug",
	} {
		if got, ok := lookup(name); !ok || got != want {
			t.Errorf("%s = %q (set %v), want %q", name, got, ok, want)
		}
	}
	// As the kubelet does: a ConfigMap's binaryData makes no variables.
	for _, name := range []string{"MAYBE", "MAYBE_KEY", "CFG_blob"} {
		if v, ok := lookup(name); ok {
			t.Errorf("%s is set (%q), want it absent", name, v)
		}
	}

	for _, tc := range []struct {
		env  corev1.EnvVar
		want string
	}{
		{corev1.EnvVar{Name: "X", ValueFrom: secretKey("absent", "x", nil)}, "Secret ns/absent: not found"},
		{corev1.EnvVar{Name: "X", ValueFrom: secretKey("creds", "token", nil)}, "key token in Secret ns/creds: not found"},
		{corev1.EnvVar{Name: "X", ValueFrom: configKey("absent", "x", nil)}, "ConfigMap ns/absent: not found"},
		{corev1.EnvVar{Name: "X", ValueFrom: configKey("settings", "blob", nil)}, "key blob in ConfigMap ns/settings: not found"},
	} {
		c := &corev1.Container{Name: "c", Env: []corev1.EnvVar{tc.env}}
		_, err := containerEnv(context.Background(), pod, c, envInputs{refs: api})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error saying %q", tc.env.ValueFrom, err, tc.want)
		}
	}
	missing := &corev1.Container{Name: "c", EnvFrom: []corev1.EnvFromSource{
		{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "absent"}}}}}
	if _, err := containerEnv(context.Background(), pod, missing, envInputs{refs: api}); err == nil || !strings.Contains(err.Error(), "ConfigMap ns/absent: not found") {
		t.Errorf("envFrom a missing ConfigMap: %v", err)
	}
}

func TestResolvePort(t *testing.T) {
	c := &corev1.Container{Name: "c", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}
	if p, err := resolvePort(intstr.FromString("http"), c); err != nil || p != 8080 {
		t.Errorf("named port: %d, %v", p, err)
	}
	if p, err := resolvePort(intstr.FromInt32(9090), c); err != nil || p != 9090 {
		t.Errorf("numbered port: %d, %v", p, err)
	}
	if _, err := resolvePort(intstr.FromString("grpc"), c); err == nil {
		t.Error("unknown port name accepted")
	}
}
