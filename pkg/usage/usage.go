// Package usage measures the CPU and memory a group of processes uses,
// from /proc, without privileges.
//
// The queue-proxy samples its app once a second so that the autoscaler can
// scale on cpu and memory as the Kubernetes HPA does. The HPA reads the
// container's cgroup through the kubelet; a sidecar cannot read another
// container's cgroup without privileges, but it can see the app's processes
// in /proc, which any user may read: in a pod with shareProcessNamespace
// (Pod), or on a developer's machine where the app runs as the same user
// (Listener).
//
// CPU is each process's user and system time (utime+stime of
// /proc/<pid>/stat, in clock ticks of 10ms: over a one-second interval a
// process's figure is exact to a hundredth of a core), followed process by
// process from one sample to the next. The time a process uses after the
// last sample that sees it is lost when it exits (up to one interval's
// worth), and a process that starts and exits between two samples is not
// seen at all: its time goes to its parent's cutime, which is not counted
// because it would count again the time of the children that were seen.
//
// Memory is the resident set (RSS) of each process, summed. Pages shared
// between processes are counted once per process, so a pre-fork server,
// whose workers share the master's pages copy-on-write, is over-counted.
// The HPA uses the cgroup's working set instead, which counts each page
// once and includes active page cache; it cannot be read from another
// container without privileges.
package usage

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/procfs"
)

// ErrNoProcess is returned, wrapped, by Sample when the scope has no
// process to measure: for Listener, nothing listens on the port yet (the
// app is starting or restarting). It tells "nothing to measure yet" from a
// /proc that cannot be read.
var ErrNoProcess = errors.New("no process to measure")

// userHZ is the unit of the times in /proc/<pid>/stat and /proc/uptime:
// USER_HZ is 100 on every platform Go supports (procfs assumes the same).
const userHZ = 100

// Usage is what a group of processes used, as measured by one Sample.
type Usage struct {
	// CPU is the cores used on average over the interval since the
	// previous Sample (1.5 is one and a half cores).
	CPU float64
	// Memory is the bytes resident now, summed over the processes.
	Memory uint64
	// Processes is how many processes were counted.
	Processes int
}

// Config configures a Sampler.
type Config struct {
	// ProcRoot is the proc filesystem's mount point; "" means /proc.
	ProcRoot string
	// Scope chooses the processes to measure: Pod or Listener.
	Scope Scope
}

// Sampler measures a scope's processes, one Sample at a time. It is not
// safe for concurrent use: the queue-proxy calls it from one loop.
type Sampler struct {
	r     reader
	scope collector
	// procs is the buffer the scope fills at each Sample, kept so that a
	// steady Sample does not allocate it again.
	procs []proc

	// The previous sample: when it was taken, the kernel's uptime in clock
	// ticks just before it read the processes (to tell the processes that
	// started after it), and each process's CPU ticks then. cur is last's
	// spare, swapped in at each Sample, so that memory stays bounded by
	// the processes seen at once.
	sampled   bool
	at        time.Time
	mark      uint64
	last, cur map[ident]uint64
}

// New returns a Sampler of cfg.Scope's processes. It fails on a nil Scope,
// a bad Listener port or a ProcRoot that is not a readable proc
// filesystem.
func New(cfg Config) (*Sampler, error) {
	if cfg.Scope == nil {
		return nil, errors.New("Scope is nil: accepted are usage.Pod(os.Getpid()) and usage.Listener(port)")
	}
	root := cfg.ProcRoot
	if root == "" {
		root = procfs.DefaultMountPoint
	}
	fs, err := procfs.NewFS(root)
	if err != nil {
		return nil, fmt.Errorf("ProcRoot %q: %w; accepted is the mount point of a proc filesystem, or \"\" for /proc", root, err)
	}
	c, err := cfg.Scope.collector()
	if err != nil {
		return nil, err
	}
	s := &Sampler{
		r:     reader{fs: fs, root: root},
		scope: c,
		last:  make(map[ident]uint64),
		cur:   make(map[ident]uint64),
	}
	// Reading the uptime now, as every Sample does, reports a ProcRoot
	// that is a directory but no proc filesystem here rather than at the
	// first Sample.
	if _, err := s.r.uptime(); err != nil {
		return nil, fmt.Errorf("ProcRoot %q: %w; accepted is the mount point of a proc filesystem, or \"\" for /proc", root, err)
	}
	return s, nil
}

// Sample reads the scope's processes now. CPU is the cores they used on
// average since the previous Sample (0 for the first), Memory their
// resident set summed now.
//
// A process seen by both samples counts the CPU time it used between
// them. A process seen for the first time counts all its CPU time if it
// started after the previous Sample, and none otherwise: which part of it
// fell in the interval cannot be known.
//
// When the scope has no process, Sample returns a zero Usage and an error
// wrapping ErrNoProcess, and the next Sample measures from this one. On
// any other error nothing is recorded, and the next Sample measures from
// the last one that succeeded. now must be after the previous Sample's.
func (s *Sampler) Sample(now time.Time) (Usage, error) {
	if s.sampled && !now.After(s.at) {
		return Usage{}, fmt.Errorf("sample time %s: not after the previous sample's %s; accepted is a later time", now, s.at)
	}
	// The uptime is read before the processes so that any process that
	// starts after it is either seen now, with a later start time, or
	// counted whole by the next Sample.
	mark, err := s.r.uptime()
	if err != nil {
		return Usage{}, err
	}
	procs, err := s.scope.collect(&s.r, s.procs[:0])
	s.procs = procs[:0]
	if err != nil && !errors.Is(err, ErrNoProcess) {
		return Usage{}, err
	}

	var u Usage
	var ticks uint64
	for _, p := range procs {
		switch last, seen := s.last[p.ident]; {
		case seen && p.ticks >= last:
			ticks += p.ticks - last
		case !seen && s.sampled && p.start >= s.mark:
			ticks += p.ticks
		}
		s.cur[p.ident] = p.ticks
		u.Memory += p.rss
	}
	u.Processes = len(procs)
	if s.sampled {
		u.CPU = float64(ticks) / userHZ / now.Sub(s.at).Seconds()
	}
	s.last, s.cur = s.cur, s.last
	clear(s.cur)
	s.sampled, s.at, s.mark = true, now, mark
	if err != nil {
		return Usage{}, err
	}
	return u, nil
}
