package demo

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// discardWriter is a reusable http.ResponseWriter, so a benchmark counts
// only what the handler itself allocates.
type discardWriter struct {
	h      http.Header
	status int
	n      int
}

func (w *discardWriter) Header() http.Header  { return w.h }
func (w *discardWriter) WriteHeader(code int) { w.status = code }
func (w *discardWriter) Write(p []byte) (int, error) {
	w.n += len(p)
	return len(p), nil
}

func (w *discardWriter) reset() {
	clear(w.h)
	w.status, w.n = 0, 0
}

// BenchmarkHello measures the plain GET / path, the baseline of proxy
// benchmarks. "recorder" includes httptest.ResponseRecorder's own
// allocations; "handler" and "parallel" reuse a writer, leaving the
// handler's own cost.
func BenchmarkHello(b *testing.B) {
	app := newServer(options{Replica: "bench"})
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	want := len(app.hello)

	b.Run("recorder", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			rec := httptest.NewRecorder()
			app.ServeHTTP(rec, req)
			if rec.Body.Len() != want {
				b.Fatalf("body %q", rec.Body)
			}
		}
	})
	b.Run("handler", func(b *testing.B) {
		w := &discardWriter{h: make(http.Header)}
		b.ReportAllocs()
		for b.Loop() {
			w.reset()
			app.ServeHTTP(w, req)
			if w.n != want {
				b.Fatalf("wrote %d bytes, want %d", w.n, want)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			w := &discardWriter{h: make(http.Header)}
			for pb.Next() {
				w.reset()
				app.ServeHTTP(w, req)
			}
		})
	})
}

// BenchmarkKnobs measures a request with knobs that cost no time, the
// overhead every knob request pays on top of its sleep or burn.
func BenchmarkKnobs(b *testing.B) {
	app := newServer(options{})
	req := httptest.NewRequest(http.MethodGet, "/?sleep=0&status=200&size=100", nil)
	w := &discardWriter{h: make(http.Header)}
	b.ReportAllocs()
	for b.Loop() {
		w.reset()
		app.ServeHTTP(w, req)
		if w.n != 100 {
			b.Fatalf("wrote %d bytes", w.n)
		}
	}
}
