package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/kube/apiserver"
	"github.com/swell-run/swell/kube/statusview"
	"github.com/swell-run/swell/local"
)

const statusUsage = `Usage: {prog} status [flags] [SERVICE...]

Show what Swell is doing, per service: ready and desired replicas, where
traffic goes, the load (last second, stable and panic windows), panic
mode, excess burst capacity, requests queued at the activator, and the
latest decision's reason and events. swell local on this machine and a
Kubernetes cluster show the same table; docs/status.md describes it.
SERVICE narrows it to those services (NAME, or NAMESPACE/NAME with -A).

What it shows:
  swell local    with --addr
  a cluster      with --kubeconfig, --context, -n or -A, or run as kubectl swell
  otherwise      swell local if it answers at --addr's default, else the
                 cluster kubectl would use ($KUBECONFIG, ~/.kube/config,
                 in a pod its service account)

On a cluster it reads only what the autoscaler writes to the API server:
each opted-in Deployment's swell.run/status annotation and the autoscaler's
Events on it (it needs to list and watch Deployments and Events). READY and
DESIRED are the Deployment's own; the loads are those of the latest
decision that changed the annotation. "-" is not known yet.

-w follows the changes: a table prints its header once, then each row that
changes, as kubectl get -w does; -o json prints one compact JSON document
per line, -o yaml one YAML document per change ("---" between them), each
with the services that changed since the one before (all of them in the
first) and the names of those gone ("removed"). On swell local, -w reads
its status every second.

Flags:
`

// statusPoll is how often -w reads swell local's status; statusAddr is
// where swell local's admin port is looked for by default.
var (
	statusPoll = time.Second
	statusAddr = "127.0.0.1:" + strconv.Itoa(local.DefaultAdminPort)
)

// noCluster says why there is no cluster to show.
const noCluster = "no cluster is configured (no kubeconfig at $KUBECONFIG or ~/.kube/config, and not in a pod)"

// statusFlags are the command line of `swell status`.
type statusFlags struct {
	addr, kubeconfig, context, namespace, output string
	all, watch                                   bool
	events                                       int
	// names are the SERVICE arguments.
	names []string
	// set holds the flags given.
	set map[string]bool
}

// onCluster says the flags name a cluster.
func (f *statusFlags) onCluster() bool {
	return f.set["kubeconfig"] || f.set["context"] || f.set["n"] || f.set["namespace"] || f.set["A"] || f.set["all-namespaces"]
}

func runStatus(ctx context.Context, args []string, s streams) int {
	f, code := parseStatusFlags(args, s)
	if f == nil {
		return code
	}
	switch {
	case f.set["addr"]:
		return f.showLocal(ctx, s, nil)
	case f.onCluster() || prog == "kubectl swell":
		return f.showCluster(ctx, s, apiserver.ClientConfig(f.kubeconfig, f.context, f.namespace))
	}
	// Neither named: swell local if it answers, else the cluster.
	st, localErr := fetchLocal(ctx, f.addr)
	if localErr == nil {
		return f.showLocal(ctx, s, &st)
	}
	cc := apiserver.ClientConfig(f.kubeconfig, f.context, f.namespace)
	if _, err := cc.ClientConfig(); clientcmd.IsEmptyConfig(err) {
		fmt.Fprintf(s.stderr, "%s status: nothing to show: %v; and %s\n", prog, localErr, noCluster)
		return 1
	}
	return f.showCluster(ctx, s, cc)
}

// parseStatusFlags reads the command line; a nil result comes with the
// exit code. Flags may come after the SERVICE arguments, as kubectl takes
// them.
func parseStatusFlags(args []string, s streams) (*statusFlags, int) {
	f := &statusFlags{set: map[string]bool{}}
	fs := flag.NewFlagSet(prog+" status", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&f.addr, "addr", statusAddr, "show swell local, at this admin `address`")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "show the cluster of this kubeconfig `file` (default $KUBECONFIG, else ~/.kube/config)")
	fs.StringVar(&f.context, "context", "", "the kubeconfig `context` to use (default its current context)")
	fs.StringVar(&f.namespace, "n", "", "show this `namespace` (default the context's)")
	fs.StringVar(&f.namespace, "namespace", "", "the `namespace`, as -n")
	fs.BoolVar(&f.all, "A", false, "show every namespace, with a NAMESPACE column")
	fs.BoolVar(&f.all, "all-namespaces", false, "the same as -A")
	fs.BoolVar(&f.watch, "w", false, "follow the changes")
	fs.BoolVar(&f.watch, "watch", false, "the same as -w")
	fs.StringVar(&f.output, "o", "table", "output `format`: table, json or yaml")
	fs.StringVar(&f.output, "output", "table", "the output `format`, as -o")
	fs.IntVar(&f.events, "events", 5, "show the last `N` events of each service in the table")
	names, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(s.stdout, strings.ReplaceAll(statusUsage, "{prog}", prog))
			printFlags(s.stdout, fs)
			return nil, 0
		}
		fmt.Fprintf(s.stderr, "%s status: %v (see %[1]s status --help)\n", prog, err)
		return nil, 2
	}
	f.names = names
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })

	var problems []string
	switch f.output {
	case "table", "json", "yaml":
	default:
		problems = append(problems, fmt.Sprintf("-o %q; accepted: table, json or yaml", f.output))
	}
	if f.events < 0 {
		problems = append(problems, fmt.Sprintf("--events %d; accepted: a count ≥ 0", f.events))
	}
	if f.set["addr"] && f.onCluster() {
		problems = append(problems, "--addr shows swell local, --kubeconfig, --context, -n and -A a cluster; give one or the other")
	}
	if f.all && f.namespace != "" {
		problems = append(problems, fmt.Sprintf("-A shows every namespace and -n %q one; give one or the other", f.namespace))
	}
	if u, err := localURL(f.addr); err != nil {
		problems = append(problems, fmt.Sprintf("--addr %q: %v; accepted: host:port or a URL", f.addr, err))
	} else {
		f.addr = u
	}
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintf(s.stderr, "%s status: %s\n", prog, p)
		}
		return nil, 2
	}
	return f, 0
}

// parseInterleaved parses fs from args, with flags before, between and
// after the positional arguments, which it returns; after "--" every
// argument is positional.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if i := len(args) - len(rest) - 1; i >= 0 && args[i] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// localURL is the URL of swell local's status at addr.
func localURL(addr string) (string, error) {
	base := addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	u, err := url.Parse(strings.TrimSuffix(base, "/") + local.StatusPath)
	if err != nil {
		return "", err
	}
	if u.Host == "" {
		return "", errors.New("no host")
	}
	return u.String(), nil
}

// fetchLocal reads swell local's status at u.
func fetchLocal(ctx context.Context, u string) (local.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return local.Status{}, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return local.Status{}, fmt.Errorf("is swell local running? %w", err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 64<<20))
	if err != nil || res.StatusCode != http.StatusOK {
		return local.Status{}, fmt.Errorf("%s answered %s: %v %s", u, res.Status, err, strings.TrimSpace(string(body)))
	}
	var st local.Status
	if err := json.Unmarshal(body, &st); err != nil {
		return local.Status{}, fmt.Errorf("%s did not answer a swell local status: %w", u, err)
	}
	return st, nil
}

// showLocal prints swell local's status: st if it was read already, and
// with -w every statusPoll after.
func (f *statusFlags) showLocal(ctx context.Context, s streams, st *local.Status) int {
	out := f.newOutput(s.stdout, false)
	for {
		if st == nil {
			got, err := fetchLocal(ctx, f.addr)
			if err != nil {
				if ctx.Err() != nil {
					return 0 // stopped while following
				}
				fmt.Fprintf(s.stderr, "%s status: %v\n", prog, err)
				return 1
			}
			st = &got
		}
		var ok bool
		if st.Services, ok = only(f.names, st.Services, func(s local.ServiceStatus) (string, string) { return "", s.Name }); !ok && !f.watch {
			fmt.Fprintf(s.stderr, "%s status: no service named %s\n", prog, strings.Join(f.names, ", "))
			return 1
		}
		out.local(*st)
		if !f.watch {
			return 0
		}
		st = nil
		select {
		case <-ctx.Done():
			return 0
		case <-time.After(statusPoll):
		}
	}
}

// showCluster prints the status of the cluster cc finds.
func (f *statusFlags) showCluster(ctx context.Context, s streams, cc clientcmd.ClientConfig) int {
	rc, err := cc.ClientConfig()
	switch {
	case clientcmd.IsEmptyConfig(err):
		fmt.Fprintf(s.stderr, "%s status: %s\n", prog, noCluster)
		return 1
	case err != nil:
		fmt.Fprintf(s.stderr, "%s status: find the cluster: %v\n", prog, err)
		return 1
	}
	rc.UserAgent = "swell-status"
	ns := ""
	if !f.all {
		if ns, _, err = cc.Namespace(); err != nil {
			fmt.Fprintf(s.stderr, "%s status: the namespace of the context: %v\n", prog, err)
			return 1
		}
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		fmt.Fprintf(s.stderr, "%s status: Kubernetes client for %s: %v\n", prog, rc.Host, err)
		return 1
	}
	return f.showView(ctx, s, client, ns)
}

// showView prints the status of the cluster client reads, in namespace
// ns ("" for every one).
func (f *statusFlags) showView(ctx context.Context, s streams, client kubernetes.Interface, ns string) int {
	cfg := statusview.Config{Client: client, Namespace: ns}
	out := f.newOutput(s.stdout, ns == "")
	keep := func(v statusview.View) (statusview.View, bool) {
		var ok bool
		v.Services, ok = only(f.names, v.Services, func(s statusview.Service) (string, string) { return s.Namespace, s.Name })
		return v, ok
	}
	if f.watch {
		err := statusview.Watch(ctx, cfg, func(v statusview.View) {
			v, _ = keep(v)
			out.cluster(v)
		})
		if err != nil && ctx.Err() == nil {
			fmt.Fprintf(s.stderr, "%s status: %v\n", prog, err)
			return 1
		}
		return 0
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := statusview.Get(ctx, cfg)
	if err != nil {
		fmt.Fprintf(s.stderr, "%s status: %v\n", prog, err)
		return 1
	}
	v, ok := keep(v)
	if !ok {
		where := "in any namespace"
		if ns != "" {
			where = "in namespace " + ns
		}
		fmt.Fprintf(s.stderr, "%s status: no service named %s %s (a Deployment labelled %s=true)\n",
			prog, strings.Join(f.names, ", "), where, kube.LabelEnabled)
		return 1
	}
	out.cluster(v)
	return 0
}

// only keeps the services names asks for (all for none), and says whether
// any is left. A name matches a service's name, or its namespace/name.
func only[T any](names []string, list []T, id func(T) (namespace, name string)) ([]T, bool) {
	if len(names) == 0 {
		return list, true
	}
	keep := make([]T, 0, len(names))
	for _, x := range list {
		ns, name := id(x)
		for _, n := range names {
			if n == name || ns != "" && n == ns+"/"+name {
				keep = append(keep, x)
				break
			}
		}
	}
	return keep, len(keep) > 0
}

// statusOutput prints statuses in the format asked: once, or one after
// each change with -w.
type statusOutput struct {
	w          io.Writer
	format     string
	watch      bool
	namespaces bool
	events     int
	table      watchTable
	docs       int
	// What the last document showed, for -w -o json|yaml.
	lastLocal   map[string]local.ServiceStatus
	lastCluster map[string]statusview.Service
}

func (f *statusFlags) newOutput(w io.Writer, namespaces bool) *statusOutput {
	return &statusOutput{
		w: w, format: f.output, watch: f.watch, namespaces: namespaces, events: f.events,
		table:     watchTable{w: w, namespaces: namespaces},
		lastLocal: map[string]local.ServiceStatus{}, lastCluster: map[string]statusview.Service{},
	}
}

// localChange is one document of -w -o json|yaml on swell local.
type localChange struct {
	local.Status
	Removed []string `json:"removed,omitempty"`
}

// clusterChange is one document of -w -o json|yaml on a cluster: Removed
// holds namespace/name.
type clusterChange struct {
	statusview.View
	Removed []string `json:"removed,omitempty"`
}

func (o *statusOutput) local(st local.Status) {
	switch {
	case o.format == "table" && o.watch:
		o.table.print(localRows(st))
	case o.format == "table":
		printStatus(o.w, localRows(st), false, o.events)
	case o.watch:
		changed, gone := changes(o.lastLocal, st.Services, func(s local.ServiceStatus) string { return s.Name })
		if o.docs == 0 || len(changed) > 0 || len(gone) > 0 {
			st.Services = append([]local.ServiceStatus{}, changed...)
			o.doc(localChange{Status: st, Removed: gone})
		}
	default:
		o.doc(st)
	}
}

func (o *statusOutput) cluster(v statusview.View) {
	switch {
	case o.format == "table" && o.watch:
		o.table.print(clusterRows(v))
	case o.format == "table":
		printStatus(o.w, clusterRows(v), o.namespaces, o.events)
	case o.watch:
		changed, gone := changes(o.lastCluster, v.Services, func(s statusview.Service) string { return s.Namespace + "/" + s.Name })
		if o.docs == 0 || len(changed) > 0 || len(gone) > 0 {
			v.Services = append([]statusview.Service{}, changed...)
			o.doc(clusterChange{View: v, Removed: gone})
		}
	default:
		o.doc(v)
	}
}

// doc prints one JSON or YAML document: indented JSON once, one compact
// JSON document per line with -w; YAML documents apart by "---".
func (o *statusOutput) doc(v any) {
	defer func() { o.docs++ }()
	if o.format == "yaml" {
		b, _ := yaml.Marshal(v) // through JSON, which every figure of a status fits
		if o.docs > 0 {
			fmt.Fprintln(o.w, "---")
		}
		o.w.Write(b)
		return
	}
	enc := json.NewEncoder(o.w)
	if !o.watch {
		enc.SetIndent("", "  ")
	}
	enc.Encode(v)
}
