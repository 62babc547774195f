package sim

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func oracleOf(t *testing.T, cc, initial int, startup time.Duration, reqs ...Request) Summary {
	t.Helper()
	cfg := config(specOf(t, cc))
	cfg.Pods.StartupDelay = startup
	cfg.InitialReady = initial
	res, err := RunOracle(context.Background(), cfg, Requests(reqs))
	if err != nil {
		t.Fatal(err)
	}
	return res.Summary
}

func sec(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// req is a request arriving at a seconds working w seconds.
func req(a, w float64) Request { return Request{Arrival: sec(a), Work: sec(w)} }

// The oracle's cases, worked out by hand (2 s startup unless said).
func TestOracleByHand(t *testing.T) {
	cases := []struct {
		name       string
		cc         int
		initial    int
		startup    time.Duration
		reqs       []Request
		podSeconds float64
		starts     int
		maxPods    int
	}{
		// One pod needed over [0,1) and [5,6): the 4 s gap is longer than
		// a start, so it stops and starts again: 2+1 + 2+1.
		{"gap longer than a start", 1, 0, 2 * time.Second, []Request{req(0, 1), req(5, 1)}, 6, 2, 1},
		// A 1.5 s gap is cheaper to keep: 2+1 + 1.5 + 1.
		{"gap shorter than a start", 1, 0, 2 * time.Second, []Request{req(0, 1), req(2.5, 1)}, 5.5, 1, 1},
		// A gap exactly a start long is kept (same cost, one start fewer).
		{"gap a start long", 1, 0, 2 * time.Second, []Request{req(0, 1), req(3, 1)}, 6, 1, 1},
		// Two slots a pod: in service 1 over [0,1), 3 over [1,2), 2 over
		// [2,3), 1 over [3,4): pods needed 1,2,1,1. The first pod 2+4, the
		// second 2+1.
		{"two slots", 2, 0, 2 * time.Second, []Request{req(0, 4), req(1, 2), req(1, 1), req(1, 1)}, 9, 2, 2},
		// No limit: one pod serves everything at once.
		{"no limit", 0, 0, 2 * time.Second, []Request{req(0, 4), req(1, 2), req(1, 1)}, 6, 1, 1},
		// An initial pod is kept from 0 through a 1 s wait (cheaper than a
		// start): 1 + 1 = 2, no start. For a request at 5 s it is stopped
		// at 0 instead and started again: 2+1.
		{"initial pod kept", 1, 1, 2 * time.Second, []Request{req(1, 1)}, 2, 0, 1},
		{"initial pod stopped", 1, 1, 2 * time.Second, []Request{req(5, 1)}, 3, 1, 1},
		// An initial pod never needed costs nothing.
		{"initial pods unneeded", 1, 3, 2 * time.Second, []Request{req(5, 1)}, 3, 1, 1},
		// A 10 s start: the 4 s gap is kept, 10+1+4+1.
		{"slow start keeps gaps", 1, 0, 10 * time.Second, []Request{req(0, 1), req(5, 1)}, 16, 1, 1},
		// Back-to-back requests on one slot need no second pod: the first
		// completes as the second arrives.
		{"back to back", 1, 0, 2 * time.Second, []Request{req(0, 1), req(1, 1)}, 4, 1, 1},
		{"nothing", 1, 0, 2 * time.Second, nil, 0, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := oracleOf(t, c.cc, c.initial, c.startup, c.reqs...)
			if math.Abs(s.PodSeconds-c.podSeconds) > 1e-9 || s.PodStarts != c.starts || s.MaxPods != c.maxPods {
				t.Errorf("pod-seconds %v, starts %d, max pods %d; want %v, %d, %d", s.PodSeconds, s.PodStarts, s.MaxPods, c.podSeconds, c.starts, c.maxPods)
			}
			if s.Waited != 0 || s.ColdStarts != 0 || s.Completed != len(c.reqs) {
				t.Errorf("summary %+v: the oracle never makes a request wait", s)
			}
			// Starting: a start's worth per start; serving: the
			// requests' work over the slots, packed; idle: the rest.
			if want := float64(c.starts) * c.startup.Seconds(); math.Abs(s.StartingPodSeconds-want) > 1e-9 {
				t.Errorf("starting %v pod-seconds, want %v", s.StartingPodSeconds, want)
			}
			if sum := s.StartingPodSeconds + s.ServingPodSeconds + s.IdlePodSeconds; math.Abs(sum-s.PodSeconds) > 1e-9 || s.IdlePodSeconds < -1e-9 {
				t.Errorf("starting %v + serving %v + idle %v = %v, want %v, none negative",
					s.StartingPodSeconds, s.ServingPodSeconds, s.IdlePodSeconds, sum, s.PodSeconds)
			}
		})
	}
	// By hand: the 1.5 s gap kept is idle; each request serves 1 s.
	s := oracleOf(t, 1, 0, 2*time.Second, req(0, 1), req(2.5, 1))
	if s.StartingPodSeconds != 2 || s.ServingPodSeconds != 2 || s.IdlePodSeconds != 1.5 {
		t.Errorf("gap kept: starting %v, serving %v, idle %v; want 2, 2, 1.5", s.StartingPodSeconds, s.ServingPodSeconds, s.IdlePodSeconds)
	}
}

// The oracle is a lower bound: a simulated policy that made no request
// wait spends at least as much, whatever the traffic.
func TestOracleBoundsPoliciesThatNeverWait(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for trial := range 20 {
		var reqs []Request
		var at time.Duration
		for range 200 {
			if rng.IntN(10) == 0 {
				at += time.Duration(rng.IntN(120)) * time.Second // an idle gap
			}
			at += time.Duration(rng.IntN(2000)) * time.Millisecond
			reqs = append(reqs, Request{Arrival: at, Work: time.Duration(1+rng.IntN(3000)) * time.Millisecond})
		}
		// Pods always on: min-scale high enough that nothing waits.
		spec := specOf(t, 2, "--min-scale", "40", "--initial-scale", "40")
		cfg := config(spec)
		cfg.InitialReady = 40
		res, _ := run(t, cfg, Requests(reqs))
		if res.Summary.Waited != 0 {
			t.Fatalf("trial %d: %d waited with 40 pods", trial, res.Summary.Waited)
		}
		o, err := RunOracle(context.Background(), cfg, Requests(reqs))
		if err != nil {
			t.Fatal(err)
		}
		for _, sum := range []Summary{res.Summary, o.Summary} {
			split := sum.StartingPodSeconds + sum.ServingPodSeconds + sum.IdlePodSeconds
			if math.Abs(split-sum.PodSeconds) > 1e-6*max(1, sum.PodSeconds) || sum.StartingPodSeconds < 0 || sum.ServingPodSeconds < 0 || sum.IdlePodSeconds < -1e-6 {
				t.Errorf("trial %d, %s: starting %v + serving %v + idle %v = %v, want the %v pod-seconds, none negative",
					trial, sum.Class, sum.StartingPodSeconds, sum.ServingPodSeconds, sum.IdlePodSeconds, split, sum.PodSeconds)
			}
		}
		if o.Summary.PodSeconds > res.Summary.PodSeconds {
			t.Errorf("trial %d: the oracle spends %v pod-seconds, 40 pods always on %v", trial, o.Summary.PodSeconds, res.Summary.PodSeconds)
		}
		if o.Summary.PodSeconds <= 0 || o.Summary.MaxPods > 40 {
			t.Errorf("trial %d: oracle %+v", trial, o.Summary)
		}
	}
}

// The timeline shows the pods the bound keeps: a pod started 2 s before a
// request at 5 s exists at the ends of seconds 2..5 and is ready at the
// ends of seconds 4..5 (it is stopped at 6.5 s).
func TestOracleTimeline(t *testing.T) {
	cfg := config(specOf(t, 1))
	res, err := RunOracle(context.Background(), cfg, Requests([]Request{req(5, 1.5)}))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Timeline) != 7 {
		t.Fatalf("%d seconds, want 7", len(res.Timeline))
	}
	for _, r := range res.Timeline {
		wantPods := 0
		if r.T >= 2 && r.T <= 5 {
			wantPods = 1
		}
		wantReady := 0
		if r.T >= 4 && r.T <= 5 {
			wantReady = 1
		}
		if r.Pods != wantPods || r.Ready != wantReady {
			t.Errorf("second %d: %d pods, %d ready; want %d, %d", r.T, r.Pods, r.Ready, wantPods, wantReady)
		}
	}
	if r := res.Timeline[5]; r.Arrivals != 1 || r.Concurrency != 1 || r.InService != 1 {
		t.Errorf("second 5: %+v", r)
	}
	if r := res.Timeline[6]; r.Concurrency != 0.5 || r.InService != 0 {
		t.Errorf("second 6: %+v", r)
	}
}
