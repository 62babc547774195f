package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swell-run/swell/internal/proctest"
	"github.com/swell-run/swell/local"
)

// steady sends GET path at rate a second until ctx ends, each on its own
// goroutine so that a slow answer does not slow the rate, and waits for
// the last answer. It returns the answers that were not 200.
func steady(ctx context.Context, r *localRun, path string, rate int) (bad int) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return bad
		case <-tick.C:
			wg.Go(func() {
				res, err := (&http.Client{Timeout: e2eWait}).Get(r.url + path)
				ok := err == nil && res.StatusCode == http.StatusOK
				if err == nil {
					io.Copy(io.Discard, res.Body)
					res.Body.Close()
				}
				if !ok {
					mu.Lock()
					bad++
					mu.Unlock()
				}
			})
		}
	}
}

// TestLocalScalesOnCPU: a CPU-bound app under a step of load scales on
// its CPU while its requests in flight stay under one, and goes back to
// zero once idle. Four requests a second of 50ms of CPU each are 0.2
// cores; at 25m a replica that asks for eight replicas (four, the most
// allowed), where concurrency (0.2 in flight, 70 a replica) would ask for
// one. Three or more need only 0.05 cores to be measured: the app's busy
// loop runs for wall time, so on a machine whose cores other work holds
// it burns less than it asks for, and a target near the demand would
// fail there.
func TestLocalScalesOnCPU(t *testing.T) {
	r := startLocal(t, "--name", "hello", "--metric", "cpu", "--cpu-target", "25m", "--max-scale", "4",
		"--window", "6s", "--scale-to-zero-grace-period", "2s", "--initial-scale", "0", "--allow-zero-initial-scale",
		"--", proctest.Build(t, swellPkg), "hello")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- steady(ctx, r, "/?cpu=50ms", 4) }()
	st := r.awaitStatus(t, func(st local.ServiceStatus) bool { return st.Desired >= 3 && strings.HasPrefix(st.Reason, "cpu: ") },
		"the service never scaled to 3 or more on its CPU")
	cancel()
	if bad := <-done; bad > 0 {
		t.Errorf("%d requests were not answered 200", bad)
	}
	t.Logf("scaled on CPU: %s", st.Reason)
	r.awaitStatus(t, func(st local.ServiceStatus) bool { return st.Desired == 0 && len(st.Replicas) == 0 },
		"the service did not go back to zero once idle")
}

// TestLocalScalesOnAppGauge: jobs queued in the app, with one short
// request, drive its gauge (hello_jobs_waiting); the service scales on it
// while nothing is in flight, and goes back to zero once the jobs are
// done. Twelve one-second jobs at 2 a replica ask for six, capped at four.
func TestLocalScalesOnAppGauge(t *testing.T) {
	r := startLocal(t, "--name", "hello", "--metric", "concurrency,gauge", "--gauge", "hello_jobs_waiting",
		"--gauge-target", "2", "--max-scale", "4", "--window", "6s", "--scale-to-zero-grace-period", "2s",
		"--", proctest.Build(t, swellPkg), "hello")
	res, err := http.Post(r.url+"/jobs?work=1s&count=12", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /jobs: %d %q", res.StatusCode, body)
	}
	st := r.awaitStatus(t, func(st local.ServiceStatus) bool { return st.Desired >= 3 && strings.HasPrefix(st.Reason, "gauge: ") },
		"the service never scaled to 3 or more on the gauge")
	t.Logf("scaled on the gauge: %s", st.Reason)
	r.awaitStatus(t, func(st local.ServiceStatus) bool { return st.Desired == 0 && len(st.Replicas) == 0 },
		"the service did not go back to zero once the jobs were done")
}

// TestLocalBadGaugeKeepsScaling: an app whose gauge is not there is told
// in the events, and the service still scales on its requests and goes to
// zero.
func TestLocalBadGaugeKeepsScaling(t *testing.T) {
	r := startLocal(t, "--name", "hello", "--metric", "concurrency,gauge", "--gauge", "hello_jobs_waitin",
		"--gauge-target", "2", "--window", "6s", "--scale-to-zero-grace-period", "2s",
		"--", proctest.Build(t, swellPkg), "hello")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	if bad := steady(ctx, r, "/", 5); bad > 0 {
		t.Errorf("%d requests were not answered 200", bad)
	}
	r.waitOutput(t, "app gauge hello_jobs_waitin unreadable on 1 replicas: missing")
	r.awaitStatus(t, func(st local.ServiceStatus) bool { return st.Desired == 0 && len(st.Replicas) == 0 },
		"the service did not go to zero")
}
