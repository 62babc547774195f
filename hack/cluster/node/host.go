package node

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// What a kubelet changes on the host outside its own directories, and the
// harness puts back when the last node on the machine goes.
var (
	// kubeletSysctls are the kernel settings the kubelet sets at start
	// (vm.overcommit_memory=1, kernel.panic=10, kernel.panic_on_oops=1,
	// ...), under /proc/sys.
	kubeletSysctls = []string{
		"vm/overcommit_memory",
		"vm/panic_on_oom",
		"kernel/panic",
		"kernel/panic_on_oops",
		"kernel/keys/root_maxkeys",
		"kernel/keys/root_maxbytes",
	}
	// hostDirs are the directories a kubelet or containerd creates at fixed
	// paths whatever their configuration: the device plugins' socket
	// directory, the container log links, the shims' sockets, the CNI
	// plugins' cache of results.
	hostDirs = []string{"/var/lib/kubelet", "/var/log/containers", "/run/containerd", "/var/lib/cni"}
)

// Sysctl and cgroup file systems, variables for tests.
var (
	procSys   = "/proc/sys"
	cgroupFS  = "/sys/fs/cgroup"
	mountInfo = "/proc/self/mountinfo"
	// hostRecordPath holds what the host was like before the first node on
	// it started. /run is cleared at boot, as are the settings it records.
	hostRecordPath = "/run/swell-cluster/host.json"
)

// hostRecord is the host as it was before the first of the nodes now on it.
type hostRecord struct {
	Sysctls map[string]string `json:"sysctls"`
	// Absent are the hostDirs that did not exist then.
	Absent []string `json:"absent"`
}

// recordHost writes the host record, unless another node on the machine
// already did: its record holds the settings from before any node.
func recordHost() error {
	rec := hostRecord{Sysctls: map[string]string{}}
	for _, k := range kubeletSysctls {
		b, err := os.ReadFile(filepath.Join(procSys, k))
		if err != nil {
			return fmt.Errorf("record host settings: %w", err)
		}
		rec.Sysctls[k] = strings.TrimSpace(string(b))
	}
	for _, d := range hostDirs {
		if _, err := os.Lstat(d); errors.Is(err, fs.ErrNotExist) {
			rec.Absent = append(rec.Absent, d)
		}
	}
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(hostRecordPath), 0o700); err != nil {
		return fmt.Errorf("record host settings: %w", err)
	}
	f, err := os.OpenFile(hostRecordPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("record host settings: %w", err)
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("record host settings: %w", err)
	}
	return f.Close()
}

// restoreHost puts back what the record holds and removes it, once no
// other node is on the machine (no other node's cgroup root remains).
func restoreHost(log *slog.Logger) error {
	others, err := nodeCgroupRoots()
	if err != nil {
		return err
	}
	if len(others) > 0 {
		log.Info("host settings left as they are: other nodes run on this machine", "cgroupRoots", others)
		return nil
	}
	b, err := os.ReadFile(hostRecordPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var rec hostRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return fmt.Errorf("host record %s: %w", hostRecordPath, err)
	}
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(rec.Sysctls)) {
		p := filepath.Join(procSys, k)
		if cur, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(cur)) == rec.Sysctls[k] {
			continue
		}
		if err := os.WriteFile(p, []byte(rec.Sysctls[k]), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore %s: %w", p, err))
			continue
		}
		log.Info("restored kernel setting", "sysctl", strings.ReplaceAll(k, "/", "."), "value", rec.Sysctls[k])
	}
	for _, d := range rec.Absent {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		errs = append(errs, os.Remove(hostRecordPath))
		// The directory goes too, unless something else is in it.
		_ = os.Remove(filepath.Dir(hostRecordPath))
	}
	return errors.Join(errs...)
}

// hierarchies lists the mount points of the cgroup v1 hierarchies.
func hierarchies() ([]string, error) {
	mounts, err := readMounts()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range mounts {
		if m.fstype == "cgroup" && strings.HasPrefix(m.point, cgroupFS+"/") {
			out = append(out, m.point)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no cgroup v1 hierarchy is mounted under %s: the node runs with cgroups v1 only", cgroupFS)
	}
	return out, nil
}

// createCgroupRoot creates root in every hierarchy: the kubelet checks it
// exists and puts its kubepods below it. A cpuset starts with no CPU and
// no memory node, so root's are copied from the hierarchy's.
func createCgroupRoot(root string) error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		dir := filepath.Join(h, root)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			v, err := os.ReadFile(filepath.Join(h, f))
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
				return fmt.Errorf("cgroup %s: %w", dir, err)
			}
		}
	}
	return nil
}

// removeCgroupRoot kills every process left below root and removes its
// cgroups, deepest first, in every hierarchy. It returns how many
// processes it killed.
func removeCgroupRoot(ctx context.Context, root string) (int, error) {
	hs, err := hierarchies()
	if err != nil {
		return 0, err
	}
	killed := map[int]bool{}
	var errs []error
	for _, h := range hs {
		top := filepath.Join(h, root)
		var dirs []string
		err := filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, d := range dirs {
			for _, pid := range cgroupProcs(d) {
				if !killed[pid] {
					killed[pid] = true
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		slices.Reverse(dirs)
		for _, d := range dirs {
			if err := rmdirWhenEmpty(ctx, d); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return len(killed), errors.Join(errs...)
}

func cgroupProcs(dir string) []int {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// rmdirWhenEmpty removes the cgroup dir once the processes killed in it
// are gone, bounded.
func rmdirWhenEmpty(ctx context.Context, dir string) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("remove cgroup %s: %w (processes %v)", dir, err, cgroupProcs(dir))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// nodeCgroupRoots lists the cgroup roots of the nodes on this machine, as
// found in the first hierarchy.
func nodeCgroupRoots() ([]string, error) {
	hs, err := hierarchies()
	if err != nil {
		return nil, err
	}
	matches, err := filepath.Glob(filepath.Join(hs[0], "swell-*"))
	if err != nil {
		return nil, err
	}
	var roots []string
	for _, m := range matches {
		roots = append(roots, "/"+filepath.Base(m))
	}
	return roots, nil
}

// mount is one line of /proc/self/mountinfo.
type mount struct{ point, fstype string }

func readMounts() ([]mount, error) {
	f, err := os.Open(mountInfo)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mount
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// ID parent major:minor root point options [optional...] - fstype source super
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if len(fields) < 5 || sep < 0 || sep+1 >= len(fields) {
			continue
		}
		out = append(out, mount{point: unescapeMount(fields[4]), fstype: fields[sep+1]})
	}
	return out, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountUnder unmounts every mount at or below dir, deepest first (a
// mount may hide another under it, so this repeats until none is left).
// It returns how many it unmounted.
func unmountUnder(dir string) (int, error) {
	n := 0
	for range 10 {
		mounts, err := readMounts()
		if err != nil {
			return n, err
		}
		var points []string
		for _, m := range mounts {
			if m.point == dir || strings.HasPrefix(m.point, dir+"/") {
				points = append(points, m.point)
			}
		}
		if len(points) == 0 {
			return n, nil
		}
		slices.SortFunc(points, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
		for _, p := range slices.Compact(points) {
			if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
				return n, fmt.Errorf("unmount %s: %w", p, err)
			}
			n++
		}
	}
	return n, fmt.Errorf("mounts below %s remain after 10 rounds of unmounting", dir)
}

// removeLogLinks removes the kubelet's links in /var/log/containers to
// the container logs under pods.
func removeLogLinks(pods string) error {
	entries, err := os.ReadDir("/var/log/containers")
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		p := filepath.Join("/var/log/containers", e.Name())
		if target, err := os.Readlink(p); err == nil && strings.HasPrefix(target, pods+"/") {
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
