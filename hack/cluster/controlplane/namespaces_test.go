package controlplane

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/swell-run/swell/hack/cluster/netns"
)

func TestDeleteNamespaces(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	ctx := context.Background()
	b := make([]byte, 4)
	rand.Read(b)
	name := "t" + hex.EncodeToString(b)
	cluster, other := Netns(name), Netns(name+"x")
	for _, ns := range []string{cluster, other} {
		if err := netns.Create(ctx, ns); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { netns.Delete(context.Background(), ns) })
	}
	// A process left inside the cluster's namespace.
	cmd := netns.Exec(cluster, "sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	// Wait until it is inside (nsenter has exec'd sleep).
	deadline := time.Now().Add(5 * time.Second)
	for {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", cmd.Process.Pid))
		if string(comm) == "sleep\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sleep never started inside %s", cluster)
		}
		time.Sleep(5 * time.Millisecond)
	}
	st, _ := readStat(cmd.Process.Pid)
	p := Process{Name: "sleep", PID: cmd.Process.Pid, StartTime: st.startTime}

	if err := DeleteNamespaces(ctx, name, nil); err != nil {
		t.Fatal(err)
	}
	if p.Alive() {
		t.Error("process inside the cluster's namespace survived")
	}
	names, err := netns.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(names, cluster) {
		t.Errorf("%s not deleted", cluster)
	}
	if !slices.Contains(names, other) {
		t.Errorf("%s, another cluster's namespace, was deleted", other)
	}
}
