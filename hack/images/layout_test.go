package images

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
)

func randomIndex(t *testing.T) v1.ImageIndex {
	t.Helper()
	idx, err := random.Index(64, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

func TestLayoutNamesTheImage(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "activator")
	idx := randomIndex(t)
	const ref = "ghcr.io/swell-run/activator:v1"
	if err := WriteLayout(dir, ref, idx); err != nil {
		t.Fatal(err)
	}

	// What `ctr images import` reads: index.json, one index, named.
	data, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var top v1.IndexManifest
	if err := json.Unmarshal(data, &top); err != nil {
		t.Fatal(err)
	}
	want, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if len(top.Manifests) != 1 || top.Manifests[0].Digest != want {
		t.Fatalf("index.json lists %+v, want the one index %s", top.Manifests, want)
	}
	for _, k := range []string{"org.opencontainers.image.ref.name", "io.containerd.image.name"} {
		if got := top.Manifests[0].Annotations[k]; got != ref {
			t.Errorf("annotation %s = %q, want %q", k, got, ref)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
		t.Error(err)
	}

	gotRef, got, err := ReadLayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := got.Digest(); err != nil || d != want || gotRef != ref {
		t.Errorf("ReadLayout = %s, %s (%v); want %s, %s", gotRef, d, err, ref, want)
	}
}

func TestLayoutReplacesOnlyALayout(t *testing.T) {
	dir := t.TempDir()
	layoutDir := filepath.Join(dir, "layout")
	first, second := randomIndex(t), randomIndex(t)
	if err := WriteLayout(layoutDir, "a:1", first); err != nil {
		t.Fatal(err)
	}
	if err := WriteLayout(layoutDir, "a:2", second); err != nil {
		t.Fatal(err)
	}
	ref, idx, err := ReadLayout(layoutDir)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := second.Digest()
	if d, _ := idx.Digest(); d != want || ref != "a:2" {
		t.Errorf("after a second write the layout holds %s %s, want a:2 %s", ref, d, want)
	}
	// No blob of the first build stays behind.
	old, _ := first.Digest()
	if _, err := os.Stat(filepath.Join(layoutDir, "blobs", old.Algorithm, old.Hex)); err == nil {
		t.Error("the first index's blob is still in the layout")
	}

	other := filepath.Join(dir, "other")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteLayout(other, "a:1", first); err == nil || !strings.Contains(err.Error(), "holds no OCI layout") {
		t.Errorf("WriteLayout into a directory of other files = %v, want a refusal", err)
	}
	if _, err := os.Stat(filepath.Join(other, "notes.txt")); err != nil {
		t.Errorf("WriteLayout touched a file that is not its own: %v", err)
	}
}
