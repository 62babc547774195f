package stats

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash/fnv"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/quick"
	"time"
)

var sample = Report{
	End:                time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC),
	Period:             time.Second,
	Concurrency:        12.5,
	ProxiedConcurrency: 2.25,
	Requests:           1000,
	ProxiedRequests:    40,
	Uptime:             90 * time.Minute,
}

// sameReport compares Reports with time.Time.Equal, since a decoded End is in
// UTC whatever location the encoded one had.
func sameReport(a, b Report) bool {
	ea, eb := a.End, b.End
	sa, sb := a.ByActivator, b.ByActivator
	a.End, b.End = time.Time{}, time.Time{}
	a.ByActivator, b.ByActivator = nil, nil
	return reflect.DeepEqual(a, b) && ea.Equal(eb) && ea.IsZero() == eb.IsZero() && slices.Equal(sa, sb)
}

// TestBinaryLayout pins the byte layout documented in docs/stats.md.
func TestBinaryLayout(t *testing.T) {
	got := sample.AppendBinary(nil)
	want := "01" + // version
		"06327164d340471a" + // end: 1893553445000000006 ns since the Unix epoch
		"00ca9a3b00000000" + // period: 1e9 ns
		"0000000000002940" + // concurrency: 12.5
		"0000000000000240" + // proxied concurrency: 2.25
		"e803000000000000" + // requests: 1000
		"2800000000000000" + // proxied requests: 40
		"00f01449e9040000" // uptime: 5.4e12 ns
	if hex.EncodeToString(got) != want {
		t.Fatalf("AppendBinary(sample) =\n%x\nwant\n%s", got, want)
	}
	if len(got) != BinarySize {
		t.Fatalf("len = %d, want BinarySize = %d", len(got), BinarySize)
	}
	if n := int64(binary.LittleEndian.Uint64(got[offEnd:])); n != sample.End.UnixNano() {
		t.Fatalf("end field %d, want %d", n, sample.End.UnixNano())
	}
}

func TestBinaryRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    Report
	}{
		{"zero", Report{}},
		{"sample", sample},
		{"non-UTC end", Report{End: time.Date(2031, 6, 1, 12, 0, 0, 999, time.FixedZone("X", 5*3600))}},
		{"before the epoch", Report{End: time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC)}},
		{"extremes", Report{
			End:                time.Unix(0, math.MaxInt64),
			Period:             math.MaxInt64,
			Concurrency:        math.MaxFloat64,
			ProxiedConcurrency: math.MaxFloat64,
			Requests:           math.MaxUint64,
			ProxiedRequests:    math.MaxUint64,
			Uptime:             math.MaxInt64,
		}},
		{"tiny", Report{Concurrency: math.SmallestNonzeroFloat64, ProxiedConcurrency: math.SmallestNonzeroFloat64}},
		{"all proxied", Report{Period: 1, Concurrency: 3, ProxiedConcurrency: 3, Requests: 7, ProxiedRequests: 7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.r.AppendBinary([]byte("prefix"))
			if !bytes.HasPrefix(b, []byte("prefix")) || len(b) != len("prefix")+BinarySize {
				t.Fatalf("AppendBinary did not append %d bytes to its argument: %q", BinarySize, b)
			}
			var got Report
			if err := got.UnmarshalBinary(b[len("prefix"):]); err != nil {
				t.Fatalf("UnmarshalBinary: %v", err)
			}
			if !sameReport(got, tc.r) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, tc.r)
			}
			if got.End.Location() != time.UTC {
				t.Errorf("decoded End in %v, want UTC", got.End.Location())
			}
			m, err := tc.r.MarshalBinary()
			if err != nil || !bytes.Equal(m, b[len("prefix"):]) {
				t.Fatalf("MarshalBinary = %x, %v; want the AppendBinary bytes", m, err)
			}
		})
	}
}

func TestBinaryRoundTripQuick(t *testing.T) {
	f := func(end, period int64, c, pc float64, reqs, preqs uint64, uptime int64) bool {
		// Fold arbitrary values into a valid Report.
		c, pc = math.Abs(c), math.Abs(pc)
		if pc > c {
			c, pc = pc, c
		}
		if preqs > reqs {
			reqs, preqs = preqs, reqs
		}
		r := Report{
			Period:             time.Duration(period & math.MaxInt64),
			Concurrency:        c,
			ProxiedConcurrency: pc,
			Requests:           reqs,
			ProxiedRequests:    preqs,
			Uptime:             time.Duration(uptime & math.MaxInt64),
		}
		if end != 0 {
			r.End = time.Unix(0, end)
		}
		var got Report
		return got.UnmarshalBinary(r.AppendBinary(nil)) == nil && sameReport(got, r)
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 2000}); err != nil {
		t.Fatal(err)
	}
}

// encode returns sample's encoding with one 8-byte field overwritten.
func encode(off int, v uint64) []byte {
	b := sample.AppendBinary(nil)
	binary.LittleEndian.PutUint64(b[off:], v)
	return b
}

func f64(f float64) uint64 { return math.Float64bits(f) }

func TestUnmarshalMalformed(t *testing.T) {
	good := sample.AppendBinary(nil)
	withVersion := func(v byte) []byte { b := bytes.Clone(good); b[0] = v; return b }
	for _, tc := range []struct {
		name    string
		in      []byte
		wantErr string
	}{
		{"nil", nil, "empty"},
		{"empty", []byte{}, "empty"},
		{"version only", []byte{Version}, "short"},
		{"one byte short", good[:BinarySize-1], "short"},
		{"trailing garbage", append(bytes.Clone(good), 0), "trailing garbage"},
		{"version 0", withVersion(0), "unknown version 0"},
		{"version 4", withVersion(4), "unknown version 4"},
		{"version 4, longer", append(withVersion(4), 1, 2, 3), "unknown version 4"},
		{"version 3 cut short", v3With(AppUsage{HasCPU: true, CPU: 1})[:BinarySize+1+appSize-1], "short input"},
		{"version 3, unknown gauge problem", func() []byte { b := v3With(AppUsage{}); b[BinarySize+1] = 15 << 3; return b }(), "unknown gauge problem 15"},
		{"version 3, gauge and a problem", func() []byte {
			b := v3With(AppUsage{HasGauge: true, GaugeKey: 5, Gauge: 1})
			b[BinarySize+1] |= byte(GaugeMissing) << 3
			return b
		}(), "an app gauge with a problem"},
		{"version 3, NaN CPU", v3With(AppUsage{HasCPU: true, CPU: math.NaN()}), "app CPU NaN"},
		{"version 3, negative gauge", v3With(AppUsage{HasGauge: true, GaugeKey: 5, Gauge: -1}), "app gauge -1"},
		{"version 3, infinite gauge", v3With(AppUsage{HasGauge: true, GaugeKey: 5, Gauge: math.Inf(1)}), "app gauge +Inf"},
		{"version 3, gauge without key", v3With(AppUsage{HasGauge: true, Gauge: 2}), "app gauge with key 0"},
		{"version 3, figure without flag", func() []byte {
			b := v3With(AppUsage{HasMemory: true, Memory: 1 << 20})
			b[BinarySize+1] = 0
			return b
		}(), "without its flag"},
		{"version 2 without its count", withVersion(2), "short input: 57 bytes, this version 2 report is 58"},
		{"version 2 with a share cut short", append(withVersion(2), 1, 2, 3), "short input: 60 bytes, this version 2 report is 82"},
		{"version 2 with too many shares", append(withVersion(2), MaxActivatorShares+1), "9 activator shares, at most 8"},
		{"version 2 with trailing garbage", append(withVersion(2), 0, 0), "1 bytes of trailing garbage"},
		{"share with key 0", v2With(ActivatorShare{Activator: 0, Concurrency: 1, Requests: 1}), "key 0"},
		{"share NaN", v2With(ActivatorShare{Activator: 7, Concurrency: math.NaN()}), "share 0: concurrency NaN"},
		{"shares above the proxied concurrency", v2With(ActivatorShare{Activator: 7, Concurrency: 2}, ActivatorShare{Activator: 8, Concurrency: 0.5}), "add up to concurrency 2.5, above the proxied 2.25"},
		{"shares above the proxied requests", v2With(ActivatorShare{Activator: 7, Requests: 30}, ActivatorShare{Activator: 8, Requests: 11}), "more than 40 proxied requests"},
		{"one activator twice", v2With(ActivatorShare{Activator: 7, Requests: 1}, ActivatorShare{Activator: 7, Requests: 1}), "two shares"},
		{"JSON instead", []byte(`{"concurrency":1}`), "unknown version 123"},
		{"negative period", encode(offPeriod, uint64(1<<63)), "negative period"},
		{"negative uptime", encode(offUptime, math.MaxUint64), "negative uptime"},
		{"NaN concurrency", encode(offConcurrency, f64(math.NaN())), "concurrency NaN"},
		{"+Inf concurrency", encode(offConcurrency, f64(math.Inf(1))), "concurrency +Inf"},
		{"-Inf concurrency", encode(offConcurrency, f64(math.Inf(-1))), "concurrency -Inf"},
		{"negative concurrency", encode(offConcurrency, f64(-1)), "concurrency -1"},
		{"NaN proxied concurrency", encode(offProxiedConc, f64(math.NaN())), "proxied concurrency NaN"},
		{"+Inf proxied concurrency", encode(offProxiedConc, f64(math.Inf(1))), "proxied concurrency +Inf"},
		{"negative proxied concurrency", encode(offProxiedConc, f64(-0.5)), "proxied concurrency -0.5"},
		{"proxied above concurrency", encode(offProxiedConc, f64(12.75)), "proxied concurrency 12.75 above concurrency 12.5"},
		{"proxied requests above requests", encode(offProxiedReqs, 1001), "1001 proxied requests above 1000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := sample
			err := r.UnmarshalBinary(tc.in)
			if err == nil {
				t.Fatalf("UnmarshalBinary(%x) accepted %+v", tc.in, r)
			}
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %q, want one wrapping ErrMalformed and containing %q", err, tc.wantErr)
			}
			if !sameReport(r, sample) {
				t.Errorf("rejected input changed the report to %+v", r)
			}
		})
	}
}

// v2With is sample in version 2 with shares, encoded whatever they are.
func v2With(shares ...ActivatorShare) []byte {
	r := sample
	r.Attributed, r.ByActivator = true, shares
	return r.AppendBinaryV2(nil)
}

// v3With is sample in version 3 with app usage, encoded whatever it is.
func v3With(a AppUsage) []byte {
	r := sample
	r.Attributed, r.App = true, a
	return r.AppendBinaryV3(nil)
}

// TestVersion3 round-trips a report with what the queue-proxy measured of
// the app, beside activator shares, and reads versions 1 and 2 as reports
// without it: a fleet in the middle of an upgrade keeps scaling.
func TestVersion3(t *testing.T) {
	r := sample
	r.Attributed = true
	r.ByActivator = []ActivatorShare{{Activator: ActivatorKey("activator-a"), Concurrency: 1.5, Requests: 30}}
	r.App = AppUsage{CPU: 1.25, HasCPU: true, Memory: 300 << 20, HasMemory: true, Gauge: 7, GaugeKey: GaugeKey("waiting"), HasGauge: true}
	b, err := r.MarshalBinaryV3()
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != BinarySize+1+24+appSize || b[0] != Version3 || b[BinarySize+1+24] != appFlags {
		t.Fatalf("version 3 with a share and every figure: %d bytes, version %d, flags %#x", len(b), b[0], b[BinarySize+1+24])
	}
	var got Report
	if err := got.UnmarshalBinary(b); err != nil || !sameReport(got, r) {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, r)
	}
	if n := testing.AllocsPerRun(100, func() { _ = got.UnmarshalBinary(b) }); n != 0 {
		t.Errorf("UnmarshalBinary of version 3 into a Report with room: %v allocs, want 0", n)
	}
	// Only the figures measured are flagged; the others read as zero.
	cpuOnly := r
	cpuOnly.App = AppUsage{CPU: 0.5, HasCPU: true}
	if err := got.UnmarshalBinary(cpuOnly.AppendBinaryV3(nil)); err != nil || got.App != cpuOnly.App {
		t.Errorf("CPU only: %+v, %v", got.App, err)
	}
	// A report's older encodings carry everything but the app's figures.
	for _, old := range [][]byte{r.AppendBinary(nil), r.AppendBinaryV2(nil)} {
		if err := got.UnmarshalBinary(old); err != nil || got.App != (AppUsage{}) || got.Concurrency != r.Concurrency {
			t.Errorf("version %d after version 3: %+v, %v; want the load without app usage", old[0], got, err)
		}
	}
	// A pod that could not read its gauge says why.
	missing := r
	missing.App = AppUsage{CPU: 0.5, HasCPU: true, GaugeProblem: GaugeTooLarge}
	if err := got.UnmarshalBinary(missing.AppendBinaryV3(nil)); err != nil || got.App != missing.App || got.App.GaugeProblem.String() != "too large" {
		t.Errorf("gauge problem: %+v, %v", got.App, err)
	}
	if GaugeKey("a") == GaugeKey("b") || GaugeKey("") == 0 {
		t.Errorf("gauge keys: %x %x %x", GaugeKey(""), GaugeKey("a"), GaugeKey("b"))
	}
	b, _ = json.Marshal(cpuOnly)
	if !strings.Contains(string(b), `"app":{"cpu":0.5,"hasCpu":true}`) {
		t.Errorf("JSON of the CPU: %s", b)
	}
}

// TestVersion2 round-trips a report with its activator shares, and decodes
// version 1 as a report without attribution; decoding again into the
// same Report reuses its shares' array.
func TestVersion2(t *testing.T) {
	r := sample
	r.Attributed = true
	r.ByActivator = []ActivatorShare{{Activator: ActivatorKey("activator-a"), Concurrency: 1.5, Requests: 30}, {Activator: ActivatorKey("activator-b"), Concurrency: 0.25, Requests: 2}}
	b, err := r.MarshalBinaryV2()
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != BinarySize+1+2*24 || b[0] != Version2 || b[BinarySize] != 2 {
		t.Fatalf("version 2 with 2 shares: %d bytes, version %d, count %d", len(b), b[0], b[BinarySize])
	}
	var got Report
	if err := got.UnmarshalBinary(b); err != nil || !sameReport(got, r) {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, r)
	}
	shares := &got.ByActivator[0]
	if err := got.UnmarshalBinary(b); err != nil || &got.ByActivator[0] != shares {
		t.Errorf("decoding again did not reuse the shares' array (%v)", err)
	}
	if n := testing.AllocsPerRun(100, func() { _ = got.UnmarshalBinary(b) }); n != 0 {
		t.Errorf("UnmarshalBinary of version 2 into a Report with room: %v allocs, want 0", n)
	}
	if err := got.UnmarshalBinary(sample.AppendBinary(nil)); err != nil || got.Attributed || len(got.ByActivator) != 0 {
		t.Errorf("version 1 after version 2: %+v, %v; want no attribution", got, err)
	}
	// An attributed report without shares is 58 bytes.
	none := sample
	none.Attributed = true
	if err := got.UnmarshalBinary(none.AppendBinaryV2(nil)); err != nil || !got.Attributed || len(got.ByActivator) != 0 {
		t.Errorf("version 2 without shares: %+v, %v", got, err)
	}
	if ActivatorKey("") == 0 || ActivatorKey("a") == ActivatorKey("b") {
		t.Errorf("activator keys: %x %x %x", ActivatorKey(""), ActivatorKey("a"), ActivatorKey("b"))
	}
}

func TestMarshalBinaryRejectsInvalid(t *testing.T) {
	r := sample
	r.ProxiedRequests = r.Requests + 1
	if b, err := r.MarshalBinary(); err == nil || b != nil {
		t.Fatalf("MarshalBinary of an invalid report = %x, %v; want an error", b, err)
	}
}

func TestNoAllocs(t *testing.T) {
	buf := make([]byte, 0, BinarySize)
	if n := testing.AllocsPerRun(100, func() { buf = sample.AppendBinary(buf[:0]) }); n != 0 {
		t.Errorf("AppendBinary into a buffer with room: %v allocs, want 0", n)
	}
	var r Report
	if n := testing.AllocsPerRun(100, func() {
		if err := r.UnmarshalBinary(buf); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("UnmarshalBinary: %v allocs, want 0", n)
	}
}

func TestJSON(t *testing.T) {
	b, err := json.Marshal(sample)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"end":"2030-01-02T03:04:05.000000006Z","periodNs":1000000000,"concurrency":12.5,` +
		`"proxiedConcurrency":2.25,"requests":1000,"proxiedRequests":40,"uptimeNs":5400000000000}`
	if string(b) != want {
		t.Fatalf("json.Marshal(sample) =\n%s\nwant\n%s", b, want)
	}
	var got Report
	if err := json.Unmarshal(b, &got); err != nil || !sameReport(got, sample) {
		t.Fatalf("JSON round trip: %+v, %v", got, err)
	}

	for _, tc := range []struct {
		in, wantErr string
		malformed   bool // json.Unmarshal itself rejects bad syntax before our code runs
	}{
		{`{"periodNs":-1}`, "negative period", true},
		{`{"concurrency":1,"proxiedConcurrency":2}`, "above concurrency", true},
		{`{"concurrency":-1}`, "concurrency -1", true},
		{`{"requests":"many"}`, "cannot unmarshal", true},
		{`[`, "unexpected end", false},
	} {
		r := sample
		err := json.Unmarshal([]byte(tc.in), &r)
		if err == nil || errors.Is(err, ErrMalformed) != tc.malformed || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("json.Unmarshal(%s) error %v, want one containing %q (wrapping ErrMalformed: %v)", tc.in, err, tc.wantErr, tc.malformed)
		}
		if !sameReport(r, sample) {
			t.Errorf("json.Unmarshal(%s) changed the report on error", tc.in)
		}
	}
}

func FuzzUnmarshal(f *testing.F) {
	f.Add(sample.AppendBinary(nil))
	f.Add(Report{}.AppendBinary(nil))
	f.Add([]byte{})
	f.Add([]byte{Version})
	f.Add(append(sample.AppendBinary(nil), 0))
	f.Add(encode(offConcurrency, f64(math.NaN())))
	f.Add(v2With())
	f.Add(v2With(ActivatorShare{Activator: 7, Concurrency: 1, Requests: 2}, ActivatorShare{Activator: 9, Concurrency: 0.5, Requests: 3}))
	f.Add(v3With(AppUsage{}))
	f.Add(v3With(AppUsage{CPU: 1.5, HasCPU: true, Memory: 1 << 30, HasMemory: true, Gauge: 3, GaugeKey: 11, HasGauge: true}))
	f.Add(v3With(AppUsage{HasGauge: true, GaugeKey: 11, Gauge: math.NaN()}))
	f.Add(v3With(AppUsage{HasCPU: true, CPU: 2, GaugeProblem: GaugeNegative}))
	// A negative zero without its flag would re-encode as zero.
	f.Add(func() []byte { b := v3With(AppUsage{}); b[BinarySize+1+1+7] = 0x80; return b }())
	f.Fuzz(func(t *testing.T, in []byte) {
		// A report with shares of its own: a rejected input must leave
		// them as they were.
		r := sample
		r.Attributed = true
		r.ByActivator = []ActivatorShare{{Activator: 3, Concurrency: 1, Requests: 1}}
		before := r
		before.ByActivator = slices.Clone(r.ByActivator)
		if err := r.UnmarshalBinary(in); err != nil {
			if !sameReport(r, before) {
				t.Fatalf("rejected input changed the report")
			}
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("accepted an invalid report %+v: %v", r, err)
		}
		out := r.AppendBinary(nil)
		switch in[0] {
		case Version2:
			out = r.AppendBinaryV2(nil)
		case Version3:
			out = r.AppendBinaryV3(nil)
		}
		if !bytes.Equal(out, in) {
			t.Fatalf("accepted %x but re-encodes it as %x", in, out)
		}
	})
}

func BenchmarkAppendBinary(b *testing.B) {
	buf := make([]byte, 0, BinarySize)
	b.ReportAllocs()
	for b.Loop() {
		buf = sample.AppendBinary(buf[:0])
	}
}

func BenchmarkUnmarshalBinary(b *testing.B) {
	in := sample.AppendBinary(nil)
	var r Report
	b.ReportAllocs()
	for b.Loop() {
		if err := r.UnmarshalBinary(in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkJSONMarshal(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := json.Marshal(sample); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkJSONUnmarshal(b *testing.B) {
	in, err := json.Marshal(sample)
	if err != nil {
		b.Fatal(err)
	}
	var r Report
	b.ReportAllocs()
	for b.Loop() {
		if err := json.Unmarshal(in, &r); err != nil {
			b.Fatal(err)
		}
	}
}

func TestActivatorKeyIsFNV1a(t *testing.T) {
	for _, name := range []string{"activator-5955c6bdf8-gdh2z", "local", "x"} {
		h := fnv.New64a()
		h.Write([]byte(name))
		if got, want := ActivatorKey(name), h.Sum64(); got != want {
			t.Errorf("ActivatorKey(%q) = %x, want FNV-1a %x", name, got, want)
		}
	}
}
