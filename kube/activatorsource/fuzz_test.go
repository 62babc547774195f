package activatorsource

import (
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/swell-run/swell/activator"
	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/pkg/autoscaling"
)

// FuzzPodsServiceAnnotations: no annotations of a pods-Service make
// toService panic. Every problem it reports names one of the annotations
// it reads and that annotation's value; what it returns is always usable:
// a container concurrency ≥ 0, the hosts of exactly the names that are
// Services', and callers admitted only when the annotation parsed.
func FuzzPodsServiceAnnotations(f *testing.F) {
	f.Add("front", "10", "", true)
	f.Add("cart, ,front,", "0", "ingress-nginx,monitoring", true)
	f.Add("Front,x_y", "-1", "*,a", true)
	f.Add("", "abc", "*", true)
	f.Add("a,a", " 7 ", " ", false)
	f.Add(strings.Repeat("a,", 100), "99999999999999999999", "a,,b", true)
	f.Fuzz(func(t *testing.T, services, cc, callers string, withCallers bool) {
		ann := []string{kube.AnnotationServices, services, kube.AnnotationContainerConcurrency, cc}
		if withCallers {
			ann = append(ann, kube.AnnotationAllowedCallers, callers)
		}
		sv, err := toService(webKey, podsService("shop", "web", ann...), nil, newPodDirectory(), "cluster.local")
		values := map[string]string{kube.AnnotationServices: services, kube.AnnotationContainerConcurrency: cc}
		if withCallers {
			values[kube.AnnotationAllowedCallers] = callers
		}
		reported := map[string]bool{}
		if err != nil {
			var joined interface{ Unwrap() []error }
			errs := []error{err}
			if errors.As(err, &joined) {
				errs = joined.Unwrap()
			}
			for _, e := range errs {
				var ae *autoscaling.Error
				if !errors.As(e, &ae) {
					t.Fatalf("%T %v: not an *autoscaling.Error", e, e)
				}
				v, ok := values[ae.Key]
				if !ok {
					t.Fatalf("%v: names %q, not an annotation toService reads", e, ae.Key)
				}
				checkAnnotationError(t, e, ae.Key, v)
				reported[ae.Key] = true
			}
		}
		if sv.ContainerConcurrency < 0 {
			t.Fatalf("container concurrency %d", sv.ContainerConcurrency)
		}
		var hosts []string
		for name := range strings.SplitSeq(services, ",") {
			if name = strings.TrimSpace(name); name != "" && len(validation.IsDNS1035Label(name)) == 0 {
				hosts = append(hosts, kube.HostNames(name, "shop", "cluster.local")...)
			}
		}
		if !slices.Equal(sv.Hosts, hosts) {
			t.Fatalf("services %q: hosts %v, want %v", services, sv.Hosts, hosts)
		}
		want := activator.Callers{}
		if withCallers && !reported[kube.AnnotationAllowedCallers] {
			c, _ := kube.ParseAllowedCallers(callers)
			want = activator.Callers{Any: c.Any, Namespaces: c.Namespaces}
		}
		if !reflect.DeepEqual(sv.Callers, want) {
			t.Fatalf("callers %q (given %v): %+v, want %+v", callers, withCallers, sv.Callers, want)
		}
	})
}

// checkAnnotationError fails unless err names key and value.
func checkAnnotationError(t *testing.T, err error, key, value string) {
	t.Helper()
	var ae *autoscaling.Error
	if !errors.As(err, &ae) || ae.Key != key || ae.Value != value {
		t.Fatalf("%q: error %v, want an *autoscaling.Error for %s", value, err, key)
	}
	if msg := err.Error(); !strings.Contains(msg, key) || !strings.Contains(msg, strconv.Quote(value)) {
		t.Fatalf("%q: %q does not name %s and the quoted value", value, msg, key)
	}
}
