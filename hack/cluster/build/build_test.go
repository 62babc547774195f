package build

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

func TestLDFlags(t *testing.T) {
	got, err := LDFlags("v1.37.2")
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		for _, want := range []string{
			"-X " + pkg + ".gitVersion=v1.37.2",
			"-X " + pkg + ".gitMajor=1",
			"-X " + pkg + ".gitMinor=37",
			"-X " + pkg + ".gitTreeState=clean",
			"-X " + pkg + ".gitCommit=" + GitCommit,
			"-X " + pkg + ".buildDate=" + BuildDate,
		} {
			if !strings.Contains(got+" ", want+" ") {
				t.Errorf("LDFlags lacks %q:\n%s", want, got)
			}
		}
	}
	if n := strings.Count(got, "-X "); n != 12 {
		t.Errorf("LDFlags has %d -X flags, want 12", n)
	}
}

func TestLDFlagsPrerelease(t *testing.T) {
	got, err := LDFlags("v1.38.0-alpha.1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "version.gitMinor=38+ ") || !strings.Contains(got, "version.gitVersion=v1.38.0-alpha.1 ") {
		t.Errorf("LDFlags(v1.38.0-alpha.1) = %s, want gitMinor=38+", got)
	}
}

func TestLDFlagsRejectsNonVersions(t *testing.T) {
	for _, v := range []string{"", "1.37.2", "v1.37", "v1.37.2 -X evil=1", "latest"} {
		if _, err := LDFlags(v); err == nil || !strings.Contains(err.Error(), "v1.37.2") {
			t.Errorf("LDFlags(%q) error = %v, want one showing an accepted version", v, err)
		}
	}
}

func TestCacheKey(t *testing.T) {
	v := Versions{Kubernetes: "v1.37.2", Etcd: "v3.7.0", Go: "go1.26.8", GOOS: "linux", GOARCH: "amd64"}
	tools := []string{"go.etcd.io/etcd/server/v3", "k8s.io/kubernetes/cmd/kube-apiserver"}
	base := CacheKey(v, tools, "-X a=b")
	if base != CacheKey(v, tools, "-X a=b") {
		t.Fatal("CacheKey is not deterministic")
	}
	if !strings.HasPrefix(base, "kubernetes-v1.37.2_etcd-v3.7.0_go1.26.8_linux-amd64_") {
		t.Errorf("CacheKey = %s, want the versions readable", base)
	}
	if strings.ContainsAny(base, "/ ") {
		t.Errorf("CacheKey = %q, want one path element", base)
	}
	changed := map[string]string{}
	for name, key := range map[string]string{
		"kubernetes": CacheKey(Versions{"v1.37.3", "v3.7.0", "go1.26.8", "linux", "amd64"}, tools, "-X a=b"),
		"etcd":       CacheKey(Versions{"v1.37.2", "v3.7.1", "go1.26.8", "linux", "amd64"}, tools, "-X a=b"),
		"go":         CacheKey(Versions{"v1.37.2", "v3.7.0", "go1.26.9", "linux", "amd64"}, tools, "-X a=b"),
		"arch":       CacheKey(Versions{"v1.37.2", "v3.7.0", "go1.26.8", "linux", "arm64"}, tools, "-X a=b"),
		"tools":      CacheKey(v, tools[:1], "-X a=b"),
		"ldflags":    CacheKey(v, tools, "-X a=c"),
	} {
		if key == base {
			t.Errorf("changing %s keeps the cache key %s", name, key)
		}
		if other, dup := changed[key]; dup {
			t.Errorf("changing %s and %s give the same key", name, other)
		}
		changed[key] = name
	}
}

func TestBinaryName(t *testing.T) {
	for p, want := range map[string]string{
		"go.etcd.io/etcd/server/v3":                     "etcd",
		"k8s.io/kubernetes/cmd/kube-apiserver":          "kube-apiserver",
		"k8s.io/kubernetes/cmd/kube-controller-manager": "kube-controller-manager",
		"k8s.io/kubernetes/cmd/kubectl":                 "kubectl",
	} {
		if got := BinaryName(p); got != want {
			t.Errorf("BinaryName(%s) = %s, want %s", p, got, want)
		}
	}
}

func TestFindModule(t *testing.T) {
	root := t.TempDir()
	mod := filepath.Join(root, "hack", "cluster")
	if err := os.MkdirAll(filepath.Join(mod, "controlplane"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module "+ModulePath+"\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, from := range []string{root, mod, filepath.Join(mod, "controlplane")} {
		got, err := FindModule(from)
		if err != nil || got != mod {
			t.Errorf("FindModule(%s) = %s, %v; want %s", from, got, err, mod)
		}
	}
	if _, err := FindModule(t.TempDir()); err == nil || !strings.Contains(err.Error(), ModulePath) {
		t.Errorf("FindModule outside the tree: %v, want an error naming the module", err)
	}
}

// TestThisModule reads the real go.mod (no build): the pinned versions and
// tools, and that every stamped variable exists in the pinned sources.
func TestThisModule(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	ctx := context.Background()
	o, err := Options{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	tools, err := o.tools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kubectl"} {
		if !slicesContainsName(tools, name) {
			t.Errorf("go.mod tools %v lack %s", tools, name)
		}
	}
	v, err := o.versions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v.Kubernetes != "v1.37.2" || v.Etcd != "v3.7.0" || !strings.HasPrefix(v.Go, "go1.") {
		t.Errorf("versions = %+v, want kubernetes v1.37.2, etcd v3.7.0", v)
	}

	out, err := o.goOutput(ctx, o.ModuleDir, "list", "-m", "-f", "{{.Dir}}", "k8s.io/component-base", "k8s.io/client-go")
	if err != nil {
		t.Fatal(err)
	}
	dirs := strings.Fields(string(out))
	if len(dirs) != 2 {
		t.Skipf("module sources not downloaded: %q", out)
	}
	for i, sub := range []string{"version", "pkg/version"} {
		vars := declaredVars(t, filepath.Join(dirs[i], sub, "base.go"))
		for _, name := range []string{"gitVersion", "gitMajor", "gitMinor", "gitCommit", "gitTreeState", "buildDate"} {
			if !vars[name] {
				t.Errorf("%s/%s/base.go declares no variable %s", dirs[i], sub, name)
			}
		}
	}
}

func declaredVars(t *testing.T, file string) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Skipf("cannot read %s: %v", file, err)
	}
	vars := map[string]bool{}
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.VAR {
			for _, s := range g.Specs {
				for _, n := range s.(*ast.ValueSpec).Names {
					vars[n.Name] = true
				}
			}
		}
	}
	return vars
}

func TestHasMainPackage(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if hasMainPackage(filepath.Join(dir, "absent")) || hasMainPackage(dir) {
		t.Error("an absent or empty directory has a main package")
	}
	write("main_test.go", "package main\n")
	write("doc.txt", "package main\n")
	if hasMainPackage(dir) {
		t.Error("a test file or a non-Go file makes a main package")
	}
	write("lib.go", "// Package lib is not a command.\npackage lib\n")
	if hasMainPackage(dir) {
		t.Error("package lib is a main package")
	}
	write("main.go", "// Command x.\npackage main\n\nfunc main() {}\n")
	if !hasMainPackage(dir) {
		t.Error("a directory with package main has none")
	}
}

// TestSwellImagesExist checks the image table against the source tree:
// every required package is a command, and the optional ones are exactly
// those that may be missing.
func TestSwellImagesExist(t *testing.T) {
	o, err := Options{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range swellImages {
		if !img.optional && !hasMainPackage(filepath.Join(o.MainDir, img.pkg)) {
			t.Errorf("image %s: package %s has no main package", img.image, img.pkg)
		}
		if !strings.HasPrefix(img.image, "swell/") || path.Base(img.image) != path.Base(img.pkg) {
			t.Errorf("image %s of package %s: want swell/<the package's last element>, so that registry-qualified names find it", img.image, img.pkg)
		}
	}
}
