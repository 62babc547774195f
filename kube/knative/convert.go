package knative

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/kube/inject"
	"github.com/swell-run/swell/pkg/autoscaling"
	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/spelling"
)

// LabelApp is the label that selects a converted Service's pods: the
// template's own app label when it has one, else the Service's name.
const LabelApp = "app"

// ServicePort is the port of the Service in front of a converted
// Deployment: Knative's, inside the cluster.
const ServicePort = 80

// defaultUserContainer is the name Knative gives a Service's one container
// when it has none.
const defaultUserContainer = "user-container"

// lastApplied is kubectl's record of what it last applied: the Knative
// Service's, which would mislead a later apply of the Deployment.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// Where a setting is written: on the Service, or on its template.
const (
	onService  = "service"
	onTemplate = "template"
)

// setting is one Knative setting as a Service writes it.
type setting struct {
	// kind is "annotation", "label" or "field".
	kind string
	// key is the annotation or label key as written, or the field's path.
	key   string
	value string
	// where says where an annotation was written: onService or
	// onTemplate.
	where string
}

// String shows the setting in a message: `annotation key "value"`, or
// `spec.template.spec.timeoutSeconds 10`.
func (s setting) String() string {
	if s.kind == "field" {
		return s.key + " " + s.value
	}
	return s.kind + " " + s.key + " " + strconv.Quote(s.value)
}

// conversion is one Knative Service on its way to Swell.
type conversion struct {
	svc  *Service
	opts Options
	// class and metric are Knative's, as the rules resolve them.
	class, metric string
	// settings are the Knative settings the Service makes, by the rule's
	// key (its first spelling).
	settings map[string]setting
	// out are the Swell annotations the rules write; origin names the
	// Knative setting each came from, for errors.
	out    map[string]string
	origin map[string]string
	// own are the Swell annotations the Service carries itself: they win.
	own map[string]string
	// annotations and labels are the Service's and its template's own,
	// carried as they are.
	annotations, labels       map[string]string
	tplAnnotations, tplLabels map[string]string
	progressDeadline          *int32
	// port is the serving container's port.
	port     corev1.ContainerPort
	warnings []string
	errs     []error
}

// Converted is what one Knative Service becomes.
type Converted struct {
	Deployment *appsv1.Deployment
	Service    *corev1.Service
	// Warnings name, one line each, what has no counterpart on Swell.
	Warnings []string
}

// Convert converts one Knative Service into a Deployment opted into Swell
// and a Service in front of it that run the same app with the same
// settings. What has no counterpart is in the warnings; a Service that
// cannot be converted gets an error listing every problem, one per line.
// The Deployment passes Swell's validation (inject.Template, as the
// webhook runs it) against opts.Defaults.
func Convert(svc *Service, opts Options) (*Converted, error) {
	c := &conversion{
		svc: svc, opts: opts.resolved(),
		settings: map[string]setting{}, out: map[string]string{}, origin: map[string]string{}, own: map[string]string{},
		annotations: map[string]string{}, labels: map[string]string{},
		tplAnnotations: map[string]string{}, tplLabels: map[string]string{},
	}
	if svc.Name == "" {
		c.errs = append(c.errs, errors.New("metadata.name: missing; accepted: the Service's name"))
	}
	c.collect()
	for _, r := range rules {
		if s, ok := c.settings[r.Knative]; ok {
			r.apply(c, s)
		} else if r.absent != nil {
			r.absent(c)
		}
	}
	c.traffic()
	d := c.deployment()
	var s *corev1.Service
	if d != nil {
		s = c.service(d)
		c.validate(d)
	}
	if len(c.errs) > 0 {
		return &Converted{Warnings: c.warnings}, errors.Join(c.errs...)
	}
	return &Converted{Deployment: d, Service: s, Warnings: c.warnings}, nil
}

func (c *conversion) warnf(format string, args ...any) {
	c.warnings = append(c.warnings, fmt.Sprintf(format, args...))
}

// fail reports a Knative setting the import cannot carry over.
func (c *conversion) fail(s setting, problem, accepted string) {
	c.errs = append(c.errs, &autoscaling.Error{Key: s.key, Name: s.key, Value: s.value, Problem: problem, Accepted: accepted})
}

// write sets Swell's annotation key (a bare autoscaling key, or a
// swell.run/ one) from the Knative setting from, or from what Knative does
// by default when from is nil. A value the Service sets itself under
// Swell's key wins.
func (c *conversion) write(key, value string, from *setting) {
	if !strings.Contains(key, "/") {
		key = swellAutoscaling + key
	}
	if from != nil && from.key == "" {
		from = nil
	}
	if own, ok := c.own[key]; ok {
		switch {
		case from == nil || own == value:
		case from.value == value:
			c.warnf("annotation %s %q, Swell's own, is kept over %s", key, own, from)
		default:
			c.warnf("annotation %s %q, Swell's own, is kept over %s (carried over as %q)", key, own, from, value)
		}
		return
	}
	c.out[key] = value
	if from != nil {
		c.origin[key] = from.String()
	} else {
		delete(c.origin, key)
	}
}

// writeClass writes the Swell class for c.class, and what Knative's HPA
// class implies beyond it. from is the class annotation, or nil.
func (c *conversion) writeClass(from *setting) {
	if c.class == classKPA {
		c.write(autoscaling.KeyClass, string(autoscaling.ClassKPA), from)
		return
	}
	c.write(autoscaling.KeyClass, string(autoscaling.ClassHPA), from)
	// Knative's HPA class serves every request from the pods: the
	// activator never enters the path.
	c.write(autoscaling.KeyTargetBurstCapacity, "0", from)
}

// ignoredByHPA warns of a KPA setting under the HPA class.
func (c *conversion) ignoredByHPA(s setting) {
	c.warnf("%s: Knative's HPA class does not read it, so it had no effect; left out", s)
}

// isKnative says whether an annotation or label key is in one of Knative's
// domains: knative.dev and below it.
func isKnative(key string) bool {
	domain, _, ok := strings.Cut(key, "/")
	return ok && (domain == "knative.dev" || strings.HasSuffix(domain, ".knative.dev"))
}

// isSwell says whether an annotation key is one of Swell's settings,
// which it reads from the Deployment.
func isSwell(key string) bool {
	return strings.HasPrefix(key, kube.Prefix) || strings.HasPrefix(key, swellAutoscaling)
}

// spellings maps every spelling of a rule's setting to the rule, for the
// place it is written.
var spellings = func() map[place]map[string]*rule {
	m := map[place]map[string]*rule{onAnnotation: {}, onLabel: {}, onField: {}}
	for i := range rules {
		r := &rules[i]
		for _, k := range append([]string{r.Knative}, r.Aliases...) {
			m[r.place][k] = r
		}
	}
	return m
}()

// collect sorts the Service's labels, annotations and fields into the
// Knative settings the rules read and the user's own, which are carried
// as they are, and warns of Knative's settings the rules do not know.
func (c *conversion) collect() {
	svc, tpl := c.svc, &c.svc.Spec.Template
	// candidates holds, by rule, every spelling written, most preferred
	// first: the template's before the Service's, a rule's first spelling
	// before its aliases.
	candidates := map[*rule][]setting{}
	annotation := func(where string, m map[string]string, carry map[string]string) {
		for _, k := range sortedKeys(m) {
			v := m[k]
			switch r := spellings[onAnnotation][k]; {
			case k == lastApplied:
			case r != nil:
				candidates[r] = append(candidates[r], setting{kind: "annotation", key: k, value: v, where: where})
			case isKnative(k):
				c.unknown("annotation", k, v)
			case isSwell(k):
				// Swell reads its settings from the Deployment only.
				if prev, ok := c.own[k]; ok && prev != v {
					c.warnf("%s %q of the Service is overridden by the template's %q", k, prev, v)
				}
				c.own[k] = v
			default:
				carry[k] = v
			}
		}
	}
	annotation(onService, svc.Annotations, c.annotations)
	annotation(onTemplate, tpl.Annotations, c.tplAnnotations)
	label := func(m map[string]string, carry map[string]string, rules bool) {
		for _, k := range sortedKeys(m) {
			v := m[k]
			switch r := spellings[onLabel][k]; {
			case rules && r != nil:
				candidates[r] = append(candidates[r], setting{kind: "label", key: k, value: v, where: onService})
			case isKnative(k):
				c.unknown("label", k, v)
			default:
				carry[k] = v
			}
		}
	}
	label(svc.Labels, c.labels, true)
	label(tpl.Labels, c.tplLabels, false)
	field := func(name string, v *int64) {
		if v != nil {
			key := "spec.template.spec." + name
			candidates[spellings[onField][key]] = []setting{{kind: "field", key: key, value: strconv.FormatInt(*v, 10)}}
		}
	}
	rs := &tpl.Spec
	field("containerConcurrency", rs.ContainerConcurrency)
	field("timeoutSeconds", rs.TimeoutSeconds)
	field("responseStartTimeoutSeconds", rs.ResponseStartTimeoutSeconds)
	field("idleTimeoutSeconds", rs.IdleTimeoutSeconds)

	for i := range rules {
		r := &rules[i]
		cs := candidates[r]
		if len(cs) == 0 {
			continue
		}
		rank := func(s setting) int {
			n := slices.Index(append([]string{r.Knative}, r.Aliases...), s.key)
			if s.where == onService {
				n += 100
			}
			return n
		}
		slices.SortStableFunc(cs, func(a, b setting) int { return rank(a) - rank(b) })
		c.settings[r.Knative] = cs[0]
		for _, s := range cs[1:] {
			switch {
			case s.value == cs[0].value:
			case s.where == cs[0].where:
				c.warnf("%s is overridden by %s, the spelling Knative prefers; left out", s, cs[0])
			default:
				c.warnf("%s of the Service is overridden by %s of its template; left out", s, cs[0])
			}
		}
	}
}

// unknown warns of a Knative label or annotation no rule carries.
func (c *conversion) unknown(what, key, value string) {
	if name, ok := strings.CutPrefix(key, knativeAutoscaling); ok {
		var names []string
		for _, r := range rules {
			if n, ok := strings.CutPrefix(r.Knative, knativeAutoscaling); ok {
				names = append(names, n)
			}
		}
		hint := ""
		if sg := spelling.Suggest(name, names); sg != "" {
			hint = "; did you mean " + knativeAutoscaling + sg + "?"
		}
		c.warnf("%s %s %q: not an autoscaling setting Knative reads on a Service, so it had no effect; left out%s", what, key, value, hint)
		return
	}
	c.warnf("%s %s %q: Knative's own, with no counterpart in Swell; left out", what, key, value)
}

// traffic warns of what spec.traffic and the template's name ask that one
// Deployment cannot do.
func (c *conversion) traffic() {
	t := c.svc.Spec.Traffic
	if len(t) > 1 {
		c.warnf("spec.traffic splits the traffic between %d targets; the Swell Service sends all of it to one Deployment, the template as written: to split it, run a Deployment and Service per version and weigh them with a Gateway API HTTPRoute (docs/knative.md)", len(t))
	}
	for i, tt := range t {
		where := fmt.Sprintf("spec.traffic[%d]", i)
		if len(t) == 1 && tt.Percent != nil && *tt.Percent < 100 {
			c.warnf("%s sends %d%% of the traffic; the Swell Service sends it all", where, *tt.Percent)
		}
		if tt.Tag != "" {
			c.warnf("%s: tag %q (Knative's URL of its own for the target) has no counterpart; give the version a Service of its own, or a route in a Gateway API HTTPRoute", where, tt.Tag)
		}
		switch {
		case tt.RevisionName != "":
			c.warnf("%s is pinned to revision %s; Swell runs the template as written, the latest revision", where, tt.RevisionName)
		case tt.LatestRevision != nil && !*tt.LatestRevision:
			c.warnf("%s has latestRevision: false; Swell runs the template as written, the latest revision", where)
		}
		if tt.ConfigurationName != "" && tt.ConfigurationName != c.svc.Name {
			c.warnf("%s sends traffic to configuration %s, which is not this Service's; left out", where, tt.ConfigurationName)
		}
	}
	if n := c.svc.Spec.Template.Name; n != "" {
		c.warnf("spec.template.metadata.name %q names Knative's revision; a Deployment has no revisions by name (its pods are named after it); left out", n)
	}
}

// deployment builds the Deployment, or returns nil when its pod spec
// cannot be converted (the problems are in c.errs).
func (c *conversion) deployment() *appsv1.Deployment {
	svc := c.svc
	spec := svc.Spec.Template.Spec.PodSpec.DeepCopy()
	serving, port, ok := c.servingContainer(spec)
	if !ok {
		return nil
	}
	c.port = port
	ctr := &spec.Containers[serving]
	// What Knative gives the app's container.
	for _, e := range []corev1.EnvVar{
		{Name: "PORT", Value: strconv.Itoa(int(port.ContainerPort))},
		{Name: "K_SERVICE", Value: svc.Name},
		{Name: "K_CONFIGURATION", Value: svc.Name},
	} {
		if !slices.ContainsFunc(ctr.Env, func(have corev1.EnvVar) bool { return have.Name == e.Name }) {
			ctr.Env = append(ctr.Env, e)
		}
	}
	for _, p := range []*corev1.Probe{ctr.ReadinessProbe, ctr.LivenessProbe, ctr.StartupProbe} {
		probeServingPort(p, port.ContainerPort)
	}
	if spec.EnableServiceLinks == nil {
		// Knative's default: no environment variables for the namespace's
		// Services, which could clash with the app's own.
		no := false
		spec.EnableServiceLinks = &no
	}

	app := c.tplLabels[LabelApp]
	if app == "" {
		app = svc.Name
	}
	selector := map[string]string{LabelApp: app}
	tplLabels := merge(c.tplLabels, selector, map[string]string{kube.LabelEnabled: "true"})
	annotations := merge(c.annotations, c.out, c.own)
	d := &appsv1.Deployment{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{
			Name: svc.Name, Namespace: svc.Namespace,
			Labels:      merge(c.labels, map[string]string{kube.LabelEnabled: "true"}),
			Annotations: annotations,
		},
		Spec: appsv1.DeploymentSpec{
			// No replicas: the autoscaler owns the count.
			Selector: &metav1.LabelSelector{MatchLabels: selector},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: tplLabels, Annotations: nilIfEmpty(c.tplAnnotations)},
				Spec:       *spec,
			},
			ProgressDeadlineSeconds: c.progressDeadline,
		},
	}
	return d
}

// servingContainer names the unnamed containers as Knative does, gives the
// serving container its port (Knative's default 8080 when it declares
// none), and returns the serving container's index and port.
func (c *conversion) servingContainer(spec *corev1.PodSpec) (int, corev1.ContainerPort, bool) {
	cs := spec.Containers
	if len(cs) == 0 {
		c.errs = append(c.errs, errors.New("spec.template.spec.containers: none; accepted: one container, or several of which one declares the serving port"))
		return 0, corev1.ContainerPort{}, false
	}
	app := -1
	var withPorts []string
	for i := range cs {
		if len(cs[i].Ports) > 0 {
			withPorts = append(withPorts, fmt.Sprintf("containers[%d]", i))
			app = i
		}
	}
	switch {
	case len(cs) == 1:
		app = 0
	case len(withPorts) == 0:
		c.errs = append(c.errs, fmt.Errorf("spec.template.spec.containers: %d containers and none declares a port; accepted: one of them declaring the serving port, as Knative requires", len(cs)))
		return 0, corev1.ContainerPort{}, false
	case len(withPorts) > 1:
		c.errs = append(c.errs, fmt.Errorf("spec.template.spec.containers: %s each declare a port; accepted: one container declaring the serving port, as Knative requires", strings.Join(withPorts, " and ")))
		return 0, corev1.ContainerPort{}, false
	}
	for i := range cs {
		if cs[i].Name != "" {
			continue
		}
		if len(cs) == 1 {
			cs[i].Name = defaultUserContainer
		} else {
			cs[i].Name = fmt.Sprintf("%s-%d", defaultUserContainer, i)
		}
	}
	ctr := &cs[app]
	switch len(ctr.Ports) {
	case 0:
		ctr.Ports = []corev1.ContainerPort{{ContainerPort: network.DefaultUserPort}}
	case 1:
	default:
		c.errs = append(c.errs, fmt.Errorf("spec.template.spec.containers[%d].ports: %d ports; accepted: one, the serving port, as Knative requires", app, len(ctr.Ports)))
		return 0, corev1.ContainerPort{}, false
	}
	p := &ctr.Ports[0]
	if p.ContainerPort == 0 {
		p.ContainerPort = network.DefaultUserPort
	}
	if p.Name == "h2c" {
		c.warnf("containers[%d].ports[0] is named h2c: Knative speaks cleartext HTTP/2 to the app whatever the client speaks; Swell passes each request on in the client's protocol, so an app that speaks only HTTP/2 (gRPC) needs its clients to speak it too", app)
	}
	return app, *p, true
}

// probeServingPort makes a probe's port explicit: Knative lets a probe of
// the serving container leave it out, meaning the serving port.
func probeServingPort(p *corev1.Probe, port int32) {
	if p == nil {
		return
	}
	switch {
	case p.HTTPGet != nil && p.HTTPGet.Port.IntValue() == 0 && p.HTTPGet.Port.StrVal == "":
		p.HTTPGet.Port = intstr.FromInt32(port)
	case p.TCPSocket != nil && p.TCPSocket.Port.IntValue() == 0 && p.TCPSocket.Port.StrVal == "":
		p.TCPSocket.Port = intstr.FromInt32(port)
	case p.GRPC != nil && p.GRPC.Port == 0:
		p.GRPC.Port = port
	}
}

// service builds the Service in front of d: port 80 to the app's port, as
// Knative's Service is reached inside the cluster.
func (c *conversion) service(d *appsv1.Deployment) *corev1.Service {
	port := c.port
	sp := corev1.ServicePort{Name: "http", Port: ServicePort, TargetPort: intstr.FromInt32(port.ContainerPort)}
	if port.Name == "h2c" {
		h2c := "kubernetes.io/h2c"
		sp.Name, sp.AppProtocol = "http2", &h2c
	}
	return &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{
			Name: d.Name, Namespace: d.Namespace,
			Labels: nilIfEmpty(c.labels),
		},
		Spec: corev1.ServiceSpec{
			Selector: d.Spec.Selector.MatchLabels,
			Ports:    []corev1.ServicePort{sp},
		},
	}
}

// validate runs Swell's own validation on d, as the webhook would, and
// reports every problem, naming the Knative setting each Swell annotation
// came from.
func (c *conversion) validate(d *appsv1.Deployment) {
	tpl := d.Spec.Template.DeepCopy()
	cfg := inject.Config{Image: inject.DefaultImage, Defaults: c.opts.Defaults}
	err := inject.Template(d.ObjectMeta, tpl, cfg)
	for _, e := range flatten(err) {
		var ae *autoscaling.Error
		if errors.As(e, &ae) {
			if from, ok := c.origin[ae.Name]; ok {
				e = fmt.Errorf("from %s: %w", from, e)
			}
		}
		c.errs = append(c.errs, e)
	}
}

// flatten returns the errors err joins, recursively; nil for nil.
func flatten(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

// merge returns the union of ms, later maps winning; nil when empty.
func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return nilIfEmpty(out)
}

func nilIfEmpty(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
