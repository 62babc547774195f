// Package pods is the scale fleet's address file: each service's key, the
// kind of load its pods serve and the addresses of its pods, one JSON line
// per service. The fleet writes it; the autoscaler harness and the bench
// read it.
package pods

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/swell-run/swell/pkg/service"
)

// The kinds of load a service's pods serve (the fleet's patterns).
const (
	// KindBusy: steady load on every pod.
	KindBusy = "busy"
	// KindBursting: bursts of load on a period, through the activators,
	// nothing between them.
	KindBursting = "bursting"
	// KindIdle: pods kept warm (min-scale), no load.
	KindIdle = "idle"
	// KindZero: no pods ready, no load until woken; the activators report
	// it.
	KindZero = "zero"
)

// Kinds are the kinds, in the order the fleet's mix lists them.
var Kinds = []string{KindBusy, KindBursting, KindIdle, KindZero}

// Service is one line of the file.
type Service struct {
	// Service is the key, "namespace/name".
	Service string `json:"service"`
	Kind    string `json:"kind"`
	// Pods are the "host:port" addresses of the pods' stats endpoints.
	Pods []string `json:"pods"`
}

// Write writes svcs to w, one JSON line each.
func Write(w io.Writer, svcs []Service) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for i := range svcs {
		if err := enc.Encode(&svcs[i]); err != nil {
			return fmt.Errorf("write service %s: %w", svcs[i].Service, err)
		}
	}
	return bw.Flush()
}

// WriteFile writes svcs to path whole or not at all: to a temporary file
// renamed over path, so that a reader never sees half a fleet.
func WriteFile(path string, svcs []Service) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // after a successful rename, a no-op
	if err := Write(f, svcs); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// Read reads a file written by Write. Every line's problem is reported, by
// line number: a key that is not "namespace/name", an unknown kind.
func Read(r io.Reader) ([]Service, error) {
	var svcs []Service
	var errs []error
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var s Service
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			errs = append(errs, fmt.Errorf("line %d: %w", line, err))
			continue
		}
		if _, err := service.Parse(s.Service); err != nil {
			errs = append(errs, fmt.Errorf("line %d: service %q: %w", line, s.Service, err))
		}
		if !validKind(s.Kind) {
			errs = append(errs, fmt.Errorf("line %d: kind %q: accepted are %v", line, s.Kind, Kinds))
		}
		svcs = append(svcs, s)
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, err)
	}
	return svcs, errors.Join(errs...)
}

// ReadFile reads the file at path.
func ReadFile(path string) ([]Service, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	svcs, err := Read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return svcs, nil
}

func validKind(k string) bool {
	for _, v := range Kinds {
		if k == v {
			return true
		}
	}
	return false
}
