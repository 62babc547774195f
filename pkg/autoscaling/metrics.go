package autoscaling

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/swell-run/swell/pkg/series"
	"github.com/swell-run/swell/pkg/spelling"
)

// The metrics beyond requests: the app container's CPU and memory, and a
// gauge the app exposes. Any of them may be listed in the metric key along
// with a request metric; the largest recommendation wins, as in the HPA.
const (
	MetricCPU    Metric = "cpu"
	MetricMemory Metric = "memory"
	MetricGauge  Metric = "gauge"
)

// Metrics returns every metric, in documentation order: the values the
// metric key's list accepts.
func Metrics() []Metric {
	return []Metric{MetricConcurrency, MetricRPS, MetricCPU, MetricMemory, MetricGauge}
}

// IsRequestMetric says m counts requests: concurrency or rps.
func (m Metric) IsRequestMetric() bool { return m == MetricConcurrency || m == MetricRPS }

// ResourceTarget aims a resource metric either at a share of the app
// container's request, as the HPA's utilization does (Percent: 70 for
// 70%), or at an amount per pod (Amount: cores, or bytes). Exactly one is
// above zero.
type ResourceTarget struct {
	Percent float64
	Amount  float64
}

// PerPod is the amount one pod should use: Amount, or Percent of request;
// 0 when the target is a percentage and there is no request to take it of.
func (t ResourceTarget) PerPod(request float64) float64 {
	if t.Amount > 0 {
		return t.Amount
	}
	return t.Percent / 100 * request
}

// GaugeAggregation says how a gauge's per-pod values make the service's.
type GaugeAggregation string

// The aggregations: the target is what each pod should report on average
// (desired pods = total / target), or what the pods' total should be (as
// the HPA's Value target: desired = ready × total / target).
const (
	GaugeAverage GaugeAggregation = "average"
	GaugeSum     GaugeAggregation = "sum"
)

// GaugeSpec is an app gauge to scale on: scraped by each pod's queue-proxy
// from the app on loopback every second.
type GaugeSpec struct {
	// Selector names the series: a metric name and optional exact label
	// matches, as in PromQL (num_requests_waiting{model="x"}).
	Selector string
	// Port is the app's metrics port; 0 means the app's serving port.
	Port int
	// Path is the metrics endpoint's path.
	Path        string
	Target      float64
	Aggregation GaugeAggregation
}

// Votes returns the metrics that recommend pods, in the order listed:
// Metrics with its request metric read as Metric (which code may have set
// alone), or only Metric when Metrics is empty.
func (s *Spec) Votes() []Metric {
	if len(s.Metrics) == 0 {
		return []Metric{s.Metric}
	}
	out := slices.Clone(s.Metrics)
	for i, m := range out {
		if m.IsRequestMetric() {
			out[i] = s.Metric
		}
	}
	return out
}

// VotesWith says whether m is among the metrics that recommend pods.
func (s *Spec) VotesWith(m Metric) bool {
	if m.IsRequestMetric() {
		return m == s.Metric && (len(s.Metrics) == 0 || slices.ContainsFunc(s.Metrics, Metric.IsRequestMetric))
	}
	return slices.Contains(s.Metrics, m)
}

// TargetText names m's target as its key writes it, for a reason:
// "cpu-target 70%", "memory-target 512Mi", "gauge-target 5"; "" for a
// request metric.
func (s *Spec) TargetText(m Metric) string {
	switch m {
	case MetricCPU:
		return KeyCPUTarget + " " + formatResource(s.CPUTarget, MetricCPU)
	case MetricMemory:
		return KeyMemoryTarget + " " + formatResource(s.MemoryTarget, MetricMemory)
	case MetricGauge:
		return KeyGaugeTarget + " " + formatNumber(s.Gauge.Target)
	}
	return ""
}

// CPUPerPod is the CPU one pod should use, in cores; 0 when the target is
// a percentage and the app container has no CPU request.
func (s *Spec) CPUPerPod() float64 { return s.CPUTarget.PerPod(s.CPURequest) }

// MemoryPerPod is the memory one pod should use, in bytes; 0 when the
// target is a percentage and the app container has no memory request.
func (s *Spec) MemoryPerPod() float64 { return s.MemoryTarget.PerPod(s.MemoryRequest) }

// WithRequests returns s with the app container's resource requests (CPU
// in cores, memory in bytes; 0 for none), which percentage targets are
// taken of, or an error when a listed metric's target is a percentage of a
// request the container does not make: the HPA refuses that too.
func (s Spec) WithRequests(cpu, memory float64) (Spec, error) {
	s.CPURequest, s.MemoryRequest = max(cpu, 0), max(memory, 0)
	var errs []error
	for _, r := range []struct {
		metric  Metric
		key     string
		target  ResourceTarget
		request float64
		field   string
		example string
	}{
		{MetricCPU, KeyCPUTarget, s.CPUTarget, s.CPURequest, "resources.requests.cpu", "500m"},
		{MetricMemory, KeyMemoryTarget, s.MemoryTarget, s.MemoryRequest, "resources.requests.memory", "512Mi"},
	} {
		if s.VotesWith(r.metric) && r.target.PerPod(r.request) <= 0 {
			errs = append(errs, &Error{Key: r.key, Name: Prefix + r.key, Value: formatResource(r.target, r.metric),
				Problem:  "is a percentage of the app container's request, and it has none",
				Accepted: "set the app container's " + r.field + ", or a target per pod such as " + r.example})
		}
	}
	if len(errs) > 0 {
		return Spec{}, errors.Join(errs...)
	}
	return s, nil
}

// metricsKey defines the metric key: one metric, or a comma-separated
// list of them, at most one of them a request metric.
func metricsKey(info KeyInfo, field func(*settings) *[]Metric) *entry {
	names := make([]string, 0, len(Metrics()))
	for _, m := range Metrics() {
		names = append(names, string(m))
	}
	info.Type = "metric list"
	info.Accepted = "one of " + orList(names) + ", or several separated by commas (concurrency and rps not together), such as concurrency,cpu"
	check := func(ms []Metric) string {
		if len(ms) == 0 {
			return "lists no metric"
		}
		requests := 0
		for i, m := range ms {
			if !slices.Contains(Metrics(), m) {
				return "lists " + quote(string(m)) + ", not a known metric"
			}
			if slices.Contains(ms[:i], m) {
				return "lists " + string(m) + " twice"
			}
			if m.IsRequestMetric() {
				requests++
			}
		}
		if requests > 1 {
			return "lists both concurrency and rps; a service scales on one request metric"
		}
		return ""
	}
	return &entry{
		KeyInfo: info,
		parse: func(text string, s *settings) (string, string) {
			var ms []Metric
			for _, item := range strings.Split(text, ",") {
				t := strings.TrimSpace(item)
				i := slices.IndexFunc(names, func(n string) bool { return strings.EqualFold(n, t) })
				if i < 0 {
					return "lists " + quote(t) + ", not a known metric", spelling.Suggest(t, names)
				}
				ms = append(ms, Metrics()[i])
			}
			if p := check(ms); p != "" {
				return p, ""
			}
			*field(s) = ms
			return "", ""
		},
		check: func(s *settings) string { return check(*field(s)) },
		format: func(s *settings) string {
			parts := make([]string, len(*field(s)))
			for i, m := range *field(s) {
				parts[i] = string(m)
			}
			return strings.Join(parts, ",")
		},
	}
}

// The bounds of a resource target: a percentage from 1% to 1000% of the
// request (the HPA accepts any, but a target above ten times the request
// is a typo), or any amount above zero.
const (
	resourcePercentMin, resourcePercentMax = 1, 1000
)

// resourceKey defines cpu-target or memory-target.
func resourceKey(info KeyInfo, m Metric, field func(*settings) *ResourceTarget) *entry {
	check := func(t ResourceTarget) string {
		switch {
		case t.Amount > 0 && t.Percent == 0 && !math.IsInf(t.Amount, 1):
			return ""
		case t.Amount == 0 && t.Percent >= resourcePercentMin && t.Percent <= resourcePercentMax:
			return ""
		}
		return problemRange
	}
	return &entry{
		KeyInfo: info,
		parse: func(text string, s *settings) (string, string) {
			t, problem := parseResource(text, m)
			if problem != "" {
				return problem, ""
			}
			if p := check(t); p != "" {
				return p, ""
			}
			*field(s) = t
			return "", ""
		},
		check:  func(s *settings) string { return check(*field(s)) },
		format: func(s *settings) string { return formatResource(*field(s), m) },
	}
}

// The suffixes of Kubernetes quantities, by what they multiply.
var quantitySuffixes = []struct {
	suffix string
	factor float64
}{
	{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40},
	{"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12},
	{"m", 1e-3},
}

// parseResource reads "70%" as a percentage, and otherwise a Kubernetes
// quantity: "500m" or "1.5" cores of CPU, "512Mi" or "1G" bytes of memory.
func parseResource(text string, m Metric) (ResourceTarget, string) {
	t := strings.TrimSpace(text)
	if rest, ok := strings.CutSuffix(t, "%"); ok {
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err != nil || math.IsNaN(v) {
			return ResourceTarget{}, "is not a percentage"
		}
		return ResourceTarget{Percent: v}, ""
	}
	factor := 1.0
	for _, q := range quantitySuffixes {
		if rest, ok := strings.CutSuffix(t, q.suffix); ok {
			t, factor = rest, q.factor
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(v) {
		return ResourceTarget{}, "is not a percentage or a quantity"
	}
	if factor < 1 {
		v /= 1 / factor // 500m is 500/1000, exactly as written
	} else {
		v *= factor
	}
	if m == MetricMemory {
		v = math.Round(v) // bytes are whole
	}
	return ResourceTarget{Amount: v}, ""
}

// formatResource writes a target as its key's text: "70%", CPU in
// millicores when it is not whole cores, memory in bytes (in Mi or Gi
// when exact).
func formatResource(t ResourceTarget, m Metric) string {
	if t.Amount <= 0 {
		return formatNumber(t.Percent) + "%"
	}
	if m == MetricCPU {
		if t.Amount == math.Trunc(t.Amount) {
			return formatNumber(t.Amount)
		}
		return formatNumber(t.Amount*1000) + "m"
	}
	for _, u := range []struct {
		suffix string
		factor float64
	}{{"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}} {
		if v := t.Amount / u.factor; v >= 1 && v == math.Trunc(v) {
			return formatNumber(v) + u.suffix
		}
	}
	return formatNumber(t.Amount)
}

// gaugeKeys define the app gauge: which series, where, and its target.
func gaugeKeys() []*entry {
	return []*entry{
		{
			KeyInfo: KeyInfo{Name: KeyGauge, Type: "selector", Default: "none", Scope: ScopeService, Policies: "all",
				Accepted: `a metric name with optional exact label matches, as in PromQL, such as num_requests_waiting or vllm:num_requests_waiting{model_name="llama"}`,
				Meaning:  "the app's gauge the gauge metric reads, from its Prometheus endpoint"},
			parse: func(text string, s *settings) (string, string) {
				if strings.TrimSpace(text) == "" {
					s.Gauge.Selector = ""
					return "", ""
				}
				sel, err := series.ParseSelector(text)
				if err != nil {
					return selectorProblem(err), ""
				}
				s.Gauge.Selector = sel.String()
				return "", ""
			},
			check: func(s *settings) string {
				if s.Gauge.Selector == "" {
					return ""
				}
				if _, err := series.ParseSelector(s.Gauge.Selector); err != nil {
					return selectorProblem(err)
				}
				return ""
			},
			format: func(s *settings) string { return s.Gauge.Selector },
		},
		floatKey(KeyInfo{Name: KeyGaugeTarget, Type: "number", Default: "none", Scope: ScopeService, Policies: "all",
			Accepted: "a number > 0 (needed when metric lists gauge)",
			Meaning:  "the gauge's value one pod should see (gauge-aggregation average), or the pods' total (sum)"},
			noPercent, 1, numRange{lo: 0, noMax: true},
			func(s *settings) *float64 { return &s.Gauge.Target }),
		{
			KeyInfo: KeyInfo{Name: KeyGaugePort, Type: "integer", Default: "0", Scope: ScopeService, Policies: "all",
				Accepted: "a port from 1 to 65535, or 0 for the app's serving port",
				Meaning:  "the port of the app's metrics endpoint, on loopback in the pod"},
			parse: func(text string, s *settings) (string, string) {
				v, isInt, inRange := parseInt(text)
				switch {
				case !isInt:
					return "is not an integer", ""
				case !inRange || v < 0 || v > 65535:
					return problemRange, ""
				}
				s.Gauge.Port = v
				return "", ""
			},
			check: func(s *settings) string {
				if s.Gauge.Port < 0 || s.Gauge.Port > 65535 {
					return problemRange
				}
				return ""
			},
			format: func(s *settings) string { return strconv.Itoa(s.Gauge.Port) },
		},
		{
			KeyInfo: KeyInfo{Name: KeyGaugePath, Type: "path", Scope: ScopeService, Policies: "all",
				Accepted: "an absolute URL path of at most 256 printable characters, such as /metrics, without a fragment",
				Meaning:  "the path of the app's metrics endpoint"},
			parse: func(text string, s *settings) (string, string) {
				t := strings.TrimSpace(text)
				if p := checkGaugePath(t); p != "" {
					return p, ""
				}
				s.Gauge.Path = t
				return "", ""
			},
			check:  func(s *settings) string { return checkGaugePath(s.Gauge.Path) },
			format: func(s *settings) string { return s.Gauge.Path },
		},
		enumKey(KeyInfo{Name: KeyGaugeAggregation, Scope: ScopeService, Policies: "all",
			Meaning: "average: gauge-target is per pod (pods = total / target); sum: it is the pods' total (pods = ready × total / target), as the HPA's Value target"},
			"aggregation", []GaugeAggregation{GaugeAverage, GaugeSum},
			func(s *settings) *GaugeAggregation { return &s.Gauge.Aggregation }),
	}
}

// selectorProblem is what is wrong with a selector, without the text and
// the accepted forms ParseSelector's error repeats: the key's error says
// both already.
func selectorProblem(err error) string {
	if inner := errors.Unwrap(err); inner != nil {
		err = inner
	}
	return "is not a selector: " + err.Error()
}

// checkGaugePath says what is wrong with a metrics path, or "". The
// queue-proxy puts it after the app's loopback address, so it cannot name
// another host; a path that starts with "//" is still refused, as a URL
// reader would take it for one.
func checkGaugePath(p string) string {
	switch {
	case !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//"):
		return "is not an absolute path"
	case len(p) > 256:
		return "is longer than 256 characters"
	case strings.ContainsAny(p, "# \t"):
		return "holds a fragment or a space"
	}
	for _, r := range p {
		if r < 0x21 || r == 0x7f {
			return "holds a control character"
		}
	}
	return ""
}

// checkGauge reports a gauge listed without its selector or target, or
// set up but not listed (which would silently do nothing).
func (p *parser) checkGauge() {
	s := &p.s
	listed := slices.Contains(s.Metrics, MetricGauge)
	switch {
	case p.bad[KeyMetric] || p.bad[KeyGauge] || p.bad[KeyGaugeTarget]:
	case listed && s.Gauge.Selector == "":
		p.fail(KeyGauge, "is not set, but "+p.other(KeyMetric)+" lists gauge", byName[KeyGauge].Accepted, "")
	case listed && s.Gauge.Target <= 0:
		p.fail(KeyGaugeTarget, "is not set, but "+p.other(KeyMetric)+" lists gauge", byName[KeyGaugeTarget].Accepted, "")
	case !listed && s.Gauge.Selector != "":
		p.fail(KeyGauge, "is set, but "+p.other(KeyMetric)+" does not list gauge",
			"unset, or add gauge to "+KeyMetric, "")
	}
}
