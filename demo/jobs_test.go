package demo

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestJobs: jobs are queued at once and done one by one on the clock; the
// metrics page shows how many wait. The test runs in a synctest bubble,
// whose clock moves only when every goroutine in it waits.
func TestJobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(options{})
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		wg.Go(func() { s.jobs.run(ctx) })
		defer func() { cancel(); wg.Wait() }()

		do := func(method, target string) (int, string) {
			w := httptest.NewRecorder()
			s.ServeHTTP(w, httptest.NewRequest(method, target, nil))
			b, _ := io.ReadAll(w.Result().Body)
			return w.Code, string(b)
		}
		waiting := func() string {
			synctest.Wait() // the worker has done what it can
			_, body := do("GET", "/metrics")
			for _, line := range strings.Split(body, "\n") {
				if v, ok := strings.CutPrefix(line, "hello_jobs_waiting "); ok {
					return v
				}
			}
			t.Fatalf("no hello_jobs_waiting in %q", body)
			return ""
		}

		if code, body := do("POST", "/jobs?work=1s&count=3"); code != http.StatusAccepted || body != "queued 3 jobs of 1s; 3 waiting\n" {
			t.Fatalf("POST /jobs: %d %q", code, body)
		}
		if got := waiting(); got != "3" {
			t.Fatalf("waiting %s, want 3", got)
		}
		// The worker holds each job for its second.
		time.Sleep(999 * time.Millisecond)
		if got := waiting(); got != "3" {
			t.Fatalf("after 999ms: waiting %s, want 3", got)
		}
		for want := 2; want >= 0; want-- {
			time.Sleep(time.Second)
			if got := waiting(); got != strconv.Itoa(want) {
				t.Fatalf("waiting %s, want %d", got, want)
			}
		}

		for _, tt := range []struct {
			method, target string
			code           int
			body           string
		}{
			{"GET", "/jobs", http.StatusMethodNotAllowed, "GET /jobs: accepted method is POST"},
			{"POST", "/jobs?count=0", http.StatusBadRequest, `bad count="0": accepted is a whole number of jobs from 1 to 1000`},
			{"POST", "/jobs?count=1001", http.StatusBadRequest, `bad count="1001"`},
			{"POST", "/jobs?work=2h", http.StatusBadRequest, `bad work="2h": accepted is a duration such as 100ms or 1.5s, or whole milliseconds such as 100, at most 1h`},
			{"POST", "/jobs?work=-1s", http.StatusBadRequest, `bad work="-1s"`},
		} {
			if code, body := do(tt.method, tt.target); code != tt.code || !strings.Contains(body, tt.body) {
				t.Errorf("%s %s: %d %q, want %d and %q", tt.method, tt.target, code, body, tt.code, tt.body)
			}
		}
		if got := waiting(); got != "0" {
			t.Errorf("bad requests queued jobs: %s waiting", got)
		}
	})
}
