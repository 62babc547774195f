package loadgen

import (
	"strings"
	"testing"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/swell-run/swell/pkg/trace"
)

const ms = time.Millisecond

func TestSchedulePacerPace(t *testing.T) {
	p := schedulePacer{0, 10 * ms, 10 * ms, 50 * ms}
	tests := []struct {
		elapsed time.Duration
		hits    uint64
		wait    time.Duration
		stop    bool
	}{
		{0, 0, 0, false},
		{time.Microsecond, 0, -time.Microsecond, false}, // late: fire now
		{1 * ms, 1, 9 * ms, false},
		{10 * ms, 2, 0, false}, // equal arrivals fire back to back
		{12 * ms, 2, -2 * ms, false},
		{12 * ms, 3, 38 * ms, false},
		{50 * ms, 4, 0, true},
		{time.Hour, 9, 0, true},
	}
	for _, tt := range tests {
		wait, stop := p.Pace(tt.elapsed, tt.hits)
		if wait != tt.wait || stop != tt.stop {
			t.Errorf("Pace(%s, %d) = %s, %v; want %s, %v", tt.elapsed, tt.hits, wait, stop, tt.wait, tt.stop)
		}
	}
}

// fireTimes drives a pacer the way vegeta's attack loop does, on a virtual
// clock where every hit takes lag to dispatch, and returns when each hit
// fired.
func fireTimes(p vegeta.Pacer, lag time.Duration, limit int) []time.Duration {
	var fired []time.Duration
	elapsed := time.Duration(0)
	for len(fired) < limit {
		wait, stop := p.Pace(elapsed, uint64(len(fired)))
		if stop {
			break
		}
		if wait > 0 {
			elapsed += wait
		}
		fired = append(fired, elapsed)
		elapsed += lag
	}
	return fired
}

func TestSchedulePacerFiresInOrderOnTime(t *testing.T) {
	schedule := schedulePacer{0, 3 * ms, 3 * ms, 20 * ms, 21 * ms, time.Second}
	got := fireTimes(schedule, 0, 100)
	if len(got) != len(schedule) {
		t.Fatalf("fired %d hits, want %d", len(got), len(schedule))
	}
	for i := range schedule {
		if got[i] != schedule[i] {
			t.Errorf("hit %d fired at %s, want %s", i, got[i], schedule[i])
		}
	}

	// A sender that takes 2ms per hit falls behind, fires late hits at
	// once and catches up at the first gap; it never skips one.
	got = fireTimes(schedule, 2*ms, 100)
	want := []time.Duration{0, 3 * ms, 5 * ms, 20 * ms, 22 * ms, time.Second}
	if len(got) != len(want) {
		t.Fatalf("fired %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("lagging: hit %d fired at %s, want %s", i, got[i], want[i])
		}
	}
}

func TestSchedulePacerRate(t *testing.T) {
	p := schedulePacer{0, 100 * ms, 900 * ms, 1500 * ms}
	if got := p.Rate(950 * ms); got != 3 {
		t.Errorf("Rate(950ms) = %v, want 3", got)
	}
	if got := p.Rate(1600 * ms); got != 2 {
		t.Errorf("Rate(1.6s) = %v, want 2 (900ms and 1.5s)", got)
	}
}

func TestBoundedPacer(t *testing.T) {
	p := boundedPacer{Pacer: vegeta.ConstantPacer{Freq: 1, Per: 10 * ms}, max: 3}
	got := fireTimes(p, 0, 100)
	want := []time.Duration{10 * ms, 20 * ms, 30 * ms}
	if len(got) != len(want) {
		t.Fatalf("fired %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("hit %d at %s, want %s", i, got[i], want[i])
		}
	}
	// Count-bounded: however late the sender, all hits go out.
	if got := fireTimes(p, 25*ms, 100); len(got) != 3 {
		t.Errorf("late sender fired %d hits, want 3", len(got))
	}

	closed := boundedPacer{Pacer: vegeta.ConstantPacer{}, until: 50 * ms}
	if got := fireTimes(closed, 10*ms, 100); len(got) != 5 {
		t.Errorf("time-bounded closed loop fired %d hits at 10ms each in 50ms, want 5", len(got))
	}
}

func TestPlanRate(t *testing.T) {
	tests := []struct {
		rate     float64
		duration time.Duration
		requests uint64
		want     uint64
	}{
		{2000, 30 * time.Second, 0, 60000},
		{0.1, 30 * time.Second, 0, 3},
		{3, time.Second, 0, 3},
		{1000, 0, 50, 50},
		{1000, time.Second, 50, 50},
		{10, time.Second, 50, 10},
	}
	for _, tt := range tests {
		p, err := Config{Rate: tt.rate, Duration: tt.duration, Requests: tt.requests}.plan()
		if err != nil {
			t.Errorf("rate %g duration %s requests %d: %v", tt.rate, tt.duration, tt.requests, err)
			continue
		}
		if p.planned != tt.want || p.mode != ModeRate {
			t.Errorf("rate %g duration %s requests %d: planned %d (%s), want %d", tt.rate, tt.duration, tt.requests, p.planned, p.mode, tt.want)
		}
		// The schedule ends by Duration: the last hit is due no later.
		if tt.duration > 0 {
			fired := fireTimes(p.pacer, 0, int(tt.want)+10)
			if uint64(len(fired)) != tt.want || fired[len(fired)-1] > tt.duration {
				t.Errorf("rate %g duration %s: fired %d hits, last at %s", tt.rate, tt.duration, len(fired), fired[len(fired)-1])
			}
		}
	}
}

func TestPlanTrace(t *testing.T) {
	recs := []trace.Record{
		{Line: 2, Arrival: 0, ServiceTime: 1 * ms},
		{Line: 3, Arrival: 20 * ms, ServiceTime: 2 * ms},
		{Line: 4, Arrival: 40 * ms, ServiceTime: 3 * ms},
		{Line: 5, Arrival: 60 * ms, ServiceTime: 4 * ms},
	}
	p, err := Config{Trace: recs, Speed: 2, ServiceTime: true}.plan()
	if err != nil {
		t.Fatal(err)
	}
	if got := fireTimes(p.pacer, 0, 100); len(got) != 4 || got[1] != 10*ms || got[3] != 30*ms {
		t.Errorf("speed 2 fired at %v, want 0 10ms 20ms 30ms", got)
	}
	if len(p.sleeps) != 4 || p.sleeps[3] != 4*ms {
		t.Errorf("sleeps = %v", p.sleeps)
	}
	if p.targetRate < 133 || p.targetRate > 134 {
		t.Errorf("target rate = %g, want 4 in 30ms", p.targetRate)
	}

	// Duration cuts at the scaled time; Requests at the count.
	if p, _ := (Config{Trace: recs, Speed: 2, Duration: 20 * ms}).plan(); p.planned != 2 || p.sleeps != nil {
		t.Errorf("duration 20ms at speed 2: planned %d, sleeps %v; want 2 and none", p.planned, p.sleeps)
	}
	if p, _ := (Config{Trace: recs, Requests: 3}).plan(); p.planned != 3 {
		t.Errorf("3 requests: planned %d", p.planned)
	}
}

func TestPlanInvalid(t *testing.T) {
	recs := []trace.Record{{Arrival: time.Second}}
	tests := []struct {
		name     string
		o        Config
		contains string
	}{
		{"no mode", Config{Duration: time.Second}, "exactly one"},
		{"two modes", Config{Rate: 1, Workers: 1, Duration: time.Second}, "exactly one"},
		{"unbounded rate", Config{Rate: 10}, "needs a Duration"},
		{"unbounded closed", Config{Workers: 2}, "needs a Duration"},
		{"negative rate", Config{Rate: -1, Requests: 1}, "Rate -1"},
		{"huge rate", Config{Rate: 1e9, Requests: 1}, "Rate 1e+09"},
		{"no request due", Config{Rate: 0.5, Duration: time.Second}, "plans no request"},
		{"negative workers", Config{Workers: -3, Requests: 1}, "Workers -3"},
		{"speed without trace", Config{Rate: 1, Requests: 1, Speed: 2}, "Speed"},
		{"service time without trace", Config{Rate: 1, Requests: 1, ServiceTime: true}, "ServiceTime"},
		{"bad speed", Config{Trace: recs, Speed: -1}, "Speed -1"},
		{"empty cut", Config{Trace: recs, Duration: time.Millisecond}, "plans no request"},
		{"out of order", Config{Trace: []trace.Record{{Arrival: 2}, {Line: 9, Arrival: 1}}}, "line 9"},
	}
	for _, tt := range tests {
		_, err := tt.o.plan()
		if err == nil || !strings.Contains(err.Error(), tt.contains) {
			t.Errorf("%s: error %v, want one mentioning %q", tt.name, err, tt.contains)
		}
	}
}

// BenchmarkTarget measures the per-request work of filling in a target,
// with and without a service time in the URL.
func BenchmarkTarget(b *testing.B) {
	for _, withSleep := range []bool{false, true} {
		name := "plain"
		if withSleep {
			name = "sleep"
		}
		b.Run(name, func(b *testing.B) {
			g := &generator{opts: Config{Method: "GET"}, url: "http://127.0.0.1:8080/", sep: "?"}
			if withSleep {
				g.plan.sleeps = make([]time.Duration, 1<<16)
				for i := range g.plan.sleeps {
					g.plan.sleeps[i] = time.Duration(i) * time.Microsecond
				}
			}
			var tgt vegeta.Target
			b.ReportAllocs()
			for b.Loop() {
				if g.sent.Load() == 1<<16 {
					g.sent.Store(0)
				}
				if err := g.target(&tgt); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
