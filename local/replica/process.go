package replica

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// maxLine is the longest line of output written as one; a longer one is
// split into lines of this length.
const maxLine = 64 << 10

// outputGrace is how long a process's output may stay open after it exited
// and its process group was killed (only something that left the group can
// still hold it) before the output is cut.
const outputGrace = time.Second

// process is one started process: the app or the queue-proxy.
type process struct {
	role    string // "app" or "queue-proxy"
	pid     int
	started time.Time
	// exited is closed once the process has been reaped and what was left of
	// its process group killed; state is set before.
	exited chan struct{}
	state  *os.ProcessState
}

// running reports whether p has not exited yet.
func (p *process) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// signal sends sig to p's process group, unless p was reaped already (its
// pid may then belong to someone else).
func (p *process) signal(sig syscall.Signal) {
	if p.running() {
		_ = syscall.Kill(-p.pid, sig)
	}
}

// exitCode is p's exit code, or -1 if a signal ended it.
func (p *process) exitCode() int { return p.state.ExitCode() }

// spawn starts argv (argv[0] resolved already) with env in dir, its output
// written line by line to r's output with prefix. Two goroutines, counted in
// r.wg, reap it and copy its output.
func (r *Replica) spawn(role string, argv, env []string, dir, prefix string) (*process, error) {
	rd, wr, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", role, err)
	}
	// Stdin stays nil: the null device.
	cmd := &exec.Cmd{
		Path:        argv[0],
		Args:        argv,
		Env:         env,
		Dir:         dir,
		Stdout:      wr,
		Stderr:      wr,
		SysProcAttr: sysProcAttr(),
	}
	if err := cmd.Start(); err != nil {
		rd.Close()
		wr.Close()
		return nil, fmt.Errorf("start %s %q: %w", role, argv[0], err)
	}
	wr.Close()
	p := &process{role: role, pid: cmd.Process.Pid, started: r.clk.Now(), exited: make(chan struct{})}

	copied := make(chan struct{})
	r.wg.Add(2)
	go func() {
		defer r.wg.Done()
		defer close(copied)
		copyLines(r.out, prefix, rd)
	}()
	go func() {
		defer r.wg.Done()
		_ = cmd.Wait()
		p.state = cmd.ProcessState
		// Whatever the process left behind in its group goes with it.
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		close(p.exited)
		t := time.NewTimer(outputGrace)
		defer t.Stop()
		select {
		case <-copied:
		case <-t.C:
		}
		rd.Close()
		<-copied
	}()
	return p, nil
}

// outputMu serialises the writes of all replicas, which usually share one
// output, so lines never mix.
var outputMu sync.Mutex

// copyLines writes every line read from rd to w with prefix, as one Write
// each, until rd ends. A last line without a newline gets one.
func copyLines(w io.Writer, prefix string, rd io.Reader) {
	br := bufio.NewReaderSize(rd, maxLine)
	var buf []byte
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
			buf = append(append(append(buf[:0], prefix...), line...), '\n')
			outputMu.Lock()
			_, _ = w.Write(buf)
			outputMu.Unlock()
		}
		if err != nil && err != bufio.ErrBufferFull {
			return
		}
	}
}
