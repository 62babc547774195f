package usage

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// step is one Sample: the world it reads, how long after the previous
// step, and what it should say.
type step struct {
	after time.Duration
	world world
	want  Usage
	err   error // wanted by errors.Is; nil for success
}

// use is a Usage with Memory in pages.
func use(cpu float64, pages, processes int) Usage {
	return Usage{CPU: cpu, Memory: uint64(pages * os.Getpagesize()), Processes: processes}
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestSample(t *testing.T) {
	for _, tc := range []struct {
		name  string
		scope Scope
		steps []step
	}{{
		name:  "pod counts all but PID 1 and self's tree",
		scope: Pod(20),
		steps: []step{{
			world: world{uptime: 10000, procs: []fake{
				{pid: 1, start: 0, cpu: 5, pages: 10},        // pause
				{pid: 10, start: 100, cpu: 100, pages: 1000}, // the app
				{pid: 11, ppid: 10, start: 110, cpu: 40, pages: 500},
				{pid: 12, ppid: 10, start: 120, cpu: 7, state: "Z"}, // a zombie is not counted
				{pid: 20, start: 100, cpu: 300, pages: 2000},        // self
				{pid: 21, ppid: 20, start: 200, cpu: 10, pages: 100},
				{pid: 22, ppid: 21, start: 300, cpu: 10, pages: 100},
				{pid: 5, ppid: 22, start: 400, cpu: 10, pages: 100}, // PIDs wrapped
				{pid: 30, start: 100, cpu: 50, pages: 200},          // another sidecar
			}},
			want: use(0, 1700, 3),
		}, {
			after: 2 * time.Second,
			world: world{uptime: 10200, procs: []fake{
				{pid: 1, start: 0, cpu: 500, pages: 10},
				{pid: 10, start: 100, cpu: 250, pages: 1200},
				{pid: 11, ppid: 10, start: 110, cpu: 90, pages: 500},
				{pid: 12, ppid: 10, start: 120, cpu: 7, state: "Z"},
				{pid: 20, start: 100, cpu: 700, pages: 2000},
				{pid: 21, ppid: 20, start: 200, cpu: 200, pages: 100},
				{pid: 22, ppid: 21, start: 300, cpu: 400, pages: 100},
				{pid: 5, ppid: 22, start: 400, cpu: 600, pages: 100},
				{pid: 30, start: 100, cpu: 50, pages: 200},
			}},
			// (150 + 50 + 0 ticks) / 100 Hz / 2 s.
			want: use(1.0, 1900, 3),
		}},
	}, {
		name:  "a new process counts whole only if it started after the previous sample",
		scope: Pod(99),
		steps: []step{{
			world: world{uptime: 1000, procs: []fake{
				{pid: 99, start: 10},
				{pid: 10, start: 500, cpu: 100, pages: 10},
				{pid: 12, ppid: 99, start: 900, cpu: 80, pages: 5}, // self's, for now
			}},
			want: use(0, 10, 1),
		}, {
			after: time.Second,
			world: world{uptime: 1100, procs: []fake{
				{pid: 99, start: 10},
				{pid: 10, start: 500, cpu: 150, pages: 10},
				{pid: 11, ppid: 10, start: 1050, cpu: 20, pages: 5},
				// Reparented to PID 1 when self's child that forked it
				// exited: new to the scope but older than the previous
				// sample, so its part of the interval is unknown.
				{pid: 12, ppid: 1, start: 900, cpu: 90, pages: 5},
			}},
			// (50 + 20 + 0) / 100 / 1.
			want: use(0.7, 20, 3),
		}, {
			after: time.Second,
			world: world{uptime: 1200, procs: []fake{
				{pid: 99, start: 10},
				{pid: 10, start: 500, cpu: 150, pages: 10},
				{pid: 11, ppid: 10, start: 1050, cpu: 20, pages: 5},
				{pid: 12, ppid: 1, start: 900, cpu: 140, pages: 5},
			}},
			want: use(0.5, 20, 3),
		}},
	}, {
		name:  "an exited process is forgotten and its PID's next process counted anew",
		scope: Pod(99),
		steps: []step{{
			world: world{uptime: 1000, procs: []fake{
				{pid: 10, start: 500, cpu: 100, pages: 10},
				{pid: 11, ppid: 10, start: 600, cpu: 300, pages: 10},
			}},
			want: use(0, 20, 2),
		}, {
			after: 500 * time.Millisecond,
			world: world{uptime: 1050, procs: []fake{
				{pid: 10, start: 500, cpu: 120, pages: 10},
			}},
			// 11's time since the first sample is lost: 20 / 100 / 0.5.
			want: use(0.4, 10, 1),
		}, {
			after: 500 * time.Millisecond,
			world: world{uptime: 1100, procs: []fake{
				{pid: 10, start: 500, cpu: 130, pages: 10},
				{pid: 11, ppid: 10, start: 1080, cpu: 15, pages: 10},
			}},
			// (10 + 15) / 100 / 0.5.
			want: use(0.5, 20, 2),
		}, {
			after: time.Second,
			world: world{uptime: 1200, procs: []fake{
				{pid: 10, start: 500, cpu: 130, pages: 10},
				// Another process with the same PID: its 5 ticks are not
				// 5 - 15.
				{pid: 11, ppid: 10, start: 1150, cpu: 5, pages: 10},
			}},
			want: use(0.05, 20, 2),
		}},
	}, {
		name:  "listener finds the master among workers and follows its tree",
		scope: Listener(8080),
		steps: []step{{
			world: world{uptime: 1000, procs: listenerProcs(0), socks: []sock{
				{addr: "127.0.0.1", port: 8080, inode: 7777},
				{addr: "10.0.0.5", port: 8080, inode: 8888},            // not loopback
				{addr: "127.0.0.1", port: 8080, state: 1, inode: 9999}, // a connection
				{addr: "127.0.0.1", port: 9090, inode: 6666},           // another port
			}},
			want: use(0, 1951, 6),
		}, {
			after: time.Second,
			world: world{uptime: 1100, procs: listenerProcs(1), socks: []sock{
				{addr: "127.0.0.1", port: 8080, inode: 7777},
				{addr: "10.0.0.5", port: 8080, inode: 8888},
				{addr: "127.0.0.1", port: 8080, state: 1, inode: 9999},
				{addr: "127.0.0.1", port: 9090, inode: 6666},
			}},
			// master 10 + workers 50 + 50 + 50 + their children 30 + 0.
			want: use(1.9, 1951, 6),
		}},
	}, {
		name:  "listener finds the app again after it exits and another listens",
		scope: Listener(8080),
		steps: []step{{
			world: world{uptime: 1000, procs: []fake{
				{pid: 50, start: 10, cpu: 1000},
				{pid: 100, ppid: 50, start: 500, cpu: 100, pages: 100, sockets: []uint64{7777}},
				{pid: 101, ppid: 100, start: 510, cpu: 100, pages: 100, sockets: []uint64{7777}},
			}, socks: []sock{{addr: "0.0.0.0", port: 8080, inode: 7777}}},
			want: use(0, 200, 2),
		}, {
			after: time.Second,
			world: world{uptime: 1100, procs: []fake{
				{pid: 50, start: 10, cpu: 1000},
			}},
			err: ErrNoProcess,
		}, {
			after: time.Second,
			world: world{uptime: 1200, procs: []fake{
				{pid: 50, start: 10, cpu: 1000},
				{pid: 120, ppid: 50, start: 1150, cpu: 30, pages: 150, sockets: []uint64{7800}},
			}, socks: []sock{{addr: "::1", port: 8080, inode: 7800}}},
			// Started after the previous sample: all its 30 ticks.
			want: use(0.3, 150, 1),
		}, {
			after: time.Second,
			world: world{uptime: 1300, procs: []fake{
				{pid: 50, start: 10, cpu: 1000},
				{pid: 120, ppid: 50, start: 1150, cpu: 80, pages: 150, sockets: []uint64{7800}},
			}, socks: []sock{{addr: "::1", port: 8080, inode: 7800}}},
			want: use(0.5, 150, 1),
		}},
	}, {
		name:  "listener tells a reused root PID by its start time",
		scope: Listener(8080),
		steps: []step{{
			world: world{uptime: 1000, procs: []fake{
				{pid: 100, ppid: 50, start: 500, cpu: 100, pages: 100, sockets: []uint64{7777}},
				{pid: 101, ppid: 100, start: 510, cpu: 100, pages: 100},
			}, socks: []sock{{addr: "127.0.0.1", port: 8080, inode: 7777}}},
			want: use(0, 200, 2),
		}, {
			after: time.Second,
			world: world{uptime: 1100, procs: []fake{
				{pid: 100, ppid: 1, start: 1050, cpu: 5, pages: 7}, // someone else
				{pid: 130, ppid: 50, start: 1060, cpu: 40, pages: 100, sockets: []uint64{7801}},
				{pid: 131, ppid: 130, start: 1070, cpu: 10, pages: 100},
			}, socks: []sock{{addr: "::", port: 8080, inode: 7801}}},
			want: use(0.5, 200, 2),
		}},
	}, {
		name:  "listener's worker outliving its master becomes the root",
		scope: Listener(8080),
		steps: []step{{
			world: world{uptime: 1000, procs: []fake{
				{pid: 100, ppid: 50, start: 500, cpu: 100, pages: 100, sockets: []uint64{7777}},
				{pid: 101, ppid: 100, start: 510, cpu: 100, pages: 100, sockets: []uint64{7777}},
			}, socks: []sock{{addr: "127.0.0.1", port: 8080, inode: 7777}}},
			want: use(0, 200, 2),
		}, {
			after: time.Second,
			world: world{uptime: 1100, procs: []fake{
				{pid: 100, ppid: 50, start: 500, cpu: 100, state: "Z"},
				{pid: 101, ppid: 1, start: 510, cpu: 150, pages: 100, sockets: []uint64{7777}},
			}, socks: []sock{{addr: "127.0.0.1", port: 8080, inode: 7777}}},
			want: use(0.5, 100, 1),
		}},
	}, {
		name:  "listener with nothing to measure",
		scope: Listener(8080),
		steps: []step{{
			world: world{uptime: 1000, procs: []fake{{pid: 50, start: 10}}},
			err:   ErrNoProcess,
		}, {
			// A listener no process we may read holds: searched once.
			after: time.Second,
			world: world{uptime: 1100, procs: []fake{{pid: 50, start: 10}},
				socks: []sock{{addr: "127.0.0.1", port: 8080, inode: 7777}}},
			err: ErrNoProcess,
		}, {
			after: time.Second,
			world: world{uptime: 1200, procs: []fake{{pid: 50, start: 10}},
				socks: []sock{{addr: "127.0.0.1", port: 8080, inode: 7777}}},
			err: ErrNoProcess,
		}, {
			after: time.Second,
			world: world{uptime: 1300, procs: []fake{
				{pid: 50, start: 10},
				{pid: 60, ppid: 50, start: 1250, cpu: 20, pages: 1, sockets: []uint64{7778}},
			}, socks: []sock{{addr: "127.0.0.1", port: 8080, inode: 7778}}},
			want: use(0.2, 1, 1),
		}},
	}} {
		for _, children := range []bool{true, false} {
			name := tc.name
			if !children {
				name += " without children files"
			}
			t.Run(name, func(t *testing.T) {
				dir := t.TempDir()
				tc.steps[0].world.write(t, dir, children)
				s, err := New(Config{ProcRoot: dir, Scope: tc.scope})
				if err != nil {
					t.Fatal(err)
				}
				now := t0
				for i, st := range tc.steps {
					st.world.write(t, dir, children)
					now = now.Add(st.after)
					got, err := s.Sample(now)
					if !errors.Is(err, st.err) {
						t.Fatalf("step %d: error %v, want %v", i, err, st.err)
					}
					if math.Abs(got.CPU-st.want.CPU) > 1e-9 || got.Memory != st.want.Memory || got.Processes != st.want.Processes {
						t.Errorf("step %d: got %+v, want %+v", i, got, st.want)
					}
					if len(s.last) != got.Processes {
						t.Errorf("step %d: remembers %d processes, want the %d it saw", i, len(s.last), got.Processes)
					}
				}
			})
		}
	}
}

// listenerProcs is a pre-fork server under `swell local` and its
// neighbours, after n seconds.
func listenerProcs(n uint64) []fake {
	return []fake{
		{pid: 1, start: 0, cpu: 5 + 100*n},
		{pid: 50, ppid: 1, start: 10, cpu: 1000 + 999*n, pages: 10000}, // swell local
		{pid: 100, ppid: 50, start: 500, cpu: 100 + 10*n, pages: 1000, sockets: []uint64{7777}},
		{pid: 101, ppid: 100, start: 510, cpu: 10 + 50*n, pages: 300, sockets: []uint64{7777}},
		// A threaded worker whose child was forked by one of its threads.
		{pid: 102, ppid: 100, start: 520, cpu: 10 + 50*n, pages: 300, sockets: []uint64{7777}, threads: []int{105, 106}},
		{pid: 103, ppid: 102, forker: 106, start: 530, cpu: 10 + 30*n, pages: 50},
		// Forked in the master's clock tick, after PIDs wrapped: the
		// oldest holder with the lowest PID, but not the root.
		{pid: 90, ppid: 100, start: 500, cpu: 10 + 50*n, pages: 300, sockets: []uint64{7777}},
		{pid: 104, ppid: 103, start: 540, cpu: 1, pages: 1},
		{pid: 200, ppid: 1, start: 20, cpu: 100 * n, pages: 100},
		{pid: 300, ppid: 1, start: 30, cpu: 100 * n, pages: 100, sockets: []uint64{8888}},
		{pid: 400, ppid: 1, start: 40, cpu: 100 * n, pages: 100, sockets: []uint64{9999}},
		{pid: 500, ppid: 1, start: 50, cpu: 100 * n, pages: 100, sockets: []uint64{6666}},
	}
}

// TestBrokenProc checks that a stat file that cannot be parsed is an
// error, not "no process", and that the next good Sample measures from
// the last good one.
func TestBrokenProc(t *testing.T) {
	dir := t.TempDir()
	w := world{uptime: 1000, procs: []fake{{pid: 10, start: 500, cpu: 100, pages: 1}}}
	w.write(t, dir, true)
	s, err := New(Config{ProcRoot: dir, Scope: Pod(99)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Sample(t0); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "10", "stat"), []byte("10 (app) S 1 x y z\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Sample(t0.Add(time.Second)); err == nil || errors.Is(err, ErrNoProcess) || !strings.Contains(err.Error(), "10/stat") {
		t.Fatalf("Sample of a broken stat: %v, want an error naming the file", err)
	}
	w = world{uptime: 1200, procs: []fake{{pid: 10, start: 500, cpu: 200, pages: 1}}}
	w.write(t, dir, true)
	got, err := s.Sample(t0.Add(2 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if want := use(0.5, 1, 1); got != want {
		t.Errorf("after the error: got %+v, want %+v (100 ticks over the 2 s since the last good sample)", got, want)
	}
	if _, err := s.Sample(t0.Add(2 * time.Second)); err == nil || !strings.Contains(err.Error(), "not after") {
		t.Errorf("Sample at the previous sample's time: %v, want an error", err)
	}
}

func TestNewErrors(t *testing.T) {
	good := t.TempDir()
	world{uptime: 1000}.write(t, good, true)
	file := filepath.Join(good, "uptime")
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no scope", Config{ProcRoot: good}, "Scope is nil"},
		{"pod without self", Config{ProcRoot: good, Scope: Pod(0)}, "Pod(0): accepted is the PID"},
		{"port 0", Config{ProcRoot: good, Scope: Listener(0)}, "Listener(0): accepted is a TCP port from 1 to 65535"},
		{"port too high", Config{ProcRoot: good, Scope: Listener(65536)}, "Listener(65536)"},
		{"missing root", Config{ProcRoot: filepath.Join(good, "nope"), Scope: Pod(1)}, "accepted is the mount point of a proc filesystem"},
		{"root is a file", Config{ProcRoot: file, Scope: Pod(1)}, "is not a directory"},
		{"root is no proc", Config{ProcRoot: t.TempDir(), Scope: Pod(1)}, "uptime"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v, %v; want an error with %q", s, err, tc.want)
			}
		})
	}
}
