package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/swell-run/swell/local"
)

const statusUsage = `Usage: swell status [flags] [SERVICE...]

Show what swell local is doing, per service: ready and desired replicas,
where traffic goes, the observed load (last second, stable and panic
windows), panic mode, excess burst capacity, requests queued at the
activator, and the last scaling events. -o json prints the whole status
for scripts (docs/local.md describes its fields).

Flags:
`

func runStatus(ctx context.Context, args []string, s streams) int {
	fs := flag.NewFlagSet("swell status", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	addr := fs.String("addr", "127.0.0.1:"+strconv.Itoa(local.DefaultAdminPort), "swell local's admin `address`")
	output := fs.String("o", "table", "output `format`: table or json")
	events := fs.Int("events", 5, "show the last `N` events of each service in the table")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(s.stdout, statusUsage)
			printFlags(s.stdout, fs)
			return 0
		}
		fmt.Fprintf(s.stderr, "swell status: %v (see swell status --help)\n", err)
		return 2
	}
	if *output != "table" && *output != "json" {
		fmt.Fprintf(s.stderr, "swell status: -o %q; accepted: table or json\n", *output)
		return 2
	}
	if *events < 0 {
		fmt.Fprintf(s.stderr, "swell status: --events %d; accepted: a count ≥ 0\n", *events)
		return 2
	}

	base := *addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+local.StatusPath, nil)
	if err != nil {
		fmt.Fprintf(s.stderr, "swell status: --addr %q: %v\n", *addr, err)
		return 2
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(s.stderr, "swell status: is swell local running? %v\n", err)
		return 1
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 64<<20))
	if err != nil || res.StatusCode != http.StatusOK {
		fmt.Fprintf(s.stderr, "swell status: %s answered %s: %v %s\n", req.URL, res.Status, err, strings.TrimSpace(string(body)))
		return 1
	}
	var st local.Status
	if err := json.Unmarshal(body, &st); err != nil {
		fmt.Fprintf(s.stderr, "swell status: %s did not answer a swell local status: %v\n", req.URL, err)
		return 1
	}
	if want := fs.Args(); len(want) > 0 {
		keep := st.Services[:0]
		for _, svc := range st.Services {
			for _, w := range want {
				if svc.Name == w {
					keep = append(keep, svc)
				}
			}
		}
		if len(keep) == 0 {
			fmt.Fprintf(s.stderr, "swell status: no service named %s\n", strings.Join(want, ", "))
			return 1
		}
		st.Services = keep
	}
	if *output == "json" {
		enc := json.NewEncoder(s.stdout)
		enc.SetIndent("", "  ")
		enc.Encode(st)
		return 0
	}
	printStatus(s.stdout, st, *events)
	return 0
}

// printStatus writes st as a table, then each service's last events.
func printStatus(w io.Writer, st local.Status, events int) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tREADY\tDESIRED\tROUTE\tMETRIC\tLOAD\tSTABLE\tPANIC\tTARGET/POD\tPANIC MODE\tBURST CAPACITY\tQUEUED")
	for _, s := range st.Services {
		panicMode := "no"
		if s.PanicMode {
			panicMode = "yes"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%.1f\t%.1f\t%.1f\t%.4g\t%s\t%s\t%d\n",
			s.Name, s.Ready, s.Desired, s.Route, s.Metric, s.Load, s.Stable, s.Panic, s.TargetPerPod,
			panicMode, burst(s.ExcessBurstCapacity), s.Queued)
	}
	tw.Flush()
	if events == 0 {
		return
	}
	for _, s := range st.Services {
		list := s.Events
		if len(list) > events {
			list = list[len(list)-events:]
		}
		if len(list) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s (now: %s)\n", s.Name, s.Reason)
		for _, e := range list {
			fmt.Fprintf(w, "  %s  %s\n", e.Time.Local().Format("15:04:05"), e.Text)
		}
	}
}

// burst formats an excess burst capacity: the activator stays in the path
// while it is negative.
func burst(v float64) string {
	switch {
	case v <= -1e300:
		return "-inf"
	case v >= 1e300:
		return "inf"
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}
