package activator

import (
	"net/http"
	"testing"
)

// TestColdStartStage: a request for a service with no routable pod pokes
// it, by its key's text form, and is marked cold; one for a service with a
// pod does neither. Both go on.
func TestColdStartStage(t *testing.T) {
	for _, tc := range []struct {
		name     string
		pods     int
		hook     bool // Config.Poke is set
		wantPoke bool
	}{
		{"no pod", 0, true, true},
		{"a pod", 1, true, false},
		{"no pod, nobody to poke", 0, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStageEnv(t, 1, tc.pods, nil)
			var pokes []string
			reached := false
			h := &coldStart{next: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached = true })}
			if tc.hook {
				h.poke = func(key string) { pokes = append(pokes, key) }
			}
			_, e := s.serve(t, h)
			if e.cold != (tc.pods == 0) {
				t.Errorf("cold %v with %d pods", e.cold, tc.pods)
			}
			if poked := len(pokes) == 1 && pokes[0] == helloKey.String(); poked != tc.wantPoke || len(pokes) > 1 {
				t.Errorf("pokes %q, want one for %s: %v", pokes, helloKey, tc.wantPoke)
			}
			if !reached {
				t.Error("the request did not go on")
			}
		})
	}
}
