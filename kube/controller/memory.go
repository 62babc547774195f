package controller

import (
	"encoding/base64"
	"encoding/json"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/swell-run/swell/autoscaler"
	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/pkg/service"
)

var _ autoscaler.MemoryStore = (*Backend)(nil)

// maxMemoryText bounds the memory read from an annotation: the base64 of
// the decider's largest memory, with room to spare. A longer one (which
// only a hand could have written) is not read.
const maxMemoryText = 2048

// Recall implements autoscaler.MemoryStore from the Deployment's status
// annotation in the cache: the memory the leader before kept there, or
// this one before a restart.
func (c *Backend) Recall(key service.Key) []byte {
	d, err := c.deployment(key)
	if err != nil {
		return nil
	}
	return annotatedMemory(d)
}

// annotatedMemory is the memory in d's status annotation, or nil.
func annotatedMemory(d *appsv1.Deployment) []byte {
	text := d.Annotations[kube.AnnotationStatus]
	if text == "" || len(text) > 64<<10 {
		return nil
	}
	var a struct {
		Memory string `json:"memory"`
	}
	if json.Unmarshal([]byte(text), &a) != nil || a.Memory == "" || len(a.Memory) > maxMemoryText {
		return nil
	}
	mem, err := base64.StdEncoding.DecodeString(a.Memory)
	if err != nil {
		return nil
	}
	return mem
}

// Keep implements autoscaler.MemoryStore: it holds the memory for the
// status annotation, which the controller writes as it writes the rest of
// it (a metadata merge patch, nothing written while unchanged), and tells
// the controller. It does not block.
func (c *Backend) Keep(key service.Key, mem []byte) {
	c.mu.Lock()
	if c.memories == nil {
		c.memories = make(map[service.Key][]byte)
	}
	c.memories[key] = mem
	c.mu.Unlock()
	c.changed(key)
}

// memoryText is the base64 memory the status annotation of d should hold:
// the one kept last, or else the one it holds (a new leader has kept none
// yet and must not erase it).
func (c *Backend) memoryText(key service.Key, d *appsv1.Deployment) string {
	c.mu.Lock()
	mem, ok := c.memories[key]
	c.mu.Unlock()
	if !ok {
		mem = annotatedMemory(d)
	}
	if mem == nil {
		return ""
	}
	return base64.StdEncoding.EncodeToString(mem)
}

// forget drops what was kept for a service gone from the loop.
func (c *Backend) forget(key service.Key) {
	c.mu.Lock()
	delete(c.memories, key)
	c.mu.Unlock()
}
