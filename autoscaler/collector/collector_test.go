package collector

import (
	"context"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	testclock "k8s.io/utils/clock/testing"

	"github.com/swell-run/swell/pkg/stats"
)

// rig is a collector over real loopback pods, with an activator store and a
// fake clock.
type rig struct {
	clock *testclock.FakeClock
	pods  *staticPods
	acts  *Activators
	reg   *prometheus.Registry
	c     *Collector
}

func newRig(t testing.TB, tweak func(*Config)) *rig {
	t.Helper()
	r := &rig{
		clock: testclock.NewFakeClock(t0),
		pods:  newStaticPods(),
		reg:   prometheus.NewRegistry(),
	}
	r.acts = NewActivators(r.clock, 0)
	cfg := Config{
		Activators: r.acts, Clock: r.clock,
		Seed: 1, Registerer: r.reg, Timeout: 2 * time.Second, RoundTimeout: 5 * time.Second,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.c = c
	return r
}

// round runs one round for the current second of the fake clock, then
// moves the clock on by a second.
func (r *rig) round(t testing.TB) map[string]Sample {
	t.Helper()
	samples := r.c.Round(context.Background(), r.clock.Now(), r.pods.targets(t))
	r.clock.Step(time.Second)
	return byName(t, samples)
}

// counter reads a counter from the rig's registry; label is the value of
// its only label, or "" for a counter without labels.
func (r *rig) counter(t testing.TB, name, label string) float64 {
	t.Helper()
	return gatheredCounter(t, r.reg, name, label)
}

// report applies a Report frame from activator as the endpoint would.
func (r *rig) report(activator string, period time.Duration, entries ...stats.ActivatorEntry) {
	r.acts.Apply(activator, &stats.ActivatorFrame{Type: stats.ActivatorReport, End: r.clock.Now(), Period: period, Entries: entries})
}

func entry(svc string, conc float64, reqs, inFlight uint64) stats.ActivatorEntry {
	return stats.ActivatorEntry{Service: []byte(svc), ActivatorFigures: stats.ActivatorFigures{Concurrency: conc, Requests: reqs, InFlight: inFlight}}
}

func TestNewValidates(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Sampling: &Sampling{Z: -1}}, "must be >= 0"},
	} {
		if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error containing %q", tc.cfg, err, tc.want)
		}
	}
}

// TestCombine checks the combining rule: pods count only what did not come
// through an activator, activators add all they hold, several activators
// add up.
func TestCombine(t *testing.T) {
	r := newRig(t, nil)
	p1 := newFakePod(t, rep(5, 2, 100, 40))
	p2 := newFakePod(t, rep(3, 0, 30, 0))
	// A pod all of whose load came through the activator.
	p3 := newFakePod(t, rep(4, 4, 20, 20))
	// A pod whose report covers two seconds: requests are a rate.
	p4 := newFakePod(t, stats.Report{End: t0, Period: 2 * time.Second, Uptime: time.Hour, Concurrency: 1, Requests: 50})
	r.pods.Set("ns/web", p1.addr(), p2.addr(), p3.addr(), p4.addr())
	r.pods.Set("ns/idle")
	r.report("act-a", time.Second, entry("ns/web", 6, 60, 4), entry("ns/idle", 0.5, 2, 1))
	r.report("act-b", 500*time.Millisecond, entry("ns/web", 1, 10, 2))

	got := r.round(t)
	web := got["ns/web"]
	wantPodConc := (5 - 2) + 3 + 0 + 1.0
	wantPodRPS := (100 - 40) + 30 + 0 + 25.0
	wantActConc := 6 + 1.0
	wantActRPS := 60 + 20.0
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"PodConcurrency", web.PodConcurrency, wantPodConc},
		{"PodRPS", web.PodRPS, wantPodRPS},
		{"ActivatorConcurrency", web.ActivatorConcurrency, wantActConc},
		{"ActivatorRPS", web.ActivatorRPS, wantActRPS},
		{"Concurrency", web.Concurrency, wantPodConc + wantActConc},
		{"RPS", web.RPS, wantPodRPS + wantActRPS},
	} {
		if !near(c.got, c.want) {
			t.Errorf("ns/web %s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if web.Sources != SourcePods|SourceActivators || web.ReadyPods != 4 || web.Sampled != 4 || web.Scraped != 4 ||
		web.Activators != 2 || web.ActivatorPending != 6 || !web.Time.Equal(t0.Truncate(time.Second)) {
		t.Errorf("ns/web = %+v", web)
	}
	idle := got["ns/idle"]
	if idle.Sources != SourceActivators || idle.ReadyPods != 0 || idle.Concurrency != 0.5 || idle.RPS != 2 || idle.ActivatorPending != 1 {
		t.Errorf("ns/idle (no pods, activator figures) = %+v", idle)
	}
}

// TestAppFigures: what the pods measured of their app is summed and
// scaled up to the ready pods from those scraped, as the load is, a pod
// that measured nothing counting 0; a gauge counts only under the
// service's key, and the pods that could not read it say why, the most
// common reason first.
func TestAppFigures(t *testing.T) {
	// Every pod scraped, so that the figures are exact.
	r := newRig(t, func(c *Config) { c.Sampling = &Sampling{} })
	key := stats.GaugeKey("waiting")
	with := func(a stats.AppUsage) stats.Report { x := rep(1, 0, 10, 0); x.App = a; return x }
	pods := []*fakePod{
		newFakePod(t, with(stats.AppUsage{CPU: 0.5, HasCPU: true, Memory: 100, HasMemory: true, Gauge: 4, GaugeKey: key, HasGauge: true})),
		newFakePod(t, with(stats.AppUsage{CPU: 1.5, HasCPU: true, Memory: 300, HasMemory: true, Gauge: 2, GaugeKey: key, HasGauge: true})),
		// Still reading the gauge the service scaled on before.
		newFakePod(t, with(stats.AppUsage{CPU: 1, HasCPU: true, Gauge: 50, GaugeKey: stats.GaugeKey("old"), HasGauge: true})),
		newFakePod(t, with(stats.AppUsage{GaugeProblem: stats.GaugeTimeout})),
		newFakePod(t, with(stats.AppUsage{GaugeProblem: stats.GaugeMissing})),
		newFakePod(t, with(stats.AppUsage{GaugeProblem: stats.GaugeMissing})),
	}
	// A pod from before version 3 measures nothing of its app.
	old := newFakePod(t, rep(1, 0, 10, 0))
	old.v2.Store(true)
	var addrs []string
	for _, p := range append(pods, old) {
		addrs = append(addrs, p.addr())
	}
	r.pods.Set("ns/app", addrs...)
	r.pods.gauges = map[string]uint64{"ns/app": key}
	r.pods.Set("ns/plain", newFakePod(t, with(stats.AppUsage{Gauge: 9, GaugeKey: key, HasGauge: true})).addr())

	got := r.round(t)
	app := got["ns/app"]
	// 7 ready pods, all scraped: CPU from 3 of them (3 cores), memory from
	// 2 (400 bytes), the gauge from 2 (6); the others count 0.
	if !app.HasCPU || !near(app.CPU, 3) || !app.HasMemory || !near(app.Memory, 400) || !app.HasGauge || !near(app.Gauge, 6) {
		t.Errorf("ns/app: CPU %v (%v), memory %v (%v), gauge %v (%v); want 3, 400, 6",
			app.CPU, app.HasCPU, app.Memory, app.HasMemory, app.Gauge, app.HasGauge)
	}
	if app.GaugeProblem != stats.GaugeMissing || app.GaugeProblemPods != 3 {
		t.Errorf("ns/app: problem %v on %d pods, want missing, on 3", app.GaugeProblem, app.GaugeProblemPods)
	}
	if plain := got["ns/plain"]; plain.HasGauge || plain.HasCPU || plain.GaugeProblemPods != 0 {
		t.Errorf("ns/plain, which scales on no gauge: %+v", plain)
	}
}

// TestNothingCountedTwice follows requests from the activator to a pod:
// ten requests held by the activator and proxied to pods count ten, not
// twenty; once the activator leaves the path, the pods' count is all.
func TestNothingCountedTwice(t *testing.T) {
	r := newRig(t, nil)
	p1 := newFakePod(t, rep(6, 6, 60, 60))
	p2 := newFakePod(t, rep(4, 4, 40, 40))
	r.pods.Set("ns/svc", p1.addr(), p2.addr())
	r.report("act-a", time.Second, entry("ns/svc", 10, 100, 10))
	if s := r.round(t)["ns/svc"]; s.Concurrency != 10 || s.RPS != 100 {
		t.Fatalf("activator in the path: concurrency %v rps %v, want 10 and 100", s.Concurrency, s.RPS)
	}

	// The activator left the path: its last entry says zero, pods see
	// direct traffic only.
	p1.set(rep(6, 0, 60, 0))
	p2.set(rep(4, 0, 40, 0))
	r.report("act-a", time.Second, entry("ns/svc", 0, 0, 0))
	if s := r.round(t)["ns/svc"]; s.Concurrency != 10 || s.RPS != 100 || s.ActivatorConcurrency != 0 {
		t.Fatalf("direct traffic: %+v, want concurrency 10, rps 100", s)
	}
}

// TestProxiedLoadCountedWithoutActivatorReports: while no activator reports
// the service (its connection to the autoscaler is down), what the pods got
// through an activator is counted from the pods, so a busy service never
// reads as idle; once an activator reports it again, the pods' proxied share
// is its, and is not counted twice.
func TestProxiedLoadCountedWithoutActivatorReports(t *testing.T) {
	r := newRig(t, nil)
	p1 := newFakePod(t, rep(6, 6, 60, 60))
	p2 := newFakePod(t, rep(4, 1, 40, 10))
	r.pods.Set("ns/svc", p1.addr(), p2.addr())
	if s := r.round(t)["ns/svc"]; s.Concurrency != 10 || s.RPS != 100 || s.Sources != SourcePods {
		t.Fatalf("no activator reporting: %+v, want concurrency 10, rps 100 from the pods", s)
	}
	r.report("act-a", time.Second, entry("ns/svc", 7, 70, 7))
	if s := r.round(t)["ns/svc"]; s.Concurrency != 3+7 || s.RPS != 30+70 || s.PodConcurrency != 3 {
		t.Fatalf("an activator reporting: %+v, want pods 3 + activator 7 = 10, rps 100", s)
	}
}

// withShares is rep with the proxied figures split by activator name:
// concurrency and requests each.
func withShares(r stats.Report, shares map[string][2]float64) stats.Report {
	r.Attributed = true
	for _, name := range slices.Sorted(maps.Keys(shares)) {
		f := shares[name]
		r.ByActivator = append(r.ByActivator, stats.ActivatorShare{Activator: stats.ActivatorKey(name), Concurrency: f[0], Requests: uint64(f[1])})
	}
	return r
}

// TestProxiedLoadByActivator: with three activators, one not reporting
// (cut off from the autoscaler) while it forwards, one reporting a queue
// the pods have not seen yet, the pods' shares by activator count each
// activator once: the one not reporting by the pods, the others by the
// larger of both sides. Taking the larger of the totals instead would miss
// what the silent one sent. A pod from before the split falls back to
// that.
func TestProxiedLoadByActivator(t *testing.T) {
	r := newRig(t, nil)
	// Own 1; through a: 2 + 4; through b, which does not report: 3.
	p1 := newFakePod(t, withShares(rep(6, 5, 60, 50), map[string][2]float64{"act-a": {2, 20}, "act-b": {3, 30}}))
	p2 := newFakePod(t, withShares(rep(4, 4, 40, 40), map[string][2]float64{"act-a": {4, 40}}))
	r.pods.Set("ns/svc", p1.addr(), p2.addr())
	// a holds 10: the 6 at the pods and 4 queued; c holds 2 queued and
	// has sent nothing yet.
	r.report("act-a", time.Second, entry("ns/svc", 10, 100, 10))
	r.report("act-c", time.Second, entry("ns/svc", 2, 20, 2))
	s := r.round(t)["ns/svc"]
	if !near(s.Concurrency, 1+10+3+2) || !near(s.RPS, 10+100+30+20) {
		t.Fatalf("by activator: concurrency %v rps %v, want 1 own + a's 10 + b's 3 + c's 2 = 16, and 160 rps", s.Concurrency, s.RPS)
	}

	// A pod injected before the split: the larger of the totals.
	p2.v1.Store(true)
	s = r.round(t)["ns/svc"]
	if !near(s.Concurrency, 1+max(9, 12.0)) {
		t.Fatalf("a pod without the split: concurrency %v, want 1 own + the larger of 9 at the pods and 12 at the activators", s.Concurrency)
	}
}

// TestNoHeaderLowersLoad: a client that sends its requests straight to the
// pods marked as the activator's (Swell-Proxy: activator) makes the pods
// report them as proxied. While an activator reports a trickle of its own,
// the spoofed share must still count: the load is the larger of the pods'
// total and the pods' own share plus the activators'.
func TestNoHeaderLowersLoad(t *testing.T) {
	r := newRig(t, nil)
	// 40 in flight at the pods, all claiming to come through the
	// activator; the activator holds 1.
	p1 := newFakePod(t, rep(20, 20, 200, 200))
	p2 := newFakePod(t, rep(20, 20, 200, 200))
	r.pods.Set("ns/svc", p1.addr(), p2.addr())
	r.report("act-a", time.Second, entry("ns/svc", 1, 10, 1))
	s := r.round(t)["ns/svc"]
	if s.Concurrency != 40 || s.RPS != 400 {
		t.Fatalf("spoofed proxied load: concurrency %v rps %v, want the pods' total 40 and 400", s.Concurrency, s.RPS)
	}
}

// TestFailingPods: a failing pod never loses the service's data; the
// answers are scaled to every ready pod.
func TestFailingPods(t *testing.T) {
	r := newRig(t, nil)
	good1 := newFakePod(t, rep(2, 0, 10, 0))
	good2 := newFakePod(t, rep(4, 0, 30, 0))
	status := newFakePod(t, rep(100, 0, 0, 0))
	status.misbehave(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "boom", http.StatusInternalServerError) })
	garbage := newFakePod(t, rep(100, 0, 0, 0))
	garbage.misbehave(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", stats.ContentType)
		w.Write([]byte{1, 2, 3})
	})
	json := newFakePod(t, rep(100, 0, 0, 0))
	json.misbehave(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"concurrency":100}`))
	})
	gone := newFakePod(t, rep(100, 0, 0, 0))
	gone.srv.Close() // connection refused
	r.pods.Set("ns/svc", good1.addr(), status.addr(), garbage.addr(), json.addr(), good2.addr(), gone.addr())

	s := r.round(t)["ns/svc"]
	if s.ReadyPods != 6 || s.Sampled != DefaultSampling.Size(6) {
		t.Fatalf("sample: %+v", s)
	}
	// Whatever the sample, only the good pods answered; their mean is
	// scaled to all six pods.
	var want, wantRPS float64
	switch s.Scraped {
	case 2:
		want, wantRPS = 6*(2+4)/2.0, 6*(10+30)/2.0
	case 1:
		// One good pod was left out of the sample of 5.
		if !near(s.PodConcurrency, 6*2) && !near(s.PodConcurrency, 6*4) {
			t.Fatalf("one good pod answered, estimate %v is neither 12 nor 24", s.PodConcurrency)
		}
		return
	default:
		t.Fatalf("%d pods answered, only 2 can: %+v", s.Scraped, s)
	}
	if !near(s.PodConcurrency, want) || !near(s.PodRPS, wantRPS) || s.Sources != SourcePods {
		t.Fatalf("got %+v, want pod concurrency %v, rps %v", s, want, wantRPS)
	}
	total := r.counter(t, "swell_autoscaler_scrapes_total", resultNames[resultOK]) + r.counter(t, "swell_autoscaler_scrapes_total", resultNames[resultStatus]) +
		r.counter(t, "swell_autoscaler_scrapes_total", resultNames[resultMalformed]) + r.counter(t, "swell_autoscaler_scrapes_total", resultNames[resultError])
	if int(total) != s.Sampled {
		t.Fatalf("scrape results add up to %v, want %d", total, s.Sampled)
	}
}

// TestFailingPodsCensus checks every failure kind on a census (no
// sampling), where the outcome is exact.
func TestFailingPodsCensus(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Sampling = &Sampling{} })
	good := newFakePod(t, rep(3, 1, 20, 5))
	status := newFakePod(t, stats.Report{})
	status.misbehave(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "boom", http.StatusServiceUnavailable) })
	garbage := newFakePod(t, stats.Report{})
	garbage.misbehave(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", stats.ContentType)
		w.Write(append(rep(1, 0, 0, 0).AppendBinary(nil), 0)) // trailing garbage
	})
	json := newFakePod(t, stats.Report{})
	json.misbehave(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{}`))
	})
	gone := newFakePod(t, stats.Report{})
	gone.srv.Close()
	r.pods.Set("ns/svc", good.addr(), status.addr(), garbage.addr(), json.addr(), gone.addr())

	s := r.round(t)["ns/svc"]
	// No activator reports the service, so the good pod's proxied share
	// counts too: 3 in flight, 20 requests a second.
	if s.ReadyPods != 5 || s.Sampled != 5 || s.Scraped != 1 || s.Concurrency != 5*3 || s.RPS != 5*20 ||
		s.PodConcurrency != 5*2 || s.PodProxiedConcurrency != 5*1 {
		t.Fatalf("got %+v, want 5 ready, 5 sampled, 1 scraped, concurrency 15, rps 100", s)
	}
	for res, want := range map[scrapeResult]float64{resultOK: 1, resultStatus: 1, resultMalformed: 2, resultError: 1, resultTimeout: 0} {
		if got := r.counter(t, "swell_autoscaler_scrapes_total", resultNames[res]); got != want {
			t.Errorf("scrapes{result=%s} = %v, want %v", resultNames[res], got, want)
		}
	}
}

// TestAllPodsFail: no data for that second rather than zero, and the other
// services still get theirs.
func TestAllPodsFail(t *testing.T) {
	r := newRig(t, nil)
	bad := newFakePod(t, stats.Report{})
	bad.misbehave(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "no", http.StatusInternalServerError) })
	good := newFakePod(t, rep(1, 0, 1, 0))
	r.pods.Set("ns/broken", bad.addr())
	r.pods.Set("ns/fine", good.addr())
	r.report("act-a", time.Second, entry("ns/broken", 3, 3, 1))

	got := r.round(t)
	if s, ok := got["ns/broken"]; ok {
		t.Fatalf("a sample for a service whose pods all failed: %+v", s)
	}
	if s := got["ns/fine"]; s.Concurrency != 1 {
		t.Fatalf("ns/fine = %+v", s)
	}
	if n := r.counter(t, "swell_autoscaler_samples_missing_total", ""); n != 1 {
		t.Fatalf("samples_missing_total = %v, want 1", n)
	}
	// The activators' pending count stays readable for the decider.
	if p := r.c.ActivatorPending("ns/broken"); p != 1 {
		t.Fatalf("ActivatorPending = %d, want 1", p)
	}
}

// TestNewPods: a pod younger than a reporting period serves a report of
// length zero; it counts as a pod with no load, not as a failure and not as
// an average pod.
func TestNewPods(t *testing.T) {
	r := newRig(t, nil)
	old := newFakePod(t, rep(8, 0, 80, 0))
	fresh := newFakePod(t, stats.Report{End: t0}) // the queue-proxy's first answer
	r.pods.Set("ns/svc", old.addr(), fresh.addr())
	s := r.round(t)["ns/svc"]
	if s.Scraped != 2 || s.PodConcurrency != 8 || s.PodRPS != 80 {
		t.Fatalf("got %+v, want both pods scraped and the total 8 / 80 rps", s)
	}

	// Scaling from zero: the only pod is brand new, the activator holds
	// (and proxies) everything. The pods' share is a known zero.
	only := newFakePod(t, stats.Report{End: t0})
	r.pods.Set("ns/cold", only.addr())
	r.report("act-a", time.Second, entry("ns/cold", 5, 5, 5))
	s = r.round(t)["ns/cold"]
	if s.Sources != SourcePods|SourceActivators || s.Concurrency != 5 || s.PodConcurrency != 0 {
		t.Fatalf("scale from zero: %+v", s)
	}
}

// TestHangingPod: a pod that never answers costs the round its timeout and
// no more; the other pods' data is kept.
func TestHangingPod(t *testing.T) {
	const timeout = 150 * time.Millisecond
	r := newRig(t, func(c *Config) { c.Timeout = timeout; c.Sampling = &Sampling{} })
	release := make(chan struct{})
	hung := newFakePod(t, stats.Report{})
	// Registered after the pod, so it runs before the server's Close,
	// which waits for handlers.
	t.Cleanup(func() { close(release) })
	hung.misbehave(func(w http.ResponseWriter, req *http.Request) {
		select {
		case <-release:
		case <-req.Context().Done():
		}
	})
	good := newFakePod(t, rep(2, 0, 2, 0))
	r.pods.Set("ns/svc", hung.addr(), good.addr())

	start := time.Now()
	got := byName(t, r.c.Round(context.Background(), r.clock.Now(), r.pods.targets(t)))
	elapsed := time.Since(start)
	s := got["ns/svc"]
	if s.Scraped != 1 || s.PodConcurrency != 4 {
		t.Fatalf("got %+v, want the good pod's figure scaled to 2 pods", s)
	}
	if elapsed < timeout || elapsed > timeout+time.Second {
		t.Fatalf("round took %v with a hung pod and a %v timeout", elapsed, timeout)
	}
	if n := r.counter(t, "swell_autoscaler_scrapes_total", resultNames[resultTimeout]); n != 1 {
		t.Fatalf("scrapes{result=timeout} = %v, want 1", n)
	}
}

// TestRoundDeadline: with one worker and three hung pods, the round ends at
// its deadline; the scrape it had no time to start fails without waiting.
func TestRoundDeadline(t *testing.T) {
	r := newRig(t, func(c *Config) {
		c.Workers, c.Timeout, c.RoundTimeout, c.Sampling = 1, 100*time.Millisecond, 150*time.Millisecond, &Sampling{}
	})
	release := make(chan struct{})
	var addrs []string
	for range 3 {
		p := newFakePod(t, stats.Report{})
		p.misbehave(func(w http.ResponseWriter, req *http.Request) {
			select {
			case <-release:
			case <-req.Context().Done():
			}
		})
		addrs = append(addrs, p.addr())
	}
	t.Cleanup(func() { close(release) })
	r.pods.Set("ns/svc", addrs...)
	start := time.Now()
	got := r.c.Round(context.Background(), r.clock.Now(), r.pods.targets(t))
	if elapsed := time.Since(start); elapsed > 150*time.Millisecond+time.Second {
		t.Fatalf("round took %v, its deadline is 150ms", elapsed)
	}
	if len(got) != 0 {
		t.Fatalf("every pod failed, yet samples: %+v", got)
	}
	if n := r.counter(t, "swell_autoscaler_scrapes_total", resultNames[resultTimeout]); n != 3 {
		t.Fatalf("scrapes{result=timeout} = %v, want 3", n)
	}
}

// TestSameSecondSkipped: a second tick in a second already collected is
// skipped, so a window never gets two scrape rounds in one bucket.
func TestSameSecondSkipped(t *testing.T) {
	r := newRig(t, nil)
	p := newFakePod(t, rep(1, 0, 1, 0))
	r.pods.Set("ns/svc", p.addr())
	tg := r.pods.targets(t)
	if got := r.c.Round(context.Background(), t0, tg); len(got) != 1 {
		t.Fatalf("first round: %+v", got)
	}
	if got := r.c.Round(context.Background(), t0.Add(400*time.Millisecond), tg); got != nil { // same second
		t.Fatalf("a round in the same second: %+v", got)
	}
	if got := r.c.Round(context.Background(), t0.Add(-time.Second), tg); got != nil { // earlier second
		t.Fatalf("a round for an earlier second: %+v", got)
	}
	if n := r.counter(t, "swell_autoscaler_collection_rounds_skipped_total", ""); n != 2 {
		t.Fatalf("rounds skipped = %v, want 2", n)
	}
	next := byName(t, r.c.Round(context.Background(), t0.Add(600*time.Millisecond), tg)) // next second
	if s := next["ns/svc"]; !s.Time.Equal(t0.Add(time.Second).Truncate(time.Second)) {
		t.Fatalf("sample time %v", s.Time)
	}
}

// TestServiceRemoved: a service no longer among the targets gets no
// sample.
func TestServiceRemoved(t *testing.T) {
	r := newRig(t, nil)
	r.pods.Set("ns/a")
	r.pods.Set("ns/b")
	if got := r.round(t); len(got) != 2 {
		t.Fatalf("got %v", got)
	}
	r.pods.Delete("ns/a")
	got := r.round(t)
	if _, ok := got["ns/a"]; ok || len(got) != 1 {
		t.Fatalf("after deleting ns/a: samples %v", got)
	}
}

// TestRoundClosesTheConnectionsOfPodsThatLeft: a pod the targets no
// longer list has left, and its kept connection is closed at the next
// round, whether the pod went from its service's list or its service
// went; a pod still listed keeps its own. A pod of another service given
// the address of one that left dials anew (review finding 3).
func TestRoundClosesTheConnectionsOfPodsThatLeft(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Sampling = &Sampling{} })
	ok := reply(okResponse(stats.ContentTypeV3, busyReport.AppendBinaryV3(nil), ""))
	stays, leaves, withService := newRawPod(t, ok), newRawPod(t, ok), newRawPod(t, ok)
	r.pods.Set("ns/a", stays.addr(), leaves.addr())
	r.pods.Set("ns/b", withService.addr())
	if got := r.round(t); got["ns/a"].Scraped != 2 || got["ns/b"].Scraped != 1 {
		t.Fatalf("first round: %+v", got)
	}
	if n := r.c.pool.len(); n != 3 {
		t.Fatalf("after the first round the pool holds %d connections, want 3", n)
	}

	r.pods.Set("ns/a", stays.addr())
	r.pods.Delete("ns/b")
	if got := r.round(t); got["ns/a"].Scraped != 1 {
		t.Fatalf("second round: %+v", got)
	}
	if n := r.c.pool.len(); n != 1 {
		t.Fatalf("after the second round the pool holds %d connections, want 1: the pod still listed's", n)
	}
	leaves.waitOpen(t, 0)
	withService.waitOpen(t, 0)
	if n := stays.accepts.Load(); n != 1 {
		t.Fatalf("the pod still listed was dialled %d times in two rounds, want 1", n)
	}

	// Its address goes to another service's pod.
	r.pods.Delete("ns/a")
	r.pods.Set("ns/c", stays.addr())
	if got := r.round(t); got["ns/c"].Scraped != 1 {
		t.Fatalf("third round: %+v", got)
	}
	stays.waitOpen(t, 1)
	if n := stays.accepts.Load(); n != 2 {
		t.Fatalf("the address was dialled %d times, want 2: once for each service's pod", n)
	}
}

// TestActivatorFiguresExpire: an activator that stops reporting stops
// counting after StaleAfter; a poke holds the pending count at 1 meanwhile.
func TestActivatorFiguresExpire(t *testing.T) {
	r := newRig(t, nil)
	r.pods.Set("ns/svc")
	r.report("act-a", time.Second, entry("ns/svc", 4, 8, 3))
	r.report("act-b", time.Second, entry("ns/svc", 1, 2, 1))
	if s := r.round(t)["ns/svc"]; s.Concurrency != 5 || s.RPS != 10 || s.Activators != 2 || s.ActivatorPending != 4 {
		t.Fatalf("two activators: %+v", s)
	}
	// One second later (round stepped the clock) act-b reports again, act-a
	// is silent: its figures still count (one late report is tolerated).
	r.report("act-b", time.Second, entry("ns/svc", 2, 2, 0))
	if s := r.round(t)["ns/svc"]; s.Concurrency != 6 || s.Activators != 2 {
		t.Fatalf("act-a one report late: %+v", s)
	}
	// Both have now been silent for more than StaleAfter.
	r.clock.Step(time.Second + time.Millisecond)
	if s := r.round(t)["ns/svc"]; s.Concurrency != 0 || s.Activators != 0 || s.ActivatorPending != 0 || s.Sources != 0 {
		t.Fatalf("both stale: %+v", s)
	}

	// A poke counts as one pending request, whatever an older report said.
	r.report("act-a", time.Second, entry("ns/svc", 0, 0, 0))
	r.acts.Apply("act-a", &stats.ActivatorFrame{Type: stats.ActivatorPoke, Entries: []stats.ActivatorEntry{{Service: []byte("ns/svc")}}})
	if p := r.acts.Pending("ns/svc"); p != 1 {
		t.Fatalf("pending after a poke = %d, want 1", p)
	}
	r.report("act-a", time.Second, entry("ns/svc", 1, 1, 0)) // closed just before the request
	if p := r.acts.Pending("ns/svc"); p != 1 {
		t.Fatalf("pending after a poke and an older-looking report = %d, want 1", p)
	}
	r.clock.Step(DefaultStaleAfter + time.Millisecond)
	if p := r.acts.Pending("ns/svc"); p != 0 {
		t.Fatalf("pending after everything expired = %d, want 0", p)
	}
	r.c.Round(context.Background(), r.clock.Now(), r.pods.targets(t))
	r.acts.mu.Lock()
	n := len(r.acts.services)
	r.acts.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d services left in the activator store after all figures expired", n)
	}
}

// TestSampledRound: a large service is sampled — Size(N) distinct pods a
// round, a fresh draw each round — and the estimate is N × the sample mean.
func TestSampledRound(t *testing.T) {
	const N = 40
	r := newRig(t, nil)
	pods := make([]*fakePod, N)
	addrs := make([]string, N)
	loads := make(map[float64]bool)
	for i := range pods {
		// Distinct powers of two: a sum tells which pods were sampled.
		load := float64(uint64(1) << i)
		loads[load] = true
		pods[i] = newFakePod(t, rep(load, 0, 0, 0))
		addrs[i] = pods[i].addr()
	}
	r.pods.Set("ns/big", addrs...)
	n := DefaultSampling.Size(N)
	seen := make(map[int]bool)
	for round := range 10 {
		s := r.round(t)["ns/big"]
		if s.ReadyPods != N || s.Sampled != n || s.Scraped != n {
			t.Fatalf("round %d: %+v, want %d of %d pods", round, s, n, N)
		}
		scale := float64(N) / float64(n)
		sum := uint64(math.Round(s.PodConcurrency / scale))
		if float64(sum)*scale != s.PodConcurrency {
			t.Fatalf("round %d: estimate %v is not N/n × a sum of loads", round, s.PodConcurrency)
		}
		bits := 0
		for i := range N {
			if sum&(1<<i) != 0 {
				bits++
				seen[i] = true
			}
		}
		if bits != n {
			t.Fatalf("round %d: %d distinct pods in the estimate, want %d", round, bits, n)
		}
	}
	var hits int64
	for _, p := range pods {
		hits += p.hits.Load()
	}
	if hits != int64(10*n) {
		t.Fatalf("%d scrapes in 10 rounds, want %d", hits, 10*n)
	}
	// 10 fresh draws of 12 of 40: missing any one pod has probability
	// (28/40)^10 < 3%, and the seed is fixed, so this is deterministic.
	if len(seen) < N-4 {
		t.Fatalf("only %d of %d pods sampled in 10 rounds: the draw is not fresh each round", len(seen), N)
	}
}

// TestAppFiguresFromASample: with only some pods scraped, the app figures
// are scaled up to every ready pod, as the load is.
func TestAppFiguresFromASample(t *testing.T) {
	r := newRig(t, nil) // the default sampling scrapes a part of 20 pods
	var addrs []string
	for range 20 {
		x := rep(1, 0, 10, 0)
		x.App = stats.AppUsage{CPU: 0.5, HasCPU: true}
		addrs = append(addrs, newFakePod(t, x).addr())
	}
	r.pods.Set("ns/big", addrs...)
	got := r.round(t)["ns/big"]
	if got.Scraped >= 20 || !got.HasCPU || !near(got.CPU, 10) {
		t.Errorf("scraped %d of 20 pods at 0.5 cores each: CPU %v, want 10 from a sample", got.Scraped, got.CPU)
	}
}

// TestRoundsGoRoundWhenOutOfTime: when rounds run out of time, each starts
// where the last one stopped, so that the scrapes they miss do not fall on
// the same services every second.
func TestRoundsGoRoundWhenOutOfTime(t *testing.T) {
	r := newRig(t, func(c *Config) {
		c.Workers, c.Timeout, c.RoundTimeout, c.Sampling = 1, time.Second, 100*time.Millisecond, &Sampling{}
	})
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	var pods []*fakePod
	for i := range 3 {
		p := newFakePod(t, stats.Report{})
		// Each scrape takes the whole round: one a round.
		p.misbehave(func(w http.ResponseWriter, req *http.Request) {
			select {
			case <-release:
			case <-req.Context().Done():
			}
		})
		pods = append(pods, p)
		r.pods.Set("ns/svc"+strconv.Itoa(i), p.addr())
	}
	for round := range 3 {
		r.round(t)
		for i, p := range pods {
			want := int64(0)
			if i <= round {
				want = 1
			}
			if got := p.hits.Load(); got != want {
				t.Errorf("after round %d: pod %d scraped %d times, want %d", round+1, i, got, want)
			}
		}
	}
}
