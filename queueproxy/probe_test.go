package queueproxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/swell-run/swell/pkg/network"
)

func TestProbeHandler(t *testing.T) {
	var appHits, checks atomic.Int32
	up := atomic.Bool{}
	var draining atomic.Bool
	p, _, _ := scriptedProber(t, 1)
	p.check = func(context.Context) error {
		checks.Add(1)
		if up.Load() {
			return nil
		}
		return errDown
	}
	h := &probeHandler{prober: p, draining: draining.Load, next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		appHits.Add(1)
		w.Write([]byte("app"))
	})}
	serve := func(hdr, val string) *http.Response {
		req := httptest.NewRequest("GET", "/healthz", nil)
		if hdr != "" {
			req.Header.Set(hdr, val)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Result()
	}
	probes := [][2]string{
		{network.ProbeHeader, network.ProbeQueue},
		{network.KubeletProbeHeader, "queue"},
		{"User-Agent", network.KubeletProbeUserAgentPrefix + "1.31"},
	}

	// Not ready: each probe checks the app now, and fails.
	for _, pr := range probes {
		res := serve(pr[0], pr[1])
		if res.StatusCode != 503 || res.Header.Get(network.ReasonHeader) != network.ReasonNotReady || res.Header.Get(network.ProbeHeader) != network.ProbeQueue {
			t.Errorf("%s while not ready: %d %v", pr[0], res.StatusCode, res.Header)
		}
	}
	if n := checks.Load(); n != int32(len(probes)) {
		t.Errorf("%d checks for %d probes while not ready, want one each", n, len(probes))
	}

	// The app comes up: the next probe finds out at once.
	up.Store(true)
	for _, pr := range probes {
		res := serve(pr[0], pr[1])
		if body := readAll(t, res); res.StatusCode != 200 || body != network.ProbeQueue || res.Header.Get(network.ProbeHeader) != network.ProbeQueue {
			t.Errorf("%s while ready: %d %q %v", pr[0], res.StatusCode, body, res.Header)
		}
	}
	if n := checks.Load(); n != int32(len(probes))+1 {
		t.Errorf("%d checks: once ready, probes should use the prober's state", n)
	}

	draining.Store(true)
	res := serve(network.ProbeHeader, network.ProbeQueue)
	if res.StatusCode != 503 || res.Header.Get(network.ReasonHeader) != network.ReasonDraining {
		t.Errorf("while draining: %d %v", res.StatusCode, res.Header)
	}

	if n := appHits.Load(); n != 0 {
		t.Errorf("%d probes reached the app", n)
	}
	if res := serve("", ""); readAll(t, res) != "app" || appHits.Load() != 1 {
		t.Error("traffic did not reach the app")
	}
}
