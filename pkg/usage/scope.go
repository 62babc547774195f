package usage

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/procfs"
)

// Scope chooses the processes a Sampler measures: Pod or Listener.
type Scope interface {
	// collector validates the scope and returns the state that finds its
	// processes, one per Sampler.
	collector() (collector, error)
}

// collector finds a scope's processes as they are now.
type collector interface {
	// collect appends the scope's processes to out, or fails with an
	// error wrapping ErrNoProcess if it has none.
	collect(r *reader, out []proc) ([]proc, error)
}

// Pod is the scope of a Kubernetes pod with shareProcessNamespace: every
// process in /proc except PID 1, the pod's pause process, and except the
// process self (the queue-proxy: os.Getpid()) and its descendants.
//
// Other sidecars of the pod are counted too: in a shared PID namespace
// nothing tells which container a process belongs to without reading
// cgroups, whose names differ across runtimes.
func Pod(self int) Scope { return podScope{self: self} }

type podScope struct{ self int }

func (s podScope) collector() (collector, error) {
	if s.self <= 0 {
		return nil, fmt.Errorf("Pod(%d): accepted is the PID of the measuring process, os.Getpid()", s.self)
	}
	return &pod{self: s.self, mine: make(map[int]bool)}, nil
}

type pod struct {
	self int
	mine map[int]bool // self's tree, kept between samples to reuse its memory
}

func (p *pod) collect(r *reader, out []proc) ([]proc, error) {
	from := len(out)
	out, err := r.scan(out)
	if err != nil {
		return out, err
	}
	clear(p.mine)
	subtree(out[from:], p.self, p.mine)
	kept := slices.DeleteFunc(out[from:], func(q proc) bool { return q.pid == 1 || p.mine[q.pid] })
	return out[:from+len(kept)], nil
}

// subtree marks root and its descendants among procs in tree.
func subtree(procs []proc, root int, tree map[int]bool) {
	tree[root] = true
	// A pass adds the children of what is marked; PIDs mostly grow from
	// parent to child, so one pass usually marks all and one more sees
	// nothing change.
	for grown := true; grown; {
		grown = false
		for _, q := range procs {
			if !tree[q.pid] && tree[q.ppid] {
				tree[q.pid] = true
				grown = true
			}
		}
	}
}

// Listener is the scope of an app that runs as the same user, as under
// `swell local`: the process tree rooted at the process that listens on
// TCP port on loopback (127.0.0.1, ::1, or the any-address 0.0.0.0 or ::).
//
// When several processes hold the listening socket, as the master and the
// workers of a pre-fork server do, the root is the one whose parent does
// not. Finding it means reading the file descriptors of every process, so
// the root is kept, and looked for again only when it has exited: if it
// lives on but stops listening, its tree is measured until it exits.
// Processes that may not be read are skipped. Descendants that leave the
// tree (a daemon that forks twice) are not followed.
//
// A Sample reads only the tree's processes, finding each one's children in
// /proc/<pid>/task/<tid>/children; where the kernel has no such files
// (built without CONFIG_PROC_CHILDREN), it reads every process to learn
// its parent.
func Listener(port int) Scope { return listenerScope{port: port} }

type listenerScope struct{ port int }

func (s listenerScope) collector() (collector, error) {
	if s.port < 1 || s.port > 65535 {
		return nil, fmt.Errorf("Listener(%d): accepted is a TCP port from 1 to 65535", s.port)
	}
	return &listener{port: uint64(s.port), seen: make(map[int]bool)}, nil
}

type listener struct {
	port uint64
	root ident // zero until found
	// unowned are the listening sockets that no process we may read held
	// at the last search: they are not searched for again every second.
	unowned []uint64
	// noChildren says the kernel has no task/<tid>/children files, so the
	// tree is found from every process's parent instead.
	noChildren bool

	// Buffers reused from one sample to the next.
	seen map[int]bool
	kids []int
	all  []proc
}

func (l *listener) collect(r *reader, out []proc) ([]proc, error) {
	var root proc
	if l.root.pid != 0 {
		p, ok, err := r.stat(l.root.pid)
		if err != nil {
			return out, err
		}
		if ok && p.ident == l.root {
			root = p
		} else {
			l.root = ident{}
		}
	}
	if l.root.pid == 0 {
		p, err := l.find(r)
		if err != nil {
			return out, err
		}
		root, l.root = p, p.ident
	}
	if !l.noChildren {
		tree, err := l.walk(r, root, out)
		if !errors.Is(err, errNoChildren) {
			return tree, err
		}
		l.noChildren = true
	}
	return l.scanTree(r, root, out)
}

var errNoChildren = errors.New("no task/<tid>/children files")

// walk appends root's tree to out, reading only the tree's processes.
func (l *listener) walk(r *reader, root proc, out []proc) ([]proc, error) {
	clear(l.seen)
	from := len(out)
	out = append(out, root)
	l.seen[root.pid] = true
	// out[from:] is the queue: each process's children are appended
	// behind it.
	for i := from; i < len(out); i++ {
		p := out[i]
		var err error
		l.kids, err = r.children(p.pid, p.threads, l.kids[:0])
		switch {
		case errors.Is(err, fs.ErrNotExist) && p.pid == root.pid:
			// The root was alive a moment ago: if its main thread is
			// still there, the kernel has no children files.
			if _, err := os.Stat(r.root + "/" + strconv.Itoa(p.pid) + "/task/" + strconv.Itoa(p.pid)); err == nil {
				return out[:from], errNoChildren
			}
			return out, nil
		case gone(err):
			continue
		case err != nil:
			return out[:from], err
		}
		for _, pid := range l.kids {
			if l.seen[pid] {
				// Only a PID reused while we walk can come twice.
				continue
			}
			l.seen[pid] = true
			c, ok, err := r.stat(pid)
			if err != nil {
				return out[:from], err
			}
			if ok {
				out = append(out, c)
			}
		}
	}
	return out, nil
}

// scanTree appends root's tree to out, reading every process to learn its
// parent.
func (l *listener) scanTree(r *reader, root proc, out []proc) ([]proc, error) {
	all, err := r.scan(l.all[:0])
	l.all = all[:0]
	if err != nil {
		return out, err
	}
	clear(l.seen)
	subtree(all, root.pid, l.seen)
	for _, p := range all {
		if l.seen[p.pid] {
			out = append(out, p)
		}
	}
	return out, nil
}

// find returns the process at the root of the tree that listens on the
// port.
func (l *listener) find(r *reader) (proc, error) {
	inodes, err := l.listening(r)
	if err != nil {
		return proc{}, err
	}
	if len(inodes) == 0 {
		return proc{}, fmt.Errorf("nothing listens on TCP port %d on loopback: %w", l.port, ErrNoProcess)
	}
	if slices.Equal(inodes, l.unowned) {
		return proc{}, fmt.Errorf("TCP port %d: its listener is held by no process we may read: %w", l.port, ErrNoProcess)
	}
	all, err := r.fs.AllProcs()
	if err != nil {
		return proc{}, fmt.Errorf("list processes in %s: %w", r.root, err)
	}
	var holders []proc
	for _, pp := range all {
		fds, err := pp.FileDescriptorTargets()
		if err != nil {
			continue // gone, or not ours to read
		}
		if !slices.ContainsFunc(fds, func(fd string) bool { return holds(fd, inodes) }) {
			continue
		}
		p, ok, err := r.statOf(pp)
		if err != nil {
			return proc{}, err
		}
		if ok {
			holders = append(holders, p)
		}
	}
	if len(holders) == 0 {
		l.unowned = inodes
		return proc{}, fmt.Errorf("TCP port %d: its listener is held by no process we may read: %w", l.port, ErrNoProcess)
	}
	l.unowned = nil
	// The root is a holder whose parent is not one; should there be
	// several (two servers sharing the port with SO_REUSEPORT), the
	// oldest.
	var root proc
	for _, p := range holders {
		if slices.ContainsFunc(holders, func(q proc) bool { return q.pid == p.ppid }) {
			continue
		}
		if root.pid == 0 || p.start < root.start || p.start == root.start && p.pid < root.pid {
			root = p
		}
	}
	return root, nil
}

// holds reports whether an fd's link names one of the sockets.
func holds(fd string, inodes []uint64) bool {
	s, ok := strings.CutPrefix(fd, "socket:[")
	if !ok {
		return false
	}
	s, ok = strings.CutSuffix(s, "]")
	if !ok {
		return false
	}
	inode, err := strconv.ParseUint(s, 10, 64)
	return err == nil && slices.Contains(inodes, inode)
}

// tcpListen is the state of a listening socket in net/tcp.
const tcpListen = 0x0A

// listening returns the inodes of the sockets that listen on the port on
// loopback or on every address, sorted.
func (l *listener) listening(r *reader) ([]uint64, error) {
	// procfs deprecates NetTCP for netlink's sock_diag, which would take
	// a dependency for a lookup made only when the app (re)starts.
	//lint:ignore SA1019 see above
	v4, err4 := r.fs.NetTCP()
	//lint:ignore SA1019 see above
	v6, err6 := r.fs.NetTCP6()
	var inodes []uint64
	missing := 0
	for _, t := range []struct {
		name  string
		socks procfs.NetTCP
		err   error
	}{{"net/tcp", v4, err4}, {"net/tcp6", v6, err6}} {
		if errors.Is(t.err, fs.ErrNotExist) {
			missing++ // no IPv6, say
			continue
		}
		if t.err != nil {
			return nil, fmt.Errorf("read %s/%s: %w", r.root, t.name, t.err)
		}
		for _, s := range t.socks {
			if s.St == tcpListen && s.LocalPort == l.port && (s.LocalAddr.IsLoopback() || s.LocalAddr.IsUnspecified()) {
				inodes = append(inodes, s.Inode)
			}
		}
	}
	if missing == 2 {
		return nil, fmt.Errorf("neither %s/net/tcp nor %s/net/tcp6 exists: %w", r.root, r.root, fs.ErrNotExist)
	}
	slices.Sort(inodes)
	return slices.Compact(inodes), nil
}
