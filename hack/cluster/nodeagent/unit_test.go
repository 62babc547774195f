package nodeagent

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
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

func TestContainerEnvAndArgv(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u-1"},
		Spec:       corev1.PodSpec{NodeName: "n1"},
	}
	c := &corev1.Container{
		Name:  "c",
		Image: "swell/hello:v1",
		Env: []corev1.EnvVar{
			{Name: "NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			{Name: "IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
			{Name: "GREETING", Value: "hi $(NAME) at $(IP) $(LATER)"},
			{Name: "LATER", Value: "x"},
		},
		Args: []string{"--msg=$(GREETING)", "$(NODE)"},
	}
	env, err := containerEnv(pod, c, "198.18.1.5")
	if err != nil {
		t.Fatal(err)
	}
	lookup := lookupIn(env)
	if v, _ := lookup("GREETING"); v != "hi p at 198.18.1.5 $(LATER)" {
		t.Errorf("GREETING = %q", v)
	}
	images := map[string]string{"swell/hello": "/bin/hello", "swell/shell": "/bin/sh"}
	argv, err := containerArgv(images, c, env)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/bin/hello", "--msg=hi p at 198.18.1.5 $(LATER)", "$(NODE)"}; !reflect.DeepEqual(argv, want) {
		t.Errorf("argv %q, want %q", argv, want)
	}

	c.Image = "swell/shell"
	c.Command = []string{"sh", "-c"}
	c.Args = []string{"echo $(NAME)"}
	if argv, err = containerArgv(images, c, env); err != nil || !reflect.DeepEqual(argv, []string{"/bin/sh", "-c", "echo p"}) {
		t.Errorf("command override: argv %q, err %v", argv, err)
	}

	c.Image = "nginx:1.27"
	if _, err := containerArgv(images, c, env); err == nil || !strings.Contains(err.Error(), "image table") || !strings.Contains(err.Error(), "swell/hello") {
		t.Errorf("unknown image: err %v, want one naming the image table and its images", err)
	}
	bad := &corev1.Container{Name: "c", Env: []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['a']"}}}}}
	if _, err := containerEnv(pod, bad, ""); err == nil || !strings.Contains(err.Error(), "metadata.labels") {
		t.Errorf("unsupported fieldRef: err %v", err)
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
