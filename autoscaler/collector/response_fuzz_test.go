package collector

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/swell-run/swell/pkg/stats"
)

// responseSeeds are responses good and bad for the fuzzers to start from.
func responseSeeds() []string {
	v1, v3 := busyReport.AppendBinary(nil), busyReport.AppendBinaryV3(nil)
	return []string{
		okResponse(stats.ContentTypeV3, v3, ""),
		okResponse(stats.ContentType, v1, "Connection: close\r\n"),
		okResponse(stats.ContentTypeV3, v3, "") + "HTTP/1.1 200 OK\r\n\r\n",
		"HTTP/1.0 200\r\nContent-Length: 57\r\nContent-Length: 57\r\nContent-Type: " + stats.ContentType + ";q=1\r\n\r\n" + string(v1),
		"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: " + stats.ContentTypeV3 + "\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX-Folded: a\r\n b\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\nContent-Length: 0\n\n",
	}
}

// FuzzParseHead: parsing never panics, and a head it accepts as a stats
// response's (a 200 with a length and no Transfer-Encoding) net/http reads
// the same: the parser is never the more lenient of the two there.
func FuzzParseHead(f *testing.F) {
	for _, s := range responseSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n := headEnd(b, 0)
		if n == 0 {
			return
		}
		head := b[:n]
		h, err := parseHead(head)
		if err != nil {
			return
		}
		if h.status < 100 || h.status > 999 || h.contentLength < -1 || len(head) > maxHead {
			t.Fatalf("accepted %q as %+v", head, h)
		}
		if h.status != 200 || h.contentLength < 0 || h.transferEncoding {
			return
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(head)), nil)
		if err != nil {
			t.Fatalf("accepted %q, which net/http refuses: %v", head, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.ContentLength != int64(h.contentLength) || resp.Header.Get("Content-Type") != string(h.contentType) {
			t.Fatalf("read %q as status %d, length %d, type %q; net/http as %d, %d, %q",
				head, h.status, h.contentLength, h.contentType, resp.StatusCode, resp.ContentLength, resp.Header.Get("Content-Type"))
		}
	})
}

// FuzzScrapeResponse: a scrape reading any response, arriving in chunks
// of any size, never panics and never reads past its bounds, and a report
// it accepts is one net/http reads from the same bytes, whole.
func FuzzScrapeResponse(f *testing.F) {
	for _, s := range responseSeeds() {
		f.Add(uint8(0), []byte(s))
		f.Add(uint8(7), []byte(s))
	}
	f.Fuzz(func(t *testing.T, chunk uint8, resp []byte) {
		client, pod := net.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer pod.Close()
			// The request, then the response in chunks, then the end.
			br := bufio.NewReader(pod)
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					return
				}
				if line == "\r\n" {
					break
				}
			}
			for b := resp; len(b) > 0; {
				n := min(len(b), int(chunk)+1)
				if chunk == 0 {
					n = len(b)
				}
				if _, err := pod.Write(b[:n]); err != nil {
					return
				}
				b = b[n:]
			}
		}()
		s := newConnScraper(newConnPool(0, time.Minute, clock.RealClock{}), time.Second)
		var err error
		if s.req, err = appendRequest(nil, "10.0.0.1:9090"); err != nil {
			t.Fatal(err)
		}
		var r stats.Report
		res, keep, err := s.exchange(client, time.Now().Add(time.Second), &r)
		client.Close()
		<-done
		if res == resultTimeout {
			t.Fatalf("a timeout on a response that ends: %v", err)
		}
		if res != resultOK {
			if keep {
				t.Fatalf("kept the connection after %s: %v", resultNames[res], err)
			}
			return
		}
		hr, herr := http.ReadResponse(bufio.NewReader(bytes.NewReader(resp)), nil)
		if herr != nil {
			t.Fatalf("accepted %q, which net/http refuses: %v", resp, herr)
		}
		body, herr := io.ReadAll(hr.Body)
		if herr != nil || hr.StatusCode != 200 || !strings.HasPrefix(hr.Header.Get("Content-Type"), "application/vnd.swell.stats.v") {
			t.Fatalf("accepted %q; net/http reads status %d, type %q, body error %v", resp, hr.StatusCode, hr.Header.Get("Content-Type"), herr)
		}
		var want stats.Report
		if err := want.UnmarshalBinary(body); err != nil {
			t.Fatalf("accepted %q; net/http reads a body %q that is not a report: %v", resp, body, err)
		}
		if got, want := r.AppendBinaryV3(nil), want.AppendBinaryV3(nil); !bytes.Equal(got, want) {
			t.Fatalf("accepted %q as %+v; net/http reads %+v", resp, r, want)
		}
	})
}
