package routing

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/swell-run/swell/kube"
)

// TestSavedSelectorRefusesBadLabels: the swell.run/selector annotation is
// anyone's who may edit the Service; a selector that is no valid label set
// is refused with the key and value, not given back to fail for ever.
func TestSavedSelectorRefusesBadLabels(t *testing.T) {
	for _, raw := range []string{`{"app":"a b"}`, `{"-bad":"x"}`, `{"app":"` + strings.Repeat("x", 64) + `"}`} {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{kube.AnnotationSelector: raw}}}
		if sel, err := savedSelector(svc); err == nil || !strings.Contains(err.Error(), kube.AnnotationSelector) {
			t.Errorf("%s: %v, %v; want an error naming the annotation", raw, sel, err)
		}
	}
}

// FuzzSavedSelector: whatever the annotation holds, reading it never
// panics, and what it accepts is a non-empty set of valid labels.
func FuzzSavedSelector(f *testing.F) {
	f.Add(`{"app":"hello"}`)
	f.Add(`{"app":"hello","tier":"web"}`)
	f.Add(`{}`)
	f.Add(`{"app":"a b"}`)
	f.Add(`[1,2]`)
	f.Add(`{"example.com/app":"x"}`)
	f.Fuzz(func(t *testing.T, raw string) {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{kube.AnnotationSelector: raw}}}
		sel, err := savedSelector(svc)
		if err != nil {
			if !strings.Contains(err.Error(), kube.AnnotationSelector) {
				t.Fatalf("error %v does not name the annotation", err)
			}
			return
		}
		if len(sel) == 0 {
			t.Fatal("an empty selector accepted")
		}
		for k, v := range sel {
			if len(validation.IsQualifiedName(k)) > 0 || len(validation.IsValidLabelValue(v)) > 0 {
				t.Fatalf("accepted label %q=%q", k, v)
			}
		}
	})
}
