// Command queue-proxy is the sidecar in front of the user container of
// every Swell pod. It is configured by environment variables or the
// equivalent flags (run with --help, or see docs/queue-proxy.md).
//
// Exit codes: 0 after a graceful drain, 1 on a runtime failure, 2 on bad
// configuration.
package main

import (
	"os"

	"github.com/swell-run/swell/queueproxy"
)

func main() {
	os.Exit(queueproxy.Main(os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr))
}
