package shard

import (
	"slices"
	"testing"

	"github.com/swell-run/swell/pkg/service"
)

// The hash is part of the protocol between activators and autoscalers of
// possibly different versions: these buckets (FNV-1a 32 of the key, worked
// out apart from Go's hash/fnv) must never change.
func TestOfIsStable(t *testing.T) {
	for _, c := range []struct {
		key  string
		n    int
		want int
	}{
		{"default/hello", 1, 0},  // 0x3f583541
		{"default/hello", 10, 9}, // 0x3f583541 % 10
		{"default/hello", 7, 5},
		{"default/api", 10, 5}, // 0x7409e551
		{"team-x/web", 10, 8},  // 0x192774bc
		{"team-x/web", 7, 6},
	} {
		if got := Of(c.key, c.n); got != c.want {
			t.Errorf("Of(%q, %d) = %d, want %d", c.key, c.n, got, c.want)
		}
	}
}

func TestOfKeyAgreesWithOf(t *testing.T) {
	for _, k := range []service.Key{{Namespace: "default", Name: "hello"}, {Namespace: "a", Name: "b"}, {Namespace: "team-x", Name: "api-7"}} {
		for _, n := range []int{1, 2, 3, 10, 64} {
			if a, b := OfKey(k, n), Of(k.String(), n); a != b {
				t.Errorf("OfKey(%v, %d) = %d, Of = %d", k, n, a, b)
			}
		}
	}
}

func TestOfSpreadsServices(t *testing.T) {
	const n, services = 10, 10000
	counts := make([]int, n)
	for i := range services {
		counts[Of(service.Key{Namespace: "ns-" + string(rune('a'+i%7)), Name: "svc-" + itoa(i)}.String(), n)]++
	}
	for b, c := range counts {
		// Within 10% of the even share.
		if c < services/n*9/10 || c > services/n*11/10 {
			t.Errorf("bucket %d has %d of %d services; want about %d", b, c, services, services/n)
		}
	}
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

func TestCheck(t *testing.T) {
	for _, n := range []int{1, 10, MaxBuckets} {
		if err := Check(n); err != nil {
			t.Errorf("Check(%d) = %v", n, err)
		}
	}
	for _, n := range []int{-1, 0, MaxBuckets + 1} {
		if err := Check(n); err == nil {
			t.Errorf("Check(%d) = nil, want an error", n)
		}
	}
}

func TestOwned(t *testing.T) {
	o, err := NewOwned(4)
	if err != nil {
		t.Fatal(err)
	}
	k := service.Key{Namespace: "default", Name: "hello"}
	if o.Owns(k) || o.Len() != 0 {
		t.Fatal("a new set owns something")
	}
	b := OfKey(k, 4)
	if !o.Add(b) || o.Add(b) {
		t.Error("Add should report a change once")
	}
	if !o.Owns(k) || !o.Has(b) || o.Len() != 1 || !slices.Equal(o.List(), []int{b}) {
		t.Errorf("after Add(%d): Owns %v, List %v", b, o.Owns(k), o.List())
	}
	if o.Add(4) || o.Add(-1) || o.Has(9) {
		t.Error("buckets out of range must be refused")
	}
	if !o.Remove(b) || o.Remove(b) || o.Owns(k) {
		t.Error("Remove should report a change once and drop the bucket")
	}
	if _, err := NewOwned(0); err == nil {
		t.Error("NewOwned(0) should fail")
	}
}
