package usage

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"syscall"

	"github.com/prometheus/procfs"
)

// ident names one process for good: a PID is reused once its process has
// exited, but not within the same clock tick of start time.
type ident struct {
	pid   int
	start uint64 // clock ticks after boot
}

// proc is what a Sample keeps of one process.
type proc struct {
	ident
	ppid    int
	threads int
	ticks   uint64 // utime+stime, in clock ticks
	rss     uint64 // bytes
}

// reader reads the proc filesystem.
type reader struct {
	fs   procfs.FS
	root string
	// buf is reused for the small files procfs has no reader for.
	buf []byte
}

// gone reports whether err says the process is not there to read: it
// exited (the kernel answers ENOENT or ESRCH depending on the moment) or
// belongs to someone we may not read. Such processes are skipped.
func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.ESRCH)
}

// stat reads one process. ok is false if it is gone or a zombie: a zombie
// has released its memory, will use no more CPU and no longer holds its
// sockets.
func (r *reader) stat(pid int) (p proc, ok bool, err error) {
	pp, err := r.fs.Proc(pid)
	if err != nil {
		if gone(err) {
			return proc{}, false, nil
		}
		return proc{}, false, fmt.Errorf("process %d: %w", pid, err)
	}
	return r.statOf(pp)
}

// statOf reads one process procfs already names.
func (r *reader) statOf(pp procfs.Proc) (p proc, ok bool, err error) {
	st, err := pp.Stat()
	if err != nil {
		if gone(err) {
			return proc{}, false, nil
		}
		return proc{}, false, fmt.Errorf("read %s/%d/stat: %w", r.root, pp.PID, err)
	}
	if st.State == "Z" || st.State == "X" {
		return proc{}, false, nil
	}
	return proc{
		ident:   ident{pid: st.PID, start: st.Starttime},
		ppid:    st.PPID,
		threads: st.NumThreads,
		ticks:   uint64(st.UTime) + uint64(st.STime),
		rss:     uint64(max(st.ResidentMemory(), 0)),
	}, true, nil
}

// scan appends every process it may read to out.
func (r *reader) scan(out []proc) ([]proc, error) {
	all, err := r.fs.AllProcs()
	if err != nil {
		return out, fmt.Errorf("list processes in %s: %w", r.root, err)
	}
	for _, pp := range all {
		p, ok, err := r.statOf(pp)
		if err != nil {
			return out, err
		}
		if ok {
			out = append(out, p)
		}
	}
	return out, nil
}

// uptime returns the time since boot in clock ticks, the unit and origin
// of a process's start time.
func (r *reader) uptime() (uint64, error) {
	path := r.root + "/uptime"
	b, err := r.read(path)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	// "350735.47 234388.90": seconds since boot with two decimals, then
	// the idle time.
	f, _, _ := bytes.Cut(bytes.TrimSpace(b), []byte(" "))
	whole, frac, _ := bytes.Cut(f, []byte("."))
	sec, err1 := strconv.ParseUint(string(whole), 10, 64)
	cs, err2 := strconv.ParseUint(string(frac), 10, 64)
	if err1 != nil || err2 != nil || len(frac) != 2 {
		return 0, fmt.Errorf("read %s: %q is not seconds with two decimals", path, f)
	}
	return sec*userHZ + cs, nil
}

// children appends the PIDs of pid's children to out, from
// <pid>/task/<tid>/children: each thread lists the children it forked.
// It fails with fs.ErrNotExist if the main thread has no such file, which
// is also what a kernel built without CONFIG_PROC_CHILDREN answers.
func (r *reader) children(pid, threads int, out []int) ([]int, error) {
	task := r.root + "/" + strconv.Itoa(pid) + "/task/"
	out, err := r.childrenOf(task+strconv.Itoa(pid)+"/children", out)
	if err != nil || threads <= 1 {
		// A single thread is the common case (every worker of a
		// pre-fork server): its file is all there is, no need to list
		// the tasks.
		return out, err
	}
	d, err := os.Open(task)
	if err != nil {
		return out, err
	}
	tids, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return out, err
	}
	me := strconv.Itoa(pid)
	for _, tid := range tids {
		if tid == me {
			continue
		}
		out, err = r.childrenOf(task+tid+"/children", out)
		if err != nil && !gone(err) {
			return out, err
		}
	}
	return out, nil
}

// childrenOf appends the PIDs in one children file to out.
func (r *reader) childrenOf(path string, out []int) ([]int, error) {
	b, err := r.read(path)
	if err != nil {
		return out, err
	}
	for f := range bytes.FieldsSeq(b) {
		pid, err := strconv.Atoi(string(f))
		if err != nil {
			return out, fmt.Errorf("read %s: %q is not a PID", path, f)
		}
		out = append(out, pid)
	}
	return out, nil
}

// read reads a small file into r.buf. It calls the kernel directly: an
// os.File would stat the file, try to register it with the poller and
// set it non-blocking, three system calls more than the open, read and
// close it takes, for each of the files a Sample reads every second.
func (r *reader) read(path string) ([]byte, error) {
	fd, err := retry(func() (int, error) { return syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0) })
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	if r.buf == nil {
		r.buf = make([]byte, 512)
	}
	b := r.buf[:0]
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := retry(func() (int, error) { return syscall.Read(fd, b[len(b):cap(b)]) })
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			break
		}
		b = b[:len(b)+n]
	}
	r.buf = b
	return b, nil
}

// retry calls f again while it is interrupted by a signal.
func retry(f func() (int, error)) (int, error) {
	for {
		n, err := f()
		if err != syscall.EINTR {
			return n, err
		}
	}
}
