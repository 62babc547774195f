package controlplane

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	// The command name may hold spaces and parentheses.
	line := "4242 (kube (api) server) Z 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 9 0 987654 1000 10 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	st, err := parseStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if st.state != 'Z' || st.startTime != 987654 {
		t.Errorf("parseStat = state %c start %d, want Z 987654", st.state, st.startTime)
	}
	for _, bad := range []string{"", "1 (x", "1 (x) R 1 2"} {
		if _, err := parseStat([]byte(bad)); err == nil {
			t.Errorf("parseStat(%q) succeeded, want an error", bad)
		}
	}
}

func startProcess(t *testing.T, script string) (*exec.Cmd, Process) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	// Wait until the shell has run its script up to exec, so its traps are
	// in place.
	deadline := time.Now().Add(5 * time.Second)
	for {
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", cmd.Process.Pid))
		if err == nil && strings.TrimSpace(string(comm)) == "sleep" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q never exec'd sleep: %v %q", script, err, comm)
		}
		time.Sleep(5 * time.Millisecond)
	}
	st, err := readStat(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return cmd, Process{Name: "test", PID: cmd.Process.Pid, StartTime: st.startTime}
}

func TestAliveTreatsZombiesAsGone(t *testing.T) {
	cmd, p := startProcess(t, "exec sleep 60")
	if !p.Alive() {
		t.Fatal("a running process is not Alive")
	}
	cmd.Process.Kill()
	// Not reaped yet: a zombie, which kill -0 still finds.
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := readStat(p.PID)
		if err == nil && st.state == 'Z' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("process never became a zombie: %v %+v", err, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if p.Alive() {
		t.Error("a zombie is Alive")
	}
}

func TestAliveRejectsReusedPID(t *testing.T) {
	_, p := startProcess(t, "exec sleep 60")
	p.StartTime++ // as if the PID now belonged to a later process
	if p.Alive() {
		t.Error("a process with another start time is Alive")
	}
}

func TestTerminate(t *testing.T) {
	_, p := startProcess(t, "exec sleep 60")
	if err := terminate(context.Background(), p, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if p.Alive() {
		t.Error("process alive after terminate")
	}
}

func TestTerminateKillsAfterGrace(t *testing.T) {
	// SIGTERM stays ignored across exec.
	_, p := startProcess(t, `trap "" TERM; exec sleep 60`)
	start := time.Now()
	if err := terminate(context.Background(), p, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if p.Alive() {
		t.Error("process ignoring SIGTERM alive after terminate")
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("terminate took %v: SIGKILL before the grace period ended", took)
	}
}

func TestRSS(t *testing.T) {
	_, p := startProcess(t, "exec sleep 60")
	rss, err := p.RSS()
	if err != nil {
		t.Fatal(err)
	}
	if rss <= 0 || rss > 1<<30 {
		t.Errorf("RSS of sleep = %d bytes, want a small positive number", rss)
	}
}

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"dev", "e2e3f9a1", "a"} {
		if err := ValidateName(ok); err != nil {
			t.Errorf("ValidateName(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "Dev", "my-cluster", "1abc", "a_b", strings.Repeat("a", 21)} {
		if err := ValidateName(bad); err == nil || !strings.Contains(err.Error(), "lowercase") {
			t.Errorf("ValidateName(%q) = %v, want an error saying what is accepted", bad, err)
		}
	}
}

func TestPortsValidate(t *testing.T) {
	if err := DefaultPorts().validate(); err != nil {
		t.Errorf("default ports: %v", err)
	}
	p := DefaultPorts()
	p.EtcdPeer = p.EtcdClient
	if err := p.validate(); err == nil || !strings.Contains(err.Error(), "distinct") {
		t.Errorf("duplicate ports: %v, want an error", err)
	}
	p = DefaultPorts()
	p.APIServer = 70000
	if err := p.validate(); err == nil || !strings.Contains(err.Error(), "1-65535") {
		t.Errorf("port 70000: %v, want an error", err)
	}
}

func TestCleanEnv(t *testing.T) {
	got := cleanEnv([]string{"PATH=/bin", "ETCD_NAME=x", "ETCD_DATA_DIR=/y", "MY_ETCD_X=1"})
	if strings.Join(got, " ") != "PATH=/bin MY_ETCD_X=1" {
		t.Errorf("cleanEnv = %v", got)
	}
}
