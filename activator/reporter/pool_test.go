package reporter

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	testclock "k8s.io/utils/clock/testing"

	"github.com/swell-run/swell/autoscaler/collector"
	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/shard"
	"github.com/swell-run/swell/pkg/stats"
)

// partSource is fakeSource that can report a part of its services.
type partSource struct{ fakeSource }

func (s *partSource) ReportPart(_ time.Time, keep func(string) bool, emit func(string, stats.ActivatorFigures)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for svc, f := range s.figures {
		if keep == nil || keep(svc) {
			emit(svc, f)
		}
	}
}

// replica is one autoscaler replica's real activator endpoint: what it was
// sent, by frame.
type replica struct {
	addr    string
	ep      *collector.ActivatorEndpoint
	reports chan []string // the services of each report frame, sorted
	pokes   chan string
}

type replicaSink struct{ r *replica }

func (s replicaSink) Apply(_ string, f *stats.ActivatorFrame) {
	if f.Type != stats.ActivatorReport {
		return
	}
	var svcs []string
	for _, e := range f.Entries {
		svcs = append(svcs, string(e.Service))
	}
	slices.Sort(svcs)
	s.r.reports <- svcs
}

func newReplica(t *testing.T) *replica {
	t.Helper()
	r := &replica{reports: make(chan []string, 64), pokes: make(chan string, 64)}
	ep, err := collector.NewActivatorEndpoint(collector.EndpointConfig{
		Tokens: []string{testToken}, Sink: replicaSink{r}, OnPoke: func(svc string) { r.pokes <- svc },
	})
	if err != nil {
		t.Fatal(err)
	}
	r.ep = ep
	srv := httptest.NewServer(ep)
	r.addr = strings.TrimPrefix(srv.URL, "http://")
	t.Cleanup(func() { ep.Close(); srv.Close() })
	return r
}

// servicesIn returns, of n candidates, two services in each of buckets 0
// and 1 of 2.
func servicesIn() (b0, b1 []string) {
	for i := 0; len(b0) < 2 || len(b1) < 2; i++ {
		k := "default/svc-" + string(rune('a'+i))
		if shard.Of(k, 2) == 0 {
			if len(b0) < 2 {
				b0 = append(b0, k)
			}
		} else if len(b1) < 2 {
			b1 = append(b1, k)
		}
	}
	return b0, b1
}

func TestPoolReportsEachBucketToItsLeader(t *testing.T) {
	a, b := newReplica(t), newReplica(t)
	b0, b1 := servicesIn()
	src := &partSource{}
	figs := map[string]stats.ActivatorFigures{}
	for _, k := range append(slices.Clone(b0), b1...) {
		figs[k] = stats.ActivatorFigures{Concurrency: 1, Requests: 2, InFlight: 1}
	}
	src.set(figs)
	clk := &notifyClock{FakeClock: testclock.NewFakeClock(t0), timers: make(chan time.Duration, 64), tickers: make(chan time.Duration, 64)}
	var dialled sync.Map // address → dials
	p, err := NewPool(PoolConfig{
		Config: Config{URL: "ws://autoscaler.swell-system.svc:8080" + network.ActivatorReportPath, Token: testToken,
			Name: "act-1", Source: src, Clock: clk, Registerer: prometheus.NewRegistry()},
		DialerFor: func(addr string) *websocket.Dialer {
			d := *websocket.DefaultDialer
			d.NetDialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
				n, _ := dialled.LoadOrStore(addr, new(int))
				*n.(*int)++
				return (&net.Dialer{}).DialContext(ctx, network, addr)
			}
			return &d
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := recv(t, done, "Run's return"); err != context.Canceled {
			t.Errorf("Run = %v, want context.Canceled", err)
		}
	})

	// Each replica gets the report of its bucket's services, and only
	// them, on connecting.
	p.SetLeaders(Leaders{a.addr, b.addr})
	if got := recv(t, a.reports, "report at bucket 0's leader"); !slices.Equal(got, sorted(b0)) {
		t.Errorf("bucket 0's leader got %v, want %v", got, sorted(b0))
	}
	if got := recv(t, b.reports, "report at bucket 1's leader"); !slices.Equal(got, sorted(b1)) {
		t.Errorf("bucket 1's leader got %v, want %v", got, sorted(b1))
	}
	recv(t, clk.tickers, "first ticker")
	recv(t, clk.tickers, "second ticker")

	// A poke goes to the leader of its service's bucket.
	p.Poke(b1[0])
	if got := recv(t, b.pokes, "poke"); got != b1[0] {
		t.Errorf("bucket 1's leader was poked for %q, want %q", got, b1[0])
	}

	// Bucket 0 moves to b: b's next report has every service, and a is
	// disconnected (it is dialled anew when it leads again, below).
	p.SetLeaders(Leaders{b.addr, b.addr})
	clk.Step(DefaultPeriod)
	all := sorted(append(slices.Clone(b0), b1...))
	if got := recv(t, b.reports, "report after the move"); !slices.Equal(got, all) {
		t.Errorf("after bucket 0 moved, its new leader got %v, want %v", got, all)
	}

	// With no leader for bucket 0, its pokes wait for one.
	p.SetLeaders(Leaders{"", b.addr})
	p.Poke(b0[0])
	select {
	case got := <-b.pokes:
		t.Fatalf("bucket 1's leader was poked for %q, a service of bucket 0", got)
	default:
	}
	p.SetLeaders(Leaders{a.addr, b.addr})
	if got := recv(t, a.pokes, "poke after bucket 0 found a leader"); got != b0[0] {
		t.Errorf("bucket 0's new leader was poked for %q, want %q", got, b0[0])
	}
	if n, _ := dialled.Load(a.addr); *n.(*int) != 2 {
		t.Errorf("a was dialled %d times, want 2 (once per time it led)", *n.(*int))
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func TestNewPoolRefusesWhatItCannotRoute(t *testing.T) {
	base := Config{URL: "ws://x" + network.ActivatorReportPath, Token: testToken, Name: "act-1"}
	dialer := func(string) *websocket.Dialer { return websocket.DefaultDialer }
	for name, cfg := range map[string]PoolConfig{
		"no dialer":        {Config: withSource(base, &partSource{})},
		"not a PartSource": {Config: withSource(base, &fakeSource{}), DialerFor: dialer},
		"no name":          {Config: withSource(Config{URL: base.URL, Token: testToken}, &partSource{}), DialerFor: dialer},
	} {
		if _, err := NewPool(cfg); err == nil {
			t.Errorf("%s: NewPool succeeded", name)
		}
	}
	if _, err := New(Config{URL: base.URL, Token: testToken, Name: "act-1", Source: &fakeSource{}, Keep: func(string) bool { return true }}); err == nil {
		t.Error("New with Keep and a Source that cannot report a part succeeded")
	}
}

func withSource(c Config, s Source) Config {
	c.Source = s
	return c
}

var _ http.Handler = (*collector.ActivatorEndpoint)(nil)
