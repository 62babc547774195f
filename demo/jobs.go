package demo

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// The app's background work, the way a model server works its queue:
// POST /jobs?work=D&count=N queues N jobs of D each and answers 202 at
// once, and one worker does them in order. The requests stay short, so
// the app's concurrency says nothing of its load; GET /metrics shows how
// many jobs wait (hello_jobs_waiting), the gauge to scale it on.
const (
	jobsPath    = "/jobs"
	metricsPath = "/metrics"
)

// Bounds on what one request may queue, and on the queue: a demo must not
// be a way to fill a machine's memory.
const (
	maxJobsPerRequest = 1000
	maxJobsQueued     = 100_000
	maxJobWork        = time.Hour
)

// jobs is the queue and its worker.
type jobs struct {
	clock clock.Clock
	wake  chan struct{}

	mu    sync.Mutex
	queue []time.Duration
	// working says the worker holds a job now.
	working bool
	done    int64
}

func newJobs(clk clock.Clock) *jobs {
	return &jobs{clock: clk, wake: make(chan struct{}, 1)}
}

// add queues n jobs of work each and returns how many wait then, or an
// error when the queue would pass maxJobsQueued.
func (j *jobs) add(work time.Duration, n int) (int, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.queue)+n > maxJobsQueued {
		return 0, fmt.Errorf("the queue holds %d jobs and takes at most %d", len(j.queue), maxJobsQueued)
	}
	for range n {
		j.queue = append(j.queue, work)
	}
	select {
	case j.wake <- struct{}{}:
	default:
	}
	return j.waitingLocked(), nil
}

// waiting is how many jobs are queued or being done.
func (j *jobs) waiting() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.waitingLocked()
}

func (j *jobs) waitingLocked() int {
	n := len(j.queue)
	if j.working {
		n++
	}
	return n
}

// run does the jobs one by one until ctx ends; what is left then is
// dropped, as a process that exits drops its memory.
func (j *jobs) run(ctx context.Context) {
	for {
		j.mu.Lock()
		if len(j.queue) == 0 {
			j.working = false
			j.mu.Unlock()
			select {
			case <-j.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		work := j.queue[0]
		j.queue = j.queue[1:]
		j.working = true
		j.mu.Unlock()
		select {
		case <-j.clock.After(work):
		case <-ctx.Done():
			return
		}
		j.mu.Lock()
		j.done++
		j.mu.Unlock()
	}
}

// serveJobs queues the jobs a POST asks for.
func (s *server) serveJobs(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, r.Method+" "+jobsPath+": accepted method is POST", http.StatusMethodNotAllowed)
		return
	}
	vals, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		http.Error(w, fmt.Sprintf("malformed query %q: %v", r.URL.RawQuery, err), http.StatusBadRequest)
		return
	}
	work, n := time.Second, 1
	if v := vals.Get("work"); v != "" {
		if !parseDelay(v, &work) || work > maxJobWork {
			http.Error(w, (&badKnob{"work", v, acceptDuration + ", at most 1h"}).Error(), http.StatusBadRequest)
			return
		}
	}
	if v := vals.Get("count"); v != "" {
		c, err := strconv.Atoi(v)
		if err != nil || c < 1 || c > maxJobsPerRequest {
			http.Error(w, (&badKnob{"count", v, "a whole number of jobs from 1 to " + strconv.Itoa(maxJobsPerRequest)}).Error(), http.StatusBadRequest)
			return
		}
		n = c
	}
	waiting, err := s.jobs.add(work, n)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header()["Content-Type"] = textPlain
	w.WriteHeader(http.StatusAccepted)
	fmt.Fprintf(w, "queued %d jobs of %s; %d waiting\n", n, work, waiting)
}

// serveMetrics writes the app's gauges in the Prometheus text format.
func (s *server) serveMetrics(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	fmt.Fprintf(w, "# HELP hello_jobs_waiting Jobs queued with POST /jobs and not finished.\n"+
		"# TYPE hello_jobs_waiting gauge\nhello_jobs_waiting %d\n"+
		"# HELP hello_requests_in_flight Requests being served.\n"+
		"# TYPE hello_requests_in_flight gauge\nhello_requests_in_flight %d\n",
		s.jobs.waiting(), s.counter.snapshot().InFlight)
}
