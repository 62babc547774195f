package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// profileTop is how many entries of a profile the report shows.
const profileTop = 25

// profileQueueProxy captures a CPU profile of the queue-proxy during one
// more fixed-rate run through it, outside the measured rounds so that the
// profiler's own cost skews no figure. It uses the queue-proxy's pprof
// endpoint if it has one, else perf, else it says why there is none.
func profileQueueProxy(e *env, p *pod, swell, url string) section {
	s := section{title: "Queue-proxy CPU profile"}
	dir := e.opts.profileDir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		s.text = fmt.Sprintf("Skipped: %v", err)
		return s
	}
	l := load{Rate: fixedRate, Duration: e.opts.duration}
	secs := int(l.Duration.Seconds())
	if secs < 1 {
		secs = 1
	}

	var top string
	var err error
	if base, ok := pprofEndpoint(p); ok {
		top, err = profileWithPprof(base, e.bins[qpPkg], filepath.Join(dir, "queue-proxy.pprof"), secs, func() error {
			_, err := sendLoad(swell, url, l)
			return err
		})
		s.text = fmt.Sprintf("`go tool pprof -top` of %s/debug/pprof/profile during %s at %d req/s; the profile is in %s.",
			base, l.Duration, fixedRate, dir)
	} else if _, lookErr := exec.LookPath("perf"); lookErr == nil {
		top, err = profileWithPerf(p.qp.pid(), filepath.Join(dir, "queue-proxy.perf.data"), secs, func() error {
			_, err := sendLoad(swell, url, l)
			return err
		})
		s.text = fmt.Sprintf("The queue-proxy serves no pprof endpoint, so `perf record -g` sampled it during %s at %d req/s; "+
			"below, the top of `perf report`. The data and the full report are in %s.",
			l.Duration, fixedRate, dir)
	} else {
		s.text = "Skipped: the queue-proxy serves no pprof endpoint and perf is not installed."
		return s
	}
	if err != nil {
		s.text = fmt.Sprintf("Failed: %v", err)
		return s
	}
	s.code = top
	return s
}

// pprofEndpoint returns the base URL of the queue-proxy's pprof handlers,
// if it serves them on its metrics port.
func pprofEndpoint(p *pod) (string, bool) {
	resp, err := http.Get(p.metricsURL + "/debug/pprof/")
	if err != nil {
		return "", false
	}
	resp.Body.Close()
	return p.metricsURL, resp.StatusCode == http.StatusOK
}

// profileWithPprof fetches a CPU profile of secs seconds from base while
// work runs, saves it to file and returns its top entries.
func profileWithPprof(base, bin, file string, secs int, work func() error) (string, error) {
	got := make(chan error, 1)
	go func() {
		resp, err := http.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, secs))
		if err != nil {
			got <- err
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(file)
		if err == nil {
			_, err = io.Copy(f, resp.Body)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		got <- err
	}()
	werr := work()
	if err := <-got; err != nil {
		return "", fmt.Errorf("pprof profile: %w", err)
	}
	if werr != nil {
		return "", werr
	}
	out, err := exec.Command("go", "tool", "pprof", "-top", fmt.Sprintf("-nodecount=%d", profileTop), bin, file).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go tool pprof: %w\n%s", err, out)
	}
	return string(out), nil
}

// profileWithPerf samples pid with perf for secs seconds while work runs,
// writes the data to file and the full report next to it, and returns the
// report's top entries.
func profileWithPerf(pid int, file string, secs int, work func() error) (string, error) {
	rec := exec.Command("perf", "record", "-g", "-o", file, "-p", fmt.Sprint(pid), "--", "sleep", fmt.Sprint(secs))
	var recOut bytes.Buffer
	rec.Stdout, rec.Stderr = &recOut, &recOut
	if err := rec.Start(); err != nil {
		return "", fmt.Errorf("perf record: %w", err)
	}
	// perf attaches within milliseconds: the profile misses only the
	// run's first moments.
	werr := work()
	if err := rec.Wait(); err != nil {
		return "", fmt.Errorf("perf record: %w\n%s", err, recOut.String())
	}
	if werr != nil {
		return "", werr
	}
	// Three views: kernel vs user time; Go functions by cumulative share
	// (children: the function and all it calls, kernel included), which
	// reads like pprof -top -cum; and the hottest symbols by self time.
	views := []struct {
		title string
		args  []string
		only  string // keep only lines containing this
		n     int
	}{
		{"Samples by object (self)", []string{"--no-children", "--sort", "dso", "-F", "overhead,dso"}, "", 5},
		{"Go functions, cumulative (children, self)", []string{"--children", "-F", "overhead_children,overhead,sym"}, "[.]", profileTop},
		{"Hottest symbols (self)", []string{"--no-children", "-F", "overhead,sym"}, "", 15},
	}
	var top, full strings.Builder
	for _, v := range views {
		args := append([]string{"report", "-i", file, "--stdio", "-g", "none"}, v.args...)
		out, err := exec.Command("perf", args...).Output()
		if err != nil {
			return "", fmt.Errorf("perf %s: %w", strings.Join(args, " "), err)
		}
		fmt.Fprintf(&full, "## perf %s\n%s\n", strings.Join(args, " "), out)
		fmt.Fprintf(&top, "%s:\n", v.title)
		n := 0
		for line := range strings.SplitSeq(string(out), "\n") {
			line = strings.TrimRight(line, " ")
			if line == "" || strings.HasPrefix(line, "#") || !strings.Contains(line, v.only) {
				continue
			}
			fmt.Fprintf(&top, "%s\n", line)
			if n++; n == v.n {
				break
			}
		}
		top.WriteString("\n")
	}
	if err := os.WriteFile(strings.TrimSuffix(file, ".data")+".txt", []byte(full.String()), 0o644); err != nil {
		return "", err
	}
	return top.String(), nil
}
