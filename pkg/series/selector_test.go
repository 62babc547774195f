package series

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseSelector(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Selector
	}{
		{"num_requests_waiting", Selector{Name: "num_requests_waiting"}},
		{"vllm:num_requests_waiting", Selector{Name: "vllm:num_requests_waiting"}},
		{"  _x  ", Selector{Name: "_x"}},
		{"up{}", Selector{Name: "up"}},
		{`vllm:num_requests_waiting{model_name="llama"}`,
			Selector{Name: "vllm:num_requests_waiting", Labels: map[string]string{"model_name": "llama"}}},
		{` q { b = "2" , a="1", } `, Selector{Name: "q", Labels: map[string]string{"a": "1", "b": "2"}}},
		{`q{a=""}`, Selector{Name: "q", Labels: map[string]string{"a": ""}}},
		{`q{a="x\"y\\z\n\u00e9"}`, Selector{Name: "q", Labels: map[string]string{"a": "x\"y\\z\né"}}},
		{`q{a="}{,="}`, Selector{Name: "q", Labels: map[string]string{"a": "}{,="}}},
	} {
		got, err := ParseSelector(tc.in)
		if err != nil {
			t.Errorf("ParseSelector(%q): %v", tc.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseSelector(%q) = %#v, want %#v", tc.in, got, tc.want)
		}
	}
}

func TestParseSelectorErrors(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{"", `selector "": empty; accepted is a metric name`},
		{"   ", "empty"},
		{"\xff", "not valid UTF-8"},
		{"9lives", `metric name "9lives" does not start with a letter, _ or :`},
		{"-x", `at "-x": a metric name starts with a letter, _ or :`},
		{`{a="b"}`, "no metric name before {"},
		{"a b", `unexpected "b" after the metric name`},
		{"a.b", `unexpected ".b" after the metric name`},
		{`a{b="c"`, "missing }"},
		{`a{b="c",`, "missing }"},
		{`a{`, "missing }"},
		{`a{b!="c"}`, "label b: operator !=: only = is accepted"},
		{`a{b=~"c"}`, "label b: operator =~: only = is accepted"},
		{`a{b!~"c"}`, "label b: operator !~: only = is accepted"},
		{`a{b}`, "label b: expected = after the label name"},
		{`a{b:c="d"}`, "label b: expected = after the label name"},
		{`a{1b="c"}`, `at "1b=\"c\"}": expected a label name`},
		{`a{="c"}`, `expected a label name`},
		{`a{__name__="c"}`, "label __name__: write the metric name before the braces"},
		{`a{b=c}`, `label b: at "c}": the value must be double-quoted`},
		{`a{b='c'}`, `label b: at "'c'}": the value must be double-quoted`},
		{`a{b="c}`, `label b: value "c} has no closing quote`},
		{`a{b="\q"}`, `label b: value "\q" is not a valid Go string literal`},
		{`a{b="c" d="e"}`, `at "d=\"e\"}": expected , or } after a label match`},
		{`a{b="c", b="d"}`, "label b matched twice"},
		{`a{b="c"} x`, `unexpected "x" after }`},
		{`a{b="c",,}`, `at ",}": expected a label name`},
	} {
		_, err := ParseSelector(tc.in)
		if err == nil {
			t.Errorf("ParseSelector(%q) = nil error, want %q", tc.in, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || !strings.HasSuffix(err.Error(), accepted) {
			t.Errorf("ParseSelector(%q) = %q\nwant it to contain %q and end with what is accepted", tc.in, err, tc.want)
		}
	}
}

func TestSelectorString(t *testing.T) {
	for _, tc := range []struct {
		sel  Selector
		want string
	}{
		{Selector{Name: "a"}, "a"},
		{Selector{Name: "a", Labels: map[string]string{}}, "a"},
		{Selector{Name: "a", Labels: map[string]string{"z": "1", "b": "x\"\n"}}, `a{b="x\"\n", z="1"}`},
	} {
		if got := tc.sel.String(); got != tc.want {
			t.Errorf("%#v.String() = %s, want %s", tc.sel, got, tc.want)
		}
	}
}

// FuzzParseSelector checks that what ParseSelector accepts prints, with
// String, as a selector that parses back to the same one.
func FuzzParseSelector(f *testing.F) {
	for _, s := range []string{
		"num_requests_waiting",
		`vllm:num_requests_waiting{model_name="llama"}`,
		` q { b = "2" , a="1", } `,
		`q{a=""}`,
		`q{a="x\"y\\z\n\u00e9\x00\377"}`,
		`a{b!="c"}`,
		`a{b="c"`,
		"\xff",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sel, err := ParseSelector(s)
		if err != nil {
			return
		}
		printed := sel.String()
		again, err := ParseSelector(printed)
		if err != nil {
			t.Fatalf("ParseSelector(%q) = %#v, whose String %q does not parse: %v", s, sel, printed, err)
		}
		if !reflect.DeepEqual(again, sel) {
			t.Fatalf("ParseSelector(%q) = %#v, but its String %q parses to %#v", s, sel, printed, again)
		}
		if err := sel.Validate(); err != nil {
			t.Fatalf("ParseSelector(%q) = %#v, which New would refuse: %v", s, sel, err)
		}
	})
}
