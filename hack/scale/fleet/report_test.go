package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/swell-run/swell/pkg/stats"
)

var testEpoch = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func TestPodReport(t *testing.T) {
	s := time.Second
	keys := []uint64{stats.ActivatorKey("a-0"), stats.ActivatorKey("a-1"), stats.ActivatorKey("a-2")}
	var shares [stats.MaxActivatorShares]stats.ActivatorShare
	busy := Pattern{Kind: Busy, Level: 63.3}
	burst := Pattern{Kind: Bursting, Level: 100, Period: 30 * s, Burst: 10 * s}
	phase := 250 * time.Millisecond

	// Before its first period closes, a pod serves an empty report, as a
	// queue-proxy just started does.
	if r := podReport(&busy, Step{}, testEpoch, 1200*time.Millisecond, phase, false, keys, &shares); r.Period != 0 || !r.End.Equal(testEpoch.Add(phase)) || r.Concurrency != 0 {
		t.Errorf("first report %+v, want an empty one at the pod's start", r)
	}

	// The latest period closed: [2.25 s, 3.25 s) at 3.9 s.
	r := podReport(&busy, Step{}, testEpoch, 3900*time.Millisecond, phase, false, keys, &shares)
	if !r.End.Equal(testEpoch.Add(3250*time.Millisecond)) || r.Period != s || r.Uptime != 3*s ||
		r.Concurrency != 63.3 || r.Requests != 633 || r.ProxiedConcurrency != 0 || len(r.ByActivator) != 0 || !r.Attributed {
		t.Errorf("busy report %+v", r)
	}

	// A burst comes through the activators: all of it proxied, split
	// among them, the shares adding up to the proxied figures.
	r = podReport(&burst, Step{}, testEpoch, 5500*time.Millisecond, phase, false, keys, &shares)
	if r.Concurrency != 100 || r.ProxiedConcurrency != 100 || r.Requests != 1000 || r.ProxiedRequests != 1000 || len(r.ByActivator) != 3 {
		t.Fatalf("burst report %+v", r)
	}
	var sumC float64
	var sumR uint64
	for i, sh := range r.ByActivator {
		if sh.Activator != keys[i] {
			t.Errorf("share %d of %x, want %x", i, sh.Activator, keys[i])
		}
		sumC += sh.Concurrency
		sumR += sh.Requests
	}
	if math.Abs(sumC-100) > 1e-9 || sumR != 1000 {
		t.Errorf("shares add up to %v, %d; want 100, 1000", sumC, sumR)
	}

	// Every version encodes, and decodes to what was meant.
	for name, b := range map[string][]byte{
		"v1": r.AppendBinary(nil), "v2": r.AppendBinaryV2(nil), "v3": r.AppendBinaryV3(nil),
	} {
		var got stats.Report
		if err := got.UnmarshalBinary(b); err != nil {
			t.Errorf("%s: %v", name, err)
		} else if got.Concurrency != 100 || !got.End.Equal(r.End) {
			t.Errorf("%s decodes to %+v", name, got)
		}
	}
}

func TestNegotiate(t *testing.T) {
	collector := stats.ContentTypeV3 + ", " + stats.ContentTypeV2 + ";q=0.9, " + stats.ContentType + ";q=0.5"
	for _, tt := range []struct {
		accept []string
		want   format
	}{
		{nil, formatV1},
		{[]string{collector}, formatV3},
		{[]string{stats.ContentTypeV2 + ", " + stats.ContentType + ";q=0.5"}, formatV2},
		{[]string{"text/html", stats.ContentTypeV2}, formatV2},
		{[]string{"application/json"}, formatJSON},
		{[]string{"application/json, " + stats.ContentTypeV2}, formatV2},
		{[]string{"*/*"}, formatV1},
		// The queue-proxy reads no q-values: named is accepted.
		{[]string{stats.ContentTypeV3 + ";q=0"}, formatV3},
	} {
		if got := negotiate(tt.accept); got != tt.want {
			t.Errorf("negotiate(%q) = %d, want %d", tt.accept, got, tt.want)
		}
	}
}

func TestParseRequest(t *testing.T) {
	const scrape = "GET /stats HTTP/1.1\r\nHost: 127.1.0.1:9090\r\nUser-Agent: Go-http-client/1.1\r\nAccept: a/b, c/d\r\n\r\n"
	for _, tt := range []struct {
		name   string
		in     string
		used   int
		err    error
		path   string
		accept []string
		close  bool
	}{
		{name: "a scrape", in: scrape, used: len(scrape), path: "/stats", accept: []string{"a/b, c/d"}},
		{name: "two pipelined", in: scrape + scrape, used: len(scrape), path: "/stats", accept: []string{"a/b, c/d"}},
		{name: "half a head", in: scrape[:30]},
		{name: "a query", in: "HEAD /stats?x=1 HTTP/1.1\r\naccept: x/y\r\nACCEPT: z/w\r\n\r\n", used: 54, path: "/stats", accept: []string{"x/y", "z/w"}},
		{name: "HTTP/1.0", in: "GET / HTTP/1.0\r\n\r\n", used: 18, path: "/", close: true},
		{name: "Connection: close", in: "GET / HTTP/1.1\r\nConnection: keep-alive, Close\r\n\r\n", used: 49, path: "/", close: true},
		{name: "an empty body", in: "GET / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", used: 37, path: "/"},
		{name: "a body", in: "POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", err: errBadRequest},
		{name: "chunked", in: "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", err: errBadRequest},
		{name: "HTTP/2 preface", in: "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", err: errBadRequest},
		{name: "no target", in: "GET\r\n\r\n", err: errBadRequest},
		{name: "a header without colon", in: "GET / HTTP/1.1\r\nnope\r\n\r\n", err: errBadRequest},
		{name: "too large", in: "GET / HTTP/1.1\r\nX: " + strings.Repeat("x", maxHeader), err: errTooLarge},
	} {
		var r request
		used, err := parseRequest([]byte(tt.in), &r)
		if !errors.Is(err, tt.err) || used != tt.used {
			t.Errorf("%s: used %d, %v; want %d, %v", tt.name, used, err, tt.used, tt.err)
			continue
		}
		if used == 0 {
			continue
		}
		var accept []string
		for _, a := range r.accept[:r.naccept] {
			accept = append(accept, string(a))
		}
		if string(r.path) != tt.path || strings.Join(accept, "|") != strings.Join(tt.accept, "|") || r.close != tt.close {
			t.Errorf("%s: path %q, accept %q, close %v; want %q, %q, %v", tt.name, r.path, accept, r.close, tt.path, tt.accept, tt.close)
		}
	}
}

// answer parses what a responder wrote as net/http's client would.
func answer(t *testing.T, b []byte, method string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(b)), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%q: %v", b, err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

func TestResponderAnswers(t *testing.T) {
	now := testEpoch.Add(1500 * time.Millisecond)
	rep := stats.Report{End: testEpoch, Period: time.Second, Concurrency: 2.5, Requests: 25, Uptime: time.Minute, Attributed: true}
	report := func() stats.Report { return rep }
	var w responder
	for _, tt := range []struct {
		req, ctype string
		code       int
		decode     func([]byte) (float64, error)
	}{
		{"GET /stats HTTP/1.1\r\nAccept: " + stats.ContentTypeV3 + ", " + stats.ContentTypeV2 + ";q=0.9\r\n\r\n", stats.ContentTypeV3, 200, binaryConcurrency},
		{"GET /stats HTTP/1.1\r\nAccept: " + stats.ContentTypeV2 + "\r\n\r\n", stats.ContentTypeV2, 200, binaryConcurrency},
		{"GET /stats HTTP/1.1\r\n\r\n", stats.ContentType, 200, binaryConcurrency},
		{"GET /stats HTTP/1.1\r\nAccept: application/json\r\n\r\n", "application/json", 200, jsonConcurrency},
		{"GET /metrics HTTP/1.1\r\n\r\n", "text/plain; charset=utf-8", 404, nil},
		{"DELETE /stats HTTP/1.1\r\n\r\n", "text/plain; charset=utf-8", 405, nil},
	} {
		var r request
		if _, err := parseRequest([]byte(tt.req), &r); err != nil {
			t.Fatal(err)
		}
		resp, body := answer(t, w.serve(nil, &r, now, report), string(r.method))
		if resp.StatusCode != tt.code || resp.Header.Get("Content-Type") != tt.ctype || resp.Header.Get("Date") != "Wed, 02 Jan 2030 03:04:06 GMT" {
			t.Errorf("%q: %s, %v", tt.req, resp.Status, resp.Header)
		}
		if tt.code == 200 && (resp.Header.Get("Vary") != "Accept" || resp.Header.Get("Cache-Control") != "no-store") {
			t.Errorf("%q: headers %v, want the queue-proxy's Vary and Cache-Control", tt.req, resp.Header)
		}
		if tt.decode != nil {
			if c, err := tt.decode(body); err != nil || c != 2.5 {
				t.Errorf("%q: body decodes to %v, %v", tt.req, c, err)
			}
		}
	}

	// HEAD: the headers alone; a refused request closes the connection.
	var r request
	parseRequest([]byte("HEAD /stats HTTP/1.1\r\n\r\n"), &r)
	if resp, body := answer(t, w.serve(nil, &r, now, report), "HEAD"); resp.StatusCode != 200 || len(body) != 0 || resp.ContentLength != stats.BinarySize {
		t.Errorf("HEAD: %s, %d bytes of body, length %d", resp.Status, len(body), resp.ContentLength)
	}
	if resp, _ := answer(t, w.appendRefusal(nil, errTooLarge, now), "GET"); resp.StatusCode != 431 || !resp.Close {
		t.Errorf("refusal: %s, close %v", resp.Status, resp.Close)
	}
}

func binaryConcurrency(b []byte) (float64, error) {
	var r stats.Report
	err := r.UnmarshalBinary(b)
	return r.Concurrency, err
}

func jsonConcurrency(b []byte) (float64, error) {
	var r stats.Report
	err := json.Unmarshal(b, &r)
	return r.Concurrency, err
}

// A scrape, once its Accept header was seen, allocates nothing: the fleet
// answers tens of thousands a second.
func TestScrapeDoesNotAllocate(t *testing.T) {
	p := Pattern{Kind: Bursting, Level: 100, Period: 30 * time.Second, Burst: 10 * time.Second}
	keys := []uint64{1, 2, 3}
	var shares [stats.MaxActivatorShares]stats.ActivatorShare
	req := []byte("GET /stats HTTP/1.1\r\nHost: 127.1.0.1:9090\r\nAccept: " + stats.ContentTypeV3 + ", " + stats.ContentTypeV2 + ";q=0.9\r\n\r\n")
	var w responder
	out := make([]byte, 0, 1024)
	now := testEpoch.Add(5 * time.Second)
	scrape := func() {
		var r request
		if _, err := parseRequest(req, &r); err != nil {
			t.Fatal(err)
		}
		out = w.serve(out[:0], &r, now, func() stats.Report {
			return podReport(&p, Step{}, testEpoch, 5*time.Second, 0, false, keys, &shares)
		})
	}
	scrape()
	if n := testing.AllocsPerRun(100, scrape); n != 0 {
		t.Errorf("%v allocations per scrape", n)
	}
}
