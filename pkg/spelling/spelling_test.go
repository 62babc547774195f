package spelling

import "testing"

func TestSuggest(t *testing.T) {
	keys := []string{"min-scale", "max-scale", "window", "target", "target-utilization-percentage",
		"scale-down-delay", "scale-to-zero-grace-period", "hpa-tolerance-up", "containerConcurrency"}
	for _, tc := range []struct {
		s          string
		candidates []string
		want       string
	}{
		// 1. Another way of writing a candidate.
		{"min-scale", keys, "min-scale"},
		{"minScale", keys, "min-scale"},
		{"MIN_SCALE", keys, "min-scale"},
		{"min.scale", keys, "min-scale"},
		{"containerconcurrency", keys, "containerConcurrency"},
		{"container-concurrency", keys, "containerConcurrency"},
		{"Swell.run/", []string{"swell.run/"}, "swell.run/"},
		// 2. The one candidate s starts, from four letters on.
		{"target-util", keys, "target-utilization-percentage"},
		{"targ", keys, ""},              // target and target-utilization-percentage
		{"scale", keys, ""},             // two candidates start with it
		{"tar", []string{"target"}, ""}, // too short to stand for more
		// 3. Few enough edits: 1 up to 7 letters, 2 from 8, 3 from 12.
		{"kap", []string{"kpa", "hpa", "pid"}, "kpa"}, // a swap is one edit
		{"kpaa", []string{"kpa", "hpa", "pid"}, "kpa"},
		{"mx", []string{"Max", "Min", "Disabled"}, "Max"}, // the candidate as written
		{"rsp", []string{"concurrency", "rps"}, "rps"},
		{"cpu", []string{"concurrency", "rps"}, ""}, // two edits from rps
		{"cpu", []string{"kpa", "hpa", "pid"}, ""},  // two from kpa and hpa
		{"min-scal", keys, "min-scale"},
		{"mni-scale", keys, "min-scale"},
		{"servics", []string{"defaults", "services"}, "services"},
		{"tick-intervall", []string{"tick-interval"}, "tick-interval"},
		{"hpa-tolerence-up", keys, "hpa-tolerance-up"},
		{"windw", keys, "window"},
		{"wndw", keys, ""},                                          // 4 letters: one edit, and window is two away
		{"tick-intrvl", []string{"tick-interval"}, "tick-interval"}, // 10 letters: two edits
		{"tick-intvl", []string{"tick-interval"}, ""},               // 9 letters: three is too many
		{"scale-dwn-dlay", keys, "scale-down-delay"},                // 12 letters: three edits
		{"swel.run/", []string{"swell.run/"}, "swell.run/"},
		{"autoscaling.swel.run/", []string{"autoscaling.swell.run/"}, "autoscaling.swell.run/"},
		{"autoscaling.knative.dev/", []string{"autoscaling.swell.run/"}, ""},
		// Nothing close, nothing written.
		{"zzzzzz", keys, ""},
		{"", keys, ""},
		{"-", keys, ""},
		{"x", nil, ""},
		// Ties go to the first candidate.
		{"hxa", []string{"hpa", "hba"}, "hpa"},
	} {
		if got := Suggest(tc.s, tc.candidates); got != tc.want {
			t.Errorf("Suggest(%q, %q) = %q, want %q", tc.s, tc.candidates, got, tc.want)
		}
	}
}

func TestMaxEdits(t *testing.T) {
	for n, want := range []int{1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3} {
		if got := maxEdits(n); got != want {
			t.Errorf("maxEdits(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"", "abc", 3},
		{"abc", "", 3},
		{"kpa", "kpa", 0},
		{"kap", "kpa", 1}, // a swap of neighbours is one edit
		{"min-scal", "min-scale", 1},
		{"minscale", "min-scale", 1},
		{"containerconcurency", "containerConcurrency", 2},
		{"kitten", "sitting", 3},
		{"ça", "ca", 1}, // runes, not bytes
	} {
		if got := distance(tc.a, tc.b); got != tc.want {
			t.Errorf("distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := distance(tc.b, tc.a); got != tc.want {
			t.Errorf("distance(%q, %q) = %d, want %d (symmetric)", tc.b, tc.a, got, tc.want)
		}
	}
}
