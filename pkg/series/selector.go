// Package series names Prometheus series the way PromQL does: a metric
// name with exact label matches, parsed and printed without any I/O, so
// that the autoscaling keys can check one and the queue-proxy read it.
package series

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/prometheus/common/model"
)

// Selector names the series to read: a metric name and optional exact label
// matches, written as in PromQL without operators other than =:
// `num_requests_waiting` or `vllm:num_requests_waiting{model_name="llama"}`.
//
// As in PromQL, a match with an empty value, model_name="", matches the
// series that do not have the label.
type Selector struct {
	// Name is the metric family's name, a classic Prometheus metric name
	// ([a-zA-Z_:][a-zA-Z0-9_:]*).
	Name string
	// Labels maps label names to the values a series must have; nil or
	// empty matches every series of the family.
	Labels map[string]string
}

// accepted is what every ParseSelector error says a selector may be.
const accepted = `accepted is a metric name, optionally with exact label matches in braces, ` +
	`such as vllm:num_requests_waiting or vllm:num_requests_waiting{model_name="llama"}`

// ParseSelector parses s, a metric name optionally followed by exact label
// matches in braces: name{label="value", ...}. Values are double-quoted Go
// string literals, as in PromQL; spaces around the tokens are allowed, and
// so is a comma before the closing brace.
func ParseSelector(s string) (Selector, error) {
	sel, err := parseSelector(s)
	if err != nil {
		return Selector{}, fmt.Errorf("selector %q: %w; %s", s, err, accepted)
	}
	return sel, nil
}

func parseSelector(s string) (Selector, error) {
	if !utf8.ValidString(s) {
		return Selector{}, errors.New("not valid UTF-8")
	}
	p := selectorScanner{s: strings.TrimSpace(s)}
	if p.s == "" {
		return Selector{}, errors.New("empty")
	}
	var sel Selector
	sel.Name = p.word(IsNameByte)
	if sel.Name == "" {
		if p.peek() == '{' {
			return Selector{}, errors.New("no metric name before {")
		}
		return Selector{}, fmt.Errorf("at %q: a metric name starts with a letter, _ or :", p.rest())
	}
	if !model.LegacyValidation.IsValidMetricName(sel.Name) {
		return Selector{}, fmt.Errorf("metric name %q does not start with a letter, _ or :", sel.Name)
	}
	p.space()
	if p.done() {
		return sel, nil
	}
	if !p.take('{') {
		return Selector{}, fmt.Errorf("unexpected %q after the metric name", p.rest())
	}
	for {
		p.space()
		if p.take('}') {
			break
		}
		if p.done() {
			return Selector{}, errors.New("missing }")
		}
		at := p.rest()
		name := p.word(isLabelByte)
		if name == "" || !model.LegacyValidation.IsValidLabelName(name) {
			return Selector{}, fmt.Errorf("at %q: expected a label name (a letter or _, then letters, digits or _)", at)
		}
		if name == model.MetricNameLabel {
			return Selector{}, errors.New("label __name__: write the metric name before the braces")
		}
		p.space()
		switch {
		case strings.HasPrefix(p.rest(), "!="), strings.HasPrefix(p.rest(), "=~"), strings.HasPrefix(p.rest(), "!~"):
			return Selector{}, fmt.Errorf("label %s: operator %s: only = is accepted", name, p.rest()[:2])
		case !p.take('='):
			return Selector{}, fmt.Errorf("label %s: expected = after the label name", name)
		}
		p.space()
		value, err := p.quoted()
		if err != nil {
			return Selector{}, fmt.Errorf("label %s: %w", name, err)
		}
		if _, dup := sel.Labels[name]; dup {
			return Selector{}, fmt.Errorf("label %s matched twice", name)
		}
		if sel.Labels == nil {
			sel.Labels = map[string]string{}
		}
		sel.Labels[name] = value
		p.space()
		if p.take(',') {
			continue
		}
		if p.take('}') {
			break
		}
		if p.done() {
			return Selector{}, errors.New("missing }")
		}
		return Selector{}, fmt.Errorf("at %q: expected , or } after a label match", p.rest())
	}
	p.space()
	if !p.done() {
		return Selector{}, fmt.Errorf("unexpected %q after }", p.rest())
	}
	return sel, nil
}

// String returns the selector as ParseSelector reads it, labels sorted by
// name, so that it round-trips and two equal selectors print alike.
func (s Selector) String() string {
	if len(s.Labels) == 0 {
		return s.Name
	}
	var b strings.Builder
	b.WriteString(s.Name)
	b.WriteByte('{')
	for i, k := range slices.Sorted(maps.Keys(s.Labels)) {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(strconv.Quote(s.Labels[k]))
	}
	b.WriteByte('}')
	return b.String()
}

// Validate checks a Selector built in code rather than by ParseSelector.
func (s Selector) Validate() error {
	if s.Name == "" {
		return errors.New("Selector has no metric name; " + accepted)
	}
	if !model.LegacyValidation.IsValidMetricName(s.Name) {
		return fmt.Errorf("Selector name %q is not a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*); %s", s.Name, accepted)
	}
	for k := range s.Labels {
		if !model.LegacyValidation.IsValidLabelName(k) || k == model.MetricNameLabel {
			return fmt.Errorf("Selector label %q is not a label name ([a-zA-Z_][a-zA-Z0-9_]*, not __name__); %s", k, accepted)
		}
	}
	return nil
}

// selectorScanner walks a selector left to right.
type selectorScanner struct {
	s string
	i int
}

func (p *selectorScanner) done() bool   { return p.i >= len(p.s) }
func (p *selectorScanner) rest() string { return p.s[p.i:] }

func (p *selectorScanner) peek() byte {
	if p.done() {
		return 0
	}
	return p.s[p.i]
}

func (p *selectorScanner) take(c byte) bool {
	if !p.done() && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *selectorScanner) space() {
	for !p.done() && (p.s[p.i] == ' ' || p.s[p.i] == '\t' || p.s[p.i] == '\n' || p.s[p.i] == '\r') {
		p.i++
	}
}

// word consumes and returns the longest run of bytes that in accepts.
func (p *selectorScanner) word(in func(byte) bool) string {
	start := p.i
	for !p.done() && in(p.s[p.i]) {
		p.i++
	}
	return p.s[start:p.i]
}

// quoted consumes a double-quoted Go string literal and returns its value.
func (p *selectorScanner) quoted() (string, error) {
	if !p.take('"') {
		return "", fmt.Errorf("at %q: the value must be double-quoted", p.rest())
	}
	start := p.i - 1
	for !p.done() {
		switch p.s[p.i] {
		case '\\':
			p.i += 2
			continue
		case '"':
			p.i++
			lit := p.s[start:p.i]
			v, err := strconv.Unquote(lit)
			if err != nil {
				return "", fmt.Errorf("value %s is not a valid Go string literal (escapes are those of Go: \\\" \\\\ \\n \\t \\u00e9 ...)", lit)
			}
			return v, nil
		}
		p.i++
	}
	return "", fmt.Errorf("value %s has no closing quote", p.s[start:])
}

// IsNameByte reports whether c may appear in a classic metric name.
func IsNameByte(c byte) bool { return isLabelByte(c) || c == ':' }

// isLabelByte reports whether c may appear in a classic label name.
func isLabelByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}
