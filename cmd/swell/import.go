package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/swell-run/swell/kube/knative"
	"github.com/swell-run/swell/pkg/autoscaling"
)

const importUsage = `Usage: swell import [-o yaml|json] [--strict] [--defaults FILE] [FILE|DIR|-]...

Convert Knative Services (serving.knative.dev/v1) into what runs the same
app on Swell: for each, a Deployment opted into Swell, with the Service's
settings as Swell's annotations, and a Service in front of it, port 80 to
the app's port. Every other document is written back unchanged, so a whole
app's directory converts. The input is YAML (several documents) or JSON
(an object or a v1 List), from the files given, the .yaml, .yml and .json
files of the directories given, or stdin when none is given or for -.

The manifests go to stdout. What has no counterpart on Swell (traffic
splits, tags, exposure outside the cluster, ...) is named on stderr, one
warning a line. Exit code 0: converted, warnings or not; 1: an input could
not be converted, every problem listed and nothing written (or, with
--strict, there were warnings); 2: a usage error. docs/knative.md has the
mapping.

Flags:
`

func runImport(_ context.Context, args []string, s streams) int {
	fs := flag.NewFlagSet("swell import", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	format := fs.String("o", "yaml", "output `format`: yaml or json (a v1 List)")
	strict := fs.Bool("strict", false, "fail, writing nothing, when there are warnings")
	defaults := fs.String("defaults", "", "the cluster's swell-defaults ConfigMap, as a YAML or JSON `file`, to validate against instead of the built-in defaults")
	// Flags may follow the arguments: swell import app.yaml -o json.
	var paths []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprint(s.stdout, importUsage)
				printFlags(s.stdout, fs)
				return 0
			}
			fmt.Fprintf(s.stderr, "swell import: %v (see swell import --help)\n", err)
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		paths = append(paths, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if *format != "yaml" && *format != "json" {
		fmt.Fprintf(s.stderr, "swell import: -o %q: accepted: yaml or json\n", *format)
		return 2
	}
	opts := knative.Options{Defaults: autoscaling.DefaultDefaults()}
	if *defaults != "" {
		d, err := readDefaults(*defaults)
		if err != nil {
			fmt.Fprintf(s.stderr, "swell import: --defaults %s: %v\n", *defaults, err)
			return 2
		}
		opts.Defaults = d
	}

	inputs, errs := readInputs(paths)
	res, err := knative.Import(inputs, opts)
	for _, w := range res.Warnings {
		fmt.Fprintf(s.stderr, "swell import: warning: %s\n", w)
	}
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		for _, line := range strings.Split(errors.Join(errs...).Error(), "\n") {
			fmt.Fprintf(s.stderr, "swell import: %s\n", line)
		}
		return 1
	}
	if *strict && len(res.Warnings) > 0 {
		fmt.Fprintf(s.stderr, "swell import: --strict: %d warnings; nothing written\n", len(res.Warnings))
		return 1
	}
	var out []byte
	if *format == "json" {
		out, err = res.JSON()
	} else {
		out, err = res.YAML()
	}
	if err == nil {
		_, err = s.stdout.Write(out)
	}
	if err != nil {
		fmt.Fprintf(s.stderr, "swell import: %v\n", err)
		return 1
	}
	return 0
}

// readInputs reads the files and directories named, or stdin for none or
// "-", and returns every one it could and a problem for each it could not.
func readInputs(paths []string) ([]knative.Input, []error) {
	if len(paths) == 0 {
		paths = []string{"-"}
	}
	var inputs []knative.Input
	var errs []error
	read := func(path string) {
		b, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, err)
			return
		}
		inputs = append(inputs, knative.Input{Name: path, Data: b})
	}
	for _, p := range paths {
		if p == "-" {
			b, err := io.ReadAll(os.Stdin)
			if err != nil {
				errs = append(errs, fmt.Errorf("stdin: %w", err))
				continue
			}
			inputs = append(inputs, knative.Input{Name: "stdin", Data: b})
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			// Not a directory (or not there): read it as a file, which
			// says what is wrong with it.
			read(p)
			continue
		}
		n := 0
		for _, e := range entries {
			if !e.IsDir() && slices.Contains([]string{".yaml", ".yml", ".json"}, filepath.Ext(e.Name())) {
				read(filepath.Join(p, e.Name()))
				n++
			}
		}
		if n == 0 {
			errs = append(errs, fmt.Errorf("%s: no .yaml, .yml or .json file in the directory", p))
		}
	}
	return inputs, errs
}

// readDefaults reads the cluster-wide defaults from a ConfigMap manifest,
// as the autoscaler reads its swell-defaults.
func readDefaults(path string) (autoscaling.Defaults, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return autoscaling.Defaults{}, err
	}
	var cm struct {
		Kind string
		Data map[string]string
	}
	if err := yaml.Unmarshal(b, &cm); err != nil {
		return autoscaling.Defaults{}, fmt.Errorf("not a ConfigMap: %w", err)
	}
	if cm.Kind != "ConfigMap" {
		return autoscaling.Defaults{}, fmt.Errorf("kind %q; accepted: a ConfigMap, such as swell-defaults", cm.Kind)
	}
	return autoscaling.ParseDefaults(cm.Data)
}
