package main

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
)

// What the soak runs and sends, decided before anything starts: the
// services of the swell.yaml, and every burst of traffic. Both are pure, so
// a seed names a run and the tests check the plan's promises (bounded
// rate, gaps long enough to reach zero, a second half that replays the
// first).

// Settings every service of the soak shares.
const (
	// window is the stable window, the shortest accepted, and
	// graceToZero the scale-to-zero grace period: a service left alone
	// reaches zero some 20 s after its last request (the window empties,
	// the grace passes, the replica drains).
	window      = 6 * time.Second
	graceToZero = 10 * time.Second
	// target is the concurrency (or requests a second, for rps services)
	// one replica is meant to carry; 70% of it is aimed at. Low, so that
	// modest bursts need several replicas.
	target   = 2
	maxScale = 5
	// queueCC is the containerConcurrency of every third service, so that
	// the queue-proxy's breaker queues too.
	queueCC = 4
)

// service is one service of the soak.
type service struct {
	name string
	// pinned services keep exactly one replica (min-scale = max-scale =
	// 1): its queue-proxy lives the whole soak and shows what one
	// process keeps after handling all that service's traffic.
	pinned               bool
	containerConcurrency int
	metric               string // "concurrency" or "rps"
}

// makeServices returns n services, the first pinned of them pinned.
func makeServices(n, pinned int) []service {
	svcs := make([]service, n)
	width := len(strconv.Itoa(n))
	for i := range svcs {
		s := service{name: fmt.Sprintf("s%0*d", width, i+1), pinned: i < pinned, metric: "concurrency"}
		if i%3 == 2 {
			s.containerConcurrency = queueCC
		}
		if i%5 == 4 {
			s.metric = "rps"
		}
		svcs[i] = s
	}
	return svcs
}

// writeConfig writes the swell.yaml of svcs, each running `bin hello`.
func writeConfig(w io.Writer, svcs []service, bin string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# The soak's services (hack/soak): every one but the pinned starts at zero\n")
	fmt.Fprintf(&b, "# and may go back to zero once idle for %s.\n", graceToZero)
	fmt.Fprintf(&b, "defaults:\n  scale-to-zero-grace-period: %s\n  allow-zero-initial-scale: true\n", graceToZero)
	fmt.Fprintf(&b, "services:\n")
	for _, s := range svcs {
		fmt.Fprintf(&b, "  - name: %s\n    command: [%s, hello]\n", s.name, strconv.Quote(bin))
		if s.containerConcurrency > 0 {
			fmt.Fprintf(&b, "    containerConcurrency: %d\n", s.containerConcurrency)
		}
		initial, lo, hi := 0, 0, maxScale
		if s.pinned {
			initial, lo, hi = 1, 1, 1
		}
		fmt.Fprintf(&b, "    annotations:\n")
		for _, kv := range [][2]string{
			{"initial-scale", strconv.Itoa(initial)},
			{"min-scale", strconv.Itoa(lo)},
			{"max-scale", strconv.Itoa(hi)},
			{"window", window.String()},
			{"metric", s.metric},
			{"target", strconv.Itoa(target)},
		} {
			fmt.Fprintf(&b, "      autoscaling.swell.run/%s: %q\n", kv[0], kv[1])
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// burst is a stretch of open-loop traffic to one service.
type burst struct {
	service      int           // index of the service
	start, until time.Duration // since the soak began
	rate         float64       // requests a second
	sleep        time.Duration // the app's work per request (?sleep=)
	size         int           // response body bytes (?size=); 0 the greeting
}

// query is the burst's knobs for the demo app, "" for none.
func (b burst) query() string {
	var q []string
	if b.sleep > 0 {
		q = append(q, "sleep="+strconv.FormatInt(b.sleep.Milliseconds(), 10)+"ms")
	}
	if b.size > 0 {
		q = append(q, "size="+strconv.Itoa(b.size))
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + strings.Join(q, "&")
}

// Shape of the traffic plan.
const (
	// Each half of the run is cut into rounds of about roundLen. A round
	// ends with quietLen without any traffic: every service but the
	// pinned reaches zero (in some 30 s), idle connections close (30 s
	// after their last use), the Go runtime's periodic GC (every 2
	// minutes at the latest) runs at rest, and the sample at the round's
	// end sees the processes at rest, which the verdict compares
	// (report.go).
	roundLen = 5 * time.Minute
	quietLen = 150 * time.Second
	// roundOffset: no burst starts in a round's first seconds, which
	// belong to the sample at the end of the one before.
	roundOffset = 10 * time.Second
	// A gap between bursts is short (not reaching zero: the service
	// scales down and back up) with shortGapChance, else long enough to
	// reach zero.
	shortGapMin, shortGapMax = 8 * time.Second, 15 * time.Second
	zeroGapMin, zeroGapMax   = 35 * time.Second, 90 * time.Second
	shortGapChance           = 0.25
	burstMin, burstMax       = 10 * time.Second, 60 * time.Second
	// A burst's rate is between rateMin and rateMax, and low enough that
	// about maxInFlight requests are in flight at once.
	rateMin, rateMax = 2, 20
	maxInFlight      = 6
	// firstOffsetMax staggers the services' first bursts in a round.
	firstOffsetMax = 60 * time.Second
	// minBurst is the shortest burst worth sending; one cut shorter to
	// fit is dropped.
	minBurst = 3 * time.Second
)

// rounds returns the length of the rounds of a run of length total and
// the quiet time ending each: whole rounds fill each half. A short run (a
// smoke test) has one round a half, at most its second half quiet.
func rounds(total time.Duration) (length, quiet time.Duration) {
	half := total / 2
	n := max(1, int((half+roundLen/2)/roundLen))
	length = half / time.Duration(n)
	return length, min(quietLen, length/2)
}

// The demo app's knobs a burst picks from: work per request, from none to
// longer than a replica's drain quiet period, and response sizes.
var (
	sleeps = []time.Duration{0, 5 * time.Millisecond, 20 * time.Millisecond, 100 * time.Millisecond,
		300 * time.Millisecond, time.Second, 2 * time.Second}
	sizes = []int{0, 0, 1 << 10, 64 << 10}
)

// makePlan returns the bursts of a soak of total length for svcs, ordered
// by start. The first half is drawn from seed; the second half sends the
// first half's bursts again, shifted by half the run, so both halves carry
// the same load and a difference between them is what the processes kept.
// Every round (see rounds) ends quiet. At no moment do the bursts add up
// to more than maxRate requests a second.
func makePlan(svcs []service, total time.Duration, seed uint64, maxRate float64) []burst {
	half := total / 2
	round, quiet := rounds(total)
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	between := func(lo, hi time.Duration) time.Duration {
		return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
	}
	var plan []burst
	for r := time.Duration(0); r+round <= half; r += round {
		active := round - quiet // traffic ends here
		offset := min(roundOffset, active/8)
		for i := range svcs {
			// Short runs (a smoke test) still get a burst per service.
			t := offset + between(0, min(firstOffsetMax, active/4))
			for t < active {
				length := min(between(burstMin, burstMax), active-t)
				sleep := sleeps[rng.IntN(len(sleeps))]
				rate := float64(rateMin) + rng.Float64()*(rateMax-rateMin)
				if sleep > 0 {
					rate = min(rate, maxInFlight/sleep.Seconds())
				}
				rate = math.Round(min(rate, maxRate-peakRate(plan, r+t, r+t+length))*10) / 10
				if length >= minBurst && rate >= 1 {
					plan = append(plan, burst{service: i, start: r + t, until: r + t + length, rate: rate,
						sleep: sleep, size: sizes[rng.IntN(len(sizes))]})
				}
				gap := between(zeroGapMin, zeroGapMax)
				if rng.Float64() < shortGapChance {
					gap = between(shortGapMin, shortGapMax)
				}
				t += length + gap
			}
		}
	}
	for _, b := range plan[:len(plan):len(plan)] {
		b.start, b.until = b.start+half, b.until+half
		plan = append(plan, b)
	}
	slices.SortStableFunc(plan, func(a, b burst) int { return cmp.Compare(a.start, b.start) })
	return plan
}

// peakRate is the highest total rate of the bursts of plan during [from,
// to). The total changes only where a burst starts, so those instants and
// from itself are the ones to check.
func peakRate(plan []burst, from, to time.Duration) float64 {
	at := func(t time.Duration) float64 {
		sum := 0.0
		for _, b := range plan {
			if b.start <= t && t < b.until {
				sum += b.rate
			}
		}
		return sum
	}
	peak := at(from)
	for _, b := range plan {
		if from < b.start && b.start < to {
			peak = max(peak, at(b.start))
		}
	}
	return peak
}

// planStats summarises a plan for the report.
type planStats struct {
	bursts   int
	requests float64 // planned
	peak     float64 // highest total rate
	mean     float64 // planned requests over the whole run, per second
}

func statsOf(plan []burst, total time.Duration) planStats {
	s := planStats{bursts: len(plan)}
	for _, b := range plan {
		s.requests += b.rate * (b.until - b.start).Seconds()
		s.peak = max(s.peak, peakRate(plan, b.start, b.start+1))
	}
	if total > 0 {
		s.mean = s.requests / total.Seconds()
	}
	return s
}
