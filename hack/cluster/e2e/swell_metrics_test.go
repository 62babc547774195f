package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Scaling on what the app feels, on the real cluster: the queue-proxy
// reads the app's CPU from the shared process namespace injection asks
// for, and its gauge from the app's /metrics, and the service scales on
// them and back to zero.

// metricsAnnotations shorten the windows so that scaling shows in seconds.
func metricsAnnotations(kv ...string) map[string]string {
	m := map[string]string{
		"autoscaling.swell.run/max-scale":                  "4",
		"autoscaling.swell.run/window":                     "6s",
		"autoscaling.swell.run/scale-to-zero-grace-period": "2s",
	}
	for i := 0; i+1 < len(kv); i += 2 {
		m["autoscaling.swell.run/"+kv[i]] = kv[i+1]
	}
	return m
}

// scaledUpOn waits for name to reach at least n replicas with a ScaledUp
// event whose reason the metric decided.
func (e *env) scaledUpOn(name string, n int32, metric string) {
	e.t.Helper()
	e.eventuallyWithin(fmt.Sprintf("%s scaled to at least %d on %s", name, n, metric), scaleTimeout, func(ctx context.Context) error {
		r, err := e.replicas(ctx, name)
		if err != nil {
			return err
		}
		if r < n {
			return fmt.Errorf("scale %d", r)
		}
		evs, err := e.events(ctx, name)
		if err != nil {
			return err
		}
		for _, ev := range evs {
			if strings.HasPrefix(ev, "ScaledUp: ") && strings.Contains(ev, ": "+metric+": ") {
				return nil
			}
		}
		return fmt.Errorf("no ScaledUp event decided by %s among %q", metric, evs)
	})
}

// backToZero waits for name to scale to zero.
func (e *env) backToZero(name string) {
	e.t.Helper()
	e.eventuallyWithin(name+" back to zero", scaleTimeout, func(ctx context.Context) error {
		r, err := e.replicas(ctx, name)
		if err != nil {
			return err
		}
		if r != 0 {
			return fmt.Errorf("scale %d", r)
		}
		return nil
	})
}

// TestSwellScalesOnCPU: a CPU-bound app requesting 100m at a 35% target
// (35m a pod) under 4 requests a second of 100 ms of CPU (0.4 cores, 0.4
// in flight) scales on its CPU, and goes back to zero when the load
// stops. Three pods need only 70m measured: the app's loop runs for wall
// time, so on a node whose cores the other tests hold it burns less than
// it asks for, and a target near the demand would fail there.
func TestSwellScalesOnCPU(t *testing.T) {
	t.Parallel()
	e := swellSetup(t)
	const name = "cpu"
	d := swellHello(name, nil, metricsAnnotations("metric", "cpu", "cpu-target", "35%"))
	d.Spec.Template.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
	e.createHello(d)
	e.waitProxied(name, "")

	ctx, cancel := context.WithTimeout(t.Context(), scaleTimeout)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	var lost []string
	tick := time.NewTicker(250 * time.Millisecond)
	wg.Go(func() {
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				wg.Go(func() {
					code, _, err := e.viaService(ctx, name, "/?cpu=100ms")
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						codes[code]++
					case ctx.Err() == nil:
						lost = append(lost, err.Error())
					}
				})
			}
		}
	})
	e.scaledUpOn(name, 3, "cpu")
	cancel()
	wg.Wait()
	mu.Lock()
	t.Logf("answers by status: %v", codes)
	for code, n := range codes {
		if code != http.StatusOK {
			t.Errorf("%d answers with status %d; want all 200", n, code)
		}
	}
	if len(lost) > 0 {
		t.Errorf("%d requests failed, the first: %s", len(lost), lost[0])
	}
	mu.Unlock()
	e.backToZero(name)
}

// TestSwellScalesOnAppGauge: twelve one-second jobs queued in the app by
// one request drive its gauge, hello_jobs_waiting, at 2 a pod; the
// service scales on it with nothing in flight, and goes back to zero once
// the jobs are done.
func TestSwellScalesOnAppGauge(t *testing.T) {
	t.Parallel()
	e := swellSetup(t)
	const name = "jobs"
	// A grace of 10 s, not 2: the jobs are queued by a request a moment
	// after the pod is reachable, and the gauge shows them a scrape after
	// that. A pod new enough not to have read its gauge counts 0 (as a
	// pod without metrics does for the HPA), and on a busy machine 2 s
	// idle from creation sent the pod away with the jobs just queued.
	e.createHello(swellHello(name, nil, metricsAnnotations(
		"metric", "concurrency,gauge", "gauge", "hello_jobs_waiting", "gauge-target", "2",
		"scale-to-zero-grace-period", "10s")))
	e.waitProxied(name, "")
	e.eventually("12 jobs queued", func(ctx context.Context) error {
		code, body, err := e.postService(ctx, name, "/jobs?work=1s&count=12")
		if err != nil {
			return err
		}
		if code != http.StatusAccepted {
			return fmt.Errorf("POST /jobs: %d %q", code, body)
		}
		return nil
	})
	e.scaledUpOn(name, 3, "gauge")
	e.backToZero(name)
}

// TestSwellTellsABadGauge: a gauge the app does not have is told as a
// Warning on the Deployment, and the service still scales on its requests.
func TestSwellTellsABadGauge(t *testing.T) {
	t.Parallel()
	e := swellSetup(t)
	const name = "badgauge"
	e.createHello(swellHello(name, nil, metricsAnnotations(
		"metric", "concurrency,gauge", "gauge", "hello_jobs_waitin", "gauge-target", "2", "min-scale", "1")))
	e.waitProxied(name, "")
	e.eventuallyWithin("a GaugeUnreadable warning on "+name, scaleTimeout, func(ctx context.Context) error {
		evs, err := e.events(ctx, name)
		if err != nil {
			return err
		}
		for _, ev := range evs {
			if strings.HasPrefix(ev, "GaugeUnreadable: ") && strings.Contains(ev, "hello_jobs_waitin: missing") {
				return nil
			}
		}
		return fmt.Errorf("events %q", evs)
	})
	if code, _, err := e.viaService(t.Context(), name, "/"); err != nil || code != http.StatusOK {
		t.Errorf("GET /: %d, %v; want 200 while the gauge is unreadable", code, err)
	}
}

// postService sends POST path to the Service's ClusterIP, as viaService
// sends a GET.
func (e *env) postService(ctx context.Context, service, path string) (int, string, error) {
	url, err := e.serviceURL(ctx, service, path)
	if err != nil {
		return 0, "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return 0, "", err
	}
	req.Host = service + "." + e.ns + ".svc.cluster.local"
	resp, err := slowClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}
