// Package nodeimages builds the images a test cluster's node runs — its
// pause image, Swell's four images and the end-to-end suite's test program
// with Swell's image builder (hack/images), and the ingress controller's
// from the binary the harness built — for the host's platform, as OCI
// layouts for the node's containerd to import.
package nodeimages

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sync/errgroup"

	"github.com/swell-run/swell/hack/images"
)

// Tag is the tag of every image the harness builds. It is not "latest", so
// that a pod's image pull policy defaults to IfNotPresent: the node has no
// registry to pull from, only what was imported.
const Tag = "e2e"

// Registry names the harness's own images; the .test domain never
// resolves, so nothing tries to pull them from elsewhere.
const Registry = "swell.test"

// The references pods name.
const (
	// Pause is the sandbox image of every pod (containerd's
	// pinned_images.sandbox).
	Pause = Registry + "/pause:" + Tag
	// Box is the suite's program for pods that need no app
	// (nodeimages/box).
	Box = Registry + "/box:" + Tag

	Autoscaler = images.Autoscaler + ":" + Tag
	Activator  = images.Activator + ":" + Tag
	QueueProxy = images.QueueProxy + ":" + Tag
	Hello      = images.Hello + ":" + Tag
)

// Layout is a built image: an OCI layout on disk, named Ref, whose image
// index has the digest Digest ("sha256:...").
type Layout struct {
	Ref    string
	Digest string
	Dir    string
}

// Options say where the sources are and where the layouts go.
type Options struct {
	// ModuleDir is the harness's module root (hack/cluster), which holds
	// the pause and box programs.
	ModuleDir string
	// MainDir is Swell's module root, which holds Swell's programs.
	MainDir string
	// Dir receives one layout directory per image built from source.
	Dir string
	// Traefik is the ingress controller's binary (build.Traefik.Binary),
	// made into the image Traefik, whose layout is kept beside it; empty
	// for none.
	Traefik string
	// Log reports each image and its build time.
	Log *slog.Logger
}

// Specs are the images the node runs, built for the host's platform.
func Specs(moduleDir, mainDir string) []images.Spec {
	host := []v1.Platform{{OS: runtime.GOOS, Architecture: runtime.GOARCH}}
	own := func(name, pkg string) images.Spec {
		return images.Spec{Name: name, Dir: moduleDir, Package: pkg}
	}
	specs := append(images.Swell(mainDir, "", time.Time{}),
		own(Registry+"/pause", "./nodeimages/pause"),
		own(Registry+"/box", "./nodeimages/box"),
	)
	for i := range specs {
		specs[i].Platforms = host
		specs[i].Version = Tag
	}
	return specs
}

// Build builds every image of Specs into a layout under o.Dir, named by
// the image's last path element, a few at a time.
func Build(ctx context.Context, o Options) ([]Layout, error) {
	start := time.Now()
	specs := Specs(o.ModuleDir, o.MainDir)
	out := make([]Layout, len(specs), len(specs)+1)
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(runtime.NumCPU())
	if o.Traefik != "" {
		out = out[:len(specs)+1]
		g.Go(func() error {
			t0 := time.Now()
			l, err := traefikLayout(o.Traefik)
			if err != nil {
				return err
			}
			out[len(specs)] = l
			if o.Log != nil {
				o.Log.Info("traefik image", "ref", l.Ref, "layout", l.Dir, "took", time.Since(t0).Round(time.Millisecond))
			}
			return nil
		})
	}
	for i, s := range specs {
		g.Go(func() error {
			t0 := time.Now()
			idx, err := images.Build(ctx, s)
			if err != nil {
				return fmt.Errorf("build image %s: %w", s.Name, err)
			}
			d, err := idx.Digest()
			if err != nil {
				return fmt.Errorf("image %s: %w", s.Name, err)
			}
			l := Layout{Ref: s.Name + ":" + s.Tag(), Digest: d.String(), Dir: filepath.Join(o.Dir, path.Base(s.Name))}
			if err := images.WriteLayout(l.Dir, l.Ref, idx); err != nil {
				return err
			}
			out[i] = l
			if o.Log != nil {
				o.Log.Info("built image", "ref", l.Ref, "took", time.Since(t0).Round(time.Millisecond))
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if o.Log != nil {
		o.Log.Info("images built", "count", len(out), "took", time.Since(start).Round(time.Millisecond))
	}
	return out, nil
}

// WriteOverlay writes into dir a kustomization that installs Swell's
// deploy/ (at deployDir) with the images of layouts, pinned by digest: the
// autoscaler's, the activator's, and the queue-proxy the autoscaler's
// webhook injects; and, as ChartFile, deploy/chart packaged with the same
// images. `kubectl apply -k dir`, or `helm install swell dir/swell.tgz`,
// installs what was built.
func WriteOverlay(dir, deployDir string, layouts []Layout) error {
	pinned := images.Pinned{}
	for _, l := range layouts {
		repo, _, _ := strings.Cut(l.Ref, ":")
		if !strings.HasPrefix(repo, images.Repository+"/") {
			continue
		}
		d, err := name.NewDigest(repo + "@" + l.Digest)
		if err != nil {
			return fmt.Errorf("overlay: image %s: %w", l.Ref, err)
		}
		pinned[repo] = d
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("overlay: %w", err)
	}
	base, err := filepath.Rel(dir, deployDir)
	if err != nil {
		return fmt.Errorf("overlay: %w", err)
	}
	b, err := pinned.InstallOverlay(base)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), b, 0o644); err != nil {
		return err
	}
	// And Swell's Helm chart, packaged with the same images pinned: what
	// the suite installs.
	pkg, err := pinned.PackageChart(filepath.Join(deployDir, "chart"), ChartVersion, time.Unix(0, 0).UTC())
	if err != nil {
		return fmt.Errorf("overlay: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, ChartFile), pkg, 0o644)
}

// ChartFile is the packaged chart WriteOverlay writes beside the
// kustomization, and ChartVersion its version.
const (
	ChartFile    = "swell.tgz"
	ChartVersion = "e2e"
)
