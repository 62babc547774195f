package gauge

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/swell-run/swell/pkg/series"
)

// vllmPage returns a page shaped like a vLLM server's /metrics: Python's
// process and GC families, vLLM's gauges, counters and histograms, and the
// HTTP server's per-handler histograms that make up most of its ~100 KB.
func vllmPage() []byte {
	var b bytes.Buffer
	const model = `model_name="meta-llama/Llama-3.1-8B-Instruct"`
	family := func(name, typ string) {
		fmt.Fprintf(&b, "# HELP %s Some help about %s.\n# TYPE %s %s\n", name, name, name, typ)
	}
	histogram := func(name, labels string, buckets []string) {
		for _, le := range buckets {
			fmt.Fprintf(&b, "%s_bucket{%s,le=\"%s\"} 42.0\n", name, labels, le)
		}
		fmt.Fprintf(&b, "%s_count{%s} 42.0\n%s_sum{%s} 17.25\n", name, labels, name, labels)
	}
	for _, gen := range []string{"0", "1", "2"} {
		fmt.Fprintf(&b, "python_gc_objects_collected_total{generation=%q} 1234.0\n", gen)
	}
	for _, name := range []string{"process_virtual_memory_bytes", "process_resident_memory_bytes", "process_start_time_seconds", "process_cpu_seconds_total", "process_open_fds", "process_max_fds"} {
		family(name, "gauge")
		fmt.Fprintf(&b, "%s 1.23456789e+09\n", name)
	}
	for _, name := range []string{"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:num_preemptions"} {
		family(name, "gauge")
		for _, engine := range []string{"0", "1"} {
			fmt.Fprintf(&b, "%s{engine=%q,%s} 3.0\n", name, engine, model)
		}
	}
	for _, name := range []string{"vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"} {
		family(name, "counter")
		fmt.Fprintf(&b, "%s{engine=\"0\",%s} 123456.0\n", name, model)
	}
	seconds := []string{"0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08", "0.1", "0.25", "0.5", "0.75", "1.0", "2.5", "5.0", "7.5", "10.0", "20.0", "40.0", "80.0", "160.0", "640.0", "2560.0", "+Inf"}
	for _, name := range []string{"vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds", "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds", "vllm:request_inference_time_seconds", "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds"} {
		family(name, "histogram")
		histogram(name, `engine="0",`+model, seconds)
	}
	tokens := []string{"1.0", "2.0", "5.0", "10.0", "20.0", "50.0", "100.0", "200.0", "500.0", "1000.0", "2000.0", "5000.0", "10000.0", "+Inf"}
	for _, name := range []string{"vllm:request_prompt_tokens", "vllm:request_generation_tokens", "vllm:iteration_tokens_total", "vllm:request_max_num_generation_tokens", "vllm:request_params_n", "vllm:request_params_max_tokens"} {
		family(name, "histogram")
		histogram(name, `engine="0",`+model, tokens)
	}
	family("http_requests_total", "counter")
	handlers := []string{"/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics", "/tokenize", "/detokenize", "/version", "/ping", "/v1/embeddings"}
	for _, h := range handlers {
		fmt.Fprintf(&b, "http_requests_total{handler=%q,method=\"POST\",status=\"2xx\"} 9876.0\n", h)
	}
	family("http_request_duration_highr_seconds", "histogram")
	highr := []string{"0.01", "0.025", "0.05", "0.075", "0.1", "0.25", "0.5", "0.75", "1.0", "1.5", "2.0", "2.5", "3.0", "3.5", "4.0", "4.5", "5.0", "7.5", "10.0", "30.0", "60.0", "+Inf"}
	for _, h := range handlers {
		for _, method := range []string{"GET", "POST"} {
			histogram("http_request_duration_highr_seconds", fmt.Sprintf("handler=%q,method=%q", h, method), highr)
		}
	}
	family("http_request_duration_seconds", "histogram")
	for b.Len() < 100_000 {
		for _, h := range handlers {
			histogram("http_request_duration_seconds", fmt.Sprintf("handler=%q,method=\"POST\",status=\"%dxx\"", h, b.Len()%5+1), highr[:8])
		}
	}
	return b.Bytes()
}

func TestVLLMPage(t *testing.T) {
	p := vllmPage()
	v, err := newScratch().value(p, series.Selector{Name: "vllm:num_requests_waiting", Labels: map[string]string{"engine": "1"}}, new(explainer))
	if err != nil || v != 3 {
		t.Fatalf("value = %v, %v; want 3", v, err)
	}
	if fams, err := newScratch().parser.TextToMetricFamilies(bytes.NewReader(p)); err != nil || len(fams) < 30 {
		t.Fatalf("the page does not parse as a whole, or has few families: %d, %v", len(fams), err)
	}
}

// BenchmarkScrape scrapes a ~100 KB vLLM-like page from a loopback server,
// as the queue-proxy does every second.
func BenchmarkScrape(b *testing.B) {
	p := vllmPage()
	srv := serve(b, page(string(p)))
	s := scraper(b, srv.URL+"/metrics", `vllm:num_requests_waiting{model_name="meta-llama/Llama-3.1-8B-Instruct"}`, Config{})
	b.ReportAllocs()
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		if v, err := s.Scrape(b.Context()); err != nil || v != 6 {
			b.Fatalf("Scrape = %v, %v; want 6", v, err)
		}
	}
}

// BenchmarkValue is BenchmarkScrape without HTTP: the page's cost alone.
func BenchmarkValue(b *testing.B) {
	p := vllmPage()
	sel := series.Selector{Name: "vllm:num_requests_waiting", Labels: map[string]string{"model_name": "meta-llama/Llama-3.1-8B-Instruct"}}
	sc, why := newScratch(), new(explainer)
	b.ReportAllocs()
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		if v, err := sc.value(p, sel, why); err != nil || v != 6 {
			b.Fatalf("value = %v, %v; want 6", v, err)
		}
	}
}

// BenchmarkParseWholePage is what value would cost if it parsed the whole
// page: the reason it does not.
func BenchmarkParseWholePage(b *testing.B) {
	p := vllmPage()
	sc := newScratch()
	b.ReportAllocs()
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		if _, err := sc.parser.TextToMetricFamilies(bytes.NewReader(p)); err != nil {
			b.Fatal(err)
		}
	}
}

// manyFamilies returns a page of size bytes or a little less made of
// distinct untyped families of one series each, the most families a page
// of that size holds with names of a usual length: an app that exports a
// family per route or per tenant.
func manyFamilies(size int) []byte {
	var b bytes.Buffer
	for i := 0; ; i++ {
		n := b.Len()
		fmt.Fprintf(&b, "app_requests_%06d_total %d\n", i, i%97)
		if b.Len() > size {
			b.Truncate(n)
			return b.Bytes()
		}
	}
}

// BenchmarkValueMissing reads a page of DefaultMaxBytes that lacks the
// selected family, misspelt, as the queue-proxy does every second while
// the selector is wrong: the reads after the first, which explained why.
func BenchmarkValueMissing(b *testing.B) {
	p := manyFamilies(DefaultMaxBytes)
	sel := series.Selector{Name: "app_requests_00012_total"}
	sc, why := newScratch(), new(explainer)
	sc.value(p, sel, why)
	b.ReportAllocs()
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		if _, err := sc.value(p, sel, why); !errors.Is(err, ErrMissing) {
			b.Fatalf("value = %v; want an error wrapping %q", err, ErrMissing)
		}
	}
}

// BenchmarkValueMissingFirst is BenchmarkValueMissing's first read: the
// page's first, or the first since its families changed.
func BenchmarkValueMissingFirst(b *testing.B) {
	p := manyFamilies(DefaultMaxBytes)
	sel := series.Selector{Name: "app_requests_00012_total"}
	sc := newScratch()
	b.ReportAllocs()
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		if _, err := sc.value(p, sel, new(explainer)); !errors.Is(err, ErrMissing) {
			b.Fatalf("value = %v; want an error wrapping %q", err, ErrMissing)
		}
	}
}
