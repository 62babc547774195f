// Command swell-images builds Swell's OCI images — autoscaler, activator,
// queue-proxy and hello — without a container daemon, and pushes them
// (docs/images.md).
//
//	go run ./hack/images/cmd/swell-images build --out bin/images
//	go run ./hack/images/cmd/swell-images push --registry ghcr.io/swell-run --overlay bin/overlay
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/swell-run/swell/hack/images"
)

const usage = `usage: swell-images build --out DIR [flags]
       swell-images push --registry HOST/ORG [--out DIR] [--overlay DIR] [flags]

build writes one OCI image layout per image, DIR/<image>/, and prints each
image's name, tag and digest.

push pushes each image to HOST/ORG/<image>:<tag> — from the layouts in
--out when they are there, else built — then Swell's Helm chart
(deploy/chart), its images pinned to the pushed digests, to
HOST/ORG/charts/swell:<chart version> (the tag without its v, or 0.0.0-<revision>),
and prints a kustomization that pins deploy/ to the pushed digests; --overlay DIR also writes it to
DIR/kustomization.yaml, and the example's to DIR/hello/kustomization.yaml.
Without --overlay, the printed kustomization's path to deploy/ is
relative to the current directory. Credentials are the docker CLI's
(docker login).

flags:
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr, remote.WithAuthFromKeychain(authn.DefaultKeychain))
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "swell-images:", err)
		os.Exit(1)
	}
}

// options are the command line's settings.
type options struct {
	source    string
	out       string
	registry  string
	overlay   string
	version   string
	platforms []v1.Platform
}

// run runs the command line args; push sends with opts.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, opts ...remote.Option) error {
	if len(args) == 0 || (args[0] != "build" && args[0] != "push") {
		flagSet(&options{}, stderr).Usage()
		return flag.ErrHelp
	}
	cmd := args[0]
	var o options
	fs := flagSet(&o, stderr)
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected arguments %q", cmd, fs.Args())
	}
	if cmd == "build" && o.out == "" {
		return errors.New("build: --out is required: the directory to write the OCI layouts to")
	}
	if cmd == "push" && o.registry == "" {
		return errors.New("push: --registry is required: where to push, as host/org, such as ghcr.io/swell-run")
	}
	specs, err := o.specs(ctx)
	if err != nil {
		return err
	}
	if cmd == "build" {
		for _, s := range specs {
			if _, _, err := o.build(ctx, s, stdout); err != nil {
				return err
			}
		}
		return nil
	}
	return o.push(ctx, specs, stdout, stderr, opts)
}

// flagSet defines the flags into o.
func flagSet(o *options, output io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("swell-images", flag.ContinueOnError)
	fs.SetOutput(output)
	fs.Usage = func() {
		fmt.Fprint(output, usage)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.source, "source", ".", "the root of Swell's module, a git working tree")
	fs.StringVar(&o.out, "out", "", "`DIR` of the OCI layouts, one per image")
	fs.StringVar(&o.registry, "registry", "", "push: where to push, `HOST/ORG`")
	fs.StringVar(&o.overlay, "overlay", "", "push: write the kustomize overlays to `DIR`")
	fs.StringVar(&o.version, "version", "", "the images' version label and tag (default: the tag at HEAD on a clean tree, else the revision)")
	fs.Func("platforms", "`LIST` of os/arch[/variant], comma-separated (default linux/amd64,linux/arm64)", func(s string) error {
		o.platforms = nil
		for _, f := range strings.Split(s, ",") {
			p, err := v1.ParsePlatform(strings.TrimSpace(f))
			if err != nil || p.OS == "" || p.Architecture == "" {
				return fmt.Errorf("%q: want os/arch[/variant], such as linux/arm64", f)
			}
			o.platforms = append(o.platforms, *p)
		}
		return nil
	})
	return fs
}

// specs are Swell's images as the source tree and the flags say.
func (o *options) specs(ctx context.Context) ([]images.Spec, error) {
	src, err := images.GitSource(ctx, o.source)
	if err != nil {
		return nil, err
	}
	version := o.version
	if version == "" {
		version = src.Version
	}
	specs := images.Swell(o.source, src.Revision, src.Created)
	for i := range specs {
		specs[i].Platforms = o.platforms
		specs[i].Version = version
	}
	return specs, nil
}

// layoutDir is where the OCI layout of s is under --out.
func (o *options) layoutDir(s images.Spec) string {
	return filepath.Join(o.out, path.Base(s.Name))
}

// build builds s, writes its layout when --out is set, prints its name and
// digest, and returns it with its tag.
func (o *options) build(ctx context.Context, s images.Spec, stdout io.Writer) (v1.ImageIndex, string, error) {
	idx, err := images.Build(ctx, s)
	if err != nil {
		return nil, "", err
	}
	d, err := idx.Digest()
	if err != nil {
		return nil, "", err
	}
	ref := s.Name + ":" + s.Tag()
	if o.out != "" {
		if err := images.WriteLayout(o.layoutDir(s), ref, idx); err != nil {
			return nil, "", err
		}
	}
	fmt.Fprintf(stdout, "%s %s\n", ref, d)
	return idx, s.Tag(), nil
}

// image returns s from its layout under --out when there is one, else
// built, with its tag.
func (o *options) image(ctx context.Context, s images.Spec, stderr io.Writer) (v1.ImageIndex, string, error) {
	if o.out != "" {
		dir := o.layoutDir(s)
		if _, err := os.Stat(filepath.Join(dir, "index.json")); err == nil {
			ref, idx, err := images.ReadLayout(dir)
			if err != nil {
				return nil, "", err
			}
			tag, err := name.NewTag(ref)
			if err != nil {
				return nil, "", fmt.Errorf("OCI layout %s: name %q: %w", dir, ref, err)
			}
			fmt.Fprintf(stderr, "using %s from %s\n", ref, dir)
			return idx, tag.TagStr(), nil
		}
	}
	return o.build(ctx, s, stderr)
}

// push pushes every image and prints (and writes) the overlays pinning
// them.
func (o *options) push(ctx context.Context, specs []images.Spec, stdout, stderr io.Writer, opts []remote.Option) error {
	pinned := images.Pinned{}
	// The chart's version is the images': the tag pushed.
	var version string
	for _, s := range specs {
		idx, tag, err := o.image(ctx, s, stderr)
		if err != nil {
			return err
		}
		version = tag
		d, err := images.Push(ctx, images.Target(o.registry, s.Name, tag), idx, opts...)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "pushed %s\n", d.Name())
		pinned[s.Name] = d
	}
	pkg, err := pinned.PackageChart(filepath.Join(o.source, "deploy", "chart"), version, specs[0].Created)
	if err != nil {
		return err
	}
	chart, err := images.PushChart(ctx, o.registry, pkg, specs[0].Created, opts...)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "pushed %s (helm install swell oci://%s --version %s --namespace swell-system --create-namespace)\n",
		chart.Name(), chart.Context().Name(), images.ChartVersion(version))
	deploy, example, err := o.bases()
	if err != nil {
		return err
	}
	install, err := pinned.InstallOverlay(deploy)
	if err != nil {
		return err
	}
	if o.overlay != "" {
		hello, err := pinned.ExampleOverlay(example)
		if err != nil {
			return err
		}
		for file, data := range map[string][]byte{"kustomization.yaml": install, "hello/kustomization.yaml": hello} {
			p := filepath.Join(o.overlay, file)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(p, data, 0o644); err != nil {
				return err
			}
		}
	}
	_, err = stdout.Write(install)
	return err
}

// bases are the paths of deploy/ and of its example, relative to the
// overlays' directories: --overlay, or the current directory for an
// overlay that is only printed (kustomize takes no absolute path).
func (o *options) bases() (deploy, example string, err error) {
	src, err := filepath.Abs(o.source)
	if err != nil {
		return "", "", err
	}
	dir, err := filepath.Abs(o.overlay)
	if err != nil {
		return "", "", err
	}
	if deploy, err = filepath.Rel(dir, filepath.Join(src, "deploy")); err != nil {
		return "", "", err
	}
	if example, err = filepath.Rel(filepath.Join(dir, "hello"), filepath.Join(src, "deploy", "examples", "hello")); err != nil {
		return "", "", err
	}
	return filepath.ToSlash(deploy), filepath.ToSlash(example), nil
}
