// Package config reads the services `swell local` runs — from a swell.yaml
// file, or one service from flags and a command — into one validated
// form. Autoscaling settings go through the one parser and validator
// Kubernetes annotations use, package autoscaling.
package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/swell-run/swell/pkg/autoscaling"
)

// MaxFileSize is the size of the largest swell.yaml Load and Parse accept.
const MaxFileSize = 1 << 20

// Service is one service to run, validated.
type Service struct {
	// Name is [a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 63 characters, unique
	// in a file.
	Name string
	// Command is the argv to run, never empty. Command[0] is looked up in
	// PATH when the service is run, not here.
	Command []string
	// Dir is the working directory; "" is swell's own.
	Dir string
	// Env holds "KEY=VALUE" in file order: KEY is not empty, has no '='
	// and is not PORT, which swell sets for each replica.
	Env []string
	// Hosts are extra Host names routed to the service, lowercase, maybe
	// with a port.
	Hosts []string
	// ContainerConcurrency is the hard per-replica limit (0: unbounded).
	ContainerConcurrency int
	// QueueDepth is the queue-proxy's queue per replica; 0 is the
	// queue-proxy's default (10×ContainerConcurrency).
	QueueDepth int
	// RequestTimeout is 0 for the default, network.DefaultRequestTimeout, or from
	// network.RequestTimeoutMin to network.RequestTimeoutMax.
	RequestTimeout time.Duration
	// Annotations holds the autoscaling.swell.run/* keys as given.
	Annotations map[string]string
	// Spec is autoscaling.Parse(Annotations, ContainerConcurrency,
	// File.Defaults).
	Spec autoscaling.Spec
	// Line is the line of the service in its file (0 for flags).
	Line int
}

// File is what swell local runs.
type File struct {
	// Path is the file read ("" for flags).
	Path string
	// Defaults are autoscaling.DefaultDefaults() overlaid with the file's
	// defaults (or the cluster-wide flags).
	Defaults autoscaling.Defaults
	Services []Service
}

// Load reads and validates a swell.yaml; see Parse.
func Load(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return Parse(path, data)
}

// Parse validates a swell.yaml read from path (path is used only in
// messages). The file is a mapping with two fields:
//
//	# Cluster-wide autoscaling defaults: the keys of
//	# autoscaling.ClusterKeys() without prefix, as in Swell's Kubernetes
//	# ConfigMap (docs/configuration.md). Optional.
//	defaults:
//	  scale-to-zero-grace-period: 30s
//	  tick-interval: 2s
//	# The services, at least one.
//	services:
//	  - name: hello                  # required; a DNS label, unique
//	    command: ["go", "run", "."]  # required; a list, or a string split on spaces (no shell)
//	    dir: .                       # working directory, relative to swell's; default swell's own
//	    hosts: [hello.localhost]     # extra Host names routed to the service
//	    env:                         # a mapping, or a list of KEY=VALUE; PORT is swell's
//	      GREETING: hi
//	    containerConcurrency: 10     # hard per-replica limit; 0 (default) for none
//	    queueDepth: 100              # queue per replica; 0 (default): 10×containerConcurrency
//	    timeout: 5m                  # request timeout, 1s to 1h; default 5m
//	    annotations:                 # exactly the Kubernetes annotations
//	      autoscaling.swell.run/min-scale: "0"
//	      autoscaling.swell.run/target: 70
//
// Annotation and env values may be YAML numbers or booleans; their text
// is taken. Annotations are the autoscaling.swell.run/* keys, read by
// autoscaling.Parse, and swell.run/container-concurrency, which sets
// containerConcurrency (when both are written they must agree); any other
// annotation is an error, so a misspelt key never goes unnoticed.
//
// Every problem is reported at once, joined with errors.Join in file
// order, each as "path:line: field: problem; accepted: ..." and unwrapping
// to an *autoscaling.Error. Anchors and aliases are followed; a file holds
// one YAML document of at most MaxFileSize bytes.
func Parse(path string, data []byte) (*File, error) {
	if len(data) > MaxFileSize {
		return nil, &autoscaling.Error{Key: path, Name: path, Problem: "file is larger than 1 MiB", NoValue: true,
			Accepted: "a swell.yaml of at most 1 MiB"}
	}
	r := &reader{path: path, budget: maxNodes}
	f := r.file(data)
	if err := r.err(); err != nil {
		return nil, err
	}
	return f, nil
}

// ReplicaCPU is the CPU request, in cores, of a `swell local` replica: a
// percentage cpu-target is of one core, as a container requesting one.
// Replicas request no memory, so memory-target must be an amount.
const ReplicaCPU = 1.0

// withReplicaRequests gives spec the requests of a local replica, or the
// error of a percentage target no request backs, said in local terms.
func withReplicaRequests(spec autoscaling.Spec) (autoscaling.Spec, error) {
	out, err := spec.WithRequests(ReplicaCPU, 0)
	var ae *autoscaling.Error
	if errors.As(err, &ae) && ae.Key == autoscaling.KeyMemoryTarget {
		ae.Problem = "is a percentage of a memory request, and swell local replicas have none"
		ae.Accepted = "an amount per replica, such as 512Mi"
	}
	return out, err
}
