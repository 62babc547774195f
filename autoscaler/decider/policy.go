package decider

import (
	"math"
	"strconv"
	"time"

	"github.com/swell-run/swell/pkg/autoscaling"
)

// policy is one autoscaling algorithm. The Decider wraps every policy in
// the same guard rails; a policy only recommends.
type policy interface {
	// recommend returns the policy's desired pod count for in, after its
	// rate limits, appending a short reason to b.
	recommend(in *input, b []byte) (recommendation, []byte)
	// applied tells the policy the Scale the decider settled on, and the
	// one before it (hpa counts scale events; pid measures against it).
	applied(now time.Time, prev, scale int)
	// panicking says whether panic mode is on (kpa only).
	panicking() bool
	// setSpec takes a changed spec (same class), keeping the state that
	// still applies.
	setSpec(sp *autoscaling.Spec)
}

// observer is a policy that learns from every decision's input, before
// it recommends and also when the window has no data (adaptive).
type observer interface {
	observe(in *input)
}

// input is what a policy decides on.
type input struct {
	now           time.Time
	ready         int
	stable, panic float64
	// prevScale is the decider's previous Scale: the pods asked for.
	prevScale int
	spec      *autoscaling.Spec
	// lastTraffic is when the decider last saw traffic (this decision's
	// included); pending the requests at the activator.
	lastTraffic time.Time
	lastSeen    time.Time
	pending     int
	// hasArrivals says arrivals per second over the stable and panic
	// windows are known (Observation.HasArrivals).
	hasArrivals         bool
	arrStable, arrPanic float64
	// served and servedRequests are Observation.Served and ServedRequests.
	served, servedRequests float64
	// inPods is Observation.InPods.
	inPods float64
}

// recommendation is a policy's answer.
type recommendation struct {
	desired int
	inPanic bool
}

// policyClass maps a class to the policy that implements it; an empty
// class is the default, adaptive (autoscaling.DefaultDefaults), and an
// unknown one (which validation refuses) kpa.
func policyClass(c autoscaling.Class) autoscaling.Class {
	switch c {
	case autoscaling.ClassHPA, autoscaling.ClassExponential, autoscaling.ClassPID, autoscaling.ClassAdaptive, autoscaling.ClassHybrid:
		return c
	case "":
		return autoscaling.ClassAdaptive
	}
	return autoscaling.ClassKPA
}

// newPolicy returns the policy of sp's class for a service with scale pods
// at now; restart says an autoscaler restart found them running.
func newPolicy(sp *autoscaling.Spec, now time.Time, scale int, restart bool) policy {
	switch policyClass(sp.Class) {
	case autoscaling.ClassHPA:
		return newHPA(sp, now, scale, restart)
	case autoscaling.ClassExponential:
		return exponential{}
	case autoscaling.ClassPID:
		return &pid{}
	case autoscaling.ClassAdaptive:
		return newAdaptive(now, scale, restart)
	case autoscaling.ClassHybrid:
		a := newAdaptive(now, scale, restart)
		a.hybrid = true
		return a
	}
	return newKPA(now, scale, restart)
}

// limitRate clamps desired into the rate limits for ready pods, appending
// which limit applied. kpa applies the same limits inside; the other
// policies call this last.
func limitRate(sp *autoscaling.Spec, ready, desired int, b []byte) (int, []byte) {
	down, up := rateLimits(sp, ready)
	switch {
	case desired > up:
		b = append(b, "; max-scale-up-rate limits to "...)
		return up, appendPods(b, up)
	case desired < down:
		b = append(b, "; max-scale-down-rate limits to "...)
		return down, appendPods(b, down)
	}
	return desired, b
}

// appendNum appends v with at most two decimals, trailing zeros dropped.
func appendNum(b []byte, v float64) []byte {
	return strconv.AppendFloat(b, math.Round(v*100)/100, 'f', -1, 64)
}

func appendInt(b []byte, n int) []byte { return strconv.AppendInt(b, int64(n), 10) }

// appendPods appends "1 pod" or "n pods".
func appendPods(b []byte, n int) []byte {
	b = appendInt(b, n)
	if n == 1 {
		return append(b, " pod"...)
	}
	return append(b, " pods"...)
}

// appendSeconds appends d in seconds ("30s", "1.5s") without the
// allocation of Duration.String.
func appendSeconds(b []byte, d time.Duration) []byte {
	return append(appendNum(b, d.Seconds()), 's')
}
