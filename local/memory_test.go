package local

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap"

	"github.com/swell-run/swell/pkg/service"
)

func TestMemoryStoreKeepsAcrossRuns(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	k := service.Key{Namespace: "default", Name: "hello"}
	m, err := newMemoryStore(dir, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if m.Recall(k) != nil {
		t.Fatal("recalled a memory before any was kept")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the directory exists before anything was kept: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.run(ctx); close(done) }()
	m.Keep(k, []byte{1, 2, 3})
	m.Keep(k, []byte{1, 2, 4}) // the newest wins
	cancel()
	<-done

	// A new run reads it back.
	m2, err := newMemoryStore(dir, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if got := m2.Recall(k); !bytes.Equal(got, []byte{1, 2, 4}) {
		t.Errorf("recalled %x, want 010204", got)
	}
	// A file too large to be a memory is not read.
	if err := os.WriteFile(m2.path(k), make([]byte, maxMemoryFile+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := m2.Recall(k); got != nil {
		t.Errorf("recalled %d bytes from an oversized file", len(got))
	}
	// Nothing but the memory file is left behind.
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "default.hello.memory" {
		t.Errorf("state directory holds %v", entries)
	}
}
