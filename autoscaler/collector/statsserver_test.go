package collector

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/stats"
)

// statsServerEnv, set, makes the test binary a pod's stats endpoint in a
// process of its own, so that a benchmark's CPU time is the scraper's
// alone.
const statsServerEnv = "SWELL_COLLECTOR_STATS_SERVER"

// busyReport is what a busy pod's queue-proxy reports: version 3, its
// proxied load split among three activators, and its app measured.
var busyReport = stats.Report{
	End: t0, Period: time.Second, Uptime: time.Hour,
	Concurrency: 12.5, ProxiedConcurrency: 4.5, Requests: 1250, ProxiedRequests: 450,
	Attributed: true,
	ByActivator: []stats.ActivatorShare{
		{Activator: stats.ActivatorKey("activator-0"), Concurrency: 1.5, Requests: 150},
		{Activator: stats.ActivatorKey("activator-1"), Concurrency: 1.5, Requests: 150},
		{Activator: stats.ActivatorKey("activator-2"), Concurrency: 1.5, Requests: 150},
	},
	App: stats.AppUsage{CPU: 0.75, HasCPU: true, Memory: 300 << 20, HasMemory: true, Gauge: 7, GaugeKey: stats.GaugeKey("jobs_waiting"), HasGauge: true},
}

// statsServerPods is how many pods a stats server is: each a port of its
// own, all serving the same report.
const statsServerPods = 256

// serveStats serves busyReport as a queue-proxy's metrics port does
// (queueproxy/stats.go: net/http, content negotiation, Vary and
// Cache-Control) on statsServerPods loopback ports, which it prints one a
// line, until its standard input closes.
func serveStats() int {
	v1, v2, v3 := busyReport.AppendBinary(nil), busyReport.AppendBinaryV2(nil), busyReport.AppendBinaryV3(nil)
	mux := http.NewServeMux()
	mux.HandleFunc(network.StatsPath, func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Vary", "Accept")
		h.Set("Cache-Control", "no-store")
		switch accept := r.Header.Get("Accept"); {
		case strings.Contains(accept, stats.ContentTypeV3):
			h.Set("Content-Type", stats.ContentTypeV3)
			w.Write(v3)
		case strings.Contains(accept, stats.ContentTypeV2):
			h.Set("Content-Type", stats.ContentTypeV2)
			w.Write(v2)
		default:
			h.Set("Content-Type", stats.ContentType)
			w.Write(v1)
		}
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 10 * time.Minute}
	for range statsServerPods {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		go srv.Serve(l)
		fmt.Println(l.Addr())
	}
	io.Copy(io.Discard, os.Stdin)
	srv.Close()
	return 0
}

// startStatsServer starts the test binary as a stats server (serveStats)
// and returns its pods' addresses; it stops when tb ends.
func startStatsServer(tb testing.TB) []string {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), statsServerEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	out := bufio.NewReader(stdout)
	addrs := make([]string, statsServerPods)
	for i := range addrs {
		line, err := out.ReadString('\n')
		if err != nil {
			tb.Fatalf("stats server: %v", err)
		}
		addrs[i] = strings.TrimSpace(line)
	}
	return addrs
}
