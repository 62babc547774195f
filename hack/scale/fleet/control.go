//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// The control API, on a port of its own: whoever measures the autoscaler
// asks for a service's load to change, and learns when the change is
// first served.

// Paths of the control API.
const (
	readyPath = "/ready"
	stepPath  = "/step"
	statsPath = "/stats"
)

// defaultFactor is a step's factor when none is given: three times the
// load asks for three times the pods, which is panic.
const defaultFactor = 3

// stepAnswer is the answer to a step.
type stepAnswer struct {
	Service string  `json:"service"`
	Kind    string  `json:"kind"`
	Factor  float64 `json:"factor"`
	// At is when the load changed; Served when the first report that
	// carries it was served (a pod's period closed; pushing, at once), or
	// for a zero service the poke went to its activator.
	At     time.Time `json:"at"`
	Served time.Time `json:"served"`
}

// fleetStats are the fleet's counters, for whoever measures.
type fleetStats struct {
	Services    int    `json:"services"`
	Pods        int    `json:"pods"`
	Connections int64  `json:"connections"`
	Scrapes     uint64 `json:"scrapes"`
	Refused     uint64 `json:"refused"`
	Strays      uint64 `json:"strays"`
	FDExhausted uint64 `json:"fdExhausted"`
	Pokes       uint64 `json:"pokes"`
	// The pushes of this process's pods (-push): connections open, frames
	// sent, dials, redirects followed, upgrades refused (403) and
	// answered 503, failed dials and upgrades, connections the
	// autoscaler closed, and dials refused for want of a file
	// descriptor.
	Pushing         int64  `json:"pushing"`
	Pushes          uint64 `json:"pushes"`
	PushDials       uint64 `json:"pushDials"`
	PushRedirects   uint64 `json:"pushRedirects"`
	PushRefused     uint64 `json:"pushRefused"`
	PushUnavailable uint64 `json:"pushUnavailable"`
	PushFailures    uint64 `json:"pushFailures"`
	PushClosed      uint64 `json:"pushClosed"`
	PushFDExhausted uint64 `json:"pushFDExhausted"`
}

// controller serves the control API.
type controller struct {
	f      *fleet
	loops  []*loop
	pokers []poker
	push   *pusher // nil without -push
	// index finds a service by key.
	index map[string]int
	ready atomic.Bool
	now   func() time.Time
	// elsewhere says the process that runs the fleet's activators, and
	// takes its steps, is another (-share without -autoscaler).
	elsewhere bool
}

func newController(f *fleet, loops []*loop, pokers []poker, push *pusher) *controller {
	c := &controller{f: f, loops: loops, pokers: pokers, push: push, index: make(map[string]int, len(f.keys)), now: time.Now}
	for i, k := range f.keys {
		c.index[k] = i
	}
	return c
}

func (c *controller) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+readyPath, func(w http.ResponseWriter, _ *http.Request) {
		if !c.ready.Load() {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("POST "+stepPath, c.step)
	mux.HandleFunc("GET "+statsPath, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, c.stats())
	})
	return mux
}

// step changes a service's load: POST /step?service=ns/name[&factor=F].
// A busy or bursting service's pods hold F times their level from now
// on; a zero service wakes (its activator pokes at once) at F times its
// level. A service is stepped once.
func (c *controller) step(w http.ResponseWriter, r *http.Request) {
	if c.elsewhere {
		http.Error(w, "step: this process of the fleet runs no activator, which a woken service needs; step through the control API of the one given -autoscaler", http.StatusConflict)
		return
	}
	q := r.URL.Query()
	name := q.Get("service")
	svc, ok := c.index[name]
	if !ok {
		http.Error(w, fmt.Sprintf("step: no service %q; the fleet's are scale/svc-00000 to %s", name, c.f.keys[len(c.f.keys)-1]), http.StatusNotFound)
		return
	}
	p := &c.f.patterns[svc]
	factor := float64(defaultFactor)
	if p.Kind == Zero {
		factor = 1
	}
	if s := q.Get("factor"); s != "" {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || !(f > 0) || f > 1000 {
			http.Error(w, fmt.Sprintf("step: factor %q: accepted is a number above 0, at most 1000", s), http.StatusBadRequest)
			return
		}
		factor = f
	}
	if p.Kind == Idle {
		http.Error(w, fmt.Sprintf("step: %s is idle: it has no load to step; step a busy, bursting or zero service", name), http.StatusBadRequest)
		return
	}
	now := c.now()
	at := now.Sub(c.f.epoch)
	if !c.f.table.setStep(svc, Step{At: at, Factor: factor}) {
		http.Error(w, fmt.Sprintf("step: %s was stepped already; step another", name), http.StatusConflict)
		return
	}
	a := stepAnswer{Service: name, Kind: p.Kind.String(), Factor: factor, At: now}
	if p.Kind == Zero && len(c.pokers) > 0 {
		// A request arrives at an activator for a service without pods.
		c.pokers[svc%len(c.pokers)].Poke(name)
		c.f.pokes.Add(1)
		a.Served = c.now()
	} else {
		a.Served = c.f.firstServed(svc, at)
	}
	writeJSON(w, http.StatusOK, a)
}

func (c *controller) stats() fleetStats {
	s := fleetStats{Services: len(c.f.keys), Pods: len(c.f.addrs), Pokes: c.f.pokes.Load()}
	for _, l := range c.loops {
		s.Connections += l.open.Load()
		s.Scrapes += l.served.Load()
		s.Refused += l.refused.Load()
		s.Strays += l.strays.Load()
		s.FDExhausted += l.fdExhausted.Load()
	}
	if p := c.push; p != nil {
		s.Pushing, s.Pushes, s.PushDials = p.open.Load(), p.frames.Load(), p.dialed.Load()
		s.PushRedirects, s.PushRefused, s.PushUnavailable = p.redirects.Load(), p.refusedN.Load(), p.unavailable.Load()
		s.PushFailures, s.PushClosed, s.PushFDExhausted = p.failures.Load(), p.closedBy.Load(), p.fdExhausted.Load()
	}
	return s
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}
