// Command swell is Swell's command-line tool. Each subcommand lives in its
// own file and is listed in the commands table below; `swell help` lists
// them.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/term"
)

// streams is where a command writes.
type streams struct {
	stdout, stderr io.Writer
	// stderrTTY is set when stderr is a terminal, so progress can be
	// rewritten in place.
	stderrTTY bool
}

// command is one subcommand. run gets the arguments after the command's
// name and returns the process's exit code: 0 success, 1 failure, 2 a usage
// error (a bad flag, value or combination).
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, s streams) int
}

// commands lists the subcommands in the order `swell help` shows them. To
// add one, write its run function in its own file and add a line here.
var commands = []command{
	{name: "local", summary: "run the data plane on this machine, replicas as local processes (--demo: the example app)", run: runLocal},
	{name: "status", summary: "show what swell local or a cluster is doing: replicas, load, panic mode, queued requests, decisions", run: runStatus},
	{name: "load", summary: "send HTTP load: a fixed rate, a trace replay or a closed loop", run: runLoad},
	{name: "sim", summary: "simulate autoscaling on a trace or generated traffic, or replay decider inputs", run: runSim},
	{name: "hello", summary: "serve the example app (what swell local --demo runs)", run: runHello},
	{name: "queue-proxy", summary: "run the queue-proxy sidecar (what swell local runs for each replica)", run: runQueueProxy},
	{name: "inject", summary: "inject the queue-proxy into opted-in workloads of Kubernetes manifests, offline", run: runInject},
	{name: "import", summary: "convert Knative Services into Deployments and Services that run on Swell", run: runImport},
}

// prog is the name Swell was run by, as usage, help and errors say it:
// "kubectl swell" when kubectl runs the binary as its plugin kubectl-swell
// (`kubectl swell status`), else "swell".
var prog = "swell"

// progName is prog for a binary run as arg0.
func progName(arg0 string) string {
	if strings.TrimSuffix(filepath.Base(arg0), ".exe") == "kubectl-swell" {
		return "kubectl swell"
	}
	return "swell"
}

func main() {
	prog = progName(os.Args[0])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// The first signal asks the command to wrap up; restoring the
		// default handlers lets a second one end the process at once.
		<-ctx.Done()
		stop()
	}()
	s := streams{stdout: os.Stdout, stderr: os.Stderr, stderrTTY: term.IsTerminal(int(os.Stderr.Fd()))}
	os.Exit(dispatch(ctx, os.Args[1:], s))
}

// dispatch runs the command args name and returns the exit code.
func dispatch(ctx context.Context, args []string, s streams) int {
	if len(args) == 0 {
		usage(s.stderr)
		return 2
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			if c, ok := lookup(args[1]); ok {
				return c.run(ctx, []string{"--help"}, s)
			}
			fmt.Fprintf(s.stderr, "%s help: unknown command %q; commands are %s\n", prog, args[1], names())
			return 2
		}
		usage(s.stdout)
		return 0
	}
	c, ok := lookup(name)
	if !ok {
		fmt.Fprintf(s.stderr, "%s: unknown command %q; commands are %s (see %[1]s help)\n", prog, name, names())
		return 2
	}
	return c.run(ctx, args[1:], s)
}

func lookup(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func names() string {
	n := make([]string, len(commands))
	for i, c := range commands {
		n[i] = c.name
	}
	return strings.Join(n, ", ")
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: %s COMMAND [flags] [arguments]\n", prog)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	width := 0
	for _, c := range commands {
		width = max(width, len(c.name))
	}
	for _, c := range commands {
		fmt.Fprintf(w, "  %-*s  %s\n", width, c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Run '%s help COMMAND' (or '%[1]s COMMAND --help') for a command's flags.\n", prog)
}

// printFlags lists fs's flags the way the help text names them: --long, -H.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		dash := "--"
		if len(f.Name) == 1 {
			dash = "-"
		}
		typ, usage := flag.UnquoteUsage(f)
		if typ != "" {
			typ = " " + typ
		}
		def := ""
		switch f.DefValue {
		case "", "0", "0s", "false", "[]":
		default:
			def = fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(w, "  %s%s%s\n        %s%s\n", dash, f.Name, typ, usage, def)
	})
}
