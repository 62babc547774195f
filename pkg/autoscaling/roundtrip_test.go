package autoscaling

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

// checkAccepted holds what must be true of every Spec Parse accepts: it
// passes Validate, and its annotations parse back to it, under the
// defaults it came from and under any other defaults that agree on the
// cluster-only switches a Spec carries.
func checkAccepted(t *testing.T, s Spec, d Defaults, input any) {
	t.Helper()
	if err := s.Validate(); err != nil {
		t.Fatalf("%v: Parse accepted a Spec Validate refuses: %v\n%+v", input, err, s)
	}
	ann := s.Annotations()
	for _, dd := range []Defaults{d, func() Defaults {
		o := DefaultDefaults()
		o.EnableScaleToZero, o.AllowZeroInitialScale = s.ScaleToZeroEnabled, true
		return o
	}()} {
		back, err := Parse(ann, s.ContainerConcurrency, dd)
		if err != nil {
			t.Fatalf("%v: annotations %v do not parse back: %v", input, ann, err)
		}
		// The requests come from the workload, as containerConcurrency
		// does, not from the annotations.
		back.CPURequest, back.MemoryRequest = s.CPURequest, s.MemoryRequest
		if !reflect.DeepEqual(back, s) {
			t.Fatalf("%v: round trip changed the Spec\n got %+v\nwant %+v\nvia %v", input, back, s, ann)
		}
	}
}

// randomText returns text for key e: one of its test cases' values, or a
// random value of its kind, well or badly formed.
func randomText(r *rand.Rand, e *entry) string {
	for _, c := range keyCases {
		if c.key == e.Name && r.IntN(3) == 0 {
			if r.IntN(2) == 0 {
				return c.good[r.IntN(len(c.good))].text
			}
			return c.bad[r.IntN(len(c.bad))].text
		}
	}
	switch e.Type {
	case "duration":
		switch r.IntN(4) {
		case 0:
			return fmt.Sprintf("%ds", r.IntN(4000)-100)
		case 1:
			return fmt.Sprint(r.IntN(4000))
		case 2:
			return time.Duration(r.Int64N(int64(2 * time.Hour))).String()
		}
		return fmt.Sprintf("%.3f", r.Float64()*100)
	case "integer":
		return fmt.Sprint(r.IntN(30) - 2)
	case "percentage", "number", "fraction":
		v := r.Float64() * []float64{1, 2, 100, 1100}[r.IntN(4)]
		if r.IntN(5) == 0 {
			v = -v
		}
		return fmt.Sprintf("%.*f", r.IntN(8), v)
	case "boolean":
		return []string{"true", "false", "yes", "x"}[r.IntN(4)]
	case "policy list":
		return fmt.Sprintf("Pods=%d/%ds,Percent=%d/%ds", r.IntN(10), r.IntN(100), r.IntN(300), r.IntN(2000))
	}
	return strings.Split(e.Type, "|")[r.IntN(len(strings.Split(e.Type, "|")))]
}

// TestParseProperties feeds Parse random annotation sets, valid and not:
// it must never panic, and whatever it accepts must pass Validate and
// round-trip through Annotations.
func TestParseProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var service []*entry
	for _, e := range table {
		if e.Scope != ScopeCluster {
			service = append(service, e)
		}
	}
	accepted := 0
	for i := 0; i < 3000; i++ {
		d := DefaultDefaults()
		d.EnableScaleToZero = r.IntN(2) == 0
		d.AllowZeroInitialScale = r.IntN(2) == 0
		cc := []int{0, 0, 1, 10, 1000}[r.IntN(5)]
		ann := map[string]string{}
		for n := r.IntN(6); n > 0; n-- {
			e := service[r.IntN(len(service))]
			ann[Prefix+e.Name] = randomText(r, e)
		}
		s, err := Parse(ann, cc, d)
		if err != nil {
			continue
		}
		accepted++
		checkAccepted(t, s, d, ann)
	}
	// Enough of both kinds to mean something.
	if accepted < 500 || accepted > 2500 {
		t.Errorf("accepted %d of 3000 random inputs", accepted)
	}
}

// TestRoundTripEveryGoodValue round-trips each key's good test values.
func TestRoundTripEveryGoodValue(t *testing.T) {
	for _, c := range keyCases {
		if byName[c.key].Scope == ScopeCluster {
			continue
		}
		for _, g := range c.good {
			_, _, err := paths[0].run(c.key, g.text, g.with)
			if err != nil {
				t.Fatalf("%s=%q: %v", c.key, g.text, err)
			}
			d := DefaultDefaults()
			d.EnableScaleToZero, d.AllowZeroInitialScale = true, true
			ann := map[string]string{Prefix + c.key: g.text}
			for k, v := range g.with {
				if byName[k].Scope != ScopeCluster {
					ann[Prefix+k] = v
				}
			}
			for _, cc := range []int{0, 7} {
				s, err := Parse(ann, cc, d)
				if err != nil {
					t.Fatalf("%v: %v", ann, err)
				}
				checkAccepted(t, s, d, ann)
			}
		}
	}
}

// TestRoundTripAwkwardFloats: percentages whose fraction is not exact in
// binary still come back as the same Spec.
func TestRoundTripAwkwardFloats(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 2000; i++ {
		ann := map[string]string{
			Prefix + KeyTargetUtilizationPercentage: fmt.Sprintf("%.*f", r.IntN(16), 1+r.Float64()*99),
			Prefix + KeyPanicThresholdPercentage:    fmt.Sprintf("%.*f", r.IntN(16), 110+r.Float64()*890),
			Prefix + KeyPanicWindowPercentage:       fmt.Sprintf("%.*f", r.IntN(16), 1+r.Float64()*99),
			Prefix + KeyWindow:                      fmt.Sprint(6 + r.IntN(3595)),
		}
		s, err := Parse(ann, 0, DefaultDefaults())
		if err != nil {
			t.Fatalf("%v: %v", ann, err)
		}
		checkAccepted(t, s, DefaultDefaults(), ann)
	}
}

// FuzzParse: lines of key=value, a bare known key standing for its
// annotation. Parse must not panic; what it accepts must hold up.
func FuzzParse(f *testing.F) {
	for _, c := range keyCases {
		for _, g := range c.good {
			f.Add(c.key+"="+g.text, 0)
		}
		for _, b := range c.bad {
			f.Add(c.key+"="+b.text, 10)
		}
	}
	f.Add("min-scale=3\nmax-scale=2\nclass=hpa\nhpa-scale-up-policies=Pods=1/1s", 5)
	f.Add("autoscaling.swell.run/minScale=1\nfoo=bar", -1)
	f.Fuzz(func(t *testing.T, text string, cc int) {
		ann := map[string]string{}
		for _, line := range strings.Split(text, "\n") {
			k, v, _ := strings.Cut(line, "=")
			if _, ok := byName[k]; ok {
				k = Prefix + k
			}
			ann[k] = v
		}
		d := DefaultDefaults()
		d.AllowZeroInitialScale = true
		s, err := Parse(ann, cc, d)
		if err != nil {
			if _, ok := err.(interface{ Unwrap() []error }); !ok {
				t.Fatalf("error %v is not joined", err)
			}
			return
		}
		checkAccepted(t, s, d, ann)
	})
}

// FuzzParseDefaults: the same for the cluster defaults; what ParseDefaults
// accepts always gives a default Spec.
func FuzzParseDefaults(f *testing.F) {
	for _, c := range keyCases {
		f.Add(c.key + "=" + c.good[0].text)
		f.Add(c.key + "=" + c.bad[0].text)
	}
	f.Fuzz(func(t *testing.T, text string) {
		data := map[string]string{}
		for _, line := range strings.Split(text, "\n") {
			k, v, _ := strings.Cut(line, "=")
			data[k] = v
		}
		d, err := ParseDefaults(data)
		if err != nil {
			return
		}
		s, err := Parse(nil, 0, d)
		if err != nil {
			t.Fatalf("%v: defaults accepted, but a service without keys is refused: %v", data, err)
		}
		checkAccepted(t, s, d, data)
	})
}

// TestValidateNeverPanics on Specs full of nonsense.
func TestValidateNeverPanics(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 2000; i++ {
		s := DefaultSpec()
		v := reflect.ValueOf(&s).Elem()
		for n := r.IntN(4); n >= 0; n-- {
			fv := v.Field(r.IntN(v.NumField()))
			switch fv.Kind() {
			case reflect.Int, reflect.Int64:
				fv.SetInt(r.Int64N(1<<40) - 1<<39)
			case reflect.Float64:
				fv.SetFloat([]float64{-1, 0, 1e300, -1e300, r.NormFloat64() * 1000}[r.IntN(5)])
			case reflect.String:
				fv.SetString([]string{"", "x", "kpa"}[r.IntN(3)])
			case reflect.Bool:
				fv.SetBool(r.IntN(2) == 0)
			}
		}
		if err := s.Validate(); err == nil {
			// Whatever passes must also round-trip.
			d := DefaultDefaults()
			d.EnableScaleToZero, d.AllowZeroInitialScale = s.ScaleToZeroEnabled, true
			checkAccepted(t, s, d, "random spec")
		}
	}
}

// TestRoundTripHandSetFractions: 0.7000000000000001 is x/100 for no float
// x, so a percentage parsed with float division could never give it back;
// parsing divides exactly instead, and such a Spec round-trips too.
func TestRoundTripHandSetFractions(t *testing.T) {
	s := DefaultSpec()
	s.TargetUtilization = 0.7000000000000001
	s.PanicThreshold = 2.0000000000000004
	checkAccepted(t, s, DefaultDefaults(), "hand-set fractions")
	if got := s.Annotations()[Prefix+KeyTargetUtilizationPercentage]; got != "70.00000000000001" {
		t.Errorf("utilization written as %s", got)
	}
}

func TestFormatDuration(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{250 * time.Millisecond, "250ms"},
		{1500 * time.Millisecond, "1.5s"},
		{30 * time.Second, "30s"},
		{90 * time.Second, "1m30s"},
		{5 * time.Minute, "5m"},
		{time.Hour, "1h"},
		{90 * time.Minute, "1h30m"},
		{time.Hour + 30*time.Second, "1h0m30s"},
		{36 * time.Hour, "36h"},
		{-5 * time.Minute, "-5m"},
	} {
		got := FormatDuration(tc.d)
		if got != tc.want {
			t.Errorf("FormatDuration(%v) = %q, want %q", tc.d, got, tc.want)
		}
		if back, ok := parseDuration(got); !ok || back != tc.d {
			t.Errorf("parseDuration(%q) = %v, %v; want %v", got, back, ok, tc.d)
		}
	}
}
