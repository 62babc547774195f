package build

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// TraefikVersion is the release of Traefik, the cluster's ingress
// controller, built from its module's source. It is pinned here, not as a
// tool directive: Traefik's go.mod replaces some of its dependencies, and
// Go honours replaces only in the main module, so Traefik builds only as
// a main module of its own. Keep it a v3.6.x: from v3.7.0 on, its go.mod
// also replaces a nested module with a local directory that module
// downloads leave out, so no later release builds from the module proxy.
const TraefikVersion = "v3.6.12"

// Module paths of the ingress controller and of the Gateway API it
// implements.
const (
	traefikModule    = "github.com/traefik/traefik/v3"
	gatewayAPIModule = "sigs.k8s.io/gateway-api"
)

// traefikPackage is Traefik's main package, in its module.
const traefikPackage = "./cmd/traefik"

// gatewayCRDsDir holds, in the Gateway API's module, the CRDs of its
// standard channel: the stable resources, which Traefik serves without
// its experimental option.
const gatewayCRDsDir = "config/crd/standard"

// gatewayCRDPrefix starts the file name of every CRD there (the directory
// also holds a kustomization, which is not a resource).
const gatewayCRDPrefix = "gateway.networking.k8s.io_"

// Traefik is the ingress controller's build: its binary, and the Gateway
// API CRDs of the release it is built with, which a cluster must have
// for its Gateway API provider to serve.
type Traefik struct {
	Dir    string
	Binary string
	// GatewayCRDs holds the standard channel's CRDs as YAML files, and
	// nothing else: `kubectl apply -f` installs them.
	GatewayCRDs string
}

// TraefikLDFlags strip the symbol tables (as Traefik's releases do; the
// binary is about a third smaller) and stamp version, which Traefik
// reports in its log and its API.
func TraefikLDFlags(version string) string {
	const pkg = traefikModule + "/pkg/version"
	return fmt.Sprintf("-s -w -X %s.Version=%s -X %s.BuildDate=%s", pkg, version, pkg, BuildDate)
}

// TraefikCacheKey names the cache directory of Traefik built from its
// release v.Traefik with flags: the module's source is fixed by its
// version (the checksum database vouches for it), and so are its
// dependencies, by its own go.sum.
func TraefikCacheKey(v Versions, flags []string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%q %q %q %q\n", traefikPackage, flags, buildFlags, gatewayCRDsDir)
	return fmt.Sprintf("traefik-%s_%s_%s-%s_%s", v.Traefik, v.Go, v.GOOS, v.GOARCH, hex.EncodeToString(h.Sum(nil))[:12])
}

// traefik returns Traefik's build for v, building it when the cache has
// none.
func (o Options) traefik(ctx context.Context, v Versions) (Traefik, error) {
	flags := []string{"-ldflags", TraefikLDFlags(v.Traefik)}
	dir := filepath.Join(o.CacheDir, TraefikCacheKey(v, flags))
	t := Traefik{Dir: dir, Binary: filepath.Join(dir, "traefik"), GatewayCRDs: filepath.Join(dir, "gateway-crds")}
	if cached([]*string{&t.Binary}) && hasCRDs(t.GatewayCRDs) {
		o.Log.Info("traefik cached", "dir", dir)
		return t, nil
	}
	if err := o.buildTraefik(ctx, v.Traefik, dir, flags); err != nil {
		return Traefik{}, err
	}
	return t, nil
}

// hasCRDs reports whether dir holds at least one CRD file.
func hasCRDs(dir string) bool {
	m, _ := filepath.Glob(filepath.Join(dir, gatewayCRDPrefix+"*.yaml"))
	return len(m) > 0
}

// buildTraefik builds Traefik's release version as the main module it
// must be: its source downloaded from the module proxy and copied where
// it may be written (the module cache is read-only, and the build may
// add to go.sum), built there, and its Gateway API CRDs copied beside
// the binary. As buildTools, it fills a fresh directory and renames it
// to dir.
func (o Options) buildTraefik(ctx context.Context, version, dir string, flags []string) error {
	start := time.Now()
	o.Log.Info("building traefik "+version+" (about 6 minutes on 2 cores, and 2.4 GB of modules, when Go's caches are cold)", "into", dir)
	var gwVersion string
	err := fill(dir, func(tmp string) error {
		t0 := time.Now()
		mod, err := o.download(ctx, tmp, traefikModule+"@"+version)
		if err != nil {
			return err
		}
		src := filepath.Join(tmp, "src")
		if err := os.CopyFS(src, os.DirFS(mod.Dir)); err != nil {
			return fmt.Errorf("build traefik: copy its source from %s: %w", mod.Dir, err)
		}
		o.Log.Info("downloaded", "module", traefikModule+"@"+version, "took", since(t0))

		// Traefik's own go.mod, with its replaces, decides every
		// dependency; -mod=mod lets the build complete the go.sum of the
		// copy.
		env := []string{"CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOWORK=off"}
		args := append(append(append([]string{"build"}, buildFlags...), flags...), "-o", filepath.Join(tmp, "traefik"), traefikPackage)
		if err := o.goIn(ctx, src, env, "traefik", args...); err != nil {
			if local := localReplaces(filepath.Join(src, "go.mod")); len(local) > 0 {
				return fmt.Errorf("%w\nTraefik %s replaces modules with directories of its repository (%s), which its module download leaves out: pin a release that does not (a v3.6.x) in build.TraefikVersion", err, version, strings.Join(local, ", "))
			}
			return err
		}

		// The CRDs of the Gateway API release Traefik was just built with.
		out, err := o.goEnvOutput(ctx, src, env, "list", "-m", "-f", "{{.Version}} {{.Dir}}", gatewayAPIModule)
		if err != nil {
			return err
		}
		v, gwDir, ok := strings.Cut(strings.TrimSpace(string(out)), " ")
		if !ok || gwDir == "" {
			return fmt.Errorf("build traefik: go list -m %s in its source: no directory in %q", gatewayAPIModule, out)
		}
		gwVersion = v
		if err := copyCRDs(filepath.Join(tmp, "gateway-crds"), filepath.Join(gwDir, gatewayCRDsDir)); err != nil {
			return fmt.Errorf("build traefik: the Gateway API %s CRDs: %w", gwVersion, err)
		}
		if err := os.RemoveAll(src); err != nil {
			return fmt.Errorf("build: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	o.Log.Info("built traefik", "version", version, "gateway-api", gwVersion, "took", since(start))
	return nil
}

// moduleDownload is what `go mod download -json` says of a module.
type moduleDownload struct {
	Path, Version, Dir, Sum, Error string
}

// download downloads the module at path@version into the module cache
// (checked against the checksum database) and returns where it is. It
// runs in dir, which must be outside any module.
func (o Options) download(ctx context.Context, dir, pathVersion string) (moduleDownload, error) {
	out, err := o.goEnvOutput(ctx, dir, []string{"GOFLAGS=", "GOWORK=off"}, "mod", "download", "-json", pathVersion)
	var m moduleDownload
	_ = json.Unmarshal(out, &m) // What it holds, if anything, says more than the exit status.
	switch {
	case m.Error != "":
		err = errors.New(m.Error)
	case err != nil:
	case m.Dir == "":
		err = fmt.Errorf("go mod download -json gave no directory: %q", out)
	}
	if err != nil {
		return moduleDownload{}, fmt.Errorf("build: download %s (the Go module proxy must be reachable, as for every other program of the cluster): %w", pathVersion, err)
	}
	return m, nil
}

// copyCRDs copies the CRD files of dir into a new directory to.
func copyCRDs(to, dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, gatewayCRDPrefix+"*.yaml"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no %s*.yaml in %s", gatewayCRDPrefix, dir)
	}
	if err := os.Mkdir(to, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(to, filepath.Base(f)), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// localReplaces lists the replacements to local directories of the
// go.mod at path.
func localReplaces(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var local []string
	inBlock := false
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		switch {
		case line == "replace (":
			inBlock = true
			continue
		case inBlock && line == ")":
			inBlock = false
			continue
		case !inBlock && !strings.HasPrefix(line, "replace "):
			continue
		}
		_, target, ok := strings.Cut(strings.TrimPrefix(line, "replace "), "=>")
		if f := strings.Fields(target); ok && len(f) > 0 && (strings.HasPrefix(f[0], "./") || strings.HasPrefix(f[0], "../")) {
			local = append(local, f[0])
		}
	}
	return local
}
