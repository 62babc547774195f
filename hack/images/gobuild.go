package images

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// buildFlags make a static, reproducible binary: no cgo (set in goEnv), no
// local paths, no VCS stamp (the image's labels carry the revision, and a
// dirty tree would change the binary), no symbol tables (as `make build`).
var buildFlags = []string{"-trimpath", "-buildvcs=false", "-ldflags=-s -w"}

// goBuild compiles the main package pkg of the module at dir for p and
// returns the executable.
func goBuild(ctx context.Context, dir, pkg string, p v1.Platform) ([]byte, error) {
	env, err := goEnv(p)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "swell-image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "exe")
	args := append([]string{"build"}, buildFlags...)
	cmd := exec.CommandContext(ctx, "go", append(args, "-o", out, pkg)...)
	cmd.Dir = dir
	// Later entries win: what the binary depends on is set here, whatever
	// the caller's environment says.
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go build %s in %s: %w\n%s", pkg, dir, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return os.ReadFile(out)
}

// goEnv is the environment that makes `go build` compile for p. A variant
// selects the instruction set (GOAMD64, GOARM64, GOARM); without one, the
// baseline of the architecture, so that the caller's environment does not
// change the binary.
func goEnv(p v1.Platform) ([]string, error) {
	if p.OS == "" || p.Architecture == "" {
		return nil, fmt.Errorf("platform %q: want os/arch[/variant], such as linux/amd64", p.String())
	}
	env := []string{"CGO_ENABLED=0", "GOOS=" + p.OS, "GOARCH=" + p.Architecture, "GOFLAGS=", "GOWORK=off"}
	bad := func(accepted string) error {
		return fmt.Errorf("platform %s: variant %q: accepted for %s are %s", p, p.Variant, p.Architecture, accepted)
	}
	switch p.Architecture {
	case "amd64":
		switch p.Variant {
		case "":
			env = append(env, "GOAMD64=v1")
		case "v1", "v2", "v3", "v4":
			env = append(env, "GOAMD64="+p.Variant)
		default:
			return nil, bad("none, v1, v2, v3 and v4")
		}
	case "arm64":
		switch {
		case p.Variant == "" || p.Variant == "v8":
			env = append(env, "GOARM64=v8.0")
		case strings.HasPrefix(p.Variant, "v8.") || strings.HasPrefix(p.Variant, "v9."):
			env = append(env, "GOARM64="+p.Variant)
		default:
			return nil, bad("none, v8 and v8.N or v9.N")
		}
	case "arm":
		switch p.Variant {
		case "v5", "v6", "v7":
			env = append(env, "GOARM="+strings.TrimPrefix(p.Variant, "v"))
		default:
			return nil, bad("v5, v6 and v7")
		}
	default:
		if p.Variant != "" {
			return nil, bad("none")
		}
	}
	return env, nil
}
