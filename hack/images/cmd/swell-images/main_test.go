package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"flag"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"sigs.k8s.io/yaml"

	"github.com/swell-run/swell/hack/images"
)

// root is the module's root, from this package's directory.
const root = "../../../.."

// TestPushReusesLayouts pushes the layouts a build left in --out (random
// images here, so that the test builds nothing) and checks the overlays
// written and printed.
func TestPushReusesLayouts(t *testing.T) {
	out := t.TempDir()
	built := map[string]v1.Hash{}
	for _, n := range []string{images.Autoscaler, images.Activator, images.QueueProxy, images.Hello} {
		idx, err := random.Index(64, 1, 2)
		if err != nil {
			t.Fatal(err)
		}
		if err := images.WriteLayout(filepath.Join(out, path.Base(n)), n+":v9", idx); err != nil {
			t.Fatal(err)
		}
		if built[n], err = idx.Digest(); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	repo := strings.TrimPrefix(srv.URL, "http://") + "/org"
	overlay := filepath.Join(t.TempDir(), "overlay")

	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"push", "--source", root, "--registry", repo, "--out", out, "--overlay", overlay}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.Bytes())
	}

	for n, want := range built {
		tag, err := name.NewTag(repo + "/" + path.Base(n) + ":v9")
		if err != nil {
			t.Fatal(err)
		}
		d, err := remote.Head(tag, remote.WithContext(t.Context()))
		if err != nil {
			t.Fatalf("%s: %v", tag, err)
		}
		if d.Digest != want {
			t.Errorf("%s holds %s, the layout %s", tag, d.Digest, want)
		}
		if !strings.Contains(stderr.String(), "pushed "+tag.Context().Name()+"@"+want.String()) {
			t.Errorf("the command did not say it pushed %s@%s:\n%s", tag.Context().Name(), want, stderr.Bytes())
		}
	}

	// The chart, its images pinned to what was pushed, under the images'
	// version.
	chart, err := name.NewTag(repo + "/charts/swell:0.0.0-v9")
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(chart, remote.WithContext(t.Context()))
	if err != nil {
		t.Fatalf("%s: %v", chart, err)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%s: layers %v, %v", chart, layers, err)
	}
	rc, err := layers[0].Compressed()
	if err != nil {
		t.Fatal(err)
	}
	gz, err := gzip.NewReader(rc)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var values []byte
	for hdr, err := tr.Next(); err == nil; hdr, err = tr.Next() {
		if hdr.Name == "swell/values.yaml" {
			values, _ = io.ReadAll(tr)
		}
	}
	for _, n := range []string{images.Autoscaler, images.Activator, images.QueueProxy} {
		if want := `digest: "` + built[n].String() + `"`; !bytes.Contains(values, []byte(want)) {
			t.Errorf("the pushed chart's values.yaml lacks %s's %q:\n%s", n, want, values)
		}
	}

	install, err := os.ReadFile(filepath.Join(overlay, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stdout.Bytes(), install) {
		t.Errorf("printed overlay differs from the one written:\n%s\n---\n%s", stdout.Bytes(), install)
	}
	example, err := os.ReadFile(filepath.Join(overlay, "hello", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// Each overlay's base is the repository's, relative to the overlay.
	for _, o := range []struct {
		dir, base string
		data      []byte
	}{
		{overlay, filepath.Join(root, "deploy"), install},
		{filepath.Join(overlay, "hello"), filepath.Join(root, "deploy", "examples", "hello"), example},
	} {
		var k struct {
			Resources []string `json:"resources"`
			Images    []struct {
				Name, NewName, Digest string
			} `json:"images"`
		}
		if err := yaml.Unmarshal(o.data, &k); err != nil {
			t.Fatal(err)
		}
		if len(k.Resources) != 1 || filepath.IsAbs(k.Resources[0]) {
			t.Fatalf("%s: resources %q, want one relative path", o.dir, k.Resources)
		}
		if got, want := sameDir(t, filepath.Join(o.dir, k.Resources[0])), sameDir(t, o.base); got != want {
			t.Errorf("%s: base %s, want %s", o.dir, got, want)
		}
		for _, im := range k.Images {
			if im.NewName != repo+"/"+path.Base(im.Name) || im.Digest != built[im.Name].String() {
				t.Errorf("%s: %s pinned to %s@%s, want %s/%s@%s", o.dir, im.Name, im.NewName, im.Digest, repo, path.Base(im.Name), built[im.Name])
			}
		}
	}
}

// sameDir returns dir, absolute and cleaned.
func sameDir(t *testing.T, dir string) string {
	t.Helper()
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(abs, "kustomization.yaml")); err != nil {
		t.Errorf("%s is no kustomization: %v", abs, err)
	}
	return abs
}

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "usage: swell-images build"},
		{[]string{"publish"}, "usage: swell-images build"},
		{[]string{"build"}, "build: --out is required"},
		{[]string{"push", "--out", "x"}, "push: --registry is required"},
		{[]string{"build", "--out", "x", "--platforms", "linux"}, `invalid value "linux" for flag -platforms: "linux": want os/arch`},
		{[]string{"build", "--out", "x", "extra"}, `build: unexpected arguments ["extra"]`},
	} {
		var stderr bytes.Buffer
		err := run(t.Context(), tc.args, io.Discard, &stderr)
		if err == nil {
			t.Errorf("%q succeeded", tc.args)
			continue
		}
		if msg := err.Error() + "\n" + stderr.String(); !strings.Contains(msg, tc.want) {
			t.Errorf("%q: %s\nwant it to say %q", tc.args, msg, tc.want)
		}
		if strings.HasPrefix(tc.want, "usage") && !errors.Is(err, flag.ErrHelp) {
			t.Errorf("%q = %v, want flag.ErrHelp", tc.args, err)
		}
	}
}
