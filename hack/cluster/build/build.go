// Package build builds the programs a test cluster runs, at the versions
// pinned as Go tool directives, into a cache keyed by those versions: etcd
// and Kubernetes' programs from this module's go.mod, with Kubernetes'
// version stamps; containerd, its runc shim, ctr and the CNI plugins from
// the runtime module's (runtime/go.mod); and Traefik, the ingress
// controller, from its own module at TraefikVersion.
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

// ModulePath is this module's path; the Kubernetes programs to build are
// its go.mod's tool directives.
const ModulePath = "github.com/swell-run/swell/hack/cluster"

// RuntimeModuleDir is the runtime module's directory, relative to this
// module's root; its go.mod's tool directives are the runtime's programs.
const RuntimeModuleDir = "build/runtime"

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

// Module paths whose versions name the caches.
const (
	kubernetesModule = "k8s.io/kubernetes"
	etcdModule       = "go.etcd.io/etcd/server/v3"
	containerdModule = "github.com/containerd/containerd/v2"
	pluginsModule    = "github.com/containernetworking/plugins"
)

// binaryNames maps a tool whose import path does not end in its program's
// name.
var binaryNames = map[string]string{etcdModule: "etcd"}

// runtimeTags leave out the snapshotters the node does not use, whose
// libraries need cgo (overlayfs and native remain).
const runtimeTags = "no_btrfs no_devmapper no_zfs"

// RuntimeLDFlags stamps containerd's version, which the Node reports as
// its container runtime's, as a release build does.
func RuntimeLDFlags(containerdVersion string) string {
	return "-X " + containerdModule + "/version.Version=" + containerdVersion
}

// cniPluginsPrefix starts the import path of every CNI plugin: those go to
// the CNI directory, the rest of the runtime to its bin directory.
const cniPluginsPrefix = pluginsModule + "/plugins/"

// Options say where to find the sources and where to put the binaries.
// Every field is optional.
type Options struct {
	// ModuleDir is this module's root. Default: found from the working
	// directory (it or an ancestor, or their hack/cluster).
	ModuleDir string
	// CacheDir holds the binaries, one directory per cache key.
	// Default: $XDG_CACHE_HOME (or ~/.cache) + /swell-cluster/bin.
	CacheDir string
	// Go is the go command. Default: "go".
	Go string
	// Log reports each step and its duration. Default: text to stderr.
	Log *slog.Logger
}

// Versions are the inputs of the caches' keys.
type Versions struct {
	Kubernetes string // e.g. v1.37.2
	Etcd       string // e.g. v3.7.0
	Containerd string // e.g. v2.4.2
	CNIPlugins string // e.g. v1.10.0
	Traefik    string // e.g. v3.6.12
	Go         string // e.g. go1.26.8
	GOOS       string
	GOARCH     string
}

// Binaries are the built programs' paths.
type Binaries struct {
	// Dir holds etcd and the Kubernetes binaries; put it on PATH for
	// kubectl.
	Dir                   string
	Etcd                  string
	KubeAPIServer         string
	KubeControllerManager string
	KubeScheduler         string
	Kubectl               string
	Kubelet               string
	KubeProxy             string
	Runtime               Runtime
	Traefik               Traefik
	Versions              Versions
}

// Runtime are the container runtime's programs.
type Runtime struct {
	// Dir holds containerd, containerd-shim-runc-v2 and ctr: containerd
	// finds the shim on its PATH.
	Dir        string
	Containerd string
	Shim       string
	Ctr        string
	// CNIDir holds the CNI plugins bridge, host-local, loopback and
	// portmap, and nothing else.
	CNIDir string
}

// kubernetesPrograms and runtimePrograms are the programs Build returns:
// each must be a tool directive of its module.
var (
	kubernetesPrograms = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kubelet", "kube-proxy"}
	runtimePrograms    = []string{"containerd", "containerd-shim-runc-v2", "ctr"}
	cniPrograms        = []string{"bridge", "host-local", "loopback", "portmap"}
)

// Build builds what the cache lacks: each set of binaries (Kubernetes',
// the runtime's, Traefik's) only when the cache has none for its current
// key.
func Build(ctx context.Context, opts Options) (Binaries, error) {
	start := time.Now()
	o, err := opts.withDefaults()
	if err != nil {
		return Binaries{}, err
	}
	runtimeDir := filepath.Join(o.ModuleDir, RuntimeModuleDir)
	kubeTools, err := o.tools(ctx, o.ModuleDir)
	if err != nil {
		return Binaries{}, err
	}
	runtimeTools, err := o.tools(ctx, runtimeDir)
	if err != nil {
		return Binaries{}, err
	}
	v, err := o.versions(ctx, runtimeDir)
	if err != nil {
		return Binaries{}, err
	}
	ldflags, err := LDFlags(v.Kubernetes)
	if err != nil {
		return Binaries{}, err
	}

	kubeDeps, err := o.deps(ctx, o.ModuleDir)
	if err != nil {
		return Binaries{}, err
	}
	runtimeDeps, err := o.deps(ctx, runtimeDir)
	if err != nil {
		return Binaries{}, err
	}
	b := Binaries{Dir: filepath.Join(o.CacheDir, CacheKey(v, kubeTools, ldflags, kubeDeps)), Versions: v}
	kube := map[string]*string{
		"etcd": &b.Etcd, "kube-apiserver": &b.KubeAPIServer, "kube-controller-manager": &b.KubeControllerManager,
		"kube-scheduler": &b.KubeScheduler, "kubectl": &b.Kubectl, "kubelet": &b.Kubelet, "kube-proxy": &b.KubeProxy,
	}
	if err := resolve(b.Dir, kubeTools, kubernetesPrograms, kube, o.ModuleDir); err != nil {
		return Binaries{}, err
	}
	rtFlags := []string{"-tags", runtimeTags, "-ldflags", RuntimeLDFlags(v.Containerd)}
	rtDir := filepath.Join(o.CacheDir, RuntimeCacheKey(v, runtimeTools, rtFlags, runtimeDeps))
	b.Runtime = Runtime{Dir: filepath.Join(rtDir, "bin"), CNIDir: filepath.Join(rtDir, "cni")}
	rt := map[string]*string{"containerd": &b.Runtime.Containerd, "containerd-shim-runc-v2": &b.Runtime.Shim, "ctr": &b.Runtime.Ctr}
	if err := resolve(b.Runtime.Dir, runtimeTools, runtimePrograms, rt, runtimeDir); err != nil {
		return Binaries{}, err
	}
	cni := map[string]*string{}
	for _, name := range cniPrograms {
		cni[name] = new(string)
	}
	if err := resolve(b.Runtime.CNIDir, runtimeTools, cniPrograms, cni, runtimeDir); err != nil {
		return Binaries{}, err
	}

	sets := []struct {
		what, dir, module string
		tools             []string
		programs          []*string
		flags             []string
		into              func(tool string) string
	}{
		{
			what: "kubernetes", dir: b.Dir, module: o.ModuleDir, tools: kubeTools,
			programs: values(kube), flags: []string{"-ldflags", ldflags},
			into: func(string) string { return "" },
		},
		{
			what: "runtime", dir: rtDir, module: runtimeDir, tools: runtimeTools,
			programs: append(values(rt), values(cni)...), flags: rtFlags,
			into: func(tool string) string {
				if strings.HasPrefix(tool, cniPluginsPrefix) {
					return "cni"
				}
				return "bin"
			},
		},
	}
	for _, s := range sets {
		if cached(s.programs) {
			o.Log.Info(s.what+" binaries cached", "dir", s.dir)
			continue
		}
		if err := o.buildTools(ctx, s.what, s.dir, s.module, s.tools, s.flags, s.into); err != nil {
			return Binaries{}, err
		}
	}
	if b.Traefik, err = o.traefik(ctx, v); err != nil {
		return Binaries{}, err
	}
	o.Log.Info("build done", "took", since(start))
	return b, nil
}

// deps lists the module graph of the module at dir, after its replaces,
// one module and version a line: what its programs are built from besides
// the toolchain and the flags.
func (o Options) deps(ctx context.Context, dir string) ([]byte, error) {
	return o.goOutput(ctx, dir, "list", "-m", "all")
}

// resolve sets each program's path in dir, and fails unless every one is a
// tool directive of the module at moduleDir.
func resolve(dir string, tools, programs []string, paths map[string]*string, moduleDir string) error {
	for _, name := range programs {
		if !slicesContainsName(tools, name) {
			return fmt.Errorf("build: %s is not a tool directive in %s/go.mod; have %v", name, moduleDir, tools)
		}
		*paths[name] = filepath.Join(dir, name)
	}
	return nil
}

func values(m map[string]*string) []*string {
	var out []*string
	for _, p := range m {
		out = append(out, p)
	}
	return out
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
	if o.CacheDir == "" {
		c, err := os.UserCacheDir()
		if err != nil {
			return o, fmt.Errorf("build: no cache directory (set XDG_CACHE_HOME or HOME, or pass one): %w", err)
		}
		o.CacheDir = filepath.Join(c, "swell-cluster", "bin")
	}
	return o, nil
}

// FindModule returns the root of this module: dir or its nearest ancestor
// whose go.mod declares ModulePath, or the hack/cluster below one of them
// (so the command also works from Swell's root).
func FindModule(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("build: %w", err)
	}
	for d := abs; ; d = filepath.Dir(d) {
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

// tools returns the tool directives of the go.mod in dir, sorted.
func (o Options) tools(ctx context.Context, dir string) ([]string, error) {
	out, err := o.goOutput(ctx, dir, "mod", "edit", "-json")
	if err != nil {
		return nil, err
	}
	var mod struct{ Tool []struct{ Path string } }
	if err := json.Unmarshal(out, &mod); err != nil {
		return nil, fmt.Errorf("build: parse go mod edit -json in %s: %w", dir, err)
	}
	var tools []string
	for _, t := range mod.Tool {
		tools = append(tools, t.Path)
	}
	sort.Strings(tools)
	return tools, nil
}

func (o Options) versions(ctx context.Context, runtimeDir string) (Versions, error) {
	var v Versions
	for _, m := range []struct {
		dir     string
		modules map[string]*string
	}{
		{o.ModuleDir, map[string]*string{kubernetesModule: &v.Kubernetes, etcdModule: &v.Etcd}},
		{runtimeDir, map[string]*string{containerdModule: &v.Containerd, pluginsModule: &v.CNIPlugins}},
	} {
		args := []string{"list", "-m", "-f", "{{.Path}} {{.Version}}"}
		for path := range m.modules {
			args = append(args, path)
		}
		out, err := o.goOutput(ctx, m.dir, args...)
		if err != nil {
			return Versions{}, err
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if f := strings.Fields(line); len(f) == 2 && m.modules[f[0]] != nil {
				*m.modules[f[0]] = f[1]
			}
		}
		for path, version := range m.modules {
			if *version == "" {
				return Versions{}, fmt.Errorf("build: go list -m in %s found no version for %s: %q", m.dir, path, out)
			}
		}
	}
	out, err := o.goOutput(ctx, o.ModuleDir, "env", "GOVERSION", "GOOS", "GOARCH")
	if err != nil {
		return Versions{}, err
	}
	f := strings.Fields(string(out))
	if len(f) != 3 {
		return Versions{}, fmt.Errorf("build: go env GOVERSION GOOS GOARCH: unexpected %q", out)
	}
	v.Go, v.GOOS, v.GOARCH = f[0], f[1], f[2]
	v.Traefik = TraefikVersion
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
// v with tools and ldflags, from the modules deps lists: readable versions,
// and a digest of the rest so that a change to the recipe or to any
// dependency never reuses stale binaries.
func CacheKey(v Versions, tools []string, ldflags string, deps []byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "%q %q %q\n", tools, ldflags, buildFlags)
	h.Write(deps)
	return fmt.Sprintf("kubernetes-%s_etcd-%s_%s_%s-%s_%s",
		v.Kubernetes, v.Etcd, v.Go, v.GOOS, v.GOARCH, hex.EncodeToString(h.Sum(nil))[:12])
}

// RuntimeCacheKey names the cache directory of the runtime's binaries
// built with flags, as CacheKey does the Kubernetes ones'.
func RuntimeCacheKey(v Versions, tools, flags []string, deps []byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "%q %q %q\n", tools, flags, buildFlags)
	h.Write(deps)
	return fmt.Sprintf("containerd-%s_cni-plugins-%s_%s_%s-%s_%s",
		v.Containerd, v.CNIPlugins, v.Go, v.GOOS, v.GOARCH, hex.EncodeToString(h.Sum(nil))[:12])
}

// buildFlags go first in every go build.
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

func cached(programs []*string) bool {
	for _, p := range programs {
		if st, err := os.Stat(*p); err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o100 == 0 {
			return false
		}
	}
	return true
}

// buildTools builds every tool of the module at moduleDir into a fresh
// directory, each into the subdirectory into(tool) names, and renames it
// to dir, so the cache never holds a partial build, even if two builds
// race.
func (o Options) buildTools(ctx context.Context, what, dir, moduleDir string, tools, flags []string, into func(string) string) error {
	start := time.Now()
	o.Log.Info("building "+what+" binaries (minutes when Go's build cache is cold)", "into", dir)
	err := fill(dir, func(tmp string) error {
		for _, t := range tools {
			out := filepath.Join(tmp, into(t), BinaryName(t))
			if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
				return fmt.Errorf("build: %w", err)
			}
			args := append(append(append([]string{"build"}, buildFlags...), flags...), "-o", out, t)
			if err := o.goBuild(ctx, moduleDir, BinaryName(t), args...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	o.Log.Info("built "+what+" binaries", "took", since(start))
	return nil
}

// fill makes dir anew with what build writes into a fresh directory
// beside it, renamed to dir once build succeeds, so that the cache never
// holds a partial build, even if two builds race. A directory missing a
// file (removed by hand) is rebuilt whole.
func fill(dir string, build func(tmp string) error) error {
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
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("build: %w", err)
	}
	if err := build(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, statErr := os.Stat(dir); statErr == nil {
			return nil // Another build of the same key finished first.
		}
		return fmt.Errorf("build: %w", err)
	}
	return nil
}

// goBuild runs a go build of what in dir, without cgo.
func (o Options) goBuild(ctx context.Context, dir, what string, args ...string) error {
	return o.goIn(ctx, dir, []string{"CGO_ENABLED=0"}, what, args...)
}

// goIn runs the go command in dir with env added to the environment, and
// logs how long it took.
func (o Options) goIn(ctx context.Context, dir string, env []string, what string, args ...string) error {
	start := time.Now()
	cmd := exec.CommandContext(ctx, o.Go, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build %s: go %s: %w\n%s", what, strings.Join(args, " "), err, out.Bytes())
	}
	o.Log.Info("built", "binary", what, "took", since(start))
	return nil
}

func (o Options) goOutput(ctx context.Context, dir string, args ...string) ([]byte, error) {
	return o.goEnvOutput(ctx, dir, nil, args...)
}

// goEnvOutput runs the go command in dir with env added to the
// environment, and returns its standard output.
func (o Options) goEnvOutput(ctx context.Context, dir string, env []string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, o.Go, args...)
	cmd.Dir = dir
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.Error
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("build: %w (is Go installed?)", err)
		}
		return out, fmt.Errorf("build: go %s in %s: %w: %s", strings.Join(args, " "), dir, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }
