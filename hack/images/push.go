package images

import (
	"bytes"
	"context"
	"fmt"
	"path"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"go.yaml.in/yaml/v3"
)

// Target is where the image named name is pushed under repo ("host/org"):
// repo plus the name's last element, tagged tag.
func Target(repo, name, tag string) string {
	return strings.TrimSuffix(repo, "/") + "/" + path.Base(name) + ":" + tag
}

// Push writes idx, its images and their blobs to ref (a repository and a
// tag, such as "ghcr.io/swell-run/activator:v1") and returns the
// reference by digest to what it wrote. opts say how to authenticate,
// among others (remote.WithAuthFromKeychain).
func Push(ctx context.Context, ref string, idx v1.ImageIndex, opts ...remote.Option) (name.Digest, error) {
	tag, err := name.NewTag(ref)
	if err != nil {
		return name.Digest{}, fmt.Errorf("push to %q: %w", ref, err)
	}
	d, err := idx.Digest()
	if err != nil {
		return name.Digest{}, fmt.Errorf("push to %s: %w", ref, err)
	}
	if err := remote.WriteIndex(tag, idx, append(opts, remote.WithContext(ctx))...); err != nil {
		return name.Digest{}, fmt.Errorf("push to %s: %w", ref, err)
	}
	return tag.Context().Digest(d.String()), nil
}

// Pinned maps the name of an image in deploy/ (Autoscaler, Activator,
// QueueProxy, Hello) to where it was pushed, by digest.
type Pinned map[string]name.Digest

// InstallOverlay returns a kustomization.yaml that installs base — Swell's
// deploy/, as a path relative to the overlay's directory — with the
// autoscaler's and the activator's images pinned, and the autoscaler's
// QUEUE_PROXY_IMAGE, the queue-proxy image the webhook injects, too:
// kustomize's images cannot reach an environment variable, so a patch
// sets it.
func (p Pinned) InstallOverlay(base string) ([]byte, error) {
	qp, err := p.get(QueueProxy)
	if err != nil {
		return nil, err
	}
	smp, err := marshal(map[string]any{
		"apiVersion": "apps/v1",
		"kind":       "Deployment",
		"metadata":   map[string]any{"name": "autoscaler", "namespace": "swell-system"},
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
			"containers": []any{map[string]any{
				"name": "autoscaler",
				"env":  []any{map[string]any{"name": "QUEUE_PROXY_IMAGE", "value": qp.Name()}},
			}},
		}}},
	})
	if err != nil {
		return nil, err
	}
	return p.overlay("Swell (deploy/) with its images pinned by digest: `kubectl apply -k` this\ndirectory (docs/kubernetes.md).", base, []string{Autoscaler, Activator}, string(smp))
}

// ExampleOverlay returns a kustomization.yaml that installs base — the
// example deploy/examples/hello, as a path relative to the overlay's
// directory — with its image pinned.
func (p Pinned) ExampleOverlay(base string) ([]byte, error) {
	return p.overlay("The example service (deploy/examples/hello) with its image pinned by\ndigest: `kubectl apply -k` this directory once Swell runs.", base, []string{Hello}, "")
}

// kustomization is the part of kustomize's Kustomization an overlay uses,
// its fields in the order kustomize's own files list them.
type kustomization struct {
	APIVersion string   `yaml:"apiVersion"`
	Kind       string   `yaml:"kind"`
	Resources  []string `yaml:"resources"`
	Images     []image  `yaml:"images"`
	Patches    []patch  `yaml:"patches,omitempty"`
}

// image is an entry of a kustomization's images: every container image
// named Name becomes NewName@Digest.
type image struct {
	Name    string `yaml:"name"`
	NewName string `yaml:"newName"`
	Digest  string `yaml:"digest"`
}

// patch is an inline strategic-merge patch of a kustomization.
type patch struct {
	Patch string `yaml:"patch"`
}

// overlay renders a kustomization of base with the images named pinned
// and the strategic-merge patch smp, if any, applied, under a comment
// saying what it is about.
func (p Pinned) overlay(about, base string, names []string, smp string) ([]byte, error) {
	k := kustomization{APIVersion: "kustomize.config.k8s.io/v1beta1", Kind: "Kustomization", Resources: []string{base}}
	for _, n := range names {
		d, err := p.get(n)
		if err != nil {
			return nil, err
		}
		k.Images = append(k.Images, image{Name: n, NewName: d.Context().Name(), Digest: d.DigestStr()})
	}
	if smp != "" {
		k.Patches = append(k.Patches, patch{Patch: smp})
	}
	out, err := marshal(k)
	if err != nil {
		return nil, err
	}
	comment := "# " + strings.ReplaceAll(about, "\n", "\n# ") + "\n"
	return append([]byte(comment), out...), nil
}

// marshal renders v as YAML indented as kustomize writes it.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// get returns where the image named n was pushed.
func (p Pinned) get(n string) (name.Digest, error) {
	d, ok := p[n]
	if !ok {
		return name.Digest{}, fmt.Errorf("overlay: no pushed image for %s", n)
	}
	return d, nil
}
