package main

import (
	"context"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"testing"

	"github.com/swell-run/swell/hack/cluster/controlplane"
	"github.com/swell-run/swell/hack/cluster/pki"
)

func TestImageFlag(t *testing.T) {
	f := newImageFlag("BINARY", "swell/hello=/path/to/hello")
	if err := f.Set("swell/hello=/bin/hello"); err != nil {
		t.Fatal(err)
	}
	if f.m["swell/hello"] != "/bin/hello" {
		t.Errorf("images = %v", f)
	}
	for _, bad := range []string{"swell/hello", "=/bin/x", "swell/x=", "swell/x:v1=/bin/x", "swell/hello=/bin/other"} {
		if err := f.Set(bad); err == nil {
			t.Errorf("Set(%q) succeeded, want an error", bad)
		}
	}
	u := newImageFlag("PACKAGE", "swell/autoscaler=./cmd/autoscaler")
	if err := u.Set("swell/autoscaler"); err == nil || !strings.Contains(err.Error(), "IMAGE=PACKAGE") {
		t.Errorf("--unbuilt-image without a package: %v, want an error asking for IMAGE=PACKAGE", err)
	}
}

func TestNodeUnbuiltImageFlag(t *testing.T) {
	err := run(context.Background(), []string{"node", "--unbuilt-image", "swell/autoscaler"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), "swell/autoscaler=./cmd/autoscaler") {
		t.Errorf("node --unbuilt-image swell/autoscaler: %v, want an error with an example", err)
	}
}

func TestUnknownCommand(t *testing.T) {
	err := run(context.Background(), []string{"start"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), "want build, up, down, exec, e2e or node") {
		t.Errorf("run(start) = %v, want an error listing the commands", err)
	}
}

func TestBadClusterName(t *testing.T) {
	for _, cmd := range []string{"up", "down"} {
		err := run(context.Background(), []string{cmd, "--name", "My-Cluster"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err == nil || !strings.Contains(err.Error(), "lowercase") {
			t.Errorf("%s --name My-Cluster: %v, want an error saying what names are accepted", cmd, err)
		}
	}
}

func TestNodeRequiresFlags(t *testing.T) {
	err := run(context.Background(), []string{"node", "--kubeconfig", "k", "--scheduler-kubeconfig", "s", "--cluster-netns", "n", "--state", "d"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), "--node-name is required") {
		t.Errorf("node without --node-name: %v", err)
	}
}

func TestNodeArgs(t *testing.T) {
	c := &controlplane.Cluster{State: controlplane.State{
		Netns: "swell-dev",
		PKI: pki.Files{
			Node:      pki.Client{Kubeconfig: "/s/node.kubeconfig"},
			Scheduler: pki.Client{Kubeconfig: "/s/scheduler.kubeconfig"},
		},
	}}
	got := strings.Join(nodeArgs("/bin/swell-cluster", "swell-node", c, "/s", map[string]string{
		"swell/shell": "/bin/sh", "swell/hello": "/s/bin/hello",
	}, map[string]string{"swell/autoscaler": "./cmd/autoscaler"}), " ")
	want := "/bin/swell-cluster node --kubeconfig /s/node.kubeconfig --scheduler-kubeconfig /s/scheduler.kubeconfig" +
		" --node-name swell-node --cluster-netns swell-dev --bridge swbr0 --pod-cidr 198.18.0.0/16 --gateway 198.18.0.1" +
		" --state /s/node --image swell/hello=/s/bin/hello --image swell/shell=/bin/sh --unbuilt-image swell/autoscaler=./cmd/autoscaler"
	if got != want {
		t.Errorf("nodeArgs =\n%s\nwant\n%s", got, want)
	}
}

func TestExitStatus(t *testing.T) {
	err := exitStatus(exec.Command("/bin/sh", "-c", "exit 3").Run())
	if e, ok := err.(exitError); !ok || e.code != 3 {
		t.Errorf("exitStatus = %v, want exit status 3", err)
	}
	if err := exitStatus(nil); err != nil {
		t.Errorf("exitStatus(nil) = %v", err)
	}
}
