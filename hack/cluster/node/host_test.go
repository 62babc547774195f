package node

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// fakeHost points the host's files at a directory of the test's own: a
// /proc/sys with the kubelet's settings, one cgroup v1 hierarchy, a
// mountinfo listing it, the host record and one fixed directory.
func fakeHost(t *testing.T) (root string) {
	t.Helper()
	root = t.TempDir()
	saved := []any{procSys, cgroupFS, mountInfo, hostRecordPath, hostDirs}
	t.Cleanup(func() {
		procSys, cgroupFS, mountInfo, hostRecordPath, hostDirs = saved[0].(string), saved[1].(string), saved[2].(string), saved[3].(string), saved[4].([]string)
	})
	procSys = filepath.Join(root, "proc/sys")
	cgroupFS = filepath.Join(root, "cgroup")
	mountInfo = filepath.Join(root, "mountinfo")
	hostRecordPath = filepath.Join(root, "run/host.json")
	hostDirs = []string{filepath.Join(root, "var/lib/kubelet")}
	for _, k := range kubeletSysctls {
		write(t, filepath.Join(procSys, k), "0")
	}
	write(t, filepath.Join(cgroupFS, "pids/cgroup.procs"), "")
	write(t, mountInfo, "30 1 0:26 / "+cgroupFS+"/pids rw,relatime shared:9 - cgroup cgroup rw,pids\n"+
		"31 1 0:27 / "+cgroupFS+"/unified rw - cgroup2 cgroup2 rw\n")
	return root
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestHostRestoredByTheLastNode: the settings from before the first node
// come back when the last node goes, not before, with the directories the
// nodes created.
func TestHostRestoredByTheLastNode(t *testing.T) {
	fakeHost(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	panicKey := filepath.Join(procSys, "kernel/panic")
	write(t, panicKey, "1")

	// Two nodes start; the kubelet changes the setting and makes its
	// directory in between.
	if err := recordHost(); err != nil {
		t.Fatal(err)
	}
	write(t, panicKey, "10")
	write(t, filepath.Join(hostDirs[0], "device-plugins/kubelet.sock"), "")
	if err := recordHost(); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"/swell-a", "/swell-b"} {
		if err := createCgroupRoot(n); err != nil {
			t.Fatal(err)
		}
	}
	if roots, err := nodeCgroupRoots(); err != nil || len(roots) != 2 {
		t.Fatalf("nodeCgroupRoots = %v %v, want two", roots, err)
	}

	// The first goes: the other node still runs.
	if _, err := removeCgroupRoot(context.Background(), "/swell-a"); err != nil {
		t.Fatal(err)
	}
	if err := restoreHost(log); err != nil {
		t.Fatal(err)
	}
	if got := read(t, panicKey); got != "10" {
		t.Errorf("kernel.panic = %s while another node runs, want the kubelet's 10 kept", got)
	}

	// The last goes.
	if _, err := removeCgroupRoot(context.Background(), "/swell-b"); err != nil {
		t.Fatal(err)
	}
	if err := restoreHost(log); err != nil {
		t.Fatal(err)
	}
	if got := read(t, panicKey); got != "1" {
		t.Errorf("kernel.panic = %s after the last node, want 1, as before the first", got)
	}
	for _, p := range []string{hostRecordPath, hostDirs[0]} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s remains after the last node", p)
		}
	}
	// Nothing to restore is no error.
	if err := restoreHost(log); err != nil {
		t.Errorf("restoreHost without a record: %v", err)
	}
}

func TestHostDirThatExistedStays(t *testing.T) {
	fakeHost(t)
	write(t, filepath.Join(hostDirs[0], "mine"), "")
	if err := recordHost(); err != nil {
		t.Fatal(err)
	}
	if err := restoreHost(slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(hostDirs[0], "mine")); err != nil {
		t.Errorf("a directory that was there before the node was removed: %v", err)
	}
}

func TestCgroupRootCopiesCpuset(t *testing.T) {
	fakeHost(t)
	write(t, mountInfo, "30 1 0:26 / "+cgroupFS+"/cpuset rw - cgroup cgroup rw,cpuset\n")
	write(t, filepath.Join(cgroupFS, "cpuset/cpuset.cpus"), "0-1\n")
	write(t, filepath.Join(cgroupFS, "cpuset/cpuset.mems"), "0\n")
	if err := createCgroupRoot("/swell-x"); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(cgroupFS, "cpuset/swell-x/cpuset.cpus")); got != "0-1" {
		t.Errorf("cpuset.cpus of the node's root = %q, want the hierarchy's 0-1", got)
	}
}

func TestNoCgroupV1(t *testing.T) {
	fakeHost(t)
	write(t, mountInfo, "31 1 0:27 / "+cgroupFS+" rw - cgroup2 cgroup2 rw\n")
	if _, err := hierarchies(); err == nil || !strings.Contains(err.Error(), "cgroups v1") {
		t.Errorf("hierarchies on a cgroup v2 host: %v, want an error saying the node needs cgroups v1", err)
	}
}

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		`/a/b`:           "/a/b",
		`/with\040space`: "/with space",
		`/tab\011x\134`:  "/tab\tx\\",
		`/odd\04`:        `/odd\04`,
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestUnmountUnder mounts two tmpfs, one over the other, below a
// directory and one beside it: both below go, the one beside stays.
func TestUnmountUnder(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	root := t.TempDir()
	dir, beside := filepath.Join(root, "node"), filepath.Join(root, "node2")
	for _, p := range []string{filepath.Join(dir, "a"), filepath.Join(dir, "a", "b"), beside} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mount("tmpfs", p, "tmpfs", 0, ""); err != nil {
			t.Skipf("mount tmpfs: %v", err)
		}
		t.Cleanup(func() { syscall.Unmount(p, syscall.MNT_DETACH) })
	}
	n, err := unmountUnder(dir)
	if err != nil || n != 2 {
		t.Fatalf("unmountUnder = %d, %v; want 2 unmounted", n, err)
	}
	mounts, err := readMounts()
	if err != nil {
		t.Fatal(err)
	}
	var below, besides int
	for _, m := range mounts {
		if strings.HasPrefix(m.point, dir+"/") {
			below++
		}
		if m.point == beside {
			besides++
		}
	}
	if below != 0 || besides != 1 {
		t.Errorf("after unmountUnder: %d mounts below %s, %d at %s; want 0 and 1", below, dir, besides, beside)
	}
}
