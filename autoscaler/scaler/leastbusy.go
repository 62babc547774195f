package scaler

import (
	"cmp"
	"slices"
)

// PodLoad is what is known of one pod's load when choosing which pods go
// first at a scale-down.
type PodLoad struct {
	Addr string
	// Concurrency is the requests it had in flight on average over the
	// latest second it was scraped; Known is false for a pod never
	// scraped yet.
	Concurrency float64
	Known       bool
}

// LeastBusy returns the addresses of up to n of pods, the least busy
// first: the lowest concurrency, a pod not scraped yet counting as idle
// (it is new: its first scrape is at most a sampling period away, and
// until then it has had next to no time for requests) and going before a
// scraped one as idle as it, as the ReplicaSet itself removes the newest
// pods first; then by address, so that the choice is the same every time.
// pods is sorted in place.
func LeastBusy(pods []PodLoad, n int) []string {
	if n <= 0 {
		return nil
	}
	slices.SortFunc(pods, func(a, b PodLoad) int {
		return cmp.Or(
			cmp.Compare(a.Concurrency, b.Concurrency),
			cmpBool(a.Known, b.Known),
			cmp.Compare(a.Addr, b.Addr),
		)
	})
	n = min(n, len(pods))
	out := make([]string, n)
	for i := range out {
		out[i] = pods[i].Addr
	}
	return out
}

// cmpBool orders false before true.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}
