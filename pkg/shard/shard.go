// Package shard divides services among autoscaler replicas. A service
// belongs to one of a fixed number of buckets, chosen by a stable hash of
// its key, so every autoscaler replica and every activator agree on it
// without talking to each other; each bucket is led by one replica at a
// time (kube/buckets holds a Lease per bucket).
//
// With one bucket, the default, every service is in bucket 0 and nothing
// is divided.
package shard

import (
	"fmt"
	"hash/fnv"
	"slices"
	"sync"

	"github.com/swell-run/swell/pkg/service"
)

// MaxBuckets bounds the number of buckets: each is a Lease, an elector and
// an EndpointSlice, and more buckets than autoscaler replicas buy nothing
// but finer balance.
const MaxBuckets = 64

// Check returns an error unless n is a number of buckets Swell accepts.
func Check(n int) error {
	if n < 1 || n > MaxBuckets {
		return fmt.Errorf("%d buckets; accepted: 1 to %d", n, MaxBuckets)
	}
	return nil
}

// Of returns the bucket, in [0, n), of the service whose key is key in its
// wire form (service.Key.String(), "namespace/name"). The hash is 32-bit
// FNV-1a: it never changes, so replicas of different versions agree. n
// must be at least 1.
func Of(key string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}

// OfKey is Of for a service.Key.
func OfKey(key service.Key, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(key.Namespace))
	h.Write([]byte{'/'})
	h.Write([]byte(key.Name))
	return int(h.Sum32() % uint32(n))
}

// Owned is the set of buckets one replica leads now, out of n. It is safe
// for concurrent use; the zero value is not: use NewOwned.
type Owned struct {
	n  int
	mu sync.RWMutex
	in []bool
}

// NewOwned returns an empty set of buckets out of n (checked by Check).
func NewOwned(n int) (*Owned, error) {
	if err := Check(n); err != nil {
		return nil, err
	}
	return &Owned{n: n, in: make([]bool, n)}, nil
}

// Buckets is the number of buckets, n.
func (o *Owned) Buckets() int { return o.n }

// Add marks bucket b led by this replica; it reports whether it was not
// already.
func (o *Owned) Add(b int) bool { return o.set(b, true) }

// Remove marks bucket b no longer led; it reports whether it was.
func (o *Owned) Remove(b int) bool { return o.set(b, false) }

func (o *Owned) set(b int, v bool) bool {
	if b < 0 || b >= o.n {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	changed := o.in[b] != v
	o.in[b] = v
	return changed
}

// Has reports whether bucket b is led here.
func (o *Owned) Has(b int) bool {
	if b < 0 || b >= o.n {
		return false
	}
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.in[b]
}

// Owns reports whether the service key is in a bucket led here.
func (o *Owned) Owns(key service.Key) bool { return o.Has(OfKey(key, o.n)) }

// List returns the buckets led here, in order.
func (o *Owned) List() []int {
	o.mu.RLock()
	defer o.mu.RUnlock()
	var out []int
	for b, in := range o.in {
		if in {
			out = append(out, b)
		}
	}
	return slices.Clip(out)
}

// Len is the number of buckets led here.
func (o *Owned) Len() int {
	o.mu.RLock()
	defer o.mu.RUnlock()
	n := 0
	for _, in := range o.in {
		if in {
			n++
		}
	}
	return n
}
