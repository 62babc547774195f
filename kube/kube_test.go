package kube

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestNamesAreDNSLabels(t *testing.T) {
	long := strings.Repeat("a", 60) + "-" + strings.Repeat("b", 60)
	for _, name := range []string{"hello", strings.Repeat("x", 52), strings.Repeat("x", 53), long, "my.app", "1app", "a--"} {
		for _, got := range []string{PodsServiceName(name), RouteSliceName(name)} {
			if errs := validation.IsDNS1035Label(got); len(errs) > 0 {
				t.Errorf("name for %q = %q: %v", name, got, errs)
			}
		}
	}
	if got := PodsServiceName("hello"); got != "hello-swell-pods" {
		t.Errorf("PodsServiceName(hello) = %q, want hello-swell-pods", got)
	}
	a, b := PodsServiceName(long+"1"), PodsServiceName(long+"2")
	if a == b {
		t.Errorf("two long names share %q", a)
	}
}

func TestHostNames(t *testing.T) {
	got := strings.Join(HostNames("hello", "default", "cluster.local"), " ")
	if want := "hello.default hello.default.svc hello.default.svc.cluster.local"; got != want {
		t.Errorf("HostNames = %q, want %q", got, want)
	}
}
