package gauge

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/swell-run/swell/pkg/series"
	"github.com/swell-run/swell/pkg/spelling"
)

// TestMissingParsedOnce checks that reading, again and again, a page of
// DefaultMaxBytes that lacks the selected family costs a scan of the page
// and not a parse of it and a spelling search through its families: the
// explanation, still with its suggestion, is worked out once.
func TestMissingParsedOnce(t *testing.T) {
	p := manyFamilies(DefaultMaxBytes)
	sel := series.Selector{Name: "app_requests_00012_total"}
	sc, why := newScratch(), new(explainer)
	_, first := sc.value(p, sel, why)
	const want = "none named app_requests_00012_total; did you mean app_requests_000012_total?"
	if !errors.Is(first, ErrMissing) || !strings.Contains(first.Error(), want) {
		t.Fatalf("value = %v; want an error wrapping %q that says %q", first, ErrMissing, want)
	}
	var again error
	allocs := testing.AllocsPerRun(5, func() { _, again = sc.value(p, sel, why) })
	if again == nil || again.Error() != first.Error() {
		t.Errorf("value again = %v; want %v", again, first)
	}
	if allocs > 10 {
		t.Errorf("reading the page again allocated %v times; want at most 10", allocs)
	}
}

// TestMissingReadAgain reads pages one after another with one explainer and
// checks what each is told, and whether it is told again what the page
// before it was, without a parse.
func TestMissingReadAgain(t *testing.T) {
	why := new(explainer)
	var last error
	for i, tc := range []struct {
		page, sel string
		want      error
		msg       string
		again     bool // the error of the read before, not worked out anew
	}{
		{page: "b 1\nc 2\n", sel: "a", want: ErrMissing, msg: "the page has 2 metric families, none named a"},
		// Values, series and blank lines are not the page's shape.
		{page: "b 7\n\nc 8\n", sel: "a", want: ErrMissing, msg: "the page has 2 metric families, none named a", again: true},
		{page: "b{x=\"1\"} 1\nb{x=\"2\"} 1\nc 8", sel: "a", want: ErrMissing, msg: "the page has 2 metric families, none named a", again: true},
		// Families and the selector are.
		{page: "b 1\nc 2\nd 3\n", sel: "a", want: ErrMissing, msg: "the page has 3 metric families, none named a"},
		{page: "b 1\nc 2\nd 3\n", sel: "dd", want: ErrMissing, msg: "none named dd; did you mean d?"},
		{page: "# TYPE b gauge\nb 1\nc 2\nd 3\n", sel: "dd", want: ErrMissing, msg: "none named dd; did you mean d?"},
		// A page that does not parse is told where, again while that
		// line is as it was.
		{page: "b 1\nc{\n", sel: "a", want: ErrNotNumber, msg: `line 2: `},
		{page: "b 2\nc{\n", sel: "a", want: ErrNotNumber, msg: `line 2: `, again: true},
		{page: "b 2\nc 3\n", sel: "a", want: ErrMissing, msg: "the page has 2 metric families, none named a"},
		// A page of the same families that no longer parses at a value
		// still has them, none named a.
		{page: "b 2\nc x\n", sel: "a", want: ErrMissing, msg: "the page has 2 metric families, none named a", again: true},
		{page: "<html>\n", sel: "a", want: ErrNotNumber, msg: `line 1: invalid metric name: "<html>"`},
		{page: "<body>\n", sel: "a", want: ErrNotNumber, msg: `line 1: invalid metric name: "<body>"`},
	} {
		sel, err := series.ParseSelector(tc.sel)
		if err != nil {
			t.Fatal(err)
		}
		_, got := newScratch().value([]byte(tc.page), sel, why)
		if !errors.Is(got, tc.want) || !strings.Contains(fmt.Sprint(got), tc.msg) {
			t.Errorf("%d: value(%q, %s) = %v; want an error wrapping %q that says %q", i, tc.page, tc.sel, got, tc.want, tc.msg)
		}
		if again := got == last; again != tc.again {
			t.Errorf("%d: value(%q, %s): told again what the page before was told: %v, want %v", i, tc.page, tc.sel, again, tc.again)
		}
		last = got
	}
}

// TestCandidates checks that leaving out the names that spelling.Suggest
// cannot suggest does not change what it suggests.
func TestCandidates(t *testing.T) {
	names := []string{
		"a", "ab", "abc", "abcd", "abcdefgh", "abcdefghijklmnop",
		"http_requests_total", "http_request_duration_seconds", "HTTP-Requests.In_Flight",
		"process_cpu_seconds_total", "queue_depth", "queue_depth_max", "queue_depth_max_seen",
		"vllm:kv_cache_usage_perc", "vllm:num_requests_running", "vllm:num_requests_waiting",
		"vllm:num_preemptions", "vllm:prompt_tokens_total", "vllm:time_to_first_token_seconds",
		"ça_va", "CA_VA_BIEN",
	}
	slices.Sort(names)
	for _, name := range []string{
		"a", "abd", "abcde", "abcdefg", "abcdefghijklmnopqrs", "abcdefghijklmnopqrstu",
		"http_requests", "http_requests_totl", "httpRequestsInFlight", "http_requests_in",
		"queue", "queue_dept", "queue_depth_m", "queue_depth_max_s", "QUEUE_DEPTH",
		"vllm:num_requests", "vllm:num_request_waiting", "vllm:kv_cache", "vllm:time_to_first",
		"vllm:num_preemption", "num_requests_waiting", "tokens", "ca", "cava", "ÇA_VA_B",
	} {
		if got, want := spelling.Suggest(name, candidates(name, names)), spelling.Suggest(name, names); got != want {
			t.Errorf("Suggest(%q) among candidates = %q; among all names %q", name, got, want)
		}
	}
}

// TestCandidatesBounded checks that a name is compared with at most
// maxCandidates names, and not with one it is too short or too long for.
func TestCandidatesBounded(t *testing.T) {
	var names []string
	for i := range 50_000 {
		names = append(names, fmt.Sprintf("app_requests_%06d_total", i))
	}
	names = append(names, "app_queue_depth", strings.Repeat("x", 1000))
	slices.Sort(names)
	if got := candidates("app_requests_00012_total", names); len(got) != maxCandidates {
		t.Errorf("%d candidates, want %d", len(got), maxCandidates)
	}
	if got := candidates("app_queue_dept", names); !slices.Equal(got, []string{"app_queue_depth"}) {
		t.Errorf("candidates = %q, want only app_queue_depth", got)
	}
	if got := candidates("x", names); len(got) != 0 {
		t.Errorf("candidates = %q, want none", got)
	}
}
