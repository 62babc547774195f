package helm

import (
	"bytes"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/swell-run/swell/hack/images"
)

// TestHelmInstallsThePushedChart: the chart as `make push` packages and
// pushes it (hack/images) is one Helm pulls from an OCI registry, by
// version, and renders with the pushed images pinned by digest.
func TestHelmInstallsThePushedChart(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	pinned := images.Pinned{}
	want := map[string]string{}
	for i, image := range []string{images.Autoscaler, images.Activator, images.QueueProxy} {
		d, err := name.NewDigest(host + "/swell/" + path.Base(image) + "@sha256:" + strings.Repeat(string(rune('a'+i)), 64))
		if err != nil {
			t.Fatal(err)
		}
		pinned[image] = d
		want[image] = d.Name()
	}
	created := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	pkg, err := pinned.PackageChart(chartDir, "v1.4.0", created)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := images.PushChart(t.Context(), host+"/swell", pkg, created); err != nil {
		t.Fatal(err)
	}

	// Helm's own homes, so that the test reads and writes nothing of the
	// user's.
	home := t.TempDir()
	cmd := exec.Command("go", "tool", "helm", "template", "swell", "oci://"+host+"/swell/charts/swell",
		"--version", "1.4.0", "--plain-http", "--namespace", namespace)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template oci://%s/swell/charts/swell --version 1.4.0: %v\n%s", host, err, stderr.String())
	}
	objs := decode(t, out)
	container := func(k string) object {
		return lookup(objs[k], "spec", "template", "spec", "containers").([]any)[0].(object)
	}
	autoscaler, activator := container("Deployment/"+namespace+"/autoscaler"), container("Deployment/"+namespace+"/activator")
	var qp any
	for _, e := range autoscaler["env"].([]any) {
		if e.(object)["name"] == "QUEUE_PROXY_IMAGE" {
			qp = e.(object)["value"]
		}
	}
	for what, got := range map[string]any{
		images.Autoscaler: autoscaler["image"], images.Activator: activator["image"], images.QueueProxy: qp,
	} {
		if got != want[what] {
			t.Errorf("%s: %v, want the pushed %s", what, got, want[what])
		}
	}
	if got := lookup(objs["Deployment/"+namespace+"/autoscaler"], "metadata", "labels", "helm.sh/chart"); got != "swell-1.4.0" {
		t.Errorf("helm.sh/chart %v, want swell-1.4.0", got)
	}
}
