package autoscaling

import (
	"errors"
	"flag"
	"maps"
	"slices"
)

// Flags are the autoscaling keys as command-line flags, for `swell sim`
// and `swell local`: --min-scale 1, --window 30s. Every key is a flag
// named exactly as the key, the per-service ones and the cluster-only
// ones (--enable-scale-to-zero, --tick-interval) alike.
type Flags struct {
	values map[string]*flagValue
}

// flagValue keeps a flag's text for Resolve, which parses every flag
// together so it can report every problem and the conflicts between them.
type flagValue struct {
	text   string
	set    bool
	isBool bool
}

func (v *flagValue) String() string {
	if v == nil {
		return ""
	}
	return v.text
}

func (v *flagValue) Set(s string) error {
	v.text, v.set = s, true
	return nil
}

// IsBoolFlag lets --enable-scale-to-zero stand for
// --enable-scale-to-zero=true.
func (v *flagValue) IsBoolFlag() bool { return v.isBool }

// RegisterFlags defines one flag per key on fs, with its meaning, built-in
// default and accepted values as help. The flag package panics if fs
// already has a flag of the same name.
func RegisterFlags(fs *flag.FlagSet) *Flags {
	f := &Flags{values: make(map[string]*flagValue, len(table))}
	for _, e := range table {
		v := &flagValue{isBool: e.Type == "boolean"}
		f.values[e.Name] = v
		fs.Var(v, e.Name, e.Meaning+" (default "+e.Default+"; accepted: "+e.Accepted+")")
	}
	return f
}

// Names returns the keys registered as flags, sorted.
func (f *Flags) Names() []string {
	return slices.Sorted(maps.Keys(f.values))
}

// Resolve parses the flags given on the command line over base: the
// cluster-only flags change the returned Defaults, and the per-service
// ones, over those, make the Spec. containerConcurrency is as for Parse.
// Errors name the flags (--window: "5s" is out of range; ...), all of
// them at once.
func (f *Flags) Resolve(containerConcurrency int, base Defaults) (Spec, Defaults, error) {
	p := newParser(base, "--", "default")
	for name, v := range f.values {
		if v.set {
			p.given[name] = v.text
		}
	}
	p.run()
	p.checkContainerConcurrency(containerConcurrency, "--container-concurrency")
	p.crossCheck()
	if len(p.errs) > 0 {
		return Spec{}, Defaults{}, errors.Join(p.errs...)
	}
	d := base.clone()
	d.EnableScaleToZero = p.s.EnableScaleToZero
	d.AllowZeroInitialScale = p.s.AllowZeroInitialScale
	d.ConcurrencyTarget = p.s.ConcurrencyTarget
	d.RPSTarget = p.s.RPSTarget
	d.MaxScaleLimit = p.s.MaxScaleLimit
	d.TickInterval = p.s.TickInterval
	return p.spec(containerConcurrency), d, nil
}

// Annotations returns the per-service flags given on the command line as
// annotations, e.g. to show the configuration a simulated service would
// need in Kubernetes.
func (f *Flags) Annotations() map[string]string {
	m := map[string]string{}
	for name, v := range f.values {
		if v.set && byName[name].Scope != ScopeCluster {
			m[Prefix+name] = v.text
		}
	}
	return m
}
