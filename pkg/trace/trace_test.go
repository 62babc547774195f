package trace

import (
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

func TestReadTokens(t *testing.T) {
	// The first two rows are the first two requests of the Azure LLM
	// inference trace (conversation workload, Azure Public Dataset, CC-BY
	// 4.0; Patel et al., "Splitwise", ISCA 2024), as NOTICE attributes.
	const in = "TIMESTAMP,ContextTokens,GeneratedTokens\r\n" +
		"2023-11-16 18:15:46.6805900,374,44\r\n" +
		"2023-11-16 18:15:50.9951690,396,109\r\n" +
		"\r\n" +
		"2023-11-16 18:16:46.6805900,1,0\r\n"
	tr, err := ReadAll(strings.NewReader(in), Model{Base: 5 * time.Millisecond, PerToken: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Format != FormatTokens {
		t.Errorf("format = %v, want tokens", tr.Format)
	}
	want := []Record{
		{Line: 2, Arrival: 0, ServiceTime: 49 * time.Millisecond, ContextTokens: 374, GeneratedTokens: 44},
		{Line: 3, Arrival: 4314579 * time.Microsecond, ServiceTime: 114 * time.Millisecond, ContextTokens: 396, GeneratedTokens: 109},
		{Line: 5, Arrival: time.Minute, ServiceTime: 5 * time.Millisecond, ContextTokens: 1, GeneratedTokens: 0},
	}
	if len(tr.Records) != len(want) {
		t.Fatalf("got %d records, want %d: %+v", len(tr.Records), len(want), tr.Records)
	}
	for i := range want {
		if tr.Records[i] != want[i] {
			t.Errorf("record %d = %+v, want %+v", i, tr.Records[i], want[i])
		}
	}
	if got := tr.Span(); got != time.Minute {
		t.Errorf("span = %s, want 1m", got)
	}
}

func TestReadService(t *testing.T) {
	// Header compared without regard to case or spaces; a byte-order mark
	// is tolerated.
	const in = "\uFEFF T , Service_Time \n0,0.1\n0.5, 0.25\n0.5,0\n12,1e-3"
	tr, err := ReadAll(strings.NewReader(in), Model{Base: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Format != FormatService {
		t.Errorf("format = %v, want service", tr.Format)
	}
	want := []Record{
		{Line: 2, Arrival: 0, ServiceTime: 100 * time.Millisecond},
		{Line: 3, Arrival: 500 * time.Millisecond, ServiceTime: 250 * time.Millisecond},
		{Line: 4, Arrival: 500 * time.Millisecond, ServiceTime: 0},
		{Line: 5, Arrival: 12 * time.Second, ServiceTime: time.Millisecond},
	}
	if len(tr.Records) != len(want) {
		t.Fatalf("got %d records, want %d: %+v", len(tr.Records), len(want), tr.Records)
	}
	for i := range want {
		if tr.Records[i] != want[i] {
			t.Errorf("record %d = %+v, want %+v", i, tr.Records[i], want[i])
		}
	}
}

func TestReaderStreams(t *testing.T) {
	// The reader must hand out the first record before the rest of the
	// input exists.
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.WriteString(pw, "t,service_time\n1,2\n")
	}()
	r, err := NewReader(pr, Model{})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := r.Next()
	if err != nil || rec.Arrival != time.Second || rec.ServiceTime != 2*time.Second {
		t.Fatalf("first record = %+v, %v", rec, err)
	}
	<-done
	pw.Close()
	if _, err := r.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last record: %v, want io.EOF", err)
	}
}

func TestMalformed(t *testing.T) {
	tests := []struct {
		name, in string
		line     int
		contains string
	}{
		{"empty", "", 0, "no header"},
		{"unknown header", "a,b\n1,2\n", 1, `header "a,b"`},
		{"fields", "t,service_time\n1,2\n3\n", 3, "1 fields"},
		{"bad seconds", "t,service_time\n1,2\nx,2\n", 3, `t "x"`},
		{"negative service", "t,service_time\n1,-2\n", 2, `service_time "-2"`},
		{"nan", "t,service_time\nNaN,1\n", 2, `t "NaN"`},
		{"order", "t,service_time\n2,0\n1,0\n", 3, "arrival order"},
		{"timestamp", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1,1\nyesterday,1,1\n", 3, `TIMESTAMP "yesterday"`},
		{"tokens", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1,1.5\n", 2, `GeneratedTokens "1.5"`},
		{"negative tokens", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,-1,1\n", 2, `ContextTokens "-1"`},
		{"token order", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1,1\n2023-11-16 18:15:45,1,1\n", 3, "arrival order"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadAll(strings.NewReader(tt.in), Model{})
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tt.contains) {
				t.Errorf("error %q does not mention %q", err, tt.contains)
			}
			var pe *ParseError
			if tt.line == 0 {
				return
			}
			if !errors.As(err, &pe) || pe.Line != tt.line {
				t.Errorf("error %q: want a ParseError on line %d", err, tt.line)
			}
		})
	}
}

func TestReadFileMissing(t *testing.T) {
	_, err := ReadFile("/nonexistent/trace.csv", Model{})
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/trace.csv") {
		t.Fatalf("error %v should name the file", err)
	}
}

// TestAzureTrace reads the shared Azure LLM trace, when the machine has it
// (in ../shared beside the repository).
func TestAzureTrace(t *testing.T) {
	const path = "../../../shared/traces/azure-llm-2023-conv.csv"
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		t.Skipf("%s not present", path)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := NewReader(f, Model{Base: 5 * time.Millisecond, PerToken: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.Format() != FormatTokens {
		t.Fatalf("format = %v, want tokens", r.Format())
	}
	// The file's first rows: 18:15:46.6805900 (374, 44) and
	// 18:15:50.9951690 (396, 109).
	first, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	if first.Arrival != 0 || first.ContextTokens != 374 || first.GeneratedTokens != 44 || first.ServiceTime != 49*time.Millisecond {
		t.Errorf("first record = %+v", first)
	}
	second, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	if second.Arrival != 4314579*time.Microsecond || second.GeneratedTokens != 109 {
		t.Errorf("second record = %+v", second)
	}
	// The rest must parse too: the whole file is what replays use.
	n, last := 2, second
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n, last = n+1, rec
	}
	if n != 19366 || last.Arrival < 58*time.Minute || last.Arrival > 59*time.Minute {
		t.Errorf("%d records over %s, want 19366 over about 58m", n, last.Arrival)
	}
}

func BenchmarkReadTokens(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(HeaderTokens + "\n")
	start := time.Date(2023, 11, 16, 18, 15, 46, 0, time.UTC)
	for i := 0; i < 10000; i++ {
		sb.WriteString(start.Add(time.Duration(i) * 180 * time.Millisecond).Format("2006-01-02 15:04:05.0000000"))
		sb.WriteString(",1154,211\n")
	}
	in := sb.String()
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		tr, err := ReadAll(strings.NewReader(in), Model{Base: 5 * time.Millisecond, PerToken: time.Millisecond})
		if err != nil || len(tr.Records) != 10000 {
			b.Fatal(len(tr.Records), err)
		}
	}
}

// TestTokenCountsCannotOverflow: a token count whose service time is more
// than a time.Duration holds is refused with the row's line, not turned
// into a negative service time.
func TestTokenCountsCannotOverflow(t *testing.T) {
	in := HeaderTokens + "\n2023-11-16 18:15:46.6805900,1,10000000000000\n"
	_, err := ReadAll(strings.NewReader(in), Model{Base: 5 * time.Millisecond, PerToken: 20 * time.Millisecond})
	var pe *ParseError
	if !errors.As(err, &pe) || pe.Line != 2 || !strings.Contains(err.Error(), "GeneratedTokens") || !strings.Contains(err.Error(), "too long") {
		t.Fatalf("10¹³ tokens at 20ms each: %v, want a line-2 error saying the service time is too long", err)
	}
}

// FuzzRead: whatever a trace file holds, reading it never panics, and every
// record it yields has an arrival and a service time of 0 or more, in
// arrival order.
func FuzzRead(f *testing.F) {
	f.Add(HeaderTokens + "\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n")
	f.Add(HeaderService + "\n0,0.5\n1.25,2\n")
	f.Add(HeaderTokens + "\n2023-11-16 18:15:46.6805900,1,10000000000000\n")
	f.Add(HeaderService + "\n1e300,1\n")
	f.Add("\uFEFF" + HeaderService + "\r\n\r\n0,0\r\n")
	f.Fuzz(func(t *testing.T, in string) {
		tr, err := ReadAll(strings.NewReader(in), Model{Base: 5 * time.Millisecond, PerToken: 20 * time.Millisecond})
		if err != nil {
			return
		}
		var last time.Duration
		for i, r := range tr.Records {
			if r.ServiceTime < 0 || r.Arrival < 0 || r.Arrival < last {
				t.Fatalf("record %d: %+v after arrival %v", i, r, last)
			}
			last = r.Arrival
		}
	})
}
