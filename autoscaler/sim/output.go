package sim

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// TimelineHeader is the timeline CSV's header; docs/sim.md describes each
// column.
const TimelineHeader = "t,arrivals,rejected,concurrency,cpu,cpu_seen,stable,panic_window,desired,scale,ebc,panic,ready,pods,activator_in_path,activator_queue,pod_queue,in_service,serving"

// WriteTimeline writes the timeline as CSV, one row per second.
func WriteTimeline(w io.Writer, timeline []Second) error {
	bw := bufio.NewWriter(w)
	bw.WriteString(TimelineHeader)
	bw.WriteByte('\n')
	var buf []byte
	for _, r := range timeline {
		buf = buf[:0]
		buf = strconv.AppendInt(buf, int64(r.T), 10)
		for _, v := range [...]int{r.Arrivals, r.Rejected} {
			buf = append(buf, ',')
			buf = strconv.AppendInt(buf, int64(v), 10)
		}
		buf = append(buf, ',')
		buf = appendDecimal(buf, r.Concurrency)
		for _, v := range [...]struct {
			v   float64
			has bool
		}{{r.CPU, r.HasCPU}, {r.CPUSeen, r.HasCPUSeen}} {
			buf = append(buf, ',')
			if v.has {
				buf = appendDecimal(buf, v.v)
			}
		}
		for _, v := range [...]float64{r.Stable, r.PanicLoad} {
			buf = append(buf, ',')
			buf = appendDecimal(buf, v)
		}
		for _, v := range [...]int{r.Desired, r.Scale} {
			buf = append(buf, ',')
			buf = strconv.AppendInt(buf, int64(v), 10)
		}
		buf = append(buf, ',')
		buf = append(buf, formatNumber(r.EBC)...)
		buf = append(buf, ',')
		buf = strconv.AppendBool(buf, r.Panic)
		for _, v := range [...]int{r.Ready, r.Pods} {
			buf = append(buf, ',')
			buf = strconv.AppendInt(buf, int64(v), 10)
		}
		buf = append(buf, ',')
		buf = strconv.AppendBool(buf, r.ActivatorInPath)
		for _, v := range [...]int{r.ActivatorQueue, r.PodQueue, r.InService, r.Serving} {
			buf = append(buf, ',')
			buf = strconv.AppendInt(buf, int64(v), 10)
		}
		buf = append(buf, '\n')
		bw.Write(buf)
	}
	return bw.Flush()
}

// appendDecimal writes v with at most 4 decimals, trailing zeros dropped:
// enough for time-weighted averages, short enough to read.
func appendDecimal(buf []byte, v float64) []byte {
	s := strconv.FormatFloat(v, 'f', 4, 64)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	if s == "-0" || s == "" {
		s = "0"
	}
	return append(buf, s...)
}

// WriteSummary writes a summary for a person to read.
func WriteSummary(w io.Writer, s Summary) error {
	bw := bufio.NewWriter(w)
	p := func(label, format string, args ...any) {
		fmt.Fprintf(bw, "%-12s "+format+"\n", append([]any{label}, args...)...)
	}
	p("policy", "%s", s.Class)
	p("simulated", "%s", s.Duration)
	p("requests", "%d arrived, %d completed, %d rejected, %d unfinished", s.Requests, s.Completed, s.Rejected, s.Unfinished)
	p("pods", "%.1f pod-seconds (%.1f ready), at most %d (%d ready), %d started", s.PodSeconds, s.ReadyPodSeconds, s.MaxPods, s.MaxReady, s.PodStarts)
	p("pod-seconds", "%.1f starting, %.1f serving, %.1f idle and ready", s.StartingPodSeconds, s.ServingPodSeconds, s.IdlePodSeconds)
	if s.OraclePodSeconds > 0 {
		p("vs oracle", "%s the clairvoyant bound's %.1f pod-seconds", s.OracleRatio(), s.OraclePodSeconds)
	}
	p("cold starts", "%d (arrived with no pod ready)", s.ColdStarts)
	if s.Waited > 0 {
		p("waited", "%d for a pod: p50 %s  p99 %s  max %s", s.Waited, round(s.WaitP50), round(s.WaitP99), round(s.WaitMax))
	} else {
		p("waited", "0 for a pod")
	}
	if s.Completed > 0 {
		p("latency", "mean %s  p50 %s  p99 %s  max %s", round(s.LatencyMean), round(s.LatencyP50), round(s.LatencyP99), round(s.LatencyMax))
	}
	p("decisions", "%d ticks, %d pokes; %d s in panic", s.Ticks, s.Pokes, s.PanicSeconds)
	if r := s.Reaction; r != nil {
		after := func(d time.Duration) string {
			if d < 0 {
				return "never"
			}
			return "after " + since(d)
		}
		p("reaction", "to the rise at %s: first scale-up %s, %d pods ready %s", r.At, after(r.FirstUp), r.Pods, after(r.Reached))
	}
	return bw.Flush()
}

// since is a reaction's time for a table: the duration, or "never".
func since(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return round(d).String()
}

// round shortens a duration for reading: to the millisecond above a
// second, the microsecond above a millisecond.
func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(time.Microsecond)
	}
	return d
}

// OracleRatio is PodSeconds over OraclePodSeconds, as "1.84×"; "-" when
// the bound is unknown or zero.
func (s Summary) OracleRatio() string {
	if !(s.OraclePodSeconds > 0) {
		return "-"
	}
	return strconv.FormatFloat(s.PodSeconds/s.OraclePodSeconds, 'f', 2, 64) + "×"
}

// OracleMaxRatio is MaxPods over OracleMaxPods, as "1.50×"; "-" when
// the bound's is unknown.
func (s Summary) OracleMaxRatio() string {
	if s.OracleMaxPods <= 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(s.MaxPods)/float64(s.OracleMaxPods), 'f', 2, 64) + "×"
}

// ComparisonColumns are the comparison table's columns.
var ComparisonColumns = []string{"policy", "pod-seconds", "× oracle", "starting", "serving", "idle", "cold starts", "waited", "p50 wait", "p99 wait", "rejected", "max pods", "× oracle's"}

// WriteComparison writes one row per summary under ComparisonColumns,
// aligned for a terminal: names on the left, numbers on the right. When
// a summary has a Reaction, two columns follow: the time to the first
// scale-up and to the pods needed ("-" for a summary without one).
func WriteComparison(w io.Writer, sums []Summary) error {
	header := ComparisonColumns
	var reaction *Reaction
	for _, s := range sums {
		if s.Reaction != nil {
			reaction = s.Reaction
			header = append(slices.Clip(header), "first up", "to "+strconv.Itoa(reaction.Pods)+" ready")
			break
		}
	}
	rows := [][]string{header}
	for _, s := range sums {
		row := []string{
			string(s.Class),
			strconv.FormatFloat(s.PodSeconds, 'f', 1, 64),
			s.OracleRatio(),
			strconv.FormatFloat(s.StartingPodSeconds, 'f', 1, 64),
			strconv.FormatFloat(s.ServingPodSeconds, 'f', 1, 64),
			strconv.FormatFloat(s.IdlePodSeconds, 'f', 1, 64),
			strconv.Itoa(s.ColdStarts),
			strconv.Itoa(s.Waited),
			round(s.WaitP50).String(),
			round(s.WaitP99).String(),
			strconv.Itoa(s.Rejected),
			strconv.Itoa(s.MaxPods),
			s.OracleMaxRatio(),
		}
		switch {
		case reaction == nil:
		case s.Reaction == nil:
			row = append(row, "-", "-")
		default:
			row = append(row, since(s.Reaction.FirstUp), since(s.Reaction.Reached))
		}
		rows = append(rows, row)
	}
	// Widths in runes, as fmt pads ("×" is one).
	width := make([]int, len(header))
	for _, r := range rows {
		for i, c := range r {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	bw := bufio.NewWriter(w)
	for _, r := range rows {
		for i, c := range r {
			if i == 0 {
				fmt.Fprintf(bw, "%-*s", width[i], c)
			} else {
				fmt.Fprintf(bw, "  %*s", width[i], c)
			}
		}
		bw.WriteByte('\n')
	}
	return bw.Flush()
}
