package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sync"

	"github.com/swell-run/swell/activator"
	"github.com/swell-run/swell/pkg/service"
)

// servicesFile is the layout of SERVICES_FILE.
type servicesFile struct {
	Services []struct {
		Key                  string   `json:"key"`
		Hosts                []string `json:"hosts"`
		ContainerConcurrency int      `json:"containerConcurrency"`
		Pods                 []struct {
			Name string `json:"name"`
			Addr string `json:"addr"`
		} `json:"pods"`
	} `json:"services"`
}

// loadServices reads and checks a services file.
func loadServices(path string) ([]activator.Service, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("invalid SERVICES_FILE %q: %w", path, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	// Unknown fields are most likely typos ("concurrency"), which
	// would otherwise silently mean "unbounded".
	dec.DisallowUnknownFields()
	var f servicesFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf(`invalid SERVICES_FILE %q: %w: want JSON {"services":[{"key":"ns/name","hosts":[...],"containerConcurrency":N,"pods":[{"name":"...","addr":"host:port"}]}]}`, path, err)
	}
	out := make([]activator.Service, 0, len(f.Services))
	seen := map[service.Key]bool{}
	for i, s := range f.Services {
		key, err := service.Parse(s.Key)
		if err != nil {
			return nil, fmt.Errorf("invalid SERVICES_FILE %q: service %d: %w", path, i, err)
		}
		if seen[key] {
			return nil, fmt.Errorf("invalid SERVICES_FILE %q: service %q listed twice", path, s.Key)
		}
		seen[key] = true
		if s.ContainerConcurrency < 0 {
			return nil, fmt.Errorf("invalid SERVICES_FILE %q: service %q: containerConcurrency %d: must be ≥ 0 (0 = unbounded)", path, s.Key, s.ContainerConcurrency)
		}
		sv := activator.Service{Key: key, Hosts: s.Hosts, ContainerConcurrency: s.ContainerConcurrency}
		for j, p := range s.Pods {
			if p.Name == "" || p.Addr == "" {
				return nil, fmt.Errorf("invalid SERVICES_FILE %q: service %q pod %d: name and addr (host:port of its queue-proxy) are required", path, s.Key, j)
			}
			sv.Pods = append(sv.Pods, activator.Pod{Name: p.Name, Addr: p.Addr})
		}
		out = append(out, sv)
	}
	return out, nil
}

// fileSource is an activator.Source over SERVICES_FILE: a static set,
// reloaded on SIGHUP. Without SERVICES_FILE the activator runs in
// Kubernetes mode (kube.go).
type fileSource struct {
	path    string
	mu      sync.Mutex
	svcs    []activator.Service
	changed chan struct{}
}

func newFileSource(path string) (*fileSource, error) {
	svcs, err := loadServices(path)
	if err != nil {
		return nil, err
	}
	return &fileSource{path: path, svcs: svcs, changed: make(chan struct{}, 1)}, nil
}

// Services implements activator.Source.
func (f *fileSource) Services() []activator.Service {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.svcs
}

// Changed implements activator.Source.
func (f *fileSource) Changed() <-chan struct{} { return f.changed }

// reload re-reads the file; on error the previous set stays.
func (f *fileSource) reload() error {
	svcs, err := loadServices(f.path)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.svcs = svcs
	f.mu.Unlock()
	select {
	case f.changed <- struct{}{}:
	default:
	}
	return nil
}
