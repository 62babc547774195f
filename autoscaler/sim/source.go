package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/swell-run/swell/pkg/trace"
)

// Request is one simulated request: when it arrives, from the start of the
// simulation, and how long it takes a pod to serve it at full speed.
type Request struct {
	Arrival time.Duration
	Work    time.Duration
}

// Source yields the requests of a simulation in arrival order. A Source is
// read once; a comparison of several policies makes one per run.
type Source interface {
	// Next returns the next request, or false after the last one.
	Next() (Request, bool)
}

// Requests returns a Source over reqs, which must be in arrival order.
func Requests(reqs []Request) Source { return &sliceSource{reqs: reqs} }

type sliceSource struct {
	reqs []Request
	i    int
}

func (s *sliceSource) Next() (Request, bool) {
	if s.i >= len(s.reqs) {
		return Request{}, false
	}
	s.i++
	return s.reqs[s.i-1], true
}

// Trace returns a Source over a trace's records: each record's arrival and
// service time (which the trace's Model computed for a token trace).
func Trace(recs []trace.Record) Source { return &traceSource{recs: recs} }

type traceSource struct {
	recs []trace.Record
	i    int
}

func (s *traceSource) Next() (Request, bool) {
	if s.i >= len(s.recs) {
		return Request{}, false
	}
	r := s.recs[s.i]
	s.i++
	return Request{Arrival: r.Arrival, Work: r.ServiceTime}, true
}

// Shape is the form of a generated traffic profile.
type Shape string

// The profile shapes.
const (
	// ShapeConstant is Rate throughout.
	ShapeConstant Shape = "constant"
	// ShapeStep is Rate until StepAt, then StepRate.
	ShapeStep Shape = "step"
	// ShapeOnOff alternates On at Rate with Off of silence, starting on:
	// the idle gaps let a service scale to zero.
	ShapeOnOff Shape = "onoff"
	// ShapeSpike is Rate, with SpikeRate from SpikeAt for SpikeFor: a
	// flash sale.
	ShapeSpike Shape = "spike"
	// ShapeDiurnal rises from silence to Rate and back over each Period,
	// as (1 − cos)/2: a day's traffic, night included.
	ShapeDiurnal Shape = "diurnal"
	// ShapeBursts is bursts after silences, both heavy-tailed: a burst
	// of BurstSize requests on average (Pareto, shape 1.5: most bursts
	// small, a few many times the mean) arriving at Rate, then a silence
	// of Off on average (Pareto, shape 1.5: most short, a few very long).
	// The traffic of a service called by people in fits and starts (code
	// completion, chat, a batch kicked off by hand), where scaling to
	// zero pays and every burst starts cold.
	ShapeBursts Shape = "bursts"
)

// Shapes lists the profile shapes, for help texts and errors.
var Shapes = []Shape{ShapeConstant, ShapeStep, ShapeOnOff, ShapeSpike, ShapeDiurnal, ShapeBursts}

// Distributions of the onoff shape's silences (OffDist).
const (
	// OffFixed makes every silence Off long.
	OffFixed = "fixed"
	// OffExponential draws each silence with mean Off.
	OffExponential = "exponential"
	// OffPareto draws each silence from a Pareto distribution of shape
	// 1.5 with mean Off: most silences short, a few very long (a
	// heavy tail, as the idle times of real functions have).
	OffPareto = "pareto"
)

// paretoShape is OffPareto's shape: heavy-tailed (infinite variance) with
// a finite mean.
const paretoShape = 1.5

// diurnalSteps is how many stretches of constant rate a diurnal period is
// cut into.
const diurnalSteps = 240

// Arrival processes.
const (
	// ArrivalsPoisson spaces arrivals by exponential gaps: independent
	// users.
	ArrivalsPoisson = "poisson"
	// ArrivalsUniform spaces arrivals evenly, 1/rate apart: a
	// deterministic load whose results can be worked out by hand.
	ArrivalsUniform = "uniform"
)

// Service-time distributions.
const (
	// ServiceFixed gives every request the same work.
	ServiceFixed = "fixed"
	// ServiceExponential draws each request's work from an exponential
	// distribution with the given mean.
	ServiceExponential = "exponential"
	// ServiceLognormal draws each request's work from a lognormal
	// distribution with the given mean and σ = lognormalSigma: the median
	// under half the mean, the 99th percentile about 8 times it. Generated
	// text (an LLM's answer, its length in tokens) and many request
	// latencies are spread so.
	ServiceLognormal = "lognormal"
)

// lognormalSigma is ServiceLognormal's σ (of the work's logarithm).
const lognormalSigma = 1.2

// Profile describes generated traffic: a piecewise-constant arrival rate
// over Duration, arrivals drawn from a seeded generator, and a service-time
// distribution. The same Profile and Seed always give the same requests.
type Profile struct {
	Shape Shape
	// Rate is the arrival rate in requests per second: throughout
	// (constant), before the step (step), while on (onoff), outside the
	// spike (spike).
	Rate float64
	// Duration is how long arrivals are generated.
	Duration time.Duration

	// StepRate is the rate from StepAt on (step).
	StepRate float64
	StepAt   time.Duration

	// On and Off are the lengths of the busy and silent phases (onoff);
	// OffDist draws the silences: OffFixed (the default when empty),
	// OffExponential or OffPareto, with mean Off.
	On, Off time.Duration
	OffDist string

	// Period is the length of a diurnal cycle (diurnal).
	Period time.Duration

	// BurstSize is the mean number of requests a burst holds (bursts);
	// Off is then the mean silence between two bursts.
	BurstSize float64

	// SpikeRate is the rate from SpikeAt for SpikeFor (spike).
	SpikeRate         float64
	SpikeAt, SpikeFor time.Duration

	// Arrivals is ArrivalsPoisson (the default when empty) or
	// ArrivalsUniform.
	Arrivals string
	// ServiceTime is each request's work (fixed), or its mean
	// (exponential).
	ServiceTime time.Duration
	// ServiceDist is ServiceFixed (the default when empty) or
	// ServiceExponential.
	ServiceDist string

	Seed uint64
}

// maxRate bounds a profile's rates: far above what one service sees, low
// enough that a run stays in memory and seconds.
const maxRate = 1e6

// Validate reports the first setting that is out of range or does not
// apply to the shape, by its flag name.
func (p Profile) Validate() error {
	rate := func(name string, v float64, allowZero bool) error {
		if math.IsNaN(v) || v < 0 || v > maxRate || (!allowZero && v == 0) {
			lo := "above 0"
			if allowZero {
				lo = "0 or more"
			}
			return fmt.Errorf("--%s %g: accepted is a number of requests per second %s and at most %g, such as 20 or 0.5", name, v, lo, float64(maxRate))
		}
		return nil
	}
	positive := func(name string, d time.Duration) error {
		if d <= 0 {
			return fmt.Errorf("--%s %s: accepted is a positive duration, such as 30s or 5m", name, d)
		}
		return nil
	}
	within := func(name string, d time.Duration) error {
		if d < 0 || d >= p.Duration {
			return fmt.Errorf("--%s %s: accepted is a time from 0 to before --duration %s", name, d, p.Duration)
		}
		return nil
	}
	var errs []error
	switch p.Shape {
	case ShapeConstant:
		errs = append(errs, rate("rate", p.Rate, false))
	case ShapeStep:
		errs = append(errs, rate("rate", p.Rate, true), rate("step-rate", p.StepRate, true))
		if p.Rate == 0 && p.StepRate == 0 {
			errs = append(errs, fmt.Errorf("--rate 0 and --step-rate 0 send nothing: give either a positive rate"))
		}
	case ShapeOnOff:
		errs = append(errs, rate("rate", p.Rate, false), positive("on", p.On), positive("off", p.Off))
	case ShapeSpike:
		errs = append(errs, rate("rate", p.Rate, true), rate("spike-rate", p.SpikeRate, false), positive("spike-for", p.SpikeFor))
	case ShapeDiurnal:
		errs = append(errs, rate("rate", p.Rate, false), positive("period", p.Period))
	case ShapeBursts:
		errs = append(errs, rate("rate", p.Rate, false), positive("off", p.Off))
		if !(p.BurstSize >= 1) || p.BurstSize > maxRate {
			errs = append(errs, fmt.Errorf("--burst-size %g: accepted is a mean number of requests of 1 or more, such as 100", p.BurstSize))
		}
	default:
		return fmt.Errorf("--profile %q: accepted are %s", p.Shape, shapeList())
	}
	errs = append(errs, positive("duration", p.Duration))
	if p.Duration > 0 {
		switch p.Shape {
		case ShapeStep:
			errs = append(errs, within("step-at", p.StepAt))
		case ShapeSpike:
			errs = append(errs, within("spike-at", p.SpikeAt))
		}
	}
	switch p.OffDist {
	case "", OffFixed, OffExponential, OffPareto:
	default:
		errs = append(errs, fmt.Errorf("--off-dist %q: accepted are %s, %s and %s", p.OffDist, OffFixed, OffExponential, OffPareto))
	}
	switch p.Arrivals {
	case "", ArrivalsPoisson, ArrivalsUniform:
	default:
		errs = append(errs, fmt.Errorf("--arrivals %q: accepted are %s and %s", p.Arrivals, ArrivalsPoisson, ArrivalsUniform))
	}
	switch p.ServiceDist {
	case "", ServiceFixed, ServiceExponential, ServiceLognormal:
	default:
		errs = append(errs, fmt.Errorf("--service-dist %q: accepted are %s, %s and %s", p.ServiceDist, ServiceFixed, ServiceExponential, ServiceLognormal))
	}
	if p.ServiceTime < 0 {
		errs = append(errs, fmt.Errorf("--service-time %s: accepted is a duration of 0 or more, such as 100ms", p.ServiceTime))
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func shapeList() string {
	s := make([]string, len(Shapes))
	for i, sh := range Shapes {
		s[i] = string(sh)
	}
	return strings.Join(s, ", ")
}

// segment is a stretch of constant arrival rate.
type segment struct {
	start, end time.Duration
	rate       float64
}

// segments cuts the profile into stretches of constant rate covering
// [0, Duration).
func (p Profile) segments() []segment {
	d := p.Duration
	var segs []segment
	add := func(start, end time.Duration, rate float64) {
		end = min(end, d)
		if start < end {
			segs = append(segs, segment{start, end, rate})
		}
	}
	switch p.Shape {
	case ShapeStep:
		add(0, p.StepAt, p.Rate)
		add(p.StepAt, d, p.StepRate)
	case ShapeOnOff:
		// The silences have a generator of their own, so that the
		// arrivals' stay the same whatever the silences' distribution.
		rng := rand.New(rand.NewPCG(p.Seed, 0x5eed_0ff))
		for t := time.Duration(0); t < d; {
			off := p.Off
			switch p.OffDist {
			case OffExponential:
				off = time.Duration(float64(p.Off) * rng.ExpFloat64())
			case OffPareto:
				off = time.Duration(pareto(rng, float64(p.Off)))
			}
			off = min(off, d) // a draw from the tail: nothing after it anyway
			add(t, t+p.On, p.Rate)
			add(t+p.On, t+p.On+off, 0)
			t += p.On + off
		}
	case ShapeBursts:
		// Sizes and silences from a generator of their own, as onoff's.
		rng := rand.New(rand.NewPCG(p.Seed, 0x5eed_b00))
		for t := time.Duration(0); t < d; {
			// A burst of n requests at Rate lasts n/Rate: it holds n on
			// average, whatever the arrival process.
			n := max(pareto(rng, p.BurstSize), 1)
			on := time.Duration(n / p.Rate * float64(time.Second))
			off := min(time.Duration(pareto(rng, float64(p.Off))), d)
			add(t, t+on, p.Rate)
			add(t+on, t+on+off, 0)
			t += on + off
		}
	case ShapeDiurnal:
		step := max(p.Period/diurnalSteps, time.Second)
		for t := time.Duration(0); t < d; t += step {
			// The rate at the stretch's middle.
			phase := 2 * math.Pi * (float64(t) + float64(step)/2) / float64(p.Period)
			add(t, t+step, p.Rate*(1-math.Cos(phase))/2)
		}
	case ShapeSpike:
		add(0, p.SpikeAt, p.Rate)
		add(p.SpikeAt, p.SpikeAt+p.SpikeFor, p.SpikeRate)
		add(p.SpikeAt+p.SpikeFor, d, p.Rate)
	default:
		add(0, d, p.Rate)
	}
	return segs
}

// Source returns the profile's requests. Call Validate first.
func (p Profile) Source() Source {
	// Two streams from one seed: arrival gaps and service times drawn
	// apart, so a change of service-time distribution keeps the arrivals.
	return &profileSource{
		p:       p,
		segs:    p.segments(),
		arrival: rand.New(rand.NewPCG(p.Seed, 0x5eed_a771)),
		work:    rand.New(rand.NewPCG(p.Seed, 0x5eed_3011)),
		t:       -1,
	}
}

type profileSource struct {
	p             Profile
	segs          []segment
	seg           int
	arrival, work *rand.Rand
	// t is the last arrival in seconds (-1 before the first), k the
	// number of arrivals so far in the current segment (uniform).
	t float64
	k int
}

func (s *profileSource) Next() (Request, bool) {
	for s.seg < len(s.segs) {
		sg := s.segs[s.seg]
		start, end := sg.start.Seconds(), sg.end.Seconds()
		if s.t < start {
			s.t, s.k = start, 0
			if s.p.Arrivals != ArrivalsUniform && sg.rate > 0 {
				// A Poisson process is memoryless, so restarting it at
				// each segment's start with the segment's rate is exact.
				s.t += s.arrival.ExpFloat64() / sg.rate
			}
		} else if sg.rate > 0 {
			if s.p.Arrivals == ArrivalsUniform {
				// Computed from the segment start, not summed, so that
				// rounding does not drift over a long segment.
				s.k++
				s.t = start + float64(s.k)/sg.rate
			} else {
				s.t += s.arrival.ExpFloat64() / sg.rate
			}
		}
		if sg.rate == 0 || s.t >= end {
			s.seg++
			// The next segment starts at end; nudge t below it so the
			// branch above restarts the process there.
			s.t = math.Nextafter(end, math.Inf(-1))
			continue
		}
		return Request{Arrival: time.Duration(math.Round(s.t * 1e9)), Work: s.draw()}, true
	}
	return Request{}, false
}

func (s *profileSource) draw() time.Duration {
	switch s.p.ServiceDist {
	case ServiceExponential:
		return time.Duration(math.Round(float64(s.p.ServiceTime) * s.work.ExpFloat64()))
	case ServiceLognormal:
		// exp(μ + σZ) has mean exp(μ + σ²/2): μ puts the mean at
		// ServiceTime.
		mu := -lognormalSigma * lognormalSigma / 2
		return time.Duration(math.Round(float64(s.p.ServiceTime) * math.Exp(mu+lognormalSigma*s.work.NormFloat64())))
	}
	return s.p.ServiceTime
}

// pareto draws from a Pareto distribution of shape paretoShape with the
// given mean, by inverse transform: xm / U^(1/α), xm = mean (α−1)/α.
func pareto(rng *rand.Rand, mean float64) float64 {
	xm := mean * (paretoShape - 1) / paretoShape
	return xm / math.Pow(1-rng.Float64(), 1/paretoShape)
}
