package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/kube/inject"
	"github.com/swell-run/swell/pkg/autoscaling"
	"github.com/swell-run/swell/queueproxy"
)

const injectUsage = `Usage: swell inject -f FILE|- [-o FILE] [--image IMAGE] [--push-url URL]

Inject the queue-proxy sidecar into the opted-in workloads of Kubernetes
manifests, offline, as Swell's webhook would: apps/v1 Deployments,
StatefulSets and ReplicaSets whose pod template is labelled
swell.run/enabled: "true", and v1 Pods with that label. The input is YAML
(several documents) or JSON (an object or a v1 List); every document is
written back, the others unchanged, in the input's format.
docs/injection.md describes what injection does and the annotations read.

Flags:
`

func runInject(_ context.Context, args []string, s streams) int {
	fs := flag.NewFlagSet("swell inject", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	file := fs.String("f", "", "manifest `file` to read, - for stdin")
	output := fs.String("o", "", "`file` to write (default stdout)")
	image := fs.String("image", inject.DefaultImage, "queue-proxy `image`")
	pushURL := fs.String("push-url", inject.PushURL(kube.DefaultSystemNamespace),
		"the autoscaler's push endpoint `URL`, where the queue-proxy pushes its stats; \"\" = none, the autoscaler scrapes them")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(s.stdout, injectUsage)
			printFlags(s.stdout, fs)
			return 0
		}
		fmt.Fprintf(s.stderr, "swell inject: %v (see swell inject --help)\n", err)
		return 2
	}
	if *file == "" || fs.NArg() > 0 {
		fmt.Fprintln(s.stderr, "swell inject: give the manifests with -f FILE, or -f - for stdin (see swell inject --help)")
		return 2
	}
	if *image == "" {
		fmt.Fprintln(s.stderr, "swell inject: --image is empty; accepted: a container image reference")
		return 2
	}
	if *pushURL != "" {
		if err := queueproxy.CheckPushURL(*pushURL); err != nil {
			fmt.Fprintf(s.stderr, "swell inject: --push-url %q: %v\n", *pushURL, err)
			return 2
		}
	}

	var in []byte
	var err error
	if *file == "-" {
		in, err = io.ReadAll(os.Stdin)
	} else {
		in, err = os.ReadFile(*file)
	}
	if err != nil {
		fmt.Fprintf(s.stderr, "swell inject: %v\n", err)
		return 2
	}
	cfg := inject.Config{Image: *image, Resources: inject.DefaultResources(), Defaults: autoscaling.DefaultDefaults(), PushURL: *pushURL}
	out, err := injectManifests(in, cfg)
	if err != nil {
		fmt.Fprintf(s.stderr, "swell inject: %s: %v\n", *file, err)
		return 2
	}
	if *output == "" {
		_, err = s.stdout.Write(out)
	} else {
		err = os.WriteFile(*output, out, 0o644)
	}
	if err != nil {
		fmt.Fprintf(s.stderr, "swell inject: %v\n", err)
		return 1
	}
	return 0
}

// injectManifests injects every opted-in workload of a YAML or JSON
// manifest and returns the manifest in the same format.
func injectManifests(in []byte, cfg inject.Config) ([]byte, error) {
	trimmed := bytes.TrimSpace(in)
	if len(trimmed) > 0 && (trimmed[0] == '{' || trimmed[0] == '[') {
		return injectJSON(trimmed, cfg)
	}
	return injectYAML(in, cfg)
}

func injectJSON(in []byte, cfg inject.Config) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(in, &doc); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	var errs []error
	if doc["kind"] == "List" {
		items, _ := doc["items"].([]any)
		for i, item := range items {
			obj, ok := item.(map[string]any)
			if !ok {
				errs = append(errs, fmt.Errorf("item %d: not an object", i))
				continue
			}
			if _, err := injectObject(obj, cfg); err != nil {
				errs = append(errs, fmt.Errorf("item %d (%s): %w", i, describe(obj), err))
			}
		}
	} else if _, err := injectObject(doc, cfg); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", describe(doc), err))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

func injectYAML(in []byte, cfg inject.Config) ([]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(in)))
	var out bytes.Buffer
	var errs []error
	for i := 0; ; i++ {
		raw, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		var doc map[string]any
		if err := yaml.Unmarshal(raw, &doc); err != nil {
			errs = append(errs, fmt.Errorf("document %d: %w", i, err))
			continue
		}
		if doc == nil {
			// Only comments: keep them.
			writeDoc(&out, raw)
			continue
		}
		changed, err := injectObject(doc, cfg)
		if err != nil {
			errs = append(errs, fmt.Errorf("document %d (%s): %w", i, describe(doc), err))
			continue
		}
		if !changed {
			// Untouched documents keep their comments and layout.
			writeDoc(&out, raw)
			continue
		}
		b, err := yaml.Marshal(doc)
		if err != nil {
			return nil, fmt.Errorf("document %d (%s): %w", i, describe(doc), err)
		}
		writeDoc(&out, b)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out.Bytes(), nil
}

func writeDoc(out *bytes.Buffer, doc []byte) {
	doc = bytes.TrimPrefix(doc, []byte("---\n"))
	if out.Len() > 0 {
		out.WriteString("---\n")
	}
	out.Write(doc)
	if len(doc) > 0 && doc[len(doc)-1] != '\n' {
		out.WriteByte('\n')
	}
}

// describe names a document: its kind and name.
func describe(obj map[string]any) string {
	kind, _ := obj["kind"].(string)
	if kind == "" {
		kind = "object without kind"
	}
	meta, _ := obj["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	if name == "" {
		return kind
	}
	return kind + " " + name
}

// injectObject injects obj in place if it is an opted-in workload, and
// says whether it did.
func injectObject(obj map[string]any, cfg inject.Config) (bool, error) {
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	k, ok := inject.KindOf(metav1.GroupVersionKind(schema.FromAPIVersionAndKind(apiVersion, kind)))
	switch {
	case !ok:
		return false, nil
	case !k.Pod:
		var meta metav1.ObjectMeta
		if err := convert(obj["metadata"], &meta); err != nil {
			return false, fmt.Errorf("metadata: %w", err)
		}
		spec, _ := obj["spec"].(map[string]any)
		template, _ := spec["template"].(map[string]any)
		if !inject.Enabled(labels(template)) {
			return false, nil
		}
		var tpl corev1.PodTemplateSpec
		if err := convert(spec["template"], &tpl); err != nil {
			return false, fmt.Errorf("spec.template: %w", err)
		}
		if err := inject.Template(meta, &tpl, cfg); err != nil {
			return false, err
		}
		v, err := toMap(&tpl)
		if err != nil {
			return false, err
		}
		spec["template"] = v
		return true, nil
	default:
		if !inject.Enabled(labels(obj)) {
			return false, nil
		}
		var tpl corev1.PodTemplateSpec
		if err := convert(obj["metadata"], &tpl.ObjectMeta); err != nil {
			return false, fmt.Errorf("metadata: %w", err)
		}
		if err := convert(obj["spec"], &tpl.Spec); err != nil {
			return false, fmt.Errorf("spec: %w", err)
		}
		if err := inject.Template(tpl.ObjectMeta, &tpl, cfg); err != nil {
			return false, err
		}
		v, err := toMap(&tpl)
		if err != nil {
			return false, err
		}
		obj["metadata"], obj["spec"] = v["metadata"], v["spec"]
		return true, nil
	}
}

// convert decodes a generic value into a typed one, rejecting unknown
// fields: dropping them on the way back out would lose what the user wrote.
func convert(v any, into any) error {
	if v == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	return d.Decode(into)
}

// toMap encodes tpl back into a generic value, leaving out the empty
// creationTimestamp the typed form always carries.
func toMap(tpl *corev1.PodTemplateSpec) (map[string]any, error) {
	b, err := json.Marshal(tpl)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	if meta, ok := m["metadata"].(map[string]any); ok {
		if meta["creationTimestamp"] == nil {
			delete(meta, "creationTimestamp")
		}
	}
	return m, nil
}

// labels returns the string labels of a generic object.
func labels(obj map[string]any) map[string]string {
	meta, _ := obj["metadata"].(map[string]any)
	raw, _ := meta["labels"].(map[string]any)
	l := make(map[string]string, len(raw))
	for k, v := range raw {
		if s, ok := v.(string); ok {
			l[k] = s
		}
	}
	return l
}
