package nodeimages

import (
	"context"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

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
	if err := WriteOverlay(overlay, deploy, layouts); err != nil {
		t.Fatal(err)
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
