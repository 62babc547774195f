package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/swell-run/swell/local"
)

func TestStatusTableAndJSON(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	st := local.Status{Time: at, Address: "127.0.0.1:8080", Services: []local.ServiceStatus{
		{Name: "hello", Ready: 6, Desired: 6, Route: "activator", Metric: "concurrency", TargetPerPod: 7,
			Load: 42.4, Stable: 38, Panic: 41, PanicMode: true, ExcessBurstCapacity: -192, Queued: 3,
			Reason: "panic: wants 6 pods for 6 ready at target 7",
			Events: []local.Event{{Time: at, Text: "hello: scale 0→1 (poke)"}, {Time: at, Text: "hello: panic — 19 in flight for 1 pod at target 7"}}},
		{Name: "idle", Route: "activator", Metric: "rps", TargetPerPod: 140, ExcessBurstCapacity: -1e308},
	}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != local.StatusPath {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(st)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")

	code, out, errs := swell(t, "status", "--addr", addr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{
		"SERVICE  READY  DESIRED  ROUTE",
		"hello    6      6        activator  concurrency  42.4  38.0    41.0   7           yes         -192            3",
		"idle     0      0        activator  rps          0.0   0.0     0.0    140         no          -inf            0",
		"hello (now: panic: wants 6 pods for 6 ready at target 7)",
		"hello: panic — 19 in flight for 1 pod at target 7",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}

	code, out, _ = swell(t, "status", "--addr", srv.URL, "-o", "json", "idle")
	var got local.Status
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil {
		t.Fatalf("-o json: exit %d, %v:\n%s", code, err, out)
	}
	if len(got.Services) != 1 || got.Services[0].Name != "idle" {
		t.Errorf("-o json idle: %+v, want the idle service only", got.Services)
	}

	if code, _, errs := swell(t, "status", "--addr", addr, "nope"); code != 1 || !strings.Contains(errs, "no service named nope") {
		t.Errorf("unknown service: exit %d, %q", code, errs)
	}
	srv.Close()
	if code, _, errs := swell(t, "status", "--addr", addr); code != 1 || !strings.Contains(errs, "is swell local running?") {
		t.Errorf("nothing listening: exit %d, %q", code, errs)
	}
}
