package usage

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A world is the state of a fake proc filesystem at one moment.
type world struct {
	uptime uint64 // clock ticks since boot
	procs  []fake
	socks  []sock
}

// fake is one process of a world.
type fake struct {
	pid, ppid int
	start     uint64 // clock ticks after boot
	cpu       uint64 // utime+stime, in clock ticks
	pages     int    // resident
	state     string // "" is "S"
	// threads are the process's threads besides its main one.
	threads []int
	// forker is the thread of the parent that forked the process, which
	// lists it in its children file; 0 is the parent's main thread.
	forker int
	// sockets are the inodes of the sockets the process holds.
	sockets []uint64
}

// sock is a line of net/tcp or net/tcp6.
type sock struct {
	addr  string // an IP address: IPv6 goes to net/tcp6
	port  int
	state int // 0 is LISTEN
	inode uint64
}

// write makes dir hold w, replacing what it held. Without children, it
// writes no task/<tid>/children files, as a kernel built without
// CONFIG_PROC_CHILDREN.
func (w world) write(t testing.TB, dir string, children bool) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	put := func(path, content string) {
		t.Helper()
		path = filepath.Join(dir, path)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	put("uptime", fmt.Sprintf("%d.%02d 1234.56\n", w.uptime/100, w.uptime%100))

	tcp := map[bool]*strings.Builder{false: {}, true: {}}
	for _, b := range tcp {
		b.WriteString("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n")
	}
	for i, s := range w.socks {
		a := netip.MustParseAddr(s.addr)
		state := s.state
		if state == 0 {
			state = tcpListen
		}
		fmt.Fprintf(tcp[a.Is6()], "%4d: %s:%04X %s:0000 %02X 00000000:00000000 00:00000000 00000000  1000        0 %d 1 0000000000000000 100 0 0 10 0\n",
			i, procHex(a), s.port, strings.Repeat("0", len(procHex(a))), state, s.inode)
	}
	put("net/tcp", tcp[false].String())
	put("net/tcp6", tcp[true].String())

	kids := map[[2]int][]string{} // parent, thread → children
	for _, p := range w.procs {
		forker := p.forker
		if forker == 0 {
			forker = p.ppid
		}
		kids[[2]int{p.ppid, forker}] = append(kids[[2]int{p.ppid, forker}], fmt.Sprint(p.pid))
	}
	for _, p := range w.procs {
		state := p.state
		if state == "" {
			state = "S"
		}
		utime, stime := p.cpu-p.cpu/3, p.cpu/3
		put(fmt.Sprintf("%d/stat", p.pid), fmt.Sprintf(
			"%d (app %d) %s %d %d %d 0 -1 4194304 0 0 0 0 %d %d 0 0 20 0 %d 0 %d 1000000 %d 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
			p.pid, p.pid, state, p.ppid, p.pid, p.pid, utime, stime, 1+len(p.threads), p.start, p.pages))
		for _, tid := range append([]int{p.pid}, p.threads...) {
			task := fmt.Sprintf("%d/task/%d", p.pid, tid)
			if err := os.MkdirAll(filepath.Join(dir, task), 0o755); err != nil {
				t.Fatal(err)
			}
			if children {
				c := strings.Join(kids[[2]int{p.pid, tid}], " ")
				if c != "" {
					c += " "
				}
				put(task+"/children", c)
			}
		}
		fd := filepath.Join(dir, fmt.Sprint(p.pid), "fd")
		if err := os.MkdirAll(fd, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("/dev/null", filepath.Join(fd, "0")); err != nil {
			t.Fatal(err)
		}
		for i, inode := range p.sockets {
			if err := os.Symlink(fmt.Sprintf("socket:[%d]", inode), filepath.Join(fd, fmt.Sprint(3+i))); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// procHex writes an address as net/tcp does: IPv4 as one little-endian
// word, IPv6 as four.
func procHex(a netip.Addr) string {
	b := a.AsSlice()
	var s strings.Builder
	for w := 0; w < len(b); w += 4 {
		fmt.Fprintf(&s, "%02X%02X%02X%02X", b[w+3], b[w+2], b[w+1], b[w])
	}
	return s.String()
}
