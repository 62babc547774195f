// Package service names a Swell service inside the autoscaler: the key that
// the engine, the collector and the scaler index their per-service state by.
package service

import (
	"fmt"
	"strings"
)

// Key identifies a service by namespace and name. It is comparable, so it
// is used directly as a map key.
type Key struct {
	Namespace, Name string
}

// String returns "namespace/name", the form logs, events and the
// Swell-Service header use.
func (k Key) String() string { return k.Namespace + "/" + k.Name }

// ParseKey parses "namespace/name". Both parts must be non-empty and there
// must be exactly one slash.
func ParseKey(s string) (Key, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return Key{}, fmt.Errorf("service key %q: want namespace/name", s)
	}
	return Key{Namespace: ns, Name: name}, nil
}
