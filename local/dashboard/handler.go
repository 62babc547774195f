package dashboard

import (
	"embed"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
)

//go:embed static
var static embed.FS

// contentSecurityPolicy lets the page load its own script, style and API and
// nothing else: no inline code, no other origin, no framing elsewhere.
const contentSecurityPolicy = "default-src 'self'; base-uri 'self'; form-action 'self'; frame-ancestors 'self'"

// asset is one embedded file of the page.
type asset struct {
	body        []byte
	contentType string
}

// Handler serves the dashboard page, its script and style, and the history
// API at /api/history?since=<unix ms>. It only answers GET and HEAD. The
// page refers to everything by relative URL, so the handler may be mounted
// under a prefix (with http.StripPrefix) as long as the page is reached with
// a trailing slash.
func (r *Recorder) Handler() http.Handler {
	assets := map[string]asset{
		"/":              {mustRead("static/index.html"), "text/html; charset=utf-8"},
		"/dashboard.js":  {mustRead("static/dashboard.js"), "text/javascript; charset=utf-8"},
		"/dashboard.css": {mustRead("static/dashboard.css"), "text/css; charset=utf-8"},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, fmt.Sprintf("method %s not allowed: use GET or HEAD", req.Method), http.StatusMethodNotAllowed)
			return
		}
		if req.URL.Path == "/api/history" {
			r.serveHistory(w, req)
			return
		}
		a, ok := assets[req.URL.Path]
		if !ok {
			http.NotFound(w, req)
			return
		}
		// The files change only with the binary; revalidating is cheap locally.
		h.Set("Cache-Control", "no-cache")
		h.Set("Content-Type", a.contentType)
		h.Set("Content-Length", strconv.Itoa(len(a.body)))
		_, _ = w.Write(a.body)
	})
}

// serveHistory answers the history API. The page passes the T of the newest
// point it holds as since, and so fetches only what is new.
func (r *Recorder) serveHistory(w http.ResponseWriter, req *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	q, err := url.ParseQuery(req.URL.RawQuery)
	if err != nil {
		http.Error(w, fmt.Sprintf("bad query %q: %v", req.URL.RawQuery, err), http.StatusBadRequest)
		return
	}
	since := int64(-1 << 63)
	if vs, ok := q["since"]; ok {
		if len(vs) != 1 {
			http.Error(w, "since given more than once: give it at most once, in unix milliseconds", http.StatusBadRequest)
			return
		}
		since, err = strconv.ParseInt(vs[0], 10, 64)
		if err != nil {
			http.Error(w, fmt.Sprintf("bad since %q: want an integer, unix time in milliseconds", vs[0]), http.StatusBadRequest)
			return
		}
	}
	body, err := json.Marshal(r.history(since))
	if err != nil {
		// Record keeps every number finite, so this is a bug.
		http.Error(w, "encode history: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}

func mustRead(name string) []byte {
	b, err := static.ReadFile(name)
	if err != nil {
		panic(fmt.Sprintf("dashboard: embedded %s: %v", name, err))
	}
	return b
}
