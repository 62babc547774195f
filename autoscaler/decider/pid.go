package decider

import (
	"math"
	"time"

	"github.com/swell-run/swell/pkg/autoscaling"
)

// pid is a discrete PID controller, in pods.
//
// The measurement is the demand y = stable / target per pod (pods' worth of
// load). The output is
//
//	D = Kp·y + I + Kd·ẏf
//
// with the proportional and derivative terms on the measurement, not on
// the error, so that a change of the reference or of the pod count kicks
// nothing. ẏf is the derivative of y read through a first-order low-pass
// filter with time constant DerivativeFilter, so that 1-second noise does
// not reach the output; Kd·ẏf is Kd seconds of the current trend.
//
// The integral acts on the utilization error expressed in pods,
//
//	e = ref − C,  ref = ceil(y + Kd·ẏf),  C = max(ready, previous Scale)
//	I += min(Ki·dt, 1) · e
//
// and carries the operating point: at rest e = 0 and I is what Kp·y and
// the trend do not cover.
//
//   - C counts the pods already asked for, not only the ready ones: a Smith
//     predictor. Pods take seconds to start; feedback on ready pods alone
//     would keep integrating while they start and then overshoot. In pods
//     the loop has unit gain, so the gains mean the same for a service of
//     2 pods or of 2000.
//   - ref is a whole number of pods, which puts a one-pod dead band around
//     the answer: with a continuous error a fractional demand (4.3) would
//     make the integral hunt between 4 and 5 pods forever. At rest (e = 0)
//     the integral is re-centred so that D sits mid-band, and a drifting
//     measurement or a decaying derivative cannot tip the count by one and
//     back.
//   - ref includes the trend, so that on a steady ramp the integral does
//     not cancel the derivative's lead.
//   - Each step of the integral closes at most the whole remaining error
//     (Ki·dt is capped at 1), so without a trend a step load is approached
//     from one side, never overshot.
//
// Kp = 1, Ki = 0, Kd = 0 is Knative's stable decision. The defaults (Kp
// 0.5, Ki 0.1/s, Kd 0.1s, filter 5s) answer half of a load step at once and
// close the rest at a fifth of the remaining error per 2 s tick: smoother
// than kpa, slower to reach the last pods.
//
// Anti-windup: the output bounds are the rate limits, min-scale and
// max-scale; the integral does not integrate while the output is pinned to
// a bound in the direction of the error, and it is clamped so the output
// stays within the bounds. dt is the time since the previous decision,
// capped at 10 s so that a long pause cannot dump a large step into the
// integral. The first decision starts bumpless at max(C, y): a restarted
// autoscaler keeps the pods it finds, a new service gets its demand.
type pid struct {
	primed bool
	last   time.Time
	i      float64 // integral term, in pods
	yf     float64 // filtered measurement, in pods
	dyf    float64 // derivative of yf, pods per second
}

// maxPIDStep caps dt.
const maxPIDStep = 10 * time.Second

func (p *pid) recommend(in *input, b []byte) (recommendation, []byte) {
	sp := in.spec
	g := sp.PID
	target := sp.TargetPerPod()
	y := in.stable / target
	need := ceilPods(in.stable, target)
	c := max(in.ready, in.prevScale)

	down, up := rateLimits(sp, in.ready)
	lo, hi := float64(max(down, sp.MinScale)), float64(up)
	if sp.MaxScale > 0 {
		hi = min(hi, float64(sp.MaxScale))
	}
	lo = min(lo, hi)

	dt := 0.0
	if p.primed {
		dt = min(in.now.Sub(p.last), maxPIDStep).Seconds()
	}
	p.last = in.now
	if !p.primed {
		p.primed = true
		p.yf, p.dyf = y, 0
		p.i = max(float64(c), y) - g.Kp*y
	} else if dt > 0 {
		a := 1.0
		if tau := g.DerivativeFilter.Seconds(); tau > 0 {
			a = dt / (tau + dt)
		}
		prev := p.yf
		p.yf += a * (y - p.yf)
		p.dyf = (p.yf - prev) / dt
	}

	// The reference is the demand Kd seconds ahead on the current trend: so
	// the integral does not cancel the derivative's lead on a ramp.
	pTerm, dTerm := g.Kp*y, g.Kd*p.dyf
	ref := podsAtLeast(math.Ceil(y + dTerm))
	e := float64(ref - c)
	if dt > 0 && e != 0 {
		out := pTerm + p.i + dTerm
		pinned := (out >= hi && e > 0) || (out <= lo && e < 0)
		if !pinned {
			p.i += min(g.Ki*dt, 1) * e
		}
	}
	if e == 0 {
		// At rest: put the output in the middle of the dead band, so that a
		// drifting measurement or a decaying derivative cannot tip the count
		// by one and back.
		p.i = float64(c) - 0.5 - pTerm - dTerm
	}
	p.i = min(max(p.i, lo-pTerm-dTerm), hi-pTerm-dTerm)
	out := pTerm + p.i + dTerm
	// A hair below an integer is that integer: the integral approaches its
	// resting value from below.
	desired := podsAtLeast(math.Ceil(out - 1e-9))
	desired = min(max(desired, int(lo)), int(hi))

	b = append(b, "pid: demand "...)
	b = appendPods(b, need)
	b = append(b, " at target "...)
	b = appendNum(b, target)
	return recommendation{desired: desired}, b
}

func (p *pid) applied(time.Time, int, int) {}

func (p *pid) panicking() bool { return false }

func (p *pid) setSpec(*autoscaling.Spec) {}
