package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/swell-run/swell/pkg/trace"
)

// counter is a test server's handler that counts requests and the most
// it held at once, then answers with next (200 "ok" when nil).
type counter struct {
	hits, inflight, maxInflight atomic.Int64
	next                        func(n int64, w http.ResponseWriter, r *http.Request)
}

func (c *counter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := c.hits.Add(1)
	cur := c.inflight.Add(1)
	for {
		m := c.maxInflight.Load()
		if cur <= m || c.maxInflight.CompareAndSwap(m, cur) {
			break
		}
	}
	// Decrement before the response is written: the client cannot see
	// the answer, and send its next request, before it is counted out.
	defer c.inflight.Add(-1)
	if c.next != nil {
		c.next(n, w, r)
		return
	}
	_, _ = io.WriteString(w, "ok")
}

func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func run(t *testing.T, o Config) Result {
	t.Helper()
	res, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestFixedRateSendsExactlyRateTimesDuration(t *testing.T) {
	c := &counter{}
	res := run(t, Config{URL: serve(t, c), Rate: 200, Duration: 500 * ms})
	if got := c.hits.Load(); got != 100 {
		t.Errorf("server saw %d requests, want 200/s × 0.5s = 100", got)
	}
	if res.Requests != 100 || res.Planned != 100 || res.Successes != 100 || res.StatusCodes[200] != 100 {
		t.Errorf("result: %d requests, %d planned, %d ok, codes %v; want 100 each", res.Requests, res.Planned, res.Successes, res.StatusCodes)
	}
	// The 100th request is due at 500ms and cannot leave earlier, so the
	// achieved rate cannot exceed the target. How close to it the rate
	// comes depends on the machine's load: that is the bench harness's to
	// measure, not this test's.
	if res.Duration < 500*ms || res.Rate > 200 {
		t.Errorf("duration %s, rate %g/s: want at least 500ms and at most 200/s", res.Duration, res.Rate)
	}
	if res.TargetRate != 200 || res.Mode != ModeRate {
		t.Errorf("mode %s target %g, want rate 200", res.Mode, res.TargetRate)
	}
	if res.BytesIn != 200 || res.Latency.Max <= 0 || res.Latency.P50 > res.Latency.Max {
		t.Errorf("bytes in %d (want 100 × 2), latency %+v", res.BytesIn, res.Latency)
	}
}

func TestFixedRateRequests(t *testing.T) {
	c := &counter{}
	res := run(t, Config{URL: serve(t, c), Rate: 1000, Requests: 50})
	if c.hits.Load() != 50 || res.Requests != 50 {
		t.Errorf("server saw %d, result %d; want 50", c.hits.Load(), res.Requests)
	}
}

// barrier releases its waiters once n of them wait, so a server holding
// requests in it shows how many the client really keeps in flight.
type barrier struct {
	mu      sync.Mutex
	n       int
	waiting int
	gate    chan struct{}
}

func (b *barrier) wait(ctx context.Context) {
	b.mu.Lock()
	if b.gate == nil {
		b.gate = make(chan struct{})
	}
	gate := b.gate
	b.waiting++
	if b.waiting == b.n {
		close(gate)
		b.gate, b.waiting = nil, 0
	}
	b.mu.Unlock()
	select {
	case <-gate:
	case <-ctx.Done():
	}
}

func TestClosedLoopKeepsWorkersInFlight(t *testing.T) {
	const workers = 4
	b := &barrier{n: workers}
	c := &counter{next: func(_ int64, w http.ResponseWriter, r *http.Request) {
		b.wait(r.Context())
	}}
	// The timeout only bounds a broken run: with fewer than 4 requests in
	// flight the barrier never opens.
	res := run(t, Config{URL: serve(t, c), Workers: workers, Requests: 3 * workers, Timeout: 5 * time.Second})
	if got := c.maxInflight.Load(); got != workers {
		t.Errorf("server held at most %d requests at once, want exactly %d", got, workers)
	}
	if c.hits.Load() != 3*workers || res.Requests != 3*workers || res.Successes != 3*workers {
		t.Errorf("server saw %d, result %d requests (%d ok), want %d", c.hits.Load(), res.Requests, res.Successes, 3*workers)
	}
	if res.Mode != ModeClosed || res.Workers != workers || res.TargetRate != 0 {
		t.Errorf("mode %s workers %d target %g", res.Mode, res.Workers, res.TargetRate)
	}
}

func TestClosedLoopDuration(t *testing.T) {
	c := &counter{}
	res := run(t, Config{URL: serve(t, c), Workers: 2, Duration: 100 * ms})
	if c.maxInflight.Load() > 2 {
		t.Errorf("server held %d at once with 2 workers", c.maxInflight.Load())
	}
	if res.Requests == 0 || res.Requests != uint64(c.hits.Load()) || res.Planned != 0 {
		t.Errorf("result %d requests (planned %d), server saw %d", res.Requests, res.Planned, c.hits.Load())
	}
}

func TestTraceReplayCarriesServiceTime(t *testing.T) {
	var mu sync.Mutex
	var sleeps []string
	c := &counter{next: func(_ int64, w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.URL.Query().Get("x") != "1" {
			t.Errorf("request %s lost the URL's own query", r.URL)
		}
		sleeps = append(sleeps, r.URL.Query().Get(SleepParam))
	}}
	recs := []trace.Record{
		{Arrival: 0, ServiceTime: 1 * ms},
		{Arrival: 20 * ms, ServiceTime: 2 * ms},
		{Arrival: 40 * ms, ServiceTime: 1500 * time.Microsecond},
		{Arrival: 60 * ms, ServiceTime: 4 * ms},
		{Arrival: 80 * ms, ServiceTime: 5 * ms},
		{Arrival: 10 * time.Second},
	}
	res := run(t, Config{URL: serve(t, c) + "/?x=1", Trace: recs, Speed: 2, Duration: 45 * ms, ServiceTime: true})
	sort.Strings(sleeps)
	want := []string{"1500us", "1ms", "2ms", "4ms", "5ms"}
	if strings.Join(sleeps, " ") != strings.Join(want, " ") {
		t.Errorf("server saw sleeps %v, want %v", sleeps, want)
	}
	// The last arrival, at 80ms, is due at 40ms at speed 2.
	if res.Requests != 5 || res.Planned != 5 || res.Duration < 40*ms || res.Mode != ModeTrace {
		t.Errorf("result: %d requests of %d over %s (%s); want 5 of 5 over at least 40ms", res.Requests, res.Planned, res.Duration, res.Mode)
	}
}

func TestStatusCodesAndErrorsGrouped(t *testing.T) {
	c := &counter{next: func(n int64, w http.ResponseWriter, r *http.Request) {
		switch n % 3 {
		case 1:
			_, _ = io.WriteString(w, "ok")
		case 2:
			w.WriteHeader(http.StatusServiceUnavailable)
		case 0:
			// Hold the request until the client gives up on it.
			<-r.Context().Done()
		}
	}}
	url := serve(t, c)
	var progress bytes.Buffer
	res := run(t, Config{URL: url, Workers: 1, Requests: 6, Timeout: 300 * ms, Progress: &progress, ProgressInterval: time.Hour})
	if !strings.Contains(progress.String(), "errors 4") {
		t.Errorf("progress %q: want 4 errors counted", progress.String())
	}
	want := map[int]uint64{200: 2, 503: 2, 0: 2}
	for code, n := range want {
		if res.StatusCodes[code] != n {
			t.Errorf("status %d counted %d times, want %d (all: %v)", code, res.StatusCodes[code], n, res.StatusCodes)
		}
	}
	if res.Successes != 2 {
		t.Errorf("%d successes, want 2", res.Successes)
	}
	if len(res.Errors) != 2 {
		t.Fatalf("errors %+v, want two groups", res.Errors)
	}
	if res.Errors[0] != (ErrorCount{Error: "503 Service Unavailable", Count: 2}) {
		t.Errorf("first group %+v, want 2 × 503 Service Unavailable", res.Errors[0])
	}
	if e := res.Errors[1]; e.Count != 2 || !strings.Contains(e.Error, "Client.Timeout") || strings.Contains(e.Error, url) {
		t.Errorf("second group %+v, want 2 timeouts without the URL", e)
	}
}

func TestGroupError(t *testing.T) {
	const u = "http://127.0.0.1:8080/?sleep=5ms"
	tests := []struct{ msg, want string }{
		{`Get "` + u + `": dial tcp 127.0.0.1:8080: connect: connection refused`, "dial tcp 127.0.0.1:8080: connect: connection refused"},
		{`Get "` + u + `": read tcp 127.0.0.1:53422->127.0.0.1:8080: read: connection reset by peer`, "read tcp 127.0.0.1->127.0.0.1:8080: read: connection reset by peer"},
		{`Get "` + u + `": read tcp [::1]:41000->[::1]:8080: i/o timeout`, "read tcp [::1]->[::1]:8080: i/o timeout"},
		{"503 Service Unavailable", "503 Service Unavailable"},
	}
	for _, tt := range tests {
		if got := groupError(tt.msg, u); got != tt.want {
			t.Errorf("groupError(%q) = %q, want %q", tt.msg, got, tt.want)
		}
	}
}

func TestRequestShape(t *testing.T) {
	type seen struct{ host, method, body, header string }
	got := make(chan seen, 3)
	c := &counter{next: func(_ int64, w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- seen{r.Host, r.Method, string(body), r.Header.Get("X-Test")}
	}}
	h := http.Header{}
	h.Set("Host", "hello.default")
	h.Set("X-Test", "yes")
	res := run(t, Config{URL: serve(t, c), Method: "POST", Header: h, Body: []byte("abc"), Rate: 100, Requests: 3})
	close(got)
	n := 0
	for s := range got {
		n++
		if s != (seen{"hello.default", "POST", "abc", "yes"}) {
			t.Errorf("server saw %+v, want Host hello.default, POST, body abc, X-Test yes", s)
		}
	}
	if n != 3 || res.BytesOut != 9 {
		t.Errorf("server saw %d requests, %d bytes out; want 3 and 9", n, res.BytesOut)
	}
}

func TestHTTP2PriorKnowledge(t *testing.T) {
	protos := make(chan string, 2)
	srv := httptest.NewUnstartedServer(&counter{next: func(_ int64, w http.ResponseWriter, r *http.Request) {
		protos <- r.Proto
	}})
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	run(t, Config{URL: srv.URL, HTTP2: true, Workers: 1, Requests: 2})
	close(protos)
	for p := range protos {
		if p != "HTTP/2.0" {
			t.Errorf("server saw %s, want HTTP/2.0", p)
		}
	}
	if _, err := Run(context.Background(), Config{URL: "https://127.0.0.1/", HTTP2: true, Workers: 1, Requests: 1}); err == nil {
		t.Error("h2c to an https URL was accepted")
	}
}

func TestRefusesRemoteTargets(t *testing.T) {
	for _, u := range []string{"http://10.1.2.3:8080/", "http://[2001:db8::1]/"} {
		_, err := Run(context.Background(), Config{URL: u, Rate: 1, Requests: 1})
		if !errors.Is(err, ErrRemoteTarget) || !strings.Contains(err.Error(), "AllowRemote") {
			t.Errorf("%s: error %v, want ErrRemoteTarget naming AllowRemote", u, err)
		}
	}
	for _, u := range []string{"ftp://127.0.0.1/", "127.0.0.1:8080", "http:///x"} {
		if err := CheckTarget(context.Background(), u); err == nil || errors.Is(err, ErrRemoteTarget) {
			t.Errorf("%s: error %v, want a bad-URL error", u, err)
		}
	}
}

func TestCheckLoopback(t *testing.T) {
	lookup := func(_ context.Context, host string) ([]net.IPAddr, error) {
		switch host {
		case "local.test":
			return []net.IPAddr{{IP: net.ParseIP("127.0.0.1")}, {IP: net.ParseIP("::1")}}, nil
		case "mixed.test":
			return []net.IPAddr{{IP: net.ParseIP("127.0.0.1")}, {IP: net.ParseIP("192.0.2.7")}}, nil
		}
		return nil, errors.New("no such host")
	}
	ok := []string{"127.0.0.1", "127.9.9.9", "::1", "localhost", "LOCALHOST.", "app.localhost", "local.test"}
	for _, h := range ok {
		if err := checkLoopback(context.Background(), h, lookup); err != nil {
			t.Errorf("%s refused: %v", h, err)
		}
	}
	bad := map[string]string{"192.0.2.1": "192.0.2.1", "mixed.test": "192.0.2.7", "nowhere.test": "cannot resolve"}
	for h, mention := range bad {
		err := checkLoopback(context.Background(), h, lookup)
		if !errors.Is(err, ErrRemoteTarget) || !strings.Contains(err.Error(), mention) {
			t.Errorf("%s: error %v, want ErrRemoteTarget mentioning %q", h, err, mention)
		}
	}
}

func TestInterruptStopsPromptly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := &counter{next: func(_ int64, w http.ResponseWriter, r *http.Request) { cancel() }}
	// The second arrival is an hour away: Run must not wait for it.
	recs := []trace.Record{{Arrival: 0}, {Arrival: time.Hour}}
	done := make(chan struct{})
	var res Result
	var err error
	go func() {
		defer close(done)
		res, err = Run(ctx, Config{URL: serve(t, c), Trace: recs})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run still running 10s after its context ended")
	}
	if err != nil {
		t.Fatal(err)
	}
	if !res.Interrupted || res.Requests != 1 || res.Planned != 2 || c.hits.Load() != 1 {
		t.Errorf("interrupted %v, %d requests of %d planned, server saw %d; want true, 1 of 2, 1", res.Interrupted, res.Requests, res.Planned, c.hits.Load())
	}
}

func TestProgress(t *testing.T) {
	var buf bytes.Buffer
	run(t, Config{URL: serve(t, &counter{}), Rate: 1000, Requests: 5, Progress: &buf, ProgressInterval: time.Hour})
	// However short the run, the last line is written at the end.
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	last := lines[len(lines)-1]
	if !strings.Contains(last, "sent 5/5") || !strings.Contains(last, "in-flight 0") || !strings.Contains(last, "errors 0") {
		t.Errorf("last progress line %q", last)
	}

	buf.Reset()
	run(t, Config{URL: serve(t, &counter{}), Rate: 1000, Requests: 1, Progress: &buf, ProgressOverwrite: true})
	if s := buf.String(); !strings.HasPrefix(s, "\r") || !strings.HasSuffix(s, "\x1b[K\n") {
		t.Errorf("overwritten progress %q: want a carriage return first, erase and newline last", s)
	}
}

func TestProgressLine(t *testing.T) {
	got := progressLine(2*time.Second, 4000, 3990, 7, 6000)
	want := "      2s  sent 4000/6000  rate 2000.0/s  in-flight 10  errors 7"
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	if got := progressLine(1500*ms, 3, 3, 0, 0); !strings.Contains(got, "sent 3  rate 2.0/s") {
		t.Errorf("unplanned: %q", got)
	}
}

func TestResultPrintAndJSON(t *testing.T) {
	r := Result{
		Mode: ModeRate, URL: "http://127.0.0.1:8080/", Planned: 100, Requests: 100, Successes: 98,
		Duration: 10 * time.Second, Wait: 2 * ms, TargetRate: 10, Rate: 10, Throughput: 9.8,
		Latency:     Latency{Mean: 1200 * time.Microsecond, P50: ms, P90: 2 * ms, P99: 5 * ms, Max: 20 * ms, Min: 100 * time.Microsecond},
		StatusCodes: map[int]uint64{200: 98, 503: 1, 0: 1},
		Errors:      []ErrorCount{{"503 Service Unavailable", 1}, {"connection refused", 1}},
		BytesIn:     200, BytesOut: 0,
	}
	var b strings.Builder
	if err := r.Print(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"open loop, fixed rate 10.0/s",
		"100 sent of 100 planned, 98 succeeded (98.00%)",
		"10s sending, 2ms more",
		"10.0/s achieved, 10.0/s target",
		"9.8/s successful",
		"p50 1ms  p90 2ms  p99 5ms  max 20ms  mean 1.2ms",
		"none: 1  200: 98  503: 1",
		"errors       1 × 503 Service Unavailable",
		"             1 × connection refused",
		"in 200 (2.0/request)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}

	js, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back Result
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if back.Latency != r.Latency || back.StatusCodes[503] != 1 || back.Duration != r.Duration || back.Errors[1] != r.Errors[1] {
		t.Errorf("JSON round trip lost data: %s", js)
	}
	for _, key := range []string{`"p99_ns":5000000`, `"duration_ns":10000000000`, `"status_codes":{"0":1,"200":98,"503":1}`} {
		if !bytes.Contains(js, []byte(key)) {
			t.Errorf("JSON lacks %s: %s", key, js)
		}
	}
}

func TestRunClosesItsConnections(t *testing.T) {
	var open atomic.Int64
	closed := make(chan struct{}, 100)
	srv := httptest.NewUnstartedServer(&counter{})
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
			closed <- struct{}{}
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	// A program that runs load again and again (a soak) must not pile up
	// one set of idle connections per run.
	for i := range 3 {
		run(t, Config{URL: srv.URL, Rate: 100, Duration: 100 * ms})
		deadline := time.After(10 * time.Second)
		for open.Load() > 0 {
			select {
			case <-closed:
			case <-deadline:
				t.Fatalf("run %d: %d connections still open after Run returned", i+1, open.Load())
			}
		}
	}
}
