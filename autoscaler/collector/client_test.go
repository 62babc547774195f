package collector

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/stats"
)

// rawPod is a pod's metrics port that answers each request with what a
// test scripts, byte for byte: the responses no net/http server would
// send.
type rawPod struct {
	l       net.Listener
	accepts atomic.Int64
	// open counts the connections not yet ended; ended is sent to, when
	// it has room, after each end.
	open  atomic.Int64
	ended chan struct{}
	mu    sync.Mutex
	reqs  [][]byte
	wg    sync.WaitGroup
}

// newRawPod serves answer on loopback: it is called with each request
// head, on its connection, and the connection is closed when it returns
// false.
func newRawPod(t testing.TB, answer func(c net.Conn, req []byte) (keep bool)) *rawPod {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &rawPod{l: l, ended: make(chan struct{}, 1)}
	var conns sync.Map
	p.wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			p.accepts.Add(1)
			p.open.Add(1)
			conns.Store(c, true)
			p.wg.Go(func() {
				defer func() {
					p.open.Add(-1)
					select {
					case p.ended <- struct{}{}:
					default:
					}
				}()
				defer c.Close()
				defer conns.Delete(c)
				var buf []byte
				chunk := make([]byte, 1024)
				for {
					if end := bytes.Index(buf, []byte("\r\n\r\n")); end >= 0 {
						req := buf[:end+4]
						buf = buf[end+4:]
						p.mu.Lock()
						p.reqs = append(p.reqs, bytes.Clone(req))
						p.mu.Unlock()
						if !answer(c, req) {
							return
						}
						continue
					}
					n, err := c.Read(chunk)
					if err != nil {
						return
					}
					buf = append(buf, chunk[:n]...)
				}
			})
		}
	})
	t.Cleanup(func() {
		l.Close()
		conns.Range(func(c, _ any) bool { c.(net.Conn).Close(); return true })
		p.wg.Wait()
	})
	return p
}

func (p *rawPod) addr() string { return p.l.Addr().String() }

// id is the pod as a scrape that knows only its address names it.
func (p *rawPod) id() podID { return podID{addr: p.addr()} }

// waitOpen waits until the pod has n connections open: until those the
// scraper closed have ended at the pod's side too.
func (p *rawPod) waitOpen(t testing.TB, n int64) {
	t.Helper()
	guard := time.NewTimer(10 * time.Second)
	defer guard.Stop()
	for p.open.Load() != n {
		select {
		case <-p.ended:
		case <-guard.C:
			t.Fatalf("the pod has %d connections open, want %d", p.open.Load(), n)
		}
	}
}

// requests returns the request heads the pod received.
func (p *rawPod) requests() [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reqs
}

// reply answers every request with resp and keeps the connection.
func reply(resp string) func(net.Conn, []byte) bool {
	return func(c net.Conn, _ []byte) bool {
		c.Write([]byte(resp))
		return true
	}
}

// replyAndClose answers with resp and closes the connection.
func replyAndClose(resp string) func(net.Conn, []byte) bool {
	return func(c net.Conn, _ []byte) bool {
		c.Write([]byte(resp))
		return false
	}
}

// okResponse is a queue-proxy's answer carrying body as the type ct, with
// extra header lines (each ending in CRLF) before the blank line.
func okResponse(ct string, body []byte, extra string) string {
	return "HTTP/1.1 200 OK\r\nCache-Control: no-store\r\nContent-Length: " + strconv.Itoa(len(body)) +
		"\r\nContent-Type: " + ct + "\r\nDate: Wed, 02 Jan 2030 03:04:05 GMT\r\nVary: Accept\r\n" + extra + "\r\n" + string(body)
}

// testScraper is a scraper with its own pool, which it empties when t
// ends.
func testScraper(t testing.TB, timeout time.Duration) (*connScraper, *connPool) {
	pool := newConnPool(100, podIdleTimeout, clock.RealClock{})
	t.Cleanup(func() { pool.closeIdle(time.Now().Add(time.Hour)) })
	return newConnScraper(pool, timeout), pool
}

func TestScrapeResponses(t *testing.T) {
	v1, v2, v3 := busyReport.AppendBinary(nil), busyReport.AppendBinaryV2(nil), busyReport.AppendBinaryV3(nil)
	head := func(lines ...string) string { return strings.Join(lines, "\r\n") + "\r\n\r\n" }
	cl := "Content-Length: " + strconv.Itoa(len(v3))
	ct := "Content-Type: " + stats.ContentTypeV3
	okV3 := okResponse(stats.ContentTypeV3, v3, "")
	for _, tc := range []struct {
		name string
		// answer is the pod's answer to each request.
		answer func(net.Conn, []byte) bool
		want   scrapeResult
		// err is in the error; kept says the connection is kept for the
		// next scrape.
		err  string
		kept bool
	}{
		{name: "version 3", answer: reply(okResponse(stats.ContentTypeV3, v3, "")), want: resultOK, kept: true},
		{name: "version 2", answer: reply(okResponse(stats.ContentTypeV2, v2, "")), want: resultOK, kept: true},
		{name: "version 1", answer: reply(okResponse(stats.ContentType, v1, "")), want: resultOK, kept: true},
		{name: "type with parameters", answer: reply(okResponse(stats.ContentTypeV3+";charset=binary", v3, "")), want: resultOK, kept: true},
		{name: "the least head", answer: reply(head("HTTP/1.1 200", cl, ct) + string(v3)), want: resultOK, kept: true},
		{name: "no reason phrase", answer: reply(head("HTTP/1.1 200 ", cl, ct) + string(v3)), want: resultOK, kept: true},
		{name: "the same length twice", answer: reply(head("HTTP/1.1 200 OK", cl, ct, cl) + string(v3)), want: resultOK, kept: true},
		{name: "names in any case, values with spaces", answer: reply(head("HTTP/1.1 200 OK", "content-length:\t"+strconv.Itoa(len(v3))+" ", "CONTENT-TYPE:  "+stats.ContentTypeV3) + string(v3)), want: resultOK, kept: true},
		{name: "Connection: close", answer: replyAndClose(okResponse(stats.ContentTypeV3, v3, "Connection: keep-alive, close\r\n")), want: resultOK},
		{name: "HTTP/1.0", answer: replyAndClose(head("HTTP/1.0 200 OK", cl, ct) + string(v3)), want: resultOK},
		{name: "pipelined garbage after the body", answer: reply(okResponse(stats.ContentTypeV3, v3, "") + "HTTP/1.1 200 OK\r\n"), want: resultOK},

		{name: "server error", answer: reply("HTTP/1.1 500 Internal Server Error\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nboom\n"), want: resultStatus, err: `status 500 "Internal Server Error"`},
		{name: "not found", answer: reply("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"), want: resultStatus, err: "status 404"},
		{name: "redirect, not followed", answer: reply("HTTP/1.1 302 Found\r\nLocation: http://169.254.169.254/\r\nContent-Length: 0\r\n\r\n"), want: resultStatus, err: "status 302"},
		{name: "100 Continue first", answer: reply("HTTP/1.1 100 Continue\r\n\r\n" + okResponse(stats.ContentTypeV3, v3, "")), want: resultStatus, err: "status 100"},
		{name: "status with the type of a report", answer: reply("HTTP/1.1 503 Service Unavailable\r\n" + cl + "\r\n" + ct + "\r\n\r\n" + string(v3)), want: resultStatus, err: "status 503"},
		{name: "a long reason is clipped", answer: reply("HTTP/1.1 500 " + strings.Repeat("x", 1000) + "\r\n\r\n"), want: resultStatus, err: `"` + strings.Repeat("x", 64) + `"`},

		{name: "JSON", answer: reply(okResponse("application/json", []byte(`{"concurrency":100}`), "")), want: resultMalformed, err: `content type "application/json"`},
		{name: "no type", answer: reply(head("HTTP/1.1 200 OK", cl) + string(v3)), want: resultMalformed, err: `content type ""`},
		{name: "a type that starts like it", answer: reply(okResponse(stats.ContentTypeV3+"x", v3, "")), want: resultMalformed, err: "content type"},
		{name: "two types", answer: reply(head("HTTP/1.1 200 OK", cl, ct, ct) + string(v3)), want: resultMalformed, err: "Content-Type: sent twice"},
		{name: "no length", answer: replyAndClose(head("HTTP/1.1 200 OK", ct) + string(v3)), want: resultMalformed, err: "no Content-Length"},
		{name: "chunked", answer: reply(head("HTTP/1.1 200 OK", ct, "Transfer-Encoding: chunked") + fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(v3), v3)), want: resultMalformed, err: "Transfer-Encoding"},
		{name: "chunked and a length", answer: reply(head("HTTP/1.1 200 OK", cl, ct, "Transfer-Encoding: chunked") + string(v3)), want: resultMalformed, err: "Transfer-Encoding"},
		{name: "two lengths", answer: reply(head("HTTP/1.1 200 OK", cl, "Content-Length: 1", ct) + string(v3)), want: resultMalformed, err: "Content-Length: " + strconv.Itoa(len(v3)) + " and 1"},
		{name: "negative length", answer: reply(head("HTTP/1.1 200 OK", "Content-Length: -1", ct)), want: resultMalformed, err: "not a length"},
		{name: "signed length", answer: reply(head("HTTP/1.1 200 OK", "Content-Length: +123", ct)), want: resultMalformed, err: "not a length"},
		{name: "hex length", answer: reply(head("HTTP/1.1 200 OK", "Content-Length: 0x7b", ct)), want: resultMalformed, err: "not a length"},
		{name: "two lengths in one", answer: reply(head("HTTP/1.1 200 OK", "Content-Length: 123, 123", ct)), want: resultMalformed, err: "not a length"},
		{name: "empty length", answer: reply(head("HTTP/1.1 200 OK", "Content-Length:", ct)), want: resultMalformed, err: "not a length"},
		{name: "overflowing length", answer: reply(head("HTTP/1.1 200 OK", "Content-Length: 18446744073709551617", ct)), want: resultMalformed, err: "not a length"},
		{name: "a body longer than any report", answer: reply(okResponse(stats.ContentTypeV3, make([]byte, stats.MaxBinarySize+1), "")), want: resultMalformed, err: "longer than any stats report"},
		{name: "a huge length", answer: reply(head("HTTP/1.1 200 OK", "Content-Length: 999999999", ct)), want: resultMalformed, err: "longer than any stats report"},
		{name: "a short report", answer: reply(okResponse(stats.ContentTypeV3, v3[:50], "")), want: resultMalformed, err: "malformed stats report"},
		{name: "a report and a byte more", answer: reply(okResponse(stats.ContentTypeV3, append(v3[:len(v3):len(v3)], 0), "")), want: resultMalformed, err: "malformed stats report"},
		{name: "garbage", answer: reply(okResponse(stats.ContentType, []byte{1, 2, 3}, "")), want: resultMalformed, err: "malformed stats report"},
		{name: "empty body", answer: reply(okResponse(stats.ContentTypeV3, nil, "")), want: resultMalformed, err: "malformed stats report"},

		{name: "a head too large", answer: reply("HTTP/1.1 200 OK\r\n" + strings.Repeat("X-Pad: "+strings.Repeat("p", 100)+"\r\n", 100)), want: resultMalformed, err: "response head longer than 4096 bytes"},
		{name: "one field too large", answer: reply(head("HTTP/1.1 200 OK", cl, ct, "X-Pad: "+strings.Repeat("p", maxHead)) + string(v3)), want: resultMalformed, err: "response head longer than 4096 bytes"},
		{name: "a head just too large", answer: reply(head("HTTP/1.1 200 OK", cl, ct, "X-Pad: "+strings.Repeat("p", maxHead-len(head("HTTP/1.1 200 OK", cl, ct, "X-Pad: "))+1)) + string(v3)), want: resultMalformed, err: "response head longer than 4096 bytes"},
		{name: "a head just long enough", answer: reply(head("HTTP/1.1 200 OK", cl, ct, "X-Pad: "+strings.Repeat("p", maxHead-len(head("HTTP/1.1 200 OK", cl, ct, "X-Pad: ")))) + string(v3)), want: resultOK, kept: true},
		{name: "folded field", answer: reply(head("HTTP/1.1 200 OK", cl, ct, "X-Folded: a", " b") + string(v3)), want: resultMalformed, err: "not a field name and a colon"},
		{name: "space before the colon", answer: reply(head("HTTP/1.1 200 OK", "Content-Length : 7", ct) + string(v3)), want: resultMalformed, err: "not a field name and a colon"},
		{name: "no colon", answer: reply(head("HTTP/1.1 200 OK", cl, ct, "garbage") + string(v3)), want: resultMalformed, err: "not a field name and a colon"},
		{name: "a bare LF inside a field", answer: reply(head("HTTP/1.1 200 OK", cl+"\nContent-Length: 3", ct) + string(v3)), want: resultMalformed, err: "control character"},
		{name: "a NUL in a value", answer: reply(head("HTTP/1.1 200 OK", cl, ct, "X-A: a\x00b") + string(v3)), want: resultMalformed, err: "control character"},
		{name: "a control character in the reason", answer: reply(head("HTTP/1.1 200 O\rK", cl, ct) + string(v3)), want: resultMalformed, err: "control character"},
		{name: "HTTP/2", answer: reply(head("HTTP/2 200", cl, ct) + string(v3)), want: resultMalformed, err: "not HTTP/1.1"},
		{name: "not HTTP", answer: reply(head("ICY 200 OK", cl, ct) + string(v3)), want: resultMalformed, err: "not HTTP/1.1"},
		{name: "a short status code", answer: reply(head("HTTP/1.1 20 OK", cl, ct) + string(v3)), want: resultMalformed, err: "malformed status code"},
		{name: "a long status code", answer: reply(head("HTTP/1.1 2000 OK", cl, ct) + string(v3)), want: resultMalformed, err: "malformed status code"},
		{name: "bare LF line ends", answer: replyAndClose("HTTP/1.1 200 OK\n" + cl + "\n" + ct + "\n\n" + string(v3)), want: resultError, err: "connection closed in the response head"},

		{name: "closed at once", answer: func(net.Conn, []byte) bool { return false }, want: resultError, err: "connection closed before the response"},
		{name: "closed in the head", answer: replyAndClose("HTTP/1.1 200 OK\r\nContent-Le"), want: resultError, err: "connection closed in the response head"},
		{name: "closed in the body", answer: replyAndClose(okV3[:len(okV3)-len(v3)+50]), want: resultError, err: fmt.Sprintf("connection closed after 50 of the body's %d bytes", len(v3))},
		{name: "no answer", answer: func(c net.Conn, _ []byte) bool { return true }, want: resultTimeout, err: "i/o timeout"},
		{name: "half a head, then nothing", answer: reply("HTTP/1.1 200 OK\r\n"), want: resultTimeout, err: "i/o timeout"},
		{name: "a short body, then nothing", answer: reply(okV3[:len(okV3)-len(v3)+50]), want: resultTimeout, err: "i/o timeout"},
		{name: "slowloris", answer: func(c net.Conn, _ []byte) bool {
			// A byte every 20 ms: each read gets something, and only the
			// whole exchange's deadline ends it.
			for _, b := range []byte(okResponse(stats.ContentTypeV3, v3, "")) {
				if _, err := c.Write([]byte{b}); err != nil {
					return false
				}
				time.Sleep(20 * time.Millisecond)
			}
			return true
		}, want: resultTimeout, err: "i/o timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := newRawPod(t, tc.answer)
			const timeout = 300 * time.Millisecond
			s, pool := testScraper(t, timeout)
			var r stats.Report
			start := time.Now()
			res, err := s.scrape(context.Background(), start.Add(timeout), pod.id(), &r)
			if elapsed := time.Since(start); elapsed > timeout+time.Second {
				t.Errorf("the scrape took %v, its deadline was %v", elapsed, timeout)
			}
			if res != tc.want || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("got %s, %v; want %s, an error containing %q", resultNames[res], err, resultNames[tc.want], tc.err)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "scrape "+pod.addr()+": ") {
				t.Errorf("error %q does not name the pod", err)
			}
			if res == resultOK && (r.Concurrency != busyReport.Concurrency || r.Requests != busyReport.Requests) {
				t.Errorf("decoded %+v, want %+v", r, busyReport)
			}
			if kept := pool.len() == 1; kept != tc.kept {
				t.Errorf("connection kept: %v, want %v", kept, tc.kept)
			}
		})
	}
}

// TestScrapeRequest: the request is a GET of the stats path in HTTP/1.1,
// naming the pod and the stats versions, and nothing a pod could act on.
func TestScrapeRequest(t *testing.T) {
	pod := newRawPod(t, reply(okResponse(stats.ContentTypeV3, busyReport.AppendBinaryV3(nil), "")))
	s, _ := testScraper(t, time.Second)
	var r stats.Report
	if _, err := s.scrape(context.Background(), time.Now().Add(time.Second), pod.id(), &r); err != nil {
		t.Fatal(err)
	}
	want := "GET " + network.StatsPath + " HTTP/1.1\r\nHost: " + pod.addr() + "\r\nUser-Agent: swell-autoscaler\r\n" +
		"Accept: application/vnd.swell.stats.v3, application/vnd.swell.stats.v2;q=0.9, application/vnd.swell.stats.v1;q=0.5\r\n\r\n"
	if got := pod.requests(); len(got) != 1 || string(got[0]) != want {
		t.Fatalf("requests %q, want %q", got, want)
	}
	for _, addr := range []string{"10.0.0.1:9090\r\nX-Evil: 1", "10.0.0.1:9090 HTTP/1.0", "", "10.0.0.1:\x7f"} {
		if res, err := s.scrape(context.Background(), time.Now().Add(time.Second), podID{addr: addr}, &r); res != resultError || err == nil || !strings.Contains(err.Error(), "not host:port") {
			t.Errorf("scrape %q: %s, %v; want an error", addr, resultNames[res], err)
		}
	}
}

// TestScrapeKeepsTheConnection: one connection serves scrape after
// scrape; one the pod closed while it was idle is replaced, and the
// scrape on it still succeeds.
func TestScrapeKeepsTheConnection(t *testing.T) {
	ok := okResponse(stats.ContentTypeV3, busyReport.AppendBinaryV3(nil), "")
	var n atomic.Int64
	pod := newRawPod(t, func(c net.Conn, _ []byte) bool {
		c.Write([]byte(ok))
		// The third answer closes the connection, as a pod's idle
		// timeout would after it.
		return n.Add(1) != 3
	})
	s, pool := testScraper(t, time.Second)
	var r stats.Report
	for i := range 5 {
		if _, err := s.scrape(context.Background(), time.Now().Add(time.Second), pod.id(), &r); err != nil {
			t.Fatalf("scrape %d: %v", i, err)
		}
	}
	if got := pod.accepts.Load(); got != 2 {
		t.Fatalf("%d connections for 5 scrapes, the pod closing one after the third; want 2", got)
	}
	if pool.len() != 1 {
		t.Fatalf("pool holds %d connections, want 1", pool.len())
	}

	// A pod that closes every connection once it has answered: each
	// scrape on a kept connection finds it closed, whether before it
	// writes or after, and dials once more, never twice.
	var answered atomic.Int64
	closer := newRawPod(t, func(c net.Conn, _ []byte) bool {
		answered.Add(1)
		c.Write([]byte(ok))
		return false
	})
	for i := range 3 {
		if _, err := s.scrape(context.Background(), time.Now().Add(time.Second), closer.id(), &r); err != nil {
			t.Fatalf("scrape %d: %v", i, err)
		}
	}
	if a, c := answered.Load(), closer.accepts.Load(); a != 3 || c != 3 {
		t.Fatalf("%d answers on %d connections for 3 scrapes, want 3 on 3", a, c)
	}
}

// TestScrapeDropsAConnectionWithBytesWaiting: a pod that sends a second,
// forged answer after its first and keeps the connection (as one about to
// exit would, hoping another pod gets its address) has it read by no
// scrape: the next scrape finds bytes waiting on the kept connection,
// drops it and asks on a new one (review finding 3).
func TestScrapeDropsAConnectionWithBytesWaiting(t *testing.T) {
	real := okResponse(stats.ContentTypeV3, busyReport.AppendBinaryV3(nil), "")
	forged := busyReport
	forged.Concurrency, forged.Requests = 42, 4242
	forgery := okResponse(stats.ContentTypeV3, forged.AppendBinaryV3(nil), "")
	sendForgery := make(chan struct{})
	forgerySent := make(chan struct{})
	var answers atomic.Int64
	pod := newRawPod(t, func(c net.Conn, _ []byte) bool {
		c.Write([]byte(real))
		if answers.Add(1) == 1 {
			// Once the first answer was read and the connection kept.
			go func() {
				<-sendForgery
				c.Write([]byte(forgery))
				close(forgerySent)
			}()
		}
		return true
	})
	s, _ := testScraper(t, time.Second)
	var r stats.Report
	if _, err := s.scrape(context.Background(), time.Now().Add(time.Second), pod.id(), &r); err != nil {
		t.Fatal(err)
	}
	close(sendForgery)
	// On loopback the bytes are in the scraper's socket once the write
	// returned.
	<-forgerySent
	if _, err := s.scrape(context.Background(), time.Now().Add(time.Second), pod.id(), &r); err != nil {
		t.Fatal(err)
	}
	if r.Concurrency != busyReport.Concurrency || r.Requests != busyReport.Requests {
		t.Errorf("the second scrape read %+v, want the pod's answer %+v, not the bytes it had sent unasked", r, busyReport)
	}
	if got := pod.accepts.Load(); got != 2 {
		t.Errorf("%d connections, want 2: the kept one dropped for the bytes waiting on it", got)
	}

}

// TestScrapeKeysConnectionsByPod: a connection opened to one pod never
// serves another at the same address (review finding 3): pod b's scrape
// dials a connection of its own, and never reads what pod a's connection
// answers, while pod a's next scrape still goes on a's. The look before
// reuse sees only bytes that have arrived; the connection's other end
// answers the next request as it likes, and on a's connection it answers
// with a forgery.
func TestScrapeKeysConnectionsByPod(t *testing.T) {
	real := okResponse(stats.ContentTypeV3, busyReport.AppendBinaryV3(nil), "")
	forged := busyReport
	forged.Concurrency, forged.Requests = 42, 4242
	forgery := okResponse(stats.ContentTypeV3, forged.AppendBinaryV3(nil), "")
	var mu sync.Mutex
	var first net.Conn
	answered := map[net.Conn]int{}
	pod := newRawPod(t, func(c net.Conn, _ []byte) bool {
		mu.Lock()
		if first == nil {
			first = c
		}
		answered[c]++
		forge := c == first && answered[c] > 1
		mu.Unlock()
		if forge {
			c.Write([]byte(forgery))
		} else {
			c.Write([]byte(real))
		}
		return true
	})
	a := podID{service: "team-a/web", addr: pod.addr()}
	b := podID{service: "team-b/api", addr: pod.addr()}
	s, pool := testScraper(t, time.Second)
	var r stats.Report
	for _, id := range []podID{a, b, a} {
		if _, err := s.scrape(context.Background(), time.Now().Add(time.Second), id, &r); err != nil {
			t.Fatal(err)
		}
		if id == b && (r.Concurrency != busyReport.Concurrency || r.Requests != busyReport.Requests) {
			t.Fatalf("pod b's scrape read concurrency %v, %d requests: the answer on pod a's connection; want b's own, %v and %d",
				r.Concurrency, r.Requests, busyReport.Concurrency, busyReport.Requests)
		}
	}
	if got := pod.accepts.Load(); got != 2 {
		t.Errorf("%d connections for a, b, a at one address, want 2: one for each pod", got)
	}
	if pool.len() != 2 {
		t.Errorf("the pool holds %d connections, want 2: a's and b's", pool.len())
	}
}

// TestScrapeKeepsAConnectionPastItsDeadline: the deadline of a kept
// connection's last scrape has passed by the next round; the look before
// reuse does not mind it, and the next scrape goes on the same connection.
func TestScrapeKeepsAConnectionPastItsDeadline(t *testing.T) {
	pod := newRawPod(t, reply(okResponse(stats.ContentTypeV3, busyReport.AppendBinaryV3(nil), "")))
	s, pool := testScraper(t, time.Second)
	var r stats.Report
	for i := range 3 {
		if _, err := s.scrape(context.Background(), time.Now().Add(time.Second), pod.id(), &r); err != nil {
			t.Fatalf("scrape %d: %v", i, err)
		}
		// As the second to the next round does.
		for j := range pool.shards {
			sh := &pool.shards[j]
			sh.mu.Lock()
			for _, ic := range sh.conns {
				ic.c.SetDeadline(aLongTimeAgo)
			}
			sh.mu.Unlock()
		}
	}
	if got := pod.accepts.Load(); got != 1 {
		t.Fatalf("%d connections for 3 scrapes, each after the last one's deadline; want 1", got)
	}
}

// TestScrapeOnAKeptConnectionAllocatesNothing: the look before reuse
// included. The pod allocates nothing either, for the count is the
// process's: it reads each request whole, as long as the scraper sends it,
// and writes one answer.
func TestScrapeOnAKeptConnectionAllocatesNothing(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	pod := podID{service: "ns/svc", addr: l.Addr().String()}
	req, err := appendRequest(nil, pod.addr)
	if err != nil {
		t.Fatal(err)
	}
	answer := []byte(okResponse(stats.ContentTypeV3, busyReport.AppendBinaryV3(nil), ""))
	served := make(chan struct{})
	go func() {
		defer close(served)
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, len(req))
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			if _, err := c.Write(answer); err != nil {
				return
			}
		}
	}()
	s, pool := testScraper(t, time.Second)
	var r stats.Report
	var failed error
	scrape := func() {
		if _, err := s.scrape(context.Background(), time.Now().Add(time.Second), pod, &r); err != nil {
			failed = err
		}
	}
	scrape()
	if n := testing.AllocsPerRun(100, scrape); n != 0 || failed != nil {
		t.Fatalf("%v allocs a scrape on a kept connection (error: %v), want 0", n, failed)
	}
	pool.closeIdle(time.Now().Add(time.Hour))
	<-served
}

// TestScrapeAbort: abort ends a scrape in progress at once, and fails the
// next ones without a request until reset.
func TestScrapeAbort(t *testing.T) {
	pod := newRawPod(t, func(net.Conn, []byte) bool { return true }) // never answers
	s, _ := testScraper(t, time.Minute)
	done := make(chan error, 1)
	go func() {
		var r stats.Report
		_, err := s.scrape(context.Background(), time.Now().Add(time.Minute), pod.id(), &r)
		done <- err
	}()
	for len(pod.requests()) == 0 {
		time.Sleep(time.Millisecond)
	}
	s.abort(context.Canceled)
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("aborted scrape: %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("abort did not end the scrape")
	}
	var r stats.Report
	if res, err := s.scrape(context.Background(), time.Now().Add(time.Minute), pod.id(), &r); res != resultError || !errors.Is(err, context.Canceled) {
		t.Fatalf("scrape after abort: %s, %v; want context.Canceled", resultNames[res], err)
	}
	if n := pod.accepts.Load(); n != 1 {
		t.Fatalf("%d connections, want 1: a scrape after abort dials nothing", n)
	}
	s.reset()
	ok := okResponse(stats.ContentTypeV3, busyReport.AppendBinaryV3(nil), "")
	good := newRawPod(t, reply(ok))
	if _, err := s.scrape(context.Background(), time.Now().Add(time.Second), good.id(), &r); err != nil {
		t.Fatalf("scrape after reset: %v", err)
	}
}

// TestRoundCancelled: a round whose context is cancelled ends its scrapes
// in progress then, not at their deadline.
func TestRoundCancelled(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Timeout, c.RoundTimeout, c.Sampling = time.Minute, time.Minute, &Sampling{} })
	hung := newRawPod(t, func(net.Conn, []byte) bool { return true })
	r.pods.Set("ns/svc", hung.addr())
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for len(hung.requests()) == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	start := time.Now()
	if got := r.c.Round(ctx, r.clock.Now(), r.pods.targets(t)); len(got) != 0 {
		t.Fatalf("samples from a cancelled round: %+v", got)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Fatalf("a cancelled round took %v", elapsed)
	}
	if n := r.counter(t, "swell_autoscaler_scrapes_total", resultNames[resultError]); n != 1 {
		t.Fatalf("scrapes{result=error} = %v, want 1", n)
	}
}

func TestConnPool(t *testing.T) {
	var closed atomic.Int64
	conn := func() net.Conn { return &countingConn{closed: &closed} }
	at := func(addr string) podID { return podID{addr: addr} }
	now := time.Now()
	p := newConnPool(2, time.Minute, clock.RealClock{})
	a, b := conn(), conn()
	p.put(at("a"), a, now)
	p.put(at("a"), b, now) // a second for one pod
	if closed.Load() != 1 || p.len() != 1 {
		t.Fatalf("two connections for one pod: %d closed, %d kept; want 1 and 1", closed.Load(), p.len())
	}
	p.put(at("b"), conn(), now)
	p.put(at("c"), conn(), now) // past max
	if closed.Load() != 2 || p.len() != 2 {
		t.Fatalf("past max: %d closed, %d kept; want 2 and 2", closed.Load(), p.len())
	}
	if got := p.get(at("a"), now.Add(time.Second)); got == nil || got.(*poolConn).Conn != a {
		t.Fatalf("get(a) = %v, want the connection put", got)
	}
	if got := p.get(at("a"), now); got != nil || p.len() != 1 {
		t.Fatalf("get(a) again = %v, want none; %d kept, want 1", got, p.len())
	}
	if got := p.get(at("b"), now.Add(time.Minute)); got != nil || closed.Load() != 3 {
		t.Fatalf("get(b) after its idle time = %v, %d closed; want none, and it closed", got, closed.Load())
	}
	if p.len() != 0 {
		t.Fatalf("%d kept, want 0", p.len())
	}

	// The sweeper closes what nobody takes, every half idle time while the
	// pool holds any: on a fake clock, each sweep signalled.
	clk := clocktesting.NewFakeClock(now)
	const idle = time.Minute
	p = newConnPool(10, idle, clk)
	swept := make(chan struct{}, 1)
	p.swept = func() { swept <- struct{}{} }
	step := func(what string) {
		t.Helper()
		clk.Step(idle / 2)
		select {
		case <-swept:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no sweep after half the idle time", what)
		}
	}
	for i := range 3 {
		p.put(at(strconv.Itoa(i)), conn(), clk.Now())
	}
	closed.Store(0)
	step("first")
	step("second") // idle exactly: not yet before the cutoff
	if p.len() != 3 || closed.Load() != 0 {
		t.Fatalf("within the idle time: %d kept, %d closed; want 3 and 0", p.len(), closed.Load())
	}
	step("third")
	if p.len() != 0 || closed.Load() != 3 {
		t.Fatalf("past the idle time: %d kept, %d closed; want 0 and 3", p.len(), closed.Load())
	}
	// Empty, it is not armed: nothing fires.
	clk.Step(idle)
	select {
	case <-swept:
		t.Fatal("a sweep with nothing in the pool")
	default:
	}
	// And comes back for the next.
	p.put(at("again"), conn(), clk.Now())
	for range 3 {
		step("again")
	}
	if p.len() != 0 || closed.Load() != 4 {
		t.Fatalf("the sweeper did not come back: %d kept, %d closed; want 0 and 4", p.len(), closed.Load())
	}
}

func TestMaxIdleConns(t *testing.T) {
	limit, ok := openFileLimit()
	if !ok {
		t.Skip("no open-file limit")
	}
	got := maxIdleConns(128)
	if got < limit/2 || got > limit-min(limit/2, 2048) {
		t.Fatalf("maxIdleConns(128) = %d with a limit of %d files", got, limit)
	}
}

// countingConn is a net.Conn that counts its closes.
type countingConn struct {
	net.Conn
	closed *atomic.Int64
}

func (c *countingConn) Close() error { c.closed.Add(1); return nil }

// TestNetHTTPClientStillScrapes: Config.Client scrapes through net/http,
// with the same results.
func TestNetHTTPClientStillScrapes(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Client = NewHTTPClient(time.Second); c.Sampling = &Sampling{} })
	good := newFakePod(t, rep(3, 1, 20, 5))
	status := newFakePod(t, stats.Report{})
	status.misbehave(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "boom", http.StatusServiceUnavailable) })
	r.pods.Set("ns/svc", good.addr(), status.addr())
	s := r.round(t)["ns/svc"]
	if s.Scraped != 1 || s.Concurrency != 2*3 {
		t.Fatalf("got %+v, want 1 scraped of 2, concurrency 6", s)
	}
	if n := r.counter(t, "swell_autoscaler_scrapes_total", resultNames[resultStatus]); n != 1 {
		t.Fatalf("scrapes{result=status} = %v, want 1", n)
	}
	if r.c.pool != nil {
		t.Fatal("a collector with a Client keeps a pool of its own")
	}
}
