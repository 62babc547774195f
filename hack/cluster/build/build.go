// Package build builds the programs a test cluster runs: etcd,
// kube-apiserver, kube-controller-manager and kubectl at the versions
// pinned in this module's go.mod, with Kubernetes' version stamps, into a
// cache keyed by those versions; and Swell's own binaries for the node
// agent's image table, fresh each time, so tests run the current code.
package build

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

// ModulePath is this module's path; the programs to build are its go.mod's
// tool directives.
const ModulePath = "github.com/swell-run/swell/hack/cluster"

// Stamps that do not come from a version.
const (
	// GitCommit is stamped as the Kubernetes binaries' commit. It is not
	// from git: they are built from the Go module proxy's release sources.
	GitCommit = "built-from-module-proxy-not-from-git"
	// BuildDate is fixed so that a build depends only on its inputs.
	BuildDate = "1970-01-01T00:00:00Z"
)

// Packages whose version variables are stamped; both carry gitVersion,
// gitMajor, gitMinor, gitCommit, gitTreeState and buildDate.
var versionPackages = []string{
	"k8s.io/component-base/version",
	"k8s.io/client-go/pkg/version",
}

// Module paths whose versions are read from go.mod.
const (
	kubernetesModule = "k8s.io/kubernetes"
	etcdModule       = "go.etcd.io/etcd/server/v3"
)

// binaryNames maps a tool whose import path does not end in its program's
// name.
var binaryNames = map[string]string{etcdModule: "etcd"}

// Swell's binaries for the image table: image name → package in the main
// module. An optional one whose package has no main package yet is left
// unbuilt (Binaries.Unbuilt), so that only a pod that uses it fails.
var swellImages = []struct {
	image, pkg string
	optional   bool
}{
	{"swell/hello", "./cmd/hello", false},
	{"swell/queue-proxy", "./cmd/queue-proxy", false},
	{"swell/activator", "./cmd/activator", false},
	{"swell/autoscaler", "./cmd/autoscaler", true},
}

// ShellImage runs /bin/sh, for hooks and tests.
const ShellImage = "swell/shell"

// Options say where to find the sources and where to put the binaries.
// Every field is optional.
type Options struct {
	// ModuleDir is this module's root. Default: found from the working
	// directory (it or an ancestor, or their hack/cluster).
	ModuleDir string
	// MainDir is Swell's main module root. Default: ModuleDir/../..
	MainDir string
	// CacheDir holds the Kubernetes binaries, one directory per cache key.
	// Default: $XDG_CACHE_HOME (or ~/.cache) + /swell-cluster/bin.
	CacheDir string
	// SwellBinDir receives Swell's binaries. Default: CacheDir/swell.
	SwellBinDir string
	// SkipSwell builds only the Kubernetes binaries.
	SkipSwell bool
	// Go is the go command. Default: "go".
	Go string
	// Log reports each step and its duration. Default: text to stderr.
	Log *slog.Logger
}

// Versions are the inputs of the Kubernetes binaries' cache key.
type Versions struct {
	Kubernetes string // e.g. v1.37.2
	Etcd       string // e.g. v3.7.0
	Go         string // e.g. go1.26.8
	GOOS       string
	GOARCH     string
}

// Binaries are the built programs' paths.
type Binaries struct {
	// Dir holds the Kubernetes binaries; put it on PATH for kubectl.
	Dir                   string
	Etcd                  string
	KubeAPIServer         string
	KubeControllerManager string
	Kubectl               string
	// Images is the node agent's image table: image name (no tag) →
	// binary. Empty when Options.SkipSwell.
	Images map[string]string
	// Unbuilt maps the optional images whose package did not exist yet to
	// that package.
	Unbuilt  map[string]string
	Versions Versions
}

// Build builds what is missing: the Kubernetes binaries only when the cache
// has none for the current key, Swell's binaries always.
func Build(ctx context.Context, opts Options) (Binaries, error) {
	start := time.Now()
	o, err := opts.withDefaults()
	if err != nil {
		return Binaries{}, err
	}
	tools, err := o.tools(ctx)
	if err != nil {
		return Binaries{}, err
	}
	v, err := o.versions(ctx)
	if err != nil {
		return Binaries{}, err
	}
	ldflags, err := LDFlags(v.Kubernetes)
	if err != nil {
		return Binaries{}, err
	}
	key := CacheKey(v, tools, ldflags)
	b := Binaries{Dir: filepath.Join(o.CacheDir, key), Versions: v}
	paths := map[string]*string{
		"etcd": &b.Etcd, "kube-apiserver": &b.KubeAPIServer,
		"kube-controller-manager": &b.KubeControllerManager, "kubectl": &b.Kubectl,
	}
	for name, p := range paths {
		*p = filepath.Join(b.Dir, name)
		if !slicesContainsName(tools, name) {
			return Binaries{}, fmt.Errorf("build: %s is not a tool directive in %s/go.mod; have %v", name, o.ModuleDir, tools)
		}
	}

	if cached(b) {
		o.Log.Info("kubernetes binaries cached", "dir", b.Dir, "took", since(start))
	} else if err := o.buildKubernetes(ctx, b.Dir, tools, ldflags); err != nil {
		return Binaries{}, err
	}

	if !o.SkipSwell {
		if b.Images, b.Unbuilt, err = o.buildSwell(ctx); err != nil {
			return Binaries{}, err
		}
	}
	o.Log.Info("build done", "took", since(start))
	return b, nil
}

func (o Options) withDefaults() (Options, error) {
	if o.Go == "" {
		o.Go = "go"
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if o.ModuleDir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return o, err
		}
		if o.ModuleDir, err = FindModule(wd); err != nil {
			return o, err
		}
	}
	if o.MainDir == "" {
		o.MainDir = filepath.Join(o.ModuleDir, "..", "..")
	}
	if o.CacheDir == "" {
		c, err := os.UserCacheDir()
		if err != nil {
			return o, fmt.Errorf("build: no cache directory (set XDG_CACHE_HOME or HOME, or pass one): %w", err)
		}
		o.CacheDir = filepath.Join(c, "swell-cluster", "bin")
	}
	if o.SwellBinDir == "" {
		o.SwellBinDir = filepath.Join(o.CacheDir, "swell")
	}
	return o, nil
}

// FindModule returns the root of this module: dir or its nearest ancestor
// whose go.mod declares ModulePath, or the hack/cluster below one of them
// (so the command also works from Swell's root).
func FindModule(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		for _, c := range []string{d, filepath.Join(d, "hack", "cluster")} {
			if declares(filepath.Join(c, "go.mod")) {
				return c, nil
			}
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("build: no module %s at or above %s (run from Swell's source tree)", ModulePath, dir)
		}
	}
}

func declares(gomod string) bool {
	b, err := os.ReadFile(gomod)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" && strings.Trim(f[1], `"`) == ModulePath {
			return true
		}
	}
	return false
}

// tools returns the go.mod's tool directives, sorted.
func (o Options) tools(ctx context.Context) ([]string, error) {
	out, err := o.goOutput(ctx, o.ModuleDir, "mod", "edit", "-json")
	if err != nil {
		return nil, err
	}
	var mod struct{ Tool []struct{ Path string } }
	if err := json.Unmarshal(out, &mod); err != nil {
		return nil, fmt.Errorf("build: parse go mod edit -json: %w", err)
	}
	var tools []string
	for _, t := range mod.Tool {
		tools = append(tools, t.Path)
	}
	sort.Strings(tools)
	return tools, nil
}

func (o Options) versions(ctx context.Context) (Versions, error) {
	out, err := o.goOutput(ctx, o.ModuleDir, "list", "-m", "-f", "{{.Path}} {{.Version}}", kubernetesModule, etcdModule)
	if err != nil {
		return Versions{}, err
	}
	var v Versions
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		switch f[0] {
		case kubernetesModule:
			v.Kubernetes = f[1]
		case etcdModule:
			v.Etcd = f[1]
		}
	}
	if v.Kubernetes == "" || v.Etcd == "" {
		return Versions{}, fmt.Errorf("build: go list -m found no version for %s or %s: %q", kubernetesModule, etcdModule, out)
	}
	out, err = o.goOutput(ctx, o.ModuleDir, "env", "GOVERSION", "GOOS", "GOARCH")
	if err != nil {
		return Versions{}, err
	}
	f := strings.Fields(string(out))
	if len(f) != 3 {
		return Versions{}, fmt.Errorf("build: go env GOVERSION GOOS GOARCH: unexpected %q", out)
	}
	v.Go, v.GOOS, v.GOARCH = f[0], f[1], f[2]
	return v, nil
}

var semver = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

// LDFlags returns the -ldflags that stamp kubeVersion (a release such as
// v1.37.2) into the Kubernetes binaries, so /version and version-skew
// checks see a real version rather than v0.0.0-master.
func LDFlags(kubeVersion string) (string, error) {
	m := semver.FindStringSubmatch(kubeVersion)
	if m == nil {
		return "", fmt.Errorf("build: Kubernetes version %q is not a semantic version such as v1.37.2", kubeVersion)
	}
	minor := m[2]
	if m[4] != "" {
		minor += "+" // Kubernetes' convention for pre-releases.
	}
	vars := [][2]string{
		{"gitVersion", kubeVersion},
		{"gitMajor", m[1]},
		{"gitMinor", minor},
		{"gitCommit", GitCommit},
		{"gitTreeState", "clean"},
		{"buildDate", BuildDate},
	}
	var flags []string
	for _, pkg := range versionPackages {
		for _, kv := range vars {
			flags = append(flags, fmt.Sprintf("-X %s.%s=%s", pkg, kv[0], kv[1]))
		}
	}
	return strings.Join(flags, " "), nil
}

// CacheKey names the cache directory of the Kubernetes binaries built from
// v with tools and ldflags: readable versions, and a digest of the rest so
// that a change to the recipe never reuses stale binaries.
func CacheKey(v Versions, tools []string, ldflags string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%q %q %q\n", tools, ldflags, buildFlags)
	return fmt.Sprintf("kubernetes-%s_etcd-%s_%s_%s-%s_%s",
		v.Kubernetes, v.Etcd, v.Go, v.GOOS, v.GOARCH, hex.EncodeToString(h.Sum(nil))[:12])
}

// buildFlags go before -ldflags in every go build.
var buildFlags = []string{"-trimpath"}

// BinaryName is the program name of the tool at import path p.
func BinaryName(p string) string {
	if n, ok := binaryNames[p]; ok {
		return n
	}
	return path.Base(p)
}

func slicesContainsName(tools []string, name string) bool {
	for _, t := range tools {
		if BinaryName(t) == name {
			return true
		}
	}
	return false
}

func cached(b Binaries) bool {
	for _, p := range []string{b.Etcd, b.KubeAPIServer, b.KubeControllerManager, b.Kubectl} {
		if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o100 == 0 {
			return false
		}
	}
	return true
}

// buildKubernetes builds every tool into a fresh directory and renames it
// to dir, so the cache never holds a partial build, even if two builds race.
func (o Options) buildKubernetes(ctx context.Context, dir string, tools []string, ldflags string) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("build: %w", err)
	}
	suffix := make([]byte, 4)
	rand.Read(suffix)
	tmp := dir + ".partial-" + hex.EncodeToString(suffix)
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return fmt.Errorf("build: %w", err)
	}
	defer os.RemoveAll(tmp)
	// A directory missing a binary (removed by hand) is rebuilt whole.
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("build: %w", err)
	}
	o.Log.Info("building kubernetes binaries (minutes when Go's build cache is cold)", "into", dir)
	for _, t := range tools {
		args := append([]string{"build"}, buildFlags...)
		args = append(args, "-ldflags", ldflags, "-o", filepath.Join(tmp, BinaryName(t)), t)
		if err := o.goBuild(ctx, o.ModuleDir, BinaryName(t), args...); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, statErr := os.Stat(dir); statErr == nil {
			return nil // Another build of the same key finished first.
		}
		return fmt.Errorf("build: %w", err)
	}
	return nil
}

// buildSwell builds Swell's image binaries into SwellBinDir and returns the
// image table and the optional images left unbuilt.
func (o Options) buildSwell(ctx context.Context) (images, unbuilt map[string]string, err error) {
	if err := os.MkdirAll(o.SwellBinDir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("build: %w", err)
	}
	images = map[string]string{ShellImage: "/bin/sh"}
	unbuilt = map[string]string{}
	for _, img := range swellImages {
		if img.optional && !hasMainPackage(filepath.Join(o.MainDir, img.pkg)) {
			o.Log.Info("not built: no main package yet; pods using the image will wait in ErrImagePull", "image", img.image, "package", img.pkg)
			unbuilt[img.image] = img.pkg
			continue
		}
		out := filepath.Join(o.SwellBinDir, path.Base(img.pkg))
		args := append([]string{"build"}, buildFlags...)
		args = append(args, "-o", out, img.pkg)
		if err := o.goBuild(ctx, o.MainDir, path.Base(img.pkg), args...); err != nil {
			return nil, nil, err
		}
		images[img.image] = out
	}
	return images, unbuilt, nil
}

// hasMainPackage reports whether dir holds a Go file of package main (test
// files aside).
func hasMainPackage(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		n := e.Name()
		if e.Type()&fs.ModeType != 0 || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, n), nil, parser.PackageClauseOnly)
		if err == nil && f.Name.Name == "main" {
			return true
		}
	}
	return false
}

func (o Options) goBuild(ctx context.Context, dir, what string, args ...string) error {
	start := time.Now()
	cmd := exec.CommandContext(ctx, o.Go, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build %s: go %s: %w\n%s", what, strings.Join(args, " "), err, out.Bytes())
	}
	o.Log.Info("built", "binary", what, "took", since(start))
	return nil
}

func (o Options) goOutput(ctx context.Context, dir string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, o.Go, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.Error
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("build: %w (is Go installed?)", err)
		}
		return nil, fmt.Errorf("build: go %s in %s: %w: %s", strings.Join(args, " "), dir, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }
