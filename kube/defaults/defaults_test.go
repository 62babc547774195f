package defaults

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/pkg/autoscaling"
)

const ns = "swell-test"

// wait bounds every wait for the store's goroutine; the tests wait on
// channels, never on time.
const wait = 5 * time.Second

func configMap(data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: kube.DefaultsConfigMap}, Data: data}
}

type rig struct {
	t       *testing.T
	ctx     context.Context
	cs      *fake.Clientset
	store   *Store
	rec     *record.FakeRecorder
	changes chan autoscaling.Defaults
}

func newRig(t *testing.T, objs ...runtime.Object) *rig {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	r := &rig{t: t, ctx: ctx, cs: fake.NewClientset(objs...), rec: record.NewFakeRecorder(10),
		changes: make(chan autoscaling.Defaults, 10)}
	s, err := New(Config{Client: r.cs, Namespace: ns, Recorder: r.rec})
	if err != nil {
		t.Fatal(err)
	}
	s.OnChange(func(d autoscaling.Defaults) { r.changes <- d })
	r.store = s
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-s.Loaded():
	case <-time.After(wait):
		t.Fatal("the defaults were not loaded")
	}
	return r
}

func (r *rig) change() autoscaling.Defaults {
	r.t.Helper()
	select {
	case d := <-r.changes:
		return d
	case <-time.After(wait):
		r.t.Fatal("no change of the defaults")
		return autoscaling.Defaults{}
	}
}

func (r *rig) update(data map[string]string) {
	r.t.Helper()
	if _, err := r.cs.CoreV1().ConfigMaps(ns).Update(r.ctx, configMap(data), metav1.UpdateOptions{}); err != nil {
		r.t.Fatal(err)
	}
}

func TestTheConfigMapsDefaults(t *testing.T) {
	const target = autoscaling.KeyContainerConcurrencyTargetDefault
	r := newRig(t, configMap(map[string]string{target: "50", "tick-interval": "1s"}))
	// The first load is a change from the built-in defaults.
	if d := r.change(); d.ConcurrencyTarget != 50 || d.TickInterval != time.Second {
		t.Fatalf("loaded %+v, want target 50 and a 1s tick", d)
	}
	if d := r.store.Current(); d.ConcurrencyTarget != 50 || d.TickInterval != time.Second {
		t.Fatalf("Current() = %+v", d)
	}

	// Every key is reloaded, the tick included.
	r.update(map[string]string{target: "60", "tick-interval": "3s"})
	if d := r.change(); d.ConcurrencyTarget != 60 || d.TickInterval != 3*time.Second {
		t.Fatalf("after an edit: %+v, want target 60 and a 3s tick", d)
	}

	// A bad ConfigMap keeps the defaults in force, with one warning on it.
	bad := map[string]string{target: "abc"}
	_, perr := autoscaling.ParseDefaults(bad)
	if perr == nil {
		t.Fatal("the defaults parse; the test needs bad ones")
	}
	r.update(bad)
	select {
	case ev := <-r.rec.Events:
		if !strings.HasPrefix(ev, "Warning InvalidDefaults ") || !strings.Contains(ev, perr.Error()) {
			t.Fatalf("event %q", ev)
		}
	case <-time.After(wait):
		t.Fatal("no event for a bad ConfigMap")
	}
	if d := r.store.Current(); d.ConcurrencyTarget != 60 {
		t.Fatalf("a bad ConfigMap changed the defaults: %+v", d)
	}
	// The same problem again is not recorded again; a good edit then
	// applies.
	cm := configMap(bad)
	cm.Labels = map[string]string{"touched": "yes"}
	if _, err := r.cs.CoreV1().ConfigMaps(ns).Update(r.ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.update(map[string]string{target: "70"})
	if d := r.change(); d.ConcurrencyTarget != 70 {
		t.Fatalf("after fixing the ConfigMap: %+v", d)
	}
	if n := len(r.rec.Events); n != 0 {
		t.Fatalf("%d more events for the same bad ConfigMap", n)
	}

	// Without the ConfigMap, the built-in defaults.
	if err := r.cs.CoreV1().ConfigMaps(ns).Delete(r.ctx, kube.DefaultsConfigMap, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if d := r.change(); !reflect.DeepEqual(d, autoscaling.DefaultDefaults()) {
		t.Fatalf("without the ConfigMap: %+v, want the built-in defaults", d)
	}
}

func TestNoConfigMapIsTheBuiltInDefaults(t *testing.T) {
	r := newRig(t)
	if d := r.store.Current(); !reflect.DeepEqual(d, autoscaling.DefaultDefaults()) {
		t.Fatalf("Current() = %+v, want the built-in defaults", d)
	}
	select {
	case d := <-r.changes:
		t.Fatalf("a change %+v without a ConfigMap", d)
	default:
	}
}

func TestNewAndRunRefuse(t *testing.T) {
	if _, err := New(Config{}); err == nil || !strings.Contains(err.Error(), "Client is required") {
		t.Errorf("New without a client: %v", err)
	}
	r := newRig(t)
	if err := r.store.Run(r.ctx); err == nil {
		t.Error("a second Run: no error")
	}
}
