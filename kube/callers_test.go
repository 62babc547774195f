package kube

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/swell-run/swell/pkg/autoscaling"
)

// FuzzParseAllowedCallers: no value makes ParseAllowedCallers panic. A
// value it accepts is "*" alone or namespace names, sorted, each once,
// which FormatAllowedCallers writes back to the same reading; one it
// refuses gets an error naming the annotation and the value, and admits
// nobody more.
func FuzzParseAllowedCallers(f *testing.F) {
	for _, s := range []string{"", "*", " * ", "ingress-nginx", "a,b", "b, a ,b", "*,a", "a,,b", ",", "A", "a b",
		"-a", strings.Repeat("a", 64), "x\x00", "é", "a,*"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		c, err := ParseAllowedCallers(v)
		if err != nil {
			checkAnnotationError(t, err, AnnotationAllowedCallers, v)
			if c.Any || len(c.Namespaces) > 0 {
				t.Fatalf("%q refused, yet admits %+v", v, c)
			}
			return
		}
		if c.Any && len(c.Namespaces) > 0 {
			t.Fatalf("%q: * with namespaces %v", v, c.Namespaces)
		}
		if !slices.IsSorted(c.Namespaces) || len(slices.Compact(slices.Clone(c.Namespaces))) != len(c.Namespaces) {
			t.Fatalf("%q: namespaces %v not sorted and unique", v, c.Namespaces)
		}
		for _, ns := range c.Namespaces {
			if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
				t.Fatalf("%q: accepted %q, not a namespace: %v", v, ns, errs)
			}
		}
		again, err := ParseAllowedCallers(c.String())
		if err != nil || !reflect.DeepEqual(again, c) {
			t.Fatalf("%q read as %+v, written as %q, read again as %+v, %v", v, c, c.String(), again, err)
		}
	})
}

// checkAnnotationError checks that err is an *autoscaling.Error naming the
// annotation key and the value v.
func checkAnnotationError(t *testing.T, err error, key, v string) {
	t.Helper()
	var ae *autoscaling.Error
	if !errors.As(err, &ae) || ae.Key != key || ae.Value != v || !strings.Contains(err.Error(), key) {
		t.Fatalf("%q: error %v does not name %s and the value", v, err, key)
	}
}
