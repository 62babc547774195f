package demo

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// PeerHeader names, on an answer to a request with knobs, the address the
// request came from.
const PeerHeader = "Demo-Peer"

// knobs is what a request's query asks of its answer.
type knobs struct {
	sleep    time.Duration
	cpu      time.Duration
	size     int64 // -1 for the greeting
	stream   int   // chunks; 0 for a whole answer
	interval time.Duration
	status   int
	sse      bool // stream as server-sent events
}

// Defaults of GET /sse when stream or interval is not given.
const (
	defaultSSEEvents   = 10
	defaultSSEInterval = time.Second
)

// knobNames lists the accepted query parameters, for error messages.
const knobNames = "sleep, cpu, size, stream, interval, status"

// Accepted values, as error messages state them.
const (
	acceptDuration = "a duration such as 100ms or 1.5s, or whole milliseconds such as 100"
	acceptSize     = "a whole number of bytes, 0 or more"
	acceptStream   = "a whole number of chunks, 1 or more"
	acceptStatus   = "an HTTP status code from 200 to 599"
)

// badKnob is a query parameter the app cannot honour. Its message names the
// parameter, the value and what is accepted, and is what the client reads.
type badKnob struct {
	name, value, accepted string
}

func (e *badKnob) Error() string {
	return fmt.Sprintf("bad %s=%q: accepted is %s", e.name, e.value, e.accepted)
}

// parseKnobs reads query; sse says the answer, if streamed, is made of
// server-sent events, and on /sse (sseDefaults) that it always streams.
func parseKnobs(query string, sse, sseDefaults bool) (knobs, error) {
	k := knobs{size: -1, status: http.StatusOK, sse: sse || sseDefaults}
	vals, err := url.ParseQuery(query)
	if err != nil {
		return k, fmt.Errorf("malformed query %q: %v; accepted are name=value pairs joined by &, percent-encoded", query, err)
	}
	if unknown := unknownKnobs(vals); len(unknown) > 0 {
		return k, fmt.Errorf("unknown query parameter %q: accepted are %s", unknown[0], knobNames)
	}
	has := func(name string) bool { _, ok := vals[name]; return ok }
	for _, f := range []struct {
		name  string
		parse func(string) bool
		acc   string
	}{
		{"sleep", func(v string) bool { return parseDelay(v, &k.sleep) }, acceptDuration},
		{"cpu", func(v string) bool { return parseDelay(v, &k.cpu) }, acceptDuration},
		{"interval", func(v string) bool { return parseDelay(v, &k.interval) }, acceptDuration},
		{"size", func(v string) bool {
			n, err := strconv.ParseInt(v, 10, 64)
			k.size = n
			return err == nil && n >= 0
		}, acceptSize},
		{"stream", func(v string) bool {
			n, err := strconv.Atoi(v)
			k.stream = n
			return err == nil && n >= 1
		}, acceptStream},
		{"status", func(v string) bool {
			n, err := strconv.Atoi(v)
			k.status = n
			return err == nil && n >= 200 && n <= 599
		}, acceptStatus},
	} {
		if v, ok := vals[f.name]; ok && !f.parse(v[0]) {
			return k, &badKnob{name: f.name, value: v[0], accepted: f.acc}
		}
	}
	switch {
	case has("size") && has("stream"):
		return k, fmt.Errorf("size=%s with stream=%s: accepted is one or the other", vals.Get("size"), vals.Get("stream"))
	case has("interval") && !has("stream") && !sseDefaults:
		return k, fmt.Errorf("interval=%s without stream: interval is accepted only together with stream", vals.Get("interval"))
	}
	if sseDefaults {
		if !has("stream") {
			k.stream = defaultSSEEvents
		}
		if !has("interval") {
			k.interval = defaultSSEInterval
		}
	}
	return k, nil
}

// unknownKnobs returns the query parameters that are not knobs, sorted.
func unknownKnobs(vals url.Values) []string {
	var unknown []string
	for name := range vals {
		switch name {
		case "sleep", "cpu", "size", "stream", "interval", "status":
		default:
			unknown = append(unknown, name)
		}
	}
	slices.Sort(unknown)
	return unknown
}

// parseDelay reads a duration ("100ms") or whole milliseconds ("100") into d
// and reports whether v was valid.
func parseDelay(v string, d *time.Duration) bool {
	if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
		*d = time.Duration(ms) * time.Millisecond
		return ms >= 0 && ms <= int64(time.Duration(1<<63-1)/time.Millisecond)
	}
	var err error
	*d, err = time.ParseDuration(v)
	return err == nil && *d >= 0
}

// serveKnobs answers a request with a query. Every wait gives up as soon as
// the client goes away.
func (s *server) serveKnobs(w http.ResponseWriter, r *http.Request, sseDefaults bool) {
	k, err := parseKnobs(r.URL.RawQuery, strings.Contains(r.Header.Get("Accept"), "text/event-stream"), sseDefaults)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ctx := r.Context()
	if !sleep(ctx, k.sleep) || !burnCPU(ctx, k.cpu) {
		return
	}
	h := w.Header()
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		h[PeerHeader] = []string{host}
	}
	switch {
	case k.stream > 0:
		writeStream(ctx, w, k)
	case k.size >= 0:
		h["Content-Type"] = textPlain
		if bodyAllowed(k.status) {
			h.Set("Content-Length", strconv.FormatInt(k.size, 10))
		}
		w.WriteHeader(k.status)
		for n := k.size; n > 0; {
			c := min(n, int64(len(filler)))
			if _, err := w.Write(filler[:c]); err != nil {
				return
			}
			n -= c
		}
	default:
		h["Content-Type"] = textPlain
		w.WriteHeader(k.status)
		_, _ = w.Write(s.hello)
	}
}

// filler is the shared source of ?size bodies: byte i of any body is
// 'a'+i%26, because filler's length is a multiple of 26 and bodies are
// written from its start.
var filler = func() []byte {
	b := make([]byte, 26*1260) // about 32KiB
	for i := range b {
		b[i] = 'a' + byte(i%26)
	}
	return b
}()

// bodyAllowed reports whether a response with status may carry a body.
func bodyAllowed(status int) bool {
	return status != http.StatusNoContent && status != http.StatusNotModified
}

// writeStream writes k.stream chunks, k.interval apart, flushing each so the
// client sees them arrive one by one. A chunk is a line "chunk i/n", or an
// event with id i and that line as data.
func writeStream(ctx context.Context, w http.ResponseWriter, k knobs) {
	h := w.Header()
	if k.sse {
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
	} else {
		h["Content-Type"] = textPlain
		// Some clients and proxies hold back text they may want to sniff.
		h.Set("X-Content-Type-Options", "nosniff")
	}
	w.WriteHeader(k.status)
	rc := http.NewResponseController(w)
	buf := make([]byte, 0, 64)
	for i := 1; i <= k.stream; i++ {
		if i > 1 && !sleep(ctx, k.interval) {
			return
		}
		buf = buf[:0]
		if k.sse {
			buf = append(buf, "id: "...)
			buf = strconv.AppendInt(buf, int64(i), 10)
			buf = append(buf, "\ndata: "...)
		}
		buf = append(buf, "chunk "...)
		buf = strconv.AppendInt(buf, int64(i), 10)
		buf = append(buf, '/')
		buf = strconv.AppendInt(buf, int64(k.stream), 10)
		buf = append(buf, '\n')
		if k.sse {
			buf = append(buf, '\n')
		}
		if _, err := w.Write(buf); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

// sleep waits d and reports whether ctx was still live by then.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// burnCPU busy-loops for d of wall time and reports whether ctx was still
// live by then.
func burnCPU(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	done := ctx.Done()
	for end := time.Now().Add(d); time.Now().Before(end); {
		select {
		case <-done:
			return false
		default:
		}
	}
	return true
}
