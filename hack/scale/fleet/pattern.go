package main

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/swell-run/swell/hack/scale/pods"
)

// Load patterns: what each service's pods (and the activators, for the
// services they hold requests of) report over time. A pattern is a pure
// function of time since the fleet's epoch and of the service's step, so
// that a report is computed when it is asked for, from the clock: the
// fleet keeps no load state per pod.

// Kind is what a service's load does over time.
type Kind uint8

// The kinds, in the order of pods.Kinds.
const (
	// Busy: every pod holds Level requests, always.
	Busy Kind = iota
	// Bursting: for Burst at the start of every Period, every pod holds
	// Level requests that came through the activators, which hold the
	// service's whole load; nothing between bursts.
	Bursting
	// Idle: pods kept warm (min-scale), no load.
	Idle
	// Zero: no pods ready, no load; woken by a step, the activators hold
	// Level per pod.
	Zero
	numKinds
)

// String returns the kind's name in the address file.
func (k Kind) String() string {
	if k < numKinds {
		return pods.Kinds[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Mix is the share of services of each kind, indexed by Kind.
type Mix [numKinds]float64

// DefaultMix: most services busy, so that most pods are scraped, and a
// tenth each bursting and at zero, which the activators report.
var DefaultMix = Mix{Busy: 0.75, Bursting: 0.10, Idle: 0.05, Zero: 0.10}

// ParseMix reads "busy=0.75,bursting=0.1,idle=0.05,zero=0.1": a share in
// [0, 1] per kind, the kinds not named getting none, the shares adding up
// to 1. Every problem is reported.
func ParseMix(s string) (Mix, error) {
	var m Mix
	var errs []error
	seen := map[string]bool{}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, value, ok := strings.Cut(part, "=")
		k, known := kindNamed(name)
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("%q: want kind=share", part))
			continue
		case !known:
			errs = append(errs, fmt.Errorf("%q: unknown kind %q; accepted are %s", part, name, strings.Join(pods.Kinds, ", ")))
			continue
		case seen[name]:
			errs = append(errs, fmt.Errorf("%q: kind %s given twice", part, name))
			continue
		}
		seen[name] = true
		f, err := strconv.ParseFloat(value, 64)
		if err != nil || f < 0 || f > 1 {
			errs = append(errs, fmt.Errorf("%q: share %q: accepted is a number from 0 to 1", part, value))
			continue
		}
		m[k] = f
	}
	if len(errs) == 0 {
		if sum := m[Busy] + m[Bursting] + m[Idle] + m[Zero]; math.Abs(sum-1) > 1e-6 {
			errs = append(errs, fmt.Errorf("the shares add up to %g; they must add up to 1", sum))
		}
	}
	if len(errs) > 0 {
		return Mix{}, fmt.Errorf("mix %q: %w", s, errors.Join(errs...))
	}
	return m, nil
}

// String is the mix in ParseMix's form.
func (m Mix) String() string {
	parts := make([]string, 0, numKinds)
	for k := range numKinds {
		parts = append(parts, fmt.Sprintf("%s=%g", k, m[k]))
	}
	return strings.Join(parts, ",")
}

func kindNamed(name string) (Kind, bool) {
	for i, n := range pods.Kinds {
		if n == name {
			return Kind(i), true
		}
	}
	return 0, false
}

// counts splits n services by the mix: each kind gets its share rounded
// down, and the services left over go to the kinds with the largest
// remainders, so the counts add up to n.
func (m Mix) counts(n int) [numKinds]int {
	var c [numKinds]int
	var rem [numKinds]float64
	left := n
	for k := range numKinds {
		exact := m[k] * float64(n)
		c[k] = int(exact)
		rem[k] = exact - float64(c[k])
		left -= c[k]
	}
	for ; left > 0; left-- {
		best := Busy
		for k := range numKinds {
			if rem[k] > rem[best] {
				best = k
			}
		}
		c[best]++
		rem[best] = -1
	}
	return c
}

// Pattern is one service's load.
type Pattern struct {
	Kind Kind
	// Level is the requests each pod holds while the service has load.
	Level float64
	// Period, Burst and Phase place a bursting service's bursts: Burst
	// long, one every Period, one of them starting at Phase after the
	// epoch.
	Period, Burst, Phase time.Duration
}

// Step is a change of a service's load from At (since the epoch) on: its
// level times Factor. A zero service has load only from its step on.
type Step struct {
	At     time.Duration
	Factor float64
}

// Ranges of the patterns' parameters, as fractions of the target per pod
// and in seconds.
const (
	// A busy pod holds 82–98% of the target: for up to 5 pods,
	// ceil(pods × level / target) is the pods it has, so a busy service
	// stays where it is.
	busyMin, busyMax = 0.82, 0.98
	// A burst asks for 1.5–3 times the pods the service has: panic.
	burstMin, burstMax = 1.5, 3.0
	// Bursts of 5–15 s every 30–120 s.
	burstLenMin, burstLenMax       = 5, 15
	burstPeriodMin, burstPeriodMax = 30, 120
	// A woken zero service holds half a pod's target per pod.
	wakeLevel = 0.5
)

// Patterns deals n services their patterns: the mix's count of each kind,
// in an order and with parameters drawn from seed. targetPerPod is the
// services' target (concurrency per pod) that the levels are set against.
func Patterns(n int, mix Mix, targetPerPod float64, seed uint64) []Pattern {
	rng := rand.New(rand.NewPCG(seed, seed^0x5ca1ab1e))
	c := mix.counts(n)
	ps := make([]Pattern, 0, n)
	for k := range numKinds {
		for range c[k] {
			ps = append(ps, Pattern{Kind: k})
		}
	}
	rng.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
	uniform := func(lo, hi float64) float64 { return lo + (hi-lo)*rng.Float64() }
	for i := range ps {
		p := &ps[i]
		switch p.Kind {
		case Busy:
			p.Level = uniform(busyMin, busyMax) * targetPerPod
		case Bursting:
			p.Level = uniform(burstMin, burstMax) * targetPerPod
			p.Period = time.Duration(burstPeriodMin+rng.IntN(burstPeriodMax-burstPeriodMin+1)) * time.Second
			p.Burst = time.Duration(burstLenMin+rng.IntN(burstLenMax-burstLenMin+1)) * time.Second
			p.Phase = time.Duration(rng.Int64N(int64(p.Period)))
		case Zero:
			p.Level = wakeLevel * targetPerPod
		}
	}
	return ps
}

// Mean is the time-weighted average of the requests each pod holds over
// [from, to): what a queue-proxy reports for that period.
func (p *Pattern) Mean(from, to time.Duration, s Step) float64 {
	if to <= from || p.Level == 0 {
		return 0
	}
	area := 0.0
	if s.Factor == 0 || s.At >= to {
		area = p.area(from, to, false)
	} else {
		at := max(s.At, from)
		area = p.area(from, at, false) + s.Factor*p.area(at, to, true)
	}
	return area / float64(to-from)
}

// area is Level times how long over [from, to) the pattern has load;
// stepped says a step is in effect.
func (p *Pattern) area(from, to time.Duration, stepped bool) float64 {
	if to <= from {
		return 0
	}
	switch p.Kind {
	case Busy:
		return p.Level * float64(to-from)
	case Bursting:
		return p.Level * float64(p.onUntil(to)-p.onUntil(from))
	case Zero:
		if stepped {
			return p.Level * float64(to-from)
		}
	}
	return 0
}

// onUntil is how long a bursting pattern has been bursting from some
// fixed origin to t: its difference over an interval is the time in
// bursts within it.
func (p *Pattern) onUntil(t time.Duration) time.Duration {
	x := t - p.Phase
	k := x / p.Period
	r := x % p.Period
	if r < 0 { // floor division for times before Phase
		k--
		r += p.Period
	}
	return k*p.Burst + min(r, p.Burst)
}

// On says whether the pattern has load at t.
func (p *Pattern) On(t time.Duration, s Step) bool {
	switch p.Kind {
	case Busy:
		return true
	case Bursting:
		return p.onUntil(t+1) > p.onUntil(t)
	case Zero:
		return s.Factor != 0 && t >= s.At
	}
	return false
}

// Proxied says the pattern's load comes through the activators: they
// hold the whole of it, and the pods count it as proxied.
func (p *Pattern) Proxied() bool { return p.Kind == Bursting || p.Kind == Zero }

// LevelAt is the requests each pod holds at t.
func (p *Pattern) LevelAt(t time.Duration, s Step) float64 {
	if !p.On(t, s) {
		return 0
	}
	if s.Factor != 0 && t >= s.At {
		return p.Level * s.Factor
	}
	return p.Level
}
