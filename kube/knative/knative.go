// Package knative converts Knative Serving Services into the Deployments
// and Services that run the same apps on Swell: what `swell import` does.
package knative

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/swell-run/swell/pkg/autoscaling"
)

// Options are how to import.
type Options struct {
	// Defaults are the cluster's autoscaling defaults, which the converted
	// Deployments are validated against as the webhook would. The zero
	// value stands for autoscaling.DefaultDefaults().
	Defaults autoscaling.Defaults
}

func (o Options) resolved() Options {
	if o.Defaults.Class == "" {
		o.Defaults = autoscaling.DefaultDefaults()
	}
	return o
}

// Input is one source of manifests: YAML, several documents, or JSON, an
// object or a v1 List.
type Input struct {
	// Name names the input in messages: a file's path, or "stdin".
	Name string
	Data []byte
}

// Warning is something of a Knative object that has no counterpart on
// Swell and is left out.
type Warning struct {
	// Object is the Knative object: "namespace/name", or "name" when it
	// names no namespace.
	Object  string
	Message string
}

func (w Warning) String() string { return w.Object + ": " + w.Message }

// Result is what Import made of its inputs: every document, in order, each
// Knative Service replaced by its Deployment and Service.
type Result struct {
	docs []document
	// Warnings name, one each, what was left out or changed.
	Warnings []Warning
}

// document is one document of the output.
type document struct {
	// raw is the document as written, kept for one passed through from
	// YAML so that its comments and layout stay; nil otherwise.
	raw []byte
	// obj is the object; nil for a document of comments only.
	obj map[string]any
}

// Import converts the Knative Services of inputs and passes every other
// document through unchanged. Knative's other Serving kinds (Route,
// Configuration, Revision, DomainMapping) are left out with a warning. When
// an input cannot be converted the error lists every problem of every
// input, one per line, and the Result holds the warnings only.
func Import(inputs []Input, opts Options) (*Result, error) {
	opts = opts.resolved()
	im := &importer{opts: opts, seen: map[string]string{}}
	for _, in := range inputs {
		im.input(in)
	}
	if len(im.errs) > 0 {
		return &Result{Warnings: im.warnings}, errors.Join(im.errs...)
	}
	return &Result{docs: im.docs, Warnings: im.warnings}, nil
}

type importer struct {
	opts     Options
	docs     []document
	warnings []Warning
	errs     []error
	// seen maps each object written ("Kind namespace/name") and each
	// converted Deployment's selector to where it came from, so that no
	// two collide.
	seen map[string]string
}

func (im *importer) input(in Input) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(in.Data)))
	for i := 0; ; i++ {
		raw, err := r.Read()
		if err == io.EOF {
			return
		}
		where := fmt.Sprintf("%s: document %d", in.Name, i)
		if err != nil {
			im.errs = append(im.errs, fmt.Errorf("%s: %w", where, err))
			return
		}
		var obj map[string]any
		if err := yaml.Unmarshal(raw, &obj); err != nil {
			im.errs = append(im.errs, fmt.Errorf("%s: not an object: %w", where, err))
			continue
		}
		if obj == nil {
			// Only comments: keep them.
			im.docs = append(im.docs, document{raw: raw})
			continue
		}
		if obj["apiVersion"] == "v1" && obj["kind"] == "List" {
			items, _ := obj["items"].([]any)
			for j, item := range items {
				o, ok := item.(map[string]any)
				if !ok {
					im.errs = append(im.errs, fmt.Errorf("%s item %d: not an object", where, j))
					continue
				}
				im.object(o, nil, fmt.Sprintf("%s item %d", where, j))
			}
			continue
		}
		if t := bytes.TrimSpace(raw); len(t) > 0 && (t[0] == '{' || t[0] == '[') {
			// JSON read as YAML: write it out as YAML.
			raw = nil
		}
		im.object(obj, raw, where)
	}
}

// object converts one object, or passes it through.
func (im *importer) object(obj map[string]any, raw []byte, where string) {
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	group, _, _ := strings.Cut(apiVersion, "/")
	if !strings.Contains(apiVersion, "/") {
		group = ""
	}
	name := objectName(obj)
	where = fmt.Sprintf("%s (%s %s)", where, kind, name)
	if group != Group {
		im.docs = append(im.docs, document{raw: raw, obj: obj})
		im.record(kind, name, where)
		return
	}
	warn := func(format string, args ...any) {
		im.warnings = append(im.warnings, Warning{Object: name, Message: fmt.Sprintf(format, args...)})
	}
	switch kind {
	case "Service":
		if apiVersion != APIVersion {
			im.errs = append(im.errs, fmt.Errorf("%s: apiVersion %s: accepted: %s", where, apiVersion, APIVersion))
			return
		}
		svc, err := decodeService(obj)
		if err != nil {
			for _, e := range flatten(err) {
				im.errs = append(im.errs, fmt.Errorf("%s: %w", where, e))
			}
			return
		}
		out, err := Convert(svc, im.opts)
		for _, w := range out.Warnings {
			warn("%s", w)
		}
		if err != nil {
			for _, e := range flatten(err) {
				im.errs = append(im.errs, fmt.Errorf("%s: %w", where, e))
			}
			return
		}
		for _, o := range []any{out.Deployment, out.Service} {
			m, err := toObject(o)
			if err != nil {
				im.errs = append(im.errs, fmt.Errorf("%s: %w", where, err))
				return
			}
			im.docs = append(im.docs, document{obj: m})
		}
		im.record("Deployment", name, where)
		im.record("Service", name, where)
		sel, _ := json.Marshal(out.Deployment.Spec.Selector.MatchLabels)
		im.claim(fmt.Sprintf("a Deployment in namespace %q selecting %s", svc.Namespace, sel), where)
	case "DomainMapping":
		var dm DomainMapping
		// Only the reference is read: the rest (TLS) has no counterpart.
		_ = decode(obj, &dm)
		ref := dm.Spec.Ref
		ns := ref.Namespace
		if ns == "" {
			ns = dm.Namespace
		}
		target := ref.Name
		if ns != "" {
			target = ns + "/" + ref.Name
		}
		warn("DomainMapping to %s %s: not converted (Swell maps no domains); route the host %s to Service %s port %d with an Ingress or a Gateway API HTTPRoute (docs/knative.md)",
			ref.Kind, target, dm.Name, target, ServicePort)
	case "Route", "Configuration", "Revision":
		warn("%s: not converted; a Knative Service converts to a Deployment and a Service, and Swell has no %ss of its own (docs/knative.md)", kind, strings.ToLower(kind))
	default:
		warn("%s %s: not converted; swell import converts Knative Services only", apiVersion, kind)
	}
}

// record notes an object written, reporting one written twice.
func (im *importer) record(kind, name, where string) {
	if kind == "" || name == "" {
		return
	}
	im.claim(kind+" "+name, where)
}

// claim takes what for where, reporting what another document took.
func (im *importer) claim(what, where string) {
	if prev, ok := im.seen[what]; ok {
		im.errs = append(im.errs, fmt.Errorf("%s: writes %s, as %s does; accepted: one each (rename one of them, or give its template another app label)", where, what, prev))
		return
	}
	im.seen[what] = where
}

// objectName is "namespace/name" of a generic object, or "name".
func objectName(obj map[string]any) string {
	meta, _ := obj["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	if ns, _ := meta["namespace"].(string); ns != "" {
		return ns + "/" + name
	}
	return name
}

// decodeStrict decodes a generic object into a typed one, rejecting
// unknown fields: leaving them out would lose what the user wrote.
func decodeStrict(v any, into any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	return d.Decode(into)
}

// decodeService decodes a Knative Service strictly. A field it does not
// know is reported with the path of the object holding it.
func decodeService(obj map[string]any) (*Service, error) {
	var svc Service
	err := decodeStrict(obj, &svc)
	if err == nil {
		return &svc, nil
	}
	// Find where: decode each part on its own.
	spec, _ := obj["spec"].(map[string]any)
	template, _ := spec["template"].(map[string]any)
	parts := []struct {
		path string
		v    any
		into any
	}{
		{"metadata", obj["metadata"], &metav1.ObjectMeta{}},
		{"spec.template.metadata", template["metadata"], &metav1.ObjectMeta{}},
		{"spec.template.spec", template["spec"], &RevisionSpec{}},
		{"spec.traffic", spec["traffic"], &[]TrafficTarget{}},
	}
	var errs []error
	for _, p := range parts {
		if p.v == nil {
			continue
		}
		if perr := decodeStrict(p.v, p.into); perr != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p.path, perr))
		}
	}
	if len(errs) == 0 {
		return nil, err
	}
	return nil, errors.Join(errs...)
}

func decode(v any, into any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, into)
}

// toObject encodes a typed object as a generic one, leaving out what the
// typed form always carries but nobody wrote: an empty status, a null
// creationTimestamp, an empty strategy or resources.
func toObject(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	delete(m, "status")
	prune(m)
	return m, nil
}

func prune(v any) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if e == nil {
				delete(v, k)
				continue
			}
			if em, ok := e.(map[string]any); ok && len(em) == 0 && (k == "strategy" || k == "resources") {
				delete(v, k)
				continue
			}
			prune(e)
		}
	case []any:
		for _, e := range v {
			prune(e)
		}
	}
}

// YAML writes the result as YAML documents, those passed through as they
// were written.
func (r *Result) YAML() ([]byte, error) {
	var out bytes.Buffer
	for _, d := range r.docs {
		raw := d.raw
		if raw == nil {
			b, err := yaml.Marshal(d.obj)
			if err != nil {
				return nil, err
			}
			raw = b
		}
		raw = bytes.TrimPrefix(raw, []byte("---\n"))
		if out.Len() > 0 {
			out.WriteString("---\n")
		}
		out.Write(raw)
		if len(raw) > 0 && raw[len(raw)-1] != '\n' {
			out.WriteByte('\n')
		}
	}
	return out.Bytes(), nil
}

// JSON writes the result as a v1 List.
func (r *Result) JSON() ([]byte, error) {
	items := []any{}
	for _, d := range r.docs {
		if d.obj != nil {
			items = append(items, d.obj)
		}
	}
	b, err := json.MarshalIndent(map[string]any{"apiVersion": "v1", "kind": "List", "items": items}, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
