package main

import (
	"cmp"
	"encoding/csv"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The figures of a sample, the flatness criterion, and the report: a CSV of
// the samples and a Markdown summary.

// unit is how a column's values are written.
type unit int

const (
	unitCount unit = iota
	unitBytes
)

// column is one figure of a sample row.
type column struct {
	key   string // the CSV header
	label string // in the summary
	unit  unit
	// judged columns make the verdict: those of processes that live the
	// whole run. The others follow the traffic (how many replicas run)
	// and are shown for what they tell.
	judged bool
	value  func(*snapshot) float64
}

// columns are a sample's figures, in CSV order.
var columns = []column{
	{"local_rss_bytes", "swell local: resident memory", unitBytes, true, func(s *snapshot) float64 { return stat(s, isKind(kindLocal), rssOf, aggMean) }},
	{"local_heap_goal_bytes", "swell local: GC heap goal", unitBytes, true, func(s *snapshot) float64 { return stat(s, isKind(kindLocal), heapGoalOf, aggMean) }},
	{"local_heap_bytes", "swell local: Go heap in use", unitBytes, false, func(s *snapshot) float64 { return stat(s, isKind(kindLocal), heapOf, aggMean) }},
	{"local_goroutines", "swell local: goroutines", unitCount, true, func(s *snapshot) float64 { return stat(s, isKind(kindLocal), goroutinesOf, aggMean) }},
	{"local_fds", "swell local: open files", unitCount, true, func(s *snapshot) float64 { return stat(s, isKind(kindLocal), fdsOf, aggMean) }},
	{"local_threads", "swell local: OS threads", unitCount, false, func(s *snapshot) float64 { return stat(s, isKind(kindLocal), threadsOf, aggMean) }},

	{"qp_long_count", "long-lived queue-proxies: running", unitCount, false, func(s *snapshot) float64 { return stat(s, isLongLived, one, aggCount) }},
	{"qp_long_rss_bytes", "long-lived queue-proxy: resident memory (mean)", unitBytes, true, func(s *snapshot) float64 { return stat(s, isLongLived, rssOf, aggMean) }},
	{"qp_long_heap_goal_bytes", "long-lived queue-proxy: GC heap goal (mean)", unitBytes, true, func(s *snapshot) float64 { return stat(s, isLongLived, heapGoalOf, aggMean) }},
	{"qp_long_heap_bytes", "long-lived queue-proxy: Go heap in use (mean)", unitBytes, false, func(s *snapshot) float64 { return stat(s, isLongLived, heapOf, aggMean) }},
	{"qp_long_goroutines", "long-lived queue-proxy: goroutines (mean)", unitCount, true, func(s *snapshot) float64 { return stat(s, isLongLived, goroutinesOf, aggMean) }},
	{"qp_long_fds", "long-lived queue-proxy: open files (mean)", unitCount, true, func(s *snapshot) float64 { return stat(s, isLongLived, fdsOf, aggMean) }},

	{"qp_count", "queue-proxies: running", unitCount, false, func(s *snapshot) float64 { return stat(s, isKind(kindQueue), one, aggCount) }},
	{"qp_rss_bytes_sum", "queue-proxies: resident memory, sum", unitBytes, false, func(s *snapshot) float64 { return stat(s, isKind(kindQueue), rssOf, aggSum) }},
	{"qp_rss_bytes_max", "queue-proxies: resident memory, max", unitBytes, false, func(s *snapshot) float64 { return stat(s, isKind(kindQueue), rssOf, aggMax) }},
	{"qp_heap_bytes_max", "queue-proxies: Go heap in use, max", unitBytes, false, func(s *snapshot) float64 { return stat(s, isKind(kindQueue), heapOf, aggMax) }},
	{"qp_goroutines_sum", "queue-proxies: goroutines, sum", unitCount, false, func(s *snapshot) float64 { return stat(s, isKind(kindQueue), goroutinesOf, aggSum) }},
	{"qp_goroutines_max", "queue-proxies: goroutines, max", unitCount, false, func(s *snapshot) float64 { return stat(s, isKind(kindQueue), goroutinesOf, aggMax) }},
	{"qp_fds_sum", "queue-proxies: open files, sum", unitCount, false, func(s *snapshot) float64 { return stat(s, isKind(kindQueue), fdsOf, aggSum) }},
	{"qp_fds_max", "queue-proxies: open files, max", unitCount, false, func(s *snapshot) float64 { return stat(s, isKind(kindQueue), fdsOf, aggMax) }},

	{"app_count", "apps (swell hello): running", unitCount, false, func(s *snapshot) float64 { return stat(s, isKind(kindApp), one, aggCount) }},
	{"app_rss_bytes_sum", "apps: resident memory, sum", unitBytes, false, func(s *snapshot) float64 { return stat(s, isKind(kindApp), rssOf, aggSum) }},
	{"app_fds_max", "apps: open files, max", unitCount, false, func(s *snapshot) float64 { return stat(s, isKind(kindApp), fdsOf, aggMax) }},

	{"qp_started", "queue-proxies started so far", unitCount, false, func(s *snapshot) float64 { return float64(s.churn.started[kindQueue]) }},
	{"qp_stopped", "queue-proxies stopped so far", unitCount, false, func(s *snapshot) float64 { return float64(s.churn.stopped[kindQueue]) }},
	{"app_started", "apps started so far", unitCount, false, func(s *snapshot) float64 { return float64(s.churn.started[kindApp]) }},
	{"app_stopped", "apps stopped so far", unitCount, false, func(s *snapshot) float64 { return float64(s.churn.stopped[kindApp]) }},
	{"requests_sent", "requests sent (finished bursts)", unitCount, false, func(s *snapshot) float64 { return float64(s.totals.sent) }},
	{"requests_ok", "requests answered 2xx", unitCount, false, func(s *snapshot) float64 { return float64(s.totals.ok) }},
	{"requests_failed", "requests not answered 2xx", unitCount, false, func(s *snapshot) float64 { return float64(s.totals.failed) }},
}

// col returns the index of the column named key; it panics on a name not
// in columns, a mistake in the program.
func col(key string) int {
	i := slices.IndexFunc(columns, func(c column) bool { return c.key == key })
	if i < 0 {
		panic("soak: no column " + key)
	}
	return i
}

// The flatness criterion: a figure is flat when the median of its samples
// at rest in the second half of the run is at most the first half's
// median plus a tolerance, the larger of flatRelative of that median and
// the unit's floor. At rest (at the end of each round of the plan, every
// service back at zero but the pinned), because under traffic a figure
// follows the load of the moment: swell local holds some 20 goroutines
// and a dozen files per running replica, and a minute's sample catches 30
// to 60 of them. The memory judged besides the resident set is the GC's
// heap goal, which the last GC set from the live heap it found; the heap
// in use also counts the garbage made since, however much the last burst
// left. Halves rather than start and end, because the first minutes warm
// up (the heap grows to its working size); medians, so that one odd
// sample decides nothing. Both halves carry the same traffic (makePlan),
// so a figure that keeps growing fails and one that levelled off passes.
const (
	flatRelative   = 0.10
	flatFloorBytes = 2 << 20
	flatFloorCount = 5
)

// judgement is one figure's verdict.
type judgement struct {
	first, second float64 // medians of the halves
	allowed       float64 // the tolerance
	slope         float64 // least-squares growth per hour over the second half
	flat          bool
	// known is false when a half holds fewer than minPerHalf samples.
	known bool
}

// minPerHalf is the fewest samples a half needs for a verdict.
const minPerHalf = 2

// judge applies the flatness criterion to the values of one column over
// the run of length total: samples up to total/2 make the first half,
// later ones the second. Samples at 0 (before any traffic) belong to
// neither; NaN values are skipped.
func judge(at []time.Duration, v []float64, total time.Duration, u unit) judgement {
	var first, second []float64
	var st, sv []float64
	for i, t := range at {
		if math.IsNaN(v[i]) || t <= 0 {
			continue
		}
		if t <= total/2 {
			first = append(first, v[i])
			continue
		}
		second = append(second, v[i])
		st, sv = append(st, t.Hours()), append(sv, v[i])
	}
	j := judgement{first: median(first), second: median(second), slope: slope(st, sv)}
	if len(first) < minPerHalf || len(second) < minPerHalf {
		return j
	}
	floor := float64(flatFloorCount)
	if u == unitBytes {
		floor = flatFloorBytes
	}
	j.known = true
	j.allowed = math.Max(flatRelative*math.Abs(j.first), floor)
	j.flat = j.second-j.first <= j.allowed
	return j
}

// median of xs; NaN when empty. xs is not modified.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// slope is the least-squares slope of y over x; NaN with fewer than two
// distinct x.
func slope(x, y []float64) float64 {
	n := float64(len(x))
	if len(x) < 2 {
		return math.NaN()
	}
	var sx, sy, sxx, sxy float64
	for i := range x {
		sx, sy = sx+x[i], sy+y[i]
		sxx, sxy = sxx+x[i]*x[i], sxy+x[i]*y[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return math.NaN()
	}
	return (n*sxy - sx*sy) / d
}

// format writes v in u: MiB with one decimal for bytes, an integer or one
// decimal for counts; "—" for NaN.
func format(v float64, u unit) string {
	switch {
	case math.IsNaN(v):
		return "—"
	case u == unitBytes:
		return strconv.FormatFloat(v/(1<<20), 'f', 1, 64) + " MiB"
	case v == math.Trunc(v):
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// signed is format with a sign.
func signed(v float64, u unit) string {
	if v == 0 {
		v = 0 // not -0
	}
	s := format(v, u)
	if !math.IsNaN(v) && v >= 0 {
		s = "+" + s
	}
	return s
}

// writeCSV writes the rows, one per sample: the time since the traffic
// began in seconds, the sample's label, 1 if it was at rest, and every
// column (empty where there is no value; bytes as bytes).
func writeCSV(w io.Writer, rows []row) error {
	cw := csv.NewWriter(w)
	header := []string{"seconds", "label", "at_rest"}
	for _, c := range columns {
		header = append(header, c.key)
	}
	if err := cw.Write(header); err != nil {
		return err
	}
	for _, r := range rows {
		rest := "0"
		if r.rest {
			rest = "1"
		}
		rec := []string{strconv.FormatFloat(r.at.Seconds(), 'f', 0, 64), r.label, rest}
		for _, v := range r.v {
			if math.IsNaN(v) {
				rec = append(rec, "")
			} else {
				rec = append(rec, strconv.FormatFloat(v, 'f', -1, 64))
			}
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// result is everything the summary reports.
type result struct {
	duration, interval time.Duration
	round, quiet       time.Duration // the plan's rounds (see rounds)
	services, pinned   int
	plan               planStats
	rows               []row // the samples, the first at the start
	totals             totals
	churn              churn
	events             eventCounts
	// exit is how `swell local` stopped; leftovers are processes of the
	// soak's binary still running after it did.
	exit      string
	leftovers []string
	// notes are anything else worth reading: failed scans, an interrupt.
	notes []string
}

// figure is one column's judgements: over every sample, and over those at
// rest (the verdict's).
type figure struct{ all, rest judgement }

// verdicts judges every column; flat is true when every judged one is
// flat at rest.
func (r *result) verdicts() (figs []figure, flat bool) {
	var at, restAt []time.Duration
	for _, row := range r.rows {
		at = append(at, row.at)
		if row.rest {
			restAt = append(restAt, row.at)
		}
	}
	flat = true
	for i, c := range columns {
		var v, restV []float64
		for _, row := range r.rows {
			v = append(v, row.v[i])
			if row.rest {
				restV = append(restV, row.v[i])
			}
		}
		f := figure{all: judge(at, v, r.duration, c.unit), rest: judge(restAt, restV, r.duration, c.unit)}
		figs = append(figs, f)
		if c.judged && !(f.rest.known && f.rest.flat) {
			flat = false
		}
	}
	return figs, flat
}

// writeSummary writes the Markdown summary of a run.
func writeSummary(w io.Writer, r *result) error {
	var b strings.Builder
	figs, flat := r.verdicts()
	verdict := "**flat**: no judged figure grew at rest from the first half of the run to the second beyond the tolerance"
	if !flat {
		var grew []string
		for i, c := range columns {
			if j := figs[i].rest; c.judged && !(j.known && j.flat) {
				why := ""
				if !j.known {
					why = " (too few samples at rest)"
				}
				grew = append(grew, c.label+why)
			}
		}
		verdict = "**not flat**: " + strings.Join(grew, "; ")
	}
	fmt.Fprintf(&b, "Verdict: %s.\n\n", verdict)

	fmt.Fprintf(&b, "| figure | start | end | max | all samples: median, 1st → 2nd half | at rest: median, 1st half | 2nd half | change | slope/h | flat? |\n")
	fmt.Fprintf(&b, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for i, c := range columns {
		if strings.HasPrefix(c.key, "requests_") || strings.HasSuffix(c.key, "_started") || strings.HasSuffix(c.key, "_stopped") {
			continue // cumulative: the totals below say it
		}
		start, end, top := math.NaN(), math.NaN(), math.NaN()
		for _, row := range r.rows {
			v := row.v[i]
			switch row.label {
			case "start":
				start = v
			case "end":
				end = v
			}
			if !math.IsNaN(v) && (math.IsNaN(top) || v > top) {
				top = v
			}
		}
		all, rest := figs[i].all, figs[i].rest
		ok := "—"
		if c.judged {
			switch {
			case !rest.known:
				ok = "too few samples"
			case rest.flat:
				ok = "yes"
			default:
				ok = fmt.Sprintf("**no** (allowed +%s)", format(rest.allowed, c.unit))
			}
		}
		label := c.label
		if c.judged {
			label = "**" + label + "**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s → %s | %s | %s | %s | %s | %s |\n", label,
			format(start, c.unit), format(end, c.unit), format(top, c.unit),
			format(all.first, c.unit), format(all.second, c.unit),
			format(rest.first, c.unit), format(rest.second, c.unit), signed(rest.second-rest.first, c.unit),
			signed(roundTo(rest.slope, c.unit), c.unit), ok)
	}
	nRest := 0
	for _, row := range r.rows {
		if row.rest && row.at > 0 {
			nRest++
		}
	}
	fmt.Fprintf(&b, "\nJudged figures are in bold. %d samples, one every %s and one at the end of each %s round "+
		"(its last %s without traffic); %d of those after the start were at rest, every service back at zero but the pinned. "+
		"Start is sampled once `swell local` is up with the pinned services' replicas ready, before any traffic.\n",
		len(r.rows), r.interval, r.round, r.quiet, nRest)

	if len(r.rows) > 1 {
		first, last := r.rows[0], r.rows[len(r.rows)-1]
		if first.rest && last.rest {
			fmt.Fprintf(&b, "\nAt rest before the traffic and after it, the same processes running:\n\n| figure | before | after | change |\n|---|---:|---:|---:|\n")
			for _, key := range []string{"local_rss_bytes", "local_heap_goal_bytes", "local_heap_bytes", "local_goroutines", "local_fds",
				"qp_long_rss_bytes", "qp_long_heap_goal_bytes", "qp_long_goroutines", "qp_long_fds", "qp_count", "app_count"} {
				i := col(key)
				c := columns[i]
				fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", c.label, format(first.v[i], c.unit), format(last.v[i], c.unit),
					signed(last.v[i]-first.v[i], c.unit))
			}
		}
	}

	t := r.totals
	fmt.Fprintf(&b, "\nTraffic: %d bursts (`swell load` runs) to %d services, %.0f requests planned "+
		"(%.1f/s on average, %.0f/s at the busiest moment).\n\n", r.plan.bursts, r.services, r.plan.requests, r.plan.mean, r.plan.peak)
	fmt.Fprintf(&b, "| requests | count |\n|---|---:|\n")
	fmt.Fprintf(&b, "| sent | %d |\n| answered | %d |\n| answered 2xx | %d |\n| answered, not 2xx | %d |\n| not answered | %d |\n",
		t.sent, t.answered, t.ok, t.notOK, t.lost)
	if len(t.codes) > 0 {
		var parts []string
		for _, c := range slices.Sorted(maps.Keys(t.codes)) {
			name := strconv.Itoa(c)
			if c == 0 {
				name = "none"
			}
			parts = append(parts, fmt.Sprintf("%s: %d", name, t.codes[c]))
		}
		fmt.Fprintf(&b, "\nStatus codes: %s.\n", strings.Join(parts, ", "))
	}
	if len(t.errors) > 0 {
		fmt.Fprintf(&b, "\nFailures by reason:\n\n")
		msgs := slices.SortedFunc(maps.Keys(t.errors), func(a, b string) int {
			return cmp.Or(cmp.Compare(t.errors[b], t.errors[a]), strings.Compare(a, b))
		})
		for _, m := range msgs {
			fmt.Fprintf(&b, "- %d × %s\n", t.errors[m], m)
		}
	}
	if len(t.failedRuns) > 0 {
		fmt.Fprintf(&b, "\n%d bursts did not report:\n\n", len(t.failedRuns))
		for _, f := range t.failedRuns {
			fmt.Fprintf(&b, "- %s\n", f)
		}
	}

	fmt.Fprintf(&b, "\nReplicas: %d queue-proxies and %d apps started, %d and %d stopped (processes seen by a scan "+
		"every second); %d scale-ups from zero, %d scale-downs to zero, %d scale events in all; %d crashes.\n",
		r.churn.started[kindQueue], r.churn.started[kindApp], r.churn.stopped[kindQueue], r.churn.stopped[kindApp],
		r.events.fromZero, r.events.toZero, r.events.scales, r.events.crashes)
	fmt.Fprintf(&b, "\nShutdown: %s; ", r.exit)
	if len(r.leftovers) == 0 {
		fmt.Fprintf(&b, "no process left behind.\n")
	} else {
		fmt.Fprintf(&b, "left behind: %s.\n", strings.Join(r.leftovers, ", "))
	}
	for _, n := range r.notes {
		fmt.Fprintf(&b, "\n%s\n", n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// roundTo rounds a slope to what format shows, so that a tiny negative
// slope reads 0.
func roundTo(v float64, u unit) float64 {
	if u == unitBytes {
		return math.Round(v/(1<<20)*10) / 10 * (1 << 20)
	}
	return math.Round(v*10) / 10
}
