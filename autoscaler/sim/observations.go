package sim

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/swell-run/swell/autoscaler/decider"
	"github.com/swell-run/swell/pkg/autoscaling"
)

// The observation replay's CSV headers: what it reads, and what it writes.
const (
	ObservationsHeader = "t,ready,stable,panic"
	DecisionsHeader    = "t,desired,scale,ebc,panic"
)

// Observation is one row of an observations file: a decider's inputs as
// the autoscaler logs them.
type Observation struct {
	// Line is the row's 1-based line in its file.
	Line int
	// T is the time column as written, echoed in the output.
	T string
	// Offset is T: the time since the start.
	Offset time.Duration
	// Ready is the number of ready pods.
	Ready int
	// Stable and Panic are the service-wide observed values over the
	// stable and the panic window.
	Stable, Panic float64
}

// ReadObservations reads a whole observations file: the header
// "t,ready,stable,panic", then one row per decision, t in seconds since the
// start (fractions allowed, never decreasing), ready a whole number, stable
// and panic numbers of 0 or more. Blank lines are skipped. The first bad
// line is reported with its number, before anything is decided.
func ReadObservations(r io.Reader) ([]Observation, error) {
	sc := bufio.NewScanner(r)
	line := 0
	header := false
	var rows []Observation
	for sc.Scan() {
		line++
		text := strings.TrimSuffix(sc.Text(), "\r")
		if line == 1 {
			text = strings.TrimPrefix(text, "\uFEFF")
		}
		if strings.TrimSpace(text) == "" {
			continue
		}
		f := strings.Split(text, ",")
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		if !header {
			if strings.Join(f, ",") != ObservationsHeader {
				return nil, fmt.Errorf("line %d: header %q: accepted is %q", line, text, ObservationsHeader)
			}
			header = true
			continue
		}
		o, err := parseObservation(f)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if n := len(rows); n > 0 && o.Offset < rows[n-1].Offset {
			return nil, fmt.Errorf("line %d: t %s is before the previous row's %s; rows must be in time order", line, o.T, rows[n-1].T)
		}
		o.Line = line
		rows = append(rows, o)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", line+1, err)
	}
	if !header {
		return nil, fmt.Errorf("empty input: accepted is a header %q and one row per decision", ObservationsHeader)
	}
	return rows, nil
}

func parseObservation(f []string) (Observation, error) {
	if len(f) != 4 {
		return Observation{}, fmt.Errorf("%d fields: accepted are 4 (%s)", len(f), ObservationsHeader)
	}
	t, err := strconv.ParseFloat(f[0], 64)
	if err != nil || math.IsNaN(t) || math.IsInf(t, 0) || t < 0 || t >= maxSeconds {
		return Observation{}, fmt.Errorf("t %q: accepted is a number of seconds of 0 or more, such as 12 or 12.5", f[0])
	}
	ready, err := strconv.Atoi(f[1])
	if err != nil || ready < 0 || ready > math.MaxInt32 {
		return Observation{}, fmt.Errorf("ready %q: accepted is a whole number of pods of 0 or more", f[1])
	}
	var vals [2]float64
	for i, name := range [2]string{"stable", "panic"} {
		v, err := strconv.ParseFloat(f[2+i], 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return Observation{}, fmt.Errorf("%s %q: accepted is a number of 0 or more, such as 70 or 12.5", name, f[2+i])
		}
		vals[i] = v
	}
	return Observation{
		T:      f[0],
		Offset: time.Duration(math.Round(t * float64(time.Second))),
		Ready:  ready,
		Stable: vals[0],
		Panic:  vals[1],
	}, nil
}

// maxSeconds keeps a time within what a time.Duration holds.
const maxSeconds = float64(math.MaxInt64) / float64(time.Second)

// ReplayObservations applies rows in order to one decider for spec, started
// at Epoch with initialReady pods running, and writes one CSV row per
// decision under DecisionsHeader: t as given, Decision.Desired,
// Decision.Scale, Decision.ExcessBurstCapacity (an integer when integral)
// and Decision.InPanic.
//
// The rows carry no routing, so the replay assumes the route follows each
// decision before the next: the activator is in the path when the previous
// decision said NeedActivator, or when no pod is ready (for the first row,
// only the latter). That reproduces the two steps of a scale to zero — ask
// for the activator, then go to zero once it is in the path. Traffic is
// derived from the panic-window value, as the decider does by default: a
// row with panic > 0 is traffic. Nothing is pending at the activator.
//
// The whole output is built before it is written, so an error leaves w
// untouched.
func ReplayObservations(w io.Writer, rows []Observation, spec autoscaling.Spec, initialReady int) error {
	if err := spec.Validate(); err != nil {
		return fmt.Errorf("autoscaling spec: %w", err)
	}
	if initialReady < 0 {
		return &autoscaling.Error{Key: KeyInitialReady, Name: KeyInitialReady, Value: strconv.Itoa(initialReady),
			Problem: "is negative", Accepted: "a number of pods of 0 or more"}
	}
	var b bytes.Buffer
	b.WriteString(DecisionsHeader)
	b.WriteByte('\n')
	d := decider.New(spec, Epoch, initialReady)
	needActivator := false
	for _, o := range rows {
		dec := d.Decide(decider.Observation{
			Now:             Epoch.Add(o.Offset),
			Ready:           o.Ready,
			Stable:          o.Stable,
			Panic:           o.Panic,
			ActivatorInPath: needActivator || o.Ready == 0,
		})
		needActivator = dec.NeedActivator
		b.WriteString(o.T)
		b.WriteByte(',')
		b.WriteString(strconv.Itoa(dec.Desired))
		b.WriteByte(',')
		b.WriteString(strconv.Itoa(dec.Scale))
		b.WriteByte(',')
		b.WriteString(formatNumber(dec.ExcessBurstCapacity))
		b.WriteByte(',')
		b.WriteString(strconv.FormatBool(dec.InPanic))
		b.WriteByte('\n')
	}
	_, err := w.Write(b.Bytes())
	return err
}

// formatNumber writes v as an integer when it is one, else in the fewest
// digits that read back as v.
func formatNumber(v float64) string {
	if v == 0 {
		return "0" // not "-0"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}
