package local

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/swell-run/swell/autoscaler"
	"github.com/swell-run/swell/autoscaler/scaler"
	"github.com/swell-run/swell/local/dashboard"
	"github.com/swell-run/swell/pkg/autoscaling"
)

// StatusPath on the admin port serves Status as JSON; `swell status`
// reads it.
const StatusPath = "/api/status"

// Status is what `swell local` is doing: every service with its replicas,
// the autoscaler's view of its load, and its recent events.
type Status struct {
	Time time.Time `json:"time"`
	// Address is where traffic enters (the front door).
	Address  string          `json:"address"`
	Services []ServiceStatus `json:"services"`
}

// ServiceStatus is one service's part of Status.
type ServiceStatus struct {
	Name  string   `json:"name"`
	Hosts []string `json:"hosts"`
	// Ready and Desired are replicas: ready to serve, and asked for.
	Ready   int `json:"ready"`
	Desired int `json:"desired"`
	// Route is where traffic goes: "activator" or "pods".
	Route string `json:"route"`
	// Class, Metric and TargetPerPod are the autoscaling policy, what it
	// scales on and the load one replica should see.
	Class        string  `json:"class"`
	Metric       string  `json:"metric"`
	TargetPerPod float64 `json:"targetPerPod"`
	// Load is the metric's newest second; Stable and Panic its averages
	// over the stable and panic windows at the latest decision.
	Load                float64 `json:"load"`
	Stable              float64 `json:"stable"`
	Panic               float64 `json:"panic"`
	PanicMode           bool    `json:"panicMode"`
	ExcessBurstCapacity float64 `json:"excessBurstCapacity"`
	// Queued is the requests waiting at the activator for a replica now.
	Queued int `json:"queued"`
	// Reason is why the latest decision is what it is.
	Reason   string          `json:"reason"`
	Replicas []ReplicaStatus `json:"replicas"`
	// Events are the latest scaling events, oldest first, as logged.
	Events []Event `json:"events"`
	// Decisions are the autoscaler's latest notable decisions, oldest
	// first, with their inputs.
	Decisions []autoscaler.DecisionStatus `json:"decisions"`
}

// ReplicaStatus is one replica.
type ReplicaStatus struct {
	Name    string `json:"name"`
	State   string `json:"state"`
	Address string `json:"address"`
	// Metrics is the address of its queue-proxy's stats and metrics.
	Metrics  string `json:"metrics"`
	Restarts int    `json:"restarts"`
}

// Event is one line of the log of a service: a scale change, a panic, a
// crash.
type Event struct {
	Time time.Time `json:"time"`
	Text string    `json:"text"`
}

// maxEvents is how many events Status keeps per service.
const maxEvents = 20

// events is the log of scaling events: written to the output as they
// happen, and kept per service for Status.
type events struct {
	mu  sync.Mutex
	out io.Writer
	by  map[string][]Event
}

func (e *events) add(svc string, t time.Time, format string, args ...any) {
	text := svc + ": " + fmt.Sprintf(format, args...)
	e.mu.Lock()
	defer e.mu.Unlock()
	list := append(e.by[svc], Event{Time: t, Text: text})
	if len(list) > maxEvents {
		list = append(list[:0:0], list[len(list)-maxEvents:]...)
	}
	e.by[svc] = list
	fmt.Fprintf(e.out, "%s %s\n", t.Format("15:04:05.000"), text)
}

func (e *events) of(svc string) []Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Event{}, e.by[svc]...)
}

// scaleEvent logs what the executor did.
func (s *Server) scaleEvent(ev scaler.Event) {
	name := ev.Service.Name
	switch ev.Kind {
	case scaler.EventScale:
		s.events.add(name, ev.Time, "scale %d→%d (%s)", ev.From, ev.To, ev.Reason)
	case scaler.EventRoute:
		s.events.add(name, ev.Time, "route %s→%s (%s)", ev.FromRoute, ev.ToRoute, ev.Reason)
	case scaler.EventError:
		s.events.add(name, ev.Time, "error: %v (retry in %v)", ev.Err, ev.RetryIn)
	}
}

// notable logs a decision that entered or left panic mode.
func (s *Server) notable(n autoscaler.Notable) {
	if !n.PanicChanged {
		return
	}
	d := n.Decision
	load := fmt.Sprintf("%.0f in flight", d.Panic)
	if n.Metric == autoscaling.MetricRPS {
		load = fmt.Sprintf("%.0f requests/s", d.Panic)
	}
	what := "panic —"
	if !d.InPanic {
		what = "panic over —"
	}
	pods := "pods"
	if d.Ready == 1 {
		pods = "pod"
	}
	s.events.add(n.Service.Name, n.Time, "%s %s for %d %s at target %.4g", what, load, d.Ready, pods, n.TargetPerPod)
}

// Status returns what every service is doing now.
func (s *Server) Status() Status {
	st := Status{Time: time.Now(), Address: s.addr, Services: make([]ServiceStatus, 0, len(s.b.order))}
	for _, ls := range s.b.order {
		st.Services = append(st.Services, s.serviceStatus(ls))
	}
	return st
}

func (s *Server) serviceStatus(ls *localService) ServiceStatus {
	ls.mu.Lock()
	ss := ServiceStatus{
		Name:    ls.name,
		Hosts:   append([]string{ls.name + ".localhost"}, ls.cfg.Hosts...),
		Desired: ls.desired,
		Ready:   ls.readyLocked(),
		Route:   ls.route.String(),
	}
	reps := make([]replicaRef, 0, len(ls.replicas))
	for _, r := range ls.replicas {
		reps = append(reps, replicaRef{r.Name(), r.State(), r.ServingAddr(), r.MetricsAddr(), r.Restarts()})
	}
	ls.mu.Unlock()
	ss.Replicas = make([]ReplicaStatus, 0, len(reps))
	for _, r := range reps {
		ss.Replicas = append(ss.Replicas, ReplicaStatus{Name: r.name, State: r.state, Address: r.addr, Metrics: r.metrics, Restarts: r.restarts})
	}
	if as, ok := s.as.ServiceStatus(ls.key); ok {
		ss.Class, ss.Metric, ss.TargetPerPod = as.Class, as.Metric, as.TargetPerPod
		ss.Stable, ss.Panic, ss.PanicMode = as.Stable, as.Panic, as.PanicMode
		ss.ExcessBurstCapacity, ss.Reason = as.ExcessBurstCapacity, as.Reason
		ss.Decisions = as.Decisions
		ss.Load = as.Load()
	}
	ss.Queued, _ = s.act.Queued(ls.key)
	ss.Events = s.events.of(ls.name)
	return ss
}

type replicaRef struct {
	name, state, addr, metrics string
	restarts                   int
}

// record adds the second's figures of every service to the dashboard.
func (s *Server) record(now time.Time) {
	samples := make([]dashboard.Sample, 0, len(s.b.order))
	for _, ls := range s.b.order {
		ss := s.serviceStatus(ls)
		samples = append(samples, dashboard.Sample{
			Service: ss.Name, Metric: ss.Metric, Target: ss.TargetPerPod,
			Point: dashboard.Point{
				Time: now, Load: ss.Load, Stable: ss.Stable, Panic: ss.Panic,
				Ready: ss.Ready, Desired: ss.Desired, Queued: ss.Queued, PanicMode: ss.PanicMode,
			},
		})
	}
	s.dash.Record(samples)
}

func (s *Server) serveStatus(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "status: use GET", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(s.Status())
}
