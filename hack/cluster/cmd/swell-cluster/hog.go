package main

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// startHog keeps every core of the machine busy until the returned stop is
// called: a goroutine per core that only computes, at the priority of any
// process, as other jobs on a shared CI machine may.
func startHog() (stop func()) {
	var quit atomic.Bool
	var wg sync.WaitGroup
	for range runtime.NumCPU() {
		wg.Go(func() {
			x := uint64(1)
			for !quit.Load() {
				for range 1 << 16 {
					x = x*6364136223846793005 + 1442695040888963407
				}
			}
			hogSink.Add(x)
		})
	}
	return func() {
		quit.Store(true)
		wg.Wait()
	}
}

// hogSink keeps the hog's arithmetic from being optimised away.
var hogSink atomic.Uint64
