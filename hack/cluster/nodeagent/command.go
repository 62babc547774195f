package nodeagent

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// imageBinary resolves a container image to the binary that plays it: the
// image's name without tag or digest is looked up in the table.
func imageBinary(images map[string]string, image string) (string, error) {
	name := image
	if i := strings.Index(name, "@"); i >= 0 {
		name = name[:i]
	}
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		name = name[:i]
	}
	if bin, ok := images[name]; ok {
		return bin, nil
	}
	known := make([]string, 0, len(images))
	for k := range images {
		known = append(known, k)
	}
	sort.Strings(known)
	return "", fmt.Errorf("image %q is not in the node agent's image table (hack/cluster/README.md, Images); known images: %s",
		image, strings.Join(known, ", "))
}

// containerEnv returns the container's environment as an ordered list, with
// valueFrom fieldRef resolved and $(VAR) references expanded the way the
// kubelet does: each value may refer to variables defined before it.
func containerEnv(pod *corev1.Pod, c *corev1.Container, podIP string) ([]envVar, error) {
	env := []envVar{
		{"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		{"HOSTNAME", pod.Name},
	}
	if len(c.EnvFrom) > 0 {
		return nil, fmt.Errorf("container %q: envFrom is not supported by the node agent; use env with value or valueFrom.fieldRef", c.Name)
	}
	for _, e := range c.Env {
		var v string
		switch {
		case e.ValueFrom == nil:
			v = expand(e.Value, lookupIn(env))
		case e.ValueFrom.FieldRef != nil:
			var err error
			if v, err = fieldRef(pod, e.ValueFrom.FieldRef.FieldPath, podIP); err != nil {
				return nil, fmt.Errorf("container %q: env %s: %w", c.Name, e.Name, err)
			}
		default:
			return nil, fmt.Errorf("container %q: env %s: only value and valueFrom.fieldRef are supported by the node agent", c.Name, e.Name)
		}
		env = setEnv(env, e.Name, v)
	}
	return env, nil
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

func fieldRef(pod *corev1.Pod, path, podIP string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "status.podIP":
		return podIP, nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	}
	return "", fmt.Errorf("fieldRef %q is not supported by the node agent; supported: metadata.name, metadata.namespace, metadata.uid, status.podIP, spec.nodeName, spec.serviceAccountName", path)
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
func containerArgv(images map[string]string, c *corev1.Container, env []envVar) ([]string, error) {
	bin, err := imageBinary(images, c.Image)
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
