// Package images builds Swell's OCI images from its Go main packages,
// without a container daemon: one static binary per platform on a small,
// fixed root filesystem, gathered under one image index, reproducibly
// (docs/images.md).
package images

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sync/errgroup"
)

// Spec is one image made from one Go main package.
type Spec struct {
	Name      string        // repository, e.g. "ghcr.io/swell-run/activator"
	Dir       string        // directory to run `go build` in (a module root)
	Package   string        // main package, e.g. "./cmd/activator"
	Platforms []v1.Platform // nil: linux/amd64 and linux/arm64
	Revision  string        // source revision, for the org.opencontainers.image.revision label
	Created   time.Time     // image creation time (fixed, for reproducibility)
	// Version is the org.opencontainers.image.version label and the tag
	// the command line gives the image; empty: Revision.
	Version string
}

// Repository is where deploy/ names Swell's images; an overlay points it
// elsewhere (Overlay).
const Repository = "ghcr.io/swell-run"

// The images deploy/ runs, by name.
const (
	Autoscaler = Repository + "/autoscaler"
	Activator  = Repository + "/activator"
	QueueProxy = Repository + "/queue-proxy"
	Hello      = Repository + "/hello"
)

// SourceURL is the org.opencontainers.image.source label of every image.
const SourceURL = "https://github.com/swell-run/swell"

// License is the org.opencontainers.image.licenses label, an SPDX
// expression.
const License = "Apache-2.0"

// User is the numeric user and group every image runs as: distroless's
// "nonroot", so that a pod's runAsNonRoot holds without a runAsUser.
const User = "65532:65532"

// binDir is where an image's one binary lives; the image's PATH.
const binDir = "/usr/local/bin"

// DefaultPlatforms are the platforms of a Spec that names none.
func DefaultPlatforms() []v1.Platform {
	return []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}
}

// Swell returns the specs of Swell's four images, built from the module
// rooted at dir.
func Swell(dir, revision string, created time.Time) []Spec {
	spec := func(name, pkg string) Spec {
		return Spec{Name: name, Dir: dir, Package: pkg, Revision: revision, Created: created}
	}
	return []Spec{
		spec(Autoscaler, "./cmd/autoscaler"),
		spec(Activator, "./cmd/activator"),
		spec(QueueProxy, "./cmd/queue-proxy"),
		spec(Hello, "./cmd/hello"),
	}
}

// Build compiles s's package for each of its platforms and returns the
// images under one OCI image index. The same source, toolchain and spec
// give the same digests.
func Build(ctx context.Context, s Spec) (v1.ImageIndex, error) {
	platforms, err := s.check()
	if err != nil {
		return nil, err
	}
	base, err := baseLayer()
	if err != nil {
		return nil, err
	}
	// The platforms build at once: a link is mostly serial, and so is
	// compressing a layer.
	imgs := make([]v1.Image, len(platforms))
	g, ctx := errgroup.WithContext(ctx)
	for i, p := range platforms {
		g.Go(func() error {
			img, err := s.image(ctx, p, base)
			if err != nil {
				return fmt.Errorf("%s for %s: %w", s.Name, p, err)
			}
			imgs[i] = img
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	adds := make([]mutate.IndexAddendum, len(imgs))
	for i, img := range imgs {
		adds[i] = mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &platforms[i]}}
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	return mutate.Annotations(idx, s.labels()).(v1.ImageIndex), nil
}

// check validates s and returns its platforms, reporting every problem at
// once.
func (s Spec) check() ([]v1.Platform, error) {
	var errs []error
	if s.Name == "" {
		errs = append(errs, errors.New("Name is empty: want a repository such as "+Activator))
	}
	if s.Dir == "" {
		errs = append(errs, errors.New("Dir is empty: want the root of the module holding the package"))
	}
	if s.Package == "" {
		errs = append(errs, errors.New("Package is empty: want a main package such as ./cmd/activator"))
	}
	platforms := s.Platforms
	if platforms == nil {
		platforms = DefaultPlatforms()
	}
	if len(platforms) == 0 {
		errs = append(errs, errors.New("Platforms is empty: want nil (linux/amd64 and linux/arm64) or a list"))
	}
	for i, p := range platforms {
		if _, err := goEnv(p); err != nil {
			errs = append(errs, err)
		}
		if slices.ContainsFunc(platforms[:i], p.Equals) {
			errs = append(errs, fmt.Errorf("platform %s: listed twice", p))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("image %q: %w", s.Name, err)
	}
	return platforms, nil
}

// Tag is the tag the image is published under: its version, else its
// revision.
func (s Spec) Tag() string {
	if s.Version != "" {
		return s.Version
	}
	return s.Revision
}

// Binary is the name of the image's binary: the package's last element.
func (s Spec) Binary() string {
	return path.Base(strings.TrimSuffix(s.Package, "/"))
}

// created is s.Created, or the Unix epoch for none, so that an unset time
// is still a fixed one.
func (s Spec) created() time.Time {
	if s.Created.IsZero() {
		return time.Unix(0, 0).UTC()
	}
	return s.Created.UTC()
}

// labels are the image's OCI labels, also the index's annotations.
func (s Spec) labels() map[string]string {
	l := map[string]string{
		"org.opencontainers.image.source":   SourceURL,
		"org.opencontainers.image.title":    path.Base(s.Name),
		"org.opencontainers.image.licenses": License,
		"org.opencontainers.image.created":  s.created().Format(time.RFC3339),
	}
	if s.Revision != "" {
		l["org.opencontainers.image.revision"] = s.Revision
	}
	if t := s.Tag(); t != "" {
		l["org.opencontainers.image.version"] = t
	}
	return l
}

// image builds the image of s for platform p: the base layer, then a
// layer holding the binary as the entrypoint.
func (s Spec) image(ctx context.Context, p v1.Platform, base v1.Layer) (v1.Image, error) {
	exe, err := goBuild(ctx, s.Dir, s.Package, p)
	if err != nil {
		return nil, err
	}
	bin, err := binaryLayer(s.Binary(), exe)
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: s.created()}
	cfg := &v1.ConfigFile{
		Architecture: p.Architecture,
		OS:           p.OS,
		Variant:      p.Variant,
		Created:      created,
		Config: v1.Config{
			Entrypoint: []string{path.Join(binDir, s.Binary())},
			Env:        []string{"PATH=" + binDir},
			User:       User,
			WorkingDir: "/",
			Labels:     s.labels(),
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	img, err := mutate.ConfigFile(empty.Image, cfg)
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(mutate.MediaType(img, types.OCIManifestSchema1), types.OCIConfigJSON)
	return mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: created, CreatedBy: "swell images: /etc/passwd, /etc/group, CA certificates"}},
		mutate.Addendum{Layer: bin, History: v1.History{Created: created, CreatedBy: "swell images: go build " + s.Package}},
	)
}
