package autoscaler

import (
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/swell-run/swell/pkg/autoscaling"
	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/service"
)

// Status is a snapshot of the autoscaler: every service's latest decision
// with its inputs, and the notable decisions before it. StatusHandler
// serves it as JSON.
type Status struct {
	// Time is when the snapshot was taken.
	Time time.Time `json:"time"`
	// Leading says whether this replica leads, where replicas elect
	// leaders (on Kubernetes: of every service, or of a bucket of them).
	// Each replica serves its own view: its services are those it leads,
	// none on a follower. Absent where one autoscaler decides everything.
	Leading *bool `json:"leading,omitempty"`
	// TickInterval is how often every service is decided, e.g. "2s".
	TickInterval string `json:"tickInterval"`
	// Activators are the names of the activators connected now.
	Activators []string `json:"activators"`
	// PodsPushing is how many pods have a push connection open to this
	// replica now.
	PodsPushing int `json:"podsPushing"`
	// Services are sorted by namespace, then name.
	Services []ServiceStatus `json:"services"`
}

// ServiceStatus is one service's state in a Status. Its decision fields
// (DecisionStatus, flattened in JSON) are the latest decision's, valid when
// Decided is true.
type ServiceStatus struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Class and Metric are the service's policy and what it scales on.
	Class  string `json:"class"`
	Metric string `json:"metric"`
	// TargetPerPod is the metric's value one pod should see (target ×
	// utilization).
	TargetPerPod float64 `json:"targetPerPod"`
	// Pods is how many pod addresses the collector has for the service.
	Pods int `json:"pods"`
	// LastSample is the newest second of load collected, both metrics.
	LastSample *SampleStatus `json:"lastSample,omitempty"`
	// Decided says a decision was made since the service was added.
	Decided bool `json:"decided"`
	DecisionStatus
	// Decisions are the last notable decisions, oldest first: those that
	// changed the scale, panic mode or the need for the activator, those
	// made on a poke, and the first. Unchanged ticks are not kept.
	Decisions []DecisionStatus `json:"decisions"`
}

// Load is the service's metric over the newest second collected: requests
// per second for rps, requests in flight for every other metric (the
// collector's seconds hold requests only); 0 before the first.
func (ss ServiceStatus) Load() float64 {
	switch {
	case ss.LastSample == nil:
		return 0
	case ss.Metric == string(autoscaling.MetricRPS):
		return ss.LastSample.RPS
	}
	return ss.LastSample.Concurrency
}

// SampleStatus is one second of a service's collected load.
type SampleStatus struct {
	Time        time.Time `json:"time"`
	Concurrency float64   `json:"concurrency"`
	RPS         float64   `json:"rps"`
	// Read is how many pods the latest round read, and Pushed how many
	// of those it read from what the pod pushed rather than by a scrape.
	Read   int `json:"read"`
	Pushed int `json:"pushed"`
}

// DecisionStatus is one decision with its inputs.
type DecisionStatus struct {
	// Time is when the decision was made; Trigger is "tick", "poke" or "push".
	Time    time.Time `json:"time"`
	Trigger string    `json:"trigger"`
	// Ready is the ready pods seen; Current the replicas the backend was
	// asked to run at the time.
	Ready   int `json:"ready"`
	Current int `json:"current"`
	// Stable and Panic are the observed metric over the stable and panic
	// windows.
	Stable float64 `json:"stable"`
	Panic  float64 `json:"panic"`
	// Desired is the policy's recommendation before bounds and scale-to-zero
	// gating; Scale is what was handed to the executor.
	Desired             int     `json:"desired"`
	Scale               int     `json:"scale"`
	PanicMode           bool    `json:"panicMode"`
	ExcessBurstCapacity float64 `json:"excessBurstCapacity"`
	NeedActivator       bool    `json:"needActivator"`
	ActivatorInPath     bool    `json:"activatorInPath"`
	// ActivatorPending is the requests held at the activators.
	ActivatorPending int    `json:"activatorPending"`
	Reason           string `json:"reason"`
}

// Status returns a snapshot of every service.
func (a *Autoscaler) Status() Status {
	a.mu.RLock()
	list := slices.Clone(a.list)
	a.mu.RUnlock()
	slices.SortFunc(list, func(x, y *svc) int {
		return x.key.Compare(y.key)
	})
	st := Status{
		Time:         a.clock.Now(),
		TickInterval: time.Duration(a.tick.Load()).String(),
		Activators:   []string{},
		Services:     make([]ServiceStatus, 0, len(list)),
	}
	if a.endpoint != nil {
		st.Activators = a.endpoint.Connected()
	}
	if a.podEndpoint != nil {
		st.PodsPushing = a.podEndpoint.Pushing()
	}
	for _, s := range list {
		st.Services = append(st.Services, a.serviceStatus(s))
	}
	return st
}

// ServiceStatus returns one service's part of Status; ok is false for an
// unknown service.
func (a *Autoscaler) ServiceStatus(key service.Key) (ServiceStatus, bool) {
	s := a.lookup(key)
	if s == nil {
		return ServiceStatus{}, false
	}
	return a.serviceStatus(s), true
}

func (a *Autoscaler) serviceStatus(s *svc) ServiceStatus {
	s.mu.Lock()
	ss := ServiceStatus{
		Namespace:    s.key.Namespace,
		Name:         s.key.Name,
		Class:        string(s.spec.Class),
		Metric:       string(s.spec.Metric),
		TargetPerPod: s.spec.TargetPerPod(),
		Pods:         s.npods,
		Decided:      s.decided,
		Decisions:    make([]DecisionStatus, 0, s.n),
	}
	if s.decided {
		ss.DecisionStatus = decisionStatus(s.last)
	}
	for i := range s.n {
		e := s.history[(s.next-s.n+i+len(s.history))%len(s.history)]
		ss.Decisions = append(ss.Decisions, decisionStatus(e))
	}
	if s.sampled {
		ls := s.sample
		ss.LastSample = &SampleStatus{Time: ls.Time, Concurrency: Finite(ls.Concurrency), RPS: Finite(ls.RPS),
			Read: s.sampleRead, Pushed: s.samplePushed}
	}
	s.mu.Unlock()
	return ss
}

func decisionStatus(e entry) DecisionStatus {
	return DecisionStatus{
		Time:                e.d.Now,
		Trigger:             e.trigger().String(),
		Ready:               e.d.Ready,
		Current:             e.current,
		Stable:              Finite(e.d.Stable),
		Panic:               Finite(e.d.Panic),
		Desired:             e.d.Desired,
		Scale:               e.d.Scale,
		PanicMode:           e.d.InPanic,
		ExcessBurstCapacity: Finite(e.d.ExcessBurstCapacity),
		NeedActivator:       e.d.NeedActivator,
		ActivatorInPath:     e.in.ActivatorInPath,
		ActivatorPending:    e.in.ActivatorPending,
		Reason:              e.d.Reason,
	}
}

// finite keeps a figure encodable in JSON, which has no infinities: an
// "always in the path" burst capacity of −Inf reads as the most negative
// float.
func Finite(f float64) float64 {
	switch {
	case math.IsNaN(f):
		return 0
	case math.IsInf(f, 1):
		return math.MaxFloat64
	case math.IsInf(f, -1):
		return -math.MaxFloat64
	}
	return f
}

// Handler serves ReportHandler, PodHandler (at network.PodPushPath, when
// there is one) and, at network.AutoscalerStatusPath, StatusHandler on
// one mux, for a process that listens for its operator alone (swell
// local, on loopback). On Kubernetes they are served apart: the status
// names every tenant's services, the activators' port is open to the
// cluster over TLS, and the pods' is plain.
func (a *Autoscaler) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(network.ActivatorReportPath, a.ReportHandler())
	mux.Handle(network.AutoscalerStatusPath, a.StatusHandler(nil))
	if a.podEndpoint != nil {
		mux.Handle(network.PodPushPath, a.podEndpoint)
	}
	return mux
}

// ReportHandler serves the activators' websocket at
// network.ActivatorReportPath (404 without Config.Endpoint), and 404 at
// any other path.
func (a *Autoscaler) ReportHandler() http.Handler {
	mux := http.NewServeMux()
	if a.endpoint != nil {
		mux.Handle(network.ActivatorReportPath, a.endpoint)
	}
	return mux
}

// StatusHandler serves Status as JSON at whatever path it is mounted;
// ?service=namespace/name narrows it to one service. leading, if not
// nil, fills Status.Leading. Metrics are served by whoever owns the
// registry.
func (a *Autoscaler) StatusHandler(leading func() bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.serveStatus(w, r, leading)
	})
}

func (a *Autoscaler) serveStatus(w http.ResponseWriter, r *http.Request, leading func() bool) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "status: use GET", http.StatusMethodNotAllowed)
		return
	}
	var body any
	if q := r.URL.Query().Get("service"); q != "" {
		key, err := service.Parse(q)
		if err != nil {
			http.Error(w, "status: "+err.Error(), http.StatusBadRequest)
			return
		}
		ss, ok := a.ServiceStatus(key)
		if !ok {
			http.Error(w, "status: no service "+key.String(), http.StatusNotFound)
			return
		}
		body = ss
	} else {
		st := a.Status()
		if leading != nil {
			l := leading()
			st.Leading = &l
		}
		body = st
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(body)
}
