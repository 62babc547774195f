package gauge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/swell-run/swell/pkg/series"
)

// serve starts a loopback server for h, closed when the test ends.
func serve(t testing.TB, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// page serves body as the text format.
func page(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		io.WriteString(w, body)
	}
}

// scraper returns a Scraper of the selector sel at u, cfg filling in the rest.
func scraper(t testing.TB, u, sel string, cfg Config) *Scraper {
	t.Helper()
	var err error
	cfg.URL = u
	if cfg.Selector, err = series.ParseSelector(sel); err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const vllm = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="llama"} 4.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="llama"} 7.0
vllm:num_requests_waiting{engine="1",model_name="llama"} 2.0
vllm:num_requests_waiting{engine="0",model_name="qwen"} 5.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="llama"} 1234.0
# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine="0",le="0.3",model_name="llama"} 1.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="llama"} 3.0
vllm:e2e_request_latency_seconds_count{engine="0",model_name="llama"} 3.0
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="llama"} 2.5
# HELP rpc_duration_seconds A summary.
# TYPE rpc_duration_seconds summary
rpc_duration_seconds{quantile="0.5"} 0.2
rpc_duration_seconds_sum 17
rpc_duration_seconds_count 40
queue_depth 3
`

func TestScrape(t *testing.T) {
	srv := serve(t, page(vllm))
	for _, tc := range []struct {
		sel  string
		want float64
	}{
		{"vllm:num_requests_running", 4},                                  // a gauge
		{"queue_depth", 3},                                                // untyped
		{"vllm:prompt_tokens_total", 1234},                                // a counter
		{`vllm:num_requests_waiting{model_name="qwen"}`, 5},               // one series of three
		{`vllm:num_requests_waiting{model_name="llama"}`, 9},              // the sum of two
		{`vllm:num_requests_waiting{engine="1", model_name="llama"}`, 2},  // two labels
		{"vllm:num_requests_waiting", 14},                                 // every series
		{`vllm:num_requests_waiting{lora=""}`, 14},                        // "" matches absent
		{`vllm:num_requests_running{engine="0",model_name="llama"}`, 4.0}, // the full label set
	} {
		got, err := scraper(t, srv.URL+"/metrics", tc.sel, Config{}).Scrape(t.Context())
		if err != nil || got != tc.want {
			t.Errorf("Scrape %s = %v, %v; want %v", tc.sel, got, err, tc.want)
		}
	}
}

// TestScrapePages reads pages that are unusual but readable.
func TestScrapePages(t *testing.T) {
	for _, tc := range []struct {
		name, contentType, body, sel string
		want                         float64
	}{
		{"OpenMetrics", "application/openmetrics-text; version=1.0.0; charset=utf-8",
			"# TYPE a gauge\n# UNIT a requests\na 3\n# TYPE c counter\nc_total 5\nc_created 1.7e9\n# EOF\n", "a", 3},
		{"OpenMetrics counter", "application/openmetrics-text; version=1.0.0; charset=utf-8",
			"# TYPE c counter\nc_total 5\nc_created 1.7e9\n# EOF\n", "c_total", 5},
		{"no Content-Type", "", "a 1\n", "a", 1},
		{"other families malformed", "text/plain", "b{ 1\n# TYPE a gauge\na 2\nc x\n# TYPE d foo\n", "a", 2},
		{"timestamp, blanks and comments", "text/plain", "# a comment\n\n  a{x=\"1\"}\t2 1700000000000\n", "a", 2},
		{"zero and negative zero", "text/plain", "a{x=\"1\"} 0\na{x=\"2\"} -0\n", "a", 0},
		{"quoted UTF-8 name", "text/plain", "{\"a\",x=\"1\"} 6\n", "a", 6},
		{"no final newline", "text/plain", "b 1\na 7", "a", 7},
		{"name prefixes another", "text/plain", "ab 1\na_b 2\na 3\na_bucket 4\n", "a", 3},
	} {
		srv := serve(t, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", tc.contentType)
			io.WriteString(w, tc.body)
		})
		got, err := scraper(t, srv.URL, tc.sel, Config{}).Scrape(t.Context())
		if err != nil || got != tc.want {
			t.Errorf("%s: Scrape %s = %v, %v; want %v", tc.name, tc.sel, got, err, tc.want)
		}
	}
}

// TestScrapeErrors checks that each way an app can go wrong gets its own
// error, which says what was seen.
func TestScrapeErrors(t *testing.T) {
	for _, tc := range []struct {
		name        string
		status      int
		contentType string
		body, sel   string
		want        error
		msg         string
	}{
		{name: "garbage", body: "<html><body>hello</body></html>\n", sel: "a", contentType: "text/html",
			want: ErrNotNumber, msg: `line 1: invalid metric name: "<html><body>hello</body></html>" (Content-Type text/html)`},
		{name: "value not a number", body: "# TYPE a gauge\nb 1\na{x=\"1\"} many\n", sel: "a",
			want: ErrNotNumber, msg: `line 3: expected float as value, got "many": "a{x=\"1\"} many"`},
		{name: "second TYPE", body: "# TYPE a gauge\na 1\n# TYPE a gauge\n", sel: "a",
			want: ErrNotNumber, msg: `line 3: second TYPE line for metric name "a"`},
		{name: "OpenMetrics type", body: "# TYPE a unknown\na 1\n# EOF\n", sel: "a",
			want: ErrNotNumber, msg: `line 1: unknown metric type "unknown"`},
		{name: "protobuf", contentType: "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited",
			body: "\x05\n\x01a", sel: "a", want: ErrNotNumber, msg: "the app answered in protobuf"},
		{name: "missing, misspelt", body: vllm, sel: "vllm:num_request_waiting",
			want: ErrMissing, msg: "the page has 6 metric families, none named vllm:num_request_waiting; did you mean vllm:num_requests_waiting?"},
		{name: "missing, no namespace", body: vllm, sel: "num_requests_running",
			want: ErrMissing, msg: "did you mean vllm:num_requests_running?"},
		{name: "missing, OpenMetrics counter", body: "c_total 1\n", sel: "c",
			want: ErrMissing, msg: "the page has 1 metric families, none named c; did you mean c_total?"},
		{name: "missing, nothing close", body: vllm, sel: "tokens",
			want: ErrMissing, msg: "the page has 6 metric families, none named tokens\n"},
		{name: "missing, no final newline", body: "b 1", sel: "a",
			want: ErrMissing, msg: "the page has 1 metric families, none named a"},
		{name: "empty", body: "", sel: "a",
			want: ErrMissing, msg: "the page has 0 metric families, none named a"},
		{name: "labels match nothing", body: vllm, sel: `vllm:num_requests_waiting{model_name="mistral"}`,
			want: ErrMissing, msg: `none of the 3 series of vllm:num_requests_waiting matches vllm:num_requests_waiting{model_name="mistral"}; ` +
				`they are vllm:num_requests_waiting{engine="0", model_name="llama"}, vllm:num_requests_waiting{engine="0", model_name="qwen"}, ` +
				`vllm:num_requests_waiting{engine="1", model_name="llama"}`},
		{name: "missing, page malformed", body: "b 1\nc{\n", sel: "a",
			want: ErrNotNumber, msg: "line 2: "},
		{name: "NaN", body: "a NaN\n", sel: "a", want: ErrNotFinite, msg: "a is NaN"},
		{name: "+Inf", body: "a{x=\"1\"} +Inf\n", sel: "a", want: ErrNotFinite, msg: `a{x="1"} is +Inf`},
		{name: "-Inf", body: "a -Inf\n", sel: "a", want: ErrNotFinite, msg: "a is -Inf"},
		{name: "sum overflows", body: "a{x=\"1\"} 1e308\na{x=\"2\"} 1e308\n", sel: "a", want: ErrNotFinite, msg: "the 2 series sum to +Inf"},
		{name: "negative", body: "a{x=\"1\"} 3\na{x=\"2\"} -1\n", sel: "a", want: ErrNegative, msg: `a{x="2"} is -1`},
		{name: "histogram", body: vllm, sel: "vllm:e2e_request_latency_seconds",
			want: ErrType, msg: "vllm:e2e_request_latency_seconds is a histogram; accepted is a gauge, a counter or an untyped metric"},
		{name: "histogram's count", body: vllm, sel: "vllm:e2e_request_latency_seconds_count",
			want: ErrType, msg: "vllm:e2e_request_latency_seconds_count is part of the histogram vllm:e2e_request_latency_seconds"},
		{name: "summary", body: vllm, sel: "rpc_duration_seconds", want: ErrType, msg: "rpc_duration_seconds is a summary"},
		{name: "summary's sum", body: vllm, sel: "rpc_duration_seconds_sum", want: ErrType, msg: "is part of the summary rpc_duration_seconds"},
		{name: "500", status: 500, body: "engine dead", sel: "a", want: ErrStatus, msg: `the app answered 500 Internal Server Error: "engine dead"`},
		{name: "404", status: 404, body: strings.Repeat("x", 1000), sel: "a", want: ErrStatus, msg: `404 Not Found: "xxx`},
	} {
		srv := serve(t, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", tc.contentType)
			if tc.status != 0 {
				w.WriteHeader(tc.status)
			}
			io.WriteString(w, tc.body)
		})
		got, err := scraper(t, srv.URL, tc.sel, Config{}).Scrape(t.Context())
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: Scrape = %v, %v; want an error wrapping %q", tc.name, got, err, tc.want)
			continue
		}
		prefix := fmt.Sprintf("gauge: scrape %s for %s: ", srv.URL, tc.sel)
		if msg := err.Error() + "\n"; !strings.HasPrefix(msg, prefix) || !strings.Contains(msg, tc.msg) {
			t.Errorf("%s: Scrape error\n%s\nwant it to start with %q and contain %q", tc.name, err, prefix, tc.msg)
		}
	}
}

// TestScrapeHang checks that an app that does not answer, or stops midway,
// costs a scrape its Timeout and no more.
func TestScrapeHang(t *testing.T) {
	for _, tc := range []struct {
		name string
		// before is written and flushed before the handler hangs.
		before string
	}{
		{"no answer", ""},
		{"half a page", "# TYPE a gauge\na{x=\"1\"} 1\na{x="},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stop := make(chan struct{})
			srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
				if tc.before != "" {
					io.WriteString(w, tc.before)
					w.(http.Flusher).Flush()
				}
				select {
				case <-stop:
				case <-r.Context().Done():
				}
			})
			t.Cleanup(func() { close(stop) }) // before srv.Close, which waits for the handler
			s := scraper(t, srv.URL, "a", Config{Timeout: 50 * time.Millisecond})
			start := time.Now()
			_, err := s.Scrape(t.Context())
			elapsed := time.Since(start)
			if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no complete answer within 50ms") {
				t.Errorf("Scrape = %v, want an error wrapping context.DeadlineExceeded", err)
			}
			// Generous: the point is that it ends, not how precisely.
			if elapsed > 2*time.Second {
				t.Errorf("Scrape took %v with a Timeout of 50ms", elapsed)
			}
		})
	}
}

// TestScrapeCanceled checks that a scrape ends with its caller's context,
// and says so rather than calling it a timeout.
func TestScrapeCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		cancel()
		<-r.Context().Done()
	})
	_, err := scraper(t, srv.URL, "a", Config{}).Scrape(ctx)
	if !errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Scrape = %v, want an error wrapping context.Canceled", err)
	}
}

// countingTransport counts the bytes read from the bodies it returns.
type countingTransport struct {
	base http.RoundTripper
	read atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(r)
	if err == nil {
		resp.Body = countingBody{resp.Body, &c.read}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// TestScrapeTooLarge checks that an endless body is refused after MaxBytes,
// not buffered, and that a declared one is refused before it is read.
func TestScrapeTooLarge(t *testing.T) {
	const maxBytes = 64 << 10
	line := []byte("a{x=\"" + strings.Repeat("y", 100) + "\"} 1\n")
	endless := serve(t, func(w http.ResponseWriter, _ *http.Request) {
		for {
			if _, err := w.Write(line); err != nil {
				return // the scraper hung up
			}
		}
	})
	declared := serve(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(100<<20))
		for range 100 << 20 / len(line) {
			if _, err := w.Write(line); err != nil {
				return
			}
		}
	})
	for _, tc := range []struct {
		name, url, msg string
		maxRead        int64
	}{
		{"endless", endless.URL, "the body is longer than MaxBytes (65536 bytes); stopped reading there", maxBytes + 1},
		{"Content-Length", declared.URL, "the body is 104857600 bytes (Content-Length); MaxBytes is 65536", 0},
	} {
		s := scraper(t, tc.url, "a", Config{MaxBytes: maxBytes, Timeout: 10 * time.Second})
		counter := &countingTransport{base: s.client.Transport}
		s.client.Transport = counter
		_, err := s.Scrape(t.Context())
		if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: Scrape = %v, want an error wrapping ErrTooLarge saying %q", tc.name, err, tc.msg)
		}
		if n := counter.read.Load(); n > tc.maxRead {
			t.Errorf("%s: Scrape read %d bytes of the body, want at most %d", tc.name, n, tc.maxRead)
		}
	}
}

// TestScrapeBodyAtMaxBytes checks the bound is inclusive.
func TestScrapeBodyAtMaxBytes(t *testing.T) {
	body := "a 1\n"
	srv := serve(t, page(body))
	if v, err := scraper(t, srv.URL, "a", Config{MaxBytes: int64(len(body))}).Scrape(t.Context()); err != nil || v != 1 {
		t.Errorf("Scrape of a body of MaxBytes = %v, %v; want 1", v, err)
	}
	if _, err := scraper(t, srv.URL, "a", Config{MaxBytes: int64(len(body) - 1)}).Scrape(t.Context()); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Scrape of a body of MaxBytes+1 = %v, want ErrTooLarge", err)
	}
}

func TestScrapeRedirect(t *testing.T) {
	other := serve(t, page("a 2\n"))
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics": // as a Python ASGI mount does
			http.Redirect(w, r, "/metrics/", http.StatusTemporaryRedirect)
		case "/metrics/":
			page("a 1\n")(w, r)
		case "/other-port":
			http.Redirect(w, r, other.URL+"/metrics", http.StatusFound)
		case "/other-host":
			http.Redirect(w, r, "http://example.com/metrics", http.StatusFound)
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		}
	})
	if v, err := scraper(t, srv.URL+"/metrics", "a", Config{}).Scrape(t.Context()); err != nil || v != 1 {
		t.Errorf("Scrape through a redirect on the same host = %v, %v; want 1", v, err)
	}
	host := strings.TrimPrefix(srv.URL, "http://")
	for path, msg := range map[string]string{
		"/other-port": "redirect to " + other.URL + "/metrics refused: redirects are followed on " + host + " only",
		"/other-host": "redirect to http://example.com/metrics refused: redirects are followed on " + host + " only",
		"/loop":       "redirect to " + srv.URL + "/loop refused: 3 redirects already",
	} {
		_, err := scraper(t, srv.URL+path, "a", Config{}).Scrape(t.Context())
		if err == nil || !strings.HasSuffix(err.Error(), msg) {
			t.Errorf("Scrape %s = %v, want an error ending %q", path, err, msg)
		}
	}
}

// TestScrapeRequest checks what the app is asked, and that one connection
// serves every scrape.
func TestScrapeRequest(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got := r.Header.Get("Accept"); got != accept {
			t.Errorf("Accept: %q, want %q", got, accept)
		}
		if got := r.Header.Get("Accept-Encoding"); got != "" {
			t.Errorf("Accept-Encoding: %q, want none", got)
		}
		page("a 1\n")(w, r)
	}))
	srv.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	s := scraper(t, srv.URL, "a", Config{})
	for range 5 {
		if _, err := s.Scrape(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("5 scrapes opened %d connections, want 1", n)
	}
	if tr := s.client.Transport.(*http.Transport); tr.Proxy != nil {
		t.Error("the Scraper's own client uses a proxy")
	}
}

// TestScrapeConcurrent checks a Scraper may be shared (run with -race).
func TestScrapeConcurrent(t *testing.T) {
	srv := serve(t, page(vllm))
	s := scraper(t, srv.URL, `vllm:num_requests_waiting{model_name="llama"}`, Config{})
	misspelt := scraper(t, srv.URL, "vllm:num_request_waiting", Config{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				if v, err := s.Scrape(t.Context()); err != nil || v != 9 {
					t.Errorf("Scrape = %v, %v; want 9", v, err)
					return
				}
			}
		})
		wg.Go(func() {
			for range 20 {
				if _, err := misspelt.Scrape(t.Context()); !errors.Is(err, ErrMissing) {
					t.Errorf("Scrape = %v; want an error wrapping %q", err, ErrMissing)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestLoopbackOnly(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:80":          true,
		"127.3.2.1:80":          true,
		"[::1]:80":              true,
		"[::ffff:127.0.0.1]:80": true,
		"10.0.0.1:80":           false,
		"[::2]:80":              false,
		"0.0.0.0:80":            false,
		"localhost:80":          false, // dialed addresses are resolved
	} {
		if err := loopbackOnly("tcp", addr, nil); (err == nil) != ok {
			t.Errorf("loopbackOnly(%s) = %v, want ok %v", addr, err, ok)
		}
	}
}

func TestNew(t *testing.T) {
	sel := series.Selector{Name: "a"}
	for _, u := range []string{
		"http://127.0.0.1:8080/metrics",
		"http://127.1.2.3/metrics",
		"http://[::1]:8080/metrics",
		"http://localhost:9090/metrics?x=1",
		"http://LOCALHOST/",
	} {
		if _, err := New(Config{URL: u, Selector: sel}); err != nil {
			t.Errorf("New(%s): %v", u, err)
		}
	}
	s, err := New(Config{URL: "http://127.0.0.1/", Selector: sel})
	if err != nil {
		t.Fatal(err)
	}
	if s.timeout != DefaultTimeout || s.maxBytes != DefaultMaxBytes {
		t.Errorf("New with no Timeout nor MaxBytes: %v, %d; want %v, %d", s.timeout, s.maxBytes, DefaultTimeout, DefaultMaxBytes)
	}
}

func TestNewRefuses(t *testing.T) {
	sel := series.Selector{Name: "a"}
	const url = "http://127.0.0.1:8080/metrics"
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{URL: "http://10.0.0.1:8080/metrics", Selector: sel}, "host 10.0.0.1 is not this machine's loopback; accepted is http://HOST:PORT/PATH"},
		{Config{URL: "http://example.com/metrics", Selector: sel}, "host example.com is not"},
		{Config{URL: "http://localhost.example.com/metrics", Selector: sel}, "host localhost.example.com is not"},
		{Config{URL: "http://127.0.0.1.nip.io/metrics", Selector: sel}, "host 127.0.0.1.nip.io is not"},
		{Config{URL: "http://[::2]/metrics", Selector: sel}, "host ::2 is not"},
		{Config{URL: "http://0.0.0.0/metrics", Selector: sel}, "host 0.0.0.0 is not"},
		{Config{URL: "https://127.0.0.1/metrics", Selector: sel}, `scheme "https"`},
		{Config{URL: "127.0.0.1:8080/metrics", Selector: sel}, "does not parse"},
		{Config{URL: "/metrics", Selector: sel}, `scheme ""`},
		{Config{URL: "http:///metrics", Selector: sel}, "has no host"},
		{Config{URL: url}, "Selector has no metric name"},
		{Config{URL: url, Selector: series.Selector{Name: "a-b"}}, `Selector name "a-b" is not a metric name`},
		{Config{URL: url, Selector: series.Selector{Name: "a", Labels: map[string]string{"b c": ""}}}, `Selector label "b c" is not a label name`},
		{Config{URL: url, Selector: sel, Timeout: -1}, "Timeout -1ns: accepted is a positive duration, or 0 for 500ms"},
		{Config{URL: url, Selector: sel, MaxBytes: -1}, "MaxBytes -1: accepted is a positive number of bytes, or 0 for 1048576"},
	} {
		_, err := New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error containing %q", tc.cfg, err, tc.want)
		}
	}
	// Every problem at once.
	_, err := New(Config{URL: "http://10.0.0.1/", Timeout: -1, MaxBytes: -1})
	for _, want := range []string{"10.0.0.1", "Selector", "Timeout", "MaxBytes"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New with four problems = %v, want it to mention %s", err, want)
		}
	}
}

// FuzzScrapeBody checks that whatever the app answers, reading it does not
// panic and gives a finite value of 0 or more, or one of the package's
// errors.
func FuzzScrapeBody(f *testing.F) {
	for _, body := range []string{
		vllm,
		"",
		"a 1\n",
		"a NaN\n",
		"a -1\n",
		"a{x=\"1\"} 1e308\na{x=\"2\"} 1e308\n",
		"# TYPE a histogram\na_bucket{le=\"+Inf\"} 1\na_count 1\na_sum 2\n",
		"# TYPE a summary\na{quantile=\"0.5\"} 1\na_count 1\na_sum 2\n",
		"# TYPE a gauge_histogram\na_bucket{le=\"1\"} 1\n",
		"# TYPE a gauge\n# HELP a x\na 1 1700000000000\n",
		"{\"a\",x=\"1\"} 6\n",
		"\"a\"{x=\"1\"} 6\n",
		"# TYPE \"a\" gauge\n{\"a\"} 1\n",
		"a{x=\"\\q\"} 1\n",
		"a{x=\"1\n\"} 1\n",
		"<html>\n",
		"a 1\r\n",
		"# TYPE a counter\na_total 3\n# EOF\n",
		"b{ 1\na 2\n",
	} {
		f.Add([]byte(body))
	}
	sels := []series.Selector{{Name: "a"}, {Name: "a_count"}, {Name: "a", Labels: map[string]string{"x": "1"}}}
	sc, why := newScratch(), new(explainer)
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, sel := range sels {
			v, err := sc.value(body, sel, why)
			switch {
			case err == nil && (math.IsNaN(v) || math.IsInf(v, 0) || v < 0):
				t.Fatalf("value(%q, %s) = %v, want a finite number >= 0", body, sel, v)
			case err != nil && !isSentinel(err):
				t.Fatalf("value(%q, %s) = %v, want one of the package's errors", body, sel, err)
			}
		}
	})
}

func isSentinel(err error) bool {
	for _, s := range []error{ErrMissing, ErrNotNumber, ErrType, ErrNotFinite, ErrNegative, ErrTooLarge, ErrStatus} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}
