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
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/swell-run/swell/autoscaler/sim"
	"github.com/swell-run/swell/pkg/autoscaling"
	"github.com/swell-run/swell/pkg/spelling"
	"github.com/swell-run/swell/pkg/trace"
)

const simUsage = `Usage: swell sim [flags]

Replay traffic through the autoscaler's decision core (the engine, its
windows and the policies) on a virtual clock, with a model of pods and the
activator, and report what it would cost and how long requests would wait.
An hour of traffic takes seconds. Choose the input:
  --trace FILE          a request trace (CSV, see docs/load.md)
  --profile SHAPE       generated traffic: constant, step, onoff or spike
  --observations FILE   recorded decider inputs (CSV t,ready,stable,panic):
                        one decision per row to stdout as t,desired,scale,ebc,panic

The autoscaling flags are the autoscaling.swell.run/* keys, checked as the
annotations are (docs/configuration.md). --policy kpa,hpa,pid runs several
policies on the same traffic and prints one comparison table; an entry may
carry settings of its own, as "hpa tick-interval=15s metrics-resolution=15s".
The pods have CPU (--pod-cores, a share per request served at full speed),
so --metric cpu scales on it.

Examples:
  swell sim --trace azure.csv --sleep-per-token 20ms --container-concurrency 4 --out out/
  swell sim --profile step --rate 20 --step-rate 200 --step-at 5m --duration 30m --service-time 200ms
  swell sim --profile onoff --rate 5 --on 2m --off 5m --duration 30m --policy kpa,hpa,pid
  swell sim --profile step --rate 5 --step-rate 35 --step-at 5m --duration 15m --service-time 200ms \
      --container-concurrency 1 --metric cpu --policy "exponential,hpa metrics-resolution=15s tick-interval=15s"
  swell sim --observations decisions.csv --target 10 --initial-ready 3

See docs/sim.md for the models and the outputs.

Flags:
`

// simFlags are the raw values of `swell sim`'s own flags; the autoscaling
// keys live in keys.
type simFlags struct {
	keys *autoscaling.Flags

	traceFile     string
	sleepBase     time.Duration
	sleepPerToken time.Duration

	profile     string
	rate        float64
	duration    time.Duration
	stepRate    float64
	stepAt      time.Duration
	on, off     time.Duration
	spikeRate   float64
	spikeAt     time.Duration
	spikeFor    time.Duration
	offDist     string
	burstSize   float64
	period      time.Duration
	arrivals    string
	serviceTime time.Duration
	serviceDist string
	seed        uint64

	observations string
	initialReady int

	containerConcurrency int
	podStartup           time.Duration
	podStartupJitter     time.Duration
	podCapacity          int
	podCores             float64
	metricsResolution    time.Duration
	queueLimit           int
	routeDelay           time.Duration
	policy               string
	sweep                string

	out        string
	timeline   string
	chart      string
	summary    string
	writeTrace string
}

// aliasFlag is a second name for another flag of the same set.
type aliasFlag struct {
	fs     *flag.FlagSet
	target string
}

func (a aliasFlag) String() string { return "" }
func (a aliasFlag) Set(s string) error {
	return a.fs.Set(a.target, s)
}

// newSimFlagSet defines every flag of `swell sim`: its own and the
// autoscaling keys.
func newSimFlagSet(f *simFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("swell sim", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.keys = autoscaling.RegisterFlags(fs)
	defineSimFlags(fs, f)
	return fs
}

// defineSimFlags defines `swell sim`'s own flags on fs.
func defineSimFlags(fs *flag.FlagSet, f *simFlags) {
	fs.Var(aliasFlag{fs, autoscaling.KeyTickInterval}, "tick", "same as --tick-interval: the engine decides every `duration` (default 2s)")

	fs.StringVar(&f.traceFile, "trace", "", "replay the arrivals in this CSV `file` (TIMESTAMP,ContextTokens,GeneratedTokens or t,service_time)")
	fs.DurationVar(&f.sleepBase, "sleep-base", 5*time.Millisecond, "service time of a token-trace request: this fixed part...")
	fs.DurationVar(&f.sleepPerToken, "sleep-per-token", time.Millisecond, "...plus this much per generated token")

	fs.StringVar(&f.profile, "profile", "", "generate traffic of this `shape`: constant, step, onoff, spike, diurnal or bursts")
	fs.Float64Var(&f.rate, "rate", 0, "arrival rate in requests per second: throughout (constant), before the step, while on (onoff), outside the spike")
	fs.DurationVar(&f.duration, "duration", 0, "how long requests arrive (a profile needs it; cuts a trace short)")
	fs.Float64Var(&f.stepRate, "step-rate", 0, "the rate after --step-at (step)")
	fs.DurationVar(&f.stepAt, "step-at", 0, "when the rate steps (step)")
	fs.DurationVar(&f.on, "on", time.Minute, "length of each busy phase (onoff)")
	fs.DurationVar(&f.off, "off", 2*time.Minute, "length of each silent phase, or its mean with --off-dist (onoff); the mean silence, heavy-tailed (bursts)")
	fs.Float64Var(&f.burstSize, "burst-size", 100, "mean `requests` of a burst, heavy-tailed, arriving at --rate (bursts)")
	fs.StringVar(&f.offDist, "off-dist", sim.OffFixed, "`distribution` of the silences (onoff): fixed, exponential or pareto (heavy-tailed, shape 1.5)")
	fs.DurationVar(&f.period, "period", 24*time.Hour, "length of one cycle from silence to --rate and back (diurnal)")
	fs.Float64Var(&f.spikeRate, "spike-rate", 0, "the rate during the spike (spike)")
	fs.DurationVar(&f.spikeAt, "spike-at", 0, "when the spike starts (spike)")
	fs.DurationVar(&f.spikeFor, "spike-for", time.Minute, "how long the spike lasts (spike)")
	fs.StringVar(&f.arrivals, "arrivals", sim.ArrivalsPoisson, "arrival `process`: poisson (random, seeded) or uniform (evenly spaced)")
	fs.DurationVar(&f.serviceTime, "service-time", 100*time.Millisecond, "each generated request's work at full speed (the mean, with --service-dist exponential)")
	fs.StringVar(&f.serviceDist, "service-dist", sim.ServiceFixed, "service-time `distribution`: fixed, exponential or lognormal (σ 1.2: median under half the mean, p99 about 8 times it)")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the generated traffic and of the pods' startup jitter")

	fs.StringVar(&f.observations, "observations", "", "replay the decider inputs in this CSV `file` (t,ready,stable,panic) instead of traffic")
	fs.IntVar(&f.initialReady, "initial-ready", 0, "`N` pods running and ready at the start (an autoscaler restart)")

	fs.IntVar(&f.containerConcurrency, "container-concurrency", 0, "hard limit of requests in service per pod (0: none); also the default target")
	fs.DurationVar(&f.podStartup, "pod-startup", 2*time.Second, "how long a pod takes to become ready")
	fs.DurationVar(&f.podStartupJitter, "pod-startup-jitter", 0, "add up to this much, drawn uniformly, to each pod's startup")
	fs.IntVar(&f.podCapacity, "pod-capacity", 0, "`N` requests a pod serves at full speed; beyond, they share it and slow down (0: --container-concurrency, or unlimited)")
	fs.Float64Var(&f.podCores, "pod-cores", 1, "each pod's CPU and CPU request, in `cores`: a request at full speed uses cores / --pod-capacity of them (a percentage --cpu-target is of these)")
	fs.DurationVar(&f.metricsResolution, "metrics-resolution", time.Second, "the CPU the engine sees is each window of this `duration`'s average, published as it closes: 1s as the queue-proxy reports, 15s as metrics-server serves the HPA")
	fs.IntVar(&f.queueLimit, "queue-limit", 0, "reject requests beyond `N` waiting at the activator or at one pod's queue-proxy (0: unbounded)")
	fs.DurationVar(&f.routeDelay, "route-delay", 0, "how long switching traffic between the activator and the pods takes")
	fs.StringVar(&f.policy, "policy", "", "comma-separated `classes` to compare on the same traffic, such as kpa,hpa,pid, default (the class a service gets when it sets none) and oracle, the clairvoyant bound (one is the same as --class); a class may carry settings of its own after it, as \"hpa tick-interval=15s metrics-resolution=15s\"")
	fs.StringVar(&f.sweep, "sweep", "", "`KEY=V1,V2,...`: run the policy (--class, or the first of --policy) at each value of an autoscaling key and chart cost against waits, with the other policies (--policy's others; all at their defaults without it) and the oracle as points")

	fs.StringVar(&f.out, "out", "", "write timeline.csv, summary.txt, summary.json and chart.svg into this `directory` (one subdirectory per policy with several)")
	fs.StringVar(&f.timeline, "timeline", "", "write the timeline CSV to this `file` (one policy)")
	fs.StringVar(&f.chart, "chart", "", "write the SVG chart to this `file` (one policy)")
	fs.StringVar(&f.summary, "summary", "", "write the summary to this `file` (one policy)")
	fs.StringVar(&f.writeTrace, "write-trace", "", "write the simulated requests as a t,service_time trace to this `file`, for swell load --trace")
}

// simPlan is what parseSim makes of the command line.
type simPlan struct {
	// observations mode
	observations []sim.Observation
	initialReady int

	// traffic mode: specs[i] runs as policy names[i], which is the spec's
	// class, the --policy entry with its settings, or sim.Oracle (the
	// bound, computed with the default class's spec for the pods'
	// concurrency); cfgs[i] is its whole configuration, cfg the command
	// line's
	specs   []autoscaling.Spec
	names   []string
	cfgs    []sim.Config
	cfg     sim.Config
	records []trace.Record
	profile *sim.Profile
	traffic string // a description for the summary
	// rise is when generated traffic steps up (a step, a spike), and
	// risePods the pods its new rate needs at the CPU target: each run's
	// reaction to it is measured when risePods > 0
	rise     time.Duration
	risePods int

	// sweep mode: sweepSpecs[i] is names[0]'s spec with sweepKey set to
	// sweepValues[i]; specs and names are then the points
	sweepKey    string
	sweepValues []string
	sweepSpecs  []autoscaling.Spec

	out, timeline, chart, summary, writeTrace string
}

func (p *simPlan) source() sim.Source {
	if p.profile != nil {
		return p.profile.Source()
	}
	return sim.Trace(p.records)
}

// Flags of each input; a flag given without its input is a mistake.
var (
	traceOnlyFlags   = []string{"sleep-base", "sleep-per-token"}
	profileOnlyFlags = []string{"rate", "step-rate", "step-at", "on", "off", "off-dist", "burst-size", "period", "spike-rate", "spike-at", "spike-for", "arrivals", "service-time", "service-dist"}
	trafficOnlyFlags = []string{"duration", "seed", "pod-startup", "pod-startup-jitter", "pod-capacity", "pod-cores", "metrics-resolution",
		"queue-limit", "route-delay", "out", "timeline", "chart", "summary", "write-trace", "tick", autoscaling.KeyTickInterval}
	shapeFlags = map[string][]sim.Shape{
		"step-rate":  {sim.ShapeStep},
		"step-at":    {sim.ShapeStep},
		"on":         {sim.ShapeOnOff},
		"off":        {sim.ShapeOnOff, sim.ShapeBursts},
		"burst-size": {sim.ShapeBursts},
		"off-dist":   {sim.ShapeOnOff},
		"period":     {sim.ShapeDiurnal},
		"spike-rate": {sim.ShapeSpike},
		"spike-at":   {sim.ShapeSpike},
		"spike-for":  {sim.ShapeSpike},
	}
)

// flagProblems turns the simulator's problems into a usage error that names
// each setting as its flag.
func flagProblems(err error) error {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		var ae *autoscaling.Error
		if errors.As(e, &ae) && ae.Name == ae.Key && !strings.HasPrefix(ae.Name, "--") {
			ae.Name = "--" + ae.Key
		}
	}
	return &usageError{msg: err.Error()}
}

func runSim(ctx context.Context, args []string, s streams) int {
	p, err := parseSim(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(s.stdout, simUsage)
		var f simFlags
		own := flag.NewFlagSet("swell sim", flag.ContinueOnError)
		defineSimFlags(own, &f)
		printFlags(s.stdout, own)
		fmt.Fprint(s.stdout, "\nAutoscaling keys (the autoscaling.swell.run/* annotations; --tick-interval and the\nother cluster-wide settings included):\n")
		keys := flag.NewFlagSet("swell sim", flag.ContinueOnError)
		autoscaling.RegisterFlags(keys)
		printFlags(s.stdout, keys)
		return 0
	}
	if err != nil {
		fmt.Fprintf(s.stderr, "swell sim: %v\nRun 'swell sim --help' for usage.\n", err)
		return 2
	}
	if p.observations != nil {
		if err := sim.ReplayObservations(s.stdout, p.observations, p.specs[0], p.initialReady); err != nil {
			fmt.Fprintf(s.stderr, "swell sim: %v\n", err)
			return 1
		}
		return 0
	}
	if err := simulate(ctx, p, s); err != nil {
		fmt.Fprintf(s.stderr, "swell sim: %v\n", err)
		if errors.Is(err, context.Canceled) {
			return 130
		}
		return 1
	}
	return 0
}

// parseSim checks every flag and combination, reporting mistakes by flag
// name, and reads the input file.
func parseSim(args []string) (*simPlan, error) {
	var f simFlags
	fs := newSimFlagSet(&f)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, &usageError{msg: err.Error()}
	}
	if fs.NArg() > 0 {
		return nil, usagef("unexpected argument %q: swell sim takes flags only", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })

	var inputs []string
	for _, m := range []string{"trace", "profile", "observations"} {
		if set[m] {
			inputs = append(inputs, "--"+m)
		}
	}
	const choose = "choose one input: --trace FILE, --profile SHAPE (constant, step, onoff, spike, diurnal) or --observations FILE"
	switch len(inputs) {
	case 0:
		return nil, usagef("no input given: %s", choose)
	case 1:
	default:
		return nil, usagef("%s cannot be combined: %s", strings.Join(inputs, " and "), choose)
	}
	input := inputs[0]
	notWith := func(names []string, why string) error {
		for _, n := range names {
			if set[n] {
				return usagef("--%s %s", n, why)
			}
		}
		return nil
	}
	if input != "--trace" {
		if err := notWith(traceOnlyFlags, "applies to a token trace only: add --trace FILE"); err != nil {
			return nil, err
		}
	}
	if input != "--profile" {
		if err := notWith(profileOnlyFlags, "applies to generated traffic only: add --profile SHAPE"); err != nil {
			return nil, err
		}
	}
	if input == "--observations" {
		if err := notWith(trafficOnlyFlags, "applies to traffic (--trace or --profile), not to --observations"); err != nil {
			return nil, err
		}
	}

	// The policies: --policy, or --class, or the default.
	var policies []policyEntry
	if set["policy"] {
		if set[autoscaling.KeyClass] {
			return nil, usagef("--policy and --class cannot be combined: --policy kpa,hpa runs each class in turn")
		}
		var err error
		if policies, err = parsePolicies(f.policy, f.keys.Names()); err != nil {
			return nil, err
		}
		if input == "--observations" && len(policies) > 1 {
			return nil, usagef("--policy %q: --observations replays one decider; give one class", f.policy)
		}
		if input == "--observations" && policies[0].class == string(sim.Oracle) {
			return nil, usagef("--policy oracle: the bound is computed from traffic (--trace or --profile), not from --observations")
		}
		for _, e := range policies {
			switch {
			case len(e.settings) == 0:
			case input == "--observations":
				return nil, usagef("--policy %q: settings of a policy's own compare runs on traffic; with --observations give them as flags", e.name)
			case set["sweep"]:
				return nil, usagef("--policy %q: settings of a policy's own cannot be combined with --sweep; give them as flags", e.name)
			}
		}
	}
	p := &simPlan{}
	var defaults autoscaling.Defaults
	resolve := func() error {
		spec, d, err := f.keys.Resolve(f.containerConcurrency, autoscaling.DefaultDefaults())
		if err != nil {
			return &usageError{msg: err.Error()}
		}
		p.specs = append(p.specs, spec)
		p.names = append(p.names, string(spec.Class))
		defaults = d
		return nil
	}
	// Each run's tick and metrics resolution: the command line's, or its
	// policy's own.
	type timing struct{ tick, resolution time.Duration }
	var timings []timing
	if len(policies) == 0 {
		if err := resolve(); err != nil {
			return nil, err
		}
		timings = append(timings, timing{defaults.TickInterval, f.metricsResolution})
	}
	for _, e := range policies {
		class := e.class
		switch class {
		case string(sim.Oracle):
			class = string(autoscaling.ClassKPA)
		case defaultPolicy:
			class = string(autoscaling.DefaultDefaults().Class)
		}
		if len(e.settings) > 0 {
			spec, d, res, err := e.resolve(args, class)
			if err != nil {
				return nil, err
			}
			p.specs, p.names = append(p.specs, spec), append(p.names, e.name)
			timings = append(timings, timing{d.TickInterval, res})
			continue
		}
		if err := fs.Set(autoscaling.KeyClass, class); err != nil {
			return nil, err
		}
		if err := resolve(); err != nil {
			return nil, err
		}
		p.names[len(p.names)-1] = e.name
		timings = append(timings, timing{defaults.TickInterval, f.metricsResolution})
	}

	if set["sweep"] {
		if err := p.resolveSweep(fs, &f, set, input, len(policies) > 0, resolve); err != nil {
			return nil, err
		}
	}

	if input == "--observations" {
		if f.initialReady < 0 {
			return nil, flagProblems(&autoscaling.Error{Key: sim.KeyInitialReady, Name: sim.KeyInitialReady,
				Value: strconv.Itoa(f.initialReady), Problem: "is negative", Accepted: "a number of pods of 0 or more"})
		}
		file, err := os.Open(f.observations)
		if err != nil {
			return nil, usagef("--observations: %v", err)
		}
		defer file.Close()
		rows, err := sim.ReadObservations(file)
		if err != nil {
			return nil, usagef("--observations %s: %v", f.observations, err)
		}
		if rows == nil {
			rows = []sim.Observation{}
		}
		p.observations, p.initialReady = rows, f.initialReady
		return p, nil
	}

	if set["duration"] && f.duration <= 0 {
		// 0 is the simulator's "until the traffic ends", which is what
		// leaving the flag out says.
		return nil, usagef("--duration %s: accepted is a positive duration, such as 30m", f.duration)
	}
	if len(p.specs) > 1 && p.sweepKey == "" {
		if err := notWith([]string{"timeline", "chart", "summary"}, "writes one policy's output: with several policies use --out DIR"); err != nil {
			return nil, err
		}
	}
	p.cfg = sim.Config{
		Tick:              timings[0].tick,
		MetricsResolution: f.metricsResolution,
		Pods: sim.PodModel{
			StartupDelay:  f.podStartup,
			StartupJitter: f.podStartupJitter,
			Capacity:      f.podCapacity,
			Cores:         f.podCores,
		},
		QueueLimit:   f.queueLimit,
		RouteDelay:   f.routeDelay,
		InitialReady: f.initialReady,
		Duration:     f.duration,
		Seed:         f.seed,
	}
	if set["pod-cores"] && !(f.podCores > 0) {
		// 0 is the simulator's "one core", which leaving the flag out says.
		return nil, usagef("--pod-cores %v: accepted is a number of cores above 0, such as 0.5 or 2", f.podCores)
	}
	// The simulator's own checks, with its settings named as flags, for
	// each run; the specs were checked as they were resolved. A sweep's
	// runs differ from the command line only in the swept key.
	for i, spec := range p.specs {
		c := withSpec(p.cfg, spec)
		if p.sweepKey == "" {
			c.Tick, c.MetricsResolution = timings[i].tick, timings[i].resolution
		}
		if err := c.Validate(); err != nil {
			if p.names[i] != string(spec.Class) && p.names[i] != string(sim.Oracle) {
				return nil, usagef("--policy %q: %v", p.names[i], flagProblems(err))
			}
			return nil, flagProblems(err)
		}
		p.cfgs = append(p.cfgs, c)
	}
	for _, spec := range p.sweepSpecs {
		if err := withSpec(p.cfg, spec).Validate(); err != nil {
			return nil, flagProblems(err)
		}
	}
	p.out, p.timeline, p.chart, p.summary, p.writeTrace = f.out, f.timeline, f.chart, f.summary, f.writeTrace

	if input == "--trace" {
		for _, name := range []string{"sleep-base", "sleep-per-token"} {
			d := f.sleepBase
			if name == "sleep-per-token" {
				d = f.sleepPerToken
			}
			if d < 0 {
				return nil, usagef("--%s %s: accepted is a duration of 0 or more, such as 5ms", name, d)
			}
		}
		tr, err := trace.ReadFile(f.traceFile, trace.Model{Base: f.sleepBase, PerToken: f.sleepPerToken})
		if err != nil {
			return nil, usagef("--trace %s: %v", f.traceFile, err)
		}
		if len(tr.Records) == 0 {
			return nil, usagef("--trace %s: the trace has no rows", f.traceFile)
		}
		if tr.Format == trace.FormatService {
			if err := notWith(traceOnlyFlags, "applies to token traces; "+f.traceFile+" gives each request's service time itself"); err != nil {
				return nil, err
			}
		}
		if f.duration > 0 && tr.Records[0].Arrival >= f.duration {
			return nil, usagef("--duration %s ends before the trace's first arrival (%s)", f.duration, tr.Records[0].Arrival)
		}
		p.records = tr.Records
		n := len(tr.Records)
		if f.duration > 0 {
			n, _ = slices.BinarySearchFunc(tr.Records, f.duration, func(r trace.Record, d time.Duration) int {
				return cmpDuration(r.Arrival, d)
			})
		}
		p.traffic = fmt.Sprintf("trace %s: %d requests over %s", filepath.Base(f.traceFile), n, tr.Records[n-1].Arrival.Round(time.Second))
		if tr.Format == trace.FormatTokens {
			p.traffic += fmt.Sprintf(", service time %s + %s per generated token", f.sleepBase, f.sleepPerToken)
		}
		return p, nil
	}

	shape := sim.Shape(f.profile)
	if !slices.Contains(sim.Shapes, shape) {
		return nil, usagef("--profile %q: accepted are %s", f.profile, shapeNames())
	}
	for name, shapes := range shapeFlags {
		if set[name] && !slices.Contains(shapes, shape) {
			return nil, usagef("--%s applies to --profile %s, not %s", name, shapes[0], shape)
		}
	}
	if !set["duration"] {
		return nil, usagef("--profile needs --duration: how long requests arrive, such as 30m")
	}
	prof := sim.Profile{
		Shape: shape, Rate: f.rate, Duration: f.duration,
		StepRate: f.stepRate, StepAt: f.stepAt,
		On: f.on, Off: f.off, OffDist: f.offDist, Period: f.period, BurstSize: f.burstSize,
		SpikeRate: f.spikeRate, SpikeAt: f.spikeAt, SpikeFor: f.spikeFor,
		Arrivals: f.arrivals, ServiceTime: f.serviceTime, ServiceDist: f.serviceDist,
		Seed: f.seed,
	}
	if err := prof.Validate(); err != nil {
		return nil, &usageError{msg: err.Error()}
	}
	p.profile = &prof
	p.traffic = describeProfile(prof)
	// A rise of load: how fast each run answers it, measured against the
	// pods the new rate keeps at the CPU target.
	switch shape {
	case sim.ShapeStep:
		p.rise, p.risePods = prof.StepAt, p.cfgs[0].PodsAtTarget(prof.StepRate, prof.ServiceTime)
	case sim.ShapeSpike:
		p.rise, p.risePods = prof.SpikeAt, p.cfgs[0].PodsAtTarget(prof.SpikeRate, prof.ServiceTime)
	}
	return p, nil
}

// policyEntry is one item of --policy: a class, or oracle, and the
// settings it runs with over the command line's, as "hpa
// tick-interval=15s metrics-resolution=15s".
type policyEntry struct {
	name     string // as written, spaces made single: the run's name
	class    string
	settings [][2]string // key, value
}

// entrySettings are the settings a policy may carry of its own, besides
// the autoscaling keys other than class: how the engine sees and decides
// may differ between runs, the traffic and the pods may not.
var entrySettings = []string{"metrics-resolution", "tick"}

// parsePolicies reads --policy: comma-separated entries, each a class
// (or oracle) and optional KEY=VALUE settings separated by spaces.
// defaultPolicy names, in --policy, the class a service gets when it
// sets none.
const defaultPolicy = "default"

func parsePolicies(text string, keys []string) ([]policyEntry, error) {
	allowed := slices.DeleteFunc(append(slices.Clone(keys), entrySettings...), func(k string) bool { return k == autoscaling.KeyClass })
	var out []policyEntry
	for _, item := range strings.Split(text, ",") {
		fields := strings.Fields(item)
		if len(fields) == 0 {
			fields = []string{""}
		}
		e := policyEntry{name: strings.Join(fields, " "), class: fields[0]}
		if e.class != string(sim.Oracle) && e.class != defaultPolicy && !slices.Contains(autoscaling.Classes(), autoscaling.Class(e.class)) {
			return nil, flagProblems(&autoscaling.Error{Name: "--policy", Value: e.class, Problem: "is not a class",
				Accepted:   "a comma-separated list of " + classList() + ", default (the default class) or oracle (the clairvoyant bound)",
				Suggestion: spelling.Suggest(e.class, append(classNames(), defaultPolicy, string(sim.Oracle)))})
		}
		for _, kv := range fields[1:] {
			key, value, ok := strings.Cut(kv, "=")
			key = strings.TrimPrefix(key, "--")
			switch {
			case e.class == string(sim.Oracle):
				return nil, usagef("--policy %q: the oracle has no settings", e.name)
			case !ok || key == "":
				return nil, usagef("--policy %q: %q is not a setting; want KEY=VALUE after the class, such as tick-interval=15s", e.name, kv)
			case !slices.Contains(allowed, key):
				return nil, flagProblems(&autoscaling.Error{Name: "--policy " + strconv.Quote(e.name), Value: key,
					Problem:    "is not a setting a policy can carry of its own",
					Accepted:   "an autoscaling key other than class, metrics-resolution or tick: the traffic and the pods are the same for every policy",
					Suggestion: spelling.Suggest(key, allowed)})
			}
			e.settings = append(e.settings, [2]string{key, value})
		}
		if slices.ContainsFunc(out, func(o policyEntry) bool { return o.name == e.name }) {
			return nil, usagef("--policy %q: %s is listed twice", text, e.name)
		}
		out = append(out, e)
	}
	return out, nil
}

// resolve makes the entry's spec, cluster defaults and metrics resolution:
// the command line args as given, with the entry's class and settings
// over it.
func (e policyEntry) resolve(args []string, class string) (autoscaling.Spec, autoscaling.Defaults, time.Duration, error) {
	var f simFlags
	fs := newSimFlagSet(&f)
	if err := fs.Parse(args); err != nil {
		return autoscaling.Spec{}, autoscaling.Defaults{}, 0, &usageError{msg: err.Error()}
	}
	if err := fs.Set(autoscaling.KeyClass, class); err != nil {
		return autoscaling.Spec{}, autoscaling.Defaults{}, 0, err
	}
	for _, kv := range e.settings {
		if err := fs.Set(kv[0], kv[1]); err != nil {
			// Only the simulator's own settings fail here: the
			// autoscaling keys are checked as they are resolved.
			return autoscaling.Spec{}, autoscaling.Defaults{}, 0,
				usagef("--policy %q: %s %q is not a duration; accepted: a whole number of seconds, such as 15s", e.name, kv[0], kv[1])
		}
	}
	spec, d, err := f.keys.Resolve(f.containerConcurrency, autoscaling.DefaultDefaults())
	if err != nil {
		return autoscaling.Spec{}, autoscaling.Defaults{}, 0, usagef("--policy %q: %v", e.name, err)
	}
	return spec, d, f.metricsResolution, nil
}

func cmpDuration(a, b time.Duration) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func classNames() []string {
	var n []string
	for _, c := range autoscaling.Classes() {
		n = append(n, string(c))
	}
	return n
}

func classList() string { return strings.Join(classNames(), ", ") }

func shapeNames() string {
	n := make([]string, len(sim.Shapes))
	for i, s := range sim.Shapes {
		n[i] = string(s)
	}
	return strings.Join(n, ", ")
}

func describeProfile(p sim.Profile) string {
	rate := func(r float64) string { return strconv.FormatFloat(r, 'g', -1, 64) + "/s" }
	var b strings.Builder
	fmt.Fprintf(&b, "profile %s for %s: ", p.Shape, p.Duration)
	switch p.Shape {
	case sim.ShapeConstant:
		b.WriteString(rate(p.Rate))
	case sim.ShapeStep:
		fmt.Fprintf(&b, "%s, then %s from %s", rate(p.Rate), rate(p.StepRate), p.StepAt)
	case sim.ShapeOnOff:
		if p.OffDist == "" || p.OffDist == sim.OffFixed {
			fmt.Fprintf(&b, "%s for %s, silent for %s, repeated", rate(p.Rate), p.On, p.Off)
		} else {
			fmt.Fprintf(&b, "%s for %s, silent for %s %s, repeated", rate(p.Rate), p.On, p.OffDist, p.Off)
		}
	case sim.ShapeDiurnal:
		fmt.Fprintf(&b, "0 to %s and back every %s", rate(p.Rate), p.Period)
	case sim.ShapeBursts:
		fmt.Fprintf(&b, "bursts of %g requests at %s after silences of %s, both Pareto means", p.BurstSize, rate(p.Rate), p.Off)
	case sim.ShapeSpike:
		fmt.Fprintf(&b, "%s, %s from %s for %s", rate(p.Rate), rate(p.SpikeRate), p.SpikeAt, p.SpikeFor)
	}
	dist := "fixed"
	switch p.ServiceDist {
	case sim.ServiceExponential:
		dist = "exponential, mean"
	case sim.ServiceLognormal:
		dist = "lognormal, mean"
	}
	arrivals := p.Arrivals
	if arrivals == "" {
		arrivals = sim.ArrivalsPoisson
	}
	fmt.Fprintf(&b, "; %s arrivals, seed %d; service time %s %s", arrivals, p.Seed, dist, p.ServiceTime)
	return b.String()
}

// simulate runs every policy of p, concurrently up to the machine's cores,
// and writes the outputs.
func simulate(ctx context.Context, p *simPlan, s streams) error {
	if p.writeTrace != "" {
		if err := writeTraceFile(p.writeTrace, p.source(), p.cfg.Duration); err != nil {
			return err
		}
	}
	// The bound, once: every summary gives its pod-seconds as a multiple
	// of the oracle's.
	bound, err := sim.RunOracle(ctx, p.cfgs[0], p.source())
	if err != nil {
		return err
	}
	if p.sweepKey != "" {
		return sweep(ctx, p, bound, s)
	}
	results, err := runAll(ctx, p, p.cfgs, p.names, bound, s)
	if err != nil {
		return err
	}

	if len(results) == 1 {
		r := results[0]
		var text bytes.Buffer
		fmt.Fprintf(&text, "%-12s %s\n", "traffic", p.traffic)
		if err := sim.WriteSummary(&text, r.Summary); err != nil {
			return err
		}
		if _, err := s.stdout.Write(text.Bytes()); err != nil {
			return err
		}
		if p.out != "" {
			if err := writeOutputs(p.out, p, r, text.Bytes()); err != nil {
				return err
			}
		}
		files := []struct {
			path  string
			write func(io.Writer) error
		}{
			{p.timeline, func(w io.Writer) error { return sim.WriteTimeline(w, r.Timeline) }},
			{p.chart, func(w io.Writer) error { return sim.WriteChart(w, r.Timeline, p.specs[0].Metric, chartTitle(p, r)) }},
			{p.summary, func(w io.Writer) error { _, err := w.Write(text.Bytes()); return err }},
		}
		for _, f := range files {
			if f.path != "" {
				if err := writeFile(f.path, f.write); err != nil {
					return err
				}
			}
		}
		return nil
	}

	sums := make([]sim.Summary, len(results))
	for i, r := range results {
		sums[i] = r.Summary
	}
	var table bytes.Buffer
	fmt.Fprintf(&table, "%s\n\n", p.traffic)
	if err := sim.WriteComparison(&table, sums); err != nil {
		return err
	}
	if _, err := s.stdout.Write(table.Bytes()); err != nil {
		return err
	}
	if p.out == "" {
		return nil
	}
	for _, r := range results {
		var text bytes.Buffer
		fmt.Fprintf(&text, "%-12s %s\n", "traffic", p.traffic)
		if err := sim.WriteSummary(&text, r.Summary); err != nil {
			return err
		}
		if err := writeOutputs(filepath.Join(p.out, dirName(string(r.Summary.Class))), p, r, text.Bytes()); err != nil {
			return err
		}
	}
	return writeFile(filepath.Join(p.out, "comparison.txt"), func(w io.Writer) error {
		_, err := w.Write(table.Bytes())
		return err
	})
}

// runAll runs each configuration as the policy names[i] says (the oracle
// is bound, computed already), concurrently up to the machine's cores, and
// gives every summary the bound's pod-seconds, the name it runs as and its
// reaction to a rise of the load.
func runAll(ctx context.Context, p *simPlan, cfgs []sim.Config, names []string, bound *sim.Result, s streams) ([]*sim.Result, error) {
	results := make([]*sim.Result, len(cfgs))
	errs := make([]error, len(cfgs))
	elapsed := make([]time.Duration, len(cfgs))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i, cfg := range cfgs {
		if names[i] == string(sim.Oracle) {
			results[i] = bound
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			start := time.Now()
			results[i], errs[i] = sim.Run(ctx, cfg, p.source())
			elapsed[i] = time.Since(start)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for i, r := range results {
		r.Summary.OraclePodSeconds = bound.Summary.PodSeconds
		r.Summary.OracleMaxPods = bound.Summary.MaxPods
		if names[i] == string(sim.Oracle) {
			continue
		}
		r.Summary.Class = autoscaling.Class(names[i])
		if p.risePods > 0 {
			r.React(p.rise, p.risePods)
		}
		fmt.Fprintf(s.stderr, "swell sim: %s: simulated %s in %s\n", r.Summary.Class, r.Summary.Duration, elapsed[i].Round(time.Millisecond))
	}
	return results, nil
}

// dirName is the directory of a run's outputs under --out: its name, with
// the spaces and slashes of a policy's settings made underscores.
func dirName(name string) string { return strings.NewReplacer(" ", "_", "/", "_").Replace(name) }

// sweep runs the swept policy at each value and the points, prints the
// comparison (the swept runs named KEY=VALUE) and draws the frontier.
func sweep(ctx context.Context, p *simPlan, bound *sim.Result, s streams) error {
	names := make([]string, len(p.sweepSpecs))
	for i := range names {
		names[i] = string(p.sweepSpecs[i].Class)
	}
	cfgs := make([]sim.Config, len(p.sweepSpecs))
	for i, spec := range p.sweepSpecs {
		cfgs[i] = withSpec(p.cfg, spec)
	}
	swept, err := runAll(ctx, p, cfgs, names, bound, s)
	if err != nil {
		return err
	}
	points, err := runAll(ctx, p, p.cfgs, p.names, bound, s)
	if err != nil {
		return err
	}
	var sums []sim.Summary
	var line, others []sim.FrontierPoint
	for i, r := range swept {
		sum := r.Summary
		label := p.sweepKey + "=" + p.sweepValues[i]
		sum.Class = autoscaling.Class(string(sum.Class) + " " + label)
		sums = append(sums, sum)
		line = append(line, sim.FrontierPoint{Label: p.sweepValues[i], Summary: r.Summary})
	}
	for _, r := range points {
		sums = append(sums, r.Summary)
		others = append(others, sim.FrontierPoint{Label: string(r.Summary.Class), Summary: r.Summary})
	}
	var table bytes.Buffer
	fmt.Fprintf(&table, "%s\n\n", p.traffic)
	if err := sim.WriteComparison(&table, sums); err != nil {
		return err
	}
	if _, err := s.stdout.Write(table.Bytes()); err != nil {
		return err
	}
	title := fmt.Sprintf("%s at %s = %s", p.sweepSpecs[0].Class, p.sweepKey, strings.Join(p.sweepValues, ", "))
	draw := func(w io.Writer) error {
		return sim.WriteFrontier(w, title, fmt.Sprintf("%s as %s varies", p.sweepSpecs[0].Class, p.sweepKey), line, others)
	}
	if p.chart != "" {
		if err := writeFile(p.chart, draw); err != nil {
			return err
		}
	}
	if p.out != "" {
		if err := os.MkdirAll(p.out, 0o755); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
		if err := writeFile(filepath.Join(p.out, "frontier.svg"), draw); err != nil {
			return err
		}
		return writeFile(filepath.Join(p.out, "comparison.txt"), func(w io.Writer) error {
			_, err := w.Write(table.Bytes())
			return err
		})
	}
	return nil
}

// resolveSweep reads --sweep KEY=V1,V2,...: the swept policy is the first
// of p.names, at each value; the points are p.names' others or, without
// --policy, every class at its defaults; the oracle is always one.
func (p *simPlan) resolveSweep(fs *flag.FlagSet, f *simFlags, set map[string]bool, input string, listed bool, resolve func() error) error {
	if input == "--observations" {
		return usagef("--sweep runs policies on traffic (--trace or --profile), not on --observations")
	}
	key, values, ok := strings.Cut(f.sweep, "=")
	key = strings.TrimPrefix(strings.TrimSpace(key), "--")
	if !ok || key == "" || strings.TrimSpace(values) == "" {
		return usagef("--sweep %q: want KEY=V1,V2,..., such as scale-to-zero-grace-period=10s,30s,1m", f.sweep)
	}
	if !slices.Contains(f.keys.Names(), key) || key == autoscaling.KeyClass {
		return flagProblems(&autoscaling.Error{Name: "--sweep", Value: key, Problem: "is not an autoscaling key that can be swept",
			Accepted:   "a key of docs/configuration.md other than class, such as target or scale-to-zero-grace-period",
			Suggestion: spelling.Suggest(key, f.keys.Names())})
	}
	if set[key] {
		return usagef("--sweep %s and --%s cannot be combined: the sweep sets it", key, key)
	}
	for _, n := range []string{"timeline", "summary"} {
		if set[n] {
			return usagef("--%s writes one run's output: with --sweep use --out DIR or --chart FILE (the frontier)", n)
		}
	}
	swept := p.names[0]
	if swept == string(sim.Oracle) {
		return usagef("--sweep: the oracle has no settings to sweep; list the policy to sweep first in --policy")
	}
	if !listed {
		// The points: every class at its defaults.
		p.specs, p.names = nil, nil
		for _, c := range autoscaling.Classes() {
			if err := fs.Set(autoscaling.KeyClass, string(c)); err != nil {
				return err
			}
			if err := resolve(); err != nil {
				return err
			}
		}
		p.specs, p.names = append(p.specs, p.specs[0]), append(p.names, string(sim.Oracle))
	} else {
		p.specs, p.names = p.specs[1:], p.names[1:]
	}
	if err := fs.Set(autoscaling.KeyClass, swept); err != nil {
		return err
	}
	points, pointNames := p.specs, p.names
	p.specs, p.names = nil, nil
	for _, v := range strings.Split(values, ",") {
		v = strings.TrimSpace(v)
		if err := fs.Set(key, v); err != nil {
			return usagef("--sweep %s=%s: %v", key, v, err)
		}
		if err := resolve(); err != nil {
			return err
		}
		if slices.Contains(p.sweepValues, v) {
			return usagef("--sweep: %s=%s is listed twice", key, v)
		}
		p.sweepValues = append(p.sweepValues, v)
	}
	p.sweepKey, p.sweepSpecs = key, p.specs
	p.specs, p.names = points, pointNames
	if !slices.Contains(p.names, string(sim.Oracle)) {
		p.specs, p.names = append(p.specs, p.sweepSpecs[0]), append(p.names, string(sim.Oracle))
	}
	return nil
}

// withSpec is cfg running spec.
func withSpec(cfg sim.Config, spec autoscaling.Spec) sim.Config {
	cfg.Spec = spec
	return cfg
}

func chartTitle(p *simPlan, r *sim.Result) string {
	s := r.Summary
	return fmt.Sprintf("%s · pod-seconds %.0f (%s oracle) · cold starts %d · waited %d (p99 %s) · rejected %d",
		s.Class, s.PodSeconds, s.OracleRatio(), s.ColdStarts, s.Waited, s.WaitP99.Round(time.Millisecond), s.Rejected)
}

// writeOutputs writes one policy's files into dir.
func writeOutputs(dir string, p *simPlan, r *sim.Result, summaryText []byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	files := []struct {
		name  string
		write func(io.Writer) error
	}{
		{"timeline.csv", func(w io.Writer) error { return sim.WriteTimeline(w, r.Timeline) }},
		{"summary.txt", func(w io.Writer) error { _, err := w.Write(summaryText); return err }},
		{"summary.json", func(w io.Writer) error {
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			return enc.Encode(struct {
				Traffic string `json:"traffic"`
				sim.Summary
			}{p.traffic, r.Summary})
		}},
		{"chart.svg", func(w io.Writer) error {
			return sim.WriteChart(w, r.Timeline, p.specs[0].Metric, chartTitle(p, r))
		}},
	}
	for _, f := range files {
		if err := writeFile(filepath.Join(dir, f.name), f.write); err != nil {
			return err
		}
	}
	return nil
}

// writeFile writes a whole file, reporting any failure with its path.
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	bw := bufio.NewWriter(f)
	err = write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// writeTraceFile writes src's requests before cut (0: all) as a
// t,service_time trace.
func writeTraceFile(path string, src sim.Source, cut time.Duration) error {
	return writeFile(path, func(w io.Writer) error {
		if _, err := io.WriteString(w, trace.HeaderService+"\n"); err != nil {
			return err
		}
		var buf []byte
		for {
			r, ok := src.Next()
			if !ok || (cut > 0 && r.Arrival >= cut) {
				return nil
			}
			buf = strconv.AppendFloat(buf[:0], r.Arrival.Seconds(), 'f', -1, 64)
			buf = append(buf, ',')
			buf = strconv.AppendFloat(buf, r.Work.Seconds(), 'f', -1, 64)
			buf = append(buf, '\n')
			if _, err := w.Write(buf); err != nil {
				return err
			}
		}
	})
}
