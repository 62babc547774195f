package proxy

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"

	"github.com/swell-run/swell/pkg/network"
)

func TestReject(t *testing.T) {
	for _, reason := range []string{network.ReasonQueueFull, "something-new"} {
		rec := httptest.NewRecorder()
		Reject(rec, http.StatusServiceUnavailable, reason)
		if rec.Code != http.StatusServiceUnavailable {
			t.Errorf("%s: status %d", reason, rec.Code)
		}
		if got := rec.Header().Get(network.ReasonHeader); got != reason {
			t.Errorf("%s: reason header %q", reason, got)
		}
		if got := rec.Body.String(); got != reason+"\n" {
			t.Errorf("%s: body %q", reason, got)
		}
		if got := rec.Header().Get("Content-Type"); got != "text/plain; charset=utf-8" {
			t.Errorf("%s: content type %q", reason, got)
		}
	}
}

func TestRejectKnownReasonDoesNotAllocate(t *testing.T) {
	w := &discard{h: http.Header{}}
	if n := testing.AllocsPerRun(100, func() { Reject(w, http.StatusServiceUnavailable, network.ReasonQueueFull) }); n != 0 {
		t.Errorf("Reject allocates %v times", n)
	}
}

type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

func TestSetForwardedKeepsTheOriginalHostAndProto(t *testing.T) {
	in := httptest.NewRequest(http.MethodGet, "http://pod/", nil)
	in.RemoteAddr = "10.0.0.2:1234"
	in.Header.Set("X-Forwarded-For", "203.0.113.7")
	in.Header.Set("X-Forwarded-Proto", "https")
	in.Header.Set("X-Forwarded-Host", "shop.example.com")
	pr := &httputil.ProxyRequest{In: in, Out: in.Clone(in.Context())}
	// Rewrite hooks see Out with the inbound forwarding headers removed.
	for _, k := range []string{"X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host"} {
		pr.Out.Header.Del(k)
	}
	pr.SetURL(&url.URL{Scheme: "http", Host: "127.0.0.1:8080"})
	SetForwarded(pr)
	h := pr.Out.Header
	if got := h.Get("X-Forwarded-For"); got != "203.0.113.7, 10.0.0.2" {
		t.Errorf("X-Forwarded-For %q, want the chain with this hop's client", got)
	}
	if got := h.Get("X-Forwarded-Proto"); got != "https" {
		t.Errorf("X-Forwarded-Proto %q, want the original https", got)
	}
	if got := h.Get("X-Forwarded-Host"); got != "shop.example.com" {
		t.Errorf("X-Forwarded-Host %q, want the original host", got)
	}
}

func TestBufferPoolHandsOutFullBuffers(t *testing.T) {
	var p BufferPool
	b := p.Get()
	p.Put(b[:10]) // ReverseProxy may return a resliced buffer
	if got := len(p.Get()); got != BufferSize {
		t.Errorf("buffer of %d bytes, want %d", got, BufferSize)
	}
}
