package autoscaling

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/swell-run/swell/pkg/spelling"
)

// Parse reads a service's autoscaling settings from its annotations and
// returns its complete Spec: every key it leaves out taken from d.
//
// annotations may be a Deployment's whole annotation map: keys outside
// Prefix are ignored, and an unknown key inside it is an error, with a
// suggestion when it is close to a known one. A key whose prefix is
// misspelt by a letter or two but whose name is known is also reported,
// since ignoring it would silently lose the setting.
//
// containerConcurrency is the service's hard per-pod limit (0 for none; see
// ParseContainerConcurrency). With the concurrency metric it is the
// default target when above 0, and an explicit target above it is lowered
// to it, as Knative does: aiming above what a pod admits only queues
// requests.
//
// Every problem is reported, as *Error values joined with errors.Join in a
// stable order (unknown keys, then each key in documentation order, then
// conflicts between keys), so a user can fix them all at once. A Spec
// Parse returns always passes Validate.
func Parse(annotations map[string]string, containerConcurrency int, d Defaults) (Spec, error) {
	p := newParser(d, Prefix, "cluster default")
	for _, k := range sortedKeys(annotations) {
		p.readAnnotation(k, annotations[k])
	}
	p.run()
	p.checkContainerConcurrency(containerConcurrency, ContainerConcurrencyKey)
	p.crossCheck()
	if len(p.errs) > 0 {
		return Spec{}, errors.Join(p.errs...)
	}
	return p.spec(containerConcurrency), nil
}

// ParseDefaults reads the cluster-wide defaults from a ConfigMap's data
// (or any map): the keys are ClusterKeys, written without Prefix, and every
// key left out keeps its built-in default (DefaultDefaults). Keys starting
// with "_" are ignored, so the data may carry an "_example" block of
// documentation, as Knative's ConfigMaps do. Errors are reported as Parse
// reports them.
func ParseDefaults(data map[string]string) (Defaults, error) {
	p := newParser(DefaultDefaults(), "", "built-in default")
	for _, k := range sortedKeys(data) {
		p.readDefault(k, data[k])
	}
	p.run()
	p.crossCheck()
	if len(p.errs) > 0 {
		return Defaults{}, errors.Join(p.errs...)
	}
	return p.s.Defaults.clone(), nil
}

// ParseContainerConcurrency reads swell.run/container-concurrency from a
// service's annotations: 0 (no limit) when absent.
func ParseContainerConcurrency(annotations map[string]string) (int, error) {
	text, ok := annotations[ContainerConcurrencyKey]
	if !ok {
		return 0, nil
	}
	v, isInt, inRange := parseInt(text)
	if !isInt || !inRange || v < 0 {
		problem := problemRange
		if !isInt {
			problem = "is not an integer"
		}
		return 0, &Error{Key: ContainerConcurrencyKey, Name: ContainerConcurrencyKey, Value: text,
			Problem: problem, Accepted: "an integer ≥ 0 (0: no limit)"}
	}
	return v, nil
}

// parser holds one parse in progress. Parse, ParseDefaults,
// Flags.Resolve and Spec.Validate all run it, so a key means the same
// everywhere.
type parser struct {
	s settings
	// prefix is how keys are shown: Prefix, "" or "--".
	prefix string
	// defaultLabel marks a value the input did not write ("cluster
	// default"); empty when every value counts as written (Validate).
	defaultLabel string
	// given holds the text of each key the input wrote, by bare name.
	given map[string]string
	// bad holds the keys already reported, so conflicts between keys are
	// not reported on top of a key's own problem.
	bad  map[string]bool
	errs []error
}

func newParser(d Defaults, prefix, defaultLabel string) *parser {
	return &parser{
		s:            settings{Defaults: d.clone()},
		prefix:       prefix,
		defaultLabel: defaultLabel,
		given:        map[string]string{},
		bad:          map[string]bool{},
	}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// readAnnotation takes one annotation, ignoring it unless it is, or
// nearly is, an autoscaling key.
func (p *parser) readAnnotation(k, v string) {
	name, ok := strings.CutPrefix(k, Prefix)
	if !ok {
		// A misspelt prefix in front of a known name is almost surely ours.
		domain, name, found := strings.Cut(k, "/")
		if found && spelling.Suggest(domain+"/", []string{Prefix}) != "" {
			if e, ok := byName[name]; ok && e.Scope != ScopeCluster {
				p.unknown(k, v, Prefix+name)
			}
		}
		return
	}
	e, ok := byName[name]
	switch {
	case !ok:
		sg := suggest(name, Keys())
		if sg != "" {
			sg = Prefix + sg
		}
		p.unknown(k, v, sg)
	case e.Scope == ScopeCluster:
		p.errs = append(p.errs, &Error{Key: name, Name: k, Value: v, KeyProblem: true,
			Problem:  "is a cluster-wide setting, not a per-service key",
			Accepted: "only in the cluster defaults, as " + name + " (see docs/configuration.md)"})
	default:
		p.given[name] = v
	}
}

// readDefault takes one key of the cluster defaults.
func (p *parser) readDefault(k, v string) {
	if strings.HasPrefix(k, "_") {
		return
	}
	e, ok := byName[k]
	switch {
	case ok && e.Scope == ScopeService:
		p.errs = append(p.errs, &Error{Key: k, Name: k, Value: v, KeyProblem: true,
			Problem:  "is a per-service key, not a cluster-wide default",
			Accepted: KeyContainerConcurrencyTargetDefault + " or " + KeyRequestsPerSecondTargetDefault})
	case ok:
		p.given[k] = v
	default:
		// Users who copy an annotation into the defaults keep its prefix.
		sg := suggest(strings.TrimPrefix(k, Prefix), ClusterKeys())
		p.unknown(k, v, sg)
	}
}

func (p *parser) unknown(k, v, suggestion string) {
	p.errs = append(p.errs, &Error{Key: k, Name: k, Value: v, Problem: "unknown key", KeyProblem: true,
		Accepted: "a key listed in docs/configuration.md", Suggestion: suggestion})
}

// run parses every given key and checks every value it did not give (they
// come from the defaults, which a caller may have built by hand), in
// documentation order.
func (p *parser) run() {
	for _, e := range table {
		if text, ok := p.given[e.Name]; ok {
			if problem, sg := e.parse(text, &p.s); problem != "" {
				if sg != "" {
					sg = strconv.Quote(sg)
				}
				p.fail(e.Name, problem, e.Accepted, sg)
			} else if e.Name == KeyTarget {
				p.s.targetSet = true
			}
			continue
		}
		if e.check == nil || (e.Name == KeyTarget && !p.s.targetSet) {
			continue
		}
		if problem := e.check(&p.s); problem != "" {
			p.fail(e.Name, problem, e.Accepted, "")
		}
	}
}

// name is the key as the error shows it.
func (p *parser) name(key string) string {
	if _, ok := p.given[key]; ok || p.defaultLabel == "" {
		return p.prefix + key
	}
	return key + " (" + p.defaultLabel + ")"
}

// value is the key's text as given, or its current value.
func (p *parser) value(key string) string {
	if t, ok := p.given[key]; ok {
		return t
	}
	return byName[key].format(&p.s)
}

// other names another key and its value inside a message: "max-scale 3",
// "max-scale 3 (cluster default)".
func (p *parser) other(key string) string {
	v := byName[key].format(&p.s)
	if _, ok := p.given[key]; ok || p.defaultLabel == "" {
		return key + " " + v
	}
	return key + " " + v + " (" + p.defaultLabel + ")"
}

func (p *parser) isGiven(key string) bool {
	_, ok := p.given[key]
	return ok || p.defaultLabel == ""
}

func (p *parser) fail(key, problem, accepted, suggestion string) {
	p.errs = append(p.errs, &Error{Key: key, Name: p.name(key), Value: p.value(key),
		Problem: problem, Accepted: accepted, Suggestion: suggestion})
	p.bad[key] = true
}

func (p *parser) checkContainerConcurrency(cc int, name string) {
	if cc < 0 || cc > math.MaxInt32 {
		p.errs = append(p.errs, &Error{Key: ContainerConcurrencyKey, Name: name, Value: strconv.Itoa(cc),
			Problem: problemRange, Accepted: "an integer ≥ 0 (0: no limit)"})
	}
}

// conflict reports two keys whose values contradict each other. It blames
// a unless only b was given: a user who wrote min-scale over a cluster
// default max-scale must change min-scale, and vice versa.
func (p *parser) conflict(a, b, problemA, acceptedA, problemB, acceptedB string) {
	if p.bad[a] || p.bad[b] {
		return
	}
	if p.isGiven(a) || !p.isGiven(b) {
		p.fail(a, problemA+" "+p.other(b), acceptedA, "")
	} else {
		p.fail(b, problemB+" "+p.other(a), acceptedB, "")
	}
}

// crossCheck reports values that are each fine but contradict each other.
func (p *parser) crossCheck() {
	s := &p.s
	if s.MaxScale > 0 {
		if s.MinScale > s.MaxScale {
			p.conflict(KeyMinScale, KeyMaxScale,
				"is greater than", "an integer ≥ 0, at most max-scale when that is > 0",
				"is less than", "0 (no limit) or an integer ≥ min-scale")
		}
		if s.InitialScale > s.MaxScale {
			p.conflict(KeyInitialScale, KeyMaxScale,
				"is greater than", "an integer at most max-scale when that is > 0",
				"is less than", "0 (no limit) or an integer ≥ initial-scale")
		}
		if m := s.MinScaleSchedule.Max(); m > s.MaxScale {
			p.conflict(KeyMinScaleSchedule, KeyMaxScale,
				"asks for "+strconv.Itoa(m)+" pods, more than", "rules asking for at most max-scale pods when that is > 0",
				"is less than", "0 (no limit) or an integer ≥ the schedule's largest count")
		}
		if s.ActivationScale > s.MaxScale {
			p.conflict(KeyActivationScale, KeyMaxScale,
				"is greater than", "an integer ≥ 1, at most max-scale when that is > 0",
				"is less than", "0 (no limit) or an integer ≥ activation-scale")
		}
	}
	if lim := s.MaxScaleLimit; lim > 0 {
		bounded := "an integer from 1 to max-scale-limit (" + strconv.Itoa(lim) + ")"
		if s.MaxScale == 0 {
			p.conflict(KeyMaxScale, KeyMaxScaleLimit,
				"means no limit, which is not allowed with", bounded,
				"does not allow the unlimited", "0 (no limit), or set max-scale from 1 to max-scale-limit")
		} else if s.MaxScale > lim {
			p.conflict(KeyMaxScale, KeyMaxScaleLimit,
				"is greater than", bounded,
				"is less than", "0 (no limit) or an integer ≥ max-scale")
		}
	}
	if s.InitialScale == 0 && !(s.EnableScaleToZero && s.AllowZeroInitialScale) {
		off := KeyEnableScaleToZero
		if s.EnableScaleToZero {
			off = KeyAllowZeroInitialScale
		}
		p.conflict(KeyInitialScale, off,
			"is not allowed with", "an integer ≥ 1, or 0 when enable-scale-to-zero and allow-zero-initial-scale are both true",
			"does not allow", "true, or an initial-scale ≥ 1")
	}
	p.checkGauge()
	if s.PID.Kp == 0 && s.PID.Ki == 0 {
		p.conflict(KeyPIDKp, KeyPIDKi,
			"leaves the controller without a gain along with", "a number > 0 when pid-ki is 0",
			"leaves the controller without a gain along with", "a number > 0 when pid-kp is 0")
	}
}

// spec builds the Spec from settings that passed every check.
func (p *parser) spec(cc int) Spec {
	s := p.s.Defaults.clone()
	return Spec{
		Class:                   s.Class,
		Metric:                  requestMetric(s.Metrics),
		Metrics:                 s.Metrics,
		Averaging:               s.Averaging,
		CPUTarget:               s.CPUTarget,
		MemoryTarget:            s.MemoryTarget,
		Gauge:                   s.Gauge,
		ContainerConcurrency:    cc,
		Target:                  p.target(cc),
		TargetUtilization:       s.TargetUtilization,
		StableWindow:            s.StableWindow,
		PanicWindow:             panicWindow(s.StableWindow, s.PanicWindowPercentage),
		PanicThreshold:          s.PanicThreshold,
		MaxScaleUpRate:          s.MaxScaleUpRate,
		MaxScaleDownRate:        s.MaxScaleDownRate,
		MinScale:                s.MinScale,
		MinScaleSchedule:        s.MinScaleSchedule,
		MaxScale:                s.MaxScale,
		InitialScale:            s.InitialScale,
		ActivationScale:         s.ActivationScale,
		ScaleDownDelay:          s.ScaleDownDelay,
		ScaleToZeroGracePeriod:  s.ScaleToZeroGracePeriod,
		ScaleToZeroPodRetention: s.ScaleToZeroPodRetention,
		ScaleToZeroEnabled:      s.EnableScaleToZero,
		TargetBurstCapacity:     s.TargetBurstCapacity,
		HPA:                     s.HPA,
		Exponential:             s.Exponential,
		PID:                     s.PID,
	}
}

// requestMetric is the request metric ms lists, or concurrency.
func requestMetric(ms []Metric) Metric {
	for _, m := range ms {
		if m.IsRequestMetric() {
			return m
		}
	}
	return MetricConcurrency
}

// target resolves the target as Knative does: containerConcurrency bounds
// a concurrency target and is its default; otherwise the cluster's
// default for the metric.
func (p *parser) target(cc int) float64 {
	concurrency := requestMetric(p.s.Metrics) == MetricConcurrency
	switch {
	case p.s.targetSet && concurrency && cc > 0:
		return min(p.s.target, float64(cc))
	case p.s.targetSet:
		return p.s.target
	case concurrency && cc > 0:
		return float64(cc)
	case concurrency:
		return p.s.ConcurrencyTarget
	}
	return p.s.RPSTarget
}
