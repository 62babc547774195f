package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"go.yaml.in/yaml/v3"
	sigsyaml "sigs.k8s.io/yaml"
)

// Media types of a Helm chart stored in an OCI registry, as Helm writes and
// reads them (`helm push`, `helm install oci://...`).
const (
	ChartConfigMediaType  types.MediaType = "application/vnd.cncf.helm.config.v1+json"
	ChartContentMediaType types.MediaType = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
)

// ChartName is the name of Swell's chart (deploy/chart/Chart.yaml).
const ChartName = "swell"

// chartValueNames maps the images a chart pins to their key under the
// chart's images value.
var chartValueNames = map[string]string{Autoscaler: "autoscaler", Activator: "activator", QueueProxy: "queueProxy"}

// ChartVersion is the chart version (SemVer, as Helm requires) of an
// images version: v1.2.3 is 1.2.3, and anything else, such as a revision,
// a pre-release of 0.0.0.
func ChartVersion(version string) string {
	if semver.MatchString(version) {
		return strings.TrimPrefix(version, "v")
	}
	pre := strings.Trim(nonSemverIdent.ReplaceAllString(version, "-"), "-")
	if pre == "" {
		pre = "dev"
	}
	return "0.0.0-" + pre
}

var (
	semver         = regexp.MustCompile(`^v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)
	nonSemverIdent = regexp.MustCompile(`[^0-9A-Za-z-]+`)
)

// PackageChart returns the chart in dir (deploy/chart) packaged as
// `helm package` would, a gzipped tar of <name>/..., with its version and
// appVersion set to version and its images pinned to p's digests, so that
// installing it with no values installs what was pushed. Entries carry
// the time created, so the same inputs give the same bytes.
func (p Pinned) PackageChart(dir, version string, created time.Time) ([]byte, error) {
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		files[filepath.ToSlash(rel)], err = os.ReadFile(path)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("chart %s: %w", dir, err)
	}
	if files["Chart.yaml"] == nil || files["values.yaml"] == nil {
		return nil, fmt.Errorf("chart %s: no Chart.yaml or values.yaml", dir)
	}
	if files["Chart.yaml"], err = setScalars(files["Chart.yaml"], map[string]string{
		"version": ChartVersion(version), "appVersion": version,
	}); err != nil {
		return nil, fmt.Errorf("chart %s: Chart.yaml: %w", dir, err)
	}
	pins := map[string]string{}
	for image, key := range chartValueNames {
		d, err := p.get(image)
		if err != nil {
			return nil, err
		}
		pins["images."+key+".repository"] = d.Context().Name()
		pins["images."+key+".tag"] = version
		pins["images."+key+".digest"] = d.DigestStr()
	}
	if files["values.yaml"], err = setScalars(files["values.yaml"], pins); err != nil {
		return nil, fmt.Errorf("chart %s: values.yaml: %w", dir, err)
	}

	var b bytes.Buffer
	gz := gzip.NewWriter(&b)
	tw := tar.NewWriter(gz)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		hdr := &tar.Header{Name: ChartName + "/" + n, Mode: 0o644, Size: int64(len(files[n])), ModTime: created, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(files[n]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// setScalars sets the scalars at the dotted paths of the YAML document
// data to their values, keeping its comments and order; a path must exist.
func setScalars(data []byte, values map[string]string) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, fmt.Errorf("not a YAML document")
	}
	for path, value := range values {
		n := doc.Content[0]
		for _, k := range strings.Split(path, ".") {
			n = mapValue(n, k)
			if n == nil {
				return nil, fmt.Errorf("no %s", path)
			}
		}
		if n.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("%s is not a scalar", path)
		}
		n.SetString(value)
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func mapValue(n *yaml.Node, key string) *yaml.Node {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// ChartArtifact is a packaged chart (PackageChart) as the OCI artifact
// Helm pushes: its Chart.yaml as the config, as JSON, and the package as
// the one layer.
func ChartArtifact(pkg []byte, created time.Time) (v1.Image, error) {
	meta, err := chartYAML(pkg)
	if err != nil {
		return nil, err
	}
	config, err := sigsyaml.YAMLToJSON(meta)
	if err != nil {
		return nil, fmt.Errorf("chart: Chart.yaml: %w", err)
	}
	var m struct {
		Name, Version, Description string
	}
	if err := json.Unmarshal(config, &m); err != nil {
		return nil, fmt.Errorf("chart: Chart.yaml: %w", err)
	}
	a := &chartArtifact{config: config, content: pkg}
	desc := func(b []byte, mt types.MediaType) (v1.Descriptor, error) {
		h, n, err := v1.SHA256(bytes.NewReader(b))
		return v1.Descriptor{MediaType: mt, Size: n, Digest: h}, err
	}
	cd, err := desc(config, ChartConfigMediaType)
	if err != nil {
		return nil, err
	}
	ld, err := desc(pkg, ChartContentMediaType)
	if err != nil {
		return nil, err
	}
	a.manifest, err = json.Marshal(v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		Config:        cd,
		Layers:        []v1.Descriptor{ld},
		Annotations: map[string]string{
			"org.opencontainers.image.title":       m.Name,
			"org.opencontainers.image.version":     m.Version,
			"org.opencontainers.image.description": m.Description,
			"org.opencontainers.image.created":     created.UTC().Format(time.RFC3339),
			"org.opencontainers.image.source":      "https://github.com/swell-run/swell",
		},
	})
	if err != nil {
		return nil, err
	}
	return partial.CompressedToImage(a)
}

// chartYAML returns the Chart.yaml of a packaged chart.
func chartYAML(pkg []byte) ([]byte, error) {
	gz, err := gzip.NewReader(bytes.NewReader(pkg))
	if err != nil {
		return nil, fmt.Errorf("chart package: %w", err)
	}
	tr := tar.NewReader(gz)
	for {
		hdr, err := tr.Next()
		if err != nil {
			return nil, fmt.Errorf("chart package: no %s/Chart.yaml: %w", ChartName, err)
		}
		if hdr.Name == ChartName+"/Chart.yaml" {
			var b bytes.Buffer
			if _, err := b.ReadFrom(tr); err != nil {
				return nil, err
			}
			return b.Bytes(), nil
		}
	}
}

// chartArtifact is a chart's OCI manifest with its two blobs.
type chartArtifact struct {
	manifest, config, content []byte
}

func (a *chartArtifact) RawConfigFile() ([]byte, error)      { return a.config, nil }
func (a *chartArtifact) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (a *chartArtifact) RawManifest() ([]byte, error)        { return a.manifest, nil }

func (a *chartArtifact) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if d, _, _ := v1.SHA256(bytes.NewReader(a.content)); d == h {
		return chartLayer{a.content}, nil
	}
	return nil, fmt.Errorf("chart artifact: no layer %s", h)
}

// chartLayer is the packaged chart as the artifact's layer.
type chartLayer struct{ b []byte }

func (l chartLayer) Digest() (v1.Hash, error) {
	h, _, err := v1.SHA256(bytes.NewReader(l.b))
	return h, err
}
func (l chartLayer) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(l.b)), nil
}
func (l chartLayer) Size() (int64, error)                { return int64(len(l.b)), nil }
func (l chartLayer) MediaType() (types.MediaType, error) { return ChartContentMediaType, nil }

// PushChart pushes the packaged chart to repo (host/org) as Helm does:
// to host/org/charts/<name>:<version>, where `helm install
// oci://host/org/charts/<name> --version <version>` finds it. It returns
// the reference by digest.
func PushChart(ctx context.Context, repo string, pkg []byte, created time.Time, opts ...remote.Option) (name.Digest, error) {
	img, err := ChartArtifact(pkg, created)
	if err != nil {
		return name.Digest{}, err
	}
	cfg, _ := img.RawConfigFile()
	var m struct{ Name, Version string }
	if err := json.Unmarshal(cfg, &m); err != nil {
		return name.Digest{}, err
	}
	// OCI tags take no "+": Helm writes build metadata with "_".
	ref := strings.TrimSuffix(repo, "/") + "/charts/" + m.Name + ":" + strings.ReplaceAll(m.Version, "+", "_")
	tag, err := name.NewTag(ref)
	if err != nil {
		return name.Digest{}, fmt.Errorf("push chart to %q: %w", ref, err)
	}
	if err := remote.Write(tag, img, append(opts, remote.WithContext(ctx))...); err != nil {
		return name.Digest{}, fmt.Errorf("push chart to %s: %w", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		return name.Digest{}, err
	}
	return tag.Context().Digest(d.String()), nil
}
