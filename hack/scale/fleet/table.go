//go:build linux

package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// table is the fleet's state that changes while it runs: each service's
// step and each pod's latest scrape. One process keeps it in memory. A
// fleet served by several processes (-share), which it takes to hold more
// connections than one process's open-file limit allows, maps it from a
// file they all share: a step taken through any process's control API is
// served by all, and a scrape answered by any marks its pod ready for the
// process that runs the activators.
type table struct {
	// scraped is each pod's latest scrape, or push (-push), in whole
	// seconds after the epoch (0: never).
	scraped []atomic.Int32
	// stepAt is each service's step's At plus one nanosecond, 0 before
	// it has one and stepClaimed while it is being written; stepFactor is
	// the step's Factor, as math.Float64bits.
	stepAt     []atomic.Int64
	stepFactor []atomic.Uint64
}

// stepClaimed marks a step being written (setStep).
const stepClaimed = -1

func newTable(services, pods int) *table {
	return &table{
		scraped:    make([]atomic.Int32, pods),
		stepAt:     make([]atomic.Int64, services),
		stepFactor: make([]atomic.Uint64, services),
	}
}

// step is the service's step, if it has one.
func (t *table) step(svc int) (Step, bool) {
	at := t.stepAt[svc].Load()
	if at <= 0 {
		return Step{}, false
	}
	return Step{At: time.Duration(at - 1), Factor: math.Float64frombits(t.stepFactor[svc].Load())}, true
}

// setStep gives the service its step, unless it has one: a service is
// stepped once. It reports whether s is the step, whichever process of
// the fleet was asked first.
func (t *table) setStep(svc int, s Step) bool {
	if !t.stepAt[svc].CompareAndSwap(0, stepClaimed) {
		return false
	}
	t.stepFactor[svc].Store(math.Float64bits(s.Factor))
	t.stepAt[svc].Store(int64(s.At) + 1)
	return true
}

// The shared file: a header naming the fleet's size, then the scrapes
// (4 bytes a pod, padded to 8), the steps' times and their factors (8
// bytes a service each), in the machine's byte order.
const (
	tableMagic      = "swellflt"
	tableHeaderSize = 16
)

func tableSize(services, pods int) int64 {
	return tableHeaderSize + int64((4*pods+7)&^7) + 16*int64(services)
}

func tableHeader(services, pods int) []byte {
	h := make([]byte, tableHeaderSize)
	copy(h, tableMagic)
	binary.NativeEndian.PutUint32(h[8:], uint32(services))
	binary.NativeEndian.PutUint32(h[12:], uint32(pods))
	return h
}

// mapTable maps the table of a fleet of services and pods from the file
// at path, shared with the fleet's other processes: the first to open it
// creates it, the others find it. The mapping lasts the process's life.
// A file of another fleet's size is refused; a file of this size left by
// an earlier run is taken as it is, with its steps, so give each run a
// new one.
func mapTable(path string, services, pods int) (*table, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("-share: %w", err)
	}
	defer f.Close() // the mapping outlives the descriptor
	fd := int(f.Fd())
	// The fleet's processes start together: one creates the file while
	// the others wait. The unlock is explicit: the mapping holds the open
	// file, and with it the lock, after the close.
	if err := syscall.Flock(fd, syscall.LOCK_EX); err != nil {
		return nil, fmt.Errorf("-share %s: lock: %w", path, err)
	}
	defer syscall.Flock(fd, syscall.LOCK_UN)
	size, header := tableSize(services, pods), tableHeader(services, pods)
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("-share: %w", err)
	}
	switch st.Size() {
	case 0:
		if err := f.Truncate(size); err != nil {
			return nil, fmt.Errorf("-share %s: %w", path, err)
		}
		if _, err := f.WriteAt(header, 0); err != nil {
			return nil, fmt.Errorf("-share %s: %w", path, err)
		}
	case size:
		got := make([]byte, tableHeaderSize)
		if _, err := f.ReadAt(got, 0); err != nil {
			return nil, fmt.Errorf("-share %s: %w", path, err)
		}
		if !bytes.Equal(got, header) {
			return nil, fmt.Errorf("-share %s: the file is not a fleet table of %d services and %d pods; give the fleet's processes a new file", path, services, pods)
		}
	default:
		return nil, fmt.Errorf("-share %s: %d bytes, the table of another fleet (this one's is %d bytes); give the fleet's processes a new file", path, st.Size(), size)
	}
	b, err := syscall.Mmap(fd, 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("-share %s: mmap: %w", path, err)
	}
	// The mapping is page-aligned, and every array starts at a multiple
	// of 8 bytes in it.
	off := int64(tableHeaderSize)
	t := &table{scraped: unsafe.Slice((*atomic.Int32)(unsafe.Pointer(&b[off])), pods)}
	off += int64((4*pods + 7) &^ 7)
	t.stepAt = unsafe.Slice((*atomic.Int64)(unsafe.Pointer(&b[off])), services)
	off += 8 * int64(services)
	t.stepFactor = unsafe.Slice((*atomic.Uint64)(unsafe.Pointer(&b[off])), services)
	return t, nil
}
