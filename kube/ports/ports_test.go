package ports

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/swell-run/swell/pkg/service"
)

const ns = "swell-system"

func key(t *testing.T, s string) service.Key {
	t.Helper()
	k, err := service.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestParseRange(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Range
		ok   bool
	}{
		{"10000-29999", Range{10000, 29999}, true},
		{" 2000 - 2099 ", Range{2000, 2099}, true},
		{"2000-2098", Range{}, false}, // 99 ports
		{"80-1000", Range{}, false},
		{"60000-70000", Range{}, false},
		{"10000", Range{}, false},
		{"a-b", Range{}, false},
		{"20000-10000", Range{}, false},
	} {
		got, err := ParseRange(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParseRange(%q) = %v, %v; want %v, ok %v", c.in, got, err, c.want, c.ok)
		}
	}
	if r, err := ParseRange(DefaultRange.String()); err != nil || r != DefaultRange {
		t.Errorf("the default range does not read back: %v, %v", r, err)
	}
}

func cm(name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: data}
}

// TestIndexReadsOnlyWhatTheTableMayHold: entries outside their
// ConfigMap's thousand, values that name no service and ConfigMaps not
// named as the table's are left out and reported; a key listed twice has
// its lowest port; a deletion takes a ConfigMap's keys away, and Set
// names exactly the keys whose port changed.
func TestIndexReadsOnlyWhatTheTableMayHold(t *testing.T) {
	x := NewIndex()
	changed, problems := x.Set(cm("swell-service-ports-10000", map[string]string{
		"10001":  "shop/web",
		"10002":  "shop/api",
		"10003":  "released 2026-12-05T10:00:00Z",
		"10004":  "released yesterday",
		"11000":  "shop/other", // the next ConfigMap's
		"999":    "shop/low",
		"10005":  "no-slash",
		"10006":  "shop/web", // twice: the lowest port wins
		"010007": "shop/zero",
	}), false)
	if want := []service.Key{key(t, "shop/api"), key(t, "shop/web")}; !slices.Equal(changed, want) {
		t.Errorf("changed %v, want %v", changed, want)
	}
	if len(problems) != 5 {
		t.Errorf("problems %v, want 5: a bad time, two ports of other ConfigMaps, a value that is no key, a port written with a leading zero", problems)
	}
	if p, ok := x.Port(key(t, "shop/web")); !ok || p != 10001 {
		t.Errorf("shop/web's port %d, %v; want 10001", p, ok)
	}
	if _, ok := x.owner(10006); ok {
		t.Error("port 10006, a second port of shop/web, is owned")
	}
	if _, problems := x.Set(cm("swell-service-ports-10500", map[string]string{"10500": "a/b"}), false); len(problems) != 1 {
		t.Errorf("a ConfigMap not at a thousand: problems %v, want 1", problems)
	}
	if _, ok := x.Port(key(t, "a/b")); ok {
		t.Error("a ConfigMap not named as the table's gave a port")
	}

	changed, _ = x.Set(cm("swell-service-ports-10000", map[string]string{"10001": "shop/web", "10009": "shop/api"}), false)
	if want := []service.Key{key(t, "shop/api")}; !slices.Equal(changed, want) {
		t.Errorf("after shop/api moved: changed %v, want %v", changed, want)
	}
	changed, _ = x.Set(cm("swell-service-ports-10000", nil), true)
	if want := []service.Key{key(t, "shop/api"), key(t, "shop/web")}; !slices.Equal(changed, want) || x.Len() != 0 {
		t.Errorf("after the deletion: changed %v, want %v; %d keys left", changed, want, x.Len())
	}
}

// feed copies every ConfigMap of the fake into x, as an informer would.
func feed(t *testing.T, c *fake.Clientset, x *Index) {
	t.Helper()
	list, err := c.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		x.Set(&list.Items[i], false)
	}
}

func newAllocator(c *fake.Clientset, clk *clocktesting.FakePassiveClock, r Range) *Allocator {
	return &Allocator{Client: c, Namespace: ns, Range: r, Index: NewIndex(), Clock: clk}
}

// TestAllocatorNeverGivesAPortTwice: keys get distinct ports, stable
// across calls; a second replica whose cache has seen nothing reads the
// table before it writes, and takes none of the first one's; a released
// port goes to no one else until Hold has passed, and its entry is
// dropped when the ConfigMap is next written after that.
func TestAllocatorNeverGivesAPortTwice(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset()
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC))
	// A range of a hundred ports: the keys below contend for them.
	r := Range{First: 20000, Last: 20099}
	a, b := newAllocator(c, clk, r), newAllocator(c, clk, r)

	ports := map[int]service.Key{}
	for i := range 60 {
		k := key(t, "ns/svc-"+strconv.Itoa(i))
		alloc := a
		if i%2 == 1 {
			alloc = b
		}
		p, err := alloc.Ensure(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if p < r.First || p > r.Last {
			t.Fatalf("%s got port %d, outside %s", k, p, r)
		}
		if other, ok := ports[p]; ok {
			t.Fatalf("port %d given to %s and %s", p, other, k)
		}
		ports[p] = k
		if again, _ := alloc.Ensure(ctx, k); again != p {
			t.Fatalf("%s: port %d, then %d", k, p, again)
		}
	}
	feed(t, c, a.Index)
	a.Forget()
	if len(a.written) != 0 {
		t.Errorf("after the index caught up, the allocator still remembers %d writes", len(a.written))
	}

	gone := key(t, "ns/svc-0")
	port, _ := a.Port(gone)
	if err := a.Release(ctx, gone); err != nil {
		t.Fatal(err)
	}
	feed(t, c, a.Index)
	if _, ok := a.Port(gone); ok {
		t.Fatal("a released key still has a port")
	}
	// Fill the range: the held port is the one left, and no one gets it.
	for i := 60; ; i++ {
		k := key(t, "ns/more-"+strconv.Itoa(i))
		p, err := a.Ensure(ctx, k)
		if err != nil {
			break
		}
		if p == port {
			t.Fatalf("the held port %d went to %s", p, k)
		}
		feed(t, c, a.Index)
		if i > 200 {
			t.Fatal("the range never filled")
		}
	}
	clk.SetTime(clk.Now().Add(Hold))
	p, err := a.Ensure(ctx, key(t, "ns/late"))
	if err != nil || p != port {
		t.Fatalf("after the hold: port %d, %v; want the released %d", p, err, port)
	}
	live, err := c.CoreV1().ConfigMaps(ns).Get(ctx, ConfigMapName(port), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := live.Data[strconv.Itoa(port)]; v != "ns/late" {
		t.Errorf("the table says %q for port %d, want ns/late", v, port)
	}
	if live.Labels[LabelTable] != "true" {
		t.Errorf("the table's ConfigMap is labelled %v", live.Labels)
	}
}

// TestAllocatorStartsWhereTheKeyHashes: two keys that hash apart take
// ports apart, and a key keeps its place whatever was allocated before
// it, so a table rebuilt in another order gives mostly the same ports.
func TestAllocatorStartsWhereTheKeyHashes(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakePassiveClock(time.Now())
	first := map[service.Key]int{}
	keys := []service.Key{key(t, "a/x"), key(t, "b/y"), key(t, "c/z")}
	a := newAllocator(fake.NewClientset(), clk, DefaultRange)
	for _, k := range keys {
		first[k], _ = a.Ensure(ctx, k)
	}
	b := newAllocator(fake.NewClientset(), clk, DefaultRange)
	for _, k := range slices.Backward(keys) {
		if p, _ := b.Ensure(ctx, k); p != first[k] {
			t.Errorf("%s: port %d in one order, %d in the other", k, first[k], p)
		}
	}
}
