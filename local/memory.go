package local

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"go.uber.org/zap"

	"github.com/swell-run/swell/autoscaler"
	"github.com/swell-run/swell/pkg/service"
)

// maxMemoryFile bounds a memory file read back: the decider's memories are
// well under a kilobyte.
const maxMemoryFile = 4 << 10

// memoryStore is swell local's autoscaler.MemoryStore: a file per service
// in a directory, <namespace>.<name>.memory, so that what the services'
// policies learned survives a restart of swell local. Keep hands the
// memory to a writer goroutine (Run) and returns at once.
type memoryStore struct {
	dir string
	log *zap.Logger

	mu      sync.Mutex
	pending map[service.Key][]byte
	wake    chan struct{}
	// flushing orders the flushes, so that a newer memory is never
	// overwritten by an older one written late.
	flushing sync.Mutex
}

var _ autoscaler.MemoryStore = (*memoryStore)(nil)

func newMemoryStore(dir string, log *zap.Logger) (*memoryStore, error) {
	if !filepath.IsAbs(dir) {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return nil, err
		}
		dir = abs
	}
	return &memoryStore{dir: dir, log: log, pending: map[service.Key][]byte{}, wake: make(chan struct{}, 1)}, nil
}

func (m *memoryStore) path(key service.Key) string {
	// Both parts are DNS labels: no separators, no dots of their own.
	return filepath.Join(m.dir, key.Namespace+"."+key.Name+".memory")
}

// Recall implements autoscaler.MemoryStore.
func (m *memoryStore) Recall(key service.Key) []byte {
	f, err := os.Open(m.path(key))
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			m.log.Warn("read a service's memory", zap.Stringer("service", key), zap.Error(err))
		}
		return nil
	}
	defer f.Close()
	b := make([]byte, maxMemoryFile+1)
	n, _ := f.Read(b)
	if n == 0 || n > maxMemoryFile {
		return nil
	}
	return b[:n]
}

// Keep implements autoscaler.MemoryStore.
func (m *memoryStore) Keep(key service.Key, mem []byte) {
	m.mu.Lock()
	m.pending[key] = mem
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// run writes kept memories until ctx ends, then what is still pending.
func (m *memoryStore) run(ctx context.Context) {
	for {
		select {
		case <-m.wake:
			m.flush()
		case <-ctx.Done():
			m.flush()
			return
		}
	}
}

func (m *memoryStore) flush() {
	m.flushing.Lock()
	defer m.flushing.Unlock()
	m.mu.Lock()
	batch := m.pending
	m.pending = map[service.Key][]byte{}
	m.mu.Unlock()
	for key, mem := range batch {
		if err := writeAtomic(m.path(key), mem); err != nil {
			m.log.Warn("keep a service's memory", zap.Stringer("service", key), zap.Error(err))
		}
	}
}

// writeAtomic replaces path's content at once: a crash leaves the old
// memory or the new, never half of one.
func writeAtomic(path string, b []byte) error {
	// The directory is made on the first memory: a run that learns
	// nothing leaves nothing behind.
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".memory-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// memoryOrNil keeps a nil *memoryStore from becoming a non-nil interface.
func memoryOrNil(m *memoryStore) autoscaler.MemoryStore {
	if m == nil {
		return nil
	}
	return m
}
