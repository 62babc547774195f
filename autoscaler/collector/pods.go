package collector

import (
	"fmt"
	"slices"
	"sync"
)

// PodLister says which services to collect for and where their ready pods'
// stats are. The Kubernetes backend implements it from informer caches, the
// local backend from its processes; StaticPods serves tests and tools.
//
// The collector calls it once per service and round from one goroutine; both
// methods append to the slice they are given, so a steady state allocates
// nothing.
type PodLister interface {
	// Services appends the key ("namespace/name") of every service to
	// collect for, services at zero included, to dst.
	Services(dst []string) []string
	// ReadyPods appends to dst the address ("host:port", the queue-proxy's
	// metrics port) of each ready pod of service. An error means the
	// service's pods are unknown this round (not that it has none).
	ReadyPods(service string, dst []string) ([]string, error)
}

// StaticPods is a PodLister held in memory and changed by Set and Delete.
// Safe for concurrent use.
type StaticPods struct {
	mu   sync.RWMutex
	pods map[string][]string
	keys []string // sorted, rebuilt on change, so Services is deterministic
}

// NewStaticPods returns an empty StaticPods.
func NewStaticPods() *StaticPods {
	return &StaticPods{pods: make(map[string][]string)}
}

// Set makes addrs the ready pods of service (none: the service is at zero).
func (s *StaticPods) Set(service string, addrs ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.pods[service]; !ok {
		i, _ := slices.BinarySearch(s.keys, service)
		s.keys = slices.Insert(s.keys, i, service)
	}
	s.pods[service] = slices.Clone(addrs)
}

// Delete forgets service.
func (s *StaticPods) Delete(service string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.pods[service]; ok {
		delete(s.pods, service)
		i, _ := slices.BinarySearch(s.keys, service)
		s.keys = slices.Delete(s.keys, i, i+1)
	}
}

// Services implements PodLister, in sorted order.
func (s *StaticPods) Services(dst []string) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return append(dst, s.keys...)
}

// ReadyPods implements PodLister.
func (s *StaticPods) ReadyPods(service string, dst []string) ([]string, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	pods, ok := s.pods[service]
	if !ok {
		return dst, fmt.Errorf("ready pods of %s: unknown service", service)
	}
	return append(dst, pods...), nil
}
