package netpol

import "testing"

// checkVerdict fails t unless v is consistent with itself: allowed when no
// policy selects the pod; refused only by named policies; admitted to an
// isolated pod only by a named rule.
func checkVerdict(t testing.TB, v Verdict) {
	t.Helper()
	switch {
	case !v.Isolated:
		if !v.Allowed || v.By != (Rule{}) || v.Selecting != nil || v.Notes != nil {
			t.Fatalf("not isolated, yet %#v", v)
		}
	case v.Allowed:
		if v.By.Policy == "" || v.By.Ingress < 0 || v.By.From < -1 || v.By.Port < -1 || v.Selecting != nil || v.Notes != nil {
			t.Fatalf("allowed on an isolated pod, yet %#v", v)
		}
	default:
		if len(v.Selecting) == 0 || v.By != (Rule{}) {
			t.Fatalf("refused, yet %#v", v)
		}
	}
	if v.String() == "" {
		t.Fatalf("%#v says nothing", v)
	}
}
