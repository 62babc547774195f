// Package dashboard records, second by second, how each service of
// `swell local` is loaded and scaled, and serves a live page that charts the
// last minutes of it: load against the target, ready and desired replicas,
// and the requests queued at the activator.
package dashboard

import (
	"math"
	"sort"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// DefaultKeep is how much history New keeps per service when given 0.
const DefaultKeep = 10 * time.Minute

// Point is one second of one service.
type Point struct {
	Time      time.Time `json:"-"`
	T         int64     `json:"t"`      // Time in unix milliseconds (filled by Record)
	Load      float64   `json:"load"`   // observed metric in the last second (concurrency or rps)
	Stable    float64   `json:"stable"` // stable-window average the autoscaler saw
	Panic     float64   `json:"panic"`  // panic-window average
	Ready     int       `json:"ready"`
	Desired   int       `json:"desired"`
	Queued    int       `json:"queued"` // requests waiting at the activator
	PanicMode bool      `json:"panicMode"`
}

// Sample is what the caller records each second for one service.
type Sample struct {
	Service string  // "hello"
	Metric  string  // "concurrency" or "rps"
	Target  float64 // target per pod, drawn as a reference
	Point   Point
}

// Recorder keeps the recent points of each service in a ring of fixed size.
// It is safe for concurrent use.
//
// Its sense of time is the samples' own: history is trimmed and idle
// services are forgotten relative to the newest Time recorded, so a caller
// that records on a virtual clock gets a consistent dashboard.
type Recorder struct {
	keep  time.Duration
	size  int // ring capacity: one point per second of keep, both ends included
	clock clock.PassiveClock

	mu       sync.Mutex
	latest   time.Time // newest Time recorded, across services
	services map[string]*series
}

// series is the history of one service: a ring of points in time order.
type series struct {
	metric string
	target float64
	ring   []Point
	start  int // index of the oldest point
	n      int // number of points held
}

// New returns a Recorder that keeps keep of history per service
// (DefaultKeep when keep is 0 or negative).
func New(keep time.Duration) *Recorder {
	if keep <= 0 {
		keep = DefaultKeep
	}
	size := int(keep/time.Second) + 1
	return &Recorder{keep: keep, size: size, clock: clock.RealClock{}, services: map[string]*series{}}
}

// Record appends one point per sample. A sample whose Point.Time is zero is
// stamped with the current time; one without a service name, or not newer
// (to the millisecond) than its service's last point, is dropped, which
// keeps every history strictly ordered so that incremental reads neither
// skip nor repeat a point. Non-finite numbers are recorded as 0. Afterwards
// points older than keep are trimmed and services that have had no point for
// longer than keep are forgotten.
func (r *Recorder) Record(samples []Sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range samples {
		if s.Service == "" {
			continue
		}
		p := s.Point
		if p.Time.IsZero() {
			p.Time = r.clock.Now()
		}
		p.T = p.Time.UnixMilli()
		p.Load, p.Stable, p.Panic = finite(p.Load), finite(p.Stable), finite(p.Panic)
		ser := r.services[s.Service]
		if ser == nil {
			ser = &series{ring: make([]Point, r.size)}
			r.services[s.Service] = ser
		} else if ser.n > 0 && p.T <= ser.last().T {
			continue
		}
		ser.metric, ser.target = s.Metric, finite(s.Target)
		ser.push(p)
		if p.Time.After(r.latest) {
			r.latest = p.Time
		}
	}
	horizon := r.latest.Add(-r.keep)
	for name, ser := range r.services {
		ser.trim(horizon)
		if ser.n == 0 {
			delete(r.services, name)
		}
	}
}

// serviceJSON is one service in the history API.
type serviceJSON struct {
	Name   string  `json:"name"`
	Metric string  `json:"metric"`
	Target float64 `json:"target"`
	Points []Point `json:"points"`
}

// historyJSON is the body of the history API.
type historyJSON struct {
	Now      int64         `json:"now"`
	Services []serviceJSON `json:"services"`
}

// history returns every service, sorted by name, with its points newer than
// since (unix milliseconds). Services without new points are listed too, so
// a reader learns which services still exist.
func (r *Recorder) history(since int64) historyJSON {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := historyJSON{Services: make([]serviceJSON, 0, len(r.services))}
	if r.latest.IsZero() {
		h.Now = r.clock.Now().UnixMilli()
	} else {
		h.Now = r.latest.UnixMilli()
	}
	for name, ser := range r.services {
		h.Services = append(h.Services, serviceJSON{
			Name:   name,
			Metric: ser.metric,
			Target: ser.target,
			Points: ser.since(since),
		})
	}
	sort.Slice(h.Services, func(i, j int) bool { return h.Services[i].Name < h.Services[j].Name })
	return h
}

func (s *series) at(i int) *Point { return &s.ring[(s.start+i)%len(s.ring)] }

func (s *series) last() *Point { return s.at(s.n - 1) }

// push appends p, overwriting the oldest point when the ring is full (a
// caller recording faster than once a second keeps less than keep).
func (s *series) push(p Point) {
	if s.n < len(s.ring) {
		*s.at(s.n) = p
		s.n++
		return
	}
	s.ring[s.start] = p
	s.start = (s.start + 1) % len(s.ring)
}

// trim drops the points older than horizon.
func (s *series) trim(horizon time.Time) {
	for s.n > 0 && s.at(0).Time.Before(horizon) {
		*s.at(0) = Point{}
		s.start = (s.start + 1) % len(s.ring)
		s.n--
	}
}

// since copies the points whose T is greater than since, oldest first.
func (s *series) since(since int64) []Point {
	// Points are in T order: find the first newer one by binary search.
	first := sort.Search(s.n, func(i int) bool { return s.at(i).T > since })
	out := make([]Point, 0, s.n-first)
	for i := first; i < s.n; i++ {
		out = append(out, *s.at(i))
	}
	return out
}

func finite(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
}
