package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/stats"
)

// What a pod's queue-proxy serves, without the queue-proxy: its stats
// report for the latest period closed, and the HTTP/1.1 around it, as
// queueproxy/stats.go serves them (content negotiation, Content-Type,
// Vary, Cache-Control). The functions here are pure; the epoll loops call
// them for every scrape.

// requestsPerHeld is requests a second per request held: every request
// takes 100 ms, so a pod holding c requests receives 10·c a second.
const requestsPerHeld = 10

// podReport is the report pod's queue-proxy serves, or pushes, elapsed
// after the fleet's epoch, for a pod started at phase whose periods close
// as closedAt says (sharp: a pushing pod's): the latest period closed, or
// until the first closes an empty report of length zero, as a
// queue-proxy just started serves. keys are the activators' keys, among
// which the proxied load is split; shares holds the report's ByActivator,
// so that a report allocates nothing.
func podReport(p *Pattern, s Step, epoch time.Time, elapsed, phase time.Duration, sharp bool, keys []uint64, shares *[stats.MaxActivatorShares]stats.ActivatorShare) stats.Report {
	from, to, ok := closedAt(phase, elapsed, s, sharp)
	if !ok {
		return stats.Report{End: epoch.Add(phase), Attributed: true}
	}
	period := to - from
	c := p.Mean(from, to, s)
	reqs := uint64(math.Round(c * requestsPerHeld * period.Seconds()))
	r := stats.Report{End: epoch.Add(to), Period: period, Concurrency: c, Requests: reqs, Uptime: to - phase, Attributed: true}
	if !p.Proxied() || c == 0 || len(keys) == 0 {
		return r
	}
	r.ProxiedConcurrency, r.ProxiedRequests = c, reqs
	n := min(len(keys), stats.MaxActivatorShares)
	// Equal shares, the last taking what rounding left, so that they add
	// up to the proxied figures exactly.
	var sumC float64
	var sumR uint64
	for i := range n - 1 {
		sh := stats.ActivatorShare{Activator: keys[i], Concurrency: c / float64(n), Requests: reqs / uint64(n)}
		sumC += sh.Concurrency
		sumR += sh.Requests
		shares[i] = sh
	}
	shares[n-1] = stats.ActivatorShare{Activator: keys[n-1], Concurrency: max(c-sumC, 0), Requests: reqs - sumR}
	r.ByActivator = shares[:n]
	return r
}

// sharpFollow is how long after a sharp close a pushing pod closes its
// next period: a queue-proxy that sees its load rise sharply closes its
// period at once and pushes it, then closes the next 100 ms later, at the
// new level, and pushes that too, then goes back to a period a second.
const sharpFollow = 100 * time.Millisecond

// closedAt is the latest period [from, to) a pod started at phase has
// closed at elapsed (all since the epoch); false before its first
// closes. Its periods close every second from phase + 1 s. With sharp (a
// pushing pod), a step closes one at once, at s.At, and another
// sharpFollow later, and the periods close every second from that one on.
func closedAt(phase, elapsed time.Duration, s Step, sharp bool) (from, to time.Duration, ok bool) {
	regular := func(t time.Duration) (time.Duration, time.Duration, bool) {
		k := (t - phase) / time.Second
		if t < phase || k < 1 {
			return 0, 0, false
		}
		to := phase + k*time.Second
		return to - time.Second, to, true
	}
	if !sharp || s.Factor == 0 || elapsed < s.At {
		return regular(elapsed)
	}
	follow := s.At + sharpFollow
	if elapsed < follow {
		prevFrom, prev, ok := regular(s.At)
		switch {
		case !ok && s.At > phase:
			return phase, s.At, true // the step came before the pod's first close
		case !ok, prev == s.At:
			return prevFrom, prev, ok // the step fell on a close: nothing to close at once
		}
		return prev, s.At, true
	}
	k := (elapsed - follow) / time.Second
	if k == 0 {
		return s.At, follow, true
	}
	to = follow + k*time.Second
	return to - time.Second, to, true
}

// format is what a scraper gets.
type format uint8

const (
	formatV1 format = iota
	formatV2
	formatV3
	formatJSON
)

// negotiate picks the format for a request's Accept header values as the
// queue-proxy does: binary version 3 or 2, the newest the client names,
// else JSON to one that names application/json, else version 1.
func negotiate(accept []string) format {
	switch {
	case accepts(accept, stats.ContentTypeV3):
		return formatV3
	case accepts(accept, stats.ContentTypeV2):
		return formatV2
	case accepts(accept, "application/json"):
		return formatJSON
	}
	return formatV1
}

// accepts reports whether an Accept header names the media type mt: the
// queue-proxy's rule (queueproxy/stats.go), which reads no q-values.
func accepts(accept []string, mt string) bool {
	for _, v := range accept {
		for part := range strings.SplitSeq(v, ",") {
			if t, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && t == mt {
				return true
			}
		}
	}
	return false
}

// maxHeader bounds a request's head; a longer one is refused, as
// net/http refuses one past its limit.
const maxHeader = 8 << 10

// maxAccept bounds the Accept header lines read; a scraper sends one.
const maxAccept = 4

// request is one parsed HTTP/1.x request head. Its byte slices alias the
// buffer it was parsed from.
type request struct {
	method, path []byte
	accept       [maxAccept][]byte
	naccept      int
	// close says the connection ends after the answer: HTTP/1.0, or
	// "Connection: close".
	close bool
}

// Why a request is refused.
var (
	errBadRequest = errors.New("400 Bad Request")
	errTooLarge   = errors.New("431 Request Header Fields Too Large")
)

// parseRequest parses the request at the head of b into r. It returns the
// bytes the request took, 0 if b holds no whole head yet. Requests with a
// body are refused: a scrape has none.
func parseRequest(b []byte, r *request) (int, error) {
	end := bytes.Index(b, []byte("\r\n\r\n"))
	if end < 0 {
		if len(b) > maxHeader {
			return 0, errTooLarge
		}
		return 0, nil
	}
	if end > maxHeader {
		return 0, errTooLarge
	}
	*r = request{}
	head := b[:end]
	line, rest, _ := bytes.Cut(head, []byte("\r\n"))
	method, line, ok1 := bytes.Cut(line, []byte(" "))
	target, version, ok2 := bytes.Cut(line, []byte(" "))
	if !ok1 || !ok2 || len(method) == 0 || len(target) == 0 || target[0] != '/' {
		return 0, errBadRequest
	}
	switch string(version) {
	case "HTTP/1.1":
	case "HTTP/1.0":
		r.close = true
	default:
		return 0, errBadRequest
	}
	r.method = method
	r.path, _, _ = bytes.Cut(target, []byte("?"))
	for len(rest) > 0 {
		var h []byte
		h, rest, _ = bytes.Cut(rest, []byte("\r\n"))
		name, value, ok := bytes.Cut(h, []byte(":"))
		if !ok || len(name) == 0 {
			return 0, errBadRequest
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Accept")):
			if r.naccept < maxAccept {
				r.accept[r.naccept] = value
				r.naccept++
			}
		case bytes.EqualFold(name, []byte("Connection")):
			for tok := range bytes.SplitSeq(value, []byte(",")) {
				if bytes.EqualFold(bytes.TrimSpace(tok), []byte("close")) {
					r.close = true
				}
			}
		case bytes.EqualFold(name, []byte("Content-Length")):
			if n, err := strconv.ParseUint(string(value), 10, 64); err != nil || n != 0 {
				return 0, errBadRequest
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return 0, errBadRequest
		}
	}
	return end + 4, nil
}

// responder writes a loop's answers. It remembers the last Accept header
// it negotiated, so that the collector's scrapes, which all send the same
// one, cost a comparison, and the Date of the current second.
type responder struct {
	lastAccept []byte
	lastFormat format
	date       []byte
	dateSec    int64
}

// contentTypes by format.
var contentTypes = [...]string{
	formatV1:   stats.ContentType,
	formatV2:   stats.ContentTypeV2,
	formatV3:   stats.ContentTypeV3,
	formatJSON: "application/json",
}

func (w *responder) format(r *request) format {
	if r.naccept == 1 && w.lastAccept != nil && bytes.Equal(r.accept[0], w.lastAccept) {
		return w.lastFormat
	}
	accept := make([]string, r.naccept)
	for i := range accept {
		accept[i] = string(r.accept[i])
	}
	f := negotiate(accept)
	if r.naccept == 1 {
		w.lastAccept = append(w.lastAccept[:0], r.accept[0]...)
		w.lastFormat = f
	}
	return f
}

// appendDate appends the Date header's value for now.
func (w *responder) appendDate(b []byte, now time.Time) []byte {
	if sec := now.Unix(); sec != w.dateSec || w.date == nil {
		w.date = now.UTC().AppendFormat(w.date[:0], http.TimeFormat)
		w.dateSec = sec
	}
	return append(b, w.date...)
}

// appendStats appends the answer to a request for rep. rep is a copy:
// only the JSON form takes its address, and only then it escapes.
func (w *responder) appendStats(b []byte, r *request, rep stats.Report, now time.Time) []byte {
	f := w.format(r)
	var body []byte
	var scratch [stats.MaxBinarySize]byte
	switch f {
	case formatV3:
		body = rep.AppendBinaryV3(scratch[:0])
	case formatV2:
		body = rep.AppendBinaryV2(scratch[:0])
	case formatV1:
		body = rep.AppendBinary(scratch[:0])
	case formatJSON:
		j, err := json.Marshal(rep)
		if err != nil {
			return w.appendError(b, http.StatusInternalServerError, "encode stats: "+err.Error()+"\n", r.close, now)
		}
		body = append(j, '\n')
	}
	b = append(b, "HTTP/1.1 200 OK\r\nCache-Control: no-store\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, "\r\nContent-Type: "...)
	b = append(b, contentTypes[f]...)
	b = append(b, "\r\nDate: "...)
	b = w.appendDate(b, now)
	b = append(b, "\r\nVary: Accept\r\n"...)
	if r.close {
		b = append(b, "Connection: close\r\n"...)
	}
	b = append(b, "\r\n"...)
	if string(r.method) == http.MethodHead {
		return b
	}
	return append(b, body...)
}

// serve appends the answer to r, with report giving the pod's report:
// its stats at network.StatsPath, 404 elsewhere, 405 for a method other
// than GET and HEAD.
func (w *responder) serve(b []byte, r *request, now time.Time, report func() stats.Report) []byte {
	switch {
	case string(r.path) != network.StatsPath:
		return w.appendError(b, http.StatusNotFound, "404 page not found\n", r.close, now)
	case string(r.method) != http.MethodGet && string(r.method) != http.MethodHead:
		return w.appendError(b, http.StatusMethodNotAllowed, "method not allowed\n", r.close, now)
	}
	return w.appendStats(b, r, report(), now)
}

// appendError appends a plain-text error answer, as http.Error writes one.
func (w *responder) appendError(b []byte, code int, msg string, close bool, now time.Time) []byte {
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, ' ')
	b = append(b, http.StatusText(code)...)
	if code == http.StatusMethodNotAllowed {
		b = append(b, "\r\nAllow: GET, HEAD"...)
	}
	if close {
		b = append(b, "\r\nConnection: close"...)
	}
	b = append(b, "\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(msg)), 10)
	b = append(b, "\r\nContent-Type: text/plain; charset=utf-8\r\nDate: "...)
	b = w.appendDate(b, now)
	b = append(b, "\r\nX-Content-Type-Options: nosniff\r\n\r\n"...)
	return append(b, msg...)
}

// appendRefusal appends the answer to a request that did not parse, after
// which the connection closes.
func (w *responder) appendRefusal(b []byte, err error, now time.Time) []byte {
	code := http.StatusBadRequest
	if errors.Is(err, errTooLarge) {
		code = http.StatusRequestHeaderFieldsTooLarge
	}
	return w.appendError(b, code, err.Error()+"\n", true, now)
}
