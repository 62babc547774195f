package stats

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/swell-run/swell/pkg/service"
)

var actEnd = time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)

// TestActivatorLayout pins the byte layout documented in docs/collector.md.
func TestActivatorLayout(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  []byte
		want string
	}{
		{"hello", AppendActivatorHello(nil, "act-0"), "01" + "01" + "05" + hex.EncodeToString([]byte("act-0"))},
		{"report", AppendActivatorEntry(AppendActivatorReportHeader(nil, actEnd, time.Second),
			"ns/svc", ActivatorFigures{Concurrency: 2.5, Requests: 300, InFlight: 3}),
			"01" + "02" +
				"06327164d340471a" + // end: 1893553445000000006 ns since the Unix epoch
				"00ca9a3b00000000" + // period: 1e9 ns
				"06" + hex.EncodeToString([]byte("ns/svc")) +
				"0000000000000440" + // concurrency: 2.5
				"ac02" + // requests: 300 as a uvarint
				"03"}, // in flight: 3
		{"poke", AppendActivatorPoke(nil, "a/b", "c/d"), "01" + "03" + "03612f62" + "03632f64"},
	} {
		if h := hex.EncodeToString(tc.got); h != tc.want {
			t.Errorf("%s =\n%s\nwant\n%s", tc.name, h, tc.want)
		}
	}
}

func TestActivatorRoundTrip(t *testing.T) {
	figs := []ActivatorFigures{
		{},
		{Concurrency: 12.75, Requests: 1000, InFlight: 7},
		{Concurrency: math.MaxFloat64, Requests: math.MaxUint64, InFlight: math.MaxUint64},
		{Concurrency: math.SmallestNonzeroFloat64, Requests: 127, InFlight: 128},
	}
	longKey := strings.Repeat("n", 63) + "/" + strings.Repeat("s", 63)
	keys := []string{"default/hello", "a/b", longKey, "ns-1/svc-2"}
	b := AppendActivatorReportHeader(nil, actEnd, 1500*time.Millisecond)
	for i, f := range figs {
		b = AppendActivatorEntry(b, keys[i], f)
	}
	var f ActivatorFrame
	if err := DecodeActivatorFrame(b, &f); err != nil {
		t.Fatal(err)
	}
	if f.Type != ActivatorReport || !f.End.Equal(actEnd) || f.Period != 1500*time.Millisecond || len(f.Entries) != len(figs) {
		t.Fatalf("decoded %+v", f)
	}
	for i, e := range f.Entries {
		if string(e.Service) != keys[i] || e.ActivatorFigures != figs[i] {
			t.Errorf("entry %d = %s %+v, want %s %+v", i, e.Service, e.ActivatorFigures, keys[i], figs[i])
		}
		if cap(e.Service) != len(e.Service) {
			t.Errorf("entry %d: service capacity %d reaches past its %d bytes into the frame", i, cap(e.Service), len(e.Service))
		}
	}

	// An empty report is a heartbeat; the zero End stays zero.
	if err := DecodeActivatorFrame(AppendActivatorReportHeader(nil, time.Time{}, 0), &f); err != nil {
		t.Fatal(err)
	}
	if f.Type != ActivatorReport || !f.End.IsZero() || f.Period != 0 || len(f.Entries) != 0 {
		t.Fatalf("empty report decoded as %+v", f)
	}

	if err := DecodeActivatorFrame(AppendActivatorHello(nil, "activator-7f9c-x.zone"), &f); err != nil {
		t.Fatal(err)
	}
	if f.Type != ActivatorHello || string(f.Activator) != "activator-7f9c-x.zone" || len(f.Entries) != 0 {
		t.Fatalf("hello decoded as %+v", f)
	}

	if err := DecodeActivatorFrame(AppendActivatorPoke(nil, "a/b", longKey), &f); err != nil {
		t.Fatal(err)
	}
	if f.Type != ActivatorPoke || len(f.Entries) != 2 || string(f.Entries[0].Service) != "a/b" ||
		string(f.Entries[1].Service) != longKey || f.Activator != nil {
		t.Fatalf("poke decoded as %+v", f)
	}
}

func TestActivatorMaxEntrySize(t *testing.T) {
	longKey := strings.Repeat("n", 63) + "/" + strings.Repeat("s", 63)
	n := len(AppendActivatorEntry(nil, longKey, ActivatorFigures{Requests: math.MaxUint64, InFlight: math.MaxUint64}))
	if n != ActivatorMaxEntrySize {
		t.Fatalf("largest entry is %d bytes, ActivatorMaxEntrySize = %d", n, ActivatorMaxEntrySize)
	}
}

func TestActivatorMalformed(t *testing.T) {
	report := func(entries ...[]byte) []byte {
		b := AppendActivatorReportHeader(nil, actEnd, time.Second)
		for _, e := range entries {
			b = append(b, e...)
		}
		return b
	}
	entry := func(svc string, tail ...byte) []byte {
		b := append([]byte{byte(len(svc))}, svc...)
		return append(b, tail...)
	}
	conc := func(c float64, tail ...byte) []byte {
		return append(binary.LittleEndian.AppendUint64(nil, math.Float64bits(c)), tail...)
	}
	good := AppendActivatorEntry(nil, "ns/ok", ActivatorFigures{Concurrency: 1, Requests: 2, InFlight: 1})
	negPeriod := AppendActivatorReportHeader(nil, actEnd, -time.Second)

	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "shorter than its 2-byte header"},
		{"one byte", []byte{1}, "shorter than its 2-byte header"},
		{"version", []byte{2, 2}, "unknown activator frame version 2"},
		{"type", []byte{1, 9}, "unknown activator frame type 9"},
		{"hello without name", []byte{1, 1}, "hello: activator name: missing length byte"},
		{"hello empty name", []byte{1, 1, 0}, "hello: activator name: empty"},
		{"hello short", []byte{1, 1, 5, 'a'}, "length 5, but only 1 bytes left"},
		{"hello trailing", append(AppendActivatorHello(nil, "a"), 'x'), "1 bytes of trailing garbage"},
		{"hello bad name", AppendActivatorHello(nil, "Act_1"), `activator name "Act_1": character 'A' at 0`},
		{"hello dash end", AppendActivatorHello(nil, "act-"), "must start and end with a letter or digit"},
		{"report short header", report()[:17], "shorter than its 18-byte header"},
		{"report negative period", negPeriod, "negative period"},
		{"entry empty service", report(entry("", conc(1, 0, 0)...)), "entry 0 at byte 18: service: empty"},
		{"entry no slash", report(entry("nsname", conc(1, 0, 0)...)), "no '/'"},
		{"entry two slashes", report(entry("a/b/c", conc(1, 0, 0)...)), "more than one '/'"},
		{"entry empty namespace", report(entry("/b", conc(1, 0, 0)...)), "namespace: 0 characters"},
		{"entry upper case", report(entry("ns/Svc", conc(1, 0, 0)...)), "name: character 'S' at 0"},
		{"entry long label", report(entry("ns/"+strings.Repeat("a", 64), conc(1, 0, 0)...)), "name: 64 characters"},
		{"entry service past end", report([]byte{9, 'a', '/', 'b'}), "length 9, but only 3 bytes left"},
		{"entry no concurrency", report(entry("a/b", 0, 0)), `service "a/b": concurrency: 2 bytes left, need 8`},
		{"entry NaN", report(entry("a/b", conc(math.NaN(), 0, 0)...)), "concurrency NaN is not a finite number"},
		{"entry +Inf", report(entry("a/b", conc(math.Inf(1), 0, 0)...)), "concurrency +Inf"},
		{"entry negative", report(entry("a/b", conc(-1, 0, 0)...)), "concurrency -1"},
		{"entry no requests", report(entry("a/b", conc(1)...)), "requests: truncated varint"},
		{"entry truncated requests", report(entry("a/b", conc(1, 0x80)...)), "requests: truncated varint"},
		{"entry non-minimal requests", report(entry("a/b", conc(1, 0x80, 0x00, 0)...)), "requests: varint not minimally encoded"},
		{"entry overflow", report(entry("a/b", conc(1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0)...)), "requests: varint overflows"},
		{"entry no in flight", report(entry("a/b", conc(1, 5)...)), "in flight: truncated varint"},
		{"second entry broken", report(good, entry("a/b", conc(1, 5)...)), "entry 1 at byte 34"},
		{"poke empty", []byte{1, 3}, "poke names no service"},
		{"poke bad key", AppendActivatorPoke(nil, "a/b", "nope"), "poke entry 1 at byte 6: service: service key \"nope\": no '/'"},
		{"poke truncated", append(AppendActivatorPoke(nil, "a/b"), 4, 'c'), "poke entry 1 at byte 6: service: length 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := ActivatorFrame{Type: ActivatorReport, Entries: make([]ActivatorEntry, 0, 4)}
			err := DecodeActivatorFrame(tc.in, &f)
			if err == nil {
				t.Fatalf("accepted %x as %+v", tc.in, f)
			}
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want one wrapping ErrMalformed and containing %q", err, tc.want)
			}
			if f.Type != 0 || len(f.Entries) != 0 || f.Activator != nil || cap(f.Entries) != 4 {
				t.Fatalf("after an error the frame is %+v (cap %d), want it reset with its capacity kept", f, cap(f.Entries))
			}
		})
	}
}

func TestValidateNames(t *testing.T) {
	for _, s := range []string{"a/b", "default/hello-world", "0/9", strings.Repeat("a", 63) + "/x"} {
		if err := service.Check(s); err != nil {
			t.Errorf("service.Check(%q) = %v", s, err)
		}
	}
	for _, s := range []string{"", "a", "a/", "/b", "a/b/c", "a/-b", "A/b", "a b/c", "a/b.c"} {
		if err := service.Check(s); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", s)) {
			t.Errorf("service.Check(%q) = %v, want an error naming it", s, err)
		}
	}
	for _, s := range []string{"a", "activator-5d8f7-x2k4q", "act.zone-1", strings.Repeat("a", 253)} {
		if err := ValidateActivatorName(s); err != nil {
			t.Errorf("ValidateActivatorName(%q) = %v", s, err)
		}
	}
	for _, s := range []string{"", ".a", "a.", "A", "a_b", "a/b", strings.Repeat("a", 254)} {
		if err := ValidateActivatorName(s); err == nil {
			t.Errorf("ValidateActivatorName(%q) accepted", s)
		}
	}
}

func TestActivatorDecodeNoAllocs(t *testing.T) {
	b := actReport(1000)
	var f ActivatorFrame
	if err := DecodeActivatorFrame(b, &f); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() {
		if err := DecodeActivatorFrame(b, &f); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("DecodeActivatorFrame into a reused frame: %v allocs, want 0", n)
	}
	buf := make([]byte, 0, 64<<10)
	if n := testing.AllocsPerRun(100, func() {
		buf = AppendActivatorReportHeader(buf[:0], actEnd, time.Second)
		buf = AppendActivatorEntry(buf, "default/hello", ActivatorFigures{Concurrency: 3, Requests: 10, InFlight: 1})
	}); n != 0 {
		t.Fatalf("encoding into a buffer with room: %v allocs, want 0", n)
	}
}

// actReport is a Report frame of n services with realistic figures.
func actReport(n int) []byte {
	b := AppendActivatorReportHeader(nil, actEnd, time.Second)
	for i := range n {
		b = AppendActivatorEntry(b, fmt.Sprintf("team-%d/service-%d", i%50, i), ActivatorFigures{
			Concurrency: float64(i%17) * 1.25, Requests: uint64(i % 400), InFlight: uint64(i % 9),
		})
	}
	return b
}

// FuzzDecodeActivatorFrame checks that decoding never panics, that whatever
// it accepts re-encodes to exactly the input, and that every accepted name
// passes the exported validators.
func FuzzDecodeActivatorFrame(f *testing.F) {
	f.Add(AppendActivatorHello(nil, "act-0"))
	f.Add(AppendActivatorPoke(nil, "a/b", "ns/svc"))
	f.Add(actReport(3))
	f.Add(AppendActivatorReportHeader(nil, time.Time{}, 0))
	f.Add([]byte{1, 2, 0xff})
	var fr ActivatorFrame
	f.Fuzz(func(t *testing.T, in []byte) {
		if err := DecodeActivatorFrame(in, &fr); err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		var out []byte
		switch fr.Type {
		case ActivatorHello:
			if err := ValidateActivatorName(string(fr.Activator)); err != nil {
				t.Fatal(err)
			}
			out = AppendActivatorHello(nil, string(fr.Activator))
		case ActivatorReport:
			out = AppendActivatorReportHeader(nil, fr.End, fr.Period)
			for _, e := range fr.Entries {
				if err := service.Check(string(e.Service)); err != nil {
					t.Fatal(err)
				}
				if !(e.Concurrency >= 0) || math.IsInf(e.Concurrency, 0) {
					t.Fatalf("accepted concurrency %v", e.Concurrency)
				}
				out = AppendActivatorEntry(out, string(e.Service), e.ActivatorFigures)
			}
		case ActivatorPoke:
			svcs := make([]string, len(fr.Entries))
			for i, e := range fr.Entries {
				if err := service.Check(string(e.Service)); err != nil {
					t.Fatal(err)
				}
				svcs[i] = string(e.Service)
			}
			out = AppendActivatorPoke(nil, svcs...)
		default:
			t.Fatalf("accepted type %v", fr.Type)
		}
		if !bytes.Equal(out, in) {
			t.Fatalf("accepted %x, which re-encodes to %x", in, out)
		}
	})
}

func BenchmarkDecodeActivatorFrame(b *testing.B) {
	for _, n := range []int{1, 100, 5000} {
		frame := actReport(n)
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			var f ActivatorFrame
			b.SetBytes(int64(len(frame)))
			b.ReportAllocs()
			for b.Loop() {
				if err := DecodeActivatorFrame(frame, &f); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/service")
		})
	}
}

func BenchmarkAppendActivatorReport(b *testing.B) {
	const n = 5000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("team-%d/service-%d", i%50, i)
	}
	buf := make([]byte, 0, ActivatorReportHeaderSize+n*ActivatorMaxEntrySize)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendActivatorReportHeader(buf[:0], actEnd, time.Second)
		for i, k := range keys {
			buf = AppendActivatorEntry(buf, k, ActivatorFigures{Concurrency: float64(i), Requests: uint64(i), InFlight: 1})
		}
	}
	b.SetBytes(int64(len(buf)))
}
