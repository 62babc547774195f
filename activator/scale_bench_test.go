package activator

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/swell-run/swell/activator/reporter"
	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/service"
	"github.com/swell-run/swell/pkg/stats"
)

// The benchmarks in this file are the activator's part of the scale
// scenario (docs/performance.md, `go run ./hack/bench -scenario scale`):
// one activator routing 10,000 services of 5 pods each, the size the
// autoscaler is measured at. They measure what grows with the number of
// services — memory, the Host lookup, a request's way through the chain,
// the reports to the autoscaler — each against a small size where a ratio
// says more than a figure:
//
//	go test -run '^$' -bench '^BenchmarkScale' ./activator
//
// The services' keys are the scale fleet's (hack/scale/fleet):
// scale/svc-00000 and on.

const (
	scaleServices = 10000
	scalePods     = 5
	// scaleBatch is how many services appear in the Source at a time
	// while a benchmark grows its activator. Their pods are all probed at
	// once, with the probe servers in the same process: at 2,500 probes
	// at a time on a busy two-core machine, probes timed out (1 s) and
	// were retried every 25 ms faster than they were answered.
	scaleBatch        = 100
	scaleBatchTimeout = 2 * time.Minute
	// scaleProbeServers answer every pod's probes: pods are spread over
	// them, so that fifty thousand connections, each closed after its
	// probe, do not wear out one destination's ephemeral ports.
	scaleProbeServers = 16
	// scaleRounds is how many turns the sizes take at the lookup and the
	// chain.
	scaleRounds = 5
)

// scaleKey is the i-th service, named as the scale fleet names it.
func scaleKey(i int) service.Key {
	return service.Key{Namespace: "scale", Name: fmt.Sprintf("svc-%05d", i)}
}

// scaleHost is the name a client inside the cluster most often dials the
// i-th service by.
func scaleHost(i int) string {
	k := scaleKey(i)
	return k.Name + "." + k.Namespace + ".svc." + DefaultClusterDomain
}

// prefixSource lists the first n of its services. The services are built
// before a benchmark's baseline, so that what the Source holds (on
// Kubernetes, the informers' caches) is not counted as the activator's.
type prefixSource struct {
	all     []Service
	n       atomic.Int64
	changed chan struct{}
}

func newPrefixSource(all []Service) *prefixSource {
	return &prefixSource{all: all, changed: make(chan struct{}, 1)}
}

func (s *prefixSource) Services() []Service      { return s.all[:s.n.Load()] }
func (s *prefixSource) Changed() <-chan struct{} { return s.changed }

// show lists the first n services.
func (s *prefixSource) show(n int) {
	s.n.Store(int64(n))
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// scaleFleet returns n services of pods pods each, none listed yet, every
// pod at the address of one of the probe servers, which answer every probe
// as ready and close the connection after it: once probed, a pod holds no
// connection, as in an activator that sent it no traffic for a while.
func scaleFleet(b *testing.B, n, pods int) *prefixSource {
	b.Helper()
	var addrs []string
	for i := 0; pods > 0 && i < scaleProbeServers; i++ {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(network.ProbeHeader, network.ProbeQueue)
		}))
		srv.Config.SetKeepAlivesEnabled(false)
		srv.Start()
		b.Cleanup(srv.Close)
		addrs = append(addrs, srv.Listener.Addr().String())
	}
	svcs := make([]Service, n)
	for i := range svcs {
		svcs[i] = Service{Key: scaleKey(i), Pods: make([]Pod, pods)}
		for j := range pods {
			svcs[i].Pods[j] = Pod{Name: fmt.Sprintf("svc-%05d-%d", i, j), Addr: addrs[(i*pods+j)%len(addrs)]}
		}
	}
	return newPrefixSource(svcs)
}

// runScale runs an activator following src on clk, with a registry as
// cmd/activator gives it, until the benchmark ends, and waits for it to
// apply the Source's services. before may adjust it before Run starts.
func runScale(b *testing.B, src Source, clk clock.WithDelayedExecution, before func(*Activator)) *Activator {
	b.Helper()
	a, err := New(Config{Source: src, Registerer: prometheus.NewRegistry(), Clock: clk})
	if err != nil {
		b.Fatal(err)
	}
	if before != nil {
		before(a)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	b.Cleanup(func() { cancel(); <-done })
	select {
	case <-a.Synced():
	case <-time.After(testTimeout):
		b.Fatal("the activator did not apply its Source")
	}
	return a
}

// grow lists src's services scaleBatch at a time and waits, after each
// batch, until every pod of the batch is routable, at most
// scaleBatchTimeout: generous, because on a very busy machine (or with
// -race) a probe that timed out waits up to a second to be tried again.
func grow(b *testing.B, a *Activator, src *prefixSource) {
	b.Helper()
	for lo := 0; lo < len(src.all); lo += scaleBatch {
		hi := min(lo+scaleBatch, len(src.all))
		src.show(hi)
		deadline := time.Now().Add(scaleBatchTimeout)
		for _, sv := range src.all[lo:hi] {
			for n, _ := a.Routable(sv.Key); n != len(sv.Pods); n, _ = a.Routable(sv.Key) {
				if time.Now().After(deadline) {
					b.Fatalf("%s: %d of %d pods routable after %v", sv.Key, n, len(sv.Pods), scaleBatchTimeout)
				}
				time.Sleep(time.Millisecond)
			}
		}
	}
}

// settle waits until the goroutines are back to at most base (the probe
// servers' connections linger after their last answer), then collects
// garbage twice, returns the free pages to the system, and returns the
// live heap and the resident set.
func settle(b *testing.B, base int) (heap, rss uint64) {
	b.Helper()
	deadline := time.Now().Add(testTimeout)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	runtime.GC()
	debug.FreeOSMemory() // a second collection, and the free pages back
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc, residentBytes()
}

// residentBytes is this process's resident set, 0 where procfs does not
// tell it.
func residentBytes() uint64 {
	p, err := procfs.Self()
	if err != nil {
		return 0
	}
	st, err := p.Stat()
	if err != nil {
		return 0
	}
	return uint64(st.ResidentMemory())
}

// BenchmarkScale routes 10 and 10,000 services of 5 pods each, every pod
// probed and routable, and measures:
//
//   - memory (at 10,000): what one service routed costs, against the same
//     activator with none. The heap counts the routing table's names,
//     each service's throttler, tracker, pods and Prometheus series, and
//     whatever probing left behind; the resident set (after the heap's
//     free pages went back to the system) also the heap's fragmentation.
//   - lookup: finding a request's service by its Host (among 30 names or
//     30,000: each service's three cluster-local forms), the hosts taken in
//     a shuffled order so that the larger table is read as it would be,
//     mostly out of the cache.
//   - chain: a request through the whole chain, one at a time, each to the
//     next service (shuffled). The data path's transport is
//     BenchmarkMemChain's in-memory one, so that the figure is the
//     activator's own work per request, without a network hop's noise.
//
// The ratios of the two sizes are what routing among many services adds:
// the two sizes take turns, scaleRounds times (the repeated names get
// #01, #02), so that a busy spell of the machine slows both alike.
func BenchmarkScale(b *testing.B) {
	sizes := []int{10, scaleServices}
	acts := make([]*Activator, len(sizes))
	rts := make([]*memTransport, len(sizes))
	for i, n := range sizes {
		src := scaleFleet(b, n, scalePods)
		rts[i] = &memTransport{wantProxy: true}
		acts[i] = runScale(b, src, clock.RealClock{}, func(a *Activator) { a.proxy.Transport = rts[i] })
		goroutines := runtime.NumGoroutine()
		heap0, rss0 := settle(b, goroutines)
		grow(b, acts[i], src)
		// Every prober has marked its pod: none starts again.
		acts[i].probers.Wait()
		heap1, rss1 := settle(b, goroutines)
		if n != scaleServices {
			continue
		}
		b.Run(fmt.Sprintf("services=%d/memory", n), func(b *testing.B) {
			for b.Loop() {
			}
			// After the loop, which resets what was reported before it.
			b.ReportMetric(perService(heap1, heap0, n), "heap-B/service")
			if rss0 > 0 {
				b.ReportMetric(perService(rss1, rss0, n), "rss-B/service")
			}
		})
	}
	for range scaleRounds {
		for i, n := range sizes {
			b.Run(fmt.Sprintf("services=%d/lookup", n), func(b *testing.B) { benchScaleLookup(b, acts[i], n) })
		}
		for i, n := range sizes {
			b.Run(fmt.Sprintf("services=%d/chain", n), func(b *testing.B) { benchScaleChain(b, acts[i], n) })
		}
	}
	for _, rt := range rts {
		rt.verify(b)
	}
}

func perService(after, before uint64, n int) float64 {
	return (float64(after) - float64(before)) / float64(n)
}

func benchScaleLookup(b *testing.B, a *Activator, n int) {
	tab := a.table.Load()
	hosts := make([]string, n)
	for i := range hosts {
		hosts[i] = scaleHost(i)
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(n, func(i, j int) { hosts[i], hosts[j] = hosts[j], hosts[i] })
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		req.Host = hosts[i]
		if tab.lookup(req) == nil {
			b.Fatalf("no service for %s", req.Host)
		}
		if i++; i == n {
			i = 0
		}
	}
}

func benchScaleChain(b *testing.B, a *Activator, n int) {
	reqs := make([]*http.Request, n)
	for i := range reqs {
		reqs[i] = httptest.NewRequest(http.MethodGet, "http://"+scaleHost(i)+"/", nil)
		reqs[i].RemoteAddr = "10.0.0.1:40000"
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(n, func(i, j int) { reqs[i], reqs[j] = reqs[j], reqs[i] })
	w := &memWriter{h: http.Header{}}
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		w.reset()
		a.ServeHTTP(w, reqs[i])
		if w.status != http.StatusOK {
			b.Fatalf("%s: status %d", reqs[i].Host, w.status)
		}
		if i++; i == n {
			i = 0
		}
	}
}

// BenchmarkScaleRemoval takes every service, of 5 routable pods each, out
// of the Source at once, at 1,000 and 2,000 services, and reports how long
// that took per service removed, and what the heap kept of them, per
// service, against the activator before they came: it should be nothing.
// Both are kept to sizes below 10,000, where the removal takes minutes
// (docs/performance.md).
func BenchmarkScaleRemoval(b *testing.B) {
	for _, n := range []int{1000, 2000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			src := scaleFleet(b, n, scalePods)
			a := runScale(b, src, clock.RealClock{}, nil)
			goroutines := runtime.NumGoroutine()
			heap0, _ := settle(b, goroutines)
			grow(b, a, src)
			a.probers.Wait()
			settle(b, goroutines)

			began := time.Now()
			src.show(0)
			deadline := began.Add(30 * testTimeout)
			for tab := a.table.Load(); len(tab.byKey)+len(tab.gone) > 0; tab = a.table.Load() {
				if time.Now().After(deadline) {
					b.Fatalf("%d services still routed %v after they left the Source", len(tab.byKey)+len(tab.gone), 30*testTimeout)
				}
				time.Sleep(time.Millisecond)
			}
			took := time.Since(began)
			heap2, _ := settle(b, goroutines)
			for b.Loop() {
			}
			b.ReportMetric(float64(took.Nanoseconds())/float64(n), "remove-ns/service")
			b.ReportMetric(perService(heap2, heap0, n), "left-B/service")
		})
	}
}

// BenchmarkScaleStart lists 10,000 services of 5 pods each at once, as an
// activator starting beside a running cluster finds them, and reports how
// long until every pod was probed and routable (routed-s), and the probes
// that took (probes/pod: those that timed out were tried again): with at
// most DefaultMaxProbes in flight, and with as many as there are pods, as
// before the bound. The two take turns, three times. A start that
// has not routed every pod in startTimeout reports that bound and the
// share of pods it routed (routed-share).
func BenchmarkScaleStart(b *testing.B) {
	const startTimeout = 3 * time.Minute
	bounds := []struct {
		name string
		max  int
	}{{"bounded", DefaultMaxProbes}, {"unbounded", scaleServices * scalePods}}
	for range 3 {
		for _, bound := range bounds {
			b.Run("probes="+bound.name, func(b *testing.B) {
				src := scaleFleet(b, scaleServices, scalePods)
				var probes atomic.Int64
				a := runScale(b, src, clock.RealClock{}, func(a *Activator) {
					a.probeSlots = make(chan struct{}, bound.max)
					a.probeClient.Transport = countingTransport{a.probeClient.Transport, &probes}
				})
				began := time.Now()
				src.show(scaleServices)
				next := 0 // every service before it is routed
				for time.Since(began) < startTimeout {
					for next < len(src.all) {
						if n, _ := a.Routable(src.all[next].Key); n != scalePods {
							break
						}
						next++
					}
					if next == len(src.all) {
						break
					}
					time.Sleep(10 * time.Millisecond) // a measurement's pace, not a wait for an event
				}
				took := time.Since(began)
				routed := 0
				for _, sv := range src.all {
					n, _ := a.Routable(sv.Key)
					routed += n
				}
				for b.Loop() {
				}
				b.ReportMetric(took.Seconds(), "routed-s")
				pods := scaleServices * scalePods
				b.ReportMetric(float64(routed)/float64(pods), "routed-share")
				b.ReportMetric(float64(probes.Load())/float64(pods), "probes/pod")
			})
		}
	}
}

// countingTransport counts the requests it carries.
type countingTransport struct {
	http.RoundTripper
	n *atomic.Int64
}

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.n.Add(1)
	return t.RoundTripper.RoundTrip(r)
}

// BenchmarkScaleReport is the activator reporting 10,000 services to the
// autoscaler through the real reporter (activator/reporter), over a
// websocket to a loopback server that decodes and counts every frame, as
// the autoscaler's endpoint reads them. One iteration is one period
// (reporter.DefaultPeriod, on a fake clock): busy services each see
// requests in it and are reported, the others are idle and left out. The
// frames and their bytes, per second of reporting, are the figures; wire
// bytes add the websocket's framing. ns/op is the period's report from
// the activator's scan of its services to the last frame decoded, an upper
// bound of the reporter's work.
func BenchmarkScaleReport(b *testing.B) {
	for _, busy := range []int{scaleServices / 10, scaleServices} {
		b.Run(fmt.Sprintf("busy=%d", busy), func(b *testing.B) { benchScaleReport(b, busy) })
	}
}

func benchScaleReport(b *testing.B, busy int) {
	src := scaleFleet(b, scaleServices, 0)
	src.show(scaleServices)
	clk := clocktesting.NewFakeClock(time.Unix(1e9, 0))
	a := runScale(b, src, clk, nil)
	// Every (scaleServices/busy)-th service is busy, so that they spread
	// over the table as they would.
	var targets []*target
	for i := 0; i < scaleServices; i += scaleServices / busy {
		targets = append(targets, a.table.Load().byKey[scaleKey(i)])
	}

	c := newFrameCounter(b)
	rep, err := reporter.New(reporter.Config{URL: c.url, Token: "bench", Name: "activator-0", Source: a, Clock: clk})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { rep.Run(ctx); close(done) }()
	b.Cleanup(func() { cancel(); <-done })
	// The report sent on connecting, empty: from then on the reporter's
	// ticker waits on the clock.
	if n := c.next(b); n != 0 {
		b.Fatalf("first report has %d entries, want none", n)
	}

	bytes0, wire0 := c.payload.Load(), c.wire.Load()
	frames := 0
	now := clk.Now()
	for b.Loop() {
		b.StopTimer()
		// A request for each busy service, 100 ms to 600 ms into the
		// period, as accounting would count it.
		for _, t := range targets {
			t.tracker.Start(now.Add(100*time.Millisecond), false)
			t.tracker.End(now.Add(600*time.Millisecond), false)
		}
		b.StartTimer()
		now = now.Add(reporter.DefaultPeriod)
		clk.SetTime(now)
		for got := 0; got < busy; frames++ {
			got += c.next(b)
		}
	}
	b.StopTimer()
	perSecond := func(v int64) float64 { return float64(v) / float64(b.N) / reporter.DefaultPeriod.Seconds() }
	b.ReportMetric(perSecond(c.payload.Load()-bytes0), "report-B/s")
	b.ReportMetric(perSecond(c.wire.Load()-wire0), "wire-B/s")
	b.ReportMetric(perSecond(int64(frames)), "frames/s")
}

// frameCounter is a websocket endpoint that reads an activator's frames as
// the autoscaler does: it decodes every frame, and counts the Report
// frames' payload bytes and, on the socket, every byte it receives.
type frameCounter struct {
	url     string
	payload atomic.Int64
	wire    atomic.Int64
	// reports receives each Report frame's number of entries, until done
	// is closed.
	reports chan int
	done    chan struct{}
}

func newFrameCounter(b *testing.B) *frameCounter {
	b.Helper()
	c := &frameCounter{reports: make(chan int, 1024), done: make(chan struct{})}
	up := websocket.Upgrader{ReadBufferSize: stats.ActivatorMaxFrameSize}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		ws.SetReadLimit(stats.ActivatorMaxFrameSize)
		var f stats.ActivatorFrame
		for {
			_, msg, err := ws.ReadMessage()
			if err != nil {
				return
			}
			if err := stats.DecodeActivatorFrame(msg, &f); err != nil {
				b.Errorf("frame from the reporter: %v", err)
				return
			}
			if f.Type != stats.ActivatorReport {
				continue
			}
			c.payload.Add(int64(len(msg)))
			select {
			case c.reports <- len(f.Entries):
			case <-c.done:
				return
			}
		}
	}))
	srv.Listener = countingListener{srv.Listener, &c.wire}
	srv.Start()
	b.Cleanup(srv.Close)
	b.Cleanup(func() { close(c.done) })
	c.url = "ws" + strings.TrimPrefix(srv.URL, "http") + network.ActivatorReportPath
	return c
}

// next returns the next Report frame's number of entries.
func (c *frameCounter) next(b *testing.B) int {
	select {
	case n := <-c.reports:
		return n
	case <-time.After(testTimeout):
		b.Fatalf("no report frame after %v", testTimeout)
		return 0
	}
}

// countingListener counts the bytes read from its connections.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{c, l.n}, nil
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// BenchmarkScalePorts measures what the services' own ports cost at
// 10,000 services (docs/routing.md#what-the-ports-cost): the same Source
// of scaleServices services, each with a port, is routed by one activator
// that opens no port and by one that opens every one (on loopback, each a
// listener served by an http.Server, as cmd/activator serves them), and
// the difference is the ports' share:
//
//   - open-ns/port: applying the services with their ports, against
//     without, per port;
//   - fds/port, goroutines/port: file descriptors and goroutines held;
//   - heap-B/port, rss-B/port: memory, after garbage collection;
//   - lookup: finding a request's service by the port it arrived on,
//     against by its Host (BenchmarkScale's lookup).
func BenchmarkScalePorts(b *testing.B) {
	svcs := make([]Service, scaleServices)
	for i := range svcs {
		svcs[i] = Service{Key: scaleKey(i), Port: ports0 + i}
	}
	srv := &http.Server{Handler: http.NotFoundHandler()}
	b.Cleanup(func() { srv.Close() })

	type cost struct {
		took                  time.Duration
		heap, rss, fds, gorts float64
	}
	measure := func(serve bool) (*Activator, cost) {
		src := newPrefixSource(svcs)
		a, err := New(Config{Source: src, Registerer: prometheus.NewRegistry(), Clock: clock.RealClock{},
			ServePort: func(ln net.Listener) error {
				if !serve {
					return nil
				}
				return srv.Serve(ln)
			},
			// Each on its own port, as on a pod: binding port 0 instead
			// has the kernel search for a free port, longer the more are
			// bound.
			ListenPort: func(port int) (net.Listener, error) {
				return net.Listen("tcp", net.JoinHostPort(portsHost, strconv.Itoa(port)))
			},
		})
		if err != nil {
			b.Fatal(err)
		}
		if !serve {
			a.ports = nil
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { a.Run(ctx); close(done) }()
		b.Cleanup(func() { cancel(); <-done })
		<-a.Synced()
		g0 := runtime.NumGoroutine()
		heap0, rss0 := settle(b, g0)
		fds0 := openFiles(b)
		start := time.Now()
		src.show(len(svcs))
		for len(a.table.Load().byKey) != len(svcs) {
			<-*a.tableChanged.Load()
		}
		took := time.Since(start)
		g1 := runtime.NumGoroutine()
		heap1, rss1 := settle(b, g1)
		n := float64(len(svcs))
		return a, cost{took: took, heap: perService(heap1, heap0, len(svcs)), rss: perService(rss1, rss0, len(svcs)),
			fds: float64(openFiles(b)-fds0) / n, gorts: float64(g1-g0) / n}
	}
	_, without := measure(false)
	a, with := measure(true)
	if got := len(a.table.Load().byPort); got != len(svcs) {
		b.Fatalf("%d ports open on %s, want %d: ports %d-%d must be free there", got, portsHost, len(svcs), ports0, ports0+len(svcs)-1)
	}
	b.Run(fmt.Sprintf("services=%d/cost", len(svcs)), func(b *testing.B) {
		for b.Loop() {
		}
		n := float64(len(svcs))
		b.ReportMetric(float64(with.took-without.took)/n, "open-ns/port")
		b.ReportMetric(with.fds-without.fds, "fds/port")
		b.ReportMetric(with.gorts-without.gorts, "goroutines/port")
		b.ReportMetric(with.heap-without.heap, "heap-B/port")
		if with.rss != 0 {
			b.ReportMetric(with.rss-without.rss, "rss-B/port")
		}
	})
	b.Run(fmt.Sprintf("services=%d/lookup-by-port", len(svcs)), func(b *testing.B) {
		tab := a.table.Load()
		reqs := make([]*http.Request, len(svcs))
		for i := range reqs {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.Host = "shop.example.com"
			reqs[i] = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, &net.TCPAddr{Port: ports0 + i}))
		}
		rand.New(rand.NewPCG(1, 2)).Shuffle(len(reqs), func(i, j int) { reqs[i], reqs[j] = reqs[j], reqs[i] })
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			if tab.lookup(reqs[i]) == nil {
				b.Fatalf("no service for port %d", localPort(reqs[i]))
			}
			if i++; i == len(reqs) {
				i = 0
			}
		}
	})
}

// ports0 is the first port BenchmarkScalePorts gives a service, on
// portsHost; ports0 to ports0+scaleServices-1 must be free there.
const (
	ports0    = 10000
	portsHost = "127.0.0.86"
)

// openFiles counts this process's open file descriptors.
func openFiles(b *testing.B) int {
	b.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		b.Skip("no /proc/self/fd here:", err)
	}
	return len(fds)
}
