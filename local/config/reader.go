package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/swell-run/swell/pkg/autoscaling"
	"github.com/swell-run/swell/pkg/spelling"
)

// maxNodes bounds the nodes a file may make the reader visit, so that
// aliases referring to large lists many times cannot make it spin.
const maxNodes = 1 << 20

var (
	topFields     = []string{"defaults", "services"}
	serviceFields = []string{"name", "command", "dir", "hosts", "env", "containerConcurrency", "queueDepth", "timeout", "annotations"}
)

const (
	acceptedFile        = "a mapping with a services: list and optionally defaults:"
	acceptedServices    = "a list of services, each a mapping with at least name and command"
	acceptedCommand     = `a list of words, e.g. ["go", "run", "."], or a string split on spaces`
	acceptedEnvField    = "a mapping of KEY: VALUE, or a list of KEY=VALUE"
	acceptedHosts       = "a list of host names, e.g. [hello.localhost]"
	acceptedText        = "text"
	acceptedMapping     = "a mapping of keys to values"
	acceptedAnnotations = "autoscaling.swell.run/* keys (docs/configuration.md) and " + autoscaling.ContainerConcurrencyKey
)

// reader walks a swell.yaml's node tree, collecting every problem with
// its line.
type reader struct {
	path   string
	budget int
	errs   []*lineError
}

// serviceLines holds where a service wrote what is checked across
// services.
type serviceLines struct {
	name  int
	hosts []int
}

func (r *reader) add(line int, field string, err error) {
	r.errs = append(r.errs, &lineError{path: r.path, line: line, field: field, err: err})
}

// err returns every problem, in file order.
func (r *reader) err() error {
	if len(r.errs) == 0 {
		return nil
	}
	if r.budget < 0 {
		return r.errs[0]
	}
	slices.SortStableFunc(r.errs, func(a, b *lineError) int { return a.line - b.line })
	errs := make([]error, len(r.errs))
	for i, e := range r.errs {
		errs[i] = e
	}
	return errors.Join(errs...)
}

// spend takes n nodes from the budget, reporting once when it runs out.
func (r *reader) spend(n int, line int) bool {
	if r.budget < 0 {
		return false
	}
	r.budget -= n
	if r.budget < 0 {
		// What follows would be reported as missing: report only this.
		r.errs = []*lineError{{path: r.path, line: line, err: noValue(
			"the file expands to too many values (aliases repeat large lists)",
			"at most "+strconv.Itoa(maxNodes)+" values")}}
		return false
	}
	return true
}

func (r *reader) file(data []byte) *File {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			r.add(1, "", noValue("the file is empty", acceptedFile))
		} else {
			r.syntax(err)
		}
		return nil
	}
	var next yaml.Node
	if err := dec.Decode(&next); err == nil {
		r.add(next.Line, "", noValue("a second YAML document starts here", "one document"))
	} else if !errors.Is(err, io.EOF) {
		r.syntax(err)
	}
	root := &doc
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		root = deref(doc.Content[0])
	}
	if isNull(root) {
		r.add(max(1, root.Line), "", noValue("the file is empty", acceptedFile))
		return nil
	}
	if root.Kind != yaml.MappingNode {
		r.wrongType(root, "", acceptedFile)
		return nil
	}

	var defaults, services *yaml.Node
	servicesLine := 0
	for _, p := range r.mapping(root, "") {
		switch p.key {
		case "defaults":
			defaults = p.val
		case "services":
			services, servicesLine = p.val, p.line
		default:
			r.unknownField(p, "", topFields)
		}
	}
	f := &File{Path: r.path, Defaults: r.defaults(defaults)}
	switch {
	case services == nil:
		r.add(root.Line, "", noValue("services: is missing", acceptedServices))
		return nil
	case isNull(services):
		r.add(servicesLine, "services", noValue("is empty", acceptedServices))
		return nil
	case services.Kind != yaml.SequenceNode:
		r.wrongType(services, "services", acceptedServices)
		return nil
	}
	items := r.items(services)
	if len(services.Content) == 0 {
		r.add(servicesLine, "services", noValue("is empty", acceptedServices))
	}
	lines := make([]serviceLines, 0, len(items))
	for i, n := range items {
		s, sl, ok := r.service(i, n, f.Defaults)
		if ok {
			f.Services = append(f.Services, s)
			lines = append(lines, sl)
		}
	}
	r.unique(f.Services, lines)
	return f
}

// syntax reports a YAML syntax error at the line it names.
func (r *reader) syntax(err error) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 1
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if n, after, ok := strings.Cut(rest, ": "); ok {
			if v, err := strconv.Atoi(n); err == nil {
				line, msg = v, after
			}
		}
	}
	r.add(line, "", noValue("invalid YAML: "+msg, ""))
}

// defaults reads the defaults: mapping with autoscaling.ParseDefaults.
func (r *reader) defaults(n *yaml.Node) autoscaling.Defaults {
	if n == nil || isNull(n) {
		return autoscaling.DefaultDefaults()
	}
	if n.Kind != yaml.MappingNode {
		r.wrongType(n, "defaults", "a mapping of cluster-wide keys, as in Swell's ConfigMap (docs/configuration.md)")
		return autoscaling.DefaultDefaults()
	}
	data, lines, ok := r.textMapping(n, "defaults")
	d, err := autoscaling.ParseDefaults(data)
	if err != nil {
		for _, e := range splitErrors(err) {
			var ae *autoscaling.Error
			line := n.Line
			if errors.As(e, &ae) {
				if l, ok := lines[ae.Name]; ok {
					line = l
				}
			}
			r.add(line, "defaults", e)
		}
		return autoscaling.DefaultDefaults()
	}
	if !ok {
		return autoscaling.DefaultDefaults()
	}
	return d
}

// service reads services[i]; ok is false if it has any problem.
func (r *reader) service(i int, n *yaml.Node, d autoscaling.Defaults) (s Service, sl serviceLines, ok bool) {
	field := "services[" + strconv.Itoa(i) + "]"
	if n.Kind != yaml.MappingNode {
		r.wrongType(n, field, "a mapping with at least name and command")
		return s, sl, false
	}
	before := len(r.errs)
	s.Line = n.Line
	var annotations *yaml.Node
	hasName, hasCommand := false, false
	ccLine := 0
	for _, p := range r.mapping(n, field) {
		f := field + "." + p.key
		switch p.key {
		case "name":
			hasName, sl.name = true, p.line
			if t, ok := r.text(p.val, f, acceptedName); ok {
				if problem := checkName(t); problem != "" {
					r.add(p.val.Line, f, badValue(t, problem, acceptedName))
				}
				s.Name = t
			}
		case "command":
			hasCommand = true
			s.Command = r.command(p.val, f)
		case "dir":
			s.Dir, _ = r.text(p.val, f, "a directory")
		case "env":
			s.Env = r.env(p.val, f)
		case "hosts":
			s.Hosts, sl.hosts = r.hosts(p.val, f)
		case "containerConcurrency":
			ccLine = p.line
			if t, ok := r.text(p.val, f, acceptedCount); ok {
				v, err := parseCount(t)
				r.check(p.val.Line, f, err)
				s.ContainerConcurrency = v
			}
		case "queueDepth":
			if t, ok := r.text(p.val, f, acceptedCount); ok {
				v, err := parseCount(t)
				r.check(p.val.Line, f, err)
				s.QueueDepth = v
			}
		case "timeout":
			if t, ok := r.text(p.val, f, acceptedTimeout); ok {
				v, err := parseTimeout(t)
				r.check(p.val.Line, f, err)
				s.RequestTimeout = v
			}
		case "annotations":
			annotations = p.val
		default:
			r.unknownField(p, field, serviceFields)
		}
	}
	if !hasName {
		r.add(n.Line, field, noValue("has no name", acceptedName))
	}
	if !hasCommand {
		r.add(n.Line, field, noValue("has no command", acceptedCommand))
	}
	r.annotations(annotations, field, &s, ccLine, d)
	return s, sl, len(r.errs) == before
}

// check reports err, if any.
func (r *reader) check(line int, field string, err *autoscaling.Error) {
	if err != nil {
		r.add(line, field, err)
	}
}

// annotations reads a service's annotations into s.Annotations,
// s.ContainerConcurrency and s.Spec. ccLine is the line of the service's
// containerConcurrency field, 0 if it has none.
func (r *reader) annotations(n *yaml.Node, field string, s *Service, ccLine int, d autoscaling.Defaults) {
	f := field + ".annotations"
	s.Annotations = map[string]string{}
	given := map[string]string{}
	lines := map[string]int{}
	var foreign []string
	if n != nil && !isNull(n) {
		if n.Kind != yaml.MappingNode {
			r.wrongType(n, f, "a mapping of "+acceptedAnnotations)
		} else {
			given, lines, _ = r.textMapping(n, f)
		}
	}
	keys := slices.SortedFunc(maps.Keys(given), func(a, b string) int { return lines[a] - lines[b] })
	for _, k := range keys {
		v := given[k]
		switch {
		case k == autoscaling.ContainerConcurrencyKey:
			cc, err := autoscaling.ParseContainerConcurrency(map[string]string{k: v})
			switch {
			case err != nil:
				r.add(lines[k], f, err)
			case ccLine > 0 && cc != s.ContainerConcurrency:
				r.add(lines[k], f, &autoscaling.Error{Key: k, Name: k, Value: v,
					Problem:  fmt.Sprintf("disagrees with containerConcurrency %d (line %d)", s.ContainerConcurrency, ccLine),
					Accepted: "the same value, or only one of the two"})
			default:
				s.ContainerConcurrency = cc
			}
			delete(given, k)
		case strings.HasPrefix(k, autoscaling.Prefix):
			s.Annotations[k] = v
		default:
			foreign = append(foreign, k)
		}
	}
	// Parse sees the foreign keys too: it reports a misspelt prefix in
	// front of a known key with the key meant.
	spec, err := autoscaling.Parse(given, s.ContainerConcurrency, d)
	if err == nil {
		spec, err = withReplicaRequests(spec)
	}
	reported := map[string]bool{}
	if err != nil {
		for _, e := range splitErrors(err) {
			line, fld := s.Line, field
			var ae *autoscaling.Error
			if errors.As(e, &ae) {
				reported[ae.Name] = true
				if l, ok := lines[ae.Name]; ok {
					line, fld = l, f
				}
			}
			r.add(line, fld, e)
		}
	}
	for _, k := range foreign {
		if !reported[k] {
			r.add(lines[k], f, &autoscaling.Error{Key: k, Name: k, Value: given[k], KeyProblem: true,
				Problem: "is not an autoscaling annotation", Accepted: acceptedAnnotations})
		}
	}
	s.Spec = spec
}

// command reads a command: a list of words, or a string split on spaces.
func (r *reader) command(n *yaml.Node, f string) []string {
	var argv []string
	switch {
	case isNull(n):
	case n.Kind == yaml.ScalarNode:
		argv = strings.Fields(n.Value)
	case n.Kind == yaml.SequenceNode:
		for _, item := range r.items(n) {
			if item.Kind != yaml.ScalarNode || isNull(item) {
				r.wrongType(item, f, acceptedCommand)
				return nil
			}
			argv = append(argv, item.Value)
		}
	default:
		r.wrongType(n, f, acceptedCommand)
		return nil
	}
	switch {
	case len(argv) == 0:
		r.add(n.Line, f, noValue("is empty", acceptedCommand))
	case argv[0] == "":
		r.add(n.Line, f, noValue("has an empty program name", acceptedCommand))
	}
	return argv
}

// env reads environment variables from a mapping or a list of KEY=VALUE.
func (r *reader) env(n *yaml.Node, f string) []string {
	var env []string
	seen := map[string]int{}
	add := func(line int, key, value, text string) {
		switch problem := checkEnv(key, value); {
		case problem != "":
			r.add(line, f, badValue(text, problem, acceptedEnv))
		case seen[key] > 0:
			r.add(line, f, badValue(text, fmt.Sprintf("sets %s again (first at line %d)", key, seen[key]), "each KEY once"))
		default:
			seen[key] = line
			env = append(env, key+"="+value)
		}
	}
	switch {
	case isNull(n):
	case n.Kind == yaml.MappingNode:
		for _, p := range r.mapping(n, f) {
			if v, ok := r.scalarText(p.val, f, p.key); ok {
				add(p.line, p.key, v, p.key+"="+v)
			}
		}
	case n.Kind == yaml.SequenceNode:
		for _, item := range r.items(n) {
			t, ok := r.text(item, f, acceptedEnv)
			if !ok {
				continue
			}
			key, value, found := strings.Cut(t, "=")
			if !found {
				r.add(item.Line, f, badValue(t, "is not KEY=VALUE", acceptedEnv))
				continue
			}
			add(item.Line, key, value, t)
		}
	default:
		r.wrongType(n, f, acceptedEnvField)
	}
	return env
}

// hosts reads host names: a list, or one name.
func (r *reader) hosts(n *yaml.Node, f string) (hosts []string, lines []int) {
	var items []*yaml.Node
	switch {
	case isNull(n):
	case n.Kind == yaml.ScalarNode:
		items = []*yaml.Node{n}
	case n.Kind == yaml.SequenceNode:
		items = r.items(n)
	default:
		r.wrongType(n, f, acceptedHosts)
	}
	seen := map[string]bool{}
	for _, item := range items {
		t, ok := r.text(item, f, acceptedHost)
		if !ok {
			continue
		}
		h, problem := normalizeHost(t)
		switch {
		case problem != "":
			r.add(item.Line, f, badValue(t, problem, acceptedHost))
		case seen[h]:
			r.add(item.Line, f, badValue(t, "is given twice", "each host once"))
		default:
			seen[h] = true
			hosts = append(hosts, h)
			lines = append(lines, item.Line)
		}
	}
	return hosts, lines
}

// unique reports names and hosts that more than one service has.
func (r *reader) unique(services []Service, lines []serviceLines) {
	names := map[string]int{}
	hosts := map[string]string{}
	hostLines := map[string]int{}
	for i, s := range services {
		field := "services[" + strconv.Itoa(i) + "]"
		if first, dup := names[s.Name]; dup {
			r.add(lines[i].name, field+".name", badValue(s.Name,
				fmt.Sprintf("is the name of another service (line %d)", first), "a name unique in the file"))
		} else {
			names[s.Name] = lines[i].name
		}
		for j, h := range s.Hosts {
			if other, dup := hosts[h]; dup {
				r.add(lines[i].hosts[j], field+".hosts", badValue(h,
					fmt.Sprintf("is also a host of service %s (line %d)", other, hostLines[h]), "each host routed to one service"))
				continue
			}
			hosts[h], hostLines[h] = s.Name, lines[i].hosts[j]
		}
	}
}

// pair is one key and value of a mapping.
type pair struct {
	key  string
	line int
	val  *yaml.Node
}

// mapping returns the pairs of mapping n, aliases followed, reporting
// keys that are not text and keys given twice.
func (r *reader) mapping(n *yaml.Node, field string) []pair {
	var pairs []pair
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if !r.spend(2, n.Line) {
			return pairs
		}
		k, v := deref(n.Content[i]), deref(n.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			r.add(k.Line, field, noValue("has a key that is "+kind(k), "keys that are text"))
			continue
		}
		if first, dup := seen[k.Value]; dup {
			r.add(k.Line, field, badValue(k.Value, fmt.Sprintf("is given twice (first at line %d)", first), "each key once"))
			continue
		}
		seen[k.Value] = k.Line
		pairs = append(pairs, pair{key: k.Value, line: k.Line, val: v})
	}
	return pairs
}

// textMapping reads a mapping whose values are scalars, taking their
// text; ok is false if any is not.
func (r *reader) textMapping(n *yaml.Node, field string) (m map[string]string, lines map[string]int, ok bool) {
	m, lines, ok = map[string]string{}, map[string]int{}, true
	for _, p := range r.mapping(n, field) {
		v, good := r.scalarText(p.val, field, p.key)
		if !good {
			ok = false
			continue
		}
		m[p.key], lines[p.key] = v, p.line
	}
	return m, lines, ok
}

// items returns the items of sequence n, aliases followed.
func (r *reader) items(n *yaml.Node) []*yaml.Node {
	items := make([]*yaml.Node, 0, len(n.Content))
	for _, item := range n.Content {
		if !r.spend(1, n.Line) {
			break
		}
		items = append(items, deref(item))
	}
	return items
}

// text returns the text of a scalar that is not empty.
func (r *reader) text(n *yaml.Node, field, accepted string) (string, bool) {
	if n.Kind != yaml.ScalarNode || isNull(n) {
		r.wrongType(n, field, accepted)
		return "", false
	}
	return n.Value, true
}

// scalarText returns the text of any scalar, the value of key: numbers
// and booleans as written, an empty value as "".
func (r *reader) scalarText(n *yaml.Node, field, key string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		r.add(n.Line, field, &autoscaling.Error{Key: key, Name: key, Problem: "is " + kind(n), NoValue: true, Accepted: acceptedText})
		return "", false
	}
	return n.Value, true
}

func (r *reader) wrongType(n *yaml.Node, field, accepted string) {
	r.add(n.Line, field, noValue("is "+kind(n), accepted))
}

func (r *reader) unknownField(p pair, field string, fields []string) {
	e := &autoscaling.Error{Key: p.key, Name: p.key, Problem: "unknown field", KeyProblem: true,
		Accepted: strings.Join(fields, ", "), Suggestion: spelling.Suggest(p.key, fields)}
	if p.val.Kind == yaml.ScalarNode && !isNull(p.val) {
		e.Value = p.val.Value
	} else {
		e.NoValue = true
	}
	r.add(p.line, field, e)
}

// deref follows aliases to the node they name.
func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == 0 || n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" && (n.Value == "" || n.Value == "~" || strings.EqualFold(n.Value, "null"))
}

// kind describes a node for a message: "is a list".
func kind(n *yaml.Node) string {
	switch {
	case isNull(n):
		return "empty"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Kind == yaml.ScalarNode:
		return strconv.Quote(n.Value)
	}
	return "not a value"
}
