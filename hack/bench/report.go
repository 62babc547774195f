package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// section is one scenario's part of the report, in markdown.
type section struct {
	title string
	// text is markdown printed under the title: how the figures were taken.
	text string
	// header and rows make a table; rows may be empty.
	header []string
	rows   [][]string
	// notes are bullet points under the table: conditions worth knowing,
	// such as a rate the machine could not reach.
	notes []string
	// code is preformatted output (a profile, go test -bench) shown last.
	code string
}

func (s section) write(w io.Writer) {
	fmt.Fprintf(w, "## %s\n\n", s.title)
	if s.text != "" {
		fmt.Fprintf(w, "%s\n\n", strings.TrimSpace(s.text))
	}
	if len(s.rows) > 0 {
		fmt.Fprintf(w, "| %s |\n", strings.Join(s.header, " | "))
		fmt.Fprintf(w, "|%s\n", strings.Repeat("---|", len(s.header)))
		for _, r := range s.rows {
			fmt.Fprintf(w, "| %s |\n", strings.Join(r, " | "))
		}
		fmt.Fprintln(w)
	}
	for _, n := range s.notes {
		fmt.Fprintf(w, "- %s\n", n)
	}
	if len(s.notes) > 0 {
		fmt.Fprintln(w)
	}
	if s.code != "" {
		fmt.Fprintf(w, "```\n%s\n```\n\n", strings.TrimRight(s.code, "\n"))
	}
}

// writeReport writes the whole report: what ran where, then each section.
// loadBefore is the load average when the run began.
func writeReport(w io.Writer, command string, began time.Time, loadBefore string, sections []section) {
	fmt.Fprintf(w, "# Swell benchmarks\n\n")
	fmt.Fprintf(w, "- command: `%s`\n", command)
	fmt.Fprintf(w, "- date: %s (took %s)\n", began.UTC().Format("2006-01-02 15:04 MST"), time.Since(began).Round(time.Second))
	fmt.Fprintf(w, "- machine: %d CPUs, %s; Linux %s; %s\n", runtime.NumCPU(), cpuModel(), firstLine("/proc/sys/kernel/osrelease"), runtime.Version())
	fmt.Fprintf(w, "- load average (1, 5, 15 min): %s at the start, %s at the end\n\n", loadBefore, loadAverage())
	for _, s := range sections {
		s.write(w)
	}
}

// cpuModel is the first "model name" in /proc/cpuinfo.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if name, value, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(name) == "model name" {
			return strings.TrimSpace(value)
		}
	}
	return "unknown CPU"
}

// loadAverage is the machine's 1, 5 and 15 minute load averages: with the
// number of CPUs, how busy the machine was around the run.
func loadAverage() string {
	f := strings.Fields(firstLine("/proc/loadavg"))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], ", ")
}

// firstLine returns the first line of a small file, or "?" when it cannot
// be read.
func firstLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "?"
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(line)
}

// median of xs; the mean of the middle two for an even count. xs is not
// modified.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// met says whether a target was met, bold when it was not so that misses
// stand out in the table.
func met(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}
