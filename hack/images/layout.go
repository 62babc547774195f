package images

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The annotations that name an image in an OCI layout: the OCI one, and
// the one containerd's `ctr images import` names the image by.
const (
	RefNameAnnotation    = "org.opencontainers.image.ref.name"
	ContainerdAnnotation = "io.containerd.image.name"
)

// layoutFiles are what an OCI image layout holds at its top.
var layoutFiles = []string{"oci-layout", "index.json", "blobs"}

// WriteLayout writes idx as the one image of an OCI image layout at dir,
// named ref (such as "ghcr.io/swell-run/activator:v1"), so that `ctr images
// import` of a tar of dir imports it under that name. An OCI layout
// already at dir is replaced; a directory holding anything else is left
// alone and an error returned.
func WriteLayout(dir string, ref string, idx v1.ImageIndex) error {
	if err := clearLayout(dir); err != nil {
		return err
	}
	top := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), mutate.IndexAddendum{
		Add: idx,
		Descriptor: v1.Descriptor{Annotations: map[string]string{
			RefNameAnnotation:    ref,
			ContainerdAnnotation: ref,
		}},
	})
	if _, err := layout.Write(dir, top); err != nil {
		return fmt.Errorf("write OCI layout %s: %w", dir, err)
	}
	return nil
}

// ReadLayout returns the image index of the OCI layout WriteLayout wrote
// at dir, and the name it has there.
func ReadLayout(dir string) (ref string, idx v1.ImageIndex, err error) {
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return "", nil, fmt.Errorf("read OCI layout %s: %w", dir, err)
	}
	m, err := top.IndexManifest()
	if err != nil {
		return "", nil, fmt.Errorf("read OCI layout %s: %w", dir, err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].MediaType != types.OCIImageIndex {
		return "", nil, fmt.Errorf("OCI layout %s: want one image index in index.json, have %d manifests", dir, len(m.Manifests))
	}
	d := m.Manifests[0]
	ref = d.Annotations[RefNameAnnotation]
	if ref == "" {
		return "", nil, fmt.Errorf("OCI layout %s: the image index has no %s annotation", dir, RefNameAnnotation)
	}
	idx, err = top.ImageIndex(d.Digest)
	if err != nil {
		return "", nil, fmt.Errorf("read OCI layout %s: %w", dir, err)
	}
	return ref, idx, nil
}

// clearLayout empties dir of a previous OCI layout, so that no blob of an
// older build stays behind, and makes sure it holds nothing else.
func clearLayout(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(entries) == 0 {
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
		return fmt.Errorf("write OCI layout %s: the directory is not empty and holds no OCI layout", dir)
	}
	for _, e := range entries {
		if !slices.Contains(layoutFiles, e.Name()) {
			return fmt.Errorf("write OCI layout %s: %s is not part of an OCI layout; remove it or choose another directory", dir, e.Name())
		}
	}
	for _, name := range layoutFiles {
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return nil
}
