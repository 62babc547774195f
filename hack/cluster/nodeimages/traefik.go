package nodeimages

import (
	"archive/tar"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/swell-run/swell/hack/images"
)

// Traefik is the ingress controller's image: the binary the harness built
// from Traefik's module (build.Traefik), as the only program of a root
// file system that also holds /tmp, running as images.User.
const Traefik = Registry + "/traefik:" + Tag

// traefikBinDir is where the image holds its one program.
const traefikBinDir = "/usr/local/bin"

// traefikConfig is the image's configuration, but for its layer's digest.
func traefikConfig() *v1.ConfigFile {
	epoch := v1.Time{Time: time.Unix(0, 0).UTC()}
	return &v1.ConfigFile{
		Architecture: runtime.GOARCH,
		OS:           runtime.GOOS,
		Created:      epoch,
		Config: v1.Config{
			Entrypoint: []string{path.Join(traefikBinDir, "traefik")},
			Env:        []string{"PATH=" + traefikBinDir},
			User:       images.User,
			WorkingDir: "/",
			Labels:     map[string]string{"org.opencontainers.image.title": "traefik"},
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
}

// traefikLayout returns the layout of Traefik's image made of the binary
// exe. Compressing a binary of a few hundred megabytes takes seconds, so
// the layout is written once, beside exe in the directory the binary is
// cached in (whose key changes with the binary), named by a digest of the
// image's configuration (which changes with the way it is made), and read
// back on later starts.
func traefikLayout(exe string) (Layout, error) {
	cfg := traefikConfig()
	recipe, err := json.Marshal(cfg)
	if err != nil {
		return Layout{}, err
	}
	sum := sha256.Sum256(recipe)
	dir := filepath.Join(filepath.Dir(exe), "image-"+hex.EncodeToString(sum[:])[:12])
	if ref, idx, err := images.ReadLayout(dir); err == nil && ref == Traefik {
		return layoutOf(dir, idx)
	}
	idx, err := traefikImage(exe, cfg)
	if err != nil {
		return Layout{}, fmt.Errorf("image %s from %s: %w", Traefik, exe, err)
	}
	suffix := make([]byte, 4)
	rand.Read(suffix)
	tmp := dir + ".partial-" + hex.EncodeToString(suffix)
	defer os.RemoveAll(tmp)
	if err := images.WriteLayout(tmp, Traefik, idx); err != nil {
		return Layout{}, err
	}
	if err := os.Rename(tmp, dir); err != nil {
		// Another start wrote the same layout first: read it back.
		if _, back, readErr := images.ReadLayout(dir); readErr == nil {
			return layoutOf(dir, back)
		}
		return Layout{}, fmt.Errorf("image %s: %w", Traefik, err)
	}
	return layoutOf(dir, idx)
}

func layoutOf(dir string, idx v1.ImageIndex) (Layout, error) {
	d, err := idx.Digest()
	if err != nil {
		return Layout{}, fmt.Errorf("image %s: %w", Traefik, err)
	}
	return Layout{Ref: Traefik, Digest: d.String(), Dir: dir}, nil
}

// traefikImage is the image index, for the host's platform only, of the
// binary exe with the configuration cfg.
func traefikImage(exe string, cfg *v1.ConfigFile) (v1.ImageIndex, error) {
	st, err := os.Stat(exe)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		f, err := os.Open(exe)
		if err != nil {
			return nil, err
		}
		pr, pw := io.Pipe()
		go func() {
			defer f.Close()
			pw.CloseWithError(binaryTar(pw, f, st.Size()))
		}()
		return pr, nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, err
	}
	img, err := mutate.ConfigFile(empty.Image, cfg)
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(mutate.MediaType(img, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{Created: cfg.Created, CreatedBy: "swell-cluster: the traefik binary"}})
	if err != nil {
		return nil, err
	}
	platform := v1.Platform{OS: cfg.OS, Architecture: cfg.Architecture}
	return mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
		mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &platform}}), nil
}

// binaryTar writes to w a tar of the image's root file system: its
// directories and the size bytes of bin as its program, every entry owned
// by root at the Unix epoch, so the same binary gives the same layer.
func binaryTar(w io.Writer, bin io.Reader, size int64) error {
	tw := tar.NewWriter(w)
	epoch := time.Unix(0, 0).UTC()
	dirs := []struct {
		name string
		mode int64
	}{{"tmp/", 0o1777}, {"usr/", 0o755}, {"usr/local/", 0o755}, {"usr/local/bin/", 0o755}}
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Name: d.name, Mode: d.mode, ModTime: epoch, Typeflag: tar.TypeDir, Format: tar.FormatUSTAR}); err != nil {
			return err
		}
	}
	hdr := &tar.Header{Name: path.Join(traefikBinDir[1:], "traefik"), Mode: 0o755, ModTime: epoch, Typeflag: tar.TypeReg, Size: size, Format: tar.FormatUSTAR}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := io.CopyN(tw, bin, size); err != nil {
		return err
	}
	return tw.Close()
}
