package images

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/x509"
	"debug/elf"
	"encoding/pem"
	"errors"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// The source the tests build from: this module, with a fixed revision and
// time.
const testRevision = "0123456789abcdef0123456789abcdef01234567"

var testCreated = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func testSpecs(t *testing.T) []Spec {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	specs := Swell(root, testRevision, testCreated)
	// The release builds every image for every platform (make images);
	// here the hello image alone is built for both, which tests the
	// multi-platform index, and the others for the first, since cross-
	// compiling the autoscaler's and the proxies' dependencies for a second
	// architecture is most of a cold test run's compiling.
	for i := range specs {
		if specs[i].Platforms != nil {
			t.Fatalf("%s: Swell() sets platforms %v, want the default (every platform)", specs[i].Name, specs[i].Platforms)
		}
		if specs[i].Name != Hello {
			specs[i].Platforms = DefaultPlatforms()[:1]
		}
	}
	return specs
}

// buildAll builds every spec, in order.
func buildAll(ctx context.Context, specs []Spec) ([]v1.ImageIndex, error) {
	idxs := make([]v1.ImageIndex, len(specs))
	for i, s := range specs {
		var err error
		if idxs[i], err = Build(ctx, s); err != nil {
			return nil, err
		}
	}
	return idxs, nil
}

// built is Swell's images, built once for all the package's tests.
var built struct {
	once sync.Once
	idxs []v1.ImageIndex
	err  error
}

func swellImages(t *testing.T) ([]Spec, []v1.ImageIndex) {
	t.Helper()
	specs := testSpecs(t)
	built.once.Do(func() {
		start := time.Now()
		built.idxs, built.err = buildAll(context.Background(), specs)
		t.Logf("built %d images in %v", len(specs), time.Since(start).Round(time.Millisecond))
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return specs, built.idxs
}

// entry is a file of an image's filesystem.
type entry struct {
	hdr  *tar.Header
	data []byte
}

// filesystem returns img's flattened filesystem by path, without the
// leading slash.
func filesystem(t *testing.T, img v1.Image) map[string]entry {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	fs := map[string]entry{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		fs[hdr.Name] = entry{hdr, data}
	}
	return fs
}

func TestSwellImages(t *testing.T) {
	specs, idxs := swellImages(t)
	wantNames := []string{Autoscaler, Activator, QueueProxy, Hello}
	if got := names(specs); !slices.Equal(got, wantNames) {
		t.Fatalf("Swell() names %v, want %v", got, wantNames)
	}
	for i, s := range specs {
		t.Run(s.Binary(), func(t *testing.T) {
			checkIndex(t, s, idxs[i])
		})
	}
}

func names(specs []Spec) []string {
	var n []string
	for _, s := range specs {
		n = append(n, s.Name)
	}
	return n
}

func checkIndex(t *testing.T, s Spec, idx v1.ImageIndex) {
	if mt, err := idx.MediaType(); err != nil || mt != types.OCIImageIndex {
		t.Errorf("index media type %q (%v), want %q", mt, err, types.OCIImageIndex)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	wantLabels := map[string]string{
		"org.opencontainers.image.source":   "https://github.com/swell-run/swell",
		"org.opencontainers.image.revision": testRevision,
		"org.opencontainers.image.version":  testRevision,
		"org.opencontainers.image.title":    s.Binary(),
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.created":  "2026-01-02T03:04:05Z",
	}
	if !maps.Equal(im.Annotations, wantLabels) {
		t.Errorf("index annotations %v, want %v", im.Annotations, wantLabels)
	}
	var platforms []string
	for _, d := range im.Manifests {
		if d.Platform == nil {
			t.Fatalf("manifest %s has no platform", d.Digest)
		}
		platforms = append(platforms, d.Platform.String())
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(d.Platform.String(), func(t *testing.T) {
			checkImage(t, s, *d.Platform, img, wantLabels)
		})
	}
	want := []string{"linux/amd64", "linux/arm64"}
	if s.Platforms != nil {
		want = want[:len(s.Platforms)]
	}
	if !slices.Equal(platforms, want) {
		t.Errorf("platforms %v, want %v", platforms, want)
	}
}

func checkImage(t *testing.T, s Spec, p v1.Platform, img v1.Image, wantLabels map[string]string) {
	if mt, err := img.MediaType(); err != nil || mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %q (%v), want %q", mt, err, types.OCIManifestSchema1)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != p.OS || cfg.Architecture != p.Architecture {
		t.Errorf("config says %s/%s, index says %s", cfg.OS, cfg.Architecture, p)
	}
	exe := "/usr/local/bin/" + s.Binary()
	if !slices.Equal(cfg.Config.Entrypoint, []string{exe}) || len(cfg.Config.Cmd) != 0 {
		t.Errorf("entrypoint %q cmd %q, want [%s] and none", cfg.Config.Entrypoint, cfg.Config.Cmd, exe)
	}
	if cfg.Config.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532", cfg.Config.User)
	}
	if !maps.Equal(cfg.Config.Labels, wantLabels) {
		t.Errorf("labels %v, want %v", cfg.Config.Labels, wantLabels)
	}
	if !cfg.Created.Time.Equal(testCreated) {
		t.Errorf("created %v, want %v", cfg.Created.Time, testCreated)
	}

	fs := filesystem(t, img)
	dirs := []string{"etc", "etc/ssl", "etc/ssl/certs", "home", "home/nonroot", "root", "tmp", "usr", "usr/local", "usr/local/bin"}
	want := append([]string{"etc/group", "etc/passwd", "etc/ssl/certs/ca-certificates.crt", "usr/local/bin/" + s.Binary()}, dirs...)
	slices.Sort(want)
	if got := slices.Sorted(maps.Keys(fs)); !slices.Equal(got, want) {
		t.Errorf("filesystem %q, want %q", got, want)
	}
	for _, d := range dirs {
		if e := fs[d]; e.hdr != nil && e.hdr.Typeflag != tar.TypeDir {
			t.Errorf("/%s is no directory", d)
		}
	}
	if e := fs["tmp"]; e.hdr != nil && e.hdr.Mode != 0o1777 {
		t.Errorf("/tmp mode %o, want 1777", e.hdr.Mode)
	}
	for _, sh := range []string{"bin/sh", "usr/bin/sh", "bin/busybox"} {
		if _, ok := fs[sh]; ok {
			t.Errorf("the image has a shell, /%s", sh)
		}
	}
	for name, e := range fs {
		if !e.hdr.ModTime.Equal(time.Unix(0, 0)) {
			t.Errorf("/%s modified %v, want the epoch", name, e.hdr.ModTime)
		}
		if name != "home/nonroot" && (e.hdr.Uid != 0 || e.hdr.Gid != 0) {
			t.Errorf("/%s owned by %d:%d, want root", name, e.hdr.Uid, e.hdr.Gid)
		}
	}
	if e := fs["home/nonroot"]; e.hdr == nil || e.hdr.Uid != 65532 || e.hdr.Gid != 65532 {
		t.Errorf("/home/nonroot is not nonroot's")
	}
	if !strings.Contains(string(fs["etc/passwd"].data), "\nnonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd names no nonroot 65532:\n%s", fs["etc/passwd"].data)
	}
	if !strings.Contains(string(fs["etc/group"].data), "\nnonroot:x:65532:") {
		t.Errorf("/etc/group names no nonroot 65532:\n%s", fs["etc/group"].data)
	}
	checkCAFile(t, fs["etc/ssl/certs/ca-certificates.crt"].data)
	bin := fs["usr/local/bin/"+s.Binary()]
	if bin.hdr == nil {
		return
	}
	if bin.hdr.Mode != 0o755 {
		t.Errorf("%s mode %o, want 755", exe, bin.hdr.Mode)
	}
	checkStatic(t, bin.data, p)
}

// checkCAFile checks that the CA file parses and holds every root of the
// pinned bundle but those NSS constrains.
func checkCAFile(t *testing.T, data []byte) {
	t.Helper()
	want := 0
	for r := range bundle.Roots() {
		if r.Constraint == nil {
			want++
		}
	}
	got := 0
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			if len(bytes.TrimSpace(rest)) > 0 {
				t.Errorf("the CA file has %d bytes that are no PEM block", len(rest))
			}
			break
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			t.Errorf("CA certificate %d: %v", got, err)
		}
		got++
	}
	if got != want || want < 100 {
		t.Errorf("the CA file holds %d certificates, want %d (and at least 100)", got, want)
	}
}

// checkStatic checks that exe is a static executable for p.
func checkStatic(t *testing.T, exe []byte, p v1.Platform) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(exe))
	if err != nil {
		t.Fatalf("the binary is no ELF file: %v", err)
	}
	machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[p.Architecture]
	if f.Machine != machine {
		t.Errorf("the binary is for %v, want %v", f.Machine, machine)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP || prog.Type == elf.PT_DYNAMIC {
			t.Errorf("the binary is dynamically linked (%v)", prog.Type)
		}
	}
	if f.Section(".symtab") != nil {
		t.Error("the binary has a symbol table; want it stripped (-s)")
	}
}

// TestReproducible builds every image again and checks that each gives
// the same digest.
func TestReproducible(t *testing.T) {
	specs, first := swellImages(t)
	start := time.Now()
	again, err := buildAll(t.Context(), specs)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built %d images again in %v", len(specs), time.Since(start).Round(time.Millisecond))
	for i, s := range specs {
		d1, err := first[i].Digest()
		if err != nil {
			t.Fatal(err)
		}
		d2, err := again[i].Digest()
		if err != nil {
			t.Fatal(err)
		}
		if d1 != d2 {
			t.Errorf("%s: two builds give %s and %s", s.Name, d1, d2)
		}
	}
}

func TestBuildRejectsBadSpecs(t *testing.T) {
	for _, tc := range []struct {
		spec Spec
		want []string
	}{
		{Spec{}, []string{"Name is empty", "Dir is empty", "Package is empty"}},
		{Spec{Name: "x", Dir: ".", Package: "./x", Platforms: []v1.Platform{}}, []string{"Platforms is empty"}},
		{Spec{Name: "x", Dir: ".", Package: "./x", Platforms: []v1.Platform{{OS: "linux"}}}, []string{`platform "linux": want os/arch`}},
		{Spec{Name: "x", Dir: ".", Package: "./x", Platforms: []v1.Platform{{OS: "linux", Architecture: "arm"}}}, []string{`variant "": accepted for arm are v5, v6 and v7`}},
		{Spec{Name: "x", Dir: ".", Package: "./x", Platforms: []v1.Platform{{OS: "linux", Architecture: "amd64", Variant: "v9"}}}, []string{`accepted for amd64 are none, v1, v2, v3 and v4`}},
		{Spec{Name: "x", Dir: ".", Package: "./x", Platforms: []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "amd64"}}}, []string{"linux/amd64: listed twice"}},
	} {
		_, err := Build(t.Context(), tc.spec)
		if err == nil {
			t.Errorf("Build(%+v) succeeded", tc.spec)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Build(%+v) = %v, want it to say %q", tc.spec, err, w)
			}
		}
	}
}

func TestGoEnvPinsTheInstructionSet(t *testing.T) {
	for _, tc := range []struct {
		p    v1.Platform
		want string
	}{
		{v1.Platform{OS: "linux", Architecture: "amd64"}, "GOAMD64=v1"},
		{v1.Platform{OS: "linux", Architecture: "amd64", Variant: "v3"}, "GOAMD64=v3"},
		{v1.Platform{OS: "linux", Architecture: "arm64"}, "GOARM64=v8.0"},
		{v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}, "GOARM64=v8.0"},
		{v1.Platform{OS: "linux", Architecture: "arm", Variant: "v7"}, "GOARM=7"},
	} {
		p, want := tc.p, tc.want
		env, err := goEnv(p)
		if err != nil {
			t.Fatalf("goEnv(%s): %v", p, err)
		}
		for _, kv := range []string{"CGO_ENABLED=0", "GOOS=" + p.OS, "GOARCH=" + p.Architecture, want} {
			if !slices.Contains(env, kv) {
				t.Errorf("goEnv(%s) = %q, want %s in it", p, env, kv)
			}
		}
	}
}
