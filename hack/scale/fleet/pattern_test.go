package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestParseMix(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Mix
		errs []string // each must be in the error; none: accepted
	}{
		{in: DefaultMix.String(), want: DefaultMix},
		{in: "busy=1", want: Mix{Busy: 1}},
		{in: " zero=0.5 , idle=0.5 ", want: Mix{Idle: 0.5, Zero: 0.5}},
		{in: "busy=0.5", errs: []string{"add up to 0.5"}},
		{in: "busy=0.5,sleepy=0.5", errs: []string{`unknown kind "sleepy"`, "busy, bursting, idle, zero"}},
		{in: "busy=x,zero=2,idle", errs: []string{`share "x"`, `share "2"`, `"idle": want kind=share`}},
		{in: "busy=0.5,busy=0.5", errs: []string{"busy given twice"}},
	} {
		got, err := ParseMix(tt.in)
		if len(tt.errs) == 0 {
			if err != nil || got != tt.want {
				t.Errorf("ParseMix(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
			continue
		}
		if err == nil {
			t.Errorf("ParseMix(%q) accepted", tt.in)
			continue
		}
		for _, want := range tt.errs {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("ParseMix(%q): %q lacks %q", tt.in, err, want)
			}
		}
	}
}

func TestMixCounts(t *testing.T) {
	for _, n := range []int{1, 7, 1000, 3001} {
		c := DefaultMix.counts(n)
		if sum := c[Busy] + c[Bursting] + c[Idle] + c[Zero]; sum != n {
			t.Errorf("%d services: counts %v add up to %d", n, c, sum)
		}
		for k := range numKinds {
			if d := math.Abs(float64(c[k]) - DefaultMix[k]*float64(n)); d >= 1 {
				t.Errorf("%d services: %s %d, want %.1f ± 1", n, k, c[k], DefaultMix[k]*float64(n))
			}
		}
	}
}

func TestPatternsFollowSeedAndMix(t *testing.T) {
	a := Patterns(1000, DefaultMix, 70, 1)
	b := Patterns(1000, DefaultMix, 70, 1)
	c := Patterns(1000, DefaultMix, 70, 2)
	same, differ := true, false
	var kinds [numKinds]int
	for i := range a {
		same = same && a[i] == b[i]
		differ = differ || a[i] != c[i]
		kinds[a[i].Kind]++
		p := a[i]
		switch p.Kind {
		case Busy:
			// Stays at its pods: ceil(5 × level / target) = 5.
			if got := math.Ceil(5 * p.Level / 70); got != 5 {
				t.Errorf("busy level %v asks for %v pods of 5", p.Level, got)
			}
		case Bursting:
			if p.Burst <= 0 || p.Burst >= p.Period || p.Phase < 0 || p.Phase >= p.Period || p.Level <= 70 {
				t.Errorf("bursting pattern %+v", p)
			}
		case Idle:
			if p.Level != 0 {
				t.Errorf("idle level %v", p.Level)
			}
		}
	}
	if !same || !differ {
		t.Errorf("same seed alike: %v; another seed differs: %v", same, differ)
	}
	if kinds != DefaultMix.counts(1000) {
		t.Errorf("kinds %v, want %v", kinds, DefaultMix.counts(1000))
	}
}

func TestMean(t *testing.T) {
	s := time.Second
	busy := Pattern{Kind: Busy, Level: 60}
	// Bursts of 2 s every 10 s, one starting at 3 s: [3, 5), [13, 15), [-7, -5)…
	burst := Pattern{Kind: Bursting, Level: 100, Period: 10 * s, Burst: 2 * s, Phase: 3 * s}
	zero := Pattern{Kind: Zero, Level: 35}
	idle := Pattern{Kind: Idle}
	for _, tt := range []struct {
		name     string
		p        Pattern
		from, to time.Duration
		step     Step
		want     float64
	}{
		{"busy", busy, 4 * s, 5 * s, Step{}, 60},
		{"busy, stepped before", busy, 4 * s, 5 * s, Step{At: 2 * s, Factor: 3}, 180},
		{"busy, stepped in the period's middle", busy, 4 * s, 5 * s, Step{At: 4500 * time.Millisecond, Factor: 3}, 120},
		{"busy, stepped after", busy, 4 * s, 5 * s, Step{At: 5 * s, Factor: 3}, 60},
		{"in a burst", burst, 3 * s, 4 * s, Step{}, 100},
		{"between bursts", burst, 6 * s, 7 * s, Step{}, 0},
		{"a burst begins in the middle", burst, 2500 * time.Millisecond, 3500 * time.Millisecond, Step{}, 50},
		{"a burst ends in the middle", burst, 4500 * time.Millisecond, 5500 * time.Millisecond, Step{}, 50},
		{"a whole period", burst, 0, 10 * s, Step{}, 20},
		{"before the phase", burst, -7 * s, -6 * s, Step{}, 100},
		{"long ago", burst, -1000 * s, -990 * s, Step{}, 20},
		{"a burst stepped", burst, 13 * s, 14 * s, Step{At: 0, Factor: 2}, 200},
		{"zero, asleep", zero, 4 * s, 5 * s, Step{}, 0},
		{"zero, woken in the middle", zero, 4 * s, 5 * s, Step{At: 4500 * time.Millisecond, Factor: 1}, 17.5},
		{"zero, woken before", zero, 4 * s, 5 * s, Step{At: 0, Factor: 2}, 70},
		{"idle", idle, 0, s, Step{At: 0, Factor: 3}, 0},
		{"empty period", busy, s, s, Step{}, 0},
	} {
		if got := tt.p.Mean(tt.from, tt.to, tt.step); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("%s: Mean = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestOnAndLevelAt(t *testing.T) {
	s := time.Second
	burst := Pattern{Kind: Bursting, Level: 100, Period: 10 * s, Burst: 2 * s, Phase: 3 * s}
	for _, tt := range []struct {
		at   time.Duration
		step Step
		want float64
	}{
		{3 * s, Step{}, 100},
		{5*s - 1, Step{}, 100},
		{5 * s, Step{}, 0},
		{-6 * s, Step{}, 100},
		{14 * s, Step{At: 14 * s, Factor: 3}, 300},
		{14 * s, Step{At: 15 * s, Factor: 3}, 100},
	} {
		if got := burst.LevelAt(tt.at, tt.step); got != tt.want {
			t.Errorf("LevelAt(%v, %+v) = %v, want %v", tt.at, tt.step, got, tt.want)
		}
		if on := burst.On(tt.at, tt.step); on != (tt.want > 0) {
			t.Errorf("On(%v) = %v", tt.at, on)
		}
	}
	zero := Pattern{Kind: Zero, Level: 35}
	if zero.On(s, Step{}) || !zero.On(s, Step{At: s, Factor: 1}) || zero.On(s, Step{At: 2 * s, Factor: 1}) {
		t.Error("a zero service has load exactly from its step on")
	}
}
