package main

import (
	"context"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"testing"
)

func TestUnknownCommand(t *testing.T) {
	err := run(context.Background(), []string{"start"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), "want build, up, down, exec or e2e") {
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

func TestExitStatus(t *testing.T) {
	err := exitStatus(exec.Command("/bin/sh", "-c", "exit 3").Run())
	if e, ok := err.(exitError); !ok || e.code != 3 {
		t.Errorf("exitStatus = %v, want exit status 3", err)
	}
	if err := exitStatus(nil); err != nil {
		t.Errorf("exitStatus(nil) = %v", err)
	}
}
