package config

import (
	"errors"
	"flag"
	"slices"
	"strings"

	"github.com/swell-run/swell/pkg/autoscaling"
)

const acceptedArgv = "swell local [flags] -- CMD [ARGS...]"

// Flags are the one-service flags of `swell local`: the service's own
// settings and every autoscaling key (--min-scale, --window,
// --enable-scale-to-zero...).
type Flags struct {
	fs    *flag.FlagSet
	names map[string]bool

	// Numbers are kept as text so that File reports every bad value,
	// named by its flag, together with the autoscaling flags' problems.
	name, dir, containerConcurrency, queueDepth, timeout string
	hosts, env                                           listFlag
	autoscaling                                          *autoscaling.Flags
}

// listFlag is a repeatable flag.
type listFlag []string

func (l *listFlag) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(*l, ",")
}

func (l *listFlag) Set(s string) error {
	*l = append(*l, s)
	return nil
}

// RegisterFlags adds the one-service flags to fs: --name,
// --container-concurrency, --queue-depth, --timeout, --host and --env
// (both repeatable), --dir, and one flag per autoscaling key
// (autoscaling.RegisterFlags).
func RegisterFlags(fs *flag.FlagSet) *Flags {
	before := map[string]bool{}
	fs.VisitAll(func(fl *flag.Flag) { before[fl.Name] = true })

	f := &Flags{fs: fs, names: map[string]bool{}}
	fs.StringVar(&f.name, "name", "", "service name (default: the command's base name, e.g. hello-app for ./bin/Hello_App; accepted: "+acceptedName+")")
	fs.StringVar(&f.containerConcurrency, "container-concurrency", "", "hard limit of requests per replica (default 0: none; accepted: "+acceptedCount+")")
	fs.StringVar(&f.queueDepth, "queue-depth", "", "requests queued per replica (default 0: 10×container-concurrency; accepted: "+acceptedCount+")")
	fs.StringVar(&f.timeout, "timeout", "", "request timeout (default 5m; accepted: "+acceptedTimeout+")")
	fs.Var(&f.hosts, "host", "extra Host name routed to the service, repeatable (accepted: "+acceptedHost+")")
	fs.Var(&f.env, "env", "environment variable of the service, repeatable (accepted: "+acceptedEnv+", KEY not PORT)")
	fs.StringVar(&f.dir, "dir", "", "working directory of the service (default: swell's own)")
	f.autoscaling = autoscaling.RegisterFlags(fs)

	fs.VisitAll(func(fl *flag.Flag) {
		if !before[fl.Name] {
			f.names[fl.Name] = true
		}
	})
	return f
}

// Set returns the names of these flags given on the command line
// ("--min-scale", ...), sorted; call it after fs.Parse. A command taking
// its services from a file refuses them.
func (f *Flags) Set() []string {
	var set []string
	f.fs.Visit(func(fl *flag.Flag) {
		if f.names[fl.Name] {
			set = append(set, "--"+fl.Name)
		}
	})
	slices.Sort(set)
	return set
}

// File builds the one service the flags and argv, the words after `--`,
// describe. Without --name, the name is derived from argv[0]: its base
// name, lowercased, with every run of other characters turned into '-'
// ("./bin/Hello_App" gives "hello-app"). Every problem is reported at
// once, named by its flag:
//
//	--min-scale: "x" is not an integer; accepted: an integer ≥ 0
func (f *Flags) File(argv []string) (*File, error) {
	var errs []error
	s := Service{Name: f.name, Dir: f.dir}
	switch {
	case len(argv) == 0:
		errs = append(errs, noValue("no command", acceptedArgv))
	case argv[0] == "":
		errs = append(errs, noValue("the command's program name is empty", acceptedArgv))
	default:
		s.Command = slices.Clone(argv)
		if s.Name == "" {
			s.Name = nameFromCommand(argv[0])
		}
	}
	if f.name != "" || f.isSet("name") {
		if problem := checkName(f.name); problem != "" {
			errs = append(errs, flagError("name", badValue(f.name, problem, acceptedName)))
		}
	}
	count := func(name, text string) int {
		if text == "" && !f.isSet(name) {
			return 0
		}
		v, err := parseCount(text)
		if err != nil {
			errs = append(errs, flagError(name, err))
		}
		return v
	}
	s.ContainerConcurrency = count("container-concurrency", f.containerConcurrency)
	s.QueueDepth = count("queue-depth", f.queueDepth)
	if f.timeout != "" || f.isSet("timeout") {
		d, err := parseTimeout(f.timeout)
		if err != nil {
			errs = append(errs, flagError("timeout", err))
		}
		s.RequestTimeout = d
	}
	seen := map[string]bool{}
	for _, kv := range f.env {
		key, value, found := strings.Cut(kv, "=")
		problem := checkEnv(key, value)
		switch {
		case !found:
			problem = "is not KEY=VALUE"
		case problem == "" && seen[key]:
			errs = append(errs, flagError("env", badValue(kv, "sets "+key+" again", "each KEY once")))
			continue
		}
		if problem != "" {
			errs = append(errs, flagError("env", badValue(kv, problem, acceptedEnv)))
			continue
		}
		seen[key] = true
		s.Env = append(s.Env, kv)
	}
	for _, text := range f.hosts {
		h, problem := normalizeHost(text)
		switch {
		case problem != "":
			errs = append(errs, flagError("host", badValue(text, problem, acceptedHost)))
		case slices.Contains(s.Hosts, h):
			errs = append(errs, flagError("host", badValue(text, "is given twice", "each host once")))
		default:
			s.Hosts = append(s.Hosts, h)
		}
	}

	spec, defaults, err := f.autoscaling.Resolve(s.ContainerConcurrency, autoscaling.DefaultDefaults())
	if err == nil {
		spec, err = withReplicaRequests(spec)
	}
	if err != nil {
		errs = append(errs, splitErrors(err)...)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	s.Spec = spec
	s.Annotations = f.autoscaling.Annotations()
	return &File{Defaults: defaults, Services: []Service{s}}, nil
}

func (f *Flags) isSet(name string) bool {
	set := false
	f.fs.Visit(func(fl *flag.Flag) { set = set || fl.Name == name })
	return set
}
