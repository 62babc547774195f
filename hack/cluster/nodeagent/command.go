package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// images is the node's image table: which binary plays an image.
type images struct {
	// binaries maps an image name without tag to its binary.
	binaries map[string]string
	// unbuilt maps an image name to the package of Swell's source tree it
	// is built from, for images whose package did not exist when the
	// binaries were built.
	unbuilt map[string]string
}

// binary resolves a container image to the binary that plays it. The
// image's name without tag or digest is looked up; failing that, its last
// path element under swell/, so that a registry-qualified name such as
// ghcr.io/swell-run/activator:v1 plays as swell/activator.
func (im images) binary(image string) (string, error) {
	name := image
	if i := strings.Index(name, "@"); i >= 0 {
		name = name[:i]
	}
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		name = name[:i]
	}
	for _, n := range []string{name, "swell/" + path.Base(name)} {
		if bin, ok := im.binaries[n]; ok {
			return bin, nil
		}
		if pkg, ok := im.unbuilt[n]; ok {
			return "", fmt.Errorf("image %q (%s) has no binary: its package %s did not exist in Swell's source tree when the cluster's binaries were built; start the cluster again once it does",
				image, n, pkg)
		}
	}
	known := make([]string, 0, len(im.binaries))
	for k := range im.binaries {
		known = append(known, k)
	}
	sort.Strings(known)
	return "", fmt.Errorf("image %q is not in the node agent's image table (hack/cluster/README.md, Images); known images: %s",
		image, strings.Join(known, ", "))
}

// envInputs is what a container's environment is made of besides its spec.
type envInputs struct {
	podIP, hostIP string
	// pod holds the variables every container of the pod gets unless it
	// sets them itself: the way to the apiserver.
	pod []envVar
	// refs reads the Secrets and ConfigMaps the environment names.
	refs refReader
}

// refReader reads the objects a container's environment refers to.
type refReader interface {
	secret(ctx context.Context, namespace, name string) (*corev1.Secret, error)
	configMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
}

// containerEnv returns the container's environment as an ordered list, the
// way the kubelet builds it: the pod's variables, then envFrom, then env,
// each value with valueFrom resolved and $(VAR) references expanded from
// the variables defined before it. Secrets and ConfigMaps are read now; a
// missing one (not optional) is an error, and the container waits.
func containerEnv(ctx context.Context, pod *corev1.Pod, c *corev1.Container, in envInputs) ([]envVar, error) {
	env := []envVar{
		{"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		{"HOSTNAME", pod.Name},
	}
	env = append(env, in.pod...)
	for _, from := range c.EnvFrom {
		data, err := envFromData(ctx, pod.Namespace, from, in.refs)
		if err != nil {
			return nil, fmt.Errorf("container %q: envFrom: %w", c.Name, err)
		}
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			env = setEnv(env, from.Prefix+k, data[k])
		}
	}
	for _, e := range c.Env {
		v, set, err := envValue(ctx, pod, e, env, in)
		if err != nil {
			return nil, fmt.Errorf("container %q: env %s: %w", c.Name, e.Name, err)
		}
		if set {
			env = setEnv(env, e.Name, v)
		}
	}
	return env, nil
}

// envValue resolves one env entry; set is false for an optional reference
// to a missing object or key.
func envValue(ctx context.Context, pod *corev1.Pod, e corev1.EnvVar, env []envVar, in envInputs) (v string, set bool, err error) {
	src := e.ValueFrom
	switch {
	case src == nil:
		return expand(e.Value, lookupIn(env)), true, nil
	case src.FieldRef != nil:
		v, err := fieldRef(pod, src.FieldRef.FieldPath, in.podIP, in.hostIP)
		return v, err == nil, err
	case src.SecretKeyRef != nil:
		ref := src.SecretKeyRef
		s, err := readRef(ctx, "Secret", pod.Namespace, ref.Name, in.refs.secret)
		if err == nil {
			b, ok := s.Data[ref.Key]
			if ok {
				return string(b), true, nil
			}
			err = fmt.Errorf("key %s in Secret %s/%s: %w", ref.Key, pod.Namespace, ref.Name, errNotFound)
		}
		return "", false, optional(err, ref.Optional)
	case src.ConfigMapKeyRef != nil:
		ref := src.ConfigMapKeyRef
		cm, err := readRef(ctx, "ConfigMap", pod.Namespace, ref.Name, in.refs.configMap)
		if err == nil {
			if v, ok := cm.Data[ref.Key]; ok {
				return v, true, nil
			}
			err = fmt.Errorf("key %s in ConfigMap %s/%s: %w", ref.Key, pod.Namespace, ref.Name, errNotFound)
		}
		return "", false, optional(err, ref.Optional)
	}
	return "", false, errors.New("only value and valueFrom with fieldRef, secretKeyRef or configMapKeyRef are supported by the node agent")
}

// envFromData returns the data of an envFrom source; nothing for an
// optional source that does not exist.
func envFromData(ctx context.Context, namespace string, from corev1.EnvFromSource, refs refReader) (map[string]string, error) {
	data := map[string]string{}
	switch {
	case from.SecretRef != nil:
		s, err := readRef(ctx, "Secret", namespace, from.SecretRef.Name, refs.secret)
		if err != nil {
			return data, optional(err, from.SecretRef.Optional)
		}
		for k, v := range s.Data {
			data[k] = string(v)
		}
	case from.ConfigMapRef != nil:
		cm, err := readRef(ctx, "ConfigMap", namespace, from.ConfigMapRef.Name, refs.configMap)
		if err != nil {
			return data, optional(err, from.ConfigMapRef.Optional)
		}
		maps.Copy(data, cm.Data)
	default:
		return nil, errors.New("only configMapRef and secretRef are supported")
	}
	return data, nil
}

// errNotFound is wrapped by the error of a reference to an object or key
// that does not exist.
var errNotFound = errors.New("not found")

// readRef reads an object the environment refers to.
func readRef[T any](ctx context.Context, kind, namespace, name string, get func(context.Context, string, string) (*T, error)) (*T, error) {
	obj, err := get(ctx, namespace, name)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%s %s/%s: %w", kind, namespace, name, errNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s %s/%s: %w", kind, namespace, name, err)
	}
	return obj, nil
}

// optional drops the error of an optional reference to what does not
// exist; a failure to read it stays an error.
func optional(err error, opt *bool) error {
	if errors.Is(err, errNotFound) && opt != nil && *opt {
		return nil
	}
	return err
}

type envVar struct{ name, value string }

func setEnv(env []envVar, name, value string) []envVar {
	for i := range env {
		if env[i].name == name {
			env[i].value = value
			return env
		}
	}
	return append(env, envVar{name, value})
}

func lookupIn(env []envVar) func(string) (string, bool) {
	return func(name string) (string, bool) {
		for _, e := range env {
			if e.name == name {
				return e.value, true
			}
		}
		return "", false
	}
}

func environ(env []envVar) []string {
	out := make([]string, len(env))
	for i, e := range env {
		out[i] = e.name + "=" + e.value
	}
	return out
}

func fieldRef(pod *corev1.Pod, fieldPath, podIP, hostIP string) (string, error) {
	switch fieldPath {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "status.podIP", "status.podIPs":
		return podIP, nil
	case "status.hostIP", "status.hostIPs":
		return hostIP, nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	}
	for prefix, m := range map[string]map[string]string{"metadata.labels": pod.Labels, "metadata.annotations": pod.Annotations} {
		if rest, ok := strings.CutPrefix(fieldPath, prefix+"['"); ok {
			if key, ok := strings.CutSuffix(rest, "']"); ok && key != "" {
				return m[key], nil
			}
		}
	}
	return "", fmt.Errorf("fieldRef %q is not supported by the node agent; supported: metadata.name, metadata.namespace, metadata.uid, "+
		"metadata.labels['KEY'], metadata.annotations['KEY'], status.podIP(s), status.hostIP(s), spec.nodeName, spec.serviceAccountName", fieldPath)
}

// expand replaces $(VAR) with the variable's value as Kubernetes does for
// env values, command and args: "$$" escapes a dollar, and a reference to
// an undefined variable is left as written.
func expand(s string, lookup func(string) (string, bool)) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := lookup(name); ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// containerArgv returns the program and argv of a container: command
// replaces the image's entrypoint (the image's binary), args are appended,
// and both have $(VAR) expanded from the container's environment.
func containerArgv(im images, c *corev1.Container, env []envVar) ([]string, error) {
	bin, err := im.binary(c.Image)
	if err != nil {
		return nil, err
	}
	lookup := lookupIn(env)
	var argv []string
	if len(c.Command) > 0 {
		for _, s := range c.Command {
			argv = append(argv, expand(s, lookup))
		}
		prog, err := resolveCommand(argv[0], bin)
		if err != nil {
			return nil, fmt.Errorf("container %q: %w", c.Name, err)
		}
		argv[0] = prog
	} else {
		argv = []string{bin}
	}
	for _, s := range c.Args {
		argv = append(argv, expand(s, lookup))
	}
	return argv, nil
}

// resolveCommand finds the program a container's command names. The
// containers share the host's filesystem, so an absolute path or a name on
// PATH is taken as is; a name matching the image's binary (such as
// "/ko-app/hello" for swell/hello) is the image's binary.
func resolveCommand(cmd, imageBin string) (string, error) {
	if filepath.Base(cmd) == filepath.Base(imageBin) {
		return imageBin, nil
	}
	if filepath.IsAbs(cmd) {
		if _, err := os.Stat(cmd); err != nil {
			return "", fmt.Errorf("command %q: %w", cmd, err)
		}
		return cmd, nil
	}
	p, err := exec.LookPath(cmd)
	if err != nil {
		return "", fmt.Errorf("command %q: not an absolute path, not on PATH, and not the image's binary %s", cmd, imageBin)
	}
	return p, nil
}
