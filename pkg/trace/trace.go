// Package trace reads request traces — when each request arrived and how much
// work it carried — so the load generator and the simulator can replay them.
//
// Two CSV formats are recognised by their header line:
//
//	TIMESTAMP,ContextTokens,GeneratedTokens   a token trace (Azure LLM inference traces)
//	t,service_time                            a service-time trace (synthetic traces)
//
// In a token trace, TIMESTAMP is a wall-clock time such as
// "2023-11-16 18:15:46.6805900" and arrivals are taken relative to the first
// row; service times come from a Model applied to the token counts. In a
// service-time trace both columns are seconds (decimals allowed): t since the
// start of the trace, service_time the work the request carries.
//
// Rows must be in arrival order. The package does no I/O beyond the reader it
// is given and knows nothing of HTTP.
package trace

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// Format is the kind of trace a header announced.
type Format int

// Formats recognised by NewReader.
const (
	// FormatTokens is "TIMESTAMP,ContextTokens,GeneratedTokens".
	FormatTokens Format = iota + 1
	// FormatService is "t,service_time", both in seconds.
	FormatService
)

// Headers of the recognised formats, as they are expected on the first line
// (compared without regard to case or spaces around the commas).
const (
	HeaderTokens  = "TIMESTAMP,ContextTokens,GeneratedTokens"
	HeaderService = "t,service_time"
)

// String names the format after its header.
func (f Format) String() string {
	switch f {
	case FormatTokens:
		return "tokens (" + HeaderTokens + ")"
	case FormatService:
		return "service-time (" + HeaderService + ")"
	default:
		return "unknown"
	}
}

// timestampLayout parses token-trace timestamps. Go accepts any number of
// fractional-second digits after the seconds when parsing, so the trace's
// seven digits need no special layout.
const timestampLayout = "2006-01-02 15:04:05"

// Record is one request of a trace.
type Record struct {
	// Line is the 1-based line of the record in its file.
	Line int
	// Arrival is when the request arrived, from the start of the trace.
	Arrival time.Duration
	// ServiceTime is the work the request carries: given by a service-time
	// trace, or computed by the reader's Model for a token trace.
	ServiceTime time.Duration
	// ContextTokens and GeneratedTokens are the token counts of a token
	// trace (zero in a service-time trace).
	ContextTokens, GeneratedTokens int
}

// Model maps a token trace's token counts to a service time: a fixed cost
// plus a cost per generated token (generation dominates LLM serving time).
type Model struct {
	// Base is the time every request costs.
	Base time.Duration
	// PerToken is the time each generated token adds.
	PerToken time.Duration
}

// ServiceTime is Base + PerToken × generatedTokens, or an error when that
// is negative or more than a time.Duration holds (about 292 years): a
// token count from a file is not trusted to be sane.
func (m Model) ServiceTime(generatedTokens int) (time.Duration, error) {
	if generatedTokens < 0 || m.Base < 0 || m.PerToken < 0 {
		return 0, fmt.Errorf("service time of %d tokens at %v + %v per token: negative; accepted: 0 or more tokens, a base and a cost per token of 0 or more",
			generatedTokens, m.Base, m.PerToken)
	}
	if m.PerToken > 0 && int64(generatedTokens) > (math.MaxInt64-int64(m.Base))/int64(m.PerToken) {
		return 0, fmt.Errorf("service time of %d tokens at %v + %v per token: too long; accepted: at most %d tokens at that cost",
			generatedTokens, m.Base, m.PerToken, (math.MaxInt64-int64(m.Base))/int64(m.PerToken))
	}
	return m.Base + time.Duration(generatedTokens)*m.PerToken, nil
}

// ParseError is a malformed trace line.
type ParseError struct {
	// Line is the 1-based line number.
	Line int
	// Err says what was wrong.
	Err error
}

func (e *ParseError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }

func (e *ParseError) Unwrap() error { return e.Err }

// Reader streams the records of a trace, one line at a time.
type Reader struct {
	sc     *bufio.Scanner
	model  Model
	format Format
	line   int

	// first is the token trace's first timestamp, the origin of arrivals.
	first   time.Time
	started bool
	last    time.Duration
}

// NewReader reads the header from r and returns a Reader positioned on the
// first record. model computes service times for a token trace and is
// ignored for a service-time trace.
func NewReader(r io.Reader, model Model) (*Reader, error) {
	tr := &Reader{sc: bufio.NewScanner(r), model: model}
	for {
		line, ok, err := tr.scan()
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, errors.New("empty trace: no header line; accepted headers are " +
				strconv.Quote(HeaderTokens) + " and " + strconv.Quote(HeaderService))
		}
		if tr.line == 1 {
			// A spreadsheet may have saved the file with a byte-order mark.
			line = strings.TrimPrefix(line, "\uFEFF")
		}
		if strings.TrimSpace(line) == "" {
			continue
		}
		switch normaliseHeader(line) {
		case normaliseHeader(HeaderTokens):
			tr.format = FormatTokens
		case normaliseHeader(HeaderService):
			tr.format = FormatService
		default:
			return nil, &ParseError{Line: tr.line, Err: fmt.Errorf("header %q is not a known trace format; accepted are %q (token trace) and %q (seconds)",
				line, HeaderTokens, HeaderService)}
		}
		return tr, nil
	}
}

func normaliseHeader(h string) string {
	fields := strings.Split(h, ",")
	for i, f := range fields {
		fields[i] = strings.ToLower(strings.TrimSpace(f))
	}
	return strings.Join(fields, ",")
}

// Format is the format the header announced.
func (r *Reader) Format() Format { return r.format }

// scan returns the next line, with ok false at the end of input.
func (r *Reader) scan() (string, bool, error) {
	if !r.sc.Scan() {
		if err := r.sc.Err(); err != nil {
			return "", false, &ParseError{Line: r.line + 1, Err: err}
		}
		return "", false, nil
	}
	r.line++
	return strings.TrimSuffix(r.sc.Text(), "\r"), true, nil
}

// Next returns the next record, or io.EOF after the last one. Blank lines
// are skipped. A malformed row gives a *ParseError naming its line.
func (r *Reader) Next() (Record, error) {
	for {
		line, ok, err := r.scan()
		if err != nil {
			return Record{}, err
		}
		if !ok {
			return Record{}, io.EOF
		}
		if strings.TrimSpace(line) == "" {
			continue
		}
		rec, err := r.parse(line)
		if err != nil {
			return Record{}, &ParseError{Line: r.line, Err: err}
		}
		if r.started && rec.Arrival < r.last {
			return Record{}, &ParseError{Line: r.line, Err: fmt.Errorf("arrival %s is before the previous row's %s; rows must be in arrival order", rec.Arrival, r.last)}
		}
		r.started = true
		r.last = rec.Arrival
		rec.Line = r.line
		return rec, nil
	}
}

func (r *Reader) parse(line string) (Record, error) {
	switch r.format {
	case FormatTokens:
		return r.parseTokens(line)
	default:
		return parseService(line)
	}
}

func (r *Reader) parseTokens(line string) (Record, error) {
	f, err := split(line, 3, HeaderTokens)
	if err != nil {
		return Record{}, err
	}
	ts, err := time.Parse(timestampLayout, f[0])
	if err != nil {
		return Record{}, fmt.Errorf("TIMESTAMP %q: accepted is a time such as 2023-11-16 18:15:46.6805900", f[0])
	}
	ctxTokens, err := tokens("ContextTokens", f[1])
	if err != nil {
		return Record{}, err
	}
	genTokens, err := tokens("GeneratedTokens", f[2])
	if err != nil {
		return Record{}, err
	}
	svc, err := r.model.ServiceTime(genTokens)
	if err != nil {
		return Record{}, fmt.Errorf("GeneratedTokens %q: %w", f[2], err)
	}
	if !r.started {
		r.first = ts
	}
	return Record{
		Arrival:         ts.Sub(r.first),
		ServiceTime:     svc,
		ContextTokens:   ctxTokens,
		GeneratedTokens: genTokens,
	}, nil
}

func parseService(line string) (Record, error) {
	f, err := split(line, 2, HeaderService)
	if err != nil {
		return Record{}, err
	}
	at, err := seconds("t", f[0])
	if err != nil {
		return Record{}, err
	}
	svc, err := seconds("service_time", f[1])
	if err != nil {
		return Record{}, err
	}
	return Record{Arrival: at, ServiceTime: svc}, nil
}

// split cuts a row into exactly n trimmed fields. The formats hold only
// numbers and timestamps, so no CSV quoting is needed.
func split(line string, n int, header string) ([]string, error) {
	f := strings.Split(line, ",")
	if len(f) != n {
		return nil, fmt.Errorf("%d fields in %q: accepted are %d (%s)", len(f), line, n, header)
	}
	for i := range f {
		f[i] = strings.TrimSpace(f[i])
	}
	return f, nil
}

func tokens(column, s string) (int, error) {
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%s %q: accepted is a whole number of 0 or more", column, s)
	}
	return v, nil
}

// maxSeconds keeps seconds within what a time.Duration holds.
const maxSeconds = float64(math.MaxInt64) / float64(time.Second)

func seconds(column, s string) (time.Duration, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || v < 0 || v >= maxSeconds {
		return 0, fmt.Errorf("%s %q: accepted is a number of seconds of 0 or more, such as 1.25", column, s)
	}
	return time.Duration(math.Round(v * float64(time.Second))), nil
}

// Trace is a whole trace in memory.
type Trace struct {
	// Format is the format the header announced.
	Format Format
	// Records are the rows, in arrival order.
	Records []Record
}

// Span is the arrival of the last record: how long the trace lasts.
func (t Trace) Span() time.Duration {
	if len(t.Records) == 0 {
		return 0
	}
	return t.Records[len(t.Records)-1].Arrival
}

// ReadAll reads a whole trace from r.
func ReadAll(r io.Reader, model Model) (Trace, error) {
	tr, err := NewReader(r, model)
	if err != nil {
		return Trace{}, err
	}
	t := Trace{Format: tr.Format()}
	for {
		rec, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return t, nil
		}
		if err != nil {
			return Trace{}, err
		}
		t.Records = append(t.Records, rec)
	}
}

// ReadFile reads the whole trace in the named file.
func ReadFile(path string, model Model) (Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return Trace{}, fmt.Errorf("read trace: %w", err)
	}
	defer f.Close()
	t, err := ReadAll(f, model)
	if err != nil {
		return Trace{}, fmt.Errorf("read trace %s: %w", path, err)
	}
	return t, nil
}
