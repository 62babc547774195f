package collector

import (
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/service"
	"github.com/swell-run/swell/pkg/stats"
)

// t0 is a half second, where the engine starts its ticker.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 500_000_000, time.UTC)

// fakePod is a queue-proxy's metrics port on loopback: it serves a
// stats.Report in binary at network.StatsPath, or misbehaves on request.
type fakePod struct {
	srv    *httptest.Server
	report atomic.Pointer[stats.Report]
	hits   atomic.Int64
	// handler, if set, replaces the well-behaved answer.
	handler atomic.Pointer[http.HandlerFunc]
	// v1 and v2 make it a pod injected before version 2, or 3.
	v1, v2 atomic.Bool
}

func newFakePod(t testing.TB, r stats.Report) *fakePod {
	t.Helper()
	p := &fakePod{}
	p.report.Store(&r)
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		p.hits.Add(1)
		if h := p.handler.Load(); h != nil {
			(*h)(w, req)
			return
		}
		if req.URL.Path != network.StatsPath || !strings.HasPrefix(req.Header.Get("Accept"), stats.ContentTypeV3+", "+stats.ContentTypeV2) {
			http.Error(w, "unexpected request "+req.URL.Path+" Accept: "+req.Header.Get("Accept"), http.StatusBadRequest)
			return
		}
		// As a queue-proxy does: version 3 to a scraper that accepts it,
		// unless the test asks for a pod from before it.
		r := p.report.Load()
		if p.v1.Load() {
			w.Header().Set("Content-Type", stats.ContentType)
			w.Write(r.AppendBinary(nil))
			return
		}
		if p.v2.Load() {
			w.Header().Set("Content-Type", stats.ContentTypeV2)
			w.Write(r.AppendBinaryV2(nil))
			return
		}
		w.Header().Set("Content-Type", stats.ContentTypeV3)
		w.Write(r.AppendBinaryV3(nil))
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *fakePod) addr() string { return strings.TrimPrefix(p.srv.URL, "http://") }

func (p *fakePod) set(r stats.Report) { p.report.Store(&r) }

func (p *fakePod) misbehave(h http.HandlerFunc) { p.handler.Store(&h) }

// rep builds a one-second report of a mature pod.
func rep(conc, proxiedConc float64, reqs, proxiedReqs uint64) stats.Report {
	return stats.Report{
		End: t0, Period: time.Second, Uptime: time.Minute,
		Concurrency: conc, ProxiedConcurrency: proxiedConc, Requests: reqs, ProxiedRequests: proxiedReqs,
	}
}

// byName indexes a round's samples by service name.
func byName(t testing.TB, samples []Sample) map[string]Sample {
	t.Helper()
	m := make(map[string]Sample, len(samples))
	for _, x := range samples {
		name := x.Service.String()
		if _, dup := m[name]; dup {
			t.Fatalf("two samples for %s in one round", name)
		}
		m[name] = x
	}
	return m
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// gatheredCounter reads a counter from reg; label is the value of its only
// label, or "" for a counter without labels. Absent series read 0.
func gatheredCounter(t testing.TB, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) == 0 && label == "" || len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == label {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// staticPods holds each service's ready pods, as the autoscaler's record of
// its services would, and hands them to a round as targets, sorted.
type staticPods struct {
	pods map[string][]string
	// gauges are the gauge keys of the services that scale on one.
	gauges map[string]uint64
}

func newStaticPods() *staticPods { return &staticPods{pods: make(map[string][]string)} }

// Set makes addrs the ready pods of the service named name.
func (s *staticPods) Set(name string, addrs ...string) { s.pods[name] = slices.Clone(addrs) }

// Delete forgets the service named name.
func (s *staticPods) Delete(name string) { delete(s.pods, name) }

// targets returns one target per service, sorted by name; a malformed name
// fails the test.
func (s *staticPods) targets(t testing.TB) []Target {
	t.Helper()
	var out []Target
	for _, name := range slices.Sorted(maps.Keys(s.pods)) {
		k, err := service.Parse(name)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, Target{Key: k, Name: name, Pods: s.pods[name], GaugeKey: s.gauges[name]})
	}
	return out
}
