package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"sigs.k8s.io/yaml"
)

func TestChartVersion(t *testing.T) {
	for in, want := range map[string]string{
		"v1.2.3":           "1.2.3",
		"1.2.3":            "1.2.3",
		"v1.2.3-rc.1":      "1.2.3-rc.1",
		"v1.2.3+build.7":   "1.2.3+build.7",
		"3f2a9c1":          "0.0.0-3f2a9c1",
		"3f2a9c1-dirty":    "0.0.0-3f2a9c1-dirty",
		"v1.2":             "0.0.0-v1-2",
		"":                 "0.0.0-dev",
		"release/2026_12a": "0.0.0-release-2026-12a",
	} {
		if got := ChartVersion(in); got != want {
			t.Errorf("ChartVersion(%q) = %q, want %q", in, got, want)
		}
	}
}

// testPinned pins the chart's three images to made-up digests.
func testPinned(t *testing.T) Pinned {
	t.Helper()
	p := Pinned{}
	for i, image := range []string{Autoscaler, Activator, QueueProxy} {
		d, err := name.NewDigest("registry.example/swell/" + image[strings.LastIndex(image, "/")+1:] + "@sha256:" + strings.Repeat(string(rune('a'+i)), 64))
		if err != nil {
			t.Fatal(err)
		}
		p[image] = d
	}
	return p
}

// untar returns the files of a packaged chart.
func untar(t *testing.T, pkg []byte) map[string][]byte {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(pkg))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	tr := tar.NewReader(gz)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		files[hdr.Name] = b
	}
}

// TestPackageChart: the packaged chart holds every file of deploy/chart
// under swell/, with the version set and the images pinned, comments
// kept; and the same inputs give the same bytes.
func TestPackageChart(t *testing.T) {
	created := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	pkg, err := testPinned(t).PackageChart("../../deploy/chart", "v1.4.0", created)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := testPinned(t).PackageChart("../../deploy/chart", "v1.4.0", created)
	if !bytes.Equal(pkg, again) {
		t.Error("two packages of the same chart differ")
	}
	files := untar(t, pkg)
	for _, f := range []string{"swell/Chart.yaml", "swell/values.yaml", "swell/values.schema.json", "swell/templates/_helpers.tpl", "swell/templates/autoscaler.yaml"} {
		if files[f] == nil {
			t.Errorf("no %s in the package", f)
		}
	}
	var chart struct{ Version, AppVersion string }
	if err := yaml.Unmarshal(files["swell/Chart.yaml"], &chart); err != nil {
		t.Fatal(err)
	}
	if chart.Version != "1.4.0" || chart.AppVersion != "v1.4.0" {
		t.Errorf("Chart.yaml: version %q, appVersion %q; want 1.4.0 and v1.4.0", chart.Version, chart.AppVersion)
	}
	type image struct{ Repository, Tag, Digest string }
	var values struct {
		Images struct {
			Autoscaler image `json:"autoscaler"`
			Activator  image `json:"activator"`
			QueueProxy image `json:"queueProxy"`
		}
	}
	if err := yaml.Unmarshal(files["swell/values.yaml"], &values); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{
		"autoscaler": "registry.example/swell/autoscaler@sha256:" + strings.Repeat("a", 64),
		"activator":  "registry.example/swell/activator@sha256:" + strings.Repeat("b", 64),
		"queueProxy": "registry.example/swell/queue-proxy@sha256:" + strings.Repeat("c", 64),
	} {
		im := map[string]image{"autoscaler": values.Images.Autoscaler, "activator": values.Images.Activator, "queueProxy": values.Images.QueueProxy}[key]
		if got := im.Repository + "@" + im.Digest; got != want || im.Tag != "v1.4.0" {
			t.Errorf("images.%s: %s (tag %q), want %s (tag v1.4.0)", key, got, im.Tag, want)
		}
	}
	if !bytes.Contains(files["swell/values.yaml"], []byte("# The images. A digest, when set, wins over the tag")) {
		t.Error("values.yaml lost its comments")
	}

	if _, err := (Pinned{}).PackageChart("../../deploy/chart", "v1", created); err == nil {
		t.Error("packaged a chart with no pinned images")
	}
}

// TestPushChart pushes the packaged chart to a registry and reads it back
// as Helm would: the manifest's media types, the config (Chart.yaml as
// JSON) and the package, byte for byte, under charts/swell:<version>.
func TestPushChart(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	repo := strings.TrimPrefix(srv.URL, "http://") + "/swell"
	created := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	pkg, err := testPinned(t).PackageChart("../../deploy/chart", "v1.4.0+build.7", created)
	if err != nil {
		t.Fatal(err)
	}
	d, err := PushChart(t.Context(), repo, pkg, created)
	if err != nil {
		t.Fatal(err)
	}
	if want := repo + "/charts/swell"; d.Context().Name() != want {
		t.Errorf("pushed to %s, want %s", d.Context().Name(), want)
	}
	tag, _ := name.NewTag(repo + "/charts/swell:1.4.0_build.7")
	img, err := remote.Image(tag, remote.WithContext(t.Context()))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := img.Digest(); got.String() != d.DigestStr() {
		t.Errorf("the tag holds %s, want %s", got, d.DigestStr())
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.Config.MediaType != ChartConfigMediaType || len(m.Layers) != 1 || m.Layers[0].MediaType != ChartContentMediaType {
		t.Errorf("manifest: config %s, layers %v; want Helm's media types", m.Config.MediaType, m.Layers)
	}
	if m.Annotations["org.opencontainers.image.version"] != "1.4.0+build.7" || m.Annotations["org.opencontainers.image.title"] != "swell" {
		t.Errorf("annotations %v", m.Annotations)
	}
	cfg, _ := img.RawConfigFile()
	var meta struct{ Name, Version, AppVersion, APIVersion string }
	if err := yaml.Unmarshal(cfg, &meta); err != nil {
		t.Fatal(err)
	}
	if meta.Name != "swell" || meta.Version != "1.4.0+build.7" || meta.AppVersion != "v1.4.0+build.7" || meta.APIVersion != "v2" {
		t.Errorf("config %s", cfg)
	}
	layers, _ := img.Layers()
	rc, err := layers[0].Compressed()
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	if !bytes.Equal(got, pkg) {
		t.Error("the registry's layer is not the package")
	}
}
