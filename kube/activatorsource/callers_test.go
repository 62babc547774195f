package activatorsource

import (
	"fmt"
	"net/netip"
	"reflect"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// pod is a pod in ns with the given addresses.
func pod(ns, name string, ips ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	if len(ips) > 0 {
		p.Status.PodIP = ips[0]
	}
	return p
}

// waitNamespace waits, on the directory's Updated signal, until ip's
// namespace reads ns (ok false: none).
func waitNamespace(t *testing.T, src *Source, ip, ns string, ok bool) {
	t.Helper()
	d, addr := src.Callers(), netip.MustParseAddr(ip)
	timeout := time.After(testTimeout)
	for {
		updated := d.Updated()
		if got, gotOK := d.Namespace(addr); got == ns && gotOK == ok {
			return
		}
		select {
		case <-updated:
		case <-timeout:
			got, gotOK := d.Namespace(addr)
			t.Fatalf("Namespace(%s) = %q %v, want %q %v", ip, got, gotOK, ns, ok)
		}
	}
}

// TestCallerNamespaces: the source knows the namespace of every pod by
// its addresses, both families, from their appearance to their end; the
// address of a pod on its node's network, of a pod that has ended, or
// held by pods of two namespaces at once is no namespace's.
func TestCallerNamespaces(t *testing.T) {
	host := pod("kube-system", "proxy", "192.168.0.5")
	host.Spec.HostNetwork = true
	done := pod("batch", "job-1", "10.1.0.9")
	done.Status.Phase = corev1.PodSucceeded
	src, client := started(t, pod("tenant-a", "web-1", "10.1.0.1", "fd00::1"), host, done)
	pods := client.CoreV1()

	waitNamespace(t, src, "10.1.0.1", "tenant-a", true)
	waitNamespace(t, src, "fd00::1", "tenant-a", true)
	waitNamespace(t, src, "192.168.0.5", "", false)
	waitNamespace(t, src, "10.1.0.9", "", false)
	waitNamespace(t, src, "10.9.9.9", "", false)

	// A pod whose address is published after it was created.
	late := pod("tenant-b", "late")
	if _, err := pods.Pods("tenant-b").Create(bg, late, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	late.Status.PodIPs, late.Status.PodIP = []corev1.PodIP{{IP: "10.1.0.2"}}, "10.1.0.2"
	if _, err := pods.Pods("tenant-b").UpdateStatus(bg, late, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNamespace(t, src, "10.1.0.2", "tenant-b", true)

	// The same address listed for a pod of another namespace: nobody's
	// until one of them goes.
	if _, err := pods.Pods("tenant-c").Create(bg, pod("tenant-c", "reuse", "10.1.0.2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNamespace(t, src, "10.1.0.2", "", false)
	if err := pods.Pods("tenant-b").Delete(bg, "late", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNamespace(t, src, "10.1.0.2", "tenant-c", true)

	// A pod that ends gives its address up.
	web, err := pods.Pods("tenant-a").Get(bg, "web-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	web.Status.Phase = corev1.PodFailed
	if _, err := pods.Pods("tenant-a").UpdateStatus(bg, web, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNamespace(t, src, "10.1.0.1", "", false)
	waitNamespace(t, src, "fd00::1", "", false)
}

// TestPodTransformKeepsLittle: the informer caches of a pod its name,
// namespace, labels and addresses only.
func TestPodTransformKeepsLittle(t *testing.T) {
	p := pod("ns", "name", "10.0.0.1")
	p.Labels = map[string]string{"app": "x"}
	p.Spec.Containers = []corev1.Container{{Name: "app", Image: "example/app"}}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady}}
	p.ResourceVersion = "42"
	got, err := podTransform(p)
	if err != nil {
		t.Fatal(err)
	}
	want := &podRef{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "name", ResourceVersion: "42"},
		PodLabels: newPodLabels(map[string]string{"app": "x"}), IPs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	if m := got.(*podRef).PodLabels.Map(); !reflect.DeepEqual(m, p.Labels) {
		t.Errorf("labels kept: %v, want %v", m, p.Labels)
	}
	if again, _ := podTransform(got); again != got {
		t.Errorf("a podRef transformed again: %+v, want it unchanged", again)
	}
	if v, _ := podTransform("not a pod"); v != "not a pod" {
		t.Errorf("a tombstone or other object was changed: %v", v)
	}
}

// TestNamespaceAllocatesNothing: the lookup on every request takes no
// lock and allocates nothing.
func TestNamespaceAllocatesNothing(t *testing.T) {
	d := newPodDirectory()
	p, _ := podTransform(pod("ns", "a", "10.0.0.1"))
	d.set(p, nil, p)
	known, unknown := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	if n := testing.AllocsPerRun(100, func() {
		d.Namespace(known)
		d.Namespace(unknown)
	}); n != 0 {
		t.Errorf("%v allocations, want 0", n)
	}
}

// BenchmarkPodDirectoryMemory measures what each pod of the cluster costs
// the activator: its transformed copy in the informer's cache (indexed by
// namespace, as the informer's is) and its entries in the directory. Each
// pod has two labels, as a Deployment's pods do: the Deployment's, shared
// by about 7 replicas, and its ReplicaSet's hash.
//
//	go test -run '^$' -bench PodDirectoryMemory ./kube/activatorsource
func BenchmarkPodDirectoryMemory(b *testing.B) {
	const n = 20000
	var bytes int64
	{
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		store := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		d := newPodDirectory()
		for i := range n {
			full := pod(fmt.Sprintf("namespace-%d", i%200), fmt.Sprintf("deployment-%d-7d9f8b6c5d-x%04d", i%3000, i),
				fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255))
			full.ResourceVersion = fmt.Sprint(1_000_000 + i)
			// A Deployment's pods' labels: its own, shared by its
			// replicas, and its ReplicaSet's hash.
			full.Labels = map[string]string{
				"app":               fmt.Sprintf("deployment-%d", i%3000),
				"pod-template-hash": fmt.Sprintf("7d9f8b%04d", i%3000),
			}
			p, _ := podTransform(full)
			store.Add(p)
			d.set(p, nil, p)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		bytes = int64(after.HeapInuse) - int64(before.HeapInuse)
		runtime.KeepAlive(store)
		runtime.KeepAlive(d)
	}
	for b.Loop() {
	}
	b.ReportMetric(float64(bytes)/n, "B/pod")
}
