package netns

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

func testName(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	if _, err := exec.LookPath(IP); err != nil {
		t.Skipf("iproute2 is not installed: %v", err)
	}
	b := make([]byte, 4)
	rand.Read(b)
	name := "swell-test-" + hex.EncodeToString(b)
	t.Cleanup(func() {
		if err := Delete(context.Background(), name); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return name
}

func TestCreateDelete(t *testing.T) {
	ctx := context.Background()
	name := testName(t)
	if err := Create(ctx, name); err != nil {
		t.Fatal(err)
	}
	names, err := List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(names, name) {
		t.Fatalf("List() = %v, want it to contain %s", names, name)
	}

	out, err := Exec(name, IP, "-o", "addr", "show").CombinedOutput()
	if err != nil {
		t.Fatalf("ip addr in %s: %v: %s", name, err, out)
	}
	for _, want := range []string{"lo    inet 127.0.0.1/8", "lo    inet " + AdvertiseAddress + "/32", Bridge + "    inet " + Gateway + "/16", Bridge + "    inet6 " + GatewayV6 + "/64 scope global nodad"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("addresses in %s lack %q:\n%s", name, want, out)
		}
	}
	out, err = Exec(name, IP, "-o", "link", "show", Bridge).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "state UP") && !strings.Contains(string(out), ",UP") {
		t.Errorf("bridge %s is not up: %v: %s", Bridge, err, out)
	}

	for _, r := range []struct{ clusterIP, src string }{{KubernetesServiceIP, Gateway}, {"fd00:10:96::a", GatewayV6}} {
		out, err = Exec(name, IP, "route", "get", r.clusterIP).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "dev "+Bridge+" src "+r.src) {
			t.Errorf("route to the ClusterIP %s in %s: %v: %s; want it through %s from %s", r.clusterIP, name, err, out, Bridge, r.src)
		}
	}
	for _, key := range forwarding {
		out, err = Exec(name, "cat", "/proc/sys/"+key).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "1" {
			t.Errorf("%s in %s: %q %v, want 1", key, name, out, err)
		}
	}
	// The namespace's processes see the host's mounts: what the kubelet
	// mounts, containerd must see.
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	out, err = Exec(name, "readlink", "/proc/self/ns/mnt").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != self {
		t.Errorf("mount namespace inside %s: %q %v; want the host's %s", name, out, err, self)
	}

	if err := Create(ctx, name); err == nil {
		t.Error("Create of an existing namespace succeeded, want an error")
	}

	if err := Delete(ctx, name); err != nil {
		t.Fatal(err)
	}
	names, _ = List(ctx)
	if slices.Contains(names, name) {
		t.Fatalf("namespace %s still listed after Delete: %v", name, names)
	}
	if err := Delete(ctx, name); err != nil {
		t.Errorf("Delete of a missing namespace: %v, want nil", err)
	}
}

// TestDialer checks that a listener inside the namespace is reachable
// through Dialer and not from the test's own namespace.
func TestDialer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	name := testName(t)
	if err := Create(ctx, name); err != nil {
		t.Fatal(err)
	}
	// A listener opened through the same thread switch, so it lives inside.
	ln := listenIn(t, name)
	defer ln.Close()
	addr := ln.Addr().String()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Write([]byte("hi"))
			c.Close()
		}
	}()

	conn, err := Dialer(name)(ctx, "tcp", addr)
	if err != nil {
		t.Fatalf("dial %s inside %s: %v", addr, name, err)
	}
	buf := make([]byte, 2)
	if _, err := conn.Read(buf); err != nil || string(buf) != "hi" {
		t.Errorf("read = %q, %v; want \"hi\"", buf, err)
	}
	conn.Close()

	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		// Only a coincidence of ports could connect; make sure it is not ours.
		c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if n, _ := c.Read(buf); n > 0 && string(buf) == "hi" {
			t.Errorf("listener inside %s reachable from outside at %s", name, addr)
		}
		c.Close()
	}
}

func TestDialerMissingNamespace(t *testing.T) {
	_, err := Dialer("swell-no-such-namespace")(context.Background(), "tcp", "127.0.0.1:1")
	if err == nil || !strings.Contains(err.Error(), "swell-no-such-namespace") {
		t.Errorf("err = %v, want one naming the namespace", err)
	}
}
