package images

import (
	"bytes"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	yaml3 "go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// TestPushAndOverlay pushes Swell's images to a registry and checks that
// the overlays pin deploy/ to what the registry holds.
func TestPushAndOverlay(t *testing.T) {
	specs, idxs := swellImages(t)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	repo := strings.TrimPrefix(srv.URL, "http://") + "/swell"

	pinned := Pinned{}
	for i, s := range specs {
		d, err := Push(t.Context(), Target(repo, s.Name, "v1"), idxs[i])
		if err != nil {
			t.Fatal(err)
		}
		pinned[s.Name] = d
	}

	// What the registry holds under each tag, whole.
	held := map[string]string{}
	for i, s := range specs {
		tag, err := name.NewTag(Target(repo, s.Name, "v1"))
		if err != nil {
			t.Fatal(err)
		}
		idx, err := remote.Index(tag, remote.WithContext(t.Context()))
		if err != nil {
			t.Fatal(err)
		}
		got, err := idx.Digest()
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := idxs[i].Digest(); got != want {
			t.Errorf("%s holds %s, want the built %s", tag, got, want)
		}
		im, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range im.Manifests {
			img, err := idx.Image(m.Digest)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := img.ConfigFile(); err != nil {
				t.Errorf("%s %s: %v", tag, m.Platform, err)
			}
		}
		held[s.Name] = repo + "/" + filepath.Base(s.Name) + "@" + got.String()
		if p := pinned[s.Name].Name(); p != held[s.Name] {
			t.Errorf("Push returned %s, the registry holds %s", p, held[s.Name])
		}
	}

	install, err := pinned.InstallOverlay("../../deploy")
	if err != nil {
		t.Fatal(err)
	}
	k := parseKustomization(t, install)
	if !slices.Equal(k.Resources, []string{"../../deploy"}) {
		t.Errorf("install overlay resources %q, want ../../deploy", k.Resources)
	}
	checkImages(t, k, held, Autoscaler, Activator)
	if len(k.Patches) != 1 {
		t.Fatalf("install overlay has %d patches, want the one of QUEUE_PROXY_IMAGE", len(k.Patches))
	}
	var patched appsv1.Deployment
	if err := yaml.UnmarshalStrict([]byte(k.Patches[0].Patch), &patched); err != nil {
		t.Fatal(err)
	}
	base := deployment(t, "../../deploy/autoscaler.yaml", "autoscaler")
	if patched.Name != base.Name || patched.Namespace != "swell-system" || len(patched.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("the patch targets %s/%s with %d containers, want swell-system/%s with 1", patched.Namespace, patched.Name, len(patched.Spec.Template.Spec.Containers), base.Name)
	}
	// A strategic-merge patch merges containers and env by name: a name the
	// base lacks would add a container or a variable rather than set one.
	c := patched.Spec.Template.Spec.Containers[0]
	baseC := base.Spec.Template.Spec.Containers[0]
	if c.Name != baseC.Name || len(c.Env) != 1 || c.Env[0].Name != "QUEUE_PROXY_IMAGE" || c.Env[0].Value != held[QueueProxy] {
		t.Errorf("the patch sets %+v in container %q, want QUEUE_PROXY_IMAGE=%s in %q", c.Env, c.Name, held[QueueProxy], baseC.Name)
	}
	if !slices.ContainsFunc(baseC.Env, func(e corev1.EnvVar) bool { return e.Name == "QUEUE_PROXY_IMAGE" }) {
		t.Errorf("deploy/autoscaler.yaml's container %q has no QUEUE_PROXY_IMAGE to set", baseC.Name)
	}

	example, err := pinned.ExampleOverlay("../../../deploy/examples/hello")
	if err != nil {
		t.Fatal(err)
	}
	k = parseKustomization(t, example)
	if !slices.Equal(k.Resources, []string{"../../../deploy/examples/hello"}) || len(k.Patches) != 0 {
		t.Errorf("example overlay resources %q and %d patches, want the example and none", k.Resources, len(k.Patches))
	}
	checkImages(t, k, held, Hello)
	if hello := deployment(t, "../../deploy/examples/hello/hello.yaml", "hello"); hello.Spec.Template.Spec.Containers[0].Image != Hello {
		t.Errorf("the example runs %s, which the overlay's %s does not name", hello.Spec.Template.Spec.Containers[0].Image, Hello)
	}
}

func TestOverlayNeedsEveryImage(t *testing.T) {
	d, err := name.NewDigest("example.com/swell/hello@sha256:" + strings.Repeat("0", 64))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (Pinned{Hello: d}).InstallOverlay("deploy"); err == nil || !strings.Contains(err.Error(), QueueProxy) {
		t.Errorf("InstallOverlay without the queue-proxy = %v, want an error naming it", err)
	}
}

func parseKustomization(t *testing.T, data []byte) kustomization {
	t.Helper()
	var k kustomization
	dec := yaml3.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&k); err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Errorf("%s/%s, want a kustomize.config.k8s.io/v1beta1 Kustomization", k.APIVersion, k.Kind)
	}
	return k
}

// checkImages checks that k's images are exactly the names given, each
// pinned to what the registry holds.
func checkImages(t *testing.T, k kustomization, held map[string]string, names ...string) {
	t.Helper()
	var got []string
	for _, im := range k.Images {
		got = append(got, im.Name)
		if pin := im.NewName + "@" + im.Digest; pin != held[im.Name] {
			t.Errorf("the overlay pins %s to %s, the registry holds %s", im.Name, pin, held[im.Name])
		}
	}
	if !slices.Equal(got, names) {
		t.Errorf("the overlay's images are %q, want %q", got, names)
	}
}

// deployment returns the Deployment called name in the manifest file.
func deployment(t *testing.T, file, name string) appsv1.Deployment {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var d appsv1.Deployment
		if err := dec.Decode(&d); errors.Is(err, io.EOF) {
			t.Fatalf("%s has no Deployment %s", file, name)
		} else if err != nil {
			t.Fatal(err)
		}
		if d.Kind == "Deployment" && d.Name == name {
			return d
		}
	}
}
