package build

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	v := testVersions
	with := func(change func(*Versions)) Versions {
		c := v
		change(&c)
		return c
	}
	tools := []string{"go.etcd.io/etcd/server/v3", "k8s.io/kubernetes/cmd/kube-apiserver"}
	sums := []byte("go.mod go.sum")
	base := CacheKey(v, tools, "-X a=b", sums)
	if base != CacheKey(v, tools, "-X a=b", sums) {
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
		"kubernetes": CacheKey(with(func(v *Versions) { v.Kubernetes = "v1.37.3" }), tools, "-X a=b", sums),
		"etcd":       CacheKey(with(func(v *Versions) { v.Etcd = "v3.7.1" }), tools, "-X a=b", sums),
		"go":         CacheKey(with(func(v *Versions) { v.Go = "go1.26.9" }), tools, "-X a=b", sums),
		"arch":       CacheKey(with(func(v *Versions) { v.GOARCH = "arm64" }), tools, "-X a=b", sums),
		"tools":      CacheKey(v, tools[:1], "-X a=b", sums),
		"ldflags":    CacheKey(v, tools, "-X a=c", sums),
		"deps":       CacheKey(v, tools, "-X a=b", []byte("go.mod go.sum'")),
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

var testVersions = Versions{Kubernetes: "v1.37.2", Etcd: "v3.7.0", Containerd: "v2.4.2", CNIPlugins: "v1.10.0", Go: "go1.26.8", GOOS: "linux", GOARCH: "amd64"}

func TestRuntimeCacheKey(t *testing.T) {
	v := testVersions
	tools := []string{containerdModule + "/cmd/containerd", pluginsModule + "/plugins/main/bridge"}
	sums := []byte("go.mod go.sum")
	base := RuntimeCacheKey(v, tools, nil, sums)
	if !strings.HasPrefix(base, "containerd-v2.4.2_cni-plugins-v1.10.0_go1.26.8_linux-amd64_") || strings.ContainsAny(base, "/ ") {
		t.Errorf("RuntimeCacheKey = %s, want the versions readable, one path element", base)
	}
	// Kubernetes' versions are not the runtime's inputs.
	k := v
	k.Kubernetes = "v1.38.0"
	if RuntimeCacheKey(k, tools, nil, sums) != base {
		t.Error("changing Kubernetes' version changes the runtime's cache key")
	}
	for name, changed := range map[string]string{
		"containerd": RuntimeCacheKey(Versions{Containerd: "v2.4.3", CNIPlugins: v.CNIPlugins, Go: v.Go, GOOS: v.GOOS, GOARCH: v.GOARCH}, tools, nil, sums),
		"plugins":    RuntimeCacheKey(Versions{Containerd: v.Containerd, CNIPlugins: "v1.10.1", Go: v.Go, GOOS: v.GOOS, GOARCH: v.GOARCH}, tools, nil, sums),
		"tools":      RuntimeCacheKey(v, tools[:1], nil, sums),
		"flags":      RuntimeCacheKey(v, tools, []string{"-tags", "x"}, sums),
		"deps":       RuntimeCacheKey(v, tools, nil, []byte("go.mod'")),
	} {
		if changed == base {
			t.Errorf("changing %s keeps the runtime's cache key %s", name, base)
		}
	}
}

func TestBinaryName(t *testing.T) {
	for p, want := range map[string]string{
		"go.etcd.io/etcd/server/v3":                     "etcd",
		"k8s.io/kubernetes/cmd/kube-apiserver":          "kube-apiserver",
		"k8s.io/kubernetes/cmd/kube-controller-manager": "kube-controller-manager",
		"k8s.io/kubernetes/cmd/kubectl":                 "kubectl",
		containerdModule + "/cmd/containerd":            "containerd",
		cniPluginsPrefix + "ipam/host-local":            "host-local",
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

// TestThisModule reads the real go.mod files (no build): the pinned
// versions and tools, and that every stamped variable exists in the pinned
// sources.
func TestThisModule(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	ctx := context.Background()
	o, err := Options{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	runtimeDir := filepath.Join(o.ModuleDir, RuntimeModuleDir)
	for dir, want := range map[string][]string{
		o.ModuleDir: kubernetesPrograms,
		runtimeDir:  append(append([]string{}, runtimePrograms...), cniPrograms...),
	} {
		tools, err := o.tools(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range want {
			if !slicesContainsName(tools, name) {
				t.Errorf("%s/go.mod tools %v lack %s", dir, tools, name)
			}
		}
	}
	v, err := o.versions(ctx, runtimeDir)
	if err != nil {
		t.Fatal(err)
	}
	if v.Kubernetes != "v1.37.2" || v.Etcd != "v3.7.0" || v.Containerd != "v2.4.2" || v.CNIPlugins != "v1.10.0" || !strings.HasPrefix(v.Go, "go1.") {
		t.Errorf("versions = %+v, want kubernetes v1.37.2, etcd v3.7.0, containerd v2.4.2, CNI plugins v1.10.0", v)
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

func TestTraefikVersion(t *testing.T) {
	// From v3.7.0 on, Traefik's go.mod replaces a module with a directory
	// that its module download leaves out.
	if m := semver.FindStringSubmatch(TraefikVersion); m == nil || m[1] != "3" || m[2] != "6" || m[4] != "" {
		t.Errorf("TraefikVersion = %s, want a v3.6.x release: later ones do not build from the module proxy", TraefikVersion)
	}
}

func TestTraefikLDFlags(t *testing.T) {
	got := TraefikLDFlags("v3.6.12")
	for _, want := range []string{"-s", "-w", "-X github.com/traefik/traefik/v3/pkg/version.Version=v3.6.12", "-X github.com/traefik/traefik/v3/pkg/version.BuildDate=" + BuildDate} {
		if !strings.Contains(got+" ", want+" ") {
			t.Errorf("TraefikLDFlags lacks %q: %s", want, got)
		}
	}
}

func TestTraefikCacheKey(t *testing.T) {
	v := testVersions
	v.Traefik = "v3.6.12"
	flags := []string{"-ldflags", TraefikLDFlags(v.Traefik)}
	base := TraefikCacheKey(v, flags)
	if !strings.HasPrefix(base, "traefik-v3.6.12_go1.26.8_linux-amd64_") || strings.ContainsAny(base, "/ ") {
		t.Errorf("TraefikCacheKey = %s, want the versions readable, one path element", base)
	}
	// Kubernetes' and the runtime's versions are not Traefik's inputs.
	other := v
	other.Kubernetes, other.Containerd = "v1.38.0", "v2.5.0"
	if TraefikCacheKey(other, flags) != base {
		t.Error("changing Kubernetes' or containerd's version changes Traefik's cache key")
	}
	for name, changed := range map[string]string{
		"traefik": TraefikCacheKey(Versions{Traefik: "v3.6.13", Go: v.Go, GOOS: v.GOOS, GOARCH: v.GOARCH}, flags),
		"go":      TraefikCacheKey(Versions{Traefik: v.Traefik, Go: "go1.26.9", GOOS: v.GOOS, GOARCH: v.GOARCH}, flags),
		"arch":    TraefikCacheKey(Versions{Traefik: v.Traefik, Go: v.Go, GOOS: v.GOOS, GOARCH: "arm64"}, flags),
		"flags":   TraefikCacheKey(v, []string{"-ldflags", "-s"}),
	} {
		if changed == base {
			t.Errorf("changing %s keeps Traefik's cache key %s", name, base)
		}
	}
}

func TestLocalReplaces(t *testing.T) {
	gomod := filepath.Join(t.TempDir(), "go.mod")
	const text = `module github.com/traefik/traefik/v3

go 1.24.0

require example.com/a v1.0.0

replace github.com/abbot/go-http-auth => github.com/containous/go-http-auth v0.4.1-0.20200324110947-a37a7636d23e

replace (
	github.com/traefik/traefik/dynamic/ext => ./pkg/config/dynamic/ext
	example.com/b v1.2.0 => ../b
	example.com/c => example.com/d v1.0.0
)
`
	if err := os.WriteFile(gomod, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	got := localReplaces(gomod)
	if want := []string{"./pkg/config/dynamic/ext", "../b"}; !slices.Equal(got, want) {
		t.Errorf("localReplaces = %v, want %v", got, want)
	}
}

// TestTraefikStamps: the variables TraefikLDFlags stamps exist in the
// pinned release's source, when the module cache holds it (a stamp of a
// variable that does not exist is silently ignored by the linker).
func TestTraefikStamps(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(strings.TrimSpace(string(out)), traefikModule+"@"+TraefikVersion, "pkg", "version", "version.go")
	if _, err := os.Stat(file); err != nil {
		t.Skipf("Traefik %s not downloaded (swell-cluster build does): %v", TraefikVersion, err)
	}
	vars := declaredVars(t, file)
	for _, name := range []string{"Version", "BuildDate"} {
		if !vars[name] {
			t.Errorf("%s declares no variable %s", file, name)
		}
	}
}
