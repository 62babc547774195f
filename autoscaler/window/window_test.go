package window

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// t0 is an arbitrary whole second; every test time is an offset from it.
var t0 = time.Unix(1_700_000_000, 0)

func at(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func TestConstantLoadReadsTheSameBothWays(t *testing.T) {
	w := New(time.Minute)
	for s := 0; s < 200; s++ {
		w.Record(at(float64(s)), 7.25)
		for _, d := range []time.Duration{time.Second, 6 * time.Second, time.Minute} {
			if got := w.Average(at(float64(s)), d); !near(got, 7.25) {
				t.Fatalf("t=%d Average(%v) = %v, want 7.25", s, d, got)
			}
			if got := w.WeightedAverage(at(float64(s)), d); !near(got, 7.25) {
				t.Fatalf("t=%d WeightedAverage(%v) = %v, want 7.25", s, d, got)
			}
		}
	}
}

func TestFirstSecondsReadTheirOwnHistory(t *testing.T) {
	w := New(time.Minute)
	if got := w.Average(at(0), time.Minute); got != 0 {
		t.Fatalf("empty Average = %v", got)
	}
	if w.HasData(at(0), time.Minute) {
		t.Fatal("empty window has data")
	}
	w.Record(at(0.2), 10)
	// One second of history reads the full load, not 1/60 of it.
	if got := w.Average(at(0.9), time.Minute); got != 10 {
		t.Fatalf("after 1s: %v, want 10", got)
	}
	w.Record(at(1), 20)
	if got := w.Average(at(1), time.Minute); got != 15 {
		t.Fatalf("after 2s: %v, want 15", got)
	}
	// The panic window reads the same buckets.
	if got := w.Average(at(1), 6*time.Second); got != 15 {
		t.Fatalf("panic after 2s: %v, want 15", got)
	}
	if got := w.Average(at(1), time.Second); got != 20 {
		t.Fatalf("1s window: %v, want 20", got)
	}
}

// TestGapsInsideTheHistoryAreUnknown: a second without a record is one
// whose load could not be read, not a zero: it is left out, while a
// recorded 0 counts.
func TestGapsInsideTheHistoryAreUnknown(t *testing.T) {
	w := New(time.Minute)
	w.Record(at(0), 10)
	w.Record(at(3), 10) // seconds 1 and 2 had no record
	if got := w.Average(at(3), time.Minute); got != 10 {
		t.Fatalf("Average = %v, want 10 (seconds 0 and 3)", got)
	}
	if got := w.Average(at(3), 2*time.Second); got != 10 {
		t.Fatalf("2s Average = %v, want 10 (second 3)", got)
	}
	if got := w.WeightedAverage(at(3), time.Minute); got != 10 {
		t.Fatalf("WeightedAverage = %v, want 10", got)
	}
	w.Record(at(4), 0) // a known zero
	if got := w.Average(at(4), time.Minute); got != 20.0/3 {
		t.Fatalf("with a recorded 0: %v, want 20/3", got)
	}
	// A window that holds only unknown seconds before the last record has
	// no data.
	w2 := New(time.Minute)
	w2.Record(at(0), 5)
	w2.Record(at(10), 5)
	if w2.HasData(at(8), 3*time.Second) || w2.Average(at(8), 3*time.Second) != 0 {
		t.Fatalf("seconds 6..8, none recorded: HasData %v, Average %v", w2.HasData(at(8), 3*time.Second), w2.Average(at(8), 3*time.Second))
	}
}

func TestSecondsAfterTheLastRecordAreUnknown(t *testing.T) {
	w := New(time.Minute)
	for s := 0; s < 10; s++ {
		w.Record(at(float64(s)), 6)
	}
	// Second 10's scrape has not arrived: it is left out, not read as 0.
	if got := w.Average(at(10.5), time.Minute); got != 6 {
		t.Fatalf("at 10.5: %v, want 6", got)
	}
	if got := w.Average(at(13), 6*time.Second); got != 6 {
		t.Fatalf("panic at 13 (window 8..13, known 8..9): %v, want 6", got)
	}
	// The window of 6s ending at 15 is 10..15: nothing known.
	if got := w.Average(at(15), 6*time.Second); got != 0 || w.HasData(at(15), 6*time.Second) {
		t.Fatalf("panic at 15: %v, HasData %v; want 0, false", got, w.HasData(at(15), 6*time.Second))
	}
	// The stable window ending at 68 is 9..68: only second 9 is known.
	if got := w.Average(at(68), time.Minute); got != 6 || !w.HasData(at(68), time.Minute) {
		t.Fatalf("at 68: %v, want 6 with data", got)
	}
	// At 69 the last record is a whole window old.
	if got := w.Average(at(69), time.Minute); got != 0 || w.HasData(at(69), time.Minute) {
		t.Fatalf("at 69: %v, want 0 without data", got)
	}
	if got := w.LastRecord(); !got.Equal(at(9)) {
		t.Fatalf("LastRecord = %v", got)
	}
}

func TestLoadDecaysToExactlyZero(t *testing.T) {
	w := New(time.Minute)
	for s := 0; s < 60; s++ {
		w.Record(at(float64(s)), 0.1*float64(s%7)+1.0/3) // values with no exact binary form
	}
	for s := 60; s < 120; s++ {
		w.Record(at(float64(s)), 0)
		if s < 119 && w.Average(at(float64(s)), time.Minute) == 0 {
			t.Fatalf("t=%d: zero too early", s)
		}
	}
	if got := w.Average(at(119), time.Minute); got != 0 {
		t.Fatalf("a minute of zeros averages %v, want exactly 0", got)
	}
	if got := w.WeightedAverage(at(119), time.Minute); got != 0 {
		t.Fatalf("weighted: %v, want exactly 0", got)
	}
	if !w.HasData(at(119), time.Minute) {
		t.Fatal("recorded zeros are data")
	}
	if got := w.LastNonZero(); !got.Equal(at(59)) {
		t.Fatalf("LastNonZero = %v, want %v", got, at(59))
	}
}

func TestSourcesAddUp(t *testing.T) {
	w := New(10 * time.Second)
	w.Record(at(5.1), 3)  // the scrape round's total over the pods
	w.Record(at(5.7), 2)  // activator A
	w.Record(at(5.99), 1) // activator B
	if got := w.Average(at(5.99), time.Second); got != 6 {
		t.Fatalf("bucket = %v, want 6", got)
	}
}

func TestClockGoingBackwards(t *testing.T) {
	w := New(10 * time.Second)
	for s := 0; s < 20; s++ {
		w.Record(at(float64(s)), 1)
	}
	// A late report for second 15 (inside the ring 10..19) lands there.
	w.Record(at(15), 10)
	if got, want := w.Average(at(19), 10*time.Second), (10+10)/10.0; got != want {
		t.Fatalf("after late record: %v, want %v", got, want)
	}
	// A report for second 9, older than the ring, is dropped.
	w.Record(at(9), 100)
	if got := w.Average(at(19), 10*time.Second); got != 2 {
		t.Fatalf("after too-old record: %v, want 2", got)
	}
	// A query at a time before the last record reads the window ending then,
	// over the seconds the ring still holds (10..15 for a 10s window at 15;
	// second 15 holds 1+10).
	if got, want := w.Average(at(15), 10*time.Second), (5+11)/6.0; !near(got, want) {
		t.Fatalf("query in the past: %v, want %v", got, want)
	}
	if got, want := w.Average(at(15), 2*time.Second), (1+11)/2.0; got != want {
		t.Fatalf("short query in the past: %v, want %v", got, want)
	}
	if got := w.Average(at(3), 10*time.Second); got != 0 {
		t.Fatalf("query before the ring: %v, want 0", got)
	}
}

func TestLateRecordBeforeTheHistoryExtendsIt(t *testing.T) {
	w := New(10 * time.Second)
	w.Record(at(100), 4)
	w.Record(at(99), 2) // an activator's report for the previous second arrives late
	if got := w.Average(at(100), 10*time.Second); got != 3 {
		t.Fatalf("Average = %v, want 3", got)
	}
}

func TestGapOfAWholeRingStartsANewHistory(t *testing.T) {
	w := New(time.Minute)
	for s := 0; s < 30; s++ {
		w.Record(at(float64(s)), 5)
	}
	// The service sits at zero with nothing recorded, then wakes: the first
	// activator report reads in full instead of 1/60.
	w.Record(at(89), 4)
	if got := w.Average(at(89), time.Minute); got != 4 {
		t.Fatalf("after a whole-ring gap: %v, want 4", got)
	}
	// A shorter gap keeps the history, its unknown seconds left out: the
	// 60s window ending at 88 holds seconds 29 and 88.
	w2 := New(time.Minute)
	for s := 0; s < 30; s++ {
		w2.Record(at(float64(s)), 5)
	}
	w2.Record(at(88), 4)
	if got, want := w2.Average(at(88), time.Minute), (5+4)/2.0; !near(got, want) {
		t.Fatalf("after a shorter gap: %v, want %v", got, want)
	}
}

func TestBadValues(t *testing.T) {
	w := New(10 * time.Second)
	w.Record(at(0), 2)
	w.Record(at(0), -1)
	w.Record(at(0), math.NaN())
	w.Record(at(0), math.Inf(1))
	w.Record(at(1), math.Inf(-1)) // dropped whole: second 1 stays unknown
	if got := w.Average(at(1), 10*time.Second); got != 2 {
		t.Fatalf("Average = %v, want 2", got)
	}
	w.Record(at(2), 1e300)
	if got, want := w.Average(at(2), time.Second), 1e9; got != want {
		t.Fatalf("capped = %v, want %v", got, want)
	}
}

func TestWeightedAverageWeights(t *testing.T) {
	w := New(time.Minute)
	w.Record(at(0), 4)
	w.Record(at(1), 2)
	w.Record(at(2), 1)
	// 3s window: α = 2/4 = 0.5, weights 1, 0.5, 0.25 newest first.
	want := (1*1 + 2*0.5 + 4*0.25) / 1.75
	if got := w.WeightedAverage(at(2), 3*time.Second); !near(got, want) {
		t.Fatalf("WeightedAverage = %v, want %v", got, want)
	}
	// A window longer than the history is normalised over the history.
	a := Smoothing(time.Minute)
	k := 1 - a
	want = (1 + 2*k + 4*k*k) / (1 + k + k*k)
	if got := w.WeightedAverage(at(2), time.Minute); !near(got, want) {
		t.Fatalf("WeightedAverage(60s) = %v, want %v", got, want)
	}
	// The newest known second, not now, weighs 1: an unknown current second
	// does not discount everything.
	if got := w.WeightedAverage(at(2.5), 3*time.Second); !near(got, (1*1+2*0.5+4*0.25)/1.75) {
		t.Fatalf("later in the same second: %v", got)
	}
	if got := Smoothing(time.Second); got != 1 {
		t.Fatalf("Smoothing(1s) = %v", got)
	}
}

func TestResize(t *testing.T) {
	w := New(time.Minute)
	for s := 0; s < 60; s++ {
		w.Record(at(float64(s)), float64(s))
	}
	w.Resize(10 * time.Second)
	if w.Size() != 10*time.Second {
		t.Fatalf("Size = %v", w.Size())
	}
	// Seconds 50..59 survive.
	if got, want := w.Average(at(59), time.Minute), 54.5; got != want {
		t.Fatalf("after shrink: %v, want %v", got, want)
	}
	w.Resize(30 * time.Second)
	if got, want := w.Average(at(59), 30*time.Second), 54.5; got != want {
		t.Fatalf("after grow: %v, want %v", got, want)
	}
	for s := 60; s < 80; s++ {
		w.Record(at(float64(s)), float64(s))
	}
	// Seconds 50..79, all kept.
	if got, want := w.Average(at(79), 30*time.Second), 64.5; got != want {
		t.Fatalf("after refill: %v, want %v", got, want)
	}
	e := New(time.Second)
	e.Resize(time.Hour)
	if e.Size() != time.Hour || e.HasData(at(0), time.Hour) {
		t.Fatal("resized empty window")
	}
	if Buckets(1500*time.Millisecond) != 2 || Buckets(0) != 1 || Buckets(time.Hour) != 3600 {
		t.Fatal("Buckets rounding")
	}
}

// model is the definition of the averages, written the slow way.
type model struct {
	ring        int64
	vals        map[int64]float64
	first, last int64
	any         bool
}

func (m *model) record(s int64, v float64) {
	if !m.any || s-m.last >= m.ring {
		m.vals = map[int64]float64{}
		m.first, m.last, m.any = s, s, true
	}
	if s <= m.last-m.ring {
		return
	}
	m.last = max(m.last, s)
	m.first = min(m.first, s)
	m.vals[s] += math.Round(v*unit) / unit
}

func (m *model) average(now int64, n int64) float64 {
	if !m.any {
		return 0
	}
	n = min(max(n, 1), m.ring)
	top := now
	if m.last == now-1 { // the current second still being collected
		top = now - 1
	}
	start := max(top-n+1, m.first, m.last-m.ring+1)
	end := min(now, m.last)
	if start > end {
		return 0
	}
	var sum float64
	var known int
	for s := start; s <= end; s++ {
		if v, ok := m.vals[s]; ok {
			sum += v
			known++
		}
	}
	if known == 0 {
		return 0
	}
	return sum / float64(known)
}

// TestCurrentSecondNotYetCollected: while the current second has no record
// yet, a window ends at the last complete second and still reads N seconds:
// a 1-second panic window reads the last second, not nothing.
func TestCurrentSecondNotYetCollected(t *testing.T) {
	w := New(6 * time.Second)
	for s := 10; s <= 20; s++ {
		w.Record(at(float64(s)), float64(s))
	}
	mid := at(21.3) // second 21 not collected yet
	if got := w.Average(mid, time.Second); got != 20 {
		t.Fatalf("1s window at 21.3 = %v, want 20 (second 20)", got)
	}
	if got := w.Average(mid, 2*time.Second); got != 19.5 {
		t.Fatalf("2s window at 21.3 = %v, want 19.5 (seconds 19, 20)", got)
	}
	// Two seconds without a record are not "still being collected": the
	// window stays where it is and reads what it holds of them.
	if got := w.Average(at(22.3), 2*time.Second); got != 0 {
		t.Fatalf("2s window at 22.3 = %v, want 0 (no record in 21..22)", got)
	}
}

func TestAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 50; trial++ {
		ring := 1 + rng.IntN(40)
		w := New(time.Duration(ring) * time.Second)
		m := &model{ring: int64(ring)}
		now := int64(1000)
		for step := 0; step < 2000; step++ {
			switch r := rng.IntN(10); {
			case r < 6:
				now++
			case r < 7:
				now += int64(rng.IntN(2 * ring)) // gaps, some longer than the ring
			}
			s := now
			if rng.IntN(8) == 0 {
				s -= int64(rng.IntN(ring + 3)) // late or too old
			}
			v := math.Floor(rng.Float64()*1000) / 7
			w.Record(time.Unix(s, int64(rng.IntN(1e9))), v)
			m.record(s, v)
			q := now - int64(rng.IntN(3)) // sometimes a query in the past
			for _, n := range []int{1, 2, ring / 2, ring, ring + 5} {
				got := w.Average(time.Unix(q, 0), time.Duration(n)*time.Second)
				want := m.average(q, int64(n))
				if math.Abs(got-want) > 1e-6 {
					t.Fatalf("trial %d step %d ring %d n %d: Average = %v, model %v", trial, step, ring, n, got, want)
				}
			}
		}
	}
}

func TestNoAllocations(t *testing.T) {
	w := New(time.Minute)
	s := 0
	allocs := testing.AllocsPerRun(1000, func() {
		s++
		w.Record(at(float64(s)), float64(s%13))
		_ = w.Average(at(float64(s)), time.Minute)
		_ = w.Average(at(float64(s)), 6*time.Second)
		_ = w.WeightedAverage(at(float64(s)), time.Minute)
		_ = w.HasData(at(float64(s)), time.Minute)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per second of use, want 0", allocs)
	}
}

func BenchmarkRecordAndAverages(b *testing.B) {
	for _, avg := range []string{"linear", "exponential"} {
		b.Run(avg, func(b *testing.B) {
			w := New(time.Minute)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				now := at(float64(i))
				w.Record(now, float64(i%17))
				if avg == "linear" {
					_ = w.Average(now, time.Minute)
					_ = w.Average(now, 6*time.Second)
				} else {
					_ = w.WeightedAverage(now, time.Minute)
					_ = w.WeightedAverage(now, 6*time.Second)
				}
			}
		})
	}
}
