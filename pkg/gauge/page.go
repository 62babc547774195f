package gauge

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/swell-run/swell/pkg/series"
	"github.com/swell-run/swell/pkg/spelling"
)

// scratch is what one scrape reuses from the last, so that a scrape every
// second allocates little: the body, the lines of it kept for the parser,
// and the parser with its read buffer.
type scratch struct {
	body bytes.Buffer
	kept []byte
	// lines[i] is the page's line number of the kept page's line i+1, to
	// report a parse error where the app wrote it.
	lines  []int
	reader bytes.Reader
	parser expfmt.TextParser
}

func newScratch() *scratch {
	return &scratch{parser: expfmt.NewTextParser(model.UTF8Validation)}
}

// value returns the sum of the series of page that sel matches.
//
// Parsing a whole 100 KB vLLM page takes about 4 ms and 1.2 MB in 36,000
// allocations (BenchmarkParseWholePage), every second in every pod; so the
// parser gets only the lines that can belong to sel's family (about 50 µs
// and 2 KB, BenchmarkValue): its HELP and TYPE comments and its samples, and those of the
// histogram or summary sel.Name may be a part of. A line the filter cannot
// place cheaply (a quoted UTF-8 name) is kept, so what the parser sees of
// the family is what it would see of it in the whole page. Lines of other
// families are not parsed, so a malformed one does not stop the gauge from
// being read; the whole page is parsed only to explain an error.
func (sc *scratch) value(page []byte, sel series.Selector) (float64, error) {
	base := partOf(sel.Name)
	sc.kept, sc.lines = sc.kept[:0], sc.lines[:0]
	for n, rest := 1, page; len(rest) > 0; n++ {
		line := rest
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			line, rest = rest[:i+1], rest[i+1:]
		} else {
			rest = nil
		}
		if keep(line, sel.Name, base) {
			sc.kept = append(sc.kept, line...)
			sc.lines = append(sc.lines, n)
		}
	}
	// The format ends every line with a newline, but an app that writes
	// its page by hand may leave out the last one; the parser would call
	// that the end of the input in the middle of a line.
	if n := len(sc.kept); n > 0 && sc.kept[n-1] != '\n' {
		sc.kept = append(sc.kept, '\n')
	}
	sc.reader.Reset(sc.kept)
	fams, err := sc.parser.TextToMetricFamilies(&sc.reader)
	if err != nil {
		return 0, notText(page, err, sc.lines)
	}
	mf := fams[sel.Name]
	if mf == nil {
		if b := fams[base]; b != nil && !isNumber(b.GetType()) {
			return 0, fmt.Errorf("%w: %s is part of the %s %s; accepted is a gauge, a counter or an untyped metric",
				ErrType, sel.Name, typeName(b.GetType()), base)
		}
		return 0, missing(page, sel)
	}
	typ := mf.GetType()
	if !isNumber(typ) {
		return 0, fmt.Errorf("%w: %s is a %s; accepted is a gauge, a counter or an untyped metric",
			ErrType, sel.Name, typeName(typ))
	}
	var sum float64
	matched := 0
	for _, m := range mf.GetMetric() {
		if !matches(m, sel.Labels) {
			continue
		}
		var v float64
		switch typ {
		case dto.MetricType_GAUGE:
			v = m.GetGauge().GetValue()
		case dto.MetricType_COUNTER:
			v = m.GetCounter().GetValue()
		default:
			v = m.GetUntyped().GetValue()
		}
		switch {
		case math.IsNaN(v) || math.IsInf(v, 0):
			return 0, fmt.Errorf("%w: %s is %v", ErrNotFinite, seriesOf(sel.Name, m), v)
		case v < 0:
			return 0, fmt.Errorf("%w: %s is %v; a gauge to scale on counts something, so it is 0 or more",
				ErrNegative, seriesOf(sel.Name, m), v)
		}
		sum += v
		matched++
	}
	if matched == 0 {
		return 0, fmt.Errorf("%w: none of the %d series of %s matches %s; they are %s",
			ErrMissing, len(mf.GetMetric()), sel.Name, sel, someSeries(mf, 3))
	}
	if math.IsInf(sum, 0) {
		return 0, fmt.Errorf("%w: the %d series sum to %v", ErrNotFinite, matched, sum)
	}
	return sum, nil
}

// keep reports whether line may belong to the family name or, when name
// is the _bucket, _count or _sum of a histogram or summary, to that
// family, base.
func keep(line []byte, name, base string) bool {
	line = skipBlanks(line)
	if len(line) == 0 {
		return false
	}
	switch line[0] {
	case '\n':
		return false
	case '{', '"':
		return true
	case '#':
		// The parser reads "# HELP name" and "# TYPE name" and skips
		// every other comment (OpenMetrics' "# EOF" and "# UNIT" too).
		line = skipBlanks(line[1:])
		if len(line) < 5 || string(line[:4]) != "HELP" && string(line[:4]) != "TYPE" || line[4] != ' ' && line[4] != '\t' {
			return false
		}
		line = skipBlanks(line[4:])
		if len(line) > 0 && line[0] == '"' {
			return true
		}
		tok := nameAt(line)
		return string(tok) == name || base != "" && string(tok) == base
	}
	tok := nameAt(line)
	if string(tok) == name {
		return true
	}
	// The samples of a histogram or summary named name, so that it is
	// reported as one rather than as missing.
	rest, ok := bytes.CutPrefix(tok, []byte(name))
	return ok && (string(rest) == "_bucket" || string(rest) == "_count" || string(rest) == "_sum")
}

// skipBlanks returns b without its leading spaces and tabs, the blanks of
// the text format.
func skipBlanks(b []byte) []byte {
	i := 0
	for i < len(b) && (b[i] == ' ' || b[i] == '\t') {
		i++
	}
	return b[i:]
}

// nameAt returns the classic metric name b starts with, if any.
func nameAt(b []byte) []byte {
	i := 0
	for i < len(b) && series.IsNameByte(b[i]) {
		i++
	}
	return b[:i]
}

// partOf returns the histogram or summary name would be the _bucket,
// _count or _sum of, or "".
func partOf(name string) string {
	for _, suffix := range []string{"_bucket", "_count", "_sum"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && base != "" {
			return base
		}
	}
	return ""
}

// isNumber reports whether a family of type t has one number per series.
func isNumber(t dto.MetricType) bool {
	return t == dto.MetricType_GAUGE || t == dto.MetricType_COUNTER || t == dto.MetricType_UNTYPED
}

func typeName(t dto.MetricType) string {
	return strings.ReplaceAll(strings.ToLower(t.String()), "_", " ")
}

// matches reports whether m has every label of want, a missing label
// counting as the empty value, as in PromQL.
func matches(m *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		got := ""
		for _, lp := range m.GetLabel() {
			if lp.GetName() == k {
				got = lp.GetValue()
				break
			}
		}
		if got != v {
			return false
		}
	}
	return true
}

// seriesOf writes m as a selector that picks it alone.
func seriesOf(name string, m *dto.Metric) string {
	s := series.Selector{Name: name}
	for _, lp := range m.GetLabel() {
		if s.Labels == nil {
			s.Labels = map[string]string{}
		}
		s.Labels[lp.GetName()] = lp.GetValue()
	}
	return s.String()
}

// someSeries lists at most n of mf's series, for an error message.
func someSeries(mf *dto.MetricFamily, n int) string {
	var all []string
	for _, m := range mf.GetMetric() {
		all = append(all, seriesOf(mf.GetName(), m))
	}
	slices.Sort(all)
	if len(all) > n {
		return strings.Join(all[:n], ", ") + fmt.Sprintf(" and %d more", len(all)-n)
	}
	return strings.Join(all, ", ")
}

// notText explains a parse error of the page. lines maps the parsed lines
// to the page's when only some of the page was parsed, and is nil when all
// of it was.
func notText(page []byte, err error, lines []int) error {
	var pe expfmt.ParseError
	if !errors.As(err, &pe) {
		return fmt.Errorf("%w: %v", ErrNotNumber, err)
	}
	n := pe.Line
	if lines != nil && n >= 1 && n <= len(lines) {
		n = lines[n-1]
	}
	return fmt.Errorf("%w: line %d: %s: %q", ErrNotNumber, n, pe.Msg, lineOf(page, n, 100))
}

// lineOf returns line n (from 1) of page without its newline, cut to at
// most limit bytes.
func lineOf(page []byte, n, limit int) string {
	for ; n > 1; n-- {
		i := bytes.IndexByte(page, '\n')
		if i < 0 {
			return ""
		}
		page = page[i+1:]
	}
	if i := bytes.IndexByte(page, '\n'); i >= 0 {
		page = page[:i]
	}
	if len(page) > limit {
		return string(page[:limit]) + "..."
	}
	return string(page)
}

// missing explains why no family named sel.Name was found, parsing the
// whole page to say what it has instead.
func missing(page []byte, sel series.Selector) error {
	if len(page) > 0 && page[len(page)-1] != '\n' {
		page = append(page[:len(page):len(page)], '\n') // as value does
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(page))
	if err != nil {
		return notText(page, err, nil)
	}
	names := slices.Sorted(maps.Keys(fams))
	msg := fmt.Sprintf("the page has %d metric families, none named %s", len(names), sel.Name)
	if hint := suggest(sel.Name, names); hint != "" {
		msg += "; did you mean " + hint + "?"
	}
	return fmt.Errorf("%w: %s", ErrMissing, msg)
}

// suggest returns the family of names the user most likely meant by name,
// or "": a misspelling of it, its OpenMetrics counter name (name_total), or
// the one family that is name under a namespace (vllm:name).
func suggest(name string, names []string) string {
	if s := spelling.Suggest(name, names); s != "" {
		return s
	}
	if _, ok := slices.BinarySearch(names, name+"_total"); ok {
		return name + "_total"
	}
	found := ""
	for _, n := range names {
		if strings.HasSuffix(n, ":"+name) {
			if found != "" {
				return ""
			}
			found = n
		}
	}
	return found
}
