package gauge

import (
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"unicode"

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
// being read. The whole page is parsed only to explain an error; why
// remembers the explanation of a missing family and gives it again, for
// the cost of a scan, while the page keeps its families.
func (sc *scratch) value(page []byte, sel series.Selector, why *explainer) (float64, error) {
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
		return 0, why.missing(page, sel)
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
	line := lineAt(page, n)
	if len(line) > limit {
		return string(line[:limit]) + "..."
	}
	return string(line)
}

// explainer remembers why a family was last missing from a page, so that
// an app read every second while the selector names none of its families
// is told why once, not on every read. Explaining parses the whole page
// and searches its families for a spelling (BenchmarkValueMissingFirst:
// about 50 ms and 21 MB for 1 MiB of distinct families); telling it again
// scans the page and allocates nothing (BenchmarkValueMissing: about 2 ms).
// The zero value is ready to use, and it is safe for concurrent use.
type explainer struct {
	mu   sync.Mutex
	last explanation
}

// explanation is why the family was missing from a page of a shape.
type explanation struct {
	err error
	// shape is the shape of the page err explains.
	shape uint64
	// line is the line of the page that err quotes, if err is the page's
	// parse error, and text a hash of it: the shape leaves out the values
	// of samples, which may be what did not parse.
	line int
	text uint64
}

// missing explains why no family named sel.Name was found in page: as it
// explained it for the last page if that page had the same shape, or else
// anew.
//
// A page of the same shape has the same families, so the same error; one
// that does not parse still has its error where it was if that line did
// not change. A page of the same shape that no longer parses, at a value,
// gets the explanation it had when it did: that it has those families and
// none of them is the one selected, which is still so.
func (e *explainer) missing(page []byte, sel series.Selector) error {
	sh := shape(page, sel.Name)
	e.mu.Lock()
	last := e.last
	e.mu.Unlock()
	if last.err != nil && last.shape == sh && (last.line == 0 || hashLine(page, last.line) == last.text) {
		return last.err
	}
	line, err := missing(page, sel)
	next := explanation{err: err, shape: sh, line: line}
	if line > 0 {
		next.text = hashLine(page, line)
	}
	e.mu.Lock()
	e.last = next
	e.mu.Unlock()
	return err
}

// shapeSeed seeds the hashes of shape and hashLine.
var shapeSeed = maphash.MakeSeed()

// hashLine hashes line n (from 1) of page.
func hashLine(page []byte, n int) uint64 {
	return maphash.Bytes(shapeSeed, lineAt(page, n))
}

// shape hashes what of page decides why a family named name is missing
// from it: name, the HELP and TYPE comments, and the name of each run of
// samples, so that the values and the number of series, which change from
// read to read, do not change it. It allocates nothing and reads page once.
func shape(page []byte, name string) uint64 {
	var h maphash.Hash
	h.SetSeed(shapeSeed)
	h.WriteString(name)
	h.WriteByte('\n')
	var run []byte // the name of the samples hashed last
	for rest := page; len(rest) > 0; {
		line := rest
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			line, rest = rest[:i], rest[i+1:]
		} else {
			rest = nil
		}
		tok := skipBlanks(line)
		switch {
		case len(tok) == 0:
			continue
		case tok[0] == '#':
			// The parser skips the comments other than HELP and TYPE.
			c := skipBlanks(tok[1:])
			if len(c) >= 5 && (string(c[:4]) == "HELP" || string(c[:4]) == "TYPE") {
				h.Write(tok)
				h.WriteByte('\n')
				run = nil
			}
			continue
		case tok[0] == '{' || tok[0] == '"':
			// A quoted name, found with the labels.
			if i := bytes.IndexByte(tok, '}'); i >= 0 {
				tok = tok[:i+1]
			}
		default:
			// A line that names nothing is kept whole: it is what the
			// parser stops at.
			if n := nameAt(tok); len(n) > 0 {
				tok = n
			}
		}
		if !bytes.Equal(tok, run) {
			h.Write(tok)
			h.WriteByte('\n')
			run = tok
		}
	}
	return h.Sum64()
}

// lineAt returns line n (from 1) of page without its newline, or nil.
func lineAt(page []byte, n int) []byte {
	for ; n > 1; n-- {
		i := bytes.IndexByte(page, '\n')
		if i < 0 {
			return nil
		}
		page = page[i+1:]
	}
	if i := bytes.IndexByte(page, '\n'); i >= 0 {
		return page[:i]
	}
	return page
}

// missing explains why no family named sel.Name was found, parsing the
// whole page to say what it has instead. When the page does not parse,
// line is the line of it that the error quotes.
func missing(page []byte, sel series.Selector) (line int, err error) {
	if len(page) > 0 && page[len(page)-1] != '\n' {
		page = append(page[:len(page):len(page)], '\n') // as value does
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(page))
	if err != nil {
		var pe expfmt.ParseError
		if errors.As(err, &pe) {
			line = pe.Line
		}
		return line, notText(page, err, nil)
	}
	names := slices.Sorted(maps.Keys(fams))
	msg := fmt.Sprintf("the page has %d metric families, none named %s", len(names), sel.Name)
	if hint := suggest(sel.Name, names); hint != "" {
		msg += "; did you mean " + hint + "?"
	}
	return 0, fmt.Errorf("%w: %s", ErrMissing, msg)
}

// suggest returns the family of names the user most likely meant by name,
// or "": a misspelling of it, its OpenMetrics counter name (name_total), or
// the one family that is name under a namespace (vllm:name).
func suggest(name string, names []string) string {
	if s := spelling.Suggest(name, candidates(name, names)); s != "" {
		return s
	}
	if _, ok := slices.BinarySearch(names, name+"_total"); ok {
		return name + "_total"
	}
	found, suffix := "", ":"+name
	for _, n := range names {
		if strings.HasSuffix(n, suffix) {
			if found != "" {
				return ""
			}
			found = n
		}
	}
	return found
}

// maxCandidates bounds the names that suggest hands spelling.Suggest,
// which compares name with each of them in time and memory that grow with
// the product of their lengths. A page of 1 MiB holds tens of thousands of
// families; beyond the first maxCandidates that may do, in their order,
// the suggestion may miss the best one.
const maxCandidates = 1000

// candidates returns, in their order, the names that spelling.Suggest may
// suggest for name, at most maxCandidates of them. As its doc says, it
// ignores case and the separators '-', '_', '.' and ' ', and suggests a
// name that is name written another way, one that starts with name when
// name has at least four letters, or one at most three edits away: so a
// name with three letters more or fewer than name is a candidate, and a
// longer one only if it starts with name.
func candidates(name string, names []string) []string {
	var w []rune
	for _, r := range name {
		if !isSeparator(r) {
			w = append(w, unicode.ToLower(r))
		}
	}
	const maxEdits = 3
	var out []string
	for _, c := range names {
		n := letters(c)
		if n >= len(w)-maxEdits && n <= len(w)+maxEdits || len(w) >= 4 && n > len(w) && startsWith(c, w) {
			out = append(out, c)
			if len(out) == maxCandidates {
				break
			}
		}
	}
	return out
}

// isSeparator reports whether spelling.Suggest ignores r.
func isSeparator(r rune) bool {
	return r == '-' || r == '_' || r == '.' || r == ' '
}

// letters returns the number of runes of s that are not separators.
func letters(s string) int {
	n := 0
	for _, r := range s {
		if !isSeparator(r) {
			n++
		}
	}
	return n
}

// startsWith reports whether s, without its separators and in lower case,
// starts with prefix.
func startsWith(s string, prefix []rune) bool {
	for _, r := range s {
		if len(prefix) == 0 {
			return true
		}
		if isSeparator(r) {
			continue
		}
		if unicode.ToLower(r) != prefix[0] {
			return false
		}
		prefix = prefix[1:]
	}
	return len(prefix) == 0
}
