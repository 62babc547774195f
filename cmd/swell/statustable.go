package main

import (
	"bytes"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/swell-run/swell/kube/statusview"
	"github.com/swell-run/swell/local"
)

// statusRow is one service as `swell status` prints it. swell local's
// status and a cluster's both become rows, and one function prints them
// (statusTable), so that a laptop and a cluster show the same table.
type statusRow struct {
	// Namespace is empty on swell local.
	Namespace string
	Name      string
	Ready     int
	Desired   int
	// Route is "activator" or "pods"; empty when not known.
	Route string
	// Decided says the autoscaler has decided for the service, so that
	// its panic mode is known.
	Decided      bool
	PanicMode    bool
	Metric       string
	TargetPerPod float64
	// Loads says the load columns are known.
	Loads               bool
	Load, Stable, Panic float64
	ExcessBurstCapacity float64
	Queued              int
	Reason              string
	// Events are oldest first.
	Events []statusEvent
}

// statusEvent is one line under a service's table row.
type statusEvent struct {
	Time time.Time
	Text string
}

// key names the row among others: namespace/name.
func (r statusRow) key() string { return r.Namespace + "/" + r.Name }

// localRows are swell local's services. swell local decides in-process,
// so every column is known from the start.
func localRows(st local.Status) []statusRow {
	rows := make([]statusRow, 0, len(st.Services))
	for _, s := range st.Services {
		r := statusRow{
			Name: s.Name, Ready: s.Ready, Desired: s.Desired, Route: s.Route,
			Decided: true, PanicMode: s.PanicMode, Metric: s.Metric, TargetPerPod: s.TargetPerPod,
			Loads: true, Load: s.Load, Stable: s.Stable, Panic: s.Panic,
			ExcessBurstCapacity: s.ExcessBurstCapacity, Queued: s.Queued, Reason: s.Reason,
		}
		for _, e := range s.Events {
			r.Events = append(r.Events, statusEvent{Time: e.Time, Text: e.Text})
		}
		rows = append(rows, r)
	}
	return rows
}

// clusterRows are a cluster's services.
func clusterRows(v statusview.View) []statusRow {
	rows := make([]statusRow, 0, len(v.Services))
	for _, s := range v.Services {
		r := statusRow{
			Namespace: s.Namespace, Name: s.Name, Ready: s.Ready, Desired: s.Desired, Route: s.Route,
			Decided: s.Decided, PanicMode: s.PanicMode, Metric: s.Metric, TargetPerPod: s.TargetPerPod,
			Loads: !s.LoadsAsOf.IsZero(), Load: s.Load, Stable: s.Stable, Panic: s.Panic,
			ExcessBurstCapacity: s.ExcessBurstCapacity, Queued: s.Queued, Reason: s.Reason,
		}
		for _, e := range s.Events {
			text := e.Text
			if e.Count > 1 {
				text += fmt.Sprintf(" (x%d)", e.Count)
			}
			r.Events = append(r.Events, statusEvent{Time: e.Time, Text: text})
		}
		rows = append(rows, r)
	}
	return rows
}

// statusColumns are the table's columns after NAMESPACE.
const statusColumns = "SERVICE\tREADY\tDESIRED\tROUTE\tMETRIC\tLOAD\tSTABLE\tPANIC\tTARGET/POD\tPANIC MODE\tBURST CAPACITY\tQUEUED"

// statusTable formats the header and one line per row, aligned together.
// namespaces adds a leading NAMESPACE column, as kubectl's -A does. A
// column that is not known yet reads "-".
func statusTable(rows []statusRow, namespaces bool) (header string, lines []string) {
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	if namespaces {
		fmt.Fprint(tw, "NAMESPACE\t")
	}
	fmt.Fprintln(tw, statusColumns)
	for _, r := range rows {
		if namespaces {
			fmt.Fprintf(tw, "%s\t", r.Namespace)
		}
		metric, target := "-", "-"
		if r.Metric != "" {
			metric, target = r.Metric, strconv.FormatFloat(r.TargetPerPod, 'g', 4, 64)
		}
		panicMode := "-"
		if r.Decided {
			panicMode = "no"
			if r.PanicMode {
				panicMode = "yes"
			}
		}
		load, stable, pnc, capacity, queued := "-", "-", "-", "-", "-"
		if r.Loads {
			load, stable, pnc = fmt.Sprintf("%.1f", r.Load), fmt.Sprintf("%.1f", r.Stable), fmt.Sprintf("%.1f", r.Panic)
			capacity, queued = burst(r.ExcessBurstCapacity), strconv.Itoa(r.Queued)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			r.Name, r.Ready, r.Desired, orDash(r.Route), metric, load, stable, pnc, target, panicMode, capacity, queued)
	}
	tw.Flush()
	all := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	return all[0], all[1:]
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printStatus writes rows as a table, then, for each row with a reason or
// events, the reason and its last events events (none when events is 0).
func printStatus(w io.Writer, rows []statusRow, namespaces bool, events int) {
	header, lines := statusTable(rows, namespaces)
	fmt.Fprintln(w, header)
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	if events == 0 {
		return
	}
	for _, r := range rows {
		list := r.Events
		if len(list) > events {
			list = list[len(list)-events:]
		}
		if len(list) == 0 && r.Reason == "" {
			continue
		}
		name := r.Name
		if namespaces {
			name = r.key()
		}
		if r.Reason != "" {
			name += " (now: " + r.Reason + ")"
		}
		fmt.Fprintf(w, "\n%s\n", name)
		for _, e := range list {
			fmt.Fprintf(w, "  %s  %s\n", e.Time.Local().Format("15:04:05"), e.Text)
		}
	}
}

// burst formats an excess burst capacity: the activator stays in the path
// while it is negative. ±math.MaxFloat64 stands for ±Inf in the JSON both
// swell local and the status annotation write.
func burst(v float64) string {
	switch {
	case v <= -1e300:
		return "-inf"
	case v >= 1e300:
		return "inf"
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

// watchTable prints tables as `kubectl get -w` does: the header and every
// row first, then only the rows that changed. Rows are aligned with those
// of their own table, so a column that widens later shifts.
type watchTable struct {
	w          io.Writer
	namespaces bool
	started    bool
	// printed is each row's line as last printed.
	printed map[string]string
}

func (t *watchTable) print(rows []statusRow) {
	header, lines := statusTable(rows, t.namespaces)
	if !t.started {
		fmt.Fprintln(t.w, header)
		t.started = true
	}
	printed := make(map[string]string, len(rows))
	for i, r := range rows {
		k := r.key()
		if t.printed[k] != lines[i] {
			fmt.Fprintln(t.w, lines[i])
		}
		printed[k] = lines[i]
	}
	t.printed = printed
}

// changes returns the items of now that are new or differ from the last
// call's, and the keys of those gone since; last holds the items by key
// between calls.
func changes[T any](last map[string]T, now []T, key func(T) string) (changed []T, gone []string) {
	seen := make(map[string]bool, len(now))
	for _, x := range now {
		k := key(x)
		seen[k] = true
		if old, ok := last[k]; !ok || !reflect.DeepEqual(old, x) {
			changed = append(changed, x)
		}
		last[k] = x
	}
	for k := range last {
		if !seen[k] {
			gone = append(gone, k)
			delete(last, k)
		}
	}
	slices.Sort(gone)
	return changed, gone
}
