package main

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	// The command name may hold spaces and parentheses; utime 150 and
	// stime 50 ticks are fields 14 and 15.
	stat := "4242 (queue (proxy) x) S 1 4242 4242 0 -1 4194560 1234 0 0 0 150 50 0 0 20 0 9 0 100 0 0"
	got, err := parseStatCPU(stat)
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 * time.Second; got != want {
		t.Errorf("cpu %s, want %s", got, want)
	}
	for _, bad := range []string{"", "4242 (x) S 1 2 3", "4242 (x) S 1 2 3 4 5 6 7 8 9 10 x 50 0"} {
		if _, err := parseStatCPU(bad); err == nil {
			t.Errorf("parseStatCPU(%q) succeeded", bad)
		}
	}
}

func TestCPUTimeOfSelfGrows(t *testing.T) {
	before, err := cpuTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Burn CPU until the kernel's 10ms ticks show it, within a bound.
	deadline := time.Now().Add(10 * time.Second)
	x := 0
	for {
		for i := range 1_000_000 {
			x += i
		}
		now, err := cpuTime(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if now >= before+20*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CPU time stayed at %s after 10s of busy loop (%d)", now, x)
		}
	}
}

func TestParseStatusMemory(t *testing.T) {
	status := "Name:\tqueue-proxy\nVmPeak:\t 1000 kB\nVmHWM:\t   12288 kB\nVmRSS:\t    8192 kB\nThreads:\t9\n"
	m, err := parseStatusMemory(status)
	if err != nil {
		t.Fatal(err)
	}
	if m.Peak != 12<<20 || m.RSS != 8<<20 {
		t.Errorf("got %+v, want peak 12 MiB, RSS 8 MiB", m)
	}
	if _, err := parseStatusMemory("Name:\tx\nVmRSS:\t 1 kB\n"); err == nil {
		t.Error("status without VmHWM accepted")
	}
	self, err := memoryOf(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if self.RSS <= 0 || self.Peak < self.RSS {
		t.Errorf("own memory %+v: want 0 < RSS ≤ peak", self)
	}
}

func TestMedian(t *testing.T) {
	for _, tt := range []struct {
		xs   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		in := append([]float64(nil), tt.xs...)
		if got := median(tt.xs); got != tt.want {
			t.Errorf("median(%v) = %v, want %v", tt.xs, got, tt.want)
		}
		for i := range in {
			if in[i] != tt.xs[i] {
				t.Errorf("median reordered its input: %v", tt.xs)
			}
		}
	}
}

func TestSelectScenarios(t *testing.T) {
	all, err := selectScenarios("all")
	if err != nil || len(all) != len(scenarios) {
		t.Fatalf("all: %d scenarios, %v", len(all), err)
	}
	one, err := selectScenarios(" queue-proxy")
	if err != nil || len(one) != 1 || one[0].name != "queue-proxy" {
		t.Fatalf("queue-proxy: %v, %v", one, err)
	}
	_, err = selectScenarios("queue-proxy,nope")
	if err == nil || !strings.Contains(err.Error(), `"nope"`) || !strings.Contains(err.Error(), "queue-proxy") {
		t.Errorf("unknown scenario: %v; want it named with the accepted ones", err)
	}
}

func TestSectionMarkdown(t *testing.T) {
	var b strings.Builder
	section{
		title:  "T",
		text:   "how",
		header: []string{"a", "b"},
		rows:   [][]string{{"1", "2"}},
		notes:  []string{"n"},
		code:   "out\n",
	}.write(&b)
	want := "## T\n\nhow\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n- n\n\n```\nout\n```\n\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestParseSchedstat(t *testing.T) {
	got, err := parseSchedstat("8575761 2007924 3\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := 8575761 * time.Nanosecond; got != want {
		t.Errorf("run time %s, want %s", got, want)
	}
	for _, bad := range []string{"", "\n", "x 1 2"} {
		if _, err := parseSchedstat(bad); err == nil {
			t.Errorf("parseSchedstat(%q) succeeded", bad)
		}
	}
	self, err := threadsCPU(os.Getpid())
	if err != nil {
		t.Skip(err) // a kernel without schedstat
	}
	if self <= 0 {
		t.Errorf("this process's threads ran %s, want more than 0", self)
	}
}
