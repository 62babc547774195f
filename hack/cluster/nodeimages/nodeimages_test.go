package nodeimages

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/swell-run/swell/hack/images"
)

// TestSpecs: every image the node runs is built from a main package of
// this tree, for the host only, tagged Tag, and the references pods name
// are those of the specs.
func TestSpecs(t *testing.T) {
	module, main := dirs(t)
	refs := map[string]bool{}
	for _, s := range Specs(module, main) {
		if len(s.Platforms) != 1 || s.Platforms[0].OS != runtime.GOOS || s.Platforms[0].Architecture != runtime.GOARCH {
			t.Errorf("%s: platforms %v, want the host's only", s.Name, s.Platforms)
		}
		out, err := exec.Command("go", "list", "-C", s.Dir, "-f", "{{.Name}}", s.Package).Output()
		if err != nil || strings.TrimSpace(string(out)) != "main" {
			t.Errorf("%s: package %s in %s is not a main package: %q %v", s.Name, s.Package, s.Dir, out, err)
		}
		refs[s.Name+":"+s.Tag()] = true
	}
	for _, ref := range []string{Pause, Box, Autoscaler, Activator, QueueProxy, Hello} {
		if !refs[ref] {
			t.Errorf("%s is named by pods but not built; built: %v", ref, refs)
		}
	}
}

// TestBuildBox builds one real image and reads back its layout.
func TestBuildBox(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an image")
	}
	module, _ := dirs(t)
	var spec images.Spec
	for _, s := range Specs(module, "unused") {
		if s.Name+":"+s.Tag() == Box {
			spec = s
		}
	}
	idx, err := images.Build(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "box")
	if err := images.WriteLayout(dir, Box, idx); err != nil {
		t.Fatal(err)
	}
	ref, back, err := images.ReadLayout(dir)
	if err != nil || ref != Box {
		t.Fatalf("ReadLayout = %s, %v; want %s", ref, err, Box)
	}
	m, err := back.IndexManifest()
	if err != nil || len(m.Manifests) != 1 {
		t.Fatalf("index: %v %v, want one image", m, err)
	}
	img, err := back.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Config.Entrypoint) != 1 || path.Base(cfg.Config.Entrypoint[0]) != "box" || cfg.Config.User == "" || strings.HasPrefix(cfg.Config.User, "0") {
		t.Errorf("image config: entrypoint %v, user %q; want box as a non-root user", cfg.Config.Entrypoint, cfg.Config.User)
	}
}

func TestWriteOverlay(t *testing.T) {
	root := t.TempDir()
	deploy := filepath.Join(root, "deploy")
	overlay := filepath.Join(root, "state", "deploy")
	digest := "sha256:" + strings.Repeat("a", 64)
	var layouts []Layout
	for _, ref := range []string{Autoscaler, Activator, QueueProxy, Hello, Pause, Box} {
		layouts = append(layouts, Layout{Ref: ref, Digest: digest, Dir: "unused"})
	}
	_, main := dirs(t)
	if err := os.CopyFS(filepath.Join(deploy, "chart"), os.DirFS(filepath.Join(main, "deploy", "chart"))); err != nil {
		t.Fatal(err)
	}
	if err := WriteOverlay(overlay, deploy, layouts); err != nil {
		t.Fatal(err)
	}
	// The chart, packaged with the same images.
	pkg, err := os.ReadFile(filepath.Join(overlay, ChartFile))
	if err != nil {
		t.Fatal(err)
	}
	gz, err := gzip.NewReader(bytes.NewReader(pkg))
	if err != nil {
		t.Fatal(err)
	}
	values := ""
	tr := tar.NewReader(gz)
	for hdr, err := tr.Next(); err == nil; hdr, err = tr.Next() {
		if hdr.Name == "swell/values.yaml" {
			b, _ := io.ReadAll(tr)
			values = string(b)
		}
	}
	for _, want := range []string{"repository: " + images.Autoscaler, "repository: " + images.QueueProxy, `digest: "` + digest + `"`} {
		if !strings.Contains(values, want) {
			t.Errorf("the chart's values lack %q:\n%s", want, values)
		}
	}
	b, err := os.ReadFile(filepath.Join(overlay, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	k := string(b)
	for _, want := range []string{
		"- ../../deploy",
		"name: " + images.Autoscaler,
		"name: " + images.Activator,
		"digest: " + digest,
		"value: " + images.QueueProxy + "@" + digest,
	} {
		if !strings.Contains(k, want) {
			t.Errorf("overlay lacks %q:\n%s", want, k)
		}
	}
	if strings.Contains(k, Registry) {
		t.Errorf("overlay names the harness's own images:\n%s", k)
	}
}

// dirs are this module's root and Swell's.
func dirs(t *testing.T) (module, main string) {
	t.Helper()
	module, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return module, filepath.Join(module, "..", "..")
}

// TestTraefikLayout makes the image of a stand-in binary: written once
// beside the binary, read back unchanged on the next start, and an image
// of that one program at /usr/local/bin/traefik, run as images.User.
func TestTraefikLayout(t *testing.T) {
	exe := filepath.Join(t.TempDir(), "traefik")
	if err := os.WriteFile(exe, []byte("#!/not/really/traefik\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	first, err := traefikLayout(exe)
	if err != nil {
		t.Fatal(err)
	}
	if first.Ref != Traefik || filepath.Dir(first.Dir) != filepath.Dir(exe) || !strings.HasPrefix(first.Digest, "sha256:") {
		t.Errorf("layout %+v, want %s beside %s", first, Traefik, exe)
	}
	stamp := time.Unix(1, 0)
	if err := os.Chtimes(filepath.Join(first.Dir, "index.json"), stamp, stamp); err != nil {
		t.Fatal(err)
	}
	again, err := traefikLayout(exe)
	if err != nil || again != first {
		t.Fatalf("second layout %+v, %v; want %+v", again, err, first)
	}
	if st, err := os.Stat(filepath.Join(first.Dir, "index.json")); err != nil || !st.ModTime().Equal(stamp) {
		t.Errorf("the layout was written again: %v %v", st, err)
	}

	ref, idx, err := images.ReadLayout(first.Dir)
	if err != nil || ref != Traefik {
		t.Fatalf("ReadLayout = %s, %v", ref, err)
	}
	m, err := idx.IndexManifest()
	if err != nil || len(m.Manifests) != 1 || m.Manifests[0].Platform == nil || m.Manifests[0].Platform.Architecture != runtime.GOARCH {
		t.Fatalf("index %+v, %v: want one image for %s", m, err, runtime.GOARCH)
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Config.Entrypoint, []string{"/usr/local/bin/traefik"}) || cfg.Config.User != images.User {
		t.Errorf("config: entrypoint %v, user %q", cfg.Config.Entrypoint, cfg.Config.User)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %v, %v: want one", layers, err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		files[h.Name] = fmt.Sprintf("%o %d:%d %s", h.Mode, h.Uid, h.Gid, b)
	}
	want := map[string]string{
		"tmp/":                  "1777 0:0 ",
		"usr/":                  "755 0:0 ",
		"usr/local/":            "755 0:0 ",
		"usr/local/bin/":        "755 0:0 ",
		"usr/local/bin/traefik": "755 0:0 #!/not/really/traefik\n",
	}
	if !maps.Equal(files, want) {
		t.Errorf("layer files %v, want %v", files, want)
	}
}
