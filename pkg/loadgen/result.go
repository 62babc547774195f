package loadgen

import (
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// Result summarises a run. Durations are time.Duration (nanoseconds in
// JSON, hence the _ns names).
type Result struct {
	// Mode is how requests were paced.
	Mode Mode `json:"mode"`
	// URL is the target.
	URL string `json:"url"`
	// Workers is the closed loop's number of workers.
	Workers int `json:"workers,omitempty"`
	// Planned is the number of requests the schedule held; zero for a
	// closed loop bounded by time only. Requests < Planned means the run
	// was interrupted.
	Planned uint64 `json:"planned"`
	// Requests is the number of requests sent (all of which completed or
	// failed).
	Requests uint64 `json:"requests"`
	// Successes is the number of responses with a 2xx or 3xx status.
	Successes uint64 `json:"successes"`
	// Interrupted is set when the run's context ended before the schedule.
	Interrupted bool `json:"interrupted"`
	// Duration is from the start of the run to the last request sent.
	Duration time.Duration `json:"duration_ns"`
	// Wait is from the last request sent to the last response received.
	Wait time.Duration `json:"wait_ns"`
	// TargetRate is the rate asked for, in requests per second: Rate, or a
	// replayed trace's mean rate; zero for a closed loop.
	TargetRate float64 `json:"target_rate"`
	// Rate is the achieved sending rate: Requests / Duration.
	Rate float64 `json:"rate"`
	// Throughput is Successes / (Duration + Wait).
	Throughput float64 `json:"throughput"`
	// Latency summarises how long requests took, from being sent to the
	// end of the response body.
	Latency Latency `json:"latency"`
	// StatusCodes counts responses by status code; 0 counts requests that
	// got no response (connection errors, timeouts).
	StatusCodes map[int]uint64 `json:"status_codes"`
	// Errors groups failed requests (no response, or a status outside
	// 2xx/3xx) by message, most frequent first.
	Errors []ErrorCount `json:"errors"`
	// BytesIn and BytesOut total the response and request bodies.
	BytesIn  uint64 `json:"bytes_in"`
	BytesOut uint64 `json:"bytes_out"`
}

// Latency is a latency distribution's summary. The quantiles are estimates
// (vegeta keeps a t-digest); Min, Max and Mean are exact.
type Latency struct {
	Mean time.Duration `json:"mean_ns"`
	P50  time.Duration `json:"p50_ns"`
	P90  time.Duration `json:"p90_ns"`
	P99  time.Duration `json:"p99_ns"`
	Max  time.Duration `json:"max_ns"`
	Min  time.Duration `json:"min_ns"`
}

// ErrorCount is how many requests failed with one message.
type ErrorCount struct {
	Error string `json:"error"`
	Count uint64 `json:"count"`
}

// tally accumulates results; only the run loop touches it.
type tally struct {
	m      vegeta.Metrics
	codes  map[int]uint64
	errors map[string]uint64
}

func newTally() *tally {
	return &tally{codes: map[int]uint64{}, errors: map[string]uint64{}}
}

func (t *tally) add(r *vegeta.Result) {
	t.codes[int(r.Code)]++
	if r.Error != "" {
		t.errors[groupError(r.Error, r.URL)]++
	}
	// Metrics would keep every distinct message, and messages naming a
	// per-request URL are all distinct; the grouped count above is the
	// record. Metrics needs only the body's length, kept in BytesIn.
	r.Error, r.Body = "", nil
	t.m.Add(r)
}

// ephemeralPort matches the local port in "tcp 127.0.0.1:53422->127.0.0.1:80".
var ephemeralPort = regexp.MustCompile(`:\d+->`)

// groupError reduces an error message to what failed requests have in
// common: Go's client names the URL (which differs per request when it
// carries a sleep) and the connection's local port.
func groupError(msg, rawURL string) string {
	if rawURL != "" {
		if i := strings.Index(msg, strconv.Quote(rawURL)+": "); i >= 0 {
			msg = msg[i+len(strconv.Quote(rawURL))+2:]
		}
	}
	return ephemeralPort.ReplaceAllString(msg, "->")
}

func (t *tally) result(began time.Time) Result {
	t.m.Close()
	r := Result{
		Requests:    t.m.Requests,
		StatusCodes: t.codes,
		Errors:      make([]ErrorCount, 0, len(t.errors)),
		BytesIn:     t.m.BytesIn.Total,
		BytesOut:    t.m.BytesOut.Total,
	}
	for code, n := range t.codes {
		if code >= 200 && code < 400 {
			r.Successes += n
		}
	}
	for msg, n := range t.errors {
		r.Errors = append(r.Errors, ErrorCount{Error: msg, Count: n})
	}
	sort.Slice(r.Errors, func(i, j int) bool {
		if r.Errors[i].Count != r.Errors[j].Count {
			return r.Errors[i].Count > r.Errors[j].Count
		}
		return r.Errors[i].Error < r.Errors[j].Error
	})
	if r.Requests == 0 {
		return r
	}
	r.Duration = t.m.Latest.Sub(began)
	r.Wait = t.m.End.Sub(t.m.Latest)
	if r.Duration > 0 {
		r.Rate = float64(r.Requests) / r.Duration.Seconds()
	}
	if total := r.Duration + r.Wait; total > 0 {
		r.Throughput = float64(r.Successes) / total.Seconds()
	}
	r.Latency = Latency{
		Mean: t.m.Latencies.Mean,
		P50:  t.m.Latencies.P50,
		P90:  t.m.Latencies.P90,
		P99:  t.m.Latencies.P99,
		Max:  t.m.Latencies.Max,
		Min:  t.m.Latencies.Min,
	}
	return r
}

// Print writes r for a person to read.
func (r Result) Print(w io.Writer) error {
	var b strings.Builder
	line := func(label, format string, args ...any) {
		fmt.Fprintf(&b, "%-13s", label)
		fmt.Fprintf(&b, format, args...)
		b.WriteByte('\n')
	}
	switch r.Mode {
	case ModeRate:
		line("mode", "open loop, fixed rate %s/s", formatRate(r.TargetRate))
	case ModeTrace:
		line("mode", "open loop, trace replay (mean %s/s)", formatRate(r.TargetRate))
	case ModeClosed:
		line("mode", "closed loop, %d workers", r.Workers)
	}
	line("target", "%s", r.URL)
	planned := ""
	if r.Planned > 0 {
		planned = fmt.Sprintf(" of %d planned", r.Planned)
	}
	line("requests", "%d sent%s, %d succeeded (%s)", r.Requests, planned, r.Successes, percent(r.Successes, r.Requests))
	if r.Interrupted {
		line("", "interrupted before the end of the run")
	}
	line("duration", "%s sending, %s more for the last response", formatDuration(r.Duration), formatDuration(r.Wait))
	if r.Mode == ModeClosed {
		line("rate", "%s/s achieved", formatRate(r.Rate))
	} else {
		line("rate", "%s/s achieved, %s/s target", formatRate(r.Rate), formatRate(r.TargetRate))
	}
	line("throughput", "%s/s successful", formatRate(r.Throughput))
	l := r.Latency
	line("latency", "p50 %s  p90 %s  p99 %s  max %s  mean %s",
		formatDuration(l.P50), formatDuration(l.P90), formatDuration(l.P99), formatDuration(l.Max), formatDuration(l.Mean))
	codes := make([]int, 0, len(r.StatusCodes))
	for c := range r.StatusCodes {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	var sc []string
	for _, c := range codes {
		name := strconv.Itoa(c)
		if c == 0 {
			name = "none"
		}
		sc = append(sc, fmt.Sprintf("%s: %d", name, r.StatusCodes[c]))
	}
	line("status codes", "%s", strings.Join(sc, "  "))
	for i, e := range r.Errors {
		label := ""
		if i == 0 {
			label = "errors"
		}
		line(label, "%d × %s", e.Count, e.Error)
	}
	line("bytes", "in %d (%s/request), out %d (%s/request)",
		r.BytesIn, perRequest(r.BytesIn, r.Requests), r.BytesOut, perRequest(r.BytesOut, r.Requests))
	_, err := io.WriteString(w, b.String())
	return err
}

func formatRate(r float64) string { return strconv.FormatFloat(r, 'f', 1, 64) }

func percent(n, of uint64) string {
	if of == 0 {
		return "-"
	}
	return strconv.FormatFloat(100*float64(n)/float64(of), 'f', 2, 64) + "%"
}

func perRequest(n, of uint64) string {
	if of == 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(n)/float64(of), 'f', 1, 64)
}

// formatDuration keeps about four significant digits.
func formatDuration(d time.Duration) string {
	switch {
	case d >= 100*time.Second:
		return d.Round(time.Second).String()
	case d >= time.Second:
		return d.Round(time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	default:
		return d.Round(time.Microsecond).String()
	}
}
